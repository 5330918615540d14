"""Every lmms-eval attribute the suite replaces (lmms-eval's only: ``LAYER_ORDER`` names no other module), each
replaced once.

A workaround that changes an lmms-eval function adds a *layer* to it (``add_layer``): ``layer(call, *args,
**kwargs)``, where ``call`` runs the layers inside it and, innermost, lmms-eval's own function. The first
layer put on a function replaces it by one wrapper; later layers join that wrapper, which calls them in
the order stated in ``LAYER_ORDER`` (outermost first), whatever order they were switched on in. The layers of an
attribute that ``scope_layers`` scopes act only on the calls of runs that use the suite: a later run of the same
process that does not gets lmms-eval's own functions, as if the suite had never taken part. A run's
results file names the workarounds in place and the lmms-eval release they worked around
(``record_in_results``), so that a number can be traced to the lmms-eval behaviour that produced it.
This module imports nothing of lmms-eval at import (entry points load while lmms-eval imports).
"""

from __future__ import annotations

import contextlib
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
        "tasks.scope_to_the_runs_that_use_the_suite",  # tells a run of the suite from one that is lmms-eval's alone
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
_NOT_WORKAROUNDS = ("results.record_in_results", "switches.switch_on", "tasks.scope_to_the_runs_that_use_the_suite")

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
        wrapper = _wrapper(function, (module, attribute))
        layers = getattr(wrapper, _LAYERS)
        replacement = kind(wrapper) if kind else wrapper
        setattr(owner, name, replacement)
        for alias_module, alias in ALIASES.get((module, attribute), ()):
            aliased = sys.modules.get(alias_module)  # one imported later binds the replacement
            if aliased is not None and hasattr(aliased, alias):
                setattr(aliased, alias, replacement)
    layers[concern] = layer


def _wrapper(original: Callable, replaced: tuple[str, str]) -> Callable:
    order = LAYER_ORDER[replaced]
    layers: dict[str, Callable] = {}

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        uses_the_suite = _SCOPES.get(replaced)
        if uses_the_suite is not None and not uses_the_suite(*args, **kwargs):
            with lmms_evals_own_functions():
                return original(*args, **kwargs)
        call = original
        for concern in reversed(order):
            layer = layers.get(concern)
            if layer is not None:
                call = functools.partial(layer, call)
        return call(*args, **kwargs)

    setattr(wrapper, _LAYERS, layers)
    return wrapper


# lmms-eval attribute -> whether a call of it (its arguments) belongs to a run that uses the suite (``scope_layers``)
_SCOPES: dict[tuple[str, str], Callable[..., bool]] = {}
# What a workaround changed of the process beyond lmms-eval's attributes (a signal handler), each as a context in which
# it is put back as lmms-eval leaves it (``put_aside_for_other_runs``)
_PUT_ASIDE: dict[str, Callable[[], contextlib.AbstractContextManager]] = {}


def scope_layers(module: str, attribute: str, uses_the_suite: Callable[..., bool]) -> None:
    """Have the layers on lmms-eval's ``module.attribute`` act only on the calls that ``uses_the_suite(*args,
    **kwargs)`` says belong to a run that uses the suite. Any other call runs lmms-eval's own function with every
    replaced attribute back to lmms-eval's own while it runs (``lmms_evals_own_functions``): a later run of a
    ``--config`` file, or a later ``simple_evaluate`` call, that names nothing of the suite is lmms-eval's alone."""
    _SCOPES[(module, attribute)] = uses_the_suite


def put_aside_for_other_runs(concern: str, as_lmms_eval_leaves_it: Callable[[], contextlib.AbstractContextManager]):
    """Have ``concern``'s change to the process (a signal handler) undone while a run that does not use the suite
    runs: ``as_lmms_eval_leaves_it()`` is a context that undoes it and, on leaving, puts it back."""
    _PUT_ASIDE[concern] = as_lmms_eval_leaves_it


@contextlib.contextmanager
def lmms_evals_own_functions():
    """A context in which every attribute the suite replaced is lmms-eval's own again (its aliases too), and what a
    workaround changed of the process is put aside (``put_aside_for_other_runs``); all put back on leaving."""
    swapped: list[tuple[Any, str, Any, Any]] = []  # (owner, name, the suite's replacement, lmms-eval's own)
    for module, attribute in LAYER_ORDER:
        if module not in sys.modules:
            continue
        owner, name = _owner(module, attribute)
        raw = vars(owner).get(name) if isinstance(owner, type) else getattr(owner, name, None)
        kind = type(raw) if isinstance(raw, (classmethod, staticmethod)) else None
        function = raw.__func__ if kind else raw
        if getattr(function, _LAYERS, None) is None:
            continue
        own = kind(function.__wrapped__) if kind else function.__wrapped__
        swapped.append((owner, name, raw, own))
        for alias_module, alias in ALIASES.get((module, attribute), ()):
            aliased = sys.modules.get(alias_module)
            if aliased is not None and getattr(aliased, alias, None) is raw:
                swapped.append((aliased, alias, raw, own))
    with contextlib.ExitStack() as put_back:
        for as_lmms_eval_leaves_it in _PUT_ASIDE.values():
            put_back.enter_context(as_lmms_eval_leaves_it())
        for owner, name, _, own in swapped:
            setattr(owner, name, own)
        try:
            yield
        finally:
            for owner, name, replacement, _ in swapped:
                setattr(owner, name, replacement)


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
