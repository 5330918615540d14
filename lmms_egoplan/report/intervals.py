"""95% intervals from the per-sample logs (``--log_samples``).

A sample's value of a metric is what the task logged for it under the metric's name: a number
(a 0 / 1 correctness per breakdown, a plan's length, lm-eval's per-sample metrics), or a judged
item whose rating is read from the run's judge audit trail (``<date>_judgements_<task>.jsonl``).
Accuracies (every value 0 or 1) get the exact binomial (Clopper-Pearson) interval, other means a
percentile bootstrap over samples. A group's mean (``layout.GroupMean``) gets its interval from its member
tasks' samples: a micro mean (over the pooled samples) as a task's mean, a macro mean (the mean of the members'
means, independent samples of different sizes) a stratified percentile bootstrap (each member's samples resampled
within it); a micro mean whose members left samples out of their means (failed judgements: lmms-eval still weighs a
member by all it logged) the stratified bootstrap of the members' means weighted as the group weighs them. A metric
a task scores at aggregation from what was logged (plans scored against gold plans, say) has the per-sample values of
the run's ``SAMPLE_SCORES`` file (``contract.adapter``); without that file, no interval.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.contract.adapter import SAMPLE_SCORES
from lmms_egoplan.contract.judged import PREDICT_ONLY_ITEMS
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.files import read_jsonl
from lmms_egoplan.core.statistics import mean_or_nan
from lmms_egoplan.judge.rubrics import FixedRating, Rubric, is_judge_parts_item, item_parts, load_rubric
from lmms_egoplan.report.layout import MICRO, GroupMean
from lmms_egoplan.report.runs import PREDICTED_ONLY, Run

CONFIDENCE = 0.95
EXACT_BINOMIAL = "exact binomial (Clopper-Pearson)"
BOOTSTRAP = "percentile bootstrap over samples (2,000 resamples, seed 0)"
STRATIFIED_BOOTSTRAP = ("stratified percentile bootstrap, each task's samples resampled within it (2,000 resamples, "
                        "seed 0)")
WEIGHTED_STRATIFIED_BOOTSTRAP = ("stratified percentile bootstrap, each task's samples resampled within it and its "
                                 "mean weighted by all the samples it logged (2,000 resamples, seed 0)")
RESAMPLES = 2000


class NoInterval(Exception):
    """An interval the samples cannot give (its message says why): the row says so, never a degenerate [v, v].
    Its message: ``subject`` (what has none, "<task> <metric>"), then ``reason``, kept apart so that a row says
    a reason several subjects share once."""

    def __init__(self, reason: str, subject: str = "") -> None:
        super().__init__(f"{subject}: {reason}" if subject else reason)
        self.reason, self.subject = reason, subject


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str
    samples: int


@dataclass(frozen=True)
class SampleValues:
    """A metric's per-sample values (``sample_values``): whether they are judge scores, and where they were read."""

    values: list[float]
    judged: bool
    source: str  # "its logged samples (<file>)", for a message


def _samples(run: Run, path: Path) -> tuple[dict, ...]:
    """The records of one of ``run``'s JSON-lines files (its logged samples, its per-sample scores), read once."""
    if ("records", path) not in run.read_files:
        run.read_files["records", path] = tuple(sample for _, sample in read_jsonl(path))
    return run.read_files["records", path]


def _ratings(run: Run, audit_trail: Path | None) -> dict[str, float | None]:
    """Request id -> rating in one of ``run``'s judge audit trails (the last record of an id wins: retries append),
    read once."""
    if ("ratings", audit_trail) not in run.read_files:
        run.read_files["ratings", audit_trail] = {} if audit_trail is None else {
            record["id"]: record.get("rating") for _, record in read_jsonl(audit_trail)}
    return run.read_files["ratings", audit_trail]


def _judged_value(item: dict, ratings: dict[str, float | None], rubrics: Mapping[str, Rubric]) -> float | None:
    """A judged sample's score: its parts' mean rating x the rubric's scale; None if a part has no rating."""
    values = []
    for part in item_parts(item).values():
        rating = part.rating if isinstance(part, FixedRating) else ratings.get(part.id)
        if rating is None:
            return None
        values.append(rating)
    return mean_or_nan(values) * load_rubric(item["judge_rubric"], rubrics).scale


def sample_values(run: Run, task: str, metric: str, *, rubrics: Mapping[str, Rubric]) -> SampleValues | None:
    """The metric's value for each logged sample that reports it, and whether they are judge scores (read with
    the rubric of ``rubrics`` their items name: the benchmark's, ``ReportFace.rubrics``); None without a usable log.
    Raises InputError where the log holds other than the samples the run scored (cut at a line's end, as a full
    disk leaves it, or emptied): an interval from it would be of other samples."""
    if task not in run.samples:
        return None
    samples, scored = _samples(run, run.samples[task]), run.sample_counts.get(task)
    if scored is not None and len(samples) != scored:
        raise InputError(f"{run.samples[task]} logs {len(samples)} samples, the run scored {scored}: the log is not "
                         f"the whole run's")
    values: list[float] = []
    judged_items = False
    ratings: dict[str, float | None] | None = None  # read at the first judged item: a folder listing, once a task
    for sample in samples:
        value = sample.get(metric)
        logged = sample.get(PREDICTED_ONLY)  # a --predict_only run logs its judged items there (rejudged since)
        if value is None and isinstance(logged, dict) and isinstance(logged.get(PREDICT_ONLY_ITEMS), dict):
            value = logged[PREDICT_ONLY_ITEMS].get(metric)
        if value is None:
            continue
        if isinstance(value, (bool, int, float)):
            values.append(float(value))
        elif is_judge_parts_item(value):
            judged_items = True
            ratings = _ratings(run, run.side_file("judgements", task)) if ratings is None else ratings
            if any(not isinstance(part, FixedRating) and part.id not in ratings for part in item_parts(value).values()):
                return None  # the run's audit trail is not there, or not whole: its ratings cannot be read
            judged = _judged_value(value, ratings, rubrics)
            if judged is None:  # a failed judgement: the score leaves it out too
                continue
            values.append(judged)
        else:  # scored at aggregation (e.g. plans against gold plans): the values the task kept of each sample
            return _scored_at_aggregation(run, task, metric)
    return SampleValues(values, judged_items, f"its logged samples ({run.samples[task].name})") if values else None


def _scored_at_aggregation(run: Run, task: str, metric: str) -> SampleValues:
    """The metric's value for each sample in whose mean it counts, as the task kept them when it aggregated (its
    ``SAMPLE_SCORES`` run file). Raises NoInterval where the run kept none of them (a run of a version before the
    file)."""
    path = run.side_file(SAMPLE_SCORES, task)
    values = [] if path is None else [float(scores[metric]) for scores in _samples(run, path) if metric in scores]
    if not values:
        raise NoInterval(f"{task} {metric} is scored at aggregation and the run kept no per-sample values of it "
                         f"({'no ' + SAMPLE_SCORES + ' file beside its results' if path is None else path.name})")
    return SampleValues(values, False, f"the per-sample values the run kept ({path.name})")


def _check_reported(run: Run, task: str, metric: str, point: float, what: str,
                    left_out: str = "an interval around another value is left out") -> None:
    """Raise InputError where ``point``, ``what`` the interval is of, is not the task's reported value: the samples
    are not those it averaged."""
    reported = run.metrics.get(task, {}).get(metric)
    if isinstance(reported, (int, float)) and not math.isclose(point, reported, rel_tol=1e-9, abs_tol=1e-9):
        raise InputError(f"{run.path}: {task} {metric} is {reported}, but {what} is {point}: {left_out}")


def interval(run: Run, task: str, metric: str, *, rubrics: Mapping[str, Rubric],
             success: float | None = None) -> Interval | None:
    """The 95% interval of the metric's mean over the logged samples (None without them): exact binomial for a
    proportion (each sample logged as 0 or ``success``: 1, or 100 on a 0-100 scale), else bootstrap. ``rubrics``: what
    reads judged items (``sample_values``). Raises InputError where the samples' mean is not the reported value,
    NoInterval where a bootstrap's samples all score alike."""
    found = sample_values(run, task, metric, rubrics=rubrics)
    if found is None:
        return None
    _check_reported(run, task, metric, mean_or_nan(found.values), f"the mean of {found.source}")
    result = _interval_of_mean(found.values, found.judged, success)
    _refuse_a_certain_bootstrap(result, [found.values], f"{task} {metric}", "every logged sample", "mean")
    return result


def _refuse_a_certain_bootstrap(result: Interval, strata: Sequence[Sequence[float]], subject: str, samples: str,
                                mean: str) -> None:
    """Raise NoInterval where the samples of each stratum of a bootstrap scored the same: every resample is alike,
    and its [v, v] would claim a certainty the samples do not give (the exact binomial interval of 0 / 1 outcomes
    needs no such rule)."""
    if result.method != EXACT_BINOMIAL and bootstrap_is_a_point(strata):
        alike = len({values[0] for values in strata}) == 1
        raise NoInterval(f"{samples} scored {f'{strata[0][0]:g}' if alike else 'alike within its task'}; a bootstrap "
                         f"gives no interval of their {mean}", subject)


def _interval_of_mean(values: list[float], judged: bool, success: float | None) -> Interval:
    if success is not None and not judged and set(values) <= {0.0, success}:
        low, high = exact_binomial_interval(values.count(success), len(values), CONFIDENCE)
        return Interval(low * success, high * success, EXACT_BINOMIAL, len(values))
    low, high = bootstrap_interval(values, CONFIDENCE)
    return Interval(low, high, BOOTSTRAP, len(values))


def group_interval(run: Run, group: str, metric: str, mean: GroupMean, *, rubrics: Mapping[str, Rubric],
                   success: float | None = None) -> Interval | None:
    """The 95% interval of group ``group``'s ``metric``, ``mean``'s average of its members that report its
    ``member_metric``, from their logged samples (None where one has none): a micro mean's as ``interval``'s over
    the pooled samples (or, where a member's mean leaves logged samples out, the stratified bootstrap weighted by
    them), a macro mean's the stratified bootstrap. Raises InputError where the samples' mean is not the group's
    reported value (members or weighting other than the group's), NoInterval where a bootstrap's samples all score
    alike."""
    member_metric = mean.member_metric or metric
    members = [member for member in mean.members if member_metric in run.metrics.get(member, {})]
    found = [sample_values(run, member, member_metric, rubrics=rubrics) for member in members]
    if not found or any(each is None for each in found):
        return None
    strata = [each.values for each in found]
    logged = [len(_samples(run, run.samples[member])) for member in members]
    means = [sum(values) / len(values) for values in strata]
    pooled = [value for values in strata for value in values]
    stratified = mean.weighting != MICRO or logged != list(map(len, strata))
    if not stratified:  # each member weighs its samples, all in its mean: the pooled samples' mean
        point = sum(pooled) / len(pooled)
        result = _interval_of_mean(pooled, any(each.judged for each in found), success)
    elif mean.weighting == MICRO:  # lmms-eval weighs a member by all it logged, those its mean left out included
        point = sum(size * value for size, value in zip(logged, means)) / sum(logged)
        low, high = stratified_bootstrap_interval(strata, CONFIDENCE, weights=logged)
        result = Interval(low, high, WEIGHTED_STRATIFIED_BOOTSTRAP, sum(map(len, strata)))
    else:
        point = sum(means) / len(means)
        low, high = stratified_bootstrap_interval(strata, CONFIDENCE)
        result = Interval(low, high, STRATIFIED_BOOTSTRAP, sum(map(len, strata)))
    _check_reported(run, group, metric, point,
                    f"the {mean.weighting} mean of its tasks' logged samples ({', '.join(members)})",
                    "the group's interval is left out")
    # said as its members' samples are (a group of one: as its member's), so that a row says it once for all of them
    _refuse_a_certain_bootstrap(result, strata if stratified else [pooled], f"{group} {metric}",
                                "every logged sample" + (f" of {', '.join(members)}" if len(members) > 1 else ""),
                                "mean")
    return result


# --- Intervals of a mean over samples ---------------------------------------------------------------


def _binomial_cdf(successes: int, trials: int, p: float) -> float:
    """P(X <= successes) for X ~ Binomial(trials, p), summed in log space (no overflow for large ``trials``)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if successes >= trials else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(trials + 1)
    return min(1.0, sum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(trials - i + 1)
                                 + i * log_p + (trials - i) * log_q)
                        for i in range(successes + 1)))


def _bisect(decreasing: Callable[[float], float], target: float) -> float:
    """The p in [0, 1] where the decreasing function ``decreasing`` crosses ``target`` (to 1e-12)."""
    low, high = 0.0, 1.0
    while high - low > 1e-12:
        middle = (low + high) / 2
        low, high = (middle, high) if decreasing(middle) > target else (low, middle)
    return (low + high) / 2


@functools.lru_cache(maxsize=None)  # a report asks it again for each run with the same counts (a bisection each)
def exact_binomial_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a proportion: the p whose binomial tails at ``successes`` are each
    (1 - confidence) / 2. Exact (never narrower than the nominal coverage)."""
    if not 0 <= successes <= trials or trials < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    tail = (1 - confidence) / 2
    lower = 0.0 if successes == 0 else _bisect(lambda p: _binomial_cdf(successes - 1, trials, p), 1 - tail)
    upper = 1.0 if successes == trials else _bisect(lambda p: _binomial_cdf(successes, trials, p), tail)
    return lower, upper


def bootstrap_is_a_point(strata: Sequence[Sequence[float]]) -> bool:
    """Whether every (stratified) bootstrap resample of ``strata`` draws the same mean: each stratum's samples alike."""
    return all(len(set(values)) == 1 for values in strata)


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95, *, resamples: int = RESAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (samples drawn with replacement,
    ``resamples`` times, from a fixed ``seed`` so that a report is reproducible): one stratum's."""
    if len(values) == 0:
        raise ValueError("a bootstrap interval needs at least one value")
    return stratified_bootstrap_interval([values], confidence, resamples=resamples, seed=seed)


def stratified_bootstrap_interval(strata: Sequence[Sequence[float]], confidence: float = 0.95, *,
                                  weights: Sequence[float] | None = None, resamples: int = RESAMPLES,
                                  seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of the strata's means, unweighted or by ``weights`` (one per
    stratum): each resample draws every stratum's samples with replacement from that stratum alone (the strata are
    independent samples, of their own sizes), ``resamples`` times from a fixed ``seed``."""
    import numpy as np

    if not strata or any(len(values) == 0 for values in strata):
        raise ValueError("a stratified bootstrap interval needs at least one value in every stratum")
    if weights is not None and (len(weights) != len(strata) or min(weights) < 0 or sum(weights) <= 0):
        raise ValueError(f"a stratified bootstrap needs a weight >= 0 per stratum, not all 0; got {weights}")
    generator = np.random.default_rng(seed)
    means = np.zeros(resamples)
    for index, values in enumerate(strata):
        data = np.asarray(values, dtype=float)
        stratum_means = data[generator.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
        means += stratum_means if weights is None else weights[index] * stratum_means
    means /= len(strata) if weights is None else sum(weights)
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))
