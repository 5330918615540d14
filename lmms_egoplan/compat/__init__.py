"""The lmms-eval workarounds of this suite: each one names an lmms-eval bug, is scoped to runs of the
suite, and is guarded by release and by behaviour.

Each workaround is a named function whose docstring gives the bug, where it sits in lmms-eval, what it
breaks, and the fix; ``docs/upstream.md`` gives each a minimal reproduction, and ``docs/upstream/`` the fix as
a patch for lmms-eval with its pull-request text, or why it cannot become one. Each one

* is guarded by release (lmms-eval releases before ``FIXED_IN``, i.e. up to the 0.7.x this suite is
  pinned to: ``affected_release``) AND by behaviour: it first checks, reading the installed
  lmms-eval's source (``lmms_eval_source``), that lmms-eval still behaves wrongly, and changes
  nothing where it does not;
* is switched on only by a run that uses the suite (``switches``), and acts on the suite's tasks alone
  where lmms-eval lets it be scoped; the others act on the whole run, as said below (what that changes
  for lmms-eval's own tasks in a mixed run: docs/lmms_eval_tasks.md);
* replaces an lmms-eval function, if at all, as a layer of the one wrapper the suite puts on it
  (``replacements``: each function replaced once, its layers called in a stated order); a run's results
  file names the workarounds in place and lmms-eval's release (``results.record_in_results``).

  ==========================================================  ==============================================
  workaround                                                  switched on when (and what it acts on)
  ==========================================================  ==============================================
  ``tasks.enable_plugin_task_discovery``                      ``LMMS_EVAL_PLUGINS`` names ``lmms_egoplan``
  ``tasks.watch_task_selection``                              a run names the suite (``run_names_suite``:
                                                              ``LMMS_EVAL_PLUGINS``, or a suite backend or
                                                              task on lmms-eval's command line or in its
                                                              ``--config``), when its entry point loads;
                                                              acts once the run's tasks are named
  ``durability.fail_runs_with_failed_tasks``                  a run names the suite, from its entry point on;
                                                              again once its tasks are named; a suite task
                                                              or backend is built (the run's exit status)
  ``durability.refuse_an_output_path_with_a_comma``           a run of lmms-eval's CLI names the suite, when
                                                              its entry point loads
  ``durability.say_what_to_fix_after_uncaught_errors``        a run of lmms-eval's CLI names the suite, when
                                                              its entry point loads
  ``tasks.explain_missing_tasks``                             a run that uses the suite names a task not found
  ``tasks.hint_suite_counterparts``                           a run that uses the suite names an lmms-eval
                                                              built-in that a suite task implements as its
                                                              paper defines it, or a suite task whose name
                                                              lmms-eval's own index gives to its own task
  ``tasks.check_suite_tasks_before_the_model``                a run that uses the suite, once its tasks are
                                                              named (the suite's tasks only)
  ``results.keep_loglikelihood_results``                      a suite task or backend is built (every task of
                                                              the run: the fix that lets lmms-eval's own
                                                              likelihood tasks score on the suite's backends)
  ``durability.keep_responses_of_stopped_runs``               a suite task or backend is built (the response
                                                              cache, one per run)
  ``durability.key_suite_answers_by_what_changes_them``       a suite task or backend is built (the response
                                                              cache's keys of the suite's tasks)
  ``durability.keep_responses_by_default``                    a run names a suite task and no ``--use_cache``,
                                                              with an ``--output_path`` (the run's response
                                                              cache: ``<output_path>/response_cache``)
  ``durability.resume_sampled_runs``                          a run names a suite task, once its tasks are
                                                              named (the sampled answers of the suite's tasks
                                                              in the run's response cache, keyed by its seeds)
  ``durability.keep_failed_requests_out_of_the_response_cache``  a suite task or backend is built (the
                                                              response cache, one per run)
  ``secrets.keep_api_keys_out_of_the_response_cache``         a suite task or backend is built (the response
                                                              cache, one per run)
  ``secrets.keep_api_keys_out_of_the_run_summary``            a run that uses the suite, once its tasks are
                                                              named (the run's one summary line)
  ``secrets.keep_secrets_out_of_lmms_evals_error_texts``      a run of lmms-eval's CLI names the suite, when its
                                                              entry point loads; a suite task or backend is
                                                              built (every log line of the process, every
                                                              failure text of the run's samples files and
                                                              response cache)
  ``durability.stop_cleanly_on_sigterm``                      a suite task or backend is built (the process)
  ``results.clean_lone_surrogates``                           a suite task or backend is built (every response
                                                              of the run: lmms-eval unwraps them before it
                                                              knows their task)
  ``results.name_lmms_evals_own_version``                     a run names the suite, when its entry point loads;
                                                              a suite task or backend is built (the run's
                                                              results file: lmms-eval's version and git fields)
  ``results.write_results_as_strict_json``                    a suite task or backend is built (the run's
                                                              results file, one per run, and samples files)
  ``results.fail_runs_whose_files_are_cut``                   a suite task or backend is built (the run's
                                                              results and samples files)
  ``backends.score_llava_hf_with_its_images``                 a suite task is bound to ``--model llava_hf
                                                              --force_simple`` (every likelihood task of the run)
  ``durability.exit_when_results_are_written``                a suite task or backend is built; in effect (and
                                                              recorded) once a judged task has judged, or a
                                                              generative task's model requests failed
  ``tasks.unretried_process_results``                         called by the suite's tasks only
  ``tasks.bind_class_task_to_backend``                        called by the suite's tasks only
  ==========================================================  ==============================================

A workaround whose fix is proposed as a patch (``docs/upstream/``) can be switched off by name
(``switched_off``: ``LMMS_EGOPLAN_COMPAT_OFF=results.keep_loglikelihood_results``), so that a test
shows the patched lmms-eval doing its job alone; not a user setting.

Modules by concern: ``tasks`` (task discovery, tasks not found, what a run's tasks need before the
model loads), ``durability`` (what a stopped or killed run keeps, and a run's exit status),
``results`` (what reaches and leaves the results and samples files), ``backends`` (lmms-eval's own backends
on the suite's tasks), ``secrets`` (the evaluated
model's API key and the run's other secrets kept out of what a run writes and prints), ``replacements``
(the one wrapper per lmms-eval function, and the record of what is in place), ``switches`` (when each is
switched on).
What a run learns as it goes (the response cache it opened, why it must exit non-zero, ...) is kept on the run
object of its ``simple_evaluate`` call, ``lmms_egoplan.core.run.SuiteRun`` (``tasks.check_suite_tasks_before_the_model``
makes it and hands it over).

lmms-eval loads the suite's model entry point in every run once the suite is installed; the entry
point registers the backends' manifests and calls ``switches.switch_on(ENTRY_POINT_LOADED)``, which does
nothing, and imports nothing more, unless the run names the suite (``run_names_suite``: it reads
``sys.argv``, the environment, a ``--config`` file and the task YAMLs as text). A run that names none
of the suite behaves as lmms-eval alone and costs what it costs without the suite (tests check both).
This package imports nothing of lmms-eval at import (entry points load while lmms-eval imports).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.metadata import version
from pathlib import Path, PurePath
from typing import Mapping, Sequence

SUITE_PLUGIN = "lmms_egoplan"

FIXED_IN = (0, 8)

def lmms_eval_version() -> tuple[int, ...]:
    numbers = []
    for part in version("lmms-eval").split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)

def affected_release() -> bool:
    """Whether the installed lmms-eval is a release before ``FIXED_IN`` (the behaviour checks decide there)."""
    return lmms_eval_version() < FIXED_IN

def lmms_eval_source(module: str, qualified_name: str) -> str:
    """The source text of a function of the installed lmms-eval, read from its file: the behaviour
    checks run while lmms-eval is still importing (entry points load then), so they import nothing."""
    import ast

    from lmms_egoplan.core.python_source import parse_python

    path = importlib.util.find_spec(module).origin
    with open(path, encoding="utf-8") as file:
        text = file.read()
    scope: list = parse_python(text).body
    node = None
    for name in qualified_name.split("."):
        node = next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
        scope = node.body
    return ast.get_source_segment(text, node)

def suite_plugin_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``LMMS_EVAL_PLUGINS`` names this suite (the user asked lmms-eval for its tasks)."""
    return SUITE_PLUGIN in (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))

OFF_SWITCH = "LMMS_EGOPLAN_COMPAT_OFF"

def switched_off(workaround: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``LMMS_EGOPLAN_COMPAT_OFF`` (comma-separated ``<module>.<function>`` names, as in the table
    above) names ``workaround``: tests/e2e/test_upstream_patches.py runs the suite's tests of a behaviour
    on lmms-eval patched with its fix and the workaround off."""
    return workaround in (name.strip() for name in environ.get(OFF_SWITCH, "").split(","))

# The suite's backends (lmms_egoplan.models.AVAILABLE_MODELS), named here: this package imports nothing of the
# suite while lmms-eval loads the entry point.
SUITE_BACKENDS = ("egoplan_hf", "egoplan_server")

def is_lmms_eval_cli(argv: Sequence[str] | None = None) -> bool:
    """Whether this process runs lmms-eval's CLI: ``lmms-eval ...``, or ``python -m lmms_eval ...`` (what
    accelerate and torchrun start on each rank)."""
    argv = sys.argv if argv is None else argv
    program = PurePath(argv[0]) if argv else PurePath()
    return program.name == "lmms-eval" or program.parts[-2:] == ("lmms_eval", "__main__.py")

def cli_option(name: str, argv: Sequence[str] | None = None) -> str | None:
    """The value of option ``name`` (``--tasks``) in this command line (``name value`` or ``name=value``;
    the last one given, as argparse takes it), or None."""
    argv = list(sys.argv if argv is None else argv)
    value = None
    for position, argument in enumerate(argv[1:], 1):
        if argument == name and position + 1 < len(argv):
            value = argv[position + 1]
        elif argument.startswith(f"{name}="):
            value = argument.split("=", 1)[1]
    return value

def run_names_suite(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this run names the suite, read before lmms-eval has parsed anything: ``LMMS_EVAL_PLUGINS``
    names it, or this is lmms-eval's CLI and its ``--model`` is a suite backend or its ``--tasks`` name a
    suite task (``suite_task_names``: the YAMLs' names, read as text; no task index), on the command line
    or in the ``--config`` file it names."""
    if suite_plugin_enabled(environ):
        return True
    if not is_lmms_eval_cli(argv):
        return False
    runs = [{"model": cli_option("--model", argv), "tasks": cli_option("--tasks", argv)}, *_config_runs(argv)]
    if any(run.get("model") in SUITE_BACKENDS for run in runs):
        return True
    import fnmatch

    named = [name.strip() for run in runs for name in str(run.get("tasks") or "").split(",") if name.strip()]
    return bool(named) and any(fnmatch.fnmatchcase(task, name) for name in named for task in suite_task_names())

def _config_runs(argv: Sequence[str] | None) -> list[dict]:
    """The runs of the ``--config`` file this command line names (lmms-eval's form: one mapping, or a list
    of them), as far as they can be read; an unreadable one is lmms-eval's to report."""
    config = cli_option("--config", argv)
    if config is None:
        return []
    try:
        import yaml

        with open(config, encoding="utf-8") as file:
            loaded = yaml.safe_load(file)
    except (OSError, ValueError, ImportError):
        return []
    return [run for run in (loaded if isinstance(loaded, list) else [loaded]) if isinstance(run, dict)]

def suite_task_names() -> frozenset[str]:
    """The task and group names the suite's task YAMLs declare (``task: <name>``, ``group: <name>``),
    read as text: cheap enough for every start of lmms-eval's CLI."""
    import re

    spec = importlib.util.find_spec(f"{SUITE_PLUGIN}.tasks")
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    declared = re.compile(r"^(?:task|group):[ \t]*([\w.-]+)[ \t]*$", re.MULTILINE)
    return frozenset(name for folder in spec.submodule_search_locations for path in Path(folder).rglob("*.yaml")
                     for name in declared.findall(path.read_text(encoding="utf-8")))
