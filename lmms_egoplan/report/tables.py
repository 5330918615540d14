"""The report's tables: the user's rows (one per run and task variant) beside the published rows."""

from __future__ import annotations

import csv
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.text_tables import NO_VALUE, is_no_value
from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.judge.retirements import retirement
from lmms_egoplan.report.intervals import Interval, NoInterval, group_interval, interval
from lmms_egoplan.report.layout import (
    NOT_STATED,
    SUBMISSION,
    Column,
    ReportFace,
    TableLayout,
    model_key,
    protocol_text,
)
from lmms_egoplan.report.metric_roles import invalid_reason, unscored_reason
from lmms_egoplan.report.protocols import Comparison, Difference, RunProtocol, compare
from lmms_egoplan.report.runs import LM_EVAL, Run, not_judged, not_scored_predicted

THIS_RUN = "this run"
TEXT_ONLY_BASELINE = "text-only baseline (lm-eval)"
NO_INTERVALS = "no per-sample logs: no intervals"
NOT_SCORED = "not scored"
INVALID = "invalid"


@dataclass(frozen=True)
class Invalid:
    """A results-file value that is no value of its metric (``metric_roles.invalid_reason``): shown as
    "invalid" with the reason in the row's notes, never as a number, never drawn."""

    reason: str

    def __str__(self) -> str:
        return INVALID


def mark_invalid_values(runs: list[Run], faces: Sequence[ReportFace]) -> None:
    """Replace each value of a task a face reads that is not a number of its metric's range by ``Invalid``; a NaN
    of a task its counts say is not scored (older results files wrote a judged score so when nothing was judged)
    stays no value, with that reason."""
    for run in runs:
        for task, metrics in run.metrics.items():
            face = next((face for face in faces for layout in face.tables if layout.reads(task)), None)
            unscored = unscored_reason(metrics, run.sample_counts.get(task)) is not None
            for metric, value in metrics.items() if face else ():
                if isinstance(value, float) and math.isnan(value) and unscored:
                    continue
                if reason := invalid_reason(value, *face.value_range(metric)):
                    metrics[metric] = Invalid(reason)


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
    judge: str = ""  # a judged table's: what judged the row (``judge_text``, ``published_judge_text``)

    def scored(self, index: int) -> float | None:
        """The column's value where it is a score (what figures draw), else None."""
        value = self.values[index]
        unscored = self.unscored[index] if self.unscored else None
        return None if unscored or not isinstance(value, (int, float)) or math.isnan(value) else value

    def bounds(self, index: int) -> tuple[float, float] | None:
        """The column's 95% interval where its value is a score with one (what figures draw as error bars)."""
        found = self.intervals[index] if self.scored(index) is not None else None
        return (found.low, found.high) if found else None

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
    """The column's value: a number (times ``scale``, its unit's), a file name, None (no such metric),
    NaN (reported without a value: null, or NaN in older results files) or ``Invalid``."""
    if column.metric == SUBMISSION:
        path = run.side_file("submission", task) or run.side_file("submission_partial", task)
        return path.name if path else None
    metrics = run.metrics.get(column.task_of(task), {})
    name = column.reported_name(metrics)
    value = metrics.get(name)
    if name in metrics and is_no_value(value):
        return math.nan
    if isinstance(value, Invalid):
        return value
    return value * scale if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _unscored(face: ReportFace, run: Run, task: str, column: Column, *, descriptive: bool = False) -> str | None:
    """Why the column's value, a score, measures nothing (read from its task's counts); with
    ``descriptive``, also why the task's scores measure nothing beside a value that describes its
    outputs (a plan length: shown, but with no interval where nothing could be scored)."""
    task = column.task_of(task)
    if (column.metric in face.descriptive_metrics and not descriptive) or column.metric == SUBMISSION \
            or task not in run.metrics:
        return None
    return unscored_reason(run.metrics[task], run.sample_counts.get(task), column.metric)


def _run_row(face: ReportFace, layout: TableLayout, run: Run, task: str) -> Row | None:
    tasks = {column.task_of(task) for column in layout.columns}
    if not tasks & run.metrics.keys():
        return None
    scales = [face.column_unit(column).scale for column in layout.columns]
    values = [_value(run, task, column, scale) for column, scale in zip(layout.columns, scales)]
    unscored = [_unscored(face, run, task, column) for column in layout.columns]
    intervals, without_interval = [], {}  # why a column has no interval -> the subjects it holds for
    for column, scale, value in zip(layout.columns, scales, values):
        reason = _unscored(face, run, task, column, descriptive=True)  # no interval on a value of an unscored task
        measured = isinstance(value, (int, float)) and not math.isnan(value) and not reason
        try:
            found = _interval(face, run, task, column) if column.interval and measured else None
        except (InputError, NoInterval) as error:  # a per-sample log cut short or damaged; samples all alike
            found = None
            why, subject = (error.reason, error.subject) if isinstance(error, NoInterval) else (str(error), "")
            subjects = without_interval.setdefault(why, [])
            subjects += [subject] if subject not in subjects else []
        intervals.append(Interval(found.low * scale, found.high * scale, found.method, found.samples)
                         if found else None)
    notes = _departures(face, run, tasks)
    changed = {change for t in tasks for change in run.protocol_changes.get(t, {}).values()}  # said once a row
    notes += [f"{CHANGED_BY_BACKEND}: {change}" for change in sorted(changed)]
    notes += [f"partial: {run.partial[t]}" for t in sorted(tasks) if t in run.partial] + run.notes
    notes += [f"{INVALID}, left out: {metric if t == task else f'{t}: {metric}'}: {value.reason}" for t in sorted(tasks)
              for metric, value in run.metrics.get(t, {}).items() if isinstance(value, Invalid)]
    notes += [f"no interval: {', '.join(filter(None, subjects))}{': ' if any(subjects) else ''}{why}"
              for why, subjects in without_interval.items()]
    notes += _unscored_notes(layout, task, unscored)
    notes += _unscored_by_the_settings(run, layout, task, notes)
    if not run.samples.keys() & tasks:
        notes.append(NO_INTERVALS)
    waiting = not_judged(run, tasks) if layout.judged else not_scored_predicted(run, tasks)
    notes += [waiting] if waiting else []
    notes += [f"judged by lmms-egoplan rejudge: {path}" for path in sorted({run.rejudged[t] for t in tasks
                                                                            if t in run.rejudged})]
    source = TEXT_ONLY_BASELINE if run.harness == LM_EVAL else THIS_RUN
    row = Row(source, run.model, task, layout.tasks[task], values, intervals, notes, run, unscored)
    row.judge = judge_text(run.recorded(tasks)) if layout.judged else ""
    return row


_BY_PARSER = re.compile(r"^(?P<reason>.+) \((?P<parser>\w+) parser\)$")


def _unscored_notes(layout: TableLayout, task: str, unscored: list[str | None]) -> list[str]:
    """A note per reason the row's columns are no scores, each said once: "not scored: 8 of 8 answers unparseable
    (official and robust parsers)" for the columns of two parsers and the main one, which reads the default's."""
    by_task: dict[str, dict[str, list[str]]] = {}  # task -> reason -> parsers it holds for
    for column, reason in zip(layout.columns, unscored):
        if reason:
            match = _BY_PARSER.match(reason)
            reason, parser = (match["reason"], match["parser"]) if match else (reason, "")
            parsers = by_task.setdefault(column.task_of(task), {}).setdefault(reason, [])
            parsers += [parser] if parser not in parsers else []
    notes = []
    for which, reasons in by_task.items():
        for reason, parsers in reasons.items():
            named = [parser for parser in parsers if parser]  # a parser's reading tells which reader the plain one is
            reason += f" ({' and '.join(named)} parser{'s' if len(named) > 1 else ''})" if named else ""
            notes.append(f"{NOT_SCORED}: {reason}" if which == task else f"{NOT_SCORED}: {which}: {reason}")
    return notes


DEPARTS = "departs from the default protocol"
CHANGED_BY_BACKEND = "protocol changed by the run's backend"


def _departures(face: ReportFace, run: Run, tasks: set[str]) -> list[str]:
    """A note naming each protocol setting (``ReportFace.protocol``) the run's tasks recorded at other than its
    default ("departs from the default protocol: num_frames 4 (default 8)"), shown whether or not other runs share
    the table."""
    recorded = run.recorded(tasks)
    departed = [f"{name} {recorded[name]} (default {default})" for name, default in face.protocol
                if name in recorded and recorded[name] != default]
    return [f"{DEPARTS}: " + ", ".join(departed)] if departed else []


def _interval(face: ReportFace, run: Run, row_task: str, column: Column) -> Interval | None:
    """The column's interval in the row of ``row_task``, from the logged samples of the column's task or, for a
    group's mean, of its members."""
    task = column.task_of(row_task)
    metric = column.reported_name(run.metrics.get(task, {}))
    # a proportion's success is logged as its unit's top: 1 for a share, 100 on a 0-100 scale
    success = face.unit(metric).high if column.proportion else None
    if column.group_mean:
        return group_interval(run, task, metric, column.group_mean.of_row(row_task), rubrics=face.rubrics,
                              success=success)
    return interval(run, task, metric, rubrics=face.rubrics, success=success)


def _unscored_by_the_settings(run: Run, layout: TableLayout, task: str, notes: list[str]) -> list[str]:
    """A note per column whose metric the run's settings left unscored ("BLEURT accuracy: not scored: no BLEURT
    classifier is configured; set ..."), as the results record it, never a silent "—"."""
    found = []
    for column in layout.columns:
        unscored = run.not_scored.get(column.task_of(task), {})
        why = next((text for prefix, text in unscored.items()
                    if column.metric == prefix or column.metric.startswith(f"{prefix}_")), None)
        note = f"{column.header}: {why}"
        found += [note] if why and note not in notes and note not in found else []
    return found


def _published_row(layout: TableLayout, published: dict, beside: list[str], apart: list[Difference],
                   notes: list[str]) -> Row:
    """A published row; ``beside``: the run rows' tasks it sits beside; none: shown apart (below them), its source
    saying so and naming the fields that differ (``apart``), its notes saying how."""
    values = [published["values"].get(column.published_key) for column in layout.columns]
    source = f"published ({published['paper']}, {published['table']})"
    notes = ([] if beside else [f"{APART}: " + "; ".join(difference.text() for difference in apart)]) + notes
    notes += [published["note"]] if published.get("note") else []
    notes += [f"source: {published['source']}"] if published.get("source") else []
    notes.append(protocol_text(published["protocol"]))
    stated = ", ".join(dict.fromkeys(difference.stated for difference in apart))
    return Row(source if beside else f"{source}, {APART}: {stated}", published["model"],
               ", ".join(beside), published.get("input", ""), values, [None] * len(values), notes,
               judge=published_judge_text(published) if layout.judged else "")


APART = "shown apart"


def _placement(layout: TableLayout, protocol: dict, run_rows: list[tuple[Row, RunProtocol]],
               runs_scoring: str) -> tuple[list[str], list[Difference], list[str]]:
    """Where a published row sits: the tasks of the run rows that score as it did and state no field of its protocol
    otherwise (``protocols.compare``); else the fields that differ ("scoring generative, the runs here ...",
    "frames 4 fps, the run's 2 fps"); and which fields were not compared, against the runs it sits beside."""
    scoring = protocol["scoring"]
    alike = [(row, stated) for row, stated in run_rows
             if scoring != NOT_STATED and layout.scoring.get(row.task) == scoring]
    if not alike:
        return [], [Difference(f"scoring {scoring}", f"the runs here {runs_scoring}")], []
    comparisons: dict[tuple, Comparison] = {}
    for _, stated in alike:
        if stated.statement not in comparisons:
            comparisons[stated.statement] = compare(protocol, stated)
    found = [(row, comparisons[stated.statement]) for row, stated in alike]
    agreeing = [(row, comparison) for row, comparison in found if not comparison.differing]
    if not agreeing:
        return [], list(dict.fromkeys(difference for _, comparison in found for difference in comparison.differing)), []
    unstated = dict.fromkeys(text for _, comparison in agreeing for text in comparison.not_compared)
    return (list(dict.fromkeys(row.task for row, _ in agreeing)), [],
            [f"{NOT_COMPARED}: {', '.join(unstated)}"] if unstated else [])


NOT_COMPARED = "protocol not compared with the runs here"


def published_block(layout: TableLayout, published: Sequence[dict], run_rows: list[Row]) -> list[Row]:
    """The table's published rows: those whose stated protocol agrees with some run's here (``_placement``: they
    score alike, likelihood beside likelihood, generative beside generative, and state no other field differently),
    then, apart, the others, naming the field that differs; each model with several published main scores says their
    spread and sources."""
    tasks = list(dict.fromkeys(row.task for row in run_rows))
    runs_scoring = ", ".join(f"{task} {layout.scoring.get(task, 'no published protocol')}" for task in tasks)
    stated = [(row, RunProtocol(row.run, tuple({column.task_of(row.task) for column in layout.columns}),
                                layout.judged)) for row in run_rows]
    beside, apart = [], []
    for entry in (p for p in published if p["benchmark"] == layout.key):
        near, differing, notes = _placement(layout, entry["protocol"], stated, runs_scoring)
        row = _published_row(layout, entry, near, differing, notes)
        (beside if near else apart).append((row, f"{entry['paper']}, {entry['table']}", entry.get("same_model")))
    _note_spreads(layout, beside + apart)
    return [row for row, _, _ in beside + apart]


def _score_column(layout: TableLayout, row: Row) -> int | None:
    """The column a published row's score is read from: the table's main score, or, for a row whose source prints
    another average only (a mean without AV, a mean it does not name), the first column it fills."""
    filled = [index for index, value in enumerate(row.values) if isinstance(value, (int, float))]
    return layout.main_column if layout.main_column in filled else next(iter(filled), None)


def _note_spreads(layout: TableLayout, rows: list[tuple[Row, str, str | None]]) -> None:
    """Note on each published row (with its source: paper, table, and the name another source gives its model,
    ``same_model``, where the names differ beyond ``model_key``) of a model with several scores in one column here
    (``_score_column``) their range and sources."""
    groups: dict[tuple[str, int], list[tuple[Row, str]]] = {}
    for row, source, same_model in rows:
        column = _score_column(layout, row)
        if column is not None:
            groups.setdefault((model_key(same_model or row.model), column), []).append((row, source))
    for (_, column), group in groups.items():
        values = [row.values[column] for row, _ in group]
        if len(set(values)) < 2:
            continue
        digits = layout.columns[column].digits
        where = "" if column == layout.main_column else f" in '{layout.columns[column].header}'"
        listed = "; ".join(f"{value:.{digits}f} ({source})" for value, (_, source) in zip(values, group))
        for row, _ in group:
            row.notes.insert(0, f"{len(group)} published values of this model{where}, {min(values):.{digits}f} to "
                                f"{max(values):.{digits}f}: {listed}")


def judge_text(identity: dict[str, str]) -> str:
    """What judged a run's row, from its recorded settings (``JudgeIdentity``), with its model's retirement."""
    judge = JudgeIdentity.from_record(identity)
    if judge is None:
        return NOT_STATED
    retired = retirement(judge.model, judge.backend)
    return judge.text() + (f"; {retired.status()}" if retired else "")


def published_judge_text(published: dict) -> str:
    """The judge a published row's source states (its protocol's; "not stated" where it is silent), with its
    retirement."""
    retired = retirement(published["judge_model"]) if published.get("judge_model") else None
    return published["protocol"]["judge"] + (f", {retired.status()}" if retired else "")


def row_identity(layout: TableLayout, row: Row) -> dict[str, str]:
    """What produced a row's values (``Run.identity`` of the tasks its columns read)."""
    return {"harness": row.run.harness, **row.run.identity({column.task_of(row.task) for column in layout.columns})}


def label_differences(layout: TableLayout, rows: list[Row]) -> None:
    """Add to the model name of rows of one model and task what tells their runs apart ("num_frames 4",
    "backend egoplan_server"): the parts of their identities (``row_identity``) that differ. Rows of
    runs with equal identities (``--all_runs``) differ only in the run's time, which the table shows."""
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


def build_tables(runs: list[Run], faces: Sequence[ReportFace], model_notes: Mapping[str, str] | None = None
                 ) -> tuple[list[Table], list[str]]:
    """The tables of ``faces`` (the benchmarks') that a run reports, and the tasks no table reads.
    Values that are no value of their metric are marked ``Invalid`` in the runs first. ``model_notes``: what a
    reader must know of a model's rows (the demo's: a random model measures nothing), first in their notes."""
    mark_invalid_values(runs, faces)
    tables = []
    layouts = [(face, layout) for face in faces for layout in face.tables]
    for face, layout in layouts:
        rows = [row for run in sorted(runs, key=lambda r: (r.model, r.stamp)) for task in layout.tasks
                if (row := _run_row(face, layout, run, task))]
        for row in rows:
            row.notes[:0] = [model_notes[row.model]] if model_notes and row.model in model_notes else []
        label_differences(layout, rows)
        if rows:
            rows += published_block(layout, face.published, rows)
            tables.append(Table(layout, face, rows))
    ignored = sorted({task for run in runs for task in run.metrics
                      if not any(layout.reads(task) for _, layout in layouts)})
    return tables, ignored


# --- Markdown and CSV -------------------------------------------------------------------------------

_FIXED = ("source", "task", "input", "run")
JUDGE_COLUMN = "judge"


def value_order(table: Table) -> list[int]:
    """The order of the table's value columns in report.md, the CSV and report.html: its main score's first (each
    shows it right after the model's name), the others as laid out."""
    main = table.layout.main_column
    return [main, *(i for i in range(len(table.layout.columns)) if i != main)]


def fixed_header(table: Table) -> list[str]:
    """The columns between the main score and the other values: a judged table's name the judge of every row."""
    return [*_FIXED, *([JUDGE_COLUMN] if table.layout.judged else [])]


def header(table: Table) -> list[str]:
    """report.md's columns: the model (its notes' numbers beside it), its main score, what made the row, the other
    values."""
    first, *others = (table.face.heading(table.layout.columns[i]) for i in value_order(table))
    return ["model", first, *fixed_header(table), *others]


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
    """The row's cells as report.md shows them (``header``), the model's without its notes' numbers."""
    columns, unscored = table.layout.columns, row.unscored or [None] * len(row.values)
    values = [cell_text(*cell) for cell in zip(row.values, columns, row.intervals, unscored)]
    first, *others = (values[i] for i in value_order(table))
    return [row.model, first, *fixed_cells(table, row), *others]


def fixed_cells(table: Table, row: Row) -> list[str]:
    return [row.source, row.task, row.input, run_text(row), *([row.judge] if table.layout.judged else [])]


def run_text(row: Row) -> str:
    return "" if row.run is None else row.run.time_text


# What Markdown would read as markup in a table cell or a paragraph: a backslash, code, a cell's end,
# and the "](" of a link or image (brackets alone, as in an interval, stay as they are).
_MARKDOWN_MARKUP = re.compile(r"([\\`|]|(?<=\])\()")


def markdown_text(text: str) -> str:
    """``text`` as Markdown shows it, never as markup: on one line, HTML escaped as report.html escapes
    it (a tag or entity in a model name, setting or path stays text), and links, images, code and
    cell ends escaped."""
    return html.escape(_MARKDOWN_MARKUP.sub(r"\\\1", " ".join(text.splitlines())), quote=False)


def markdown_table(table: Table) -> str:
    """The table, then its rows' notes as a numbered list (a text shared by rows is one note), each row's numbers
    beside its model, as report.html has them: a row stays a line one can read and paste."""
    names = header(table)
    lines = ["| " + " | ".join(map(markdown_text, names)) + " |", "|" + " --- |" * len(names)]
    notes: dict[str, int] = {}
    for row in table.rows:
        cells = row_cells(table, row)
        if marks := dict.fromkeys(notes.setdefault(text, len(notes) + 1) for text in row.notes):
            cells[0] += f" [{', '.join(map(str, marks))}]"
        lines.append("| " + " | ".join(map(markdown_text, cells)) + " |")
    if notes:
        lines += ["", "Notes:", "", *(f"{number}. {markdown_text(text)}" for text, number in notes.items())]
    return "\n".join(lines)


def _csv_value(value: object, column: Column, unscored: str | None) -> str:
    """A CSV cell: the full-precision value, a count as a whole number; empty where the row has none or its value
    is no score (report.md's "(not scored)": the row's notes say why), so that no tool averages it in."""
    if is_no_value(value) or unscored:
        return ""
    if isinstance(value, float) and column.digits == 0 and not column.interval and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def csv_table(table: Table) -> str:
    """Full-precision values, in report.md's order; a ``<column> 95% low`` / ``high`` pair beside each mean over
    samples; empty cells where a value is no score."""
    columns = table.layout.columns
    first, *others = value_order(table)

    def headings(index: int) -> list[str]:
        heading = table.face.heading(columns[index])
        return [heading] + ([f"{heading} 95% low", f"{heading} 95% high"] if columns[index].interval else [])

    def cells(row: Row, index: int) -> list[str]:
        value, found = row.values[index], row.intervals[index]
        return [_csv_value(value, columns[index], row.unscored[index] if row.unscored else None)] + (
            ([repr(found.low), repr(found.high)] if found else ["", ""]) if columns[index].interval else [])

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["model", *headings(first), *fixed_header(table), *(h for i in others for h in headings(i)),
                     "notes"])
    for row in table.rows:
        writer.writerow([row.model, *cells(row, first), *fixed_cells(table, row),
                         *(cell for i in others for cell in cells(row, i)), "; ".join(row.notes)])
    return buffer.getvalue()
