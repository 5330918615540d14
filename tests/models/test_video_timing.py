"""Every video reaches the model with its real timing, through the one encode path that likelihood
and generation share (docs/backend.md, Architectures).

Expected values are computed here from the frame numbers and frame rates, not by the suite's code.
EgoPlan-Val's released sample 115 (its frame numbers: the ``sample_115`` fixture) and a record of
our own get the same assertions.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest
import torch
from lmms_eval.api.instance import Instance

from lmms_egoplan.core import media
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.demo.kit.checkpoints import VIDEO_ARCHITECTURES
from lmms_egoplan.demo.kit.media import index_image, write_frame_folder, write_video
from lmms_egoplan.egointent import task as egointent
from lmms_egoplan.egointent.data import load_samples
from lmms_egoplan.egointent.protocol import EgoIntentSettings
from lmms_egoplan.egoplan import data as egoplan_data
from lmms_egoplan.egoplan import settings as egoplan_settings
from lmms_egoplan.egoplan import task as egoplan
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from lmms_egoplan.models.visuals import VisualLimits, prepare_visuals

TOKENS_PER_SECOND = 2  # the tiny Qwen2.5-VL's vision_config.tokens_per_second, as the released checkpoints'
TEMPORAL_PATCH = 2  # frames per temporal patch of the Qwen-VL video processors
TASK, SPLIT = "timing", "test"

# A record of our own in the release's shape: an EPIC-KITCHENS-100 extension video (P03_105: 50 fps),
# the first action at frame 400, the observation at frame 1540.
SYNTHETIC_RECORD = {
    "sample_id": 9001, "video_source": "EpicKitchens", "video_id": "P03_105", "task_goal": "wash a pan",
    "question": "Considering the progress shown in the video and my current observation in the last frame, "
                "what action should I take next in order to wash a pan?",
    "choice_a": "rinse pan", "choice_b": "take sponge", "choice_c": "open tap", "choice_d": "dry pan",
    "current_observation_frame": 1540,
    "task_progress_metadata": [{"narration_text": "take pan", "start_frame": 400, "stop_frame": 700},
                               {"narration_text": "open tap", "start_frame": 820, "stop_frame": 1300}],
}
EPIC_RATES = {"P03_105": 50.0, "P01_13": 60000 / 1001}  # EPIC_100_video_info.csv


def egoplan_doc(record: dict, root: Path) -> dict:
    """The doc the task builds for ``record``, its EPIC frames written where the task reads them."""
    numbers = egoplan_data.official_clip(record, 8)
    write_frame_folder(egoplan_data.epic_frame_folder(root / "epic", record["video_id"]), numbers, size=(48, 40))
    annotation = root / "EgoPlan_test.json"
    annotation.write_text(json.dumps([record]))
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="timing",
                                metadata={"annotation_file": str(annotation)}, env_prefix="EGOPLAN",
                                environ={"EGOPLAN_EPIC_FRAMES_ROOT": str(root / "epic")})
    [doc] = egoplan_data.load_samples(settings, labelled=False).docs
    return doc


def official_times(record: dict) -> list[float]:
    """Seconds of the official clip's frames from the first action's start: frame numbers / the video's rate."""
    numbers = egoplan_data.official_clip(record, 8)
    return [(number - numbers[0]) / EPIC_RATES[record["video_id"]] for number in numbers]


def requests_for(model: EgoPlanHF, doc: dict, doc_to_visual, context: str) -> tuple[list[Instance], list[Instance]]:
    """The doc's likelihood requests (two candidates) and its generation request."""
    model.task_dict = {TASK: {SPLIT: [doc]}}
    scored = [Instance(request_type="loglikelihood", idx=i,
                       arguments=(context, f" {answer}", doc_to_visual, 0, TASK, SPLIT),
                       metadata={"task": TASK, "doc_id": 0, "repeats": 1})
              for i, answer in enumerate(["rinse pan", "take sponge"])]
    generated = [Instance(request_type="generate_until", idx=0,
                          arguments=(context, {"max_new_tokens": 2}, doc_to_visual, 0, TASK, SPLIT),
                          metadata={"task": TASK, "doc_id": 0, "repeats": 1})]
    return scored, generated


@pytest.fixture(scope="module")
def backend(tiny_model):
    loaded = {}

    def get(arch: str) -> EgoPlanHF:
        if arch not in loaded:
            loaded[arch] = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32")
        return loaded[arch]

    return get


def temporal_positions_of_both_paths(model: EgoPlanHF, doc: dict, doc_to_visual, monkeypatch) -> list[list[int]]:
    """The temporal position ids Qwen2.5-VL gives the video's temporal patches (from the first), as
    its get_rope_index computes them, in the likelihood path (on the host, before the prefill) and in the
    generation path (in its forward pass)."""
    computed = []
    rope_index = model.model.model.get_rope_index

    @functools.wraps(rope_index)  # the likelihood path passes what the signature names
    def recording(input_ids, mm_token_type_ids, *args, **kwargs):
        positions, deltas = rope_index(input_ids, mm_token_type_ids, *args, **kwargs)
        temporal = positions[0, 0][input_ids[0] == model.model.config.video_token_id].tolist()
        per_patch = len(temporal) // int(kwargs["video_grid_thw"][0, 0])  # a patch's tokens share its position
        computed.append([position - temporal[0] for position in temporal[::per_patch]])
        return positions, deltas

    monkeypatch.setattr(model.model.model, "get_rope_index", recording)
    scored, generated = requests_for(model, doc, doc_to_visual, "What next?")
    model.loglikelihood(scored)
    paths = [computed[0]]
    computed.clear()
    model.generate_until(generated)
    return [*paths, computed[0]]


def rendered_timestamps_of_both_paths(model: EgoPlanHF, doc: dict, doc_to_visual, monkeypatch) -> list[list[str]]:
    """The ``<x seconds>`` Qwen3-VL's processor writes before each temporal patch, in the prompt of
    the likelihood path and of the generation path."""
    prompts = []
    encode = model._encode

    def recording(texts, visuals, where):
        inputs = encode(texts, visuals, where)
        prompts.append(model.tokenizer.decode(inputs["input_ids"][0]))
        return inputs

    monkeypatch.setattr(model, "_encode", recording)
    scored, generated = requests_for(model, doc, doc_to_visual, "What next?")
    model.loglikelihood(scored)
    model.generate_until(generated)
    return [re.findall(r"<([0-9.]+) seconds>", prompt) for prompt in prompts]


def expected_patch_positions(times: list[float]) -> list[int]:
    """Qwen2.5-VL's temporal position of each patch of 2 frames sampled at ``times``: the patch's
    start in seconds (the clip's rate between its first and last frame: M-RoPE takes one interval
    per video) times tokens_per_second, truncated as the model does."""
    seconds_per_patch = TEMPORAL_PATCH * (times[-1] - times[0]) / (len(times) - 1)
    return [int(patch * seconds_per_patch * TOKENS_PER_SECOND) for patch in range(len(times) // TEMPORAL_PATCH)]


def check_egoplan_clip_timing(record: dict, tmp_path: Path, backend, monkeypatch) -> None:
    doc = egoplan_doc(record, tmp_path)
    times = official_times(record)
    qwen25 = backend("qwen2_5_vl")
    for positions in temporal_positions_of_both_paths(qwen25, doc, egoplan.doc_to_visual, monkeypatch):
        assert positions == expected_patch_positions(times)
        assert len(set(positions)) == len(positions) and positions == sorted(positions)  # distinct, increasing
        for patch, position in enumerate(positions):  # each patch at its first frame's real time
            assert abs(position - times[TEMPORAL_PATCH * patch] * TOKENS_PER_SECOND) < 1
    monkeypatch.undo()
    qwen3 = backend("qwen3_vl")
    patch_seconds = [(times[i] + times[i + 1]) / 2 for i in range(0, len(times), TEMPORAL_PATCH)]
    for rendered in rendered_timestamps_of_both_paths(qwen3, doc, egoplan.doc_to_visual, monkeypatch):
        assert rendered == [f"{seconds:.1f}" for seconds in patch_seconds]


def test_an_egoplan_clip_reaches_qwen_models_with_its_frames_real_times(tmp_path, backend, monkeypatch):
    """Our record: 8 frames over 22.8 s at 50 fps; positions [0, 13, 26, 39] (24-fps fallback: [0, 0, 0, 0])."""
    assert official_times(SYNTHETIC_RECORD)[-1] == pytest.approx(22.8)
    assert expected_patch_positions(official_times(SYNTHETIC_RECORD)) == [0, 13, 26, 39]
    check_egoplan_clip_timing(SYNTHETIC_RECORD, tmp_path, backend, monkeypatch)


def test_the_released_sample_115_reaches_qwen_models_with_its_frames_real_times(sample_115, tmp_path, backend,
                                                                                 monkeypatch):
    """EgoPlan-Val sample 115 (P01_13, 59.94 fps): frames 36 ... 760 span 12.1 s; positions [0, 6, 13, 20]."""
    record = sample_115
    assert egoplan_data.official_clip(record, 8) == [36, 139, 242, 346, 449, 553, 656, 760]
    assert expected_patch_positions(official_times(record)) == [0, 6, 13, 20]
    check_egoplan_clip_timing(record, tmp_path, backend, monkeypatch)


def test_an_egointent_clip_at_6_fps_gets_the_positions_of_its_sampling_rate(tmp_path, backend, monkeypatch):
    """32 frames sampled at 6 FPS from a 30 fps video: one temporal patch per 1/3 s, 2 tokens per second."""
    write_video(tmp_path / "kitchen.mp4", num_frames=160, fps=30, size=(32, 32))
    annotations = tmp_path / "steps.jsonl"
    annotations.write_text(json.dumps({"step_id": "s1", "video": "kitchen.mp4", "step_start": 0.0,
                                       "truncation_time": 5.2,
                                       "scenario": "Kitchen", "environment": "indoor", "local_intent": "a",
                                       "procedural_intent": "b", "next_step_plan": "c"}) + "\n")
    [doc] = load_samples(EgoIntentSettings(annotations=annotations)).docs
    assert doc["frame_indices"] == list(range(0, 156, 5))  # 32 frames, one every 5 source frames: 6 FPS
    paths = temporal_positions_of_both_paths(backend("qwen2_5_vl"), doc, egointent.doc_to_visual, monkeypatch)
    assert paths == [[0, 0, 1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 9, 10]] * 2


# How time reaches each architecture whose processor takes videos (docs/backend.md, Architectures):
# the processor output that carries it, or None where only the frames' order reaches the model.
TIME_CARRIER = {"qwen2_5_vl": "second_per_grid_ts", "qwen3_vl": "timestamps in the prompt",
                "smolvlm": "timestamps and duration in the prompt", "qwen2_vl": None, "llava_onevision": None,
                "llava_next_video": None, "internvl": None}


@pytest.mark.parametrize("arch", VIDEO_ARCHITECTURES)
def test_time_reaches_exactly_the_architectures_that_read_it(arch, backend):
    """The same 8 frames shown at two different rates, and without times (what every architecture got
    before): the processor output differs exactly where the architecture reads time, in the way the
    docs say; elsewhere it is the same, and the same as without times."""
    model = backend(arch)
    frames = [index_image(i, size=(48, 40)) for i in range(8)]

    def encoded(fps: float | None) -> dict:
        times = None if fps is None else media.frame_times(range(0, 80, 10), 0, fps)
        clip = media.as_video_frames([f.copy() for f in frames], clip="c", times=times)
        visuals = prepare_visuals(clip, limits=VisualLimits(), video_native=True, takes_images=True, model_name=arch)
        return model._encode([model.chat.generation_prompt(model.chat.user_turn(visuals.parts, "Q"))], [visuals], "t")

    def equal(one: dict, other: dict) -> bool:
        return one.keys() == other.keys() and all(torch.equal(one[key], other[key]) for key in one)

    slow, fast, untimed = encoded(10.0), encoded(50.0), encoded(None)  # one frame per second, five, unknown
    assert equal(slow, fast) == (TIME_CARRIER[arch] is None)
    assert equal(slow, untimed) == (TIME_CARRIER[arch] is None)
    if arch == "qwen2_5_vl":  # seconds per temporal patch of 2 frames
        assert (slow["second_per_grid_ts"].tolist() == pytest.approx([2.0])
                and fast["second_per_grid_ts"].tolist() == pytest.approx([0.4]))
    elif TIME_CARRIER[arch] is not None:
        text = model.tokenizer.decode(slow["input_ids"][0])
        stamps = {"qwen3_vl": ["0.5 seconds", "2.5 seconds", "4.5 seconds", "6.5 seconds"],
                  "smolvlm": [f"Frame from 00:0{second}" for second in range(8)]}[arch]
        assert all(stamp in text for stamp in stamps), text


def test_frames_without_times_are_untimed_and_a_subsampled_clip_keeps_its_frames_times():
    frames = [index_image(i) for i in range(12)]
    timed = media.as_video_frames(frames, clip="c", times=media.frame_times(range(0, 120, 10), 0, 30.0))
    video = prepare_visuals(timed, limits=VisualLimits(max_frames=4), video_native=True, takes_images=True,
                            model_name="m").videos[0]
    assert [time.seconds for time in video.times] == pytest.approx([0, 40 / 30, 70 / 30, 110 / 30])
    metadata = video.metadata()
    assert metadata["fps"] == 30.0 and metadata["frames_indices"] == [0, 40, 70, 110]
    assert (len(metadata["frames_indices"]) / metadata["total_num_frames"] * metadata["fps"]
            == pytest.approx(3 / (110 / 30)))
    untimed = prepare_visuals([[index_image(i) for i in range(3)]], limits=VisualLimits(), video_native=True,
                              takes_images=True, model_name="m").videos[0]
    assert untimed.times is None and untimed.metadata()["fps"] is None
    still = media.as_video_frames([index_image(1) for _ in range(4)], clip="s",
                                  times=media.frame_times([5] * 4, 5, 30.0))
    metadata = prepare_visuals(still, limits=VisualLimits(), video_native=True, takes_images=True,
                               model_name="m").videos[0].metadata()
    assert metadata["frames_indices"] == [0] * 4 and metadata["total_num_frames"] == 4 and metadata["fps"] == 30.0
