"""Cosmos-Reason1 end to end: the group through the real `lmms-eval` CLI on synthetic data in the official layout,
answered by script through lmms-eval's `openai` backend (every value the run reports is the one the script implies,
the prompt and the frames reach the model as the protocol says); a part without clips is not run; the suite's
egoplan_server retries an empty answer as the official run does, against a loopback vLLM server."""

import base64
import dataclasses
import io
import json
import re
import shutil

import pytest
from PIL import Image
from transformers import AutoProcessor

from lmms_egoplan.cosmos_reason1 import task
from lmms_egoplan.demo.cosmos_reason1 import CLIP_FPS, CLIP_FRAMES, build_fixture, scripted_answers
from lmms_egoplan.demo.kit.judge_server import ChatServer
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.kit.scripted import answering, differences, reported_metrics
from tests.models.engine_servers import EngineServer, hf_messages

# End to end: the real lmms-eval CLI in subprocesses.


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("cosmos_reason1"))


def test_scripted_answers_score_as_the_script_implies_with_the_official_prompt_and_frames(fixture, tmp_path,
                                                                                         tiny_model):
    """One request fails (HTTP 500, lmms-eval's failure text in place of an answer): it is left out of every score
    and counted, and every other value is the script's. The system turn reaches lmms-eval's chat backend (rendered
    by the tiny Qwen2.5-VL's template as the model would see it) and is logged with each sample."""
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
        frames = [Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) for url in urls]
        # the fixture's 64 x 64 frames at qwen_vl_utils' size: 128 x 28 x 28 pixels at least
        assert [read_index(frame) for frame in frames] == indices and {frame.size for frame in frames} == {(336, 336)}
        assert call.body.get("temperature") == pytest.approx(0.6, abs=1e-9) and call.body.get("top_p") == 0.95
        assert call.messages[0] == {"role": "system", "content": [{"type": "text", "text": "Answer the questions."}]}
    processor = AutoProcessor.from_pretrained(tiny_model("qwen2_5_vl"))
    rendered = processor.apply_chat_template(hf_messages(server.calls[0].messages)[0], tokenize=False,
                                             add_generation_prompt=True)
    assert rendered.startswith("<|im_start|>system\nAnswer the questions.<|im_end|>\n<|im_start|>user\n")
    assert "lmms-eval's openai backend gets the system turn in the task's messages" in run.log
    logged = [sample["predictions"] for sample in run.samples("cosmos_reason1_av") if "predictions" in sample]
    assert logged and all(p["system_turn"] == "Answer the questions." and p["frame_timing"] == "assumed_2fps"
                          for p in logged)
    assert "do not match their questions" in run.log
    recorded = run.results["configs"]["cosmos_reason1_robovqa"]["metadata"]
    assert (recorded["version"], recorded["prompt"], recorded["robovqa_items"], recorded["frame_pixels"]) == (
        8, "official_reasoning", "all", "qwen_vl_utils")


def test_a_part_without_clips_is_not_run_and_the_run_fails_naming_it(fixture, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(fixture.root, root)
    shutil.rmtree(root / "holoassist" / "clips")
    failed = run_lmms_eval(model="dummy", model_args="", tasks=["cosmos_reason1_holoassist"],
                           output_dir=tmp_path / "out", env={"COSMOS_REASON1_ROOT": str(root)}, check=False)
    assert failed.results is None and failed.returncode != 0
    assert f"Cosmos-Reason1 holoassist: not run: its clips folder {root}/holoassist/clips is absent" in failed.log


class EmptyFirstServer(EngineServer):
    """A loopback vLLM server (the tiny model's) whose answer to Cosmos-Reason1 question "[<part> #n]" has no capital
    letter (so neither official parser reads one) until its ``empty_for[n]``-th retry, the right letter in an
    <answer> tag after; each question's sampling recorded."""

    def __init__(self, checkpoint, empty_for: dict[int, int], gold: dict[int, str]):
        super().__init__("vllm", checkpoint)
        self.empty_for, self.gold = empty_for, gold
        self.asked: dict[int, list[tuple[int, float]]] = {number: [] for number in empty_for}

    def vllm_chat(self, body: dict) -> dict:
        found = re.search(r"\[\w+ #(\d)\]", json.dumps(body.get("messages")))
        if found is None:  # the backend's load check
            return super().vllm_chat(body)
        answer = super().vllm_chat({**body, "max_tokens": 1, "max_completion_tokens": 1})
        number = int(found.group(1))
        asked = self.asked[number]
        asked.append((body.get("max_completion_tokens", body.get("max_tokens")), body["temperature"]))
        read = len(asked) > self.empty_for[number]
        answer["choices"][0].update(finish_reason="stop", message={
            "role": "assistant",
            "content": f"<think>try {len(asked)}</think>" + (f"<answer>{self.gold[number]}</answer>" if read else "")})
        return answer


# run_model's sampling (new tokens, temperature) of call k (0: the first answer) per prompt; under official_letter
# the retries are greedy (top_k=1) with 1,024 + 256 k new tokens, not the first answer's 10.
SAMPLING = {"official_reasoning": lambda k: (1024 + 256 * k, min(0.6 + 0.05 * k, 0.9)),
            "official_letter": lambda k: (1024 + 256 * k if k else 10, 0.0)}
EMPTY = {"official_reasoning": "an answer with no capital letter in its <answer> tag",
         "official_letter": "an answer with no capital letter (greedy, with 1,024 + 256 k new tokens at retry k)"}


@pytest.mark.parametrize("prompt", ["official_reasoning", "official_letter"])
def test_the_suite_s_server_backend_retries_an_empty_answer_as_the_official_run_and_counts_it(fixture, tiny_model,
                                                                                              tmp_path, prompt):
    """egoplan_server against a server whose first answers are empty: each is generated again with run_model's
    sampling of the prompt (256 more tokens per retry; 0.05 more temperature, or greedy under official_letter)
    until read or 10 retries are spent; the retried answers and the one still empty are counted."""
    pairs = [pair for part, pair in fixture.questions() if part == "av"]
    gold = {number: pair.get("answer", pair.get("correct_answer")) for number, pair in enumerate(pairs)}
    empty_for = {0: 0, 1: 1, 2: 3, 3: 11}  # #3: never read
    with EmptyFirstServer(tiny_model("qwen2_vl"), empty_for, gold) as server:
        run = run_lmms_eval(model="egoplan_server", model_args=f"engine=vllm,base_url={server.base_url},model=tiny,"
                                                               "max_frames=8,retries=1,backoff=0.01,concurrency=1",
                            tasks=["cosmos_reason1_av"], output_dir=tmp_path, env=fixture.env(prompt=prompt),
                            check=False)
    assert run.returncode == 0, run.log_tail()
    assert {number: len(asked) for number, asked in server.asked.items()} == {0: 1, 1: 2, 2: 4, 3: 11}
    expected = [SAMPLING[prompt](retry) for retry in range(11)]
    assert [tokens for tokens, _ in server.asked[3]] == [tokens for tokens, _ in expected]
    assert [temperature for _, temperature in server.asked[3]] == pytest.approx(
        [temperature for _, temperature in expected], abs=1e-9)
    values = {metric: run.metric("cosmos_reason1_av", metric) for metric in
              ("accuracy_official", "empty_answer_retried", "empty_after_retries", "unparseable_official")}
    assert values == {"accuracy_official": pytest.approx(0.75, abs=1e-9), "empty_answer_retried": 3,
                      "empty_after_retries": 1, "unparseable_official": 1}
    samples = run.samples("cosmos_reason1_av")
    assert [sample["predictions"]["retries"] for sample in samples] == [0, 1, 3, 10]
    assert samples[3]["filtered_resps"] == "<think>try 1</think>"  # run_model keeps the first answer of one never read
    assert f"egoplan_server generates {EMPTY[prompt]} again, up to 10 times" in run.log
    assert "14 answers asked again" in run.log  # the bar counts the retries (1 + 3 + 10) as the questions finish


def test_a_retrying_run_shows_its_progress_keeps_every_final_answer_on_sigterm_and_the_same_command_resumes(
        tiny_model, tmp_path):
    """The README's command form (--output_path, no --use_cache) on egoplan_hf, two questions a batch, a random
    model whose answers never hold a letter in an <answer> tag, so each is asked 10 times again: the bar counts the
    answers asked again as they are asked; SIGTERM once an answer is stored keeps every final (retried) answer with
    its retry record, the last line says how many this run stored, and the same command asks only for the rest."""
    import signal

    from lmms_egoplan.compat.durability import DEFAULT_RESPONSE_CACHE
    from lmms_egoplan.demo.kit.lmms_eval_run import start_lmms_eval
    from tests.e2e.test_resume import cache_hits, stored_answers, stored_responses

    data = build_fixture(tmp_path / "data")
    output = tmp_path / "out"
    cache = output / DEFAULT_RESPONSE_CACHE
    # 240 tokens of context: about 40 new tokens per answer, so eleven generations per question take seconds
    args = dict(model="egoplan_hf", tasks=["cosmos_reason1_av"], output_dir=output, env=data.env(),
                model_args=f"pretrained={tiny_model('qwen2_vl')},max_frames=6,max_length=240",
                extra_args=["--batch_size", "2"])
    running = start_lmms_eval(**args)
    running.wait_for(lambda: stored_responses(cache) > 0, poll=0.005, what="an answer stored")
    running.signal(signal.SIGSTOP)
    running.signal(signal.SIGTERM)
    running.signal(signal.SIGCONT)
    stopped = running.wait()
    kept = stored_answers(cache, "cosmos_reason1_av")
    assert stopped.returncode == 143 and 1 <= len(kept) < 4, stopped.log_tail()
    assert "answers asked again" in stopped.log  # the bar moved with the retries, before any question was final
    assert stopped.log.splitlines()[-1].endswith(f"this run stored {len(kept)} model response(s) there"), \
        stopped.log_tail()

    resumed = run_lmms_eval(**args, check=False)
    assert resumed.returncode == 0, resumed.log_tail()
    assert cache_hits(resumed.log) == len(kept)
    samples = resumed.samples("cosmos_reason1_av")
    assert {sample["doc_id"]: sample["filtered_resps"] for sample in samples if sample["doc_id"] in kept} == kept
    assert [sample["predictions"]["retries"] for sample in samples] == [10] * 4  # the kept ones' records too
