"""The lmms-eval compatibility layer: each workaround applies only where lmms-eval still has its bug,
and only to runs that use the suite; a run that uses none of the suite is lmms-eval's own."""

import inspect
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import tenacity
from lmms_eval.api import instance
from lmms_eval.api.task import ConfigurableTask
from lmms_eval.caching.response_cache import _SCHEMA_SQL, ResponseCache
from lmms_eval.loggers.evaluation_tracker import EvaluationTracker
from lmms_eval.tasks import TaskManager

from lmms_egoplan import compat
from lmms_egoplan.compat import durability
from lmms_egoplan.compat import results as compat_results
from lmms_egoplan.compat import tasks as compat_tasks
from lmms_egoplan.core.run_state import RUN
from lmms_egoplan.fixtures.lmms_eval_run import OFFLINE_ENV

PROBE_TASKS = Path(__file__).parent / "fixtures" / "probe_tasks"

# Runs lmms-eval's CLI in-process, then prints which of the suite's workarounds are active.
# "alone": the suite's entry point is hidden from lmms-eval, as if the suite were not installed.
CHILD = r"""
import importlib.metadata as metadata, json, sys
mode, argv = sys.argv[1], sys.argv[2:]
if mode == "alone":
    all_entry_points = metadata.entry_points
    class WithoutTheSuite:
        def select(self, **params):
            return metadata.EntryPoints(ep for ep in all_entry_points().select(**params)
                                        if not ep.value.startswith("lmms_egoplan"))
    metadata.entry_points = lambda **params: WithoutTheSuite().select(**params) if params else WithoutTheSuite()
sys.argv = ["lmms-eval", *argv]
status = 0
try:
    from lmms_eval.cli.dispatch import main
    main()
except SystemExit as stop:
    status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
finally:
    from lmms_eval.api import instance
    from lmms_eval.tasks import TaskManager
    run_state = sys.modules.get("lmms_egoplan.core.run_state")
    print("COMPAT-STATE " + json.dumps({
        "suite_loaded": "lmms_egoplan" in sys.modules,
        "loglikelihood_pairs_kept": getattr(instance.unwrap_generation_output, "_keeps_loglikelihood_pairs", False),
        "plugin_tasks_indexed": getattr(TaskManager.__init__, "_includes_plugin_tasks", False),
        "exit_guard": run_state is not None and run_state.RUN.exit_guard_sink is not None,
    }))
sys.exit(status)
"""


def run_cli(mode: str, tasks: str, output: Path, *, include_path: Path, env: dict | None = None):
    """``(exit status, workaround state, results or None, log)`` of one lmms-eval run (dummy model)."""
    output.mkdir(parents=True)
    argv = ["--model", "dummy", "--tasks", tasks, "--include_path", str(include_path),
            "--output_path", str(output), "--log_samples"]
    run_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    run_env.pop("LMMS_EVAL_PLUGINS", None)
    completed = subprocess.run([sys.executable, "-c", CHILD, mode, *argv], env=run_env, cwd=output,
                               capture_output=True, text=True, timeout=600)
    log = completed.stdout + completed.stderr
    state = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("COMPAT-STATE "))[13:])
    results_files = sorted(output.rglob("*_results.json"))
    results = json.loads(results_files[-1].read_text()) if results_files else None
    return completed.returncode, state, results, log


def plain_lmms_eval_task(folder: Path, data_file: Path) -> Path:
    """A task written only with lmms-eval's own mechanisms (no class, no function of the suite)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plain_probe.yaml").write_text(
        "task: plain_probe\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data_file))}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_visual: null\n"
        "doc_to_text: question\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  max_new_tokens: 4\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1\n")
    return folder


def comparable(results: dict) -> dict:
    return {task: {k: v for k, v in metrics.items()} for task, metrics in results["results"].items()}


@pytest.mark.e2e
def test_a_run_without_the_suite_is_lmms_evals_own(tmp_path):
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 else "B"} for i in range(4)]))
    tasks = plain_lmms_eval_task(tmp_path / "tasks", data)
    installed = run_cli("installed", "plain_probe", tmp_path / "installed", include_path=tasks)
    alone = run_cli("alone", "plain_probe", tmp_path / "alone", include_path=tasks)
    assert installed[0] == alone[0] == 0, installed[3][-3000:]
    assert installed[2] is not None and comparable(installed[2]) == comparable(alone[2])
    # The suite's entry point was loaded (and only there), and switched nothing on.
    assert installed[1] == {"suite_loaded": True, "loglikelihood_pairs_kept": False, "plugin_tasks_indexed": False,
                            "exit_guard": False}
    assert alone[1] == {**installed[1], "suite_loaded": False}

    # A failing run of lmms-eval's own task keeps lmms-eval's exit status (0) with the suite installed.
    data.unlink()
    failed_installed = run_cli("installed", "plain_probe", tmp_path / "failed_installed", include_path=tasks)
    failed_alone = run_cli("alone", "plain_probe", tmp_path / "failed_alone", include_path=tasks)
    assert failed_installed[0] == failed_alone[0] == 0
    assert "Error during evaluation" in failed_installed[3] and failed_installed[2] is None

    # A task name that exists nowhere, in a run that names nothing of the suite: lmms-eval's answer, exit 0.
    typo_installed = run_cli("installed", "plain_probe_typo", tmp_path / "typo_installed", include_path=tasks)
    typo_alone = run_cli("alone", "plain_probe_typo", tmp_path / "typo_alone", include_path=tasks)
    assert typo_installed[0] == typo_alone[0] == 0
    for log in (typo_installed[3], typo_alone[3]):
        assert "Tasks not found: plain_probe_typo" in log and "lmms-egoplan" not in log and "did you mean" not in log


@pytest.mark.e2e
def test_a_failed_run_of_a_suite_task_exits_non_zero_and_a_good_one_zero(tmp_path):
    data = tmp_path / "probe.json"
    data.write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    good = run_cli("installed", "lmms_egoplan_probe", tmp_path / "good", include_path=PROBE_TASKS,
                   env={"PROBE_DATA_FILE": str(data)})
    assert good[0] == 0 and good[2]["results"]["lmms_egoplan_probe"]["exact,none"] == 1.0, good[3][-3000:]
    assert good[1] == {"suite_loaded": True, "loglikelihood_pairs_kept": True, "plugin_tasks_indexed": False,
                       "exit_guard": True}

    bad = run_cli("installed", "lmms_egoplan_probe", tmp_path / "bad", include_path=PROBE_TASKS,
                  env={"PROBE_DATA_FILE": str(data), "PROBE_REPEAT": "not-a-number"})
    assert bad[0] == 1 and bad[2] is None
    assert "PROBE_REPEAT" in bad[3] and "lmms-egoplan: the evaluation failed" in bad[3]


def test_the_installed_lmms_eval_has_every_bug_worked_around():
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    assert compat_results._pairs_become_strings(unwrap)
    assert unwrap("\udcff") == ("\udcff", None)
    assert compat_tasks._plugin_folders_reach_the_index_too_late()
    assert durability.cli_swallows_evaluation_errors()
    assert hasattr(ConfigurableTask.process_results, "retry")
    assert durability._stores_after_the_whole_call() and durability._drops_failed_runs()
    assert durability._never_reads_run_folders() and compat_tasks._cli_swallows_missing_tasks()
    assert compat_results._writes_nan_as_is() and durability._writes_results_then_samples()
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, durability._stop_on_sigterm)


def test_nothing_is_changed_where_lmms_eval_behaves(monkeypatch):
    def fixed_unwrap(output):
        return output, None

    monkeypatch.setattr(instance, "unwrap_generation_output", fixed_unwrap)
    assert compat_results.keep_loglikelihood_results() is False
    assert instance.unwrap_generation_output is fixed_unwrap

    # lmms-eval with the changes proposed in docs/upstream.md:
    installed = compat.lmms_eval_source("lmms_eval.__main__", "cli_evaluate")
    assert durability.cli_swallows_evaluation_errors(installed + "\n    if failed:\n        sys.exit(1)\n") is False
    cli_evaluate_single = compat.lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single")
    plugins_first = ("    for plugin in os.environ['LMMS_EVAL_PLUGINS'].split(','): ...\n"
                     + cli_evaluate_single.replace("LMMS_EVAL_PLUGINS", "PLUGINS_READ_ABOVE"))
    assert compat_tasks._plugin_folders_reach_the_index_too_late(cli_evaluate_single=plugins_first) is False
    assert compat_tasks._plugin_folders_reach_the_index_too_late(
        task_manager_init="def __init__(self):\n    os.environ.get('LMMS_EVAL_PLUGINS')\n") is False

    assert durability._stores_after_the_whole_call("for chunk in chunks: lm_call(chunk); self._store(...)") is False
    assert durability._drops_failed_runs("def finalize(self, *, success):\n    self._merge_run_to_root()") is False
    create = compat.lmms_eval_source("lmms_eval.caching.response_cache", "ResponseCache.create")
    assert durability._never_reads_run_folders(create.replace("os.makedirs(run_dir", "self._merge_stale_runs(); "
                                                                                           "os.makedirs(run_dir")) is False
    assert compat_results._writes_nan_as_is("dumped = json.dumps(results, allow_nan=False)") is False
    assert durability._writes_results_then_samples(
        cli_evaluate_single + "\n    if failed_metrics:\n        sys.exit(3)\n") is False
    with_missing_tasks_failing = installed.replace("eval_logger.error(f\"Error during evaluation", "sys.exit(1)  #")
    assert durability.cli_swallows_evaluation_errors(with_missing_tasks_failing) is False

    def someone_elses_handler(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, someone_elses_handler)
    try:
        assert durability.stop_cleanly_on_sigterm() is False
        assert signal.getsignal(signal.SIGTERM) is someone_elses_handler
    finally:
        signal.signal(signal.SIGTERM, previous)

    def cleaning_unwrap(output):
        return output.replace("\udcff", "\ufffd"), None

    monkeypatch.setattr(instance, "unwrap_generation_output", cleaning_unwrap)
    assert compat_results.clean_lone_surrogates() is False and instance.unwrap_generation_output is cleaning_unwrap

    def plain(self, doc, results):
        return {}

    assert compat_tasks.unretried_process_results(plain) is plain
    assert compat_results.run_datetime_str(SimpleNamespace(datetime_str="20261122_101010")) == "20261122_101010"


def test_releases_from_the_fixed_version_on_get_no_workaround(monkeypatch):
    monkeypatch.setattr(compat, "lmms_eval_version", lambda: compat.FIXED_IN)
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
    monkeypatch.setattr(RUN, "exit_guard_sink", None)
    monkeypatch.setattr(ResponseCache, "execute", inspect.unwrap(ResponseCache.execute))
    assert compat_results.keep_loglikelihood_results() is False
    assert compat_results.clean_lone_surrogates() is False
    assert durability.keep_responses_of_stopped_runs() is False
    assert durability.fail_runs_with_failed_tasks() is False
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        assert durability.stop_cleanly_on_sigterm() is False and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
    monkeypatch.setattr(TaskManager, "match_tasks", inspect.unwrap(TaskManager.match_tasks))
    from lmms_eval import evaluator

    monkeypatch.setattr(evaluator, "simple_evaluate", inspect.unwrap(evaluator.simple_evaluate))
    assert compat_tasks.check_suite_tasks_before_the_model() is False
    monkeypatch.setattr(EvaluationTracker, "save_results_aggregated", inspect.unwrap(EvaluationTracker.save_results_aggregated))
    monkeypatch.setattr(EvaluationTracker, "save_results_samples", inspect.unwrap(EvaluationTracker.save_results_samples))
    assert compat_tasks.watch_task_selection() is False
    assert compat_results.write_results_as_strict_json() is False
    assert durability.exit_when_results_are_written(lambda files: None) is False
    assert compat_results.run_datetime_str(None) is None
    assert compat_tasks.unretried_process_results(ConfigurableTask.process_results) is ConfigurableTask.process_results


def test_a_stopped_run_keeps_its_responses_chunk_by_chunk_with_whole_documents(monkeypatch):
    requests = [SimpleNamespace(task_name=task, doc_id=doc) for task, doc in
                [("a", 0), ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 0)]]
    chunks = durability._document_chunks(requests, 2)
    assert [[(r.task_name, r.doc_id) for r in chunk] for chunk in chunks] == [
        [("a", 0), ("a", 0), ("a", 1)], [("a", 2), ("b", 0), ("b", 0)]]
    monkeypatch.setattr(ResponseCache, "execute", inspect.unwrap(ResponseCache.execute))
    monkeypatch.setattr(ResponseCache, "finalize", inspect.unwrap(ResponseCache.finalize))
    assert durability.keep_responses_of_stopped_runs() is True
    assert ResponseCache.execute._stores_per_chunk


def test_a_failing_chunk_is_called_again_a_document_at_a_time_so_the_documents_before_the_failure_are_kept():
    requests = [SimpleNamespace(task_name="a", doc_id=doc) for doc in (0, 0, 1, 2, 3, 4)]
    calls, kept = [], []

    def call(chunk):
        documents = [r.doc_id for r in chunk]
        calls.append(documents)
        if 3 in documents:
            raise ValueError("doc 3 cannot be read")
        kept.extend(documents)
        return [f"response {doc}" for doc in documents]

    with pytest.raises(ValueError, match="doc 3"):
        durability.call_in_chunks(call, requests, 2)
    assert calls == [[0, 0, 1], [2, 3], [2], [3]]
    assert kept == [0, 0, 1, 2]
    calls.clear()
    transient = iter([ValueError("out of memory")])

    def fails_once(chunk):
        calls.append([r.doc_id for r in chunk])
        if (error := next(transient, None)) is not None:
            raise error
        return [r.doc_id for r in chunk]

    assert durability.call_in_chunks(fails_once, requests[:4], 4) == [0, 0, 1, 2]
    assert calls == [[0, 0, 1, 2], [0, 0], [1], [2]]


def test_text_responses_are_cleaned_of_lone_surrogates(monkeypatch):
    monkeypatch.setattr(instance, "unwrap_generation_output", inspect.unwrap(instance.unwrap_generation_output))
    assert compat_results.keep_loglikelihood_results() and compat_results.clean_lone_surrogates()
    assert instance.unwrap_generation_output("Two plates \udcff.") == ("Two plates \ufffd.", None)
    assert instance.unwrap_generation_output((1.5, True)) == ((1.5, True), None)


def test_loglikelihood_pairs_pass_and_everything_else_is_unwrapped_as_before(monkeypatch):
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
    assert compat_results.keep_loglikelihood_results() is True
    patched = instance.unwrap_generation_output
    assert patched((1.25, False)) == ((1.25, False), None)
    assert patched([0.5, True]) == ((0.5, True), None)  # read back from --use_cache
    for other in ("text", (True, False), ["a", "b"]):
        assert patched(other) == unwrap(other)


def test_suite_tasks_score_without_the_retry_and_other_tasks_keep_it():
    unretried = compat_tasks.unretried_process_results(ConfigurableTask.process_results)
    assert unretried is ConfigurableTask.process_results.__wrapped__
    assert not isinstance(unretried, tenacity.Retrying)


def test_a_class_task_learns_its_model_only_when_lmms_eval_did_not_give_it():
    prepared = []
    task = SimpleNamespace(model_name=None, _prepare_model_specific_config=lambda: prepared.append(True))
    compat_tasks.bind_class_task_to_backend(task, SimpleNamespace(model="dummy"))
    assert task.model_name == "dummy" and prepared == [True]
    compat_tasks.bind_class_task_to_backend(task, SimpleNamespace(model="dummy"))
    assert prepared == [True]
    compat_tasks.bind_class_task_to_backend(task, None)
    assert prepared == [True]


def test_only_runs_that_name_the_suite_get_the_task_discovery_fix():
    assert compat.suite_plugin_enabled({"LMMS_EVAL_PLUGINS": "other, lmms_egoplan"})
    assert not compat.suite_plugin_enabled({"LMMS_EVAL_PLUGINS": "other"})
    assert not compat.suite_plugin_enabled({})


def killed_run_folder(cache: Path, run_id: str, *, pid: int, host: str | None = None, rows: int = 3) -> Path:
    """A run folder as a killed run leaves it: its rank database with ``rows`` responses, its owner file."""
    folder = cache / "runs" / run_id
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "rank_0.db") as db:
        db.executescript(_SCHEMA_SQL)
        db.executemany("INSERT INTO responses VALUES (?, 'loglikelihood', 't', ?, 0, '{}', '[1.5, false]', 0)",
                       [(f"{run_id}-{doc}", doc) for doc in range(rows)])
    if pid:
        owner = {"host": host or socket.gethostname(), "pid": pid, "started": durability._process_start(pid)}
        (folder / "rank_0.db.owner.json").write_text(json.dumps(owner))
    return folder


def test_the_cache_folders_of_killed_runs_are_merged_and_those_of_live_or_unknown_runs_are_not(tmp_path):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    killed = killed_run_folder(tmp_path, "killed", pid=ended.pid)
    live = killed_run_folder(tmp_path, "live", pid=os.getpid())
    elsewhere = killed_run_folder(tmp_path, "elsewhere", pid=ended.pid, host="another-machine")
    unknown = killed_run_folder(tmp_path, "unknown", pid=0)  # written without the workaround
    assert durability.recover_killed_runs(str(tmp_path)) == 3
    with sqlite3.connect(tmp_path / "cache.db") as db:
        assert sorted(key for key, in db.execute("SELECT cache_key FROM responses")) == ["killed-0", "killed-1", "killed-2"]
    assert (killed / ".merged").is_file()
    assert not any((folder / ".merged").exists() for folder in (live, elsewhere, unknown))
    assert durability.recover_killed_runs(str(tmp_path)) == 0  # merged once


@pytest.mark.parametrize("missing, environ, message", [
    (["egoplan_vall"], {"LMMS_EVAL_PLUGINS": "lmms_egoplan"}, "--tasks: no task named egoplan_vall; did you mean egoplan_val?"),
    (["egoplan_val"], {}, "--tasks: egoplan_val is a task of lmms_egoplan, whose tasks lmms-eval indexes only when "
                          "LMMS_EVAL_PLUGINS names it; add this line before the command: export LMMS_EVAL_PLUGINS=lmms_egoplan"),
    (["egoplan_vall"], {"LMMS_EVAL_PLUGINS": "mine"}, "--tasks: no task named egoplan_vall; did you mean egoplan_val?; "
                                                      "add this line before the command: export LMMS_EVAL_PLUGINS=mine,lmms_egoplan"),
    (["mmee"], {}, "--tasks: no task named mmee; did you mean mme?"),
    (["zzzz"], {"LMMS_EVAL_PLUGINS": "lmms_egoplan"}, "--tasks: no task named zzzz (`lmms-eval --tasks list` lists them)"),
])
def test_a_missing_task_gets_the_closest_names_and_the_plugin_line_where_a_suite_task_is_meant(missing, environ, message):
    assert compat_tasks.missing_tasks_message(missing, ["mme", "egothink"], {"egoplan_val", "ego_think"}, environ) == message
