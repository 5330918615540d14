"""RoboVQA end to end: the group through the real `lmms-eval` CLI on the official TFRecord layout, answered by a
loopback chat model (lmms-eval's `openai` backend): every task's questions, the default protocol's 16 frames and
prompt reach the model, and each task's score is the one its answers imply (sacrebleu and exact yes / no, computed
here without the suite's scorer); each lineage's preset likewise, scored by the transcriptions of its code."""

import base64
import io

import pytest
import sacrebleu
from PIL import Image

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.robovqa import (
    EPISODE_FRAMES,
    EPISODES,
    SIMILARITY_TOLERANCE,
    build_fixture,
    lineage_scores,
    minilm,
)
from lmms_egoplan.robovqa.data import BINARY_TYPES, QUESTION_TYPES, fetch_question_answer, question_type
from lmms_egoplan.robovqa.scoring import SYSTEM_PROMPTS
from lmms_egoplan.robovqa.task import PROTOCOLS

ANSWER = "put packet on the table"


def reply(call):
    return Reply("Yes." if "Answer yes or no." in call.text else ANSWER)


def expected_scores():
    """Per question type the mean of the default's score, from the episodes' references."""
    scores = {}
    for text in EPISODES.values():
        for tag, _, answer in fetch_question_answer(text):
            kind, reference = question_type(tag), answer.removeprefix("A:").strip()
            value = 100.0 * (reference == "yes") if kind in BINARY_TYPES else \
                sacrebleu.sentence_bleu(ANSWER, [reference]).score
            scores.setdefault(kind, []).append(value)
    return {kind: sum(values) / len(values) for kind, values in scores.items()}


def test_the_group_runs_on_the_official_shards_with_the_default_protocol(tmp_path):
    fixture = build_fixture(tmp_path / "robovqa")
    with ChatServer(reply) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused",
                            tasks=["robovqa"], output_dir=tmp_path / "out", env=fixture.env("tfrecord"))
    expected = expected_scores()
    for kind in QUESTION_TYPES:
        assert run.metric(f"robovqa_{kind}", "score") == pytest.approx(expected[kind]), kind
    assert run.metric("robovqa", "predictions") == 18 == len(server.calls)
    assert run.metric("robovqa", "score") == pytest.approx(sum(expected.values()) / len(expected))
    assert run.metric("robovqa_success", "unextracted") == 0
    for call in server.calls:
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        shown = [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls]
        assert len(shown) == 16 and shown == [int(i * (EPISODE_FRAMES - 1) / 15) for i in range(16)]
        assert all(message["role"] != "system" for message in call.messages)


# Each lineage's preset through the CLI: its frames, system turn, text and decoding reach the model, and each task's
# metrics are the means of the transcription of that lineage's code over the answers the run logged. On the TFRecord
# layout mimo and physbrain show frames their lineages did not read: the run says so once.
PRESET_FRAMES = {"mimo": 8, "physbrain": 16, "robomamba": None, "multinet": None}  # None: the last frame, an image
LAYOUT_WARNING = {"mimo": "the mimo protocol's 8 frames are spread over the official shard's frames",
                  "physbrain": "the physbrain protocol's 16 frames are spread over the shard's frames"}


def preset_reply(call):
    return Reply("Yes." if "yes or no" in call.text.lower() else ANSWER)


@pytest.mark.parametrize("protocol", list(PRESET_FRAMES))
def test_each_lineages_preset_runs_with_its_frames_turns_decoding_and_scorer(protocol, tmp_path):
    fixture = build_fixture(tmp_path / "robovqa")
    with ChatServer(preset_reply) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused",
                            tasks=["robovqa"], output_dir=tmp_path / "out",
                            env=fixture.env("tfrecord", protocol=protocol))
    assert run.metric("robovqa", "predictions") == 18 == len(server.calls)
    frames, system = PRESET_FRAMES[protocol], SYSTEM_PROMPTS.get(protocol, "")
    for call in server.calls:
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        shown = [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls]
        assert shown == ([EPISODE_FRAMES - 1] if frames is None else
                         [int(i * (EPISODE_FRAMES - 1) / (frames - 1)) for i in range(frames)]), protocol
        turns = [[part["text"] for part in m["content"]] for m in call.messages if m["role"] == "system"]
        assert turns == ([[system]] if system else [])
        assert call.body["temperature"] == PROTOCOLS[protocol].decoding["temperature"]
        assert call.body["max_tokens"] == PROTOCOLS[protocol].decoding["max_new_tokens"]
        assert call.text.endswith(" /no_think") == (protocol == "mimo")
    warned = [line for line in run.log.splitlines() if "ROBOVQA_DATA_SOURCE" in line]
    assert len(warned) == (protocol in LAYOUT_WARNING)
    assert all(LAYOUT_WARNING[protocol] in line for line in warned)
    sentence_model = minilm() if protocol == "multinet" else None
    for kind in QUESTION_TYPES:
        samples = run.samples(f"robovqa_{kind}")
        per_answer = [lineage_scores(protocol, sample["filtered_resps"], sample["target"], kind, sentence_model)
                      for sample in samples]
        assert samples and {s["filtered_resps"] for s in samples} <= {"Yes.", ANSWER}
        for name in per_answer[0]:
            mean = sum(values[name] for values in per_answer) / len(per_answer)
            tolerance = SIMILARITY_TOLERANCE if name == "multinet_similarity" else 1e-9
            assert run.metric(f"robovqa_{kind}", name) == pytest.approx(mean, abs=tolerance), (protocol, kind, name)
