"""Failed model requests, in process: what counts as one for each backend, a suite task leaving it out
of every metric (counted in failed_requests, marked in its sample, --predict_only too), the run's
last line and exit status, lmms-eval's response cache never keeping one, and rejudge skipping them."""

import json
import sqlite3
from argparse import Namespace
from pathlib import Path
from types import SimpleNamespace

import pytest
from lmms_eval.api.instance import GenerationResult
from lmms_eval.caching.response_cache import ResponseCache
from lmms_eval.utils import load_yaml_config

from lmms_egoplan.compat import durability
from lmms_egoplan.core.failed_requests import BUDGET_EXCEEDED, failed_request
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.harness import failed_requests as harness_failed
from lmms_egoplan.harness.failed_requests import FAILED_REQUESTS, failed_requests_verdict, rerun_command
from tests.fixtures import PROBE_TASKS

FAILED = "[LMMS_EVAL_REQUEST_FAILED after 2 retries] Error code: 500 - {'error': {'message': 'scripted status 500'}}"


@pytest.mark.parametrize("answer, backend, failed", [
    (FAILED, "openai", True),
    (FAILED, "egoplan_hf", True),  # the placeholder is lmms-eval's, whichever backend hands it over
    (BUDGET_EXCEEDED, "async_openai", True),
    (None, "openai", True),
    ("", "claude", True),
    ("   ", "gpt4v", True),
    ("Batch failed", "batch_gpt4", True),
    ("", "openai", False),  # the openai backend fails with its placeholder: an empty text is the model's
    ("", "egoplan_hf", False),  # a local model's empty generation is a real, bad answer
    ("", None, False),
    ("[SAFETY_BLOCKED:finish_reason=SAFETY]", "gemini", False),  # the provider's answer, scored
    ("B", "claude", False),
    ((0.5, True), "egoplan_hf", False),  # a likelihood
])
def test_what_counts_as_a_failed_request_for_each_backend(answer, backend, failed):
    assert (failed_request(answer, backend) is not None) == failed


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The probe task (generative, exact match) on three questions, bound to lmms-eval's openai backend."""
    data = tmp_path / "probe.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": answer} for i, answer in enumerate("ABC")]))
    monkeypatch.setenv("PROBE_DATA_FILE", str(data))
    config = load_yaml_config(str(PROBE_TASKS / "probe" / "probe.yaml"))
    task = config["class"](config=config)
    task._bind_to_backend(Namespace(model="openai_compatible"))  # an alias: the backend's canonical name counts
    return task


def evaluate(task, answers):
    """What lmms-eval does with a task's results: each metric's values over the documents that return
    it, aggregated by the task's aggregation; and the logged samples (the values each document returned)."""
    values, samples = {}, []
    for doc, answer in zip(task.eval_docs, answers):
        scores = task.process_results(doc, [answer])
        samples.append(scores)
        for metric, value in scores.items():
            values.setdefault(metric, []).append(value)
    aggregations = task.aggregation()
    return {metric: aggregations[metric](items) for metric, items in values.items()}, samples


def test_a_failed_request_is_left_out_of_every_metric_and_counted(probe):
    results, samples = evaluate(probe, ["A", FAILED, "X"])
    # exact over the answered questions only: A right, X wrong (the failure is no wrong answer).
    assert results == {"exact": 0.5, FAILED_REQUESTS: 1}
    assert samples[1] == {FAILED_REQUESTS: 1.0} and samples[0] == {"exact": 1.0, FAILED_REQUESTS: 0.0}
    assert probe.run.failed_requests == {"lmms_egoplan_probe": (1, 3)}
    answered, _ = evaluate(probe, ["A", "B", "X"])
    assert answered == {"exact": 2 / 3, FAILED_REQUESTS: 0}
    assert probe.run.failed_requests["lmms_egoplan_probe"] == (0, 3)


def test_every_request_failing_leaves_no_score_only_the_count(probe):
    results, _ = evaluate(probe, [FAILED, BUDGET_EXCEEDED, None])
    assert results == {FAILED_REQUESTS: 3}


def test_a_predict_only_run_marks_and_counts_failed_requests_too(probe):
    probe.override_metric("bypass")
    assert probe.predict_only and FAILED_REQUESTS in probe.aggregation() and FAILED_REQUESTS in probe.higher_is_better()
    _, samples = evaluate(probe, ["A", FAILED, "B"])
    assert samples[1] == {"bypass": {"failed_request": FAILED.split("\n")[0]}, FAILED_REQUESTS: 1.0}
    assert samples[0] == {"bypass": None, FAILED_REQUESTS: 0.0}


def test_the_last_line_says_how_many_failed_where_and_the_command_that_asks_them_again(monkeypatch):
    argv = ["/venv/bin/lmms-eval", "--model", "openai", "--model_args", "model=gpt,api_key=sk-secret0123456789",
            "--tasks", "t1,t2", "--output_path", "out dir", "--use_cache", "cache"]
    monkeypatch.setattr("sys.argv", argv)
    monkeypatch.setenv("LMMS_EVAL_PLUGINS", "lmms_egoplan")
    run = SuiteRun(failed_requests={"t1": (2, 10), "t2": (0, 5), "t3": (1, 1)}, response_cache_root="/abs/cache")
    status, line = failed_requests_verdict(run, [])
    assert status == harness_failed.FAILED_REQUESTS_EXIT_STATUS == 4
    assert line.startswith("3 of 16 model requests failed (t1 2, t3 1) and are left out of the scores")
    assert line.endswith("ask only them again (the answered ones come from the response cache /abs/cache) with the "
                         "same command: LMMS_EVAL_PLUGINS=lmms_egoplan lmms-eval --model openai --model_args "
                         "model=gpt,api_key=*** --tasks t1,t2 --output_path 'out dir' --use_cache cache "
                         "(your key in place of ***)")
    assert "sk-secret" not in line
    run.response_cache_root = None
    monkeypatch.setattr("sys.argv", argv[:-2])
    _, line = failed_requests_verdict(run, [Path("out dir", "openai", "20260101_000000_results.json")])  # output path
    assert ("this run had no --use_cache, so its answers were not kept: ask every request again, keeping the answers "
            "(a run after that asks only the failed ones), with: ") in line
    assert line.endswith("--output_path 'out dir' --use_cache 'out dir/response_cache' (your key in place of ***)")
    assert failed_requests_verdict(SuiteRun(failed_requests={"t1": (0, 10)}), []) is None


def test_failed_requests_end_the_run_last_with_the_highest_status(capsys):
    written = durability.WrittenFiles(tracker=None, files=[], results={
        "results": {}, "configs": {}, "versions": {}, "n-shot": {}, "higher_is_better": {}})
    run = SuiteRun(exit_reasons=[lambda run, files: (4, "requests line"), lambda run, files: (3, "judgements line")],
                   written=written)
    with pytest.raises(SystemExit) as stopped:
        durability._exit_if_asked(run)
    assert stopped.value.code == 4
    assert capsys.readouterr().err.splitlines()[-2:] == ["lmms-egoplan: judgements line", "lmms-egoplan: requests line"]


def test_rerun_command_quotes_what_the_shell_needs(monkeypatch):
    monkeypatch.delenv("LMMS_EVAL_PLUGINS", raising=False)
    assert rerun_command(argv=["x", "--tasks", "a", "--gen_kwargs", "temperature=0,top_p=1"]) == \
        "lmms-eval --tasks a --gen_kwargs temperature=0,top_p=1"


# --- lmms-eval's response cache -------------------------------------------------------------------


class AnsweringModel:
    """A backend whose answers are scripted per document; records what it was asked."""

    def __init__(self, answers):
        self.answers, self.asked = answers, []

    def generate_until(self, requests):
        self.asked += [request.doc_id for request in requests]
        return [GenerationResult(text=self.answers[request.doc_id]) for request in requests]


def request(doc_id):
    return SimpleNamespace(task_name="t", doc_id=doc_id, idx=0, args=("q", {"temperature": 0}), metadata={})


def test_the_response_cache_keeps_answers_and_asks_failed_requests_again(tmp_path, monkeypatch):
    assert durability.keep_failed_requests_out_of_the_response_cache()
    cache = ResponseCache.create(str(tmp_path), model="openai", model_args="model=m")
    model = AnsweringModel({0: "A", 1: FAILED, 2: BUDGET_EXCEEDED})
    assert [r.text for r in cache.execute(model, "generate_until", [request(0), request(1), request(2)])] == \
        ["A", FAILED, BUDGET_EXCEEDED]
    model.answers.update({1: "B", 2: "C"})
    assert cache.execute(model, "generate_until", [request(0), request(1), request(2)])[0] == "A"
    assert model.asked == [0, 1, 2, 1, 2]  # the second time, only the failed ones
    # A failure a cache already holds (written without this fix, or replayed from an audit log) is a miss.
    cache.db.execute("UPDATE responses SET response = ? WHERE doc_id = 0", (json.dumps(FAILED),))
    cache.db.commit()
    assert cache.execute(model, "generate_until", [request(0)]) == [GenerationResult(text="A")] and model.asked[-1] == 0
    cache.close()
    stored = sqlite3.connect(cache.db_path).execute("SELECT response FROM responses").fetchall()
    assert sorted(json.loads(row[0]) for row in stored) == ["A", "B", "C"]


# --- rejudge --------------------------------------------------------------------------------------


def test_rejudge_counts_failed_requests_and_judges_the_rest(tmp_path):
    from lmms_egoplan import suite
    from lmms_egoplan.harness.rejudge import read_logged_items
    from lmms_egoplan.judge.protocol import JudgeRequest
    from lmms_egoplan.judge.rubrics import judge_parts_item

    item = judge_parts_item({"": JudgeRequest.from_prompt("1", "rate it")}, "egothink")
    rows = [{"doc_id": 0, "score": item, FAILED_REQUESTS: 0.0}, {"doc_id": 1, FAILED_REQUESTS: 1.0},
            {"doc_id": 2, "bypass": {"failed_request": FAILED}}]
    samples = tmp_path / "20261123_101010_samples_ego_think_counting.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    logged = read_logged_items([samples], suite.rubrics())
    assert logged.failed_requests == {"ego_think_counting": 2} and logged.unusable == {"ego_think_counting": []}
    assert len(logged.columns["ego_think_counting"]["score"]) == 1


def test_a_task_whose_every_request_failed_says_why_it_has_no_score_in_tables():
    from lmms_egoplan.report.metric_roles import BOOKKEEPING, unscored_reason

    assert unscored_reason({FAILED_REQUESTS: 8.0}, 8) == "8 of 8 model requests failed"
    assert unscored_reason({FAILED_REQUESTS: 1.0, "accuracy": 0.5}, 8) is None
    assert FAILED_REQUESTS in BOOKKEEPING  # a count, shown after the scores
