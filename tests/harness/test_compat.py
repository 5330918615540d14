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

from lmms_egoplan import compat
from lmms_egoplan.compat import durability, replacements
from lmms_egoplan.compat import results as compat_results
from lmms_egoplan.compat import tasks as compat_tasks
from lmms_egoplan.core.run import SuiteRun


def test_the_installed_lmms_eval_is_a_release_with_the_bugs_worked_around():
    """The guard is the release; the tripwire of each bug is its behaviour test, which
    tests/e2e/test_upstream_patches.py runs with the workaround off against this release, where it must fail."""
    assert compat.affected_release()
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    assert isinstance(unwrap((1.5, False))[0], str) and unwrap("\udcff") == ("\udcff", None)
    assert hasattr(ConfigurableTask.process_results, "retry")
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, durability._stop_on_signal)


def test_nothing_is_changed_where_lmms_eval_behaves(monkeypatch):
    def fixed_unwrap(output):
        return output, None

    monkeypatch.setattr(instance, "unwrap_generation_output", fixed_unwrap)
    assert compat_results.keep_loglikelihood_results() is False
    assert instance.unwrap_generation_output is fixed_unwrap

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

    def cleaning_cache(response):
        return response.replace("\udcff", "\ufffd") if isinstance(response, str) else response

    monkeypatch.setattr(instance, "unwrap_generation_output", cleaning_unwrap)
    monkeypatch.setattr(ResponseCache, "_extract_cacheable", staticmethod(cleaning_cache))
    assert compat_results.clean_lone_surrogates() is False and instance.unwrap_generation_output is cleaning_unwrap
    assert ResponseCache._extract_cacheable is cleaning_cache

    def plain(self, doc, results):
        return {}

    assert compat_tasks.unretried_process_results(plain) is plain


def test_releases_from_the_fixed_version_on_get_no_workaround(monkeypatch):
    monkeypatch.setattr(compat, "lmms_eval_version", lambda: compat.FIXED_IN)
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
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
    from lmms_eval import evaluator

    monkeypatch.setattr(evaluator, "simple_evaluate", inspect.unwrap(evaluator.simple_evaluate))
    assert compat_tasks.check_suite_tasks_before_the_model() is False
    monkeypatch.setattr(EvaluationTracker, "save_results_aggregated",
                        inspect.unwrap(EvaluationTracker.save_results_aggregated))
    monkeypatch.setattr(EvaluationTracker, "save_results_samples",
                        inspect.unwrap(EvaluationTracker.save_results_samples))
    assert compat_results.write_results_as_strict_json() is False
    assert compat_results.fail_runs_whose_files_are_cut() is False
    assert durability.exit_when_results_are_written() is False
    assert compat_tasks.unretried_process_results(ConfigurableTask.process_results) is ConfigurableTask.process_results
    prepared = []  # a class task that a fixed release left without a model name keeps it so
    task = SimpleNamespace(model_name=None, _prepare_model_specific_config=lambda: prepared.append(True))
    compat_tasks.bind_class_task_to_backend(task, SimpleNamespace(model="dummy"))
    assert (task.model_name, prepared) == (None, [])


def test_ctrl_c_is_left_to_python_outside_lmms_evals_cli():
    """Outside lmms-eval's CLI (``simple_evaluate`` from Python, a notebook, this test) Ctrl-C stays Python's
    ``KeyboardInterrupt``; SIGTERM is handled there too, as it ends any process at once."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, signal.SIG_DFL),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler)}
    try:
        assert durability.stop_cleanly_on_sigterm() is True
        assert signal.getsignal(signal.SIGTERM) is durability._stop_on_signal
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def test_the_exit_status_layer_is_in_every_suite_run_and_recorded_once_a_task_asks_for_a_status():
    """Switched on when a suite task is built, not from a metric; a run none of whose tasks asks (no judge, no
    failed request) records it as not in place, as before it was switched on there."""
    from lmms_egoplan.compat import switches

    switches.switch_on(switches.SUITE_USED)
    concern = "durability.exit_when_results_are_written"
    assert replacements.has_layer(concern, "lmms_eval.loggers.evaluation_tracker",
                                  "EvaluationTracker.save_results_samples")
    run, other_run = SuiteRun(), SuiteRun()
    assert concern not in replacements.in_place(run)
    durability.ask_for_exit_status(run, lambda run, files: None)
    assert concern in replacements.in_place(run) and concern not in replacements.in_place(other_run)


def test_a_stopped_run_keeps_its_responses_chunk_by_chunk_with_whole_documents(monkeypatch):
    requests = [SimpleNamespace(task_name=task, doc_id=doc) for task, doc in
                [("a", 0), ("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 0)]]
    chunks = durability._document_chunks(requests, 2)
    assert [[(r.task_name, r.doc_id) for r in chunk] for chunk in chunks] == [
        [("a", 0), ("a", 0), ("a", 1)], [("a", 2), ("b", 0), ("b", 0)]]
    monkeypatch.setattr(ResponseCache, "execute", inspect.unwrap(ResponseCache.execute))
    monkeypatch.setattr(ResponseCache, "finalize", inspect.unwrap(ResponseCache.finalize))
    assert durability.keep_responses_of_stopped_runs() is True
    assert replacements.has_layer("durability.keep_responses_of_stopped_runs", "lmms_eval.caching.response_cache",
                                  "ResponseCache.execute")


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


def test_a_concurrent_backend_keeps_its_concurrency_in_chunks_of_documents():
    """lmms-eval's API backends run ``num_concurrent`` requests at once (``openai``: 32 by default): a chunk of 4
    documents would run them 4 at a time; each chunk holds at least as many requests as the backend runs at once."""
    from lmms_eval.models.simple.openai import OpenAICompatible

    backend = OpenAICompatible.__new__(OpenAICompatible)
    backend.adaptive_concurrency, backend.num_concurrent = False, 40
    assert durability.concurrent_requests(backend) == 40
    backend.adaptive_concurrency, backend.adaptive_config = True, SimpleNamespace(max_concurrency=128)
    assert durability.concurrent_requests(backend) == 128
    assert durability.concurrent_requests(SimpleNamespace(batch_size=8)) == 1
    requests = [SimpleNamespace(task_name="a", doc_id=doc) for doc in range(100)]
    calls = []
    durability.call_in_chunks(lambda chunk: calls.append(len(chunk)) or chunk, requests, 4, min_requests=40)
    assert calls == [40, 40, 20]


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


def test_a_workaround_switched_off_by_name_changes_nothing(monkeypatch):
    unwrap = inspect.unwrap(instance.unwrap_generation_output)
    monkeypatch.setattr(instance, "unwrap_generation_output", unwrap)
    monkeypatch.setenv(compat.OFF_SWITCH, "tasks.enable_plugin_task_discovery, results.keep_loglikelihood_results")
    assert compat_results.keep_loglikelihood_results() is False and instance.unwrap_generation_output is unwrap
    assert compat.switched_off("results.keep_loglikelihood_results") and not compat.switched_off("keep_loglikelihood")


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
        owner = {"host": host or socket.gethostname(), "pid": pid, "started": durability.process_start(pid)}
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
        kept = sorted(key for key, in db.execute("SELECT cache_key FROM responses"))
        assert kept == ["killed-0", "killed-1", "killed-2"]
    assert (killed / ".merged").is_file()
    assert not any((folder / ".merged").exists() for folder in (live, elsewhere, unknown))
    assert durability.recover_killed_runs(str(tmp_path)) == 0  # merged once


def test_every_lmms_eval_function_the_suite_replaces_is_replaced_once_by_one_wrapper(monkeypatch):
    from lmms_egoplan.compat import secrets, switches
    from lmms_egoplan.compat import tasks as compat_tasks_module

    switches.switch_on(switches.SUITE_USED)
    compat_tasks_module.check_suite_tasks_before_the_model()
    secrets.keep_api_keys_out_of_the_run_summary()
    replaced = 0
    for module, attribute in replacements.LAYER_ORDER:
        if module == "lmms_eval.models.simple.llava_hf":
            # once a suite task is bound to llava_hf, which imports decord (tests/e2e/test_lmms_eval_llava_hf.py)
            continue
        if module == "lmms_eval.__main__":
            # once a run of a --config file with runs after it asks for an exit status
            # (tests/harness/test_lmms_eval_behaviours.py::test_a_failed_evaluation_exits_non_zero_after_the_other_...)
            continue
        owner, name = replacements._owner(module, attribute)
        raw = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name)
        wrapper = getattr(raw, "__func__", raw)
        assert getattr(wrapper, replacements._LAYERS, None), f"{module}.{attribute} is not the suite's wrapper"
        assert not hasattr(wrapper.__wrapped__, replacements._LAYERS), f"{module}.{attribute} is wrapped twice"
        replaced += 1
    assert replaced == len(replacements.LAYER_ORDER) - 2
    from lmms_eval import evaluator

    assert evaluator.unwrap_generation_output is instance.unwrap_generation_output  # the name lmms-eval bound too


def test_the_layers_of_a_function_run_in_the_stated_order_whatever_order_they_were_put_in(monkeypatch):
    calls = []

    def function(value):
        calls.append("lmms-eval")
        return value

    target = sys.modules[__name__]
    monkeypatch.setattr(target, "replaced_for_the_test", function, raising=False)
    monkeypatch.setitem(replacements.LAYER_ORDER, (__name__, "replaced_for_the_test"), ("outer", "middle", "inner"))
    for concern in ("inner", "outer", "middle"):
        replacements.add_layer(concern, __name__, "replaced_for_the_test",
                               lambda call, value, concern=concern: calls.append(concern) or call(value))
    assert target.replaced_for_the_test(3) == 3
    assert calls == ["outer", "middle", "inner", "lmms-eval"]
    assert target.replaced_for_the_test.__wrapped__ is function
    with pytest.raises(ValueError, match="not among the layers"):
        replacements.add_layer("elsewhere", __name__, "replaced_for_the_test", lambda call, value: call(value))


def test_compat_replaces_lmms_eval_attributes_only_through_its_one_wrapper():
    """No module of compat/ but replacements.py assigns an attribute of lmms-eval or loguru (whose logger it only
    adds sinks to and configures a patcher on), and replacements.py replaces lmms-eval's only; the one exception,
    evaluator.get_task_dict, is swapped for one call of simple_evaluate and put back."""
    import ast

    compat_folder = Path(compat.__file__).parent
    for path in compat_folder.glob("*.py"):
        if path.name == "replacements.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, (ast.Import, ast.ImportFrom))
                    and (getattr(node, "module", None) or "").split(".")[0] in ("lmms_eval", "loguru")
                    for alias in node.names} | {alias.asname or alias.name for node in ast.walk(tree)
                                                if isinstance(node, ast.Import) for alias in node.names
                                                if alias.name.startswith("lmms_eval")}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                root = target
                while isinstance(root, ast.Attribute):
                    root = root.value
                if isinstance(target, ast.Attribute) and isinstance(root, ast.Name) and root.id in imported:
                    assert ast.unparse(target) == "evaluator.get_task_dict", f"{path.name}: {ast.unparse(target)}"
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr":
                raise AssertionError(f"{path.name}: {ast.unparse(node)}")


def test_the_suite_replaces_attributes_of_lmms_eval_only():
    assert {module.split(".")[0] for module, _ in replacements.LAYER_ORDER} == {"lmms_eval"}
    assert {module.split(".")[0] for aliases in replacements.ALIASES.values() for module, _ in aliases} == {"lmms_eval"}


def test_a_results_file_names_the_workarounds_in_place_and_lmms_evals_release(tmp_path, runs_name_the_suite):
    from importlib.metadata import version

    assert compat_results.keep_loglikelihood_results() and compat_results.record_in_results()
    writer = EvaluationTracker(output_path=str(tmp_path))
    writer.general_config_tracker.model_name_sanitized = "model"
    writer.save_results_aggregated(results={"results": {}}, samples=None, datetime_str="20260101_000000")
    written = json.loads((tmp_path / "model" / "20260101_000000_results.json").read_text())
    record = written[replacements.RECORD_KEY]
    assert record["lmms_eval"] == version("lmms-eval") == "0.7.3"
    assert "results.keep_loglikelihood_results" in record["applied"]
    assert "results.record_in_results" not in record["applied"]


def test_the_runs_secrets_are_masked_in_failure_texts_and_answers_keep_their_words(monkeypatch):
    """What ``secrets.keep_secrets_out_of_lmms_evals_error_texts`` masks: the run's own secrets anywhere, and
    whatever has a secret's shape in lmms-eval's failure texts only (a model's answer keeps its words)."""
    from lmms_egoplan.compat import secrets

    model_args = "model_version=m,api_key=sk-given-0123456789,max_retries=2"
    environ = {"OPENAI_API_KEY": "sk-environment-987654", "HF_TOKEN": "hf_short", "HOME": "/r"}
    found = secrets.run_secrets(model_args, environ)
    assert sorted(found) == ["hf_short", "sk-environment-987654", "sk-given-0123456789"]
    failure = "[LMMS_EVAL_REQUEST_FAILED after 2 retries] Error code: 401 - Authorization: Bearer sk-other-abcdef012345"
    sample = {"resps": [[failure]], "filtered_resps": ["token=abcdefgh said sk-given-0123456789"], "doc_id": 3}
    assert secrets.masked_response(sample, found) == {
        "resps": [["[LMMS_EVAL_REQUEST_FAILED after 2 retries] Error code: 401 - Authorization: Bearer ***"]],
        "filtered_resps": ["token=abcdefgh said ***"], "doc_id": 3}  # an answer: only the run's own key goes
    assert secrets.run_secrets({"api_key": "sk-given-0123456789"}, {}) == ("sk-given-0123456789",)


def test_a_backend_class_goes_with_the_backend_moment_only_and_other_backends_are_left_as_they_are():
    from lmms_egoplan.compat import switches

    with pytest.raises(ValueError, match="a backend class goes with the moment 'backend chosen'"):
        switches.switch_on(switches.BACKEND_CHOSEN)
    with pytest.raises(ValueError, match="a backend class goes with the moment 'backend chosen'"):
        switches.switch_on(switches.SUITE_USED, backend=ConfigurableTask)
    switches.switch_on(switches.BACKEND_CHOSEN, backend=ConfigurableTask)  # not lmms-eval's LlavaHf: nothing to patch
    assert "backends.score_llava_hf_with_its_images" not in replacements.in_place()


def test_a_run_of_the_suites_tasks_without_use_cache_keeps_its_responses_under_its_output_path(tmp_path, monkeypatch):
    from argparse import Namespace

    from loguru import logger

    lines = []
    sink = logger.add(lines.append, level="INFO", format="{message}")
    try:
        cli_args, run = Namespace(output_path=str(tmp_path / "out")), SuiteRun()
        assert durability.keep_responses_by_default(run, None, cli_args) == str(tmp_path / "out" / "response_cache")
        assert run.default_response_cache == str(tmp_path / "out" / "response_cache")  # what a stop names
        assert any(f"no --use_cache given: the model's responses are kept as they are computed in the response "
                   f"cache {tmp_path / 'out' / 'response_cache'}" in line for line in lines)
        assert durability.keep_responses_by_default(run, "mine/", cli_args) == "mine/"  # the one named is kept
        assert durability.keep_responses_by_default(run, None, Namespace(output_path=None)) is None
        assert durability.keep_responses_by_default(run, None, None) is None  # simple_evaluate called without the CLI
        monkeypatch.setenv("LMMS_EGOPLAN_COMPAT_OFF", "durability.keep_responses_by_default")
        assert durability.keep_responses_by_default(run, None, cli_args) is None
    finally:
        logger.remove(sink)


def test_the_suites_task_names_are_read_from_the_runs_index_through_any_path_to_its_folder_and_not_where_shadowed(
        tmp_path):
    """What ``check_suite_tasks_before_the_model`` takes for the suite's tasks: the names lmms-eval indexes from the
    suite's task folder (here through a symlink to it), less one that a folder indexed before it names too (lmms-eval
    builds that folder's task, as it builds a built-in's over a plugin's)."""
    import importlib.util

    import yaml
    from lmms_eval.tasks import TaskManager

    from lmms_egoplan.compat.tasks import _suite_task_names

    folder = Path(list(importlib.util.find_spec("lmms_egoplan.tasks").submodule_search_locations)[0])
    (tmp_path / "linked").symlink_to(folder)
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "egoplan_val.yaml").write_text(yaml.safe_dump({"task": "egoplan_val", "dataset_path": "x"}))
    own = set(TaskManager(include_path=str(folder), include_defaults=False).task_index)
    linked = TaskManager(include_path=[str(tmp_path / "earlier"), str(tmp_path / "linked")], include_defaults=False)
    assert "egoplan_val" in own and len(own) > 40
    assert _suite_task_names(linked) == own - {"egoplan_val"}


def test_the_log_masking_keeps_a_loguru_patcher_someone_else_configured(monkeypatch):
    """loguru's logger is the process's: the patcher that masks the run's secrets in its lines runs after the one the
    user (or another library) configured before, which stays in effect; loguru's ``configure`` alone would replace
    it for the rest of the process."""
    from loguru import logger

    from lmms_egoplan.compat import secrets

    monkeypatch.setenv("SOME_SERVICE_API_KEY", "sk-environment-0123456789")
    for owner, name in ((ResponseCache, "_log_to_audit"), (EvaluationTracker, "save_results_samples")):
        monkeypatch.setattr(owner, name, inspect.unwrap(getattr(owner, name)))  # not yet in place
    monkeypatch.setattr(secrets, "_masked_in_the_log", secrets._masked_in_the_log)
    monkeypatch.setattr(logger._core, "patcher", lambda record: record["extra"].update(request_id="r-1"))
    lines = []
    sink = logger.add(lambda message: lines.append((message.record["message"], message.record["extra"])),
                      format="{message}")
    try:
        assert secrets.keep_secrets_out_of_lmms_evals_error_texts()
        logger.info("the key sk-environment-0123456789 was refused")
    finally:
        logger.remove(sink)
    assert lines == [("the key *** was refused", {"request_id": "r-1"})]


def test_a_run_that_names_its_response_cache_does_not_list_the_default_cache_an_earlier_run_got(tmp_path):
    """Two runs of one process: the first, without --use_cache, gets the default response cache; the second names
    its own, and its results file must not say it got the default one."""
    from argparse import Namespace

    without_cache, with_cache = SuiteRun(), SuiteRun()
    assert durability.keep_responses_by_default(without_cache, None, Namespace(output_path=str(tmp_path))) is not None
    assert durability.keep_responses_by_default(with_cache, "mine/", Namespace(output_path=str(tmp_path))) == "mine/"
    assert "durability.keep_responses_by_default" in replacements.in_place(without_cache)
    assert "durability.keep_responses_by_default" not in replacements.in_place(with_cache)
    assert "durability.keep_responses_by_default" not in replacements.in_place()
