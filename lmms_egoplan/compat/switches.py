"""When the suite's lmms-eval workarounds are switched on (the table: ``lmms_egoplan.compat``).

One switch, which the command shows: the run names the suite. It does so in one of two ways, both visible in
the command: ``LMMS_EVAL_PLUGINS=lmms_egoplan`` (lmms-eval's own documented plugin variable, which the suite's
tasks need to be found), read when lmms-eval loads the suite's entry point (``ENTRY_POINT_LOADED``); or a suite
task or suite backend being built (``SUITE_USED``: ``--tasks`` named one through ``--include_path``, or
``--model egoplan_hf`` / ``egoplan_server``). Nothing else is read: not ``sys.argv``, not other environment
variables, not ``--config``. A run that does neither is lmms-eval's alone: the workaround modules are not
even imported (they import lmms-eval's task machinery, and with it torch and transformers)."""

from __future__ import annotations

import functools

from lmms_egoplan.compat import suite_plugin_enabled

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
    """Called when lmms-eval loads the suite's model entry point, i.e. in every lmms-eval run once the suite
    is installed: only a run whose ``LMMS_EVAL_PLUGINS`` names the suite gets anything; the others import
    nothing more. lmms-eval loads entry points while its evaluator is still importing, before it builds its task
    index: what acts on ``TaskManager`` and the log is switched on now (the suite's tasks found; the exit guard,
    whose loguru sink is added again once ``cli_evaluate`` has reset its log), what acts on ``simple_evaluate``
    when the run's task index is built (``_on_task_index_built``), before the tasks and the model are."""
    if not suite_plugin_enabled():
        return
    from lmms_egoplan.compat.durability import fail_runs_with_failed_tasks
    from lmms_egoplan.compat.replacements import add_layer, has_layer
    from lmms_egoplan.compat.results import record_in_results
    from lmms_egoplan.compat.secrets import keep_secrets_out_of_lmms_evals_error_texts
    from lmms_egoplan.compat.tasks import enable_plugin_task_discovery

    enable_plugin_task_discovery()
    keep_secrets_out_of_lmms_evals_error_texts()  # the run's first log line masked too
    fail_runs_with_failed_tasks()
    record_in_results()
    if not has_layer(_SWITCH, *_TASK_MANAGER_INIT):
        add_layer(_SWITCH, *_TASK_MANAGER_INIT, _switching_on_once_the_index_is_built)


_SWITCH = "switches.switch_on"
_TASK_MANAGER_INIT = ("lmms_eval.tasks", "TaskManager.__init__")


def _switching_on_once_the_index_is_built(init, *args, **kwargs):
    _on_task_index_built()
    return init(*args, **kwargs)


def _on_task_index_built() -> None:
    """A run whose ``LMMS_EVAL_PLUGINS`` names the suite builds its task index: lmms-eval has imported its evaluator,
    and has not yet built the tasks or the model."""
    from lmms_egoplan.compat.secrets import keep_api_keys_out_of_the_run_summary, mask_the_model_args_key_too
    from lmms_egoplan.compat.tasks import check_suite_tasks_before_the_model

    check_suite_tasks_before_the_model()
    keep_api_keys_out_of_the_run_summary()
    mask_the_model_args_key_too()


def _on_suite_use() -> None:
    """Called when a suite task or the suite's backend is built: this run uses the suite, and its workarounds act on
    it (and on later runs of the process that use the suite, not on the others: ``replacements.uses_the_suite``)."""
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
        record_in_results,
        write_results_as_strict_json,
    )
    from lmms_egoplan.compat.secrets import (
        keep_api_keys_out_of_the_response_cache,
        keep_secrets_out_of_lmms_evals_error_texts,
        mask_the_model_args_key_too,
    )

    keep_loglikelihood_results()
    fail_runs_with_failed_tasks()
    keep_responses_of_stopped_runs()
    key_suite_answers_by_what_changes_them()
    keep_failed_requests_out_of_the_response_cache()
    keep_api_keys_out_of_the_response_cache()
    keep_secrets_out_of_lmms_evals_error_texts()
    mask_the_model_args_key_too()
    stop_cleanly_on_sigterm()
    clean_lone_surrogates()
    write_results_as_strict_json()
    fail_runs_whose_files_are_cut()
    exit_when_results_are_written()
    record_in_results()
    _join_the_evaluation_in_progress()


def _join_the_evaluation_in_progress() -> None:
    """Hand the CLI arguments and the results writer of the ``simple_evaluate`` call that builds the suite's task or
    backend one run of the suite (the one either has already): they say, once the call has returned, that the run
    used the suite (its exit status, its files: ``replacements.uses_the_suite``)."""
    from lmms_egoplan.compat.replacements import evaluation_in_progress
    from lmms_egoplan.core.run import SuiteRun, hand_over, run_of

    evaluation = evaluation_in_progress()
    carriers = [evaluation[name] for name in ("cli_args", "evaluation_tracker") if evaluation.get(name) is not None]
    run = next((run_of(carrier) for carrier in carriers if run_of(carrier) is not None), None) or SuiteRun()
    for carrier in carriers:
        hand_over(run, carrier)


def _on_backend_chosen(backend: type) -> None:
    """Called when a suite task is bound to one of lmms-eval's own backends (``backend``: its class): the
    workarounds in that backend, for runs of the suite's tasks on it."""
    from lmms_egoplan.compat.backends import score_llava_hf_with_its_images

    score_llava_hf_with_its_images(backend)
