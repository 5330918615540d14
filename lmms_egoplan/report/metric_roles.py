"""How a task's metrics read: which are scores and which bookkeeping counts, why a task's scores
measure nothing (read from its counts), and breakdown bins in their natural order. The report's
tables and figures and the demo's tables read them alike."""

from __future__ import annotations

import math
import re
from typing import Iterable, Mapping

# Counts that say how a task's scores were reached (tables show them after the scores).
BOOKKEEPING = ("predictions", "skipped_samples", "judged", "failed", "unparseable", "incomplete_answers",
               "missing_fields", "no_plan_rate", "capped_samples", "unusable_rows")
# What describes a task's outputs rather than scores them: true even when nothing could be scored.
DESCRIPTIVE = (*BOOKKEEPING, "format_error_rate", "plan_length")


def _count(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value) else None


def unscored_reason(metrics: Mapping[str, object], samples: int | None = None) -> str | None:
    """Why a task's scores measure nothing, read from its counts, or None when they are scores.

    ``metrics``: one task's (or group's) metrics by name; ``samples``: how many samples it evaluated
    (lmms-eval's ``n-samples``), when known. Nothing was judged ("0 judged: 15 of 15 answers
    incomplete", "0 judged: 24 failed"), every answer was unparseable ("8 of 8 answers unparseable"),
    or no output held a plan ("no plan in 2 of 2 outputs").
    """
    judged, failed = _count(metrics.get("judged")), _count(metrics.get("failed"))
    if judged == 0:
        incomplete = _count(metrics.get("incomplete_answers"))
        causes = [f"{failed:g} failed"] if failed else []
        if incomplete:
            causes.append(f"{incomplete:g} of {samples:g} answers incomplete" if samples else f"{incomplete:g} answers incomplete")
        return "0 judged" + (f": {', '.join(causes)}" if causes else "")
    unparseable, predictions = _count(metrics.get("unparseable")), _count(metrics.get("predictions"))
    if unparseable and unparseable == (predictions or samples):
        return f"{unparseable:g} of {unparseable:g} answers unparseable"
    if _count(metrics.get("no_plan_rate")) == 1:
        return f"no plan in {samples:g} of {samples:g} outputs" if samples else "no plan in any output"
    return None


_BIN_SUFFIX = re.compile(r"^(.*)_(\d+)_(?:\d+|plus)$")
_LEVELS = ("low", "medium", "high")


def natural_order(metrics: Iterable[str]) -> list[str]:
    """``metrics`` with breakdown bins in their natural order: value bins (``..._0_4``, ``..._5_9``,
    ``..._15_plus``) by their low end, levels low, medium, high; the rest as given, before the bins."""
    def key(indexed: tuple[int, str]) -> tuple:
        index, metric = indexed
        if match := _BIN_SUFFIX.match(metric):
            return (1, match.group(1), int(match.group(2)))
        family, _, level = metric.rpartition("_")
        return (1, family, _LEVELS.index(level)) if family and level in _LEVELS else (0, index)

    return [metric for _, metric in sorted(enumerate(metrics), key=key)]
