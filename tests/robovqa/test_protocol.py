"""What each protocol's requests hand a backend, through the tasks as lmms-eval builds them from the suite's YAMLs:
the frames as one video (``default``) or as separate images where the lineage's code sends images (MiMo's
``mivllm.py``, PhysBrainEvalKit's ``prepare_messages``), the last frame alone (``robomamba``, ``multinet``); MiMo's
system turn, " /no_think" text and 16,384-token cap, as they reach egoplan_hf's rendered prompt and ``generate``; the
warning, once a run, that a preset's data layout is not its lineage's."""

from pathlib import Path

import pytest

from lmms_egoplan.core.request_options import SYSTEM_PROMPT
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.robovqa import EPISODE_FRAMES, build_fixture
from lmms_egoplan.models.visuals import VisualLimits, prepare_visuals
from lmms_egoplan.robovqa.data import FRAMES16, QUESTION_TYPES
from lmms_egoplan.robovqa.scoring import MULTINET_SYSTEM_PROMPT

HELPFUL = "You are a helpful assistant."
# protocol -> (its lineage's layout, the parts a video-taking backend makes of a request's visuals, system turn)
SENT = {"default": ("frames16", ["video"], ""), "mimo": ("tianli", ["image"] * 8, HELPFUL),
        "physbrain": ("frames16", ["image"] * 16, HELPFUL), "robomamba": ("frames16", ["image"], ""),
        "multinet": ("frames16", ["image"], MULTINET_SYSTEM_PROMPT)}
MAX_NEW_TOKENS = {"default": 128, "mimo": 16384, "physbrain": 128, "robomamba": 128, "multinet": 75}
COPY = [int(i * (EPISODE_FRAMES - 1) / 15) for i in range(16)]  # the frames16 copy's frames of the video's 20
SHOWN = {"default": COPY, "physbrain": COPY, "robomamba": COPY[-1:], "multinet": COPY[-1:],
         "mimo": [int(i * (EPISODE_FRAMES - 1) / 7) for i in range(8)]}  # MiMo's 8 of the Tianli video's 20


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("robovqa"))


def load_tasks(names: list[str], env: dict, monkeypatch) -> dict:
    """The tasks as lmms-eval builds them from the suite's YAMLs, settings from ``env``."""
    from lmms_eval.tasks import TaskManager, get_task_dict

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    folder = Path(__file__).parents[2] / "tasks"
    return get_task_dict(names, TaskManager(include_path=str(folder), include_defaults=False))


def first_request(fixture, protocol: str, monkeypatch, source: str | None = None):
    """The first request of ``robovqa_success`` under ``protocol`` and the doc it names."""
    task = load_tasks(["robovqa_success"], fixture.env(source or SENT[protocol][0], protocol=protocol),
                      monkeypatch)["robovqa_success"]
    task.build_all_requests(limit=1)
    request = task.instances[0]
    _, _, _, doc_id, _, split = request.args
    return task, request, task.dataset[split][doc_id]


@pytest.mark.parametrize("protocol", list(SENT))
def test_each_protocol_hands_a_backend_its_lineages_visuals_system_turn_and_token_limit(fixture, protocol,
                                                                                       monkeypatch):
    _, request, doc = first_request(fixture, protocol, monkeypatch)
    context, generation, doc_to_visual = request.args[:3]
    visuals = doc_to_visual(doc)
    prepared = prepare_visuals(visuals, limits=VisualLimits(), video_native=True, takes_images=True,
                               model_name="probe")
    parts = [part["type"] for part in prepared.parts]
    assert parts == SENT[protocol][1], protocol  # one video, or the lineage's separate images
    frames = [frame for video in prepared.videos for frame in video.frames] + prepared.images
    assert [read_index(frame) for frame in frames] == SHOWN[protocol]
    assert generation["max_new_tokens"] == MAX_NEW_TOKENS[protocol]
    assert SYSTEM_PROMPT.of(request) == SENT[protocol][2]
    assert context.endswith(" /no_think") == (protocol == "mimo")
    if protocol == "multinet":  # openx_dataloader.py's text of a robot_vqa step
        assert context.startswith("Task and Context: ") and "\n Question: " in context, context


def test_mimo_reaches_egoplan_hf_as_its_code_sends_it(fixture, tiny_model, monkeypatch):
    """MiMo's mivllm.py: the system turn, the 8 frames as 8 images before the text, " /no_think" right after the text;
    generate is asked for 16,384 new tokens (here cut to 2 before the tiny model runs)."""
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    task, request, _ = first_request(fixture, "mimo", monkeypatch)
    # max_length: a window wide enough for the cap (the tiny checkpoint declares 8,192 positions)
    backend = EgoPlanHF(pretrained=str(tiny_model("qwen2_5_vl")), device="cpu", dtype="float32", max_length=32768)
    backend.task_dict = {"robovqa_success": task.dataset}
    prompts, asked, encode, generate = [], [], backend._encode, backend._model.generate
    monkeypatch.setattr(backend, "_encode", lambda texts, *args: prompts.extend(texts) or encode(texts, *args))

    def short_generate(**kwargs):
        asked.append(kwargs["max_new_tokens"])
        return generate(**{**kwargs, "max_new_tokens": 2})

    monkeypatch.setattr(backend._model, "generate", short_generate)
    backend.generate_until([request])
    image = "<|vision_start|><|image_pad|><|vision_end|>"
    assert prompts[0].startswith(f"<|im_start|>system\n{HELPFUL}<|im_end|>\n<|im_start|>user\n{image * 8}")
    assert prompts[0].endswith(f"{request.args[0]}<|im_end|>\n<|im_start|>assistant\n")
    assert request.args[0].endswith("Please answer yes or no.  /no_think")
    assert "<|video_pad|>" not in prompts[0] and asked == [16384]


@pytest.mark.parametrize("protocol, source, said", [
    ("mimo", "frames16", "spread over the 16 frames the frames16 copy kept"),
    ("mimo", "tfrecord", "spread over the official shard's frames"),
    ("physbrain", "tianli", "PhysBrainEvalKit read the 16 frames the frames16 copy kept"),
    ("mimo", "tianli", None), ("physbrain", "frames16", None), ("default", "tfrecord", None)])
def test_a_preset_on_a_layout_its_lineage_did_not_read_is_said_once_a_run(fixture, protocol, source, said,
                                                                          monkeypatch):
    from loguru import logger

    names = [f"robovqa_{kind}" for kind in QUESTION_TYPES]
    tasks = load_tasks(names, fixture.env(source, protocol=protocol), monkeypatch)
    lines = []
    sink = logger.add(lines.append, format="{message}")
    try:
        for run in (SuiteRun(), SuiteRun()):  # two runs, each of the seven tasks, each bound twice
            for name in names * 2:
                tasks[name].join_run(run)
                tasks[name].spec.on_backend(tasks[name].compiled.context, "egoplan_hf", False)
    finally:
        logger.remove(sink)
    layout = [line for line in lines if "ROBOVQA_DATA_SOURCE" in line]
    if said is None:
        assert layout == []
    else:
        target = SENT[protocol][0]
        assert len(layout) == 2 and all(said in line for line in layout), layout
        assert layout[0].rstrip().endswith(f"set ROBOVQA_DATA_SOURCE (metadata.data_source) to {target} to show its "
                                           "frames")


def test_robomamba_decodes_greedily_as_its_generate_does():
    """run_test asks for sampling at temperature 0.4, but RoboMamba's Mamba ``generate`` keeps ``top_k`` 1 and its
    ``sample`` takes the argmax at ``top_k`` 1 (src/model/my_mamba/modeling_mamba.py @d383bbb, 632-638, 786-806)."""
    from lmms_egoplan.robovqa.task import PROTOCOLS

    decoding = PROTOCOLS["robomamba"].decoding
    assert (decoding["temperature"], decoding["do_sample"], decoding["max_new_tokens"]) == (0, False, 128)


def test_a_multinet_scorer_under_another_protocol_is_refused_naming_both_settings(fixture, monkeypatch):
    from lmms_egoplan.core.settings import SettingsError

    env = {**fixture.env(FRAMES16, protocol="default"), "ROBOVQA_MULTINET_SCORER": "module"}
    with pytest.raises(SettingsError, match="ROBOVQA_MULTINET_SCORER .* is module, .* but ROBOVQA_PROTOCOL .* is "
                                            "default: set the protocol to multinet"):
        load_tasks(["robovqa_success"], env, monkeypatch)["robovqa_success"].build_all_requests(limit=1)
    multinet = {**fixture.env(FRAMES16, protocol="multinet"), "ROBOVQA_MULTINET_SCORER": "module"}
    assert load_tasks(["robovqa_success"], multinet, monkeypatch)["robovqa_success"].dataset
