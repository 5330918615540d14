"""Cosmos-Reason1 end to end: the group through the real `lmms-eval` CLI on synthetic data in the official layout,
answered by script through lmms-eval's `openai` backend (every value the run reports is the one the script implies,
the prompt and the frames reach the model as the protocol says); a part without clips is not run."""

import base64
import dataclasses
import io
import shutil

import pytest
from PIL import Image

from lmms_egoplan.cosmos_reason1 import task
from lmms_egoplan.demo.cosmos_reason1 import CLIP_FPS, CLIP_FRAMES, build_fixture, scripted_answers
from lmms_egoplan.demo.kit.judge_server import ChatServer
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.kit.scripted import answering, differences, reported_metrics

# End to end: the real lmms-eval CLI in subprocesses.


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("cosmos_reason1"))


def test_scripted_answers_score_as_the_script_implies_with_the_official_prompt_and_frames(fixture, tmp_path):
    """One request fails (HTTP 500, lmms-eval's failure text in place of an answer): it is left out of every score
    and counted, and every other value is the script's."""
    script = scripted_answers(fixture)
    script = dataclasses.replace(script, unanswered=frozenset([next(iter(script.answers))]))
    with ChatServer(answering([script])) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused,"
                                                       f"max_retries=1,retry_backoff_s=0",
                            tasks=["cosmos_reason1"], output_dir=tmp_path, env=fixture.env(), check=False)
    assert run.returncode == 4, run.log_tail()
    assert differences(reported_metrics(run.results), script.expected(run, failed=script.unanswered)) == []
    assert run.metric("cosmos_reason1_av", "failed_requests") == 1 and run.metric("cosmos_reason1", "predictions") == 35
    questions = {pair["question"]: pair for _, pair in fixture.questions()}
    assert len({call.text for call in server.calls}) == len(questions) == 36
    indices = task.sampled_indices(CLIP_FRAMES, CLIP_FPS, 4.0, 768)
    for call in server.calls:
        pair = next(pair for question, pair in questions.items() if question in call.text)
        options = "\n".join(f"({letter}) {text}" for letter, text in pair["index2ans"].items())
        assert f"{pair['question']}\n{options}\n{task.LETTER_INSTRUCTION}\n{task.REASONING_INSTRUCTION}" in call.text
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        assert [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls] == indices
        assert call.body.get("temperature") == pytest.approx(0.6, abs=1e-9)
    assert "lmms-eval's openai backend sends no system message and no top_p" in run.log
    assert "do not match their questions" in run.log
    recorded = run.results["configs"]["cosmos_reason1_robovqa"]["metadata"]
    assert (recorded["version"], recorded["prompt"], recorded["robovqa_items"]) == (1, "official_reasoning", "all")


def test_a_part_without_clips_is_not_run_and_the_run_fails_naming_it(fixture, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fixture.root, root)
    shutil.rmtree(root / "holoassist" / "clips")
    failed = run_lmms_eval(model="dummy", model_args="", tasks=["cosmos_reason1_holoassist"],
                           output_dir=tmp_path / "out", env={"COSMOS_REASON1_ROOT": str(root)}, check=False)
    assert failed.results is None and failed.returncode != 0
    assert f"Cosmos-Reason1 holoassist: not run: its clips folder {root}/holoassist/clips is absent" in failed.log
