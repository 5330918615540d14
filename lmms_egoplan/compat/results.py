"""lmms-eval workarounds about what reaches and leaves the results and samples files: loglikelihood
pairs kept as pairs, model output cleaned of lone surrogates, strict JSON, and the run's date-time for
the files a task writes beside them. Guards and the switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

from lmms_egoplan.compat import affected_release, lmms_eval_source, switched_off


def keep_loglikelihood_results() -> bool:
    """Hand ``multiple_choice`` tasks the ``(loss, is_greedy)`` pairs that backends return.

    Bug: ``lmms_eval/api/instance.py:unwrap_generation_output``, which the evaluator applies to
    every response, turns anything but text into ``str(response)``: a loglikelihood pair becomes
    ``"(1.2, False)"`` and every multiple_choice task fails in process_results ("too many values
    to unpack"); a pair read back from ``--use_cache`` (a JSON list) meets the same fate. Fix:
    pairs pass through as tuples; everything else is unwrapped as before. The evaluator binds the
    name at import, so it is replaced there too. Returns whether the workaround is in place.
    """
    from lmms_eval.api import instance

    if switched_off("results.keep_loglikelihood_results"):  # docs/upstream/01-loglikelihood-results.patch
        return False
    original = instance.unwrap_generation_output
    if getattr(original, "_keeps_loglikelihood_pairs", False):
        return True
    if not (affected_release() and _pairs_become_strings(original)):
        return False

    @functools.wraps(original)
    def unwrap_generation_output(output):
        if _is_loglikelihood_pair(output):
            return tuple(output), None
        return original(output)

    unwrap_generation_output._keeps_loglikelihood_pairs = True
    instance.unwrap_generation_output = unwrap_generation_output
    evaluator = sys.modules.get("lmms_eval.evaluator")
    if evaluator is not None and hasattr(evaluator, "unwrap_generation_output"):
        evaluator.unwrap_generation_output = unwrap_generation_output
    return True

def clean_lone_surrogates() -> bool:
    """Log model output that holds a lone surrogate instead of losing the samples file.

    Bug: an API model can return text with a lone surrogate (from broken bytes, e.g. "\\udcff");
    ``lmms_eval/loggers/evaluation_tracker.py:save_results_samples`` writes samples as UTF-8, which
    cannot encode it, and the task's samples file stays empty (the run still exits 0). Fix: text
    responses are cleaned where the evaluator unwraps them (``unwrap_generation_output``): lone
    surrogates become U+FFFD, what any UTF-8 decoder makes of broken bytes. Returns whether the
    workaround is in place.
    """
    from lmms_eval.api import instance

    from lmms_egoplan.core.files import valid_text

    unwrap = instance.unwrap_generation_output
    if getattr(unwrap, "_cleans_lone_surrogates", False):
        return True
    if not (affected_release() and unwrap("\udcff")[0] == "\udcff"):
        return False

    @functools.wraps(unwrap)
    def unwrap_generation_output(output):
        text, counts = unwrap(output)
        return (valid_text(text) if isinstance(text, str) else text), counts

    unwrap_generation_output._cleans_lone_surrogates = True
    unwrap_generation_output._keeps_loglikelihood_pairs = getattr(unwrap, "_keeps_loglikelihood_pairs", False)
    instance.unwrap_generation_output = unwrap_generation_output
    evaluator = sys.modules.get("lmms_eval.evaluator")
    if evaluator is not None and hasattr(evaluator, "unwrap_generation_output"):
        evaluator.unwrap_generation_output = unwrap_generation_output
    return True

def _is_loglikelihood_pair(output: Any) -> bool:
    return (isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], bool)
            and isinstance(output[0], (int, float)) and not isinstance(output[0], bool))

def _pairs_become_strings(unwrap: Callable) -> bool:
    return isinstance(unwrap((1.5, False))[0], str)

def write_results_as_strict_json() -> bool:
    """Write a metric without a value as ``null``, not as a bare ``NaN``.

    Bug: ``lmms_eval/loggers/evaluation_tracker.py`` writes the results and samples files with
    ``json.dumps`` defaults, which print NaN and infinity as ``NaN`` / ``Infinity``: not JSON, so
    strict parsers (``jq``, JavaScript, Go, Rust, ``json.loads`` with ``parse_constant``) reject the
    whole file. A metric has no value where nothing could score it (a judge that failed every
    judgement). Fix: ``save_results_aggregated`` and ``save_results_samples`` write copies in which
    such numbers are ``null`` (``core.files.finite_or_null``); the run's judged / failed counts beside
    a judged metric say why. What lmms-eval prints and returns is unchanged. Returns whether the
    workaround is in place.
    """
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    from lmms_egoplan.core.files import finite_or_null

    if getattr(EvaluationTracker.save_results_aggregated, "_strict_json", False):
        return True
    if not (affected_release() and _writes_nan_as_is()):
        return False
    save_results, save_samples = EvaluationTracker.save_results_aggregated, EvaluationTracker.save_results_samples

    @functools.wraps(save_results)
    def save_results_aggregated(self, results, samples, datetime_str):
        written = finite_or_null(results)
        save_results(self, written, samples, datetime_str)
        results.update((key, value) for key, value in written.items() if key not in results)  # task hashes, config

    @functools.wraps(save_samples)
    def save_results_samples(self, task_name, samples):
        save_samples(self, task_name, finite_or_null(samples))

    save_results_aggregated._strict_json = True
    EvaluationTracker.save_results_aggregated = save_results_aggregated
    EvaluationTracker.save_results_samples = save_results_samples
    return True

def _writes_nan_as_is(save_results: str | None = None) -> bool:
    save_results = save_results or lmms_eval_source("lmms_eval.loggers.evaluation_tracker",
                                                    "EvaluationTracker.save_results_aggregated")
    return "json.dumps(" in save_results and "allow_nan" not in save_results

def run_datetime_str(cli_args: Any = None) -> str | None:
    """The date-time lmms-eval names this run's results and samples files with, or None where it
    cannot be learnt.

    Gap: ``lmms_eval/__main__.py:cli_evaluate`` computes ``datetime_str`` and hands it only to
    ``evaluator.simple_evaluate`` and the results writer; a task that writes files beside the
    results (judgements, plans, a submission) cannot learn it, so its files carry a later second
    than the run's results file. Workaround: read it from the running ``simple_evaluate`` call
    (its frame; nothing of lmms-eval changes). Fix proposed upstream: ``cli_args.datetime_str``,
    which is read first.
    """
    if isinstance(getattr(cli_args, "datetime_str", None), str):
        return cli_args.datetime_str
    if not affected_release():
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "simple_evaluate" and frame.f_globals.get("__name__") == "lmms_eval.evaluator":
            value = frame.f_locals.get("datetime_str")
            return value if isinstance(value, str) else None
        frame = frame.f_back
    return None
