"""95% intervals from the per-sample logs (``--log_samples``).

A sample's value of a metric is what the task logged for it under the metric's name: a number
(EgoPlan's 0 / 1 correctness per breakdown, ActPlan-1K's plan length, lm-eval's per-sample
metrics), or a judged item whose rating is read from the run's judge audit trail
(``<date>_judgements_<task>.jsonl``). Accuracies (every value 0 or 1) get the exact binomial
(Clopper-Pearson) interval, other means a percentile bootstrap over samples. Metrics whose value
is computed at aggregation from logged plans (ActPlan-1K's LCS, BLEURT and format errors) and
groups have no interval.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.judge.rubrics import FixedRating, is_judge_parts_item, item_parts, load_rubric
from lmms_egoplan.metrics import bootstrap_interval, exact_binomial_interval, mean_or_nan
from lmms_egoplan.records import read_jsonl
from lmms_egoplan.report.runs import Run

CONFIDENCE = 0.95
EXACT_BINOMIAL = "exact binomial (Clopper-Pearson)"
BOOTSTRAP = "percentile bootstrap over samples (2,000 resamples, seed 0)"


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str
    samples: int


@functools.lru_cache(maxsize=None)
def _samples(path: Path) -> tuple[dict, ...]:
    return tuple(sample for _, sample in read_jsonl(path))


@functools.lru_cache(maxsize=None)
def _ratings(audit_trail: Path | None) -> dict[str, float | None]:
    """Request id -> rating in a judge audit trail (the last record of an id wins: retries append)."""
    return {} if audit_trail is None else {record["id"]: record.get("rating") for _, record in read_jsonl(audit_trail)}


def _judged_value(item: dict, ratings: dict[str, float | None]) -> float | None:
    """A judged sample's score: its parts' mean rating x the rubric's scale; None if a part has no rating."""
    values = []
    for part in item_parts(item).values():
        rating = part.rating if isinstance(part, FixedRating) else ratings.get(part.id)
        if rating is None:
            return None
        values.append(rating)
    return mean_or_nan(values) * load_rubric(item["judge_rubric"]).scale


def sample_values(run: Run, task: str, metric: str) -> tuple[list[float], bool] | None:
    """The metric's value for each logged sample that reports it, and whether they are judge scores;
    None without a usable log."""
    if task not in run.samples:
        return None
    values: list[float] = []
    judged_items = False
    for sample in _samples(run.samples[task]):
        value = sample.get(metric)
        if value is None:
            continue
        if isinstance(value, (bool, int, float)):
            values.append(float(value))
        elif is_judge_parts_item(value):
            judged_items = True
            judged = _judged_value(value, _ratings(run.side_file("judgements", task)))
            if judged is None:  # a failed or missing judgement: the score leaves it out too
                continue
            values.append(judged)
        else:  # scored at aggregation (e.g. plans against gold plans): no per-sample value
            return None
    return (values, judged_items) if values else None


def interval(run: Run, task: str, metric: str, *, proportion: bool = False) -> Interval | None:
    """The 95% interval of the metric's mean over the logged samples (None without them): exact
    binomial for a ``proportion`` (logged as 0 / 1 per sample), else bootstrap."""
    found = sample_values(run, task, metric)
    if found is None:
        return None
    values, judged = found
    if proportion and not judged and set(values) <= {0.0, 1.0}:
        low, high = exact_binomial_interval(int(sum(values)), len(values), CONFIDENCE)
        return Interval(low, high, EXACT_BINOMIAL, len(values))
    low, high = bootstrap_interval(values, CONFIDENCE)
    return Interval(low, high, BOOTSTRAP, len(values))
