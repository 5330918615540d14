"""The lmms-eval workarounds of this suite: each one names an lmms-eval bug and the patch that retires it, is
switched on only by a run that names the suite, and is guarded by release.

Each workaround is a named function whose docstring gives the bug, where it sits in lmms-eval, what it
breaks, and the fix; ``docs/upstream.md`` gives each a minimal reproduction, and ``docs/upstream/`` the fix as
a patch for lmms-eval with its pull-request text (docs/upstream/README.md: which are kept and why, which were
dropped and what a user loses). Each one

* is guarded by release (lmms-eval releases before ``FIXED_IN``, i.e. up to the 0.7.x this suite is pinned to:
  ``affected_release``); no guard reads lmms-eval's source. Its tripwire is its test of the behaviour
  (``tests/harness/test_lmms_eval_behaviours.py``), which ``tests/e2e/test_upstream_patches.py`` runs with the
  workaround switched off against the installed release, where it must fail: the day lmms-eval behaves, that
  check fails and the workaround can be deleted;
* is switched on only by a run that names the suite (``switches``: ``LMMS_EVAL_PLUGINS=lmms_egoplan``, or a suite
  task or backend being built), and acts on the suite's tasks alone where lmms-eval lets it be scoped; the
  others act on the whole run, as said below (what that changes for lmms-eval's own tasks in a mixed run:
  docs/lmms_eval_tasks.md); once switched on, it stays in place for the rest of the process, but acts only on the
  runs that use the suite (``replacements.uses_the_suite``): a later run of the process that names nothing of the suite
  is lmms-eval's alone, unless ``LMMS_EVAL_PLUGINS`` (the process's) names the suite;
* replaces an lmms-eval function, if at all, as a layer of the one wrapper the suite puts on it
  (``replacements``: lmms-eval's attributes only, each replaced once, its layers called in a stated order); a run's
  results file names the workarounds in place and lmms-eval's release (``results.record_in_results``).

  ==========================================================  ==============================================
  workaround                                                  switched on when (and what it acts on, in a run
                                                              that uses the suite)
  ==========================================================  ==============================================
  ``tasks.enable_plugin_task_discovery``                      ``LMMS_EVAL_PLUGINS`` names ``lmms_egoplan``
  ``durability.fail_runs_with_failed_tasks``                  ``LMMS_EVAL_PLUGINS`` names the suite (its sink
                                                              again once the run's ``TaskManager`` is built);
                                                              a suite task or backend is built (the run's
                                                              exit status; a loguru sink and a layer on
                                                              ``simple_evaluate``)
  ``tasks.check_suite_tasks_before_the_model``                ``LMMS_EVAL_PLUGINS`` names the suite, once the
                                                              run's task index is built (the suite's tasks
                                                              only)
  ``results.keep_loglikelihood_results``                      a suite task or backend is built (every task of
                                                              the run: the fix that lets lmms-eval's own
                                                              likelihood tasks score on the suite's backends)
  ``durability.keep_responses_of_stopped_runs``               a suite task or backend is built (the response
                                                              cache, one per run)
  ``durability.key_suite_answers_by_what_changes_them``       a suite task or backend is built (the response
                                                              cache's keys of the suite's tasks; the lmms-eval
                                                              version in every task's key)
  ``durability.keep_responses_by_default``                    a run names a suite task and no ``--use_cache``,
                                                              with an ``--output_path`` (the run's response
                                                              cache: ``<output_path>/response_cache``)
  ``durability.resume_sampled_runs``                          a run's suite tasks are checked before the model
                                                              (the sampled answers of the suite's tasks in the
                                                              run's response cache, keyed by its seeds)
  ``durability.keep_failed_requests_out_of_the_response_cache``  a suite task or backend is built (the
                                                              response cache, one per run)
  ``secrets.keep_api_keys_out_of_the_response_cache``         a suite task or backend is built (the response
                                                              cache, one per run)
  ``secrets.keep_api_keys_out_of_the_run_summary``            ``LMMS_EVAL_PLUGINS`` names the suite, once the
                                                              run's task index is built (the run's one
                                                              summary line)
  ``secrets.keep_secrets_out_of_lmms_evals_error_texts``      ``LMMS_EVAL_PLUGINS`` names the suite; a suite task
                                                              or backend is built (every log line of the
                                                              process, every failure text of the run's samples
                                                              files and response cache)
  ``durability.stop_cleanly_on_sigterm``                      a suite task or backend is built (the process;
                                                              Ctrl-C only in a run of lmms-eval's CLI)
  ``results.clean_lone_surrogates``                           a suite task or backend is built (every response
                                                              of the run: lmms-eval unwraps them before it
                                                              knows their task)
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

Modules by concern: ``tasks`` (task discovery, what a run's tasks need before the model loads), ``durability``
(what a stopped or killed run keeps, and a run's exit status), ``results`` (what reaches and leaves the results and
samples files), ``backends`` (lmms-eval's own backends on the suite's tasks), ``secrets`` (the evaluated model's API
key and the run's other secrets kept out of what a run writes and prints), ``replacements`` (the one wrapper per
lmms-eval function, and the record of what is in place), ``switches`` (when each is switched on).
What a run learns as it goes (the response cache it opened, why it must exit non-zero, ...) is kept on the run
object of its ``simple_evaluate`` call, ``lmms_egoplan.core.run.SuiteRun`` (``tasks.check_suite_tasks_before_the_model``
makes it and hands it over).

lmms-eval loads the suite's model entry point in every run once the suite is installed; the entry point registers
the backends' manifests and calls ``switches.switch_on(ENTRY_POINT_LOADED)``, which does nothing, and imports
nothing more, unless ``LMMS_EVAL_PLUGINS`` names the suite. A run that names none of the suite behaves as lmms-eval
alone and costs what it costs without the suite (tests check both).
This package imports nothing of lmms-eval at import (entry points load while lmms-eval imports).
"""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Mapping

SUITE_PLUGIN = "lmms_egoplan"

FIXED_IN = (0, 8)


def lmms_eval_version() -> tuple[int, ...]:
    numbers = []
    for part in version("lmms-eval").split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)


def affected_release() -> bool:
    """Whether the installed lmms-eval is a release before ``FIXED_IN``: every workaround's guard."""
    return lmms_eval_version() < FIXED_IN


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
