"""The lmms-eval compatibility layer: each workaround applies only where lmms-eval still has its bug,
and only to runs that use the suite; a run that uses none of the suite is lmms-eval's own."""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import tenacity
from lmms_eval.api import instance
from lmms_eval.api.task import ConfigurableTask
from lmms_eval.caching.response_cache import ResponseCache

from lmms_egoplan import lmms_eval_compat
from lmms_egoplan.testing.lmms_eval_run import OFFLINE_ENV

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
    compat = sys.modules.get("lmms_egoplan.lmms_eval_compat")
    print("COMPAT-STATE " + json.dumps({
        "suite_loaded": "lmms_egoplan" in sys.modules,
        "loglikelihood_pairs_kept": getattr(instance.unwrap_generation_output, "_keeps_loglikelihood_pairs", False),
        "plugin_tasks_indexed": getattr(TaskManager.__init__, "_includes_plugin_tasks", False),
        "exit_guard": getattr(compat, "_exit_guard_sink", None) is not None,
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
    assert lmms_eval_compat._pairs_become_strings(unwrap)
    assert unwrap("\udcff") == ("\udcff", None)
    assert lmms_eval_compat._plugin_folders_reach_the_index_too_late()
    assert lmms_eval_compat._cli_swallows_evaluation_errors()
    assert hasattr(ConfigurableTask.process_results, "retry")
    assert lmms_eval_compat._stores_after_the_whole_call() and lmms_eval_compat._drops_failed_runs()


def test_nothing_is_changed_where_lmms_eval_behaves(monkeypatch):
    def fixed_unwrap(output):
        return output, None

    monkeypatch.setattr(instance, "unwrap_generation_output", fixed_unwrap)
    assert lmms_eval_compat.keep_loglikelihood_results() is False
    assert instance.unwrap_generation_output is fixed_unwrap

    # lmms-eval with the changes proposed in docs/upstream.md:
    installed = lmms_eval_compat.lmms_eval_source("lmms_eval.__main__", "cli_evaluate")
    assert lmms_eval_compat._cli_swallows_evaluation_errors(installed + "\n    if failed:\n        sys.exit(1)\n") is False
    cli_evaluate_single = lmms_eval_compat.lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single")
    plugins_first = ("    for plugin in os.environ['LMMS_EVAL_PLUGINS'].split(','): ...\n"
                     + cli_evaluate_single.replace("LMMS_EVAL_PLUGINS", "PLUGINS_READ_ABOVE"))
    assert lmms_eval_compat._plugin_folders_reach_the_index_too_late(cli_evaluate_single=plugins_first) is False
    assert lmms_eval_compat._plugin_folders_reach_the_index_too_late(
        task_manager_init="def __init__(self):\n    os.environ.get('LMMS_EVAL_PLUGINS')\n") is False

    assert lmms_eval_compat._stores_after_the_whole_call("for chunk in chunks: lm_call(chunk); self._store(...)") is False
    assert lmms_eval_compat._drops_failed_runs("def finalize(self, *, success):\n    self._merge_run_to_root()") is False

    def cleaning_unwrap(output):
        return output.replace("\udcff", "\ufffd"), None

    monkeypatch.setattr(instance, "unwrap_generation_output", cleaning_unwrap)
    assert lmms_eval_compat.clean_lone_surrogates() is False and instance.unwrap_generation_output is cleaning_unwrap

    def plain(self, doc, results):
        return {}

    assert lmms_eval_compat.unretried_process_results(plain) is plain
    assert lmms_eval_compat.run_datetime_str(SimpleNamespace(datetime_str="20261122_101010")) == "20261122_101010"


def test_releases_from_the_fixed_version_on_get_no_workaround(monkeypatch):
    monkeypatch.setattr(lmms_eval_compat, "lmms_eval_version", lambda: lmms_eval_compat.FIXED_IN)
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
    monkeypatch.setattr(lmms_eval_compat, "_exit_guard_sink", None)
    monkeypatch.setattr(ResponseCache, "execute", inspect.unwrap(ResponseCache.execute))
    assert lmms_eval_compat.keep_loglikelihood_results() is False
    assert lmms_eval_compat.clean_lone_surrogates() is False
    assert lmms_eval_compat.keep_responses_of_stopped_runs() is False
    assert lmms_eval_compat.fail_runs_with_failed_tasks() is False
    assert lmms_eval_compat.run_datetime_str(None) is None
    assert lmms_eval_compat.unretried_process_results(ConfigurableTask.process_results) is ConfigurableTask.process_results


def test_a_stopped_run_keeps_its_responses_chunk_by_chunk_with_whole_documents(monkeypatch):
    requests = [SimpleNamespace(task_name=task, doc_id=doc) for task, doc in
                [("a", 0), ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 0)]]
    chunks = lmms_eval_compat._document_chunks(requests, 2)
    assert [[(r.task_name, r.doc_id) for r in chunk] for chunk in chunks] == [
        [("a", 0), ("a", 0), ("a", 1)], [("a", 2), ("b", 0), ("b", 0)]]
    monkeypatch.setattr(ResponseCache, "execute", inspect.unwrap(ResponseCache.execute))
    monkeypatch.setattr(ResponseCache, "finalize", inspect.unwrap(ResponseCache.finalize))
    assert lmms_eval_compat.keep_responses_of_stopped_runs() is True
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
        lmms_eval_compat.call_in_chunks(call, requests, 2)
    assert calls == [[0, 0, 1], [2, 3], [2], [3]]
    assert kept == [0, 0, 1, 2]
    calls.clear()
    transient = iter([ValueError("out of memory")])

    def fails_once(chunk):
        calls.append([r.doc_id for r in chunk])
        if (error := next(transient, None)) is not None:
            raise error
        return [r.doc_id for r in chunk]

    assert lmms_eval_compat.call_in_chunks(fails_once, requests[:4], 4) == [0, 0, 1, 2]
    assert calls == [[0, 0, 1, 2], [0, 0], [1], [2]]


def test_text_responses_are_cleaned_of_lone_surrogates(monkeypatch):
    monkeypatch.setattr(instance, "unwrap_generation_output", inspect.unwrap(instance.unwrap_generation_output))
    assert lmms_eval_compat.keep_loglikelihood_results() and lmms_eval_compat.clean_lone_surrogates()
    assert instance.unwrap_generation_output("Two plates \udcff.") == ("Two plates \ufffd.", None)
    assert instance.unwrap_generation_output((1.5, True)) == ((1.5, True), None)


def test_loglikelihood_pairs_pass_and_everything_else_is_unwrapped_as_before(monkeypatch):
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
    assert lmms_eval_compat.keep_loglikelihood_results() is True
    patched = instance.unwrap_generation_output
    assert patched((1.25, False)) == ((1.25, False), None)
    assert patched([0.5, True]) == ((0.5, True), None)  # read back from --use_cache
    for other in ("text", (True, False), ["a", "b"]):
        assert patched(other) == unwrap(other)


def test_suite_tasks_score_without_the_retry_and_other_tasks_keep_it():
    unretried = lmms_eval_compat.unretried_process_results(ConfigurableTask.process_results)
    assert unretried is ConfigurableTask.process_results.__wrapped__
    assert not isinstance(unretried, tenacity.Retrying)


def test_a_class_task_learns_its_model_only_when_lmms_eval_did_not_give_it():
    prepared = []
    task = SimpleNamespace(model_name=None, _prepare_model_specific_config=lambda: prepared.append(True))
    lmms_eval_compat.bind_class_task_to_backend(task, SimpleNamespace(model="dummy"))
    assert task.model_name == "dummy" and prepared == [True]
    lmms_eval_compat.bind_class_task_to_backend(task, SimpleNamespace(model="dummy"))
    assert prepared == [True]
    lmms_eval_compat.bind_class_task_to_backend(task, None)
    assert prepared == [True]


def test_only_runs_that_name_the_suite_get_the_task_discovery_fix():
    assert lmms_eval_compat.suite_plugin_enabled({"LMMS_EVAL_PLUGINS": "other, lmms_egoplan"})
    assert not lmms_eval_compat.suite_plugin_enabled({"LMMS_EVAL_PLUGINS": "other"})
    assert not lmms_eval_compat.suite_plugin_enabled({})
