"""Every lmms-eval attribute the suite replaces (lmms-eval's only: ``LAYER_ORDER`` names no other module), each
replaced once.

A workaround that changes an lmms-eval function adds a *layer* to it (``add_layer``): ``layer(call, *args,
**kwargs)``, where ``call`` runs the layers inside it and, innermost, lmms-eval's own function. The first
layer put on a function replaces it by one wrapper; later layers join that wrapper, which calls them in
the order stated in ``LAYER_ORDER`` (outermost first), whatever order they were switched on in. A run's
results file names the workarounds in place and the lmms-eval release they worked around
(``record_in_results``), so that a number can be traced to the lmms-eval behaviour that produced it.
Replaced once, a function stays replaced for the rest of the process, but its wrapper calls the layers only for a run
that uses the suite (``uses_the_suite``); for any other run it is lmms-eval's own function.
This module imports nothing of lmms-eval at import (entry points load while lmms-eval imports).
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

from lmms_egoplan.compat import suite_plugin_enabled
from lmms_egoplan.contract.adapter import JoinsARun
from lmms_egoplan.core.run import run_of

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

# The attributes whose layers act in every run of the process, each deciding for itself: a run builds its task index,
# and calls simple_evaluate, before it is known whether it uses the suite; the command's exit status is its last run's
# to give. The layers of the others act in the runs that use the suite only (``uses_the_suite``).
_EVERY_RUN = (("lmms_eval.tasks", "TaskManager.__init__"), ("lmms_eval.evaluator", "simple_evaluate"),
              ("lmms_eval.__main__", "cli_evaluate_single"))
# The attributes of an object that carries its run: a results writer of a run of the suite is handed the run
# (``core.run.hand_over``); lmms-eval's own Python callers write theirs after their simple_evaluate call has returned.
_RUN_CARRIED = (("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_aggregated"),
                ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples"))

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
        scope = None if (module, attribute) in _EVERY_RUN else (
            carries_a_run_of_the_suite if (module, attribute) in _RUN_CARRIED else uses_the_suite)
        wrapper = _wrapper(function, order, scope)
        layers = getattr(wrapper, _LAYERS)
        replacement = kind(wrapper) if kind else wrapper
        setattr(owner, name, replacement)
        for alias_module, alias in ALIASES.get((module, attribute), ()):
            aliased = sys.modules.get(alias_module)  # one imported later binds the replacement
            if aliased is not None and hasattr(aliased, alias):
                setattr(aliased, alias, replacement)
    layers[concern] = layer


def _wrapper(original: Callable, order: tuple[str, ...], scope: Callable[[Any], bool] | None) -> Callable:
    """The one wrapper of ``original``: its layers, in ``order``, in a run ``scope`` says uses the suite (given the
    call's first argument, its object if any); None: every run, each layer deciding for itself."""
    layers: dict[str, Callable] = {}

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if scope is not None and not scope(args[0] if args else None):
            return original(*args, **kwargs)  # a run that does not use the suite: lmms-eval's own function
        call = original
        for concern in reversed(order):
            layer = layers.get(concern)
            if layer is not None:
                call = functools.partial(layer, call)
        return call(*args, **kwargs)

    setattr(wrapper, _LAYERS, layers)
    return wrapper


def uses_the_suite(owner: Any = None) -> bool:
    """Whether the lmms-eval run a call belongs to uses the suite: ``LMMS_EVAL_PLUGINS`` names it (then every run
    of the process does: a ``--config`` file's ``env`` is set for all its runs before the first), ``owner`` (the
    call's object) was handed a run of the suite, or the evaluation lmms-eval is running builds a suite task, runs a
    suite backend, or was handed a run of the suite (its CLI arguments, its results writer). lmms-eval hands the
    objects of a run to neither its unwrapping of responses, nor its response cache's checks, nor its log: the
    evaluation is its ``simple_evaluate`` / CLI call on the stack. A call outside any evaluation (the suite's own code,
    its tests) is its caller's, who switched the layers on."""
    if carries_a_run_of_the_suite(owner):
        return True
    evaluations = [[found.get(name) for name in _EVALUATION_FRAMES[key]] for key, found in _evaluation_frames()]
    return not evaluations or any(_of_the_suite(value) for values in evaluations for value in values)


def carries_a_run_of_the_suite(owner: Any) -> bool:
    """Whether ``owner`` (an lmms-eval object of a run: its results writer) was handed a run of the suite, or
    ``LMMS_EVAL_PLUGINS`` names the suite."""
    return suite_plugin_enabled() or run_of(owner) is not None


# lmms-eval's functions that run an evaluation (its folder, file, function) -> their locals that say whether it is one
# of the suite: its CLI arguments and results writer (handed a run of the suite), its backend and tasks (the suite's).
_SIMPLE_EVALUATE_FRAME = ("lmms_eval", "evaluator.py", "simple_evaluate")
_CLI_EVALUATE_FRAME = ("lmms_eval", "__main__.py", "cli_evaluate")
_EVALUATION_FRAMES: dict[tuple[str, str, str], tuple[str, ...]] = {
    _SIMPLE_EVALUATE_FRAME: ("cli_args", "evaluation_tracker", "lm", "task_dict"),
    ("lmms_eval", "__main__.py", "cli_evaluate_single"): ("args", "evaluation_tracker"),
    _CLI_EVALUATE_FRAME: ("args",),  # the run its loop over a --config file's runs is at
}
_EVALUATION_FUNCTIONS = frozenset(name for _, _, name in _EVALUATION_FRAMES)


def _evaluation_frames():
    """lmms-eval's evaluation functions on the stack, innermost first: (their ``_EVALUATION_FRAMES`` key, their locals);
    a ``python -m lmms_eval`` run's module is ``__main__``: known by its file."""
    frame = sys._getframe(1)
    while frame is not None:
        # Asked at every response and log line: the function's name first, and a Path of the file only where it matches
        if frame.f_code.co_name in _EVALUATION_FUNCTIONS:
            path = Path(frame.f_code.co_filename)
            key = (path.parent.name, path.name, frame.f_code.co_name)
            if key in _EVALUATION_FRAMES:
                yield key, frame.f_locals
        frame = frame.f_back


def evaluation_in_progress() -> dict[str, Any]:
    """The innermost ``simple_evaluate`` call of lmms-eval on the stack: its locals named in ``_EVALUATION_FRAMES``
    ({} outside one)."""
    found = _innermost(_SIMPLE_EVALUATE_FRAME)
    return {name: found.get(name) for name in _EVALUATION_FRAMES[_SIMPLE_EVALUATE_FRAME]} if found else {}


def command_in_progress() -> Mapping[str, Any]:
    """The locals of lmms-eval's CLI loop over the runs of its command (``cli_evaluate``) on the stack ({} outside
    one: ``simple_evaluate`` called from Python)."""
    return _innermost(_CLI_EVALUATE_FRAME)


def _innermost(frame_key: tuple[str, str, str]) -> Mapping[str, Any]:
    return next((found for key, found in _evaluation_frames() if key == frame_key), {})


def _of_the_suite(value: Any) -> bool:
    """Whether ``value`` (a local of an lmms-eval evaluation) was handed a run of the suite, or is a suite task or
    backend, or a task dict that holds one (groups included)."""
    if isinstance(value, Mapping):
        return any(_of_the_suite(item) for item in value.values())
    return run_of(value) is not None or isinstance(value, JoinsARun)


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
