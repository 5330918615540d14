"""Plain-text tables for the suite's commands: cells (a value without a value reads "no value") and
aligned columns."""

from __future__ import annotations

import math
from typing import Collection, Sequence

NO_VALUE = "no value"


def is_no_value(value) -> bool:
    """A metric reported without a value: null in a results file, or NaN (older files, mean of nothing)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_value(value, spec: str = ".4g") -> str:
    """A cell: numbers by ``spec`` (null and NaN as "no value"), anything else as text."""
    if is_no_value(value):
        return NO_VALUE
    return format(value, spec) if isinstance(value, float) else str(value)


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = ()) -> str:
    """``header``, a rule of dashes, then ``rows``: columns as wide as their widest cell, two spaces
    apart; the columns numbered in ``right`` (numbers) are right-aligned, the others left-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                         for i, (cell, width) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(header), line(["-" * width for width in widths]), *map(line, rows)])
