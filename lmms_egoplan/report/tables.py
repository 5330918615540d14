"""The report's tables: the user's rows (one per run and task variant) beside the published rows."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from lmms_egoplan.core.text_tables import NO_VALUE, is_no_value
from lmms_egoplan.report.intervals import Interval, interval
from lmms_egoplan.report.layout import SUBMISSION, Column, ReportFace, TableLayout
from lmms_egoplan.report.metric_roles import unscored_reason
from lmms_egoplan.report.runs import LM_EVAL, Run

THIS_RUN = "this run"
TEXT_ONLY_BASELINE = "text-only baseline (lm-eval)"
NO_INTERVALS = "no per-sample logs: no intervals"
NOT_SCORED = "not scored"


@dataclass
class Row:
    source: str  # THIS_RUN, TEXT_ONLY_BASELINE or "published (<paper>, <table>)"
    model: str
    task: str
    input: str
    values: list[object]  # one per column: None where the row has no such metric, NaN where it has no value
    intervals: list[Interval | None]
    notes: list[str] = field(default_factory=list)
    run: Run | None = None  # None for a published row
    unscored: list[str | None] = field(default_factory=list)  # per column: why its value is no score

    def scored(self, index: int) -> float | None:
        """The column's value where it is a score (what figures draw), else None."""
        value = self.values[index]
        unscored = self.unscored[index] if self.unscored else None
        return None if unscored or not isinstance(value, (int, float)) or math.isnan(value) else value

    @property
    def published(self) -> bool:
        return self.run is None


@dataclass
class Table:
    layout: TableLayout
    face: ReportFace  # its benchmark's: units, counts
    rows: list[Row]

    @property
    def name(self) -> str:
        return self.layout.key

    @property
    def user_rows(self) -> list[Row]:
        return [row for row in self.rows if not row.published]


def _value(run: Run, task: str, column: Column, scale: float) -> object:
    """The column's value: a number (times ``scale``, its unit's), a file name, None (no such metric)
    or NaN (reported without a value: null, or NaN in older results files)."""
    if column.metric == SUBMISSION:
        path = run.side_file("submission", task) or run.side_file("submission_partial", task)
        return path.name if path else None
    metrics = run.metrics.get(column.task_of(task), {})
    name = column.reported_name(metrics)
    value = metrics.get(name)
    if name in metrics and is_no_value(value):
        return math.nan
    return value * scale if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _unscored(face: ReportFace, run: Run, task: str, column: Column) -> str | None:
    """Why the column's value, a score, measures nothing (read from its task's counts)."""
    task = column.task_of(task)
    if column.metric in face.descriptive_metrics or column.metric == SUBMISSION or task not in run.metrics:
        return None
    return unscored_reason(run.metrics[task], run.sample_counts.get(task))


def _run_row(face: ReportFace, layout: TableLayout, run: Run, task: str) -> Row | None:
    tasks = {column.task_of(task) for column in layout.columns}
    if not tasks & run.metrics.keys():
        return None
    scales = [face.column_unit(column).scale for column in layout.columns]
    values = [_value(run, task, column, scale) for column, scale in zip(layout.columns, scales)]
    unscored = [_unscored(face, run, task, column) for column in layout.columns]
    intervals = []
    for column, scale, value, reason in zip(layout.columns, scales, values, unscored):
        measured = isinstance(value, (int, float)) and not math.isnan(value) and not reason
        which = column.task_of(task)
        found = (interval(run, which, column.reported_name(run.metrics.get(which, {})), proportion=column.proportion)
                 if column.interval and measured else None)
        intervals.append(Interval(found.low * scale, found.high * scale, found.method, found.samples) if found else None)
    notes = [f"partial: {run.partial[t]}" for t in sorted(tasks) if t in run.partial] + run.notes
    for column, reason in zip(layout.columns, unscored):
        which = column.task_of(task)
        note = f"{NOT_SCORED}: {reason}" if which == task else f"{NOT_SCORED}: {which}: {reason}"
        notes += [note] if reason and note not in notes else []
    if not run.samples.keys() & tasks:
        notes.append(NO_INTERVALS)
    source = TEXT_ONLY_BASELINE if run.harness == LM_EVAL else THIS_RUN
    return Row(source, run.model, task, layout.tasks[task], values, intervals, notes, run, unscored)


def _published_row(layout: TableLayout, published: dict) -> Row:
    values = [published["values"].get(column.published_key) for column in layout.columns]
    notes = [published["note"]] if published.get("note") else []
    return Row(f"published ({published['paper']}, {published['table']})", published["model"], "",
               published.get("input", ""), values, [None] * len(values), notes)


def row_identity(layout: TableLayout, row: Row) -> dict[str, str]:
    """What produced a row's values (``Run.identity`` of the tasks its columns read)."""
    return {"harness": row.run.harness, **row.run.identity({column.task_of(row.task) for column in layout.columns})}


def label_differences(layout: TableLayout, rows: list[Row]) -> None:
    """Add to the model name of rows of one model and task what tells their runs apart ("num_frames 4",
    "backend egoplan_server"): the parts of their identities (``row_identity``) that differ. Rows of
    runs with equal identities (``--all-runs``) differ only in the run's time, which the table shows."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.model, row.task), []).append(row)
    for group in groups.values():
        identities = [row_identity(layout, row) for row in group]
        names = list(dict.fromkeys(name for identity in identities for name in identity))
        differing = [name for name in names if len({identity.get(name) for identity in identities}) > 1]
        for row, identity in zip(group, identities):
            if differing:
                row.model += " (" + ", ".join(f"{name} {identity.get(name, NO_SETTING)}" for name in differing) + ")"


NO_SETTING = "unset"


def build_tables(runs: list[Run], faces: Sequence[ReportFace]) -> tuple[list[Table], list[str]]:
    """The tables of ``faces`` (the benchmarks') that a run reports, and the tasks no table reads."""
    tables = []
    layouts = [(face, layout) for face in faces for layout in face.tables]
    for face, layout in layouts:
        rows = [row for run in sorted(runs, key=lambda r: (r.model, r.stamp)) for task in layout.tasks
                if (row := _run_row(face, layout, run, task))]
        label_differences(layout, rows)
        if rows:
            rows += [_published_row(layout, p) for p in face.published if p["benchmark"] == layout.key]
            tables.append(Table(layout, face, rows))
    ignored = sorted({task for run in runs for task in run.metrics if not any(layout.reads(task) for _, layout in layouts)})
    return tables, ignored


# --- Markdown and CSV -------------------------------------------------------------------------------

_FIXED = ("source", "model", "task", "input", "run")


def cell_text(value: object, column: Column, found: Interval | None, unscored: str | None = None) -> str:
    """A cell: the value with its interval; "no value"; a value that is no score marked so (the
    row's notes say why); "—" where the row has no such metric."""
    if value is None:
        return "—"
    if not isinstance(value, (int, float)):
        return str(value)
    if math.isnan(value):
        return NO_VALUE
    text = f"{value:.{column.digits}f}"
    if unscored:
        return f"{text} ({NOT_SCORED})"
    return f"{text} [{found.low:.{column.digits}f}, {found.high:.{column.digits}f}]" if found else text


def row_cells(table: Table, row: Row) -> list[str]:
    """The row's cells as the Markdown and HTML tables show them."""
    columns, unscored = table.layout.columns, row.unscored or [None] * len(row.values)
    return [row.source, row.model, row.task, row.input, run_text(row),
            *(cell_text(*cell) for cell in zip(row.values, columns, row.intervals, unscored)), "; ".join(row.notes)]


def run_text(row: Row) -> str:
    return "" if row.run is None else row.run.time_text


def markdown_table(table: Table) -> str:
    header = [*_FIXED, *(table.face.heading(column) for column in table.layout.columns), "notes"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for row in table.rows:
        cells = row_cells(table, row)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


def csv_table(table: Table) -> str:
    """Full-precision values; a ``<column> 95% low`` / ``high`` pair beside each mean over samples."""
    columns = table.layout.columns
    header = list(_FIXED)
    for column in columns:
        heading = table.face.heading(column)
        header += [heading] + ([f"{heading} 95% low", f"{heading} 95% high"] if column.interval else [])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([*header, "notes"])
    for row in table.rows:
        cells = [row.source, row.model, row.task, row.input, run_text(row)]
        for column, value, found in zip(columns, row.values, row.intervals):
            cells.append("" if is_no_value(value) else repr(value) if isinstance(value, float) else str(value))
            if column.interval:
                cells += [repr(found.low), repr(found.high)] if found else ["", ""]
        writer.writerow([*cells, "; ".join(row.notes)])
    return buffer.getvalue()
