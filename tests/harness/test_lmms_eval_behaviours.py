"""What lmms-eval does in a run of the suite, tested through lmms-eval's own functions (its CLI in this process, its
evaluator, response cache and results writer), whichever gives it: the suite's workaround (``lmms_egoplan.compat``,
switched on as a run of the suite switches it), or lmms-eval patched with the fix of docs/upstream/ and the
workaround switched off (tests/e2e/test_upstream_patches.py runs these tests so; docs/upstream/README.md names
each patch's tests). A test asserts the behaviour, not the wording of either."""

from __future__ import annotations

import argparse
import atexit
import functools
import http.server
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from lmms_eval import __main__ as lmms_eval_cli
from lmms_eval import evaluator
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from lmms_eval.caching.response_cache import ResponseCache
from lmms_eval.loggers.evaluation_tracker import EvaluationTracker
from lmms_eval.tasks import TaskManager
from loguru import logger

from lmms_egoplan.compat import durability, results, secrets, tasks
from lmms_egoplan.core.request_facts import AnswerRetries, mark_retries, retries_of
from lmms_egoplan.core.run import SuiteRun
from tests.fixtures import PROBE_TASKS

SUITE_TASKS = str(Path(__import__("lmms_egoplan.tasks").tasks.__path__[0]))
KEY = "sk-test-0123456789abcdef"


class ModelBuilt(Exception):
    """Raised where lmms-eval builds the model: the run got that far."""


@pytest.fixture
def lmms_eval_log():
    """lmms-eval's log as its CLI leaves it (every sink replaced), put back after the test, the exit guard too."""
    yield
    logger.remove()
    logger.add(sys.stderr)


def index_only(*folders):
    """lmms-eval's TaskManager indexing only ``folders`` (and LMMS_EVAL_PLUGINS'), not its 1,900 built-in YAMLs."""
    class CliTaskManager(TaskManager):
        def __init__(self, verbosity="INFO", include_path=None, include_defaults=True, model_name=None):
            paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
            super().__init__(verbosity, [*paths, *folders] or None, False, model_name)

    return CliTaskManager


def cli(monkeypatch, argv, *, folders=(), single=None) -> int | None:
    """lmms-eval's ``cli_evaluate`` run in this process on ``argv`` (``cli_evaluate_single`` replaced where given):
    its exit status (None where it returned)."""
    monkeypatch.setattr(sys, "argv", ["lmms-eval", *argv])
    monkeypatch.setattr(lmms_eval_cli, "TaskManager", index_only(*folders))
    if single is not None:
        monkeypatch.setattr(lmms_eval_cli, "cli_evaluate_single", single)
    try:
        lmms_eval_cli.cli_evaluate()
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    return None


def cli_args(monkeypatch, argv, *folders) -> argparse.Namespace:
    monkeypatch.setattr(sys, "argv", ["lmms-eval", *argv])
    monkeypatch.setattr(lmms_eval_cli, "TaskManager", index_only(*folders))
    return lmms_eval_cli.parse_eval_args()[1]


def plain_task(folder: Path, name: str = "plain_probe") -> Path:
    """A task written with lmms-eval's own mechanisms only, on a local JSON file of two questions."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "data.json").write_text(json.dumps([{"question": "Which colour?", "answer": "red"},
                                                  {"question": "How many?", "answer": "2"}]))
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'data.json'}\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_visual: null\ndoc_to_text: question\n"
        "doc_to_target: answer\ngeneration_kwargs:\n  max_new_tokens: 4\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1\n")
    return folder


# --- the CLI: plugin tasks, exit status, missing tasks (docs/upstream/02, 03, 04) -------------------------------

def test_the_plugin_variable_gets_the_suites_tasks_indexed(monkeypatch, switch_on):
    switch_on(tasks.enable_plugin_task_discovery)
    monkeypatch.setenv("LMMS_EVAL_PLUGINS", "lmms_egoplan")

    class Matched(Exception):
        pass

    def match_tasks(self, task_list):
        raise Matched(self.all_tasks)

    monkeypatch.setattr(TaskManager, "match_tasks", match_tasks)
    with pytest.raises(Matched) as matched:
        lmms_eval_cli.cli_evaluate_single(cli_args(monkeypatch, ["--model", "dummy", "--tasks", "egoplan_val"]))
    assert {"egoplan_val", "ego_think", "actplan1k"} <= set(matched.value.args[0])


def failing_evaluation(args):
    """``cli_evaluate_single`` failing where lmms-eval's own does: its task index built, then an error."""
    lmms_eval_cli.TaskManager(args.verbosity)
    raise RuntimeError("the evaluation failed")


def failing_inside_simple_evaluate(args):
    """``cli_evaluate_single`` whose ``simple_evaluate`` fails (no such backend)."""
    lmms_eval_cli.TaskManager(args.verbosity)
    evaluator.simple_evaluate(model="no_such_backend", tasks=["plain_probe"], cli_args=args)


def test_a_failed_evaluation_exits_non_zero(monkeypatch, switch_on, lmms_eval_log):
    switch_on(durability.fail_runs_with_failed_tasks)
    assert cli(monkeypatch, ["--model", "dummy", "--tasks", "plain_probe"], single=failing_evaluation) not in (0, None)


def configs(folder: Path, *tasks: str) -> Path:
    """A ``--config`` file of one run per task (lmms-eval's CLI runs them one after another in one process)."""
    path = folder / "runs.yaml"
    path.write_text("".join(f"- {{model: dummy, tasks: {task}}}\n" for task in tasks))
    return path


@pytest.mark.parametrize("fails_where", ["after simple_evaluate", "inside simple_evaluate"])
def test_a_failed_evaluation_exits_non_zero_after_the_other_configs_have_run(fails_where, monkeypatch, switch_on,
                                                                            lmms_eval_log, tmp_path):
    """Patch 03's behaviour for a ``--config`` file of several runs: the runs after the failed one still run."""
    switch_on(durability.fail_runs_with_failed_tasks)
    evaluated = []

    def single(args):
        evaluated.append(args.tasks)
        if args.tasks == "failing":
            (failing_evaluation if fails_where == "after simple_evaluate" else failing_inside_simple_evaluate)(args)
        lmms_eval_cli.TaskManager(args.verbosity)
        return None, None

    assert cli(monkeypatch, ["--config", str(configs(tmp_path, "passing", "failing", "passing_too"))],
               single=single) not in (0, None)
    assert evaluated == ["passing", "failing", "passing_too"]


def test_a_failed_evaluations_traceback_goes_to_a_file_and_what_to_fix_ends_the_output(monkeypatch, switch_on,
                                                                                       lmms_eval_log, capfd, tmp_path):
    """Suite policy (issue 57), not lmms-eval behaviour: patch 03's test above is the behaviour its patch replaces.
    The file is in the run's output folder (issue 74)."""
    switch_on(durability.fail_runs_with_failed_tasks)
    assert cli(monkeypatch, ["--model", "dummy", "--tasks", "plain_probe", "--output_path", str(tmp_path / "out")],
               single=failing_inside_simple_evaluate) == 1
    printed = capfd.readouterr().err
    assert "Traceback" not in printed and printed.splitlines()[-1].startswith("lmms-egoplan: error: ")
    assert "no_such_backend" in printed.splitlines()[-1]
    [named] = [line for line in printed.splitlines() if line.startswith("lmms-egoplan: lmms-eval's traceback")]
    trace = Path(named.rpartition(" is in ")[2])
    assert trace.parent == tmp_path / "out"
    assert trace.read_text().startswith("Traceback") and "no_such_backend" in trace.read_text()


def test_a_run_without_tasks_exits_non_zero(monkeypatch, switch_on, lmms_eval_log):
    switch_on(durability.fail_runs_with_failed_tasks)
    assert cli(monkeypatch, ["--model", "dummy"]) not in (0, None)


# --- what lmms-eval builds first, and the suite's tasks as lmms-eval builds them (05, 06, 07) ---------------

def test_a_suite_task_with_a_wrong_setting_fails_before_the_model_is_built(monkeypatch, switch_on):
    switch_on(tasks.check_suite_tasks_before_the_model)
    monkeypatch.setenv("EGOPLAN_NUM_FRAMES", "abc")
    monkeypatch.setattr(evaluator.models, "get_model", lambda *args, **kwargs: (_ for _ in ()).throw(ModelBuilt()))
    with pytest.raises(Exception) as failed:  # --verbosity DEBUG: raised as itself, as lmms-eval's CLI re-raises there
        evaluator.simple_evaluate(model="dummy", tasks=["egoplan_val"],
                                  task_manager=TaskManager(include_path=SUITE_TASKS, include_defaults=False),
                                  cli_args=argparse.Namespace(model="dummy", output_path=None, verbosity="DEBUG"))
    assert not isinstance(failed.value, ModelBuilt) and "EGOPLAN_NUM_FRAMES" in str(failed.value)


@pytest.mark.parametrize("model, module", [("openai", None), ("qwen2_vl", "lmms_eval.models.simple.qwen2_vl")])
def test_a_backend_that_cannot_serve_a_suite_task_is_refused_before_it_is_built(model, module, monkeypatch, switch_on,
                                                                               tmp_path):
    """egoplan_val ranks candidates by likelihood: openai's chat backend only generates; qwen2_vl's class computes
    none, which its source says before its module (importing decord) is imported (issue 57)."""
    import sys

    from lmms_egoplan.demo.egoplan import build_fixture

    switch_on(tasks.check_suite_tasks_before_the_model)
    for name, value in build_fixture(tmp_path / "egoplan").env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(evaluator.models, "get_model", lambda *args, **kwargs: (_ for _ in ()).throw(ModelBuilt()))
    imported_before = module in sys.modules
    with pytest.raises(Exception) as refused:  # --verbosity DEBUG: raised as itself
        evaluator.simple_evaluate(model=model, tasks=["egoplan_val"],
                                  task_manager=TaskManager(include_path=SUITE_TASKS, include_defaults=False),
                                  cli_args=argparse.Namespace(model=model, output_path=None, verbosity="DEBUG"))
    assert not isinstance(refused.value, ModelBuilt) and "--model egoplan_hf" in str(refused.value)
    assert f"run the generative task egoplan_val_gen with --model {model}" in str(refused.value)
    if module is not None:
        assert "does not implement loglikelihood" in str(refused.value)
        assert imported_before or module not in sys.modules


def probe_task(monkeypatch, folder: Path):
    """The suite's probe task (a ``class:`` task, tests/fixtures/probe_tasks) as lmms-eval builds it for ``dummy``."""
    data = folder / "probe.json"
    data.write_text(json.dumps([{"question": "Which colour?", "answer": "red"}]))
    monkeypatch.setenv("PROBE_DATA_FILE", str(data))
    manager = TaskManager(include_path=str(PROBE_TASKS), include_defaults=False, model_name="dummy")
    return manager.load_task_or_group(["lmms_egoplan_probe"])["lmms_egoplan_probe"]


def test_a_suite_class_task_gets_the_prompt_preset_of_the_runs_model(monkeypatch, tmp_path):
    task = probe_task(monkeypatch, tmp_path)
    task.args = argparse.Namespace(model="dummy", output_path=None)  # what lmms-eval hands every task
    task.build_all_requests(limit=1, rank=0, world_size=1)
    assert task.instances[0].arguments[0].endswith(" (dummy preset)")


def test_a_scoring_error_of_a_suite_task_surfaces_at_once_by_its_name(monkeypatch, tmp_path):
    import time

    task = probe_task(monkeypatch, tmp_path)
    started = time.monotonic()
    with pytest.raises(AttributeError):  # lmms-eval's scoring calls .strip() on the answer
        task.process_results(task.test_docs()[0], [123])
    assert time.monotonic() - started < 1.5  # lmms-eval's retry: 5 tries, 2 s apart


# --- the response cache (08, 14, 15) ------------------------------------------------------------------------

def questions(count: int, first: int = 0) -> list[Instance]:
    return [Instance("generate_until", (f"question {doc}", {"max_new_tokens": 8, "temperature": 0}, None, doc, "task",
                                        "test"), 0, {"task": "task", "doc_id": doc, "repeats": 1})
            for doc in range(first, first + count)]


class Model:
    """A backend answering every question, or failing at document ``fail_at``."""

    batch_size = 1

    def __init__(self, fail_at: int | None = None, answers: dict | None = None):
        self.fail_at, self.answers, self.asked = fail_at, answers or {}, []

    def generate_until(self, requests):
        if any(request.doc_id == self.fail_at for request in requests):
            raise RuntimeError(f"document {self.fail_at} cannot be read")
        self.asked += [request.doc_id for request in requests]
        return [self.answers.get(request.doc_id, f"answer {request.doc_id}") for request in requests]


def open_cache(root: Path, model_args: str = "pretrained=tiny") -> ResponseCache:
    return ResponseCache.create(str(root), model="model", model_args=model_args)


def run_cache(run: SuiteRun, root: Path) -> ResponseCache:
    """The response cache of ``run``'s evaluation, handed the run as its ``simple_evaluate`` call hands it."""
    cache = open_cache(root)
    durability.join_response_cache(run, cache)
    return cache


@pytest.fixture
def cache_workarounds(switch_on):
    switch_on(durability.keep_responses_of_stopped_runs, durability.keep_failed_requests_out_of_the_response_cache,
              secrets.keep_api_keys_out_of_the_response_cache)


def test_a_run_that_stops_part_way_keeps_what_the_model_computed(tmp_path, cache_workarounds):
    cache = open_cache(tmp_path)
    with pytest.raises(RuntimeError, match="document 6"):
        cache.execute(Model(fail_at=6), "generate_until", questions(12))
    cache.finalize(success=False)  # lmms-eval's finally
    model = Model()
    open_cache(tmp_path).execute(model, "generate_until", questions(12))
    assert model.asked == [6, 7, 8, 9, 10, 11]  # chunks of whole documents; the failing one a document at a time


def test_a_backend_handing_over_each_response_has_it_kept_at_once(tmp_path, cache_workarounds):
    class Handing(Model):  # as egoplan_hf
        response_sink = None

        def generate_until(self, requests):
            for request in requests:
                if request.doc_id == 3:
                    raise RuntimeError("out of memory")
                self.response_sink(request, f"answer {request.doc_id}")
            return [f"answer {request.doc_id}" for request in requests]

    cache = open_cache(tmp_path)
    with pytest.raises(RuntimeError):
        cache.execute(Handing(), "generate_until", questions(8))
    cache.finalize(success=False)
    model = Model()
    open_cache(tmp_path).execute(model, "generate_until", questions(8))
    assert model.asked == [3, 4, 5, 6, 7]


def test_the_responses_of_a_killed_run_are_read_by_the_next_run(tmp_path, cache_workarounds):
    cache = open_cache(tmp_path)
    cache.execute(Model(), "generate_until", questions(4))
    cache.close()  # killed: it never finalized
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for owner in Path(cache._run_dir).glob("*.owner.json"):  # the folder's writer, a process that has ended
        owner.write_text(json.dumps({**json.loads(owner.read_text()), "pid": int(ended.stdout)}))
    model = Model()
    open_cache(tmp_path).execute(model, "generate_until", questions(6))
    assert model.asked == [4, 5]


def test_a_cache_on_a_full_disk_is_named_and_a_response_it_cannot_store_stops_the_model(small_disk, cache_workarounds,
                                                                                     monkeypatch):
    # lmms-eval patched (docs/upstream/08) stores per chunk of at least this many requests; the suite per 4 documents
    monkeypatch.setenv("LMMS_CACHE_CHECKPOINT_INTERVAL", "4")
    disk = small_disk("2m")
    root = disk.path / "cache"
    model = Model()
    cache = open_cache(root)
    model.generate_until = functools.partial(lambda answer, requests: (disk.fill() if len(model.asked) == 4 else None)
                                             or answer(requests), model.generate_until)
    with pytest.raises(OSError) as stopped:
        cache.execute(model, "generate_until", questions(40))
    assert "disk is full" in str(stopped.value) or "No space left" in str(stopped.value)
    assert model.asked == [0, 1, 2, 3, 4, 5, 6, 7]  # nothing computed after the chunk that met the full disk
    assert all(json.loads(line) for line in open(cache.audit_path, encoding="utf-8"))  # whole lines
    cache.finalize(success=False)  # the merge fails on the full disk: said, not raised
    assert not (root / "runs" / ".merge.lock").exists()
    with pytest.raises(OSError) as full:
        open_cache(root)
    assert str(root) in str(full.value) and ("disk is full" in str(full.value) or "No space left" in str(full.value))


def test_a_failed_request_is_asked_again_and_never_served_from_the_cache(tmp_path, cache_workarounds):
    failed, budget = "[LMMS_EVAL_REQUEST_FAILED after 5 retries] Error code: 500", "[LMMS_EVAL_BUDGET_EXCEEDED]"
    model = Model(answers={0: "A", 1: failed, 2: budget})
    cache = open_cache(tmp_path)
    cache.execute(model, "generate_until", questions(3))
    model.answers.update({1: "B", 2: "C"})
    assert cache.execute(model, "generate_until", questions(3)) == ["A", "B", "C"]
    assert model.asked == [0, 1, 2, 1, 2]
    cache.db.execute("UPDATE responses SET response = ? WHERE doc_id = 0", (json.dumps(failed),))  # stored before
    cache.db.commit()
    cache.execute(model, "generate_until", questions(1))
    assert model.asked[-1] == 0


def sampled(count: int, task: str = "cosmos_reason1_av", greedy: bool = False) -> list[Instance]:
    """Sampled generation requests (Cosmos-Reason1's official_reasoning kwargs; ``greedy``: official_letter's) of
    ``task``'s first documents."""
    kwargs = ({"max_new_tokens": 10, "temperature": 0} if greedy else
              {"max_new_tokens": 1024, "temperature": 0.6, "top_p": 0.95, "do_sample": True})
    return [Instance("generate_until", (f"question {doc}", kwargs, None, doc, task, "test"), 0,
                     {"task": task, "doc_id": doc, "repeats": 1}) for doc in range(count)]


class Sampling(Model):
    """Draws a new answer each time; as egoplan_hf, hands each over as computed, answer k asked k times again."""

    response_sink = None

    def generate_until(self, requests):
        answers = []
        for request in requests:
            self.asked.append((request.task_name, request.doc_id))
            answers.append(f"answer {request.doc_id}, draw {len(self.asked)}")
            mark_retries(request, AnswerRetries(request.doc_id, request.doc_id == 2))
            self.response_sink(request, answers[-1])
        return answers


def test_a_sampled_suite_run_resumes_with_its_retry_records_and_another_seed_draws_anew(tmp_path, cache_workarounds):
    run = SuiteRun()
    assert durability.resume_sampled_runs(run, (0, 1234, 1234, 1234))
    model, cache = Sampling(), run_cache(run, tmp_path)
    first = cache.execute(model, "generate_until", sampled(2))  # stopped after two answers: a failed run
    cache.finalize(success=False)
    run, model.asked = SuiteRun(), []  # the next process
    durability.resume_sampled_runs(run, (0, 1234, 1234, 1234))
    requests = [*sampled(3), *sampled(2, "seedbench")]  # lmms-eval's own task beside the suite's
    resumed = run_cache(run, tmp_path).execute(model, "generate_until", requests)
    assert resumed[:2] == first and model.asked == [("cosmos_reason1_av", 2), ("seedbench", 0), ("seedbench", 1)]
    assert [retries_of(request) for request in requests[:3]] == [
        (0, False), (1, False), (2, True)]  # the served answers' records, and the one computed now
    cache.finalize(success=True)
    assert durability.resume_sampled_runs(run, (1, 2, 3, 4))
    plain = Model()  # lmms-eval's backends: stored per chunk
    cache = run_cache(run, tmp_path)
    cache.execute(plain, "generate_until", sampled(3))
    cache.execute(plain, "generate_until", sampled(3))
    assert plain.asked == [0, 1, 2]  # another seed asks again, once
    assert not durability.resume_sampled_runs(run, (None, 1234, 1234, 1234))  # unseeded: lmms-eval's rule
    cache.execute(plain, "generate_until", sampled(1))
    assert plain.asked[-1] == 0


def test_greedy_suite_answers_served_by_the_cache_keep_their_retry_records(tmp_path, cache_workarounds):
    run = SuiteRun()
    durability.resume_sampled_runs(run, (0, 1234, 1234, 1234))
    model, cache = Sampling(), run_cache(run, tmp_path)
    first = cache.execute(model, "generate_until", sampled(3, greedy=True))
    cache.finalize(success=True)
    run, served = SuiteRun(), sampled(3, greedy=True)  # the next run's requests, asked once more
    durability.resume_sampled_runs(run, (0, 1234, 1234, 1234))
    assert run_cache(run, tmp_path).execute(model, "generate_until", served) == first
    assert len(model.asked) == 3  # none asked again
    assert [retries_of(request) for request in served] == [(0, False), (1, False), (2, True)]


def test_the_response_cache_holds_no_api_key(tmp_path, cache_workarounds):
    cache = open_cache(tmp_path, f"model=m,api_key={KEY}")
    cache.close()
    databases = [cache.db_path, *map(str, tmp_path.glob("cache.db"))]
    for database in databases:
        assert KEY not in json.dumps(sqlite3.connect(database).execute("SELECT * FROM meta").fetchall())
    image_tokens = [open_cache(tmp_path / token, f"model=m,image_token={token}") for token in ("image", "img")]
    assert image_tokens[0]._model_fingerprint_hash != image_tokens[1]._model_fingerprint_hash  # a prompt changes
    for other in image_tokens:
        other.close()


# --- a run's end: SIGTERM, the summary line, the results and samples files (09, 10, 11, 12, 13, 15, 16) ------

@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_sigterm_and_ctrl_c_stop_a_run_after_its_cleanup_with_no_traceback(signum, monkeypatch, switch_on,
                                                                          lmms_eval_log, capsys):
    """Either signal, sent during the evaluation, unwinds the run (its ``finally`` blocks run) and ends the process
    with the status a shell reports for it, 128 + the signal: SIGTERM's exits 143; Ctrl-C's exits 130, or ends by
    SIGINT as Python's own Ctrl-C does (its ``KeyboardInterrupt`` reaches the interpreter, which prints it with the
    exception hook and then ends by SIGINT), with no traceback."""
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # the stop may set the hook the process ends with
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    cleaned_up = []

    def single(args):
        switch_on(durability.stop_cleanly_on_sigterm)  # where a run of the suite switches it on: inside lmms-eval's CLI
        # Sent only where a handler unwinds the run: SIGTERM's default would end the test process itself.
        assert signal.getsignal(signum) not in (signal.SIG_DFL, None), f"{signum.name} would end the process at once"
        try:
            os.kill(os.getpid(), signum)
        finally:
            cleaned_up.append(True)

    try:
        status = cli(monkeypatch, ["--model", "dummy", "--tasks", "plain_probe"], single=single)
    except KeyboardInterrupt as interrupted:  # what the interpreter does with it: print it, end by SIGINT
        sys.excepthook(type(interrupted), interrupted, interrupted.__traceback__)
        status = 128 + signal.SIGINT
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        atexit.unregister(durability._report_stop)  # the suite's last line, said as this test process ends
    assert status == 128 + signum and cleaned_up == [True]
    assert "Traceback" not in capsys.readouterr().err


def test_the_summary_line_holds_no_api_key(monkeypatch, switch_on, lmms_eval_log, tmp_path, capsys):
    def simple_evaluate(model=None, model_args=None, cli_args=None, **kwargs):
        assert KEY in model_args  # the backend is built with its key
        return {"results": {}, "configs": {}, "config": {"batch_sizes": []}, "versions": {}, "n-shot": {},
                "higher_is_better": {}}

    monkeypatch.setattr(evaluator, "simple_evaluate", simple_evaluate)
    switch_on(secrets.keep_api_keys_out_of_the_run_summary)
    folder = plain_task(tmp_path / "tasks")
    cli(monkeypatch, ["--model", "openai", "--model_args", f"model_version=m,api_key={KEY}", "--tasks", "plain_probe"],
        folders=[str(folder)])
    printed = capsys.readouterr().out
    assert "openai (model_version=m,api_key=[REDACTED])" in printed and KEY not in printed


def tracker(folder: Path) -> EvaluationTracker:
    written = EvaluationTracker(output_path=str(folder))
    written.general_config_tracker.model_name_sanitized = "model"
    return written


def refuse(constant):
    raise ValueError(f"{constant} is not JSON")


def test_the_results_and_samples_files_are_strict_json(tmp_path, switch_on):
    switch_on(results.write_results_as_strict_json)
    writer = tracker(tmp_path)
    scores = {"results": {"task": {"score,none": float("nan"), "n": [1.0, float("inf")]}}, "configs": {"task": {}}}
    writer.save_results_aggregated(results=scores, samples=None, datetime_str="20260101_000000")
    written = json.loads((tmp_path / "model" / "20260101_000000_results.json").read_text(), parse_constant=refuse)
    assert written["results"]["task"] == {"score,none": None, "n": [1.0, None]}
    sample = {"doc_id": 0, "doc": {}, "target": "A", "arguments": [("q", {})], "resps": [["A"]],
              "filtered_resps": ["A"], "score": float("nan")}
    writer.save_results_samples(task_name="task", samples=[sample])
    line = (tmp_path / "model" / "20260101_000000_samples_task.jsonl").read_text()
    assert json.loads(line, parse_constant=refuse)["score"] is None


def test_a_results_or_samples_file_that_cannot_be_written_whole_fails_the_run(small_disk, switch_on):
    switch_on(results.fail_runs_whose_files_are_cut)
    disk = small_disk()
    writer = tracker(disk.path)
    disk.fill(leave=8192)
    scores = {"results": {"task": {"accuracy,none": 0.5}}, "configs": {"task": {}}, "note": "x" * 20_000}
    with pytest.raises(OSError):
        writer.save_results_aggregated(results=scores, samples=None, datetime_str="20260101_000000")
    assert not (disk.path / "model" / "20260101_000000_results.json").exists()  # no file cut in its JSON
    disk.free()
    writer.save_results_aggregated(results=scores, samples=None, datetime_str="20260101_000000")
    disk.fill(leave=8192)
    samples = [{"doc_id": doc, "doc": {}, "target": "A", "arguments": [("q", {})], "resps": [["A"]],
                "filtered_resps": ["A"], "note": "x" * 2000} for doc in range(10)]
    with pytest.raises(OSError):
        writer.save_results_samples(task_name="task", samples=samples)
    lines = (disk.path / "model" / "20260101_000000_samples_task.jsonl").read_text().splitlines()
    assert [json.loads(line)["doc_id"] for line in lines] == list(range(len(lines))) and len(lines) < 10


class BrokenBytes(lmms):
    """An API backend whose answer holds a lone surrogate (broken bytes)."""

    def generate_until(self, requests):
        return ["Two plates \udcff." for _ in requests]

    def loglikelihood(self, requests):
        raise NotImplementedError

    def generate_until_multi_round(self, requests):
        raise NotImplementedError


def test_a_lone_surrogate_reaches_the_task_and_the_samples_file_as_u_fffd(tmp_path, switch_on):
    switch_on(results.clean_lone_surrogates)
    folder = plain_task(tmp_path / "tasks")
    run = evaluator.simple_evaluate(model=BrokenBytes(), tasks=["plain_probe"], log_samples=True,
                                    task_manager=TaskManager(include_path=str(folder), include_defaults=False))
    logged = run["samples"]["plain_probe"]
    assert logged[0]["resps"] == [["Two plates \ufffd."]]
    writer = tracker(tmp_path / "out")
    writer.date_id = "20260101_000000"
    writer.save_results_samples(task_name="plain_probe", samples=logged)
    written = (tmp_path / "out" / "model" / "20260101_000000_samples_plain_probe.jsonl").read_text().splitlines()
    assert len(written) == 2 and json.loads(written[0])["filtered_resps"] == "Two plates \ufffd."


def test_a_lone_surrogate_is_kept_in_the_response_cache_as_u_fffd_and_read_back_so(tmp_path, switch_on):
    """With a response cache (the suite's runs have one by default), lmms-eval writes the text into the cache's
    audit log before the evaluator unwraps it: without the fix, UnicodeEncodeError ends the run there."""
    switch_on(results.clean_lone_surrogates)
    folder = plain_task(tmp_path / "tasks")
    for _ in range(2):  # the second run reads the cached text back
        run = evaluator.simple_evaluate(model=BrokenBytes(), tasks=["plain_probe"], log_samples=True,
                                        use_cache=str(tmp_path / "cache"),
                                        task_manager=TaskManager(include_path=str(folder), include_defaults=False))
        assert run["samples"]["plain_probe"][0]["resps"] == [["Two plates \ufffd."]]
    audit = "".join(path.read_text(encoding="utf-8") for path in (tmp_path / "cache").rglob("*.audit.jsonl"))
    assert "Two plates \ufffd." in audit


class EchoingServer(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that answers 401, echoing the request's Authorization header."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": {"message": f"bad credentials: Authorization: {self.headers['Authorization']}"}})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_a_key_a_server_echoes_reaches_no_log_line_samples_file_or_cache_audit_log(tmp_path, switch_on,
                                                                                   cache_workarounds):
    from lmms_eval.models.simple.openai import OpenAICompatible

    switch_on(secrets.keep_secrets_out_of_lmms_evals_error_texts)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EchoingServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    logged = []
    sink = logger.add(lambda message: logged.append(str(message)), level="DEBUG", format="{message}")
    try:
        model = OpenAICompatible(model_version="m", base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
                                 api_key=KEY, max_retries=1, retry_backoff_s=0)
        model.task_dict = {"task": {"test": [{}]}}
        request = Instance("generate_until", ("question", {"max_new_tokens": 4}, lambda doc: [], 0, "task", "test"),
                           0, {"task": "task", "doc_id": 0, "repeats": 1})
        cache = open_cache(tmp_path / "cache", "model_version=m")
        answer = cache.execute(model, "generate_until", [request])[0]
    finally:
        logger.remove(sink)
        server.shutdown()
    text = getattr(answer, "text", answer)
    writer = tracker(tmp_path / "out")
    writer.date_id = "20260101_000000"
    writer.save_results_samples(task_name="task", samples=[{"doc_id": 0, "doc": {}, "target": "A",
                                                            "arguments": [("q", {})], "resps": [[text]],
                                                            "filtered_resps": [text]}])
    cache.close()
    samples = (tmp_path / "out" / "model" / "20260101_000000_samples_task.jsonl").read_text()
    audit = Path(cache.audit_path).read_text()
    assert "LMMS_EVAL_REQUEST_FAILED" in samples and "401" in samples and "401" in audit  # the failure is kept
    assert any("401" in line for line in logged)
    assert KEY not in samples and KEY not in audit and not any(KEY in line for line in logged)
