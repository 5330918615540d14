"""The report's figures (matplotlib): what every benchmark's figures share, so that a
researcher reads them at a glance. Each figure is drawn by its benchmark's report face (a function
of a table, ``layout.TableLayout.figures``) with these helpers: your runs in colour, the papers'
published values as a muted grey reference (bars, dots or a band, never more coloured bars), one
legend above the panels, never over data, a chance line where chance is defined, a panel with
nothing to draw saying "no data" (and why), and values that are no score (nothing judged, no answer
readable) left out and named under the figure.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.report.intervals import NoInterval, interval
from lmms_egoplan.report.tables import INVALID, NOT_SCORED, Row, Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def new_figure(**options) -> Figure:
    """A matplotlib ``Figure`` (its ``options``: figsize, layout, ...) the faces draw on: a Figure, not pyplot, so
    no backend is chosen and no display needed (saving picks the writer of the file's format); matplotlib loads
    with the first figure, not with the faces (``lmms-egoplan --help`` loads none of it)."""
    from matplotlib.figure import Figure

    return Figure(**options)


# Your runs: matplotlib's tab10 without its grey, which marks published values.
RUN_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
PUBLISHED_COLOUR = "#a0a0a0"
NOTE_COLOUR = "#555555"
# More runs than colours: a bar each would be a sliver and colours would repeat, so each run is a dot
# (the table beside the figure names every value). More groups than fit side by side: the bars lie
# horizontally, a group per line, and the figure grows to hold them.
MANY_RUNS = len(RUN_COLOURS)
MANY_GROUPS = 30
GROUP_INCHES = 0.16
LEGEND_ROW_INCHES = 0.18
INTERVAL_LABEL = "95% interval (the table's)"  # the error bars' legend entry, once a figure


def run_labels(rows: list[Row]) -> list[str]:
    """``model · task`` per row, with the run's time (and zone) where one model ran one task twice."""
    keys = [(row.model, row.task) for row in rows]
    return [f"{row.model} · {row.task}" + (f" · {row.run.time_text}" if keys.count(key) > 1 else "")
            for row, key in zip(rows, keys)]


def colour(index: int) -> str:
    """The colour of a run's (or series') ``index``."""
    return RUN_COLOURS[index % len(RUN_COLOURS)]


def no_data(axes, reason: str = "") -> None:
    """An empty panel says so, instead of showing empty axes."""
    axes.set_xticks([])
    axes.set_yticks([])
    axes.text(0.5, 0.5, "no data" + (f"\n{reason}" if reason else ""), transform=axes.transAxes, ha="center",
              va="center", color=NOTE_COLOUR, fontsize=10, wrap=True)


def legend_above(figure: Figure, columns: int = 3) -> None:
    """One legend for the figure, above its panels, off the data (constrained layout makes room for
    it); the bottom is left to the footnote."""
    handles, labels = {}, []
    for axes in figure.axes:
        for handle, label in zip(*axes.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    if labels:
        # Past two rows the figure grows by the legend's height: constrained layout would take it
        # from the panels, and a long legend would leave them no room at all.
        rows = math.ceil(len(labels) / columns)
        figure.set_figheight(figure.get_figheight() + max(0, rows - 2) * LEGEND_ROW_INCHES)
        figure.legend([handles[label] for label in labels], labels, loc="outside upper center",
                      ncol=min(columns, len(labels)), fontsize=8, frameon=False)


FOOTNOTE_LINES = 8  # more would push the panels off the figure: the table's notes hold every one


def footnote(figure: Figure, lines: list[str]) -> None:
    if len(lines) > FOOTNOTE_LINES:
        lines = [*lines[:FOOTNOTE_LINES - 1], f"... and {len(lines) - FOOTNOTE_LINES + 1} more: see the table's notes"]
    if lines:
        figure.supxlabel("\n".join(lines), fontsize=8, color=NOTE_COLOUR, ha="center")


def is_horizontal(groups: list) -> bool:
    """Whether ``bars`` lays these groups out horizontally (more than fit side by side)."""
    return len(groups) > MANY_GROUPS


def bars(axes, groups: list[str], series: list[tuple[str, str, list[float | None]]],
         errors: dict[str, list[tuple[float, float] | None]] | None = None,
         counts: dict[str, list[int | None]] | None = None) -> None:
    """Grouped bars: one group per x position, one bar per (label, colour, values) series; a None
    value draws no bar, a zero a thick line on the axis. Error bars from (low, high) bounds, ``n=``
    counts above them. More series than ``MANY_RUNS``: a dot per value, one legend entry for all
    (``_dots``); more groups than ``MANY_GROUPS``: horizontal bars, a group per line (the value axis
    is then x: ``value_axis``)."""
    if len(series) > MANY_RUNS:
        _dots(axes, series)
        _group_ticks(axes, groups)
        return
    horizontal = is_horizontal(groups)
    width = 0.8 / max(len(series), 1)
    for index, (label, series_colour, values) in enumerate(series):
        drawn = [(position - 0.4 + width * (index + 0.5), value) for position, value in enumerate(values)
                 if value is not None]
        if drawn:  # one call per series: hundreds of groups draw in a moment
            (axes.barh if horizontal else axes.bar)(*zip(*drawn), width, color=series_colour, label=label)
        for position, value in enumerate(values):
            if value is None:
                continue
            x = position - 0.4 + width * (index + 0.5)
            if value == 0:  # a zero is a value: a bar of no height would read as none
                ends = [x - width / 2, x + width / 2]
                xs, ys = ([0, 0], ends) if horizontal else (ends, [0, 0])
                axes.plot(xs, ys, color=series_colour, linewidth=4, solid_capstyle="butt", clip_on=False, zorder=4)
            bounds = (errors or {}).get(label, [None] * len(values))[position]
            if bounds:
                spread = [[value - bounds[0]], [bounds[1] - value]]
                axes.errorbar(*((value, x) if horizontal else (x, value)), **{"xerr" if horizontal else "yerr": spread},
                              color="black", capsize=3, linewidth=1, label=INTERVAL_LABEL)
            count = (counts or {}).get(label, [None] * len(values))[position]
            if count is not None:
                top = bounds[1] if bounds else value
                axes.annotate(f"n={count}", (top, x) if horizontal else (x, top),
                              xytext=(2, 0) if horizontal else (0, 2), textcoords="offset points",
                              ha="left" if horizontal else "center", va="center" if horizontal else "bottom",
                              fontsize=7)
    _group_ticks(axes, groups)


def _dots(axes, series: list[tuple[str, str, list[float | None]]]) -> None:
    """Each series (a run) a dot per group, in the series' order from left to right within the group,
    all in one colour under one legend entry: with more runs than colours, neither a bar each nor a
    legend entry each could be read."""
    width = 0.8 / len(series)
    points = [(position - 0.4 + width * (index + 0.5), value) for index, (_, _, values) in enumerate(series)
              for position, value in enumerate(values) if value is not None]
    if points:
        axes.scatter(*zip(*points), s=9, color=RUN_COLOURS[0], linewidths=0, zorder=3, clip_on=False,
                     label=f"your runs ({len(series)}): a dot each, in the table's order from left to right")


def value_axis(axes, low: float, high: float, label: str = "", *, horizontal: bool = False) -> None:
    """The value axis of a panel of ``bars``: y, or x where its bars lie horizontally (``is_horizontal``)."""
    (axes.set_xlim if horizontal else axes.set_ylim)(low, high)
    if label:
        (axes.set_xlabel if horizontal else axes.set_ylabel)(label)


def binned_accuracies(row: Row, family: str, bins: list[str]) -> tuple[list, list, list]:
    """A row's accuracy per bin of a breakdown (``accuracy_<family>_<bin>``) in percent, its exact 95%
    interval (from the per-sample logs, where there are some) and its sample count (``n_<family>_<bin>``),
    each None where the run reports no value: what ``bars`` draws for one run."""
    metrics = row.run.metrics[row.task]
    values, bounds, sizes = [], [], []
    for bin_name in bins:
        metric = f"accuracy_{family}_{bin_name}"
        value = metrics.get(metric)
        value = None if not isinstance(value, (int, float)) or math.isnan(value) else value
        try:
            # an accuracy is 0 / 1 per sample, never a judged item: no rubric to read
            found = interval(row.run, row.task, metric, rubrics={}, success=1.0) if value is not None else None
        except (InputError, NoInterval):  # a cut per-sample log, samples all alike: no interval (the notes say why)
            found = None
        values.append(None if value is None else value * 100)
        bounds.append((found.low * 100, found.high * 100) if found else None)
        size = metrics.get(f"n_{family}_{bin_name}")
        sizes.append(size if isinstance(size, (int, float)) and not isinstance(size, bool) else None)
    return values, bounds, sizes


def accuracy_bars(axes, runs: list[tuple[str, Row]], family: str, bins: list[str], names: list[str], *,
                  candidates: int, empty: str) -> bool:
    """Each run's accuracy per bin of a breakdown (``binned_accuracies``) as bars named ``names``, the
    chance line of a choice among ``candidates``, the axis in percent; ``no_data(axes, empty)`` where
    no run reports a bin. Returns whether bars were drawn."""
    series, errors, counts = [], {}, {}
    for index, (label, row) in enumerate(runs):
        values, bounds, sizes = binned_accuracies(row, family, bins)
        series.append((label, colour(index), values))
        errors[label], counts[label] = bounds, sizes
    if not any(v is not None for *_, values in series for v in values):
        no_data(axes, empty)
        return False
    bars(axes, names, series, errors, counts)
    chance = 100 / candidates
    axes.axhline(chance, color=PUBLISHED_COLOUR, linestyle="--", linewidth=1,
                 label=f"chance ({chance:g}%: one of {candidates} candidates)")
    axes.set_ylim(0, 112)
    axes.set_yticks(range(0, 101, 20))
    axes.set_ylabel("accuracy (%)")
    return True


def _group_ticks(axes, groups: list[str]) -> None:
    if is_horizontal(groups):  # a line per group, the first on top; the figure grows to give each its line
        axes.set_yticks(range(len(groups)), groups, fontsize=7)
        axes.set_ylim(len(groups) - 0.4, -0.6)
        axes.figure.set_figheight(max(axes.figure.get_figheight(), 1.5 + GROUP_INCHES * len(groups)))
        return
    long_labels = sum(map(len, groups)) > 60  # labels side by side would overlap
    axes.set_xticks(range(len(groups)), groups, rotation=20 if long_labels else 0,
                    ha="right" if long_labels else "center", fontsize=7 if long_labels else 9)
    axes.set_xlim(-0.6, len(groups) - 0.4)


def mark_unscored(axes, positions: list[int], *, horizontal: bool = False) -> None:
    """Write "no value" where a run draws no bar, so that an empty place does not read as a zero."""
    for position in positions:
        if horizontal:
            axes.text(0.01, position, "no value (see below)", transform=axes.get_yaxis_transform(), ha="left",
                      va="center", fontsize=7, color=NOTE_COLOUR)
        else:
            axes.text(position, 0.02, "no value\n(see below)", transform=axes.get_xaxis_transform(), ha="center",
                      va="bottom", fontsize=8, color=NOTE_COLOUR)


def unscored_notes(table: Table, labels: list[str]) -> list[str]:
    """A line per user row with values that are no score, saying why (per column where they differ),
    and per invalid value left out (``tables.Invalid``)."""
    notes = []
    for label, row in zip(labels, table.user_rows):
        notes += [f"{label}: {note}" for note in row.notes if note.startswith(f"{INVALID},")]
        reasons = {column.header: reason for column, reason in zip(table.layout.columns, row.unscored) if reason}
        scores = [i for i, column in enumerate(table.layout.columns)
                  if column.metric not in table.face.descriptive_metrics and row.scored(i) is not None]
        if len(set(reasons.values())) == 1 and not scores:  # the whole row, for one reason
            notes.append(f"{label}: {NOT_SCORED} ({next(iter(reasons.values()))})")
        else:
            notes += [f"{label}, {header}: {NOT_SCORED} ({reason})" for header, reason in reasons.items()]
    return notes


def table_figures(table: Table) -> dict[str, Figure]:
    """The figures of a table, by file stem."""
    return {name: draw(table) for name, draw in table.layout.figures.items()}
