"""A run that names the suite, in process: how it is recognised from its command line (or --config file) alone, its
exit guard armed from the start and kept across lmms-eval's log reset, an --output_path with a comma refused before
anything loads, and the evaluated model's API key kept out of the response cache's fingerprint and the summary line.
A run that does not name it loads the suite's entry point and imports nothing more (a subprocess shows it)."""

import json
import os
import sqlite3
import subprocess
import sys
from types import SimpleNamespace

import pytest
from loguru import logger

from lmms_egoplan import compat
from lmms_egoplan.compat import durability
from lmms_egoplan.compat import secrets as compat_secrets
from lmms_egoplan.core.run_state import RUN

KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize("argv, environ, named", [
    (["/venv/bin/lmms-eval", "--model", "openai", "--tasks", "mme,egoplan_val_gen"], {}, True),
    (["/venv/bin/lmms-eval", "--model=egoplan_server", "--tasks", "mme"], {}, True),
    (["/site-packages/lmms_eval/__main__.py", "--tasks", "ego_think_*"], {}, True),  # python -m lmms_eval, a wildcard
    (["/venv/bin/lmms-eval", "--model", "openai", "--tasks", "mme"], {}, False),
    (["/venv/bin/lmms-eval", "--model", "openai", "--tasks", "mme"], {"LMMS_EVAL_PLUGINS": "other,lmms_egoplan"}, True),
    (["/venv/bin/pytest", "--model", "egoplan_hf"], {}, False),  # not lmms-eval's command line
])
def test_a_run_names_the_suite_by_its_variable_backend_or_tasks(argv, environ, named):
    assert compat.run_names_suite(argv, environ) is named


def test_the_suites_task_names_are_read_from_its_yamls():
    names = compat.suite_task_names()
    assert {"egoplan_val_gen", "ego_think", "ego_think_counting", "egointent", "actplan1k_text_only",
            "egoplan_bench2"} <= names and "mme" not in names


def test_an_output_path_with_a_comma_stops_the_run_saying_what_to_do(capsys):
    assert durability.refuse_an_output_path_with_a_comma(["lmms-eval", "--output_path", "/runs/a b"])
    with pytest.raises(SystemExit) as stopped:
        durability.refuse_an_output_path_with_a_comma(["lmms-eval", "--tasks", "x", "--output_path=/runs/a,b"])
    assert stopped.value.code == 2
    assert capsys.readouterr().err == (
        "lmms-egoplan: error: --output_path '/runs/a,b' holds a comma, which lmms-eval 0.7.3 cannot take (it passes "
        "the path to its evaluation tracker inside a comma-separated list, hf_hub_log_args, and splits it there); "
        "choose a folder whose path holds no comma\n")
    fixed = compat.lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single").replace(
        'args.hf_hub_log_args += f",output_path={args.output_path}"', "tracker_args['output_path'] = args.output_path")
    assert durability._splits_the_output_path_on_commas(fixed) is False


def lmms_eval_cli_logging(function: str, message: str):
    """A function named and placed as lmms-eval's CLI function that logs ``message`` as an error."""
    namespace = {"logger": logger}
    exec(compile(f"def {function}():\n    logger.error({message!r})\n", "/site-packages/lmms_eval/__main__.py", "exec"),
         namespace)
    return namespace[function]


@pytest.mark.parametrize("function, message, last_line", [
    ("cli_evaluate", "Error during evaluation: boom. Please set `--verbosity=DEBUG` to get more information.",
     "lmms-egoplan: error: boom"),
    ("cli_evaluate_single", "Need to specify task to evaluate.",
     "lmms-egoplan: error: --tasks: name the tasks to evaluate (`lmms-eval --tasks list` lists them)"),
])
def test_the_exit_guard_outlives_lmms_evals_log_reset(function, message, last_line, monkeypatch, capsys):
    monkeypatch.setattr(RUN, "exit_guard_sink", None)
    assert durability.fail_runs_with_failed_tasks()
    try:
        logger.remove()  # what cli_evaluate does when it sets the verbosity
        with pytest.raises(SystemExit) as stopped:
            lmms_eval_cli_logging(function, message)()
        assert stopped.value.code == 1
        assert capsys.readouterr().err.splitlines()[-1] == last_line
        lmms_eval_cli_logging("cli_evaluate", "Selected Tasks: ['x']")()  # other lines pass
    finally:
        logger.remove(RUN.exit_guard_sink)
        RUN.exit_guard_sink = None
        logger.add(__import__("sys").stderr)


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
    assert compat_secrets._fingerprints_the_model_args_as_given("model_fp = f\"{model}|{_redact(args)}\"") is False
    patched = 'model_args_fp = json.dumps(_digest_secrets(parsed))\nmodel_fp = f"{model}|{model_args_fp}"'
    assert compat_secrets._fingerprints_the_model_args_as_given(patched) is False


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
    assert compat_secrets._prints_the_model_args_as_given('print(f"{args.model} ({_redact(args.model_args)})')  is False


# Loads lmms-eval's model registry, hence the suite's entry point, as `lmms-eval <argv>` does when it starts.
ENTRY_POINT_LOAD = """
import json, sys
sys.argv = ["/venv/bin/lmms-eval", *sys.argv[1:]]
import lmms_eval.models
print(json.dumps(sorted(sys.modules)))
"""

TASK_MACHINERY = ("lmms_eval.tasks", "lmms_eval.api.task", "lmms_eval.evaluator", "torch", "transformers", "evaluate")


def test_a_run_that_does_not_name_the_suite_imports_nothing_for_it(tmp_path):
    """lmms-eval loads the suite's entry point in every run: one that does not name the suite gets its backends'
    manifests and nothing else (no workaround module, nothing of lmms-eval's task machinery, torch or transformers)."""
    config = tmp_path / "runs.yaml"
    config.write_text("- model: dummy\n  tasks: mme\n")
    env = {key: value for key, value in os.environ.items() if key != "LMMS_EVAL_PLUGINS"}
    for argv in (["--model", "dummy", "--tasks", "mme,ego_schema"], ["--config", str(config)], ["models"]):
        completed = subprocess.run([sys.executable, "-c", ENTRY_POINT_LOAD, *argv], capture_output=True, text=True,
                                   env=env, check=True)
        imported = set(json.loads(completed.stdout.splitlines()[-1]))
        assert "lmms_egoplan.models" in imported, argv  # the entry point was loaded
        assert not imported & {*TASK_MACHINERY, "lmms_egoplan.compat.tasks", "lmms_egoplan.compat.durability",
                               "lmms_egoplan.judge.engine"}, (argv, sorted(imported & {*TASK_MACHINERY}))


@pytest.mark.parametrize("argv", [
    ["/venv/bin/lmms-eval", "--model", "dummy", "--tasks", "egoplan_val"],  # the plugin variable forgotten
    ["/venv/bin/lmms-eval", "--model", "egoplan_hf", "--tasks", "mme"],
])
def test_a_run_that_names_a_suite_task_or_backend_without_the_plugin_variable_is_watched(argv, monkeypatch):
    """...so that a suite task not found is explained with the line that sets LMMS_EVAL_PLUGINS (through the CLI:
    tests/e2e/test_bad_input.py::test_a_task_that_is_not_found_in_a_run_of_the_suite_exits_1_saying_what_to_type)."""
    from lmms_egoplan.compat import replacements, switches

    monkeypatch.delenv("LMMS_EVAL_PLUGINS", raising=False)
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(RUN, "exit_guard_sink", None)
    try:
        switches.switch_on(switches.ENTRY_POINT_LOADED)
    finally:
        if RUN.exit_guard_sink is not None:
            logger.remove(RUN.exit_guard_sink)
    assert replacements.has_layer("tasks.watch_task_selection", "lmms_eval.tasks", "TaskManager.match_tasks")


def test_a_run_names_the_suite_in_its_config_file(tmp_path):
    config = tmp_path / "runs.yaml"
    config.write_text("- model: openai\n  tasks: mme\n- model: openai\n  tasks: ego_think_counting\n")
    assert compat.run_names_suite(["lmms-eval", "--config", str(config)], {})
    config.write_text("model: egoplan_server\ntasks: mme\n")
    assert compat.run_names_suite(["lmms-eval", "--config", str(config)], {})
    config.write_text("model: openai\ntasks: mme\n")
    assert not compat.run_names_suite(["lmms-eval", "--config", str(config)], {})
    assert not compat.run_names_suite(["lmms-eval", "--config", str(tmp_path / "missing.yaml")], {})
