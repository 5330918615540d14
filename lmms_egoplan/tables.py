"""Plain-text tables for the suite's commands (the demo, rejudge, ActPlan-1K scores, BLEURT training)."""

from __future__ import annotations

import math
import re
from typing import Collection, Iterable, Sequence


def format_value(value, spec: str = ".4g") -> str:
    """A cell: numbers by ``spec`` (NaN as ``nan``), anything else as text."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else format(value, spec)
    return str(value)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = ()) -> str:
    """``header``, a rule of dashes, then ``rows``: columns as wide as their widest cell, two spaces
    apart; the columns numbered in ``right`` (numbers) are right-aligned, the others left-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                         for i, (cell, width) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(header), line(["-" * width for width in widths]), *map(line, rows)])


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
