"""Every lmms-eval attribute the suite replaces (lmms-eval's only: ``LAYER_ORDER`` names no other module), each
replaced once.

A workaround that changes an lmms-eval function adds a *layer* to it (``add_layer``): ``layer(call, *args,
**kwargs)``, where ``call`` runs the layers inside it and, innermost, lmms-eval's own function. The first
layer put on a function replaces it by one wrapper; later layers join that wrapper, which calls them in
the order stated in ``LAYER_ORDER`` (outermost first), whatever order they were switched on in. A run's
results file names the workarounds in place and the lmms-eval release they worked around
(``record_in_results``), so that a number can be traced to the lmms-eval behaviour that produced it.
This module imports nothing of lmms-eval at import (entry points load while lmms-eval imports).
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any, Callable

# lmms-eval attribute (module, dotted path) -> the concerns that replace it, outermost first: an outer one
# sees what the inner ones did (the files as written, the run's exit after the checks).
LAYER_ORDER: dict[tuple[str, str], tuple[str, ...]] = {
    ("lmms_eval.api.instance", "unwrap_generation_output"): (
        "results.keep_loglikelihood_results",
        "results.clean_lone_surrogates",
    ),
    ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_aggregated"): (
        "durability.exit_when_results_are_written",  # last: once the file is written whole
        "results.fail_runs_whose_files_are_cut",  # checks the file as lmms-eval wrote it
        "results.record_in_results",
        "results.write_results_as_strict_json",
    ),
    ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples"): (
        "durability.exit_when_results_are_written",
        "results.fail_runs_whose_files_are_cut",
        "results.record_in_results",
        "results.write_results_as_strict_json",
        "secrets.keep_secrets_out_of_lmms_evals_error_texts",  # the failure texts of the samples written
    ),
    ("lmms_eval.caching.response_cache", "ResponseCache.create"): (
        "durability.key_suite_answers_by_what_changes_them",  # once the cache is open: its fingerprints, its record
        "durability.keep_responses_of_stopped_runs",
        "secrets.keep_api_keys_out_of_the_response_cache",  # the fingerprint lmms-eval computes
    ),
    ("lmms_eval.caching.response_cache", "ResponseCache.execute"): (
        "durability.resume_sampled_runs",  # serves the suite's answers; the rest are asked (and stored) inside
        "durability.keep_responses_of_stopped_runs",
    ),
    ("lmms_eval.caching.response_cache", "ResponseCache.finalize"): ("durability.keep_responses_of_stopped_runs",),
    ("lmms_eval.caching.response_cache", "ResponseCache._is_valid_response"): (
        "durability.keep_failed_requests_out_of_the_response_cache",
    ),
    ("lmms_eval.caching.response_cache", "ResponseCache._lookup"): (
        "durability.keep_failed_requests_out_of_the_response_cache",
    ),
    ("lmms_eval.caching.response_cache", "ResponseCache._extract_cacheable"): ("results.clean_lone_surrogates",),
    ("lmms_eval.caching.response_cache", "ResponseCache._log_to_audit"): (
        "secrets.keep_secrets_out_of_lmms_evals_error_texts",
    ),
    ("lmms_eval.models.simple.llava_hf", "LlavaHf.loglikelihood"): ("backends.score_llava_hf_with_its_images",),
    ("lmms_eval.__main__", "cli_evaluate_single"): (  # the command's exit status, once its last run has run
        "durability.fail_runs_with_failed_tasks",
        "durability.exit_when_results_are_written",
    ),
    ("lmms_eval.tasks", "TaskManager.__init__"): (
        "switches.switch_on",  # the workarounds on simple_evaluate, once lmms-eval has imported its evaluator
        "durability.fail_runs_with_failed_tasks",  # the exit guard's sink, after cli_evaluate's log reset
        "tasks.enable_plugin_task_discovery",
    ),
    ("lmms_eval.evaluator", "simple_evaluate"): (
        "durability.fail_runs_with_failed_tasks",  # outermost: any error of the run, its checks included, ends it
        "secrets.keep_api_keys_out_of_the_run_summary",  # once the run, checks included, is over
        "secrets.keep_secrets_out_of_lmms_evals_error_texts",  # learns the model_args' key before anything logs it
        "tasks.check_suite_tasks_before_the_model",
    ),
}

# Other names lmms-eval binds the same function to at import: replaced with it.
ALIASES: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {
    ("lmms_eval.api.instance", "unwrap_generation_output"): (("lmms_eval.evaluator", "unwrap_generation_output"),),
}

# Workarounds that replace no function (a signal handler, a loguru patcher, a call the suite's
# tasks make), in place once ``note_in_place`` names them.
_NOTED: dict[str, None] = {}

# Concerns that are no workaround of an lmms-eval bug (left out of the record).
_NOT_WORKAROUNDS = ("results.record_in_results", "switches.switch_on")

_LAYERS = "_lmms_egoplan_layers"


def add_layer(concern: str, module: str, attribute: str, layer: Callable) -> None:
    """Put ``concern``'s ``layer`` on lmms-eval's ``module.attribute`` (one of ``LAYER_ORDER``'s), replacing
    the attribute by the suite's one wrapper where it is not replaced yet."""
    order = LAYER_ORDER[(module, attribute)]
    if concern not in order:
        raise ValueError(f"{concern} is not among the layers of {module}.{attribute}: {order}")
    owner, name = _owner(module, attribute)
    raw = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name)
    kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
    function = raw.__func__ if kind else raw
    layers = getattr(function, _LAYERS, None)
    if layers is None:
        wrapper = _wrapper(function, order)
        layers = getattr(wrapper, _LAYERS)
        replacement = kind(wrapper) if kind else wrapper
        setattr(owner, name, replacement)
        for alias_module, alias in ALIASES.get((module, attribute), ()):
            aliased = sys.modules.get(alias_module)  # one imported later binds the replacement
            if aliased is not None and hasattr(aliased, alias):
                setattr(aliased, alias, replacement)
    layers[concern] = layer


def _wrapper(original: Callable, order: tuple[str, ...]) -> Callable:
    layers: dict[str, Callable] = {}

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        call = original
        for concern in reversed(order):
            layer = layers.get(concern)
            if layer is not None:
                call = functools.partial(layer, call)
        return call(*args, **kwargs)

    setattr(wrapper, _LAYERS, layers)
    return wrapper


def has_layer(concern: str, module: str, attribute: str) -> bool:
    """Whether lmms-eval's ``module.attribute`` is the suite's wrapper with ``concern``'s layer on it."""
    return concern in _layers_on(module, attribute)


def _layers_on(module: str, attribute: str) -> dict[str, Callable]:
    if module not in sys.modules:  # not imported: nothing of it replaced
        return {}
    owner, name = _owner(module, attribute)
    raw = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)
    function = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    return getattr(function, _LAYERS, {})


def _owner(module: str, attribute: str) -> tuple[Any, str]:
    owner: Any = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


# Concerns whose layers change nothing until a task of a run asks for them: listed only where this says they are in
# effect in that run (``core.run.SuiteRun``, None: no run of the suite).
_IN_EFFECT_WHEN: dict[str, Callable[[Any], bool]] = {}


def counts_when_in_effect(concern: str, in_effect: Callable[[Any], bool]) -> None:
    """List ``concern`` among the workarounds in place only where ``in_effect(run)`` (its layers pass everything
    through until then; a noted one acts on some runs of the process only)."""
    _IN_EFFECT_WHEN[concern] = in_effect


def note_in_place(concern: str) -> None:
    """Record a workaround that replaces no lmms-eval function as in place in this process."""
    _NOTED[concern] = None


def in_place(run: Any = None) -> list[str]:
    """The workarounds in place in this process (for ``run``, ``core.run.SuiteRun``), each once: those layered on
    lmms-eval's functions (in ``LAYER_ORDER``'s order), then the others."""
    named: dict[str, None] = {}
    for (module, attribute), order in LAYER_ORDER.items():
        layers = _layers_on(module, attribute)
        named.update((concern, None) for concern in order if concern in layers and concern not in _NOT_WORKAROUNDS)
    named.update(_NOTED)
    return [concern for concern in named if _IN_EFFECT_WHEN.get(concern, lambda run: True)(run)]


RECORD_KEY = "lmms_egoplan_workarounds"


def workaround_record(run: Any = None) -> dict:
    """What a results file of ``run`` records of the workarounds (``RECORD_KEY``): lmms-eval's release, and the
    workarounds in place, named as in ``lmms_egoplan.compat``'s table and docs/upstream/README.md."""
    from importlib.metadata import version

    return {"lmms_eval": version("lmms-eval"), "applied": in_place(run)}
