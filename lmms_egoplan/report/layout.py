"""What a benchmark shows in the report and the demo: its report face (``ReportFace``, one per
benchmark, in its folder's ``report_face`` module, named by the registry): its tables in its
paper's layout (``TableLayout``), their figures, its metrics' units and counts, its breakdowns and
the published rows (its folder's ``published_results.json``).

A table has one row per (run, task variant) and per published row. A column reads one metric of
one task (``{task}``: the row's task; a column may read another task, such as a group's member,
from the row's task name) and the published value of the same name.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import TYPE_CHECKING

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.report.metric_roles import BOOKKEEPING, PLAIN, Unit, metric_unit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lmms_egoplan.judge.rubrics import Rubric

SUBMISSION = "submission file"  # a column that names the leaderboard file written beside the results
PUBLISHED_FIELDS = {"benchmark", "paper", "table", "model", "values", "protocol"}
PUBLISHED_FILE = "published_results.json"

# How a published row was made (its "protocol" object), every field a sentence of its source or "not stated":
# scoring (LIKELIHOOD, GENERATIVE or NOT_STATED: what decides which published rows sit beside which task), the
# answer parser, the judge, frames, thinking mode, decoding, averaging, split, item count, source kind ("primary
# table / README / code ..." or "secondary ...") and made ("ran it", "copied from <source>" for another report's
# value, or "not stated" where the source does not say which), each with its reason in brackets where it needs one.
PROTOCOL_FIELDS = ("scoring", "parser", "judge", "frames", "thinking", "decoding", "averaging", "split", "items",
                   "source_kind", "made")
LIKELIHOOD = "likelihood"  # the candidates ranked by the model's likelihood of each
GENERATIVE = "generative"  # an answer generated, then parsed or judged
NOT_STATED = "not stated"
SCORINGS = (LIKELIHOOD, GENERATIVE, NOT_STATED)
RAN_IT = "ran it"
COPIED_FROM = "copied from "


MICRO = "micro"  # a group's mean of its members' means weighted by their samples (lmms-eval's weight_by_size: true)
MACRO = "macro"  # a group's unweighted mean of its members' means (weight_by_size: false)


@dataclass(frozen=True)
class GroupMean:
    """How a column's group averages its member tasks, for an interval from their logged samples
    (``intervals.group_interval``): ``members``, its leaf tasks (lmms-eval averages a nested group over them; a member
    that does not report the column's metric is not in the mean; ``{task}`` in a name stands for the row's task, as in
    ``Column.task``), ``weighting``, ``MICRO`` or ``MACRO``, and ``member_metric``, what the members report that the
    group averages (default: the column's metric)."""

    members: tuple[str, ...]
    weighting: str
    member_metric: str | None = None

    def __post_init__(self) -> None:
        if self.weighting not in (MICRO, MACRO):
            raise ValueError(f"a group mean is {MICRO} or {MACRO}, not {self.weighting!r}")

    def of_row(self, row_task: str) -> GroupMean:
        """The group mean of a row of task ``row_task``: its members named."""
        return replace(self, members=tuple(member.format(task=row_task) for member in self.members))


@dataclass(frozen=True)
class Column:
    header: str  # without the unit: ``ReportFace.heading`` adds the metric's
    metric: str
    task: str = "{task}"
    published: str | None = None  # the published rows' name for it (default: the metric)
    digits: int = 2
    interval: bool = True  # a mean over samples (counts and file names have none)
    proportion: bool = False  # a mean of two outcomes (0 or the unit's top): exact binomial interval
    former_metrics: tuple[str, ...] = ()  # the metric's names in results of earlier versions of its task, still read
    group_mean: GroupMean | None = None  # a group's mean: its interval comes from its members' logged samples

    def task_of(self, row_task: str) -> str:
        return self.task.format(task=row_task)

    def reported_name(self, metrics: Mapping[str, object]) -> str:
        """The name under which ``metrics`` (a run's, of one task) report the column: its own, or a former one."""
        return next((name for name in (self.metric, *self.former_metrics) if name in metrics), self.metric)

    @property
    def published_key(self) -> str:
        return self.published or self.metric


def percent_column(header: str, metric: str, published: str | None = None) -> Column:
    """An accuracy: a mean of 0 / 1 outcomes."""
    return Column(header, metric, published=published, proportion=True)


def count_column(header: str, metric: str, task: str = "{task}") -> Column:
    return Column(header, metric, task=task, digits=0, interval=False)


# A judged table's counts: the judgements with a rating (one an answer, or one a field of it), and those that failed
# (left out of the scores)
JUDGE_COUNTS = (count_column("Judgements", "judged"), count_column("Failed judgements", "failed"))


@dataclass(frozen=True)
class TableLayout:
    key: str  # the table's name (its CSV's stem) and its published rows' "benchmark"
    title: str
    source: str  # which paper table the layout follows
    tasks: dict[str, str]  # row task -> its input, as the table's "input" column shows it
    columns: tuple[Column, ...]
    figures: Mapping[str, Callable[..., Figure]] = field(default_factory=dict)  # file stem -> drawing of a tables.Table
    judged: bool = False  # its scores are an LLM judge's: every row names its judge (a "judge" column)
    notes: tuple[str, ...] = ()  # what a reader must know beside the rows (how published blocks differ)
    main: str = ""  # the header (without its unit) of its main score's column; "" for the first column
    # task -> how it scores (LIKELIHOOD or GENERATIVE): a published row sits beside the tasks that score as it did;
    # a task not named here (a text-only baseline) is set beside no published row
    scoring: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.main and self.main not in (column.header for column in self.columns):
            raise ValueError(f"table {self.key}: its main score {self.main!r} names none of its columns "
                             f"({', '.join(column.header for column in self.columns)})")

    @property
    def main_column(self) -> int:
        """The index of its main score's column (report.html shows it right after the model's name)."""
        return next((i for i, column in enumerate(self.columns) if column.header == self.main), 0)

    def reads(self, task: str) -> bool:
        return any(column.task_of(row) == task for row in self.tasks for column in self.columns)


@dataclass(frozen=True)
class Breakdown:
    """Metrics that break a score down into bins (the demo's table shows a family in one column):
    ``pattern`` matches one, its first group naming the family, its second the bin; ``levels``:
    named bins in their order (value bins such as ``0_4`` and ``15_plus`` order by their low end)."""

    pattern: str
    levels: tuple[str, ...] = ()

    def family_and_bin(self, metric: str) -> tuple[str, str] | None:
        match = re.match(self.pattern, metric)
        return (match.group(1), match.group(2)) if match else None


@dataclass(frozen=True)
class ReportFace:
    """One benchmark's face in the report and the demo's table, beside what ``metric_roles`` says of
    every benchmark's metrics."""

    tables: tuple[TableLayout, ...]
    published: tuple[dict, ...] = ()  # the papers' rows (``published_rows``)
    units: tuple[tuple[str, Unit], ...] = ()  # its metric name patterns (fnmatch) -> unit, after the shared ones
    bookkeeping: tuple[str, ...] = ()  # its counts, beside the shared ones (``metric_roles.BOOKKEEPING``)
    descriptive: tuple[str, ...] = ()  # what describes its outputs rather than scores them, beside its counts
    breakdowns: tuple[Breakdown, ...] = ()
    no_interval: str = ""  # which of its columns have no interval and why, for the report's preamble
    # The rubrics its judged items name, by name: its benchmark's (``Benchmark`` hands them to its face).
    rubrics: Mapping[str, Rubric] = field(default_factory=dict)
    # Its settings that make its protocol (prompt, frames, retries, parser), each with its default as a results file
    # records it (``protocol_defaults``): a run's row names every one it departs from, even when it stands alone.
    protocol: tuple[tuple[str, str], ...] = ()

    @property
    def bookkeeping_metrics(self) -> tuple[str, ...]:
        return (*BOOKKEEPING, *self.bookkeeping)

    @property
    def descriptive_metrics(self) -> tuple[str, ...]:
        """What describes a task's outputs rather than scores them: true even when nothing could be scored."""
        return (*self.bookkeeping_metrics, *self.descriptive)

    @property
    def levels(self) -> tuple[str, ...]:
        """The named bins of its breakdowns, in order (``metric_roles.natural_order``)."""
        return tuple(level for breakdown in self.breakdowns for level in breakdown.levels)

    @property
    def metric_order(self) -> list[str]:
        """The metrics its tables' columns read, each once: each table's main score first, then in column order."""
        metrics = [column.metric for table in self.tables
                   for column in (table.columns[table.main_column], *table.columns) if column.metric != SUBMISSION]
        return list(dict.fromkeys(metrics))

    def unit(self, metric: str) -> Unit:
        return metric_unit(metric, self.units)

    def value_range(self, metric: str) -> tuple[float, float]:
        """The results-file values the metric can take: its unit's range; a count is never negative."""
        unit = self.unit(metric)
        return (max(unit.low, 0.0) if metric in self.bookkeeping_metrics else unit.low), unit.high

    def column_unit(self, column: Column) -> Unit:
        """The column's unit; the published rows are transcribed in it."""
        return PLAIN if column.metric == SUBMISSION else self.unit(column.metric)

    def heading(self, column: Column) -> str:
        """The column's header with its unit, as every table and CSV shows it."""
        return self.column_unit(column).header(column.header)

    def breakdown(self, metric: str) -> tuple[str, str] | None:
        """(family, bin) of a breakdown metric, None for any other."""
        return next(filter(None, (breakdown.family_and_bin(metric) for breakdown in self.breakdowns)), None)


def protocol_defaults(settings_class: type, names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``names``, settings of ``settings_class`` (a benchmark's settings dataclass), each with its default as the
    task's ``metadata`` records it in a results file (text as is, anything else as JSON: 8, null, 4.0)."""
    defaults = {item.name: item.default for item in dataclasses.fields(settings_class)}
    return tuple((name, value if isinstance(value := defaults[name], str) else json.dumps(value)) for name in names)


def published_rows(package: str) -> tuple[dict, ...]:
    """A benchmark's published rows, as transcribed in its package's ``published_results.json``: one
    object per row with benchmark (the table's key), paper, table, model, values and protocol (``PROTOCOL_FIELDS``);
    optional input, note, source (where the numbers were read), judge_model (the judge's API name, looked up
    in the judge retirement table) and same_model (the name another row gives the same model, where they differ
    beyond case, punctuation and "Instruct": the report sets their values side by side). A row without its protocol,
    or whose same_model names no other row's model, is refused, naming the file, row and field."""
    path = resources.files(package).joinpath(PUBLISHED_FILE)
    rows = tuple(json.loads(path.read_text(encoding="utf-8")))
    problems = [f"row {number} ({row.get('model', '?')}): {problem}"
                for number, row in enumerate(rows, 1) for problem in protocol_problems(row)]
    problems += [f"row {number} ({row.get('model', '?')}): same_model {row['same_model']!r} names no model of another "
                 f"row of {row.get('benchmark')!r}" for number, row in enumerate(rows, 1)
                 if "same_model" in row and not _names_another_row(row, rows)]
    if problems:
        raise InputError(f"{path}: " + "; ".join(problems))
    return rows


def _names_another_row(row: Mapping, rows: tuple[dict, ...]) -> bool:
    """Whether ``row``'s same_model is the model of another row of its table."""
    return any(other is not row and other.get("benchmark") == row.get("benchmark")
               and model_key(str(other.get("model", ""))) == model_key(str(row["same_model"])) for other in rows)


def model_key(name: str) -> str:
    """A model's name as reports vary it ("Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL 7B"): its letters, digits, dots and
    pluses, lower case, without "instruct"."""
    return re.sub(r"[^a-z0-9.+]", "", name.lower()).replace("instruct", "")


def protocol_problems(row: Mapping) -> list[str]:
    """What a published row lacks of ``PUBLISHED_FIELDS`` and its protocol of ``PROTOCOL_FIELDS`` (each a
    non-empty text, "not stated" where the source is silent), or holds out of their vocabularies."""
    problems = [f"no field {name!r}" for name in sorted(PUBLISHED_FIELDS - row.keys())]
    protocol = row.get("protocol", {})
    problems += [f"protocol: no field {name!r} (write \"{NOT_STATED}\" where the source is silent)"
                 for name in PROTOCOL_FIELDS if not str(protocol.get(name, "")).strip()]
    if protocol.get("scoring", NOT_STATED) not in SCORINGS:
        problems.append(f"protocol: scoring {protocol['scoring']!r} is none of {', '.join(SCORINGS)}")
    made = protocol.get("made", RAN_IT)
    if not made.startswith((RAN_IT, COPIED_FROM, NOT_STATED)):
        problems.append(f"protocol: made {made!r} starts with none of {RAN_IT!r}, '{COPIED_FROM}<source>', "
                        f"{NOT_STATED!r}")
    if not protocol.get("source_kind", "primary").startswith(("primary", "secondary")):
        problems.append(f"protocol: source_kind {protocol['source_kind']!r} starts with neither primary nor secondary")
    return problems


def protocol_text(protocol: Mapping[str, str]) -> str:
    """A published row's protocol in one line, field by field, as its footnote shows it."""
    return "protocol: " + "; ".join(f"{name.replace('_', ' ')} {protocol[name]}" for name in PROTOCOL_FIELDS)
