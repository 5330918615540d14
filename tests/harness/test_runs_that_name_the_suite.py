"""A run that names the suite, in process: the one switch (``LMMS_EVAL_PLUGINS`` naming the suite, or a suite task or
backend built; never the command line or a --config file), its exit guard added after lmms-eval's log reset through
loguru's public API (no attribute outside lmms-eval replaced), and the evaluated model's API key kept out of the
response cache's fingerprint and the summary line. A run that does not name it loads the suite's entry point and
imports nothing more (a subprocess shows it)."""

import json
import os
import sqlite3
import subprocess
import sys
import traceback
from types import SimpleNamespace

import pytest
from loguru import logger

from lmms_egoplan.compat import durability
from lmms_egoplan.compat import secrets as compat_secrets

KEY = "sk-test-0123456789abcdef"


def lmms_eval_cli_logging(function: str, message: str):
    """A function named and placed as lmms-eval's CLI function that logs ``message`` as an error."""
    namespace = {"logger": logger}
    # ``args``: the arguments of the run lmms-eval's CLI is running
    exec(compile(f"def {function}(args=None):\n    logger.error({message!r})\n", "/site-packages/lmms_eval/__main__.py",
                 "exec"), namespace)
    return namespace[function]


@pytest.mark.parametrize("function, message, last_line", [
    ("cli_evaluate", "Error during evaluation: boom. Please set `--verbosity=DEBUG` to get more information.",
     "lmms-egoplan: error: boom"),
    ("cli_evaluate_single", "Need to specify task to evaluate.",
     "lmms-egoplan: error: --tasks: name the tasks to evaluate (`lmms-eval --tasks list` lists them)"),
])
def test_the_exit_guard_added_after_lmms_evals_log_reset_ends_the_run(function, message, last_line, capsys,
                                                                      runs_name_the_suite):
    logger.remove()  # what cli_evaluate does when it sets the verbosity, before the run's TaskManager is built
    remove, print_exc = logger.remove, traceback.print_exc
    assert durability.fail_runs_with_failed_tasks()
    assert (logger.remove, traceback.print_exc) == (remove, print_exc)  # loguru's and Python's own, unreplaced
    try:
        with pytest.raises(SystemExit) as stopped:
            lmms_eval_cli_logging(function, message)()
        assert stopped.value.code == 1
        assert capsys.readouterr().err.splitlines()[-1] == last_line
        lmms_eval_cli_logging("cli_evaluate", "Selected Tasks: ['x']")()  # other lines pass
    finally:
        logger.remove()
        logger.add(sys.stderr)


def test_the_exit_guard_ends_a_run_that_uses_the_suite_only(monkeypatch, capsys):
    """Once a run has put it in place, the exit guard stays for the process's later runs: one whose CLI arguments
    carry no run of the suite (a later run of a --config file that names nothing of it) fails as lmms-eval's does."""
    from lmms_egoplan.core.run import SuiteRun, hand_over

    monkeypatch.delenv("LMMS_EVAL_PLUGINS", raising=False)
    failing = lmms_eval_cli_logging("cli_evaluate", "Error during evaluation: boom.")
    logger.remove()
    assert durability.fail_runs_with_failed_tasks()
    try:
        failing(SimpleNamespace())  # lmms-eval's: the error logged, the loop goes on
        suite_run = SimpleNamespace()
        hand_over(SuiteRun(), suite_run)
        with pytest.raises(SystemExit) as stopped:
            failing(suite_run)
        assert stopped.value.code == 1 and capsys.readouterr().err.splitlines()[-1] == "lmms-egoplan: error: boom."
    finally:
        logger.remove()
        logger.add(sys.stderr)


# lmms-eval's CLI running one run that names nothing of the suite, in a process where an earlier run switched the
# SIGTERM handler on; the signal arrives mid-run.
PLAIN_RUN_STOPPED = """
import os, signal, sys
from lmms_eval import __main__ as cli
from lmms_egoplan.compat import durability

def cli_evaluate_single(args):
    assert durability.stop_cleanly_on_sigterm()
    os.kill(os.getpid(), signal.SIGTERM)
    print("went on", flush=True)

cli.cli_evaluate_single = cli_evaluate_single
sys.argv = ["lmms-eval", "--model", "dummy", "--tasks", "plain_probe"]
cli.cli_evaluate()
"""


def test_a_sigterm_in_a_run_that_does_not_use_the_suite_ends_it_as_lmms_evals_own():
    """Python's own end by SIGTERM (killed by the signal, nothing said), not the suite's clean stop (status 143)."""
    import signal

    from lmms_egoplan.compat import OFF_SWITCH

    env = {**{key: value for key, value in os.environ.items() if key != "LMMS_EVAL_PLUGINS"}, OFF_SWITCH: ""}
    completed = subprocess.run([sys.executable, "-c", PLAIN_RUN_STOPPED], capture_output=True, text=True, env=env,
                               timeout=300)
    assert completed.returncode == -signal.SIGTERM, completed.stderr[-3000:]
    assert "went on" not in completed.stdout and "lmms-egoplan" not in completed.stderr


def test_the_model_fingerprint_of_the_response_cache_holds_no_key(tmp_path):
    from lmms_eval.caching.response_cache import ResponseCache

    assert compat_secrets.keep_api_keys_out_of_the_response_cache()
    cache = ResponseCache.create(str(tmp_path), model="openai", model_args=f"model=m,api_key={KEY}")
    cache.close()
    meta = dict(sqlite3.connect(cache.db_path).execute("SELECT key, value FROM meta").fetchall())
    fingerprint = meta["model_fingerprint"]
    assert fingerprint == f'openai|{{"api_key":"{compat_secrets.secret_digest(KEY)}","model":"m"}}'
    assert KEY not in fingerprint
    other_key = ResponseCache.create(str(tmp_path), model="openai", model_args="model=m,api_key=sk-another-key-0000")
    without_key = ResponseCache.create(str(tmp_path), model="openai", model_args="model=m")
    assert without_key.model_fingerprint == 'openai|{"model":"m"}'  # a run without secrets: fingerprinted as before
    image_tokens = [ResponseCache.create(str(tmp_path), model="openai", model_args=f"model=m,image_token={token}")
                    for token in ("<image>", "<img>")]
    hashes = {cache._model_fingerprint_hash for cache in [cache, other_key, without_key, *image_tokens]}
    assert len(hashes) == 5  # every argument tells caches apart, image_token (a name the rule matches) included
    for opened in [other_key, without_key, *image_tokens]:
        opened.close()


def test_the_summary_line_holds_no_key(monkeypatch):
    from lmms_eval import evaluator

    def simple_evaluate(model, model_args=None, cli_args=None):
        assert KEY in model_args  # the backend is built with the key
        return "results"

    monkeypatch.setattr(evaluator, "simple_evaluate", simple_evaluate)
    assert compat_secrets.keep_api_keys_out_of_the_run_summary()
    cli_args = SimpleNamespace(model_args=f"model_version=m,api_key={KEY}")
    assert evaluator.simple_evaluate("openai", cli_args.model_args, cli_args=cli_args) == "results"
    assert cli_args.model_args == "model_version=m,api_key=[REDACTED]"


# Loads lmms-eval's model registry, hence the suite's entry point, as `lmms-eval <argv>` does when it starts.
ENTRY_POINT_LOAD = """
import json, sys
sys.argv = ["/venv/bin/lmms-eval", *sys.argv[1:]]
import lmms_eval.models
print(json.dumps(sorted(sys.modules)))
"""

TASK_MACHINERY = ("lmms_eval.tasks", "lmms_eval.api.task", "lmms_eval.evaluator", "torch", "transformers", "evaluate")


def test_a_run_that_does_not_name_the_suite_imports_nothing_for_it(tmp_path):
    """lmms-eval loads the suite's entry point in every run: one whose LMMS_EVAL_PLUGINS does not name the suite gets
    its backends' manifests and nothing else (no workaround module, nothing of lmms-eval's task machinery, torch or
    transformers), whatever its command line or --config file says: a suite backend or task there switches the
    workarounds on only once it is built."""
    config = tmp_path / "runs.yaml"
    config.write_text("- model: egoplan_hf\n  tasks: egoplan_val\n")
    env = {key: value for key, value in os.environ.items() if key != "LMMS_EVAL_PLUGINS"}
    for argv in (["--model", "dummy", "--tasks", "mme,ego_schema"], ["--config", str(config)], ["models"],
                 ["--model", "egoplan_hf", "--tasks", "egoplan_val"]):
        completed = subprocess.run([sys.executable, "-c", ENTRY_POINT_LOAD, *argv], capture_output=True, text=True,
                                   env=env, check=True)
        imported = set(json.loads(completed.stdout.splitlines()[-1]))
        assert "lmms_egoplan.models" in imported, argv  # the entry point was loaded
        assert not imported & {*TASK_MACHINERY, "lmms_egoplan.compat.tasks", "lmms_egoplan.compat.durability",
                               "lmms_egoplan.judge.engine"}, (argv, sorted(imported & {*TASK_MACHINERY}))


# lmms-eval's CLI module imported as `lmms-eval` imports it (the entry point loads while its evaluator imports), then
# the run's task index built as cli_evaluate_single builds it: which layers are on what, and what is left alone.
PLUGIN_RUN = """
import json, sys, traceback
from loguru import logger
remove, print_exc, excepthook = logger.remove, traceback.print_exc, sys.excepthook
import lmms_eval.__main__ as cli
from lmms_egoplan.compat import replacements
at_entry_point = replacements.in_place()
cli.TaskManager("INFO", include_defaults=False)
print(json.dumps({"at_entry_point": at_entry_point, "once_indexed": replacements.in_place(),
                  "left_alone": (logger.remove, traceback.print_exc, sys.excepthook) == (remove, print_exc, excepthook),
                  "tasks_first": replacements.has_layer("tasks.check_suite_tasks_before_the_model",
                                                        "lmms_eval.evaluator", "simple_evaluate")}))
"""


def test_the_plugin_variable_switches_the_workarounds_on_when_the_entry_point_loads():
    env = {**os.environ, "LMMS_EVAL_PLUGINS": "lmms_egoplan"}
    completed = subprocess.run([sys.executable, "-c", PLUGIN_RUN], capture_output=True, text=True, env=env, check=True)
    state = json.loads(completed.stdout.splitlines()[-1])
    assert {"tasks.enable_plugin_task_discovery", "durability.fail_runs_with_failed_tasks",
            "secrets.keep_secrets_out_of_lmms_evals_error_texts"} <= set(state["at_entry_point"])
    assert {"tasks.check_suite_tasks_before_the_model", "secrets.keep_api_keys_out_of_the_run_summary"} <= \
        set(state["once_indexed"]) and state["tasks_first"]
    assert state["left_alone"]  # loguru's logger.remove, traceback.print_exc, sys.excepthook: not lmms-eval's
