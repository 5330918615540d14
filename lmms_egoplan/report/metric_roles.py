"""How a task's metrics read: their unit, which are scores and which bookkeeping counts, why a
task's scores measure nothing (read from its counts), and breakdown bins in their natural order.
The report's tables, CSVs and figures and the demo's tables read them alike. What is said here holds
for every benchmark (the shared layers' counts and naming conventions); each benchmark's report
face (``layout.ReportFace``) adds the units and counts of its own metrics."""

from __future__ import annotations

import fnmatch
import json
import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

# Counts that say how a task's scores were reached (tables show them after the scores), as the shared
# layers write them: a task's predictions, samples skipped at load, unparseable answers, model requests
# that failed (left out of the scores), and the judged tasks' judged / failed counts and the rows rejudge
# could not use. A face adds its own.
BOOKKEEPING = ("predictions", "skipped_samples", "judged", "failed", "unparseable", "unusable_rows", "failed_requests")


@dataclass(frozen=True)
class Unit:
    """How a metric is shown: its results-file value times ``scale``, in ``label`` (None: a plain number);
    a results-file value outside [``low``, ``high``] is no value of the unit (``invalid_reason``)."""

    scale: float = 1.0
    label: str | None = None
    low: float = -math.inf
    high: float = math.inf

    def header(self, name: str) -> str:
        return f"{name} ({self.label})" if self.label else name


PERCENT = Unit(100.0, "%", 0.0, 1.0)  # a share in [0, 1] in the results, printed in percent as the papers print it
SCORE_0_100 = Unit(1.0, "0-100", 0.0, 100.0)  # a judge's mean rating, already x 100 in the results (the papers' scale)
FRACTION = Unit(1.0, "0-1", 0.0, 1.0)  # a normalised score a paper prints as a fraction
STEPS = Unit(1.0, "steps", 0.0)
PLAIN = Unit()


def invalid_reason(value: object, low: float = -math.inf, high: float = math.inf) -> str | None:
    """Why a metric's results-file value is no value at all (not a number, NaN included, infinite, or outside
    [``low``, ``high``]), or None: a number in range, or no value (null: the suite writes a metric without a value so,
    and the counts beside it say why)."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):  # strict JSON has none: a file another writer wrote
        return "NaN is not a number"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{json.dumps(value)[:40]} is not a number"
    if not math.isfinite(value) or not low <= value <= high:
        return f"{value:g} is outside its range [{low:g}, {high:g}]"
    return None


# Metric name patterns (fnmatch) -> unit, first match wins: what every benchmark's names mean (an
# accuracy or a rate is a share). A face's own patterns (``ReportFace.units``) are tried after these.
METRIC_UNITS = (
    ("accuracy", PERCENT), ("accuracy_*", PERCENT), ("*_accuracy", PERCENT), ("*_accuracy_*", PERCENT),
    ("*_rate", PERCENT), ("*_rate_*", PERCENT),
)


def metric_unit(metric: str, units: Sequence[tuple[str, Unit]] = ()) -> Unit:
    """The unit a metric is shown in everywhere: that of the first pattern it matches, of
    ``METRIC_UNITS``, then of ``units`` (a benchmark's own); counts, and what no pattern names, are
    plain numbers."""
    return next((unit for pattern, unit in (*METRIC_UNITS, *units) if fnmatch.fnmatchcase(metric, pattern)), PLAIN)


def _count(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value) else None


def unscored_reason(metrics: Mapping[str, object], samples: int | None = None, metric: str = "") -> str | None:
    """Why a task's scores (or its ``metric``'s) measure nothing, read from its counts, or None when they are scores.

    ``metrics``: one task's (or group's) metrics by name; ``samples``: how many samples it evaluated
    (lmms-eval's ``n-samples``), when known. Nothing was judged ("0 judged: 15 of 15 answers
    incomplete", "0 judged: 24 failed"), every answer was unparseable ("8 of 8 answers unparseable"; a metric
    of one parser, ``accuracy_official``, by that parser's count, ``unparseable_official``) or, of a yes / no
    reading, unread (``unextracted``: "2 of 2 yes / no answers unread"), or no output held
    a plan ("no plan in 2 of 2 outputs"), or every model request failed ("8 of 8 model requests failed").
    """
    requests_failed = _count(metrics.get("failed_requests"))
    if requests_failed and requests_failed == samples:
        return f"{requests_failed:g} of {samples:g} model requests failed"
    judged, failed = _count(metrics.get("judged")), _count(metrics.get("failed"))
    if judged == 0:
        incomplete = _count(metrics.get("incomplete_answers"))
        causes = [f"{failed:g} failed"] if failed else []
        if incomplete:
            causes.append(f"{incomplete:g} of {samples:g} answers incomplete" if samples
                          else f"{incomplete:g} answers incomplete")
        if cut := _count(metrics.get("cut_answers")):
            causes.append(f"{cut:g} cut at the token limit")
        return "0 judged" + (f": {', '.join(causes)}" if causes else "")
    parser = metric.rpartition("_")[2]
    by_parser = f"unparseable_{parser}" in metrics
    unparseable = _count(metrics.get(f"unparseable_{parser}" if by_parser else "unparseable"))
    predictions = _count(metrics.get("predictions"))
    if unparseable and unparseable == (predictions or samples):
        return f"{unparseable:g} of {unparseable:g} answers unparseable" + (f" ({parser} parser)" if by_parser else "")
    unread = _count(metrics.get("unextracted"))  # yes / no answers whose yes or no could not be read
    if unread and unread == (predictions or samples):
        return f"{unread:g} of {unread:g} yes / no answers unread"
    if _count(metrics.get("no_plan_rate")) == 1:
        return f"no plan in {samples:g} of {samples:g} outputs" if samples else "no plan in any output"
    return None


_BIN_SUFFIX = re.compile(r"^(.*)_(\d+)_(?:\d+|plus)$")


def natural_order(metrics: Iterable[str], levels: Sequence[str] = ()) -> list[str]:
    """``metrics`` with breakdown bins in their natural order: value bins (``..._0_4``, ``..._5_9``,
    ``..._15_plus``) by their low end, named bins (``..._<level>``) in the order of ``levels`` (a
    face's ``Breakdown.levels``); the rest as given, before the bins."""
    def key(indexed: tuple[int, str]) -> tuple:
        index, metric = indexed
        if match := _BIN_SUFFIX.match(metric):
            return (1, match.group(1), int(match.group(2)))
        family, _, level = metric.rpartition("_")
        return (1, family, levels.index(level)) if family and level in levels else (0, index)

    return [metric for _, metric in sorted(enumerate(metrics), key=key)]
