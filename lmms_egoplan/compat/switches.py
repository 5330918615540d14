"""When the suite's lmms-eval workarounds are switched on (the table: ``lmms_egoplan.compat``).

The workaround modules are imported only by a run that names or uses the suite: lmms-eval loads the
suite's entry point in every run, and one that does not name the suite must not pay for them (they
import lmms-eval's task machinery, and with it torch and transformers)."""

from __future__ import annotations

import functools

from lmms_egoplan.compat import is_lmms_eval_cli, run_names_suite, suite_plugin_enabled

ENTRY_POINT_LOADED = "entry point loaded"  # lmms-eval loads the suite's model entry point (every run)
SUITE_USED = "suite used"  # a suite task or the suite's backend is built: this run uses the suite
BACKEND_CHOSEN = "backend chosen"  # a suite task learns the class of the run's lmms-eval backend (``backend``)


def switch_on(moment: str, backend: type | None = None) -> None:
    """The one place the suite's lmms-eval workarounds are switched on, at ``moment``: when lmms-eval loads
    the suite's entry point (``ENTRY_POINT_LOADED``: ``lmms_egoplan.models.model_manifests``), when a
    suite task or backend is built (``SUITE_USED``), and when a suite task learns which of lmms-eval's own
    backends the run uses (``BACKEND_CHOSEN``, with its class as ``backend``). What each moment switches on, and
    for which runs: ``_on_entry_point_load``, ``_on_suite_use``, ``_on_backend_chosen`` and the table of
    ``lmms_egoplan.compat``."""
    moments = {ENTRY_POINT_LOADED: _on_entry_point_load, SUITE_USED: _on_suite_use,
               BACKEND_CHOSEN: functools.partial(_on_backend_chosen, backend)}
    if moment not in moments:
        raise ValueError(f"no moment {moment!r} to switch workarounds on (known: {', '.join(moments)})")
    if (backend is not None) != (moment == BACKEND_CHOSEN):
        raise ValueError(f"a backend class goes with the moment {BACKEND_CHOSEN!r}, and only with it")
    moments[moment]()


def _on_entry_point_load() -> None:
    """Called when lmms-eval loads the suite's model entry point, i.e. in every lmms-eval run once
    the suite is installed: only runs that name the suite (``LMMS_EVAL_PLUGINS``, or lmms-eval's command
    line naming a suite backend or task: ``run_names_suite``, which reads the command line and the
    environment only) get anything; the others import nothing more. The moment matters: lmms-eval loads
    entry points before it parses its arguments and builds its task index, so every failure of such a
    run exits non-zero, and a user who named a suite task or backend without ``LMMS_EVAL_PLUGINS`` is
    told what to type (``tasks.watch_task_selection``)."""
    if not run_names_suite():
        return
    from lmms_egoplan.compat.durability import (
        fail_runs_with_failed_tasks,
        refuse_an_output_path_with_a_comma,
        say_what_to_fix_after_uncaught_errors,
    )
    from lmms_egoplan.compat.results import name_lmms_evals_own_version, record_in_results
    from lmms_egoplan.compat.secrets import keep_secrets_out_of_lmms_evals_error_texts
    from lmms_egoplan.compat.tasks import enable_plugin_task_discovery, watch_task_selection

    if suite_plugin_enabled():
        enable_plugin_task_discovery()
    if is_lmms_eval_cli():
        refuse_an_output_path_with_a_comma()
        say_what_to_fix_after_uncaught_errors()
        keep_secrets_out_of_lmms_evals_error_texts()  # the run's first log line masked too
    fail_runs_with_failed_tasks()
    watch_task_selection()
    record_in_results()
    name_lmms_evals_own_version()


def _on_suite_use() -> None:
    """Called when a suite task or the suite's backend is built: this run uses the suite."""
    from lmms_egoplan.compat.durability import (
        exit_when_results_are_written,
        fail_runs_with_failed_tasks,
        keep_failed_requests_out_of_the_response_cache,
        keep_responses_of_stopped_runs,
        key_suite_answers_by_what_changes_them,
        stop_cleanly_on_sigterm,
    )
    from lmms_egoplan.compat.results import (
        clean_lone_surrogates,
        fail_runs_whose_files_are_cut,
        keep_loglikelihood_results,
        name_lmms_evals_own_version,
        record_in_results,
        write_results_as_strict_json,
    )
    from lmms_egoplan.compat.secrets import (
        keep_api_keys_out_of_the_response_cache,
        keep_secrets_out_of_lmms_evals_error_texts,
    )

    keep_loglikelihood_results()
    fail_runs_with_failed_tasks()
    keep_responses_of_stopped_runs()
    key_suite_answers_by_what_changes_them()
    keep_failed_requests_out_of_the_response_cache()
    keep_api_keys_out_of_the_response_cache()
    keep_secrets_out_of_lmms_evals_error_texts()
    stop_cleanly_on_sigterm()
    clean_lone_surrogates()
    write_results_as_strict_json()
    fail_runs_whose_files_are_cut()
    exit_when_results_are_written()
    record_in_results()
    name_lmms_evals_own_version()


def _on_backend_chosen(backend: type) -> None:
    """Called when a suite task is bound to one of lmms-eval's own backends (``backend``: its class): the
    workarounds in that backend, for runs of the suite's tasks on it."""
    from lmms_egoplan.compat.backends import score_llava_hf_with_its_images

    score_llava_hf_with_its_images(backend)
