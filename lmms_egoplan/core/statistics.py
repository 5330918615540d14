"""Aggregations and breakdowns lmms-eval's metric registry lacks: counts, sums, the largest of a
run-level number, means that are NaN over nothing, value bins (``0-4,5-9,15+``), equal-size
levels of a sorted split, and the metric-name labels of named bins (a domain, a scenario)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


def total(items: Sequence[float]) -> float:
    """Aggregation: the sum of the per-document values (e.g. a count of failures)."""
    return float(sum(items))


def sum_over_subtasks(metrics: Sequence[float], sizes: Sequence[int], weight_by_size: bool = False) -> float:
    """Group aggregation (a group YAML's ``aggregate_metric_list``) for counts (``judged``, ``failed``,
    ``failed_requests``, ...): the subtasks' total."""
    return sum(metrics)


def count(items: Sequence[Any]) -> int:
    """Aggregation: how many documents reported the metric (e.g. the samples of one breakdown bin)."""
    return len(items)


def largest(items: Sequence[float]) -> float:
    """Aggregation for a run-level number every document repeats (e.g. samples skipped at load)."""
    return float(max(items))


def mean_or_nan(values: Iterable[float]) -> float:
    """The mean (bools count as 0 / 1); nan when there are no values."""
    values = list(values)
    return float(sum(values) / len(values)) if values else math.nan


@dataclass(frozen=True)
class ValueBin:
    """The integers ``low..high`` (``high`` None: no upper end)."""

    low: int
    high: int | None

    def __contains__(self, value: int) -> bool:
        return value >= self.low and (self.high is None or value <= self.high)

    @property
    def label(self) -> str:
        """A metric-name-safe label: ``0_4``, ``15_plus``."""
        return f"{self.low}_plus" if self.high is None else f"{self.low}_{self.high}"


_BIN = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)|(\+))?\s*$")


def breakdown_label(name: str) -> str:
    """A metric-name-safe label of a named bin (a domain, a scenario): lower case, ``_`` for the rest
    ("Daily life" -> daily_life)."""
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_") or "unnamed"


def shared_labels(names: Iterable[str], what: str) -> list[str]:
    """A problem for each label (``breakdown_label``) that several of ``names``, the data's ``what`` ("scenarios"),
    share: their samples would be scored as one bin ("Cooking food" and "cooking-food")."""
    found: dict[str, set[str]] = {}
    for name in names:
        found.setdefault(breakdown_label(name), set()).add(name)
    return [f"{what} {', '.join(map(repr, sorted(group)))} share the metric name label {label!r}; rename one"
            for label, group in found.items() if len(group) > 1]


def parse_bins(spec: str) -> tuple[ValueBin, ...]:
    """Parse ``"0-4,5-9,10-14,15+"`` into contiguous bins covering every integer from 0 upwards.

    Raises ValueError saying what is wrong: bins must start at 0, follow each other without
    gaps or overlaps, and end with an open bin (``N+``).
    """
    bins = []
    for part in spec.split(","):
        match = _BIN.match(part)
        if not match:
            raise ValueError(f"cannot read bin {part.strip()!r} in {spec!r} (expected 'low-high' or 'low+')")
        low = int(match.group(1))
        high = None if match.group(3) else int(match.group(2) if match.group(2) is not None else low)
        if high is not None and high < low:
            raise ValueError(f"bin {part.strip()!r} in {spec!r} ends before it starts")
        if bins and bins[-1].high is None:
            raise ValueError(f"only the last bin may be open ('N+') in {spec!r}")
        expected_low = bins[-1].high + 1 if bins else 0
        if low != expected_low:
            raise ValueError(f"bins in {spec!r} must be contiguous from 0: expected a bin starting at {expected_low}, "
                             f"got {part.strip()!r}")
        bins.append(ValueBin(low, high))
    if bins[-1].high is not None:
        raise ValueError(f"the last bin in {spec!r} must be open ('{bins[-1].high + 1}+') so that every "
                         f"value has a bin")
    return tuple(bins)


def bin_of(value: int, bins: Sequence[ValueBin]) -> ValueBin:
    for candidate in bins:
        if value in candidate:
            return candidate
    raise ValueError(f"{value} falls in none of the bins {[b.label for b in bins]}")


def equal_size_levels(items: Sequence[Any], key: Callable[[Any], Any], n_levels: int) -> list[list[Any]]:
    """Split ``items`` into ``n_levels`` consecutive groups of (almost) equal size by ``key``, lowest first.

    Sizes differ by at most one (earlier levels take the remainder); every item is in
    exactly one level. ``key`` must order items totally (add a tie-breaker) so that the split
    does not depend on input order.
    """
    ordered = sorted(items, key=key)
    size, remainder = divmod(len(ordered), n_levels)
    levels, start = [], 0
    for level in range(n_levels):
        end = start + size + (1 if level < remainder else 0)
        levels.append(ordered[start:end])
        start = end
    return levels

