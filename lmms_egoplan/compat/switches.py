"""When the suite's lmms-eval workarounds are switched on (the table: ``lmms_egoplan.compat``)."""

from __future__ import annotations

from lmms_egoplan.compat import suite_plugin_enabled
from lmms_egoplan.compat.durability import (
    fail_runs_with_failed_tasks,
    keep_responses_of_stopped_runs,
    stop_cleanly_on_sigterm,
)
from lmms_egoplan.compat.results import (
    clean_lone_surrogates,
    fail_runs_whose_files_are_cut,
    keep_loglikelihood_results,
    write_results_as_strict_json,
)
from lmms_egoplan.compat.tasks import enable_plugin_task_discovery, watch_task_selection


def on_entry_point_load() -> None:
    """Called when lmms-eval loads the suite's model entry point, i.e. in every lmms-eval run once
    the suite is installed: only runs that name the suite in ``LMMS_EVAL_PLUGINS`` get anything.
    The moment matters: lmms-eval loads entry points before it builds its task index."""
    if suite_plugin_enabled():
        enable_plugin_task_discovery()
        fail_runs_with_failed_tasks()
    # Also in runs without the variable: a user who forgot it names a suite task or backend.
    watch_task_selection()

def on_suite_use() -> None:
    """Called when a suite task or the suite's backend is built: this run uses the suite."""
    keep_loglikelihood_results()
    fail_runs_with_failed_tasks()
    keep_responses_of_stopped_runs()
    stop_cleanly_on_sigterm()
    clean_lone_surrogates()
    write_results_as_strict_json()
    fail_runs_whose_files_are_cut()  # after strict JSON: it checks the files as written
