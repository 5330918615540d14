"""Plain-text tables for the suite's commands: cells (a value without a value reads "no value"),
aligned columns, tables that fit a terminal (``TERMINAL_WIDTH``) and the indented lists printed below them."""

from __future__ import annotations

import math
import textwrap
from typing import Collection, Sequence

NO_VALUE = "no value"
TERMINAL_WIDTH = 120  # what every table the suite prints fits


def is_no_value(value) -> bool:
    """A metric reported without a value: null in a results file, or NaN (older files, mean of nothing)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_value(value, spec: str = ".4g") -> str:
    """A cell: numbers by ``spec`` (null and NaN as "no value"; by the default, one nearer 0 than 0.0001 as
    "<0.0001": BLEU's mean over orders with none matched reads 3.28e-153), anything else as text."""
    if is_no_value(value):
        return NO_VALUE
    if spec == ".4g" and isinstance(value, float) and 0 < abs(value) < _TINY:
        return f"{'-' if value < 0 else ''}<{_TINY}"
    return format(value, spec) if isinstance(value, float) else str(value)


_TINY = 0.0001


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
                 width: int | None = None) -> str:
    """``header``, a rule of dashes, then ``rows``: columns as wide as their widest cell, two spaces
    apart; the columns numbered in ``right`` (numbers) are right-aligned, the others left-aligned.

    ``width``: a table wider than that many characters is split into blocks of columns, one below the
    other (a blank line apart), each starting with the first column (the row's name) and as many of
    the next columns as fit."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    if width is not None and len(header) > 2 and sum(widths) + 2 * (len(widths) - 1) > width:
        blocks, block = [], [0]
        for index in range(1, len(header)):
            if len(block) > 1 and sum(widths[i] for i in (*block, index)) + 2 * len(block) > width:
                blocks.append(block)
                block = [0]
            block.append(index)
        blocks.append(block)
        return "\n\n".join(format_table([header[i] for i in block], [[row[i] for i in block] for row in rows],
                                          right=[n for n, i in enumerate(block) if i in right]) for block in blocks)

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(size) if i in right else cell.ljust(size)
                         for i, (cell, size) in enumerate(zip(row, widths))).rstrip()

    return "\n".join([line(header), line(["-" * size for size in widths]), *map(line, rows)])


def indented_list(title: str, items: Sequence[tuple[str, str]], width: int = TERMINAL_WIDTH) -> str:
    """``title``, then one item per (name, text) pair, indented: ``name: text``, wrapped to ``width``
    characters, its further lines indented deeper; nothing where there is no item."""
    if not items:
        return ""
    lines = [title]
    for name, text in items:
        lines += textwrap.wrap(f"{name}: {text}", width, initial_indent="  ", subsequent_indent="      ",
                               break_long_words=False, break_on_hyphens=False)
    return "\n".join(lines)
