"""The authors' protocol: the official prompt (against a transcription of ``get_prompt``), the clip sampled as
qwen_vl_utils samples it at 4 fps (the installed package as oracle), the decoding of each prompt, and the scores
of an answer under both parsers."""

import dataclasses
from pathlib import Path

import pytest
import torch
from qwen_vl_utils.vision_process import smart_nframes, smart_resize

from lmms_egoplan.contract.benchmark import TaskContext
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.cosmos_reason1 import task
from lmms_egoplan.cosmos_reason1.data import ER_SOURCES
from lmms_egoplan.cosmos_reason1.settings import CosmosReason1Settings
from lmms_egoplan.cosmos_reason1.sources import task_of
from lmms_egoplan.demo.cosmos_reason1 import CLIP_FPS, CLIP_FRAMES, build_fixture
from lmms_egoplan.demo.kit.media import read_index
from tests.kit.group_means import group_metrics


# nvidia-cosmos/cosmos-reason1 @3e7f1cb, examples/benchmark/tools/eval/utils/input.py get_prompt, verbatim but for
# taking the question's fields directly and one string split over two lines.
def get_prompt(question, choices, answer_type):
    system_prompt = "Answer the questions."
    prompt_text = question + "\n"
    prompt_text += "\n".join([f"({i}) {choice}" for i, choice in choices.items()])
    prompt_text += "\nAnswer with the option's letter from the given choices directly."
    if answer_type == "reasoning":
        prompt_text += ("\nPlease answer the question in the following format: <think> your reasoning </think> "
                        "<answer> your single letter answer </answer>.")
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": prompt_text}]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("cosmos"))


def context_of(fixture, part, **values):
    settings = resolve_settings(CosmosReason1Settings, task="t", metadata={}, env_prefix="COSMOS_REASON1",
                                environ=fixture.env(**values))
    return TaskContext(task_name=f"cosmos_reason1_{part}", settings=settings, dataset_name=part,
                       state=task.DeliveredProtocol())


@pytest.mark.parametrize("prompt, answer_type", [("official_reasoning", "reasoning"), ("official_letter", "letter")])
def test_the_prompt_is_the_official_one(fixture, prompt, answer_type):
    for doc in task.load_docs(context_of(fixture, "robofail", prompt=prompt)).docs:
        official = get_prompt(doc["question"], dict(zip(doc["letters"], doc["options"])), answer_type)
        assert task.doc_to_text(doc) == official[1]["content"]
        assert task.SYSTEM_PROMPT == official[0]["content"]


def test_chat_backends_get_the_system_turn_then_the_clip_and_the_text(fixture, monkeypatch):
    doc = task.load_docs(context_of(fixture, "robofail")).docs[0]
    monkeypatch.setattr(task, "doc_to_visual", lambda doc: ["clip"])
    messages = task.doc_to_messages(doc)
    assert messages[0] == {"role": "system", "content": [{"type": "text", "text": "Answer the questions."}]}
    assert messages[1]["role"] == "user" and messages[1]["content"][-1] == {"type": "text",
                                                                           "text": task.doc_to_text(doc)}


@pytest.mark.parametrize("total, video_fps, max_frames", [(12, 8, 768), (300, 30, 768), (3, 30, 768),
                                                           (10_000, 30, 768), (61, 29.97, 768), (900, 30, 64)])
def test_the_clip_is_sampled_as_qwen_vl_utils_samples_it(total, video_fps, max_frames):
    element = {"fps": 4.0} if max_frames == 768 else {"fps": 4.0, "max_frames": max_frames}
    count = smart_nframes(element, total_frames=total, video_fps=video_fps)
    expected = torch.linspace(0, total - 1, count).round().long().tolist()
    assert task.sampled_indices(total, video_fps, 4.0, max_frames) == expected


def test_the_clip_is_sampled_as_qwen_vl_utils_samples_it_at_any_length_and_rate():
    """The same over clips of 4 to 4,000 frames at the sources' usual rates: ``torch.linspace`` (float32) and the
    suite's numpy (float64) round every index alike."""
    for video_fps in (30, 29.97, 24, 10, 60):
        for total in range(4, 4001, 7):
            count = smart_nframes({"fps": 4.0}, total_frames=total, video_fps=video_fps)
            expected = torch.linspace(0, total - 1, count).round().long().tolist()
            assert task.sampled_indices(total, video_fps, 4.0, 768) == expected, (total, video_fps)


@pytest.mark.parametrize("width, height", [(64, 64), (256, 256), (320, 240), (640, 480), (896, 504), (1280, 720),
                                           (1920, 1080), (3840, 2160), (1008, 560), (100, 3000), (29, 41)])
def test_each_frame_gets_the_size_qwen_vl_utils_fetch_video_gives_it(width, height):
    """qwen_vl_utils' ``smart_resize`` (the installed package as oracle) into ``fetch_video``'s per-frame budget
    (vision_process.py@0.0.11 lines 403-405: 128 x 28 x 28 pixels at least, at most 768 x 28 x 28 or, past 300
    frames, the frame's share of 128,000 x 28 x 28 x 0.9 for two frames), for clips of 4 to 768 frames."""
    for frames in (4, 32, 300, 302, 500, 768):
        most = max(min(768 * 28 * 28, 128000 * 28 * 28 * 0.9 / frames * 2), int(128 * 28 * 28 * 1.05))
        official_height, official_width = smart_resize(height, width, factor=28, min_pixels=128 * 28 * 28,
                                                       max_pixels=most)
        assert task.official_frame_size(width, height, frames) == (official_width, official_height), frames


@pytest.mark.parametrize("frame_pixels, size", [(None, (336, 336)), ("qwen_vl_utils", (336, 336)),
                                                ("decoded", (64, 64))])
def test_the_frames_reach_the_backend_at_the_official_readers_size(fixture, frame_pixels, size):
    """The fixture's 64 x 64 frames, which qwen_vl_utils enlarges to its 128 x 28 x 28 pixels at least (a size the
    Qwen2.5-VL processor then leaves as it is); ``decoded`` hands them over as decoded, for the backend's processor
    to resize by its checkpoint's configuration."""
    values = {} if frame_pixels is None else {"frame_pixels": frame_pixels}
    context = context_of(fixture, "holoassist", **values)
    doc = task.load_docs(context).docs[0]
    frames = task.doc_to_visual(doc)
    indices = task.sampled_indices(CLIP_FRAMES, CLIP_FPS, 4.0, 768)
    assert {frame.size for frame in frames} == {size} and [read_index(frame) for frame in frames] == indices
    assert task.process_results(doc, ["<answer>A</answer>"], context)["predictions"]["frame_size"] == list(size)


@pytest.mark.parametrize("frame_timing", [None, "assumed_2fps", "sampled_rate"])
def test_the_model_sees_the_sampled_frames_as_one_video_timed_as_the_setting_says(fixture, frame_timing):
    """By default (the benchmark script's run) frame k is at k / 2 s, the 2 fps the Qwen2.5-VL processor assumes
    without a frame rate (1.0 s per two-frame temporal patch); sampled_rate gives the frames' true times."""
    values = {} if frame_timing is None else {"frame_timing": frame_timing}
    doc = task.load_docs(context_of(fixture, "holoassist", **values)).docs[0]
    frames = task.doc_to_visual(doc)
    indices = task.sampled_indices(CLIP_FRAMES, CLIP_FPS, 4.0, 768)
    assert len(indices) == 6 and [read_index(frame) for frame in frames] == indices
    times = [index / CLIP_FPS for index in indices] if frame_timing == "sampled_rate" else \
        [position / 2.0 for position in range(len(indices))]
    assert [frame.info["lmms_egoplan.frame_time"].seconds for frame in frames] == pytest.approx(times, abs=1e-9)


@pytest.mark.parametrize("prompt", ["official_reasoning", "official_letter"])
def test_each_prompt_has_its_decoding(fixture, prompt):
    configuration = task.configure(context_of(fixture, "av", prompt=prompt), {})
    assert configuration.generation_kwargs == task.DECODING[prompt]
    assert task.DECODING["official_reasoning"] == {"max_new_tokens": 1024, "temperature": 0.6, "top_p": 0.95,
                                                   "do_sample": True, "until": []}
    assert task.DECODING["official_letter"]["max_new_tokens"] == 10 and not task.DECODING[prompt]["until"]


@pytest.mark.parametrize("prompt", ["official_reasoning", "official_letter"])
def test_the_built_task_decodes_as_its_prompt_says_and_nothing_else(fixture, prompt, monkeypatch):
    """The decoding has one home (``task.DECODING``): lmms-eval's config of a built task holds the prompt's, no key
    of the other prompt's (the YAML states none)."""
    from lmms_eval.tasks import TaskManager, get_task_dict

    for name, value in fixture.env(prompt=prompt).items():
        monkeypatch.setenv(name, value)
    folder = Path(__file__).resolve().parents[2] / "tasks" / "cosmos_reason1"
    built = get_task_dict(["cosmos_reason1_av"], TaskManager(include_path=str(folder), include_defaults=False))
    assert built["cosmos_reason1_av"].config.generation_kwargs == task.DECODING[prompt]


@pytest.mark.parametrize("backend, chat, said, retries", [
    ("egoplan_hf", False, "egoplan_hf sends the system prompt 'Answer the questions.' as a system turn",
     "egoplan_hf generates {empty} again, up to 10 times, as the official run does"),
    ("egoplan_server", False, "egoplan_server sends the system prompt", "egoplan_server generates {empty} again"),
    ("openai", True, "lmms-eval's openai backend gets the system turn in the task's messages, but whether it times",
     "lmms-eval's openai backend asks once, so such answers are only counted"),
    ("vllm", True, "lmms-eval's vllm backend gets the system turn in the task's messages",
     "lmms-eval's vllm backend asks once"),
    ("llava_onevision", False, "lmms-eval's llava_onevision backend sends no system turn of the task's",
     "lmms-eval's llava_onevision backend asks once"),
])
@pytest.mark.parametrize("prompt, empty", [
    ("official_reasoning", "an answer with no capital letter in its <answer> tag"),
    ("official_letter", "an answer with no capital letter (greedy, with 1,024 + 256 k new tokens at retry k)")])
def test_the_run_says_what_of_the_protocol_its_backend_cannot_deliver(fixture, backend, chat, said, retries, prompt,
                                                                     empty):
    from loguru import logger

    lines = []
    context = dataclasses.replace(context_of(fixture, "av", prompt=prompt), run=SuiteRun())
    sink = logger.add(lines.append, format="{message}")
    try:
        task.on_backend(context, backend, chat)
    finally:
        logger.remove(sink)
    retries = retries.format(empty=empty)
    assert any(said in line for line in lines)
    assert [line for line in lines if "again, up to" in line or "asks once" in line] == \
        [line for line in lines if retries in line] and sum(retries in line for line in lines) == 1
    assert sum(empty in line for line in lines) == 1
    # what the run's results record, and the report notes on its row: max_retries did not apply
    changes = context.run.protocol_changes
    assert changes == ({} if backend.startswith("egoplan_") else {"cosmos_reason1_av": {"max_retries": (
        f"lmms-eval's {backend} backend asks once: {empty} is not generated again (max_retries 10 not applied)")}})


def test_an_answer_is_scored_by_both_parsers_and_their_difference_counted(fixture):
    context = context_of(fixture, "agibot")
    doc = task.load_docs(context).docs[0]
    gold = doc["answer"]
    scores = task.process_results(doc, [f"<answer>The answer is {gold}</answer>"], context)
    assert (scores["accuracy_official"], scores["accuracy_robust"], scores["micro_robust"]) == (0.0, 1.0, 1.0)
    assert (scores["no_av_official"], scores["no_av_robust"]) == (0.0, 1.0)
    assert scores["disagreements"] == 1.0 and scores["unparseable_official"] == 0.0
    # no answer tag: the official reasoning parser reads nothing, the robust one the stated letter
    untagged = task.process_results(doc, [f"I pick option {gold.lower()}"], context)
    assert (untagged["unparseable_official"], untagged["unparseable_robust"]) == (1.0, 0.0)
    assert (scores["empty_answer_retried"], scores["empty_after_retries"]) == (0.0, 0.0)  # a plain str: asked once
    assert scores["predictions"] | {} == {"item_id": doc["item_id"], "source": "agibot", "gold": gold,
                                          "official": "T", "robust": gold, "prompt": "official_reasoning",
                                          "retries": 0, "frames": 6, "system_turn": None,
                                          "frame_timing": "assumed_2fps",
                                          "frame_size": list(task.doc_to_visual(doc)[0].size)}


def test_av_and_the_common_sense_categories_have_no_share_in_the_five_source_mean(fixture):
    for part in ("av", "space"):
        context = context_of(fixture, part)
        docs = task.load_docs(context).docs
        assert task.no_av_metrics(context, docs) == []
        assert "no_av_official" not in task.process_results(docs[0], ["<answer>A</answer>"], context)
    context = context_of(fixture, "robovqa")
    assert [metric.name for metric in task.no_av_metrics(context, task.load_docs(context).docs)] == [
        "no_av_official", "no_av_robust"]


def test_the_groups_report_macro_and_micro_means_as_the_docs_say():
    """lmms-eval's own group aggregation over the suite's group YAMLs (tests/kit/group_means.py), parts of different
    sizes. ER, (accuracy, questions): av (1, 8), agibot (0.5, 4), bridgev2 (0, 2), holoassist (1, 2), robofail (0, 2),
    robovqa (0.5, 4): macro (1 + 0.5 + 0 + 1 + 0 + 0.5) / 6 = 0.5; micro (8 + 2 + 0 + 2 + 0 + 2) / 22 = 14 / 22;
    without AV, the macro of the five others (0.5 + 0 + 1 + 0 + 0.5) / 5 = 0.4. CS: space (1, 1), time (0, 3),
    other_physics (0.5, 2): macro 1.5 / 3 = 0.5, micro (1 + 0 + 1) / 6. Overall: the macro over the nine parts
    (3 + 1.5) / 9 = 0.5, the micro (14 + 2) / 28."""
    parts = {"av": (1.0, 8), "agibot": (0.5, 4), "bridgev2": (0.0, 2), "holoassist": (1.0, 2), "robofail": (0.0, 2),
             "robovqa": (0.5, 4), "space": (1.0, 1), "time": (0.0, 3), "other_physics": (0.5, 2)}
    members = {}
    for part, (accuracy, _) in parts.items():
        values = {f"{mean}_{parser}": accuracy for mean in ("accuracy", "micro") for parser in ("official", "robust")}
        if part in ER_SOURCES and part != "av":
            values.update(no_av_official=accuracy, no_av_robust=accuracy)
        members[task_of(part)] = values
    groups = group_metrics("cosmos_reason1", "cosmos_reason1", members,
                           {task_of(part): questions for part, (_, questions) in parts.items()})
    expected = {"cosmos_reason1_er": (0.5, 14 / 22), "cosmos_reason1_cs": (0.5, 2 / 6),
                "cosmos_reason1": (0.5, 16 / 28)}
    for group, (macro, micro) in expected.items():
        for parser in ("official", "robust"):
            assert groups[group][f"accuracy_{parser}"] == pytest.approx(macro), (group, parser)
            assert groups[group][f"micro_{parser}"] == pytest.approx(micro), (group, parser)
    assert groups["cosmos_reason1_er"]["no_av_official"] == groups["cosmos_reason1_er"]["no_av_robust"] == \
        pytest.approx(0.4)


@pytest.mark.parametrize("frame_pixels", ["qwen_vl_utils", "decoded"])
def test_the_sample_log_shows_the_frames_and_pixels_shown(fixture, frame_pixels):
    context = context_of(fixture, "space", max_side="32", frame_pixels=frame_pixels)
    doc = task.load_docs(context).docs[0]
    shown = task.doc_to_visual(doc)
    logged = task.process_results(doc, ["<answer>A</answer>"], context)["predictions"]
    assert (logged["frames"], logged["frame_size"]) == (len(shown), list(shown[0].size)) and max(shown[0].size) == 32


def test_the_letter_prompt_reads_the_first_capital_anywhere(fixture):
    context = context_of(fixture, "time", prompt="official_letter")
    doc = task.load_docs(context).docs[0]
    scores = task.process_results(doc, [f"Based on the clip: {doc['answer']}"], context)
    assert scores["predictions"]["official"] == "B" and scores["predictions"]["robust"] == doc["answer"]


@pytest.mark.parametrize("prompt, rule", [("official_reasoning", "no_letter_in_answer_tag"),
                                          ("official_letter", "no_capital_letter")])
def test_each_prompt_s_requests_ask_for_its_parser_s_retry_and_a_backend_without_it_is_told_once(fixture, monkeypatch,
                                                                                               prompt, rule):
    from argparse import Namespace
    from pathlib import Path

    from lmms_eval.utils import load_yaml_config

    from lmms_egoplan.core.request_options import EMPTY_ANSWER_RETRY

    for name, value in fixture.env(prompt=prompt).items():
        monkeypatch.setenv(name, value)
    tasks_dir = Path(__file__).resolve().parents[2] / "tasks"
    config = load_yaml_config(str(tasks_dir / "cosmos_reason1" / "cosmos_reason1_av.yaml"))
    built = config["class"](config=config)
    built._bind_to_backend(Namespace(model="egoplan_hf"))
    doc = built.eval_docs[0]
    request = built.construct_requests(doc_id=0, ctx=task.doc_to_text(doc), metadata={
        "task": "cosmos_reason1_av", "doc_id": 0, "repeats": 1, "split": "test"})
    assert EMPTY_ANSWER_RETRY.of(request) == rule
    told = [line for line in _warnings_of_binding(built, "dummy")
            if "empty_answer_retry" in line or "again, up to 10 times" in line]
    assert len(told) == 1 and "lmms-eval's dummy backend asks once" in told[0]


@pytest.mark.parametrize("max_retries, rule", [("3", "no_capital_letter"), ("0", "never")])
def test_max_retries_below_the_official_10_travels_with_the_requests_and_is_said(fixture, monkeypatch, max_retries,
                                                                                 rule):
    from pathlib import Path

    from lmms_eval.utils import load_yaml_config

    from lmms_egoplan.core.request_options import EMPTY_ANSWER_RETRIES, EMPTY_ANSWER_RETRY

    for name, value in fixture.env(prompt="official_letter", max_retries=max_retries).items():
        monkeypatch.setenv(name, value)
    config = load_yaml_config(str(Path(__file__).resolve().parents[2] / "tasks" / "cosmos_reason1" /
                                  "cosmos_reason1_av.yaml"))
    built = config["class"](config=config)
    lines = _warnings_of_binding(built, "egoplan_hf")
    request = built.construct_requests(doc_id=0, ctx=task.doc_to_text(built.eval_docs[0]), metadata={
        "task": "cosmos_reason1_av", "doc_id": 0, "repeats": 1, "split": "test"})
    assert EMPTY_ANSWER_RETRY.of(request) == rule
    assert EMPTY_ANSWER_RETRIES.of(request) == max_retries
    said = "at most that often, not the official 10 times"
    assert any("COSMOS_REASON1_MAX_RETRIES" in line and said in line for line in lines), lines


def _warnings_of_binding(built, backend: str) -> list[str]:
    """What binding the task ``built`` to ``backend`` warns of."""
    from argparse import Namespace

    from loguru import logger

    lines = []
    sink = logger.add(lines.append, format="{message}", level="WARNING")
    try:
        built._bind_to_backend(Namespace(model=backend))
    finally:
        logger.remove(sink)
    return lines


def test_the_requests_carry_the_official_system_prompt_and_unset_sampling_off(fixture, monkeypatch):
    """The suite's backends get the system turn and the official SamplingParams' unset-is-off from the request (no
    model_arg needed); the system turn each sample's model was given is logged with it."""
    from argparse import Namespace
    from pathlib import Path

    from lmms_eval.utils import load_yaml_config

    from lmms_egoplan.core.request_options import SAMPLING_DEFAULTS, SYSTEM_PROMPT, UNSET_IS_OFF

    for name, value in fixture.env().items():
        monkeypatch.setenv(name, value)
    config = load_yaml_config(str(Path(__file__).resolve().parents[2] / "tasks" / "cosmos_reason1" /
                                  "cosmos_reason1_av.yaml"))
    built = config["class"](config=config)
    built._bind_to_backend(Namespace(model="egoplan_hf"))
    doc = built.eval_docs[0]
    request = built.construct_requests(doc_id=0, ctx=task.doc_to_text(doc), metadata={
        "task": "cosmos_reason1_av", "doc_id": 0, "repeats": 1, "split": "test"})
    assert SYSTEM_PROMPT.of(request) == "Answer the questions." and SAMPLING_DEFAULTS.of(request) == UNSET_IS_OFF
    logged = built.compiled.config["process_results"](doc, [f"<answer>{doc['answer']}</answer>"])
    assert logged["predictions"]["system_turn"] == "Answer the questions."
    assert logged["predictions"]["frame_timing"] == "assumed_2fps"
    built._bind_to_backend(Namespace(model="dummy"))
    assert built.compiled.config["process_results"](doc, ["A"])["predictions"]["system_turn"] is None


@pytest.mark.parametrize("frame_timing, seconds_per_patch", [("assumed_2fps", 1.0), ("sampled_rate", None)])
def test_the_qwen2_5_vl_processor_gets_the_benchmark_script_s_seconds_per_patch(fixture, tiny_model, frame_timing,
                                                                                  seconds_per_patch):
    """egoplan_hf hands the tiny Qwen2.5-VL's processor the clip: by default 1.0 s per two-frame temporal patch (the
    2 fps it assumes in the benchmark script's run), with sampled_rate the true 2 / sampling rate."""
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    doc = task.load_docs(context_of(fixture, "holoassist", frame_timing=frame_timing)).docs[0]
    backend = EgoPlanHF(pretrained=str(tiny_model("qwen2_5_vl")), device="cpu", dtype="float32", max_frames=768)
    backend.task_dict = {"t": {"test": [doc]}}
    visuals = backend._doc_visuals(("t", "test", 0, task.doc_to_visual))
    prompt = backend.chat.generation_prompt(backend.chat.user_turn(visuals.parts, "q"))
    encoded = backend._encode([prompt], [visuals], "here")
    indices = task.sampled_indices(CLIP_FRAMES, CLIP_FPS, 4.0, 768)
    true_rate = (len(indices) - 1) / ((indices[-1] - indices[0]) / CLIP_FPS)
    expected = seconds_per_patch or 2 / true_rate
    assert encoded["second_per_grid_ts"].tolist() == pytest.approx([expected], rel=0.05)
