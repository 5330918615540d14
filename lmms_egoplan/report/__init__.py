"""``lmms-egoplan report``: the suite's results in each paper's table layout, beside the published
rows, with intervals, breakdown figures and a self-contained HTML page.

runs (finding and reading results files) -> intervals (from the per-sample logs) -> tables (in the
layouts of the benchmarks' report faces, ``layout.ReportFace``) -> figures (the faces' drawings, with
the helpers of ``figures``) -> markdown, CSV, PNG / SVG and HTML written here. This package names no
benchmark: each benchmark's face lies in its own folder, and the registry hands the faces over
(``lmms_egoplan.suite.report_faces``). ``agreement`` writes ``lmms-egoplan judge-agreement``'s table,
CSVs and figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.files import make_folder, write_atomically
from lmms_egoplan.report.layout import ReportFace
from lmms_egoplan.report.runs import LMMS_EVAL_DEFAULT_ZONE, NothingFoundError, load_runs

__all__ = ["NothingFoundError", "Report", "write_report"]

TITLE = "lmms-egoplan report"


@dataclass
class Report:
    markdown: Path
    html: Path
    files: list[Path]
    lines: list[str]  # what the report says about its inputs: ignored tasks, unreadable files


def write_report(paths: list[str | Path], output: str | Path, faces: Sequence[ReportFace], *,
                 all_runs: bool = False, model_notes: Mapping[str, str] | None = None) -> Report:
    """Write report.md, report.html, a CSV per table of ``faces`` (the benchmarks' report faces) and
    the figures (PNG and SVG) into ``output``. ``model_notes``: a note for the rows of a model (by the name the
    tables show), first in their notes.

    Raises NothingFoundError when ``paths`` hold no result of the suite's tasks.
    """
    from lmms_egoplan.report.figures import table_figures
    from lmms_egoplan.report.html import figure_bytes, html_page
    from lmms_egoplan.report.intervals import (
        BOOTSTRAP,
        EXACT_BINOMIAL,
        STRATIFIED_BOOTSTRAP,
        WEIGHTED_STRATIFIED_BOOTSTRAP,
    )
    from lmms_egoplan.report.tables import APART, build_tables, csv_table, markdown_table, markdown_text

    runs, unreadable = load_runs(paths, all_runs=all_runs)
    tables, ignored = build_tables(runs, faces, model_notes)
    if not tables:
        raise NothingFoundError(f"no results of the suite's tasks in {', '.join(map(str, paths))}"
                                + (f" (other tasks: {', '.join(ignored)})" if ignored else "")
                                + "".join(f"\n  {line}" for line in unreadable))
    output = make_folder(output, "the report's folder")
    lines = [f"Ignored (no table of the suite reads them): {', '.join(ignored)}"] if ignored else []
    lines += [f"Unreadable: {line}" for line in unreadable]
    # Which columns have no interval, by benchmark (sorted: the same text whatever the faces' order).
    without_intervals = " and ".join(sorted(face.no_interval for face in faces if face.no_interval
                                            and any(table.face is face for table in tables)))
    group_means = any(column.group_mean for table in tables for column in table.layout.columns)
    chosen = ("every run" if all_runs
              else "of runs identical in model, model_args and settings the latest; --all_runs for every run")
    runs = len({row.run.path for table in tables for row in table.user_rows})
    preamble = [
        f"Runs: {runs} results {'file' if runs == 1 else 'files'} ({chosen}). A cell '—': the row reports no such "
        f"value; 'no value': its results file holds none (null).",
        f"95% intervals in brackets: accuracies {EXACT_BINOMIAL}; other means {BOOTSTRAP}"
        + (f"; a group's mean over its tasks, from their samples: a micro mean (over questions) as a task's over the "
           f"pooled samples, or, where a task's mean left samples out (failed judgements), by "
           f"{WEIGHTED_STRATIFIED_BOOTSTRAP}; a macro mean (of the tasks' means) by {STRATIFIED_BOOTSTRAP}"
           if group_means else "")
        + ". Rows marked "
        "'no per-sample logs' ran without --log_samples and have none"
        + (f"; {without_intervals}: no interval." if without_intervals else "."),
        "Rows 'published' are transcribed from the papers or the authors' repositories (table or file named); they "
        "are not re-computed. Each says in its notes how it was made (its protocol: scoring, parser, judge, frames, "
        "thinking, decoding, averaging, split, source, ran or copied); one scored otherwise than the runs of its "
        "table, or stating other frames, parser, judge or item count than they do, is shown apart, below the "
        f"others, its source naming the field ('{APART}: scoring ...', '{APART}: frames 4 fps'); one set beside the "
        "runs names in its notes each field it or they do not state, which could not be compared.",
        "Run times are those in the results files' names, each with its time zone: lmms-eval names its files in the "
        f"zone of its --timezone ({LMMS_EVAL_DEFAULT_ZONE} by default, not this machine's), lm-eval runs are shown in "
        "UTC.",
        *lines]
    files, markdown, sections = [], [f"# {TITLE}", "", *(f"{markdown_text(line)}\n" for line in preamble)], []
    for table in tables:
        csv_path = write_atomically(output / f"{table.name}.csv", csv_table(table))
        figures = table_figures(table)
        markdown += [f"## {table.layout.title}", "", f"Layout of {table.layout.source}. Table: "
                     f"[{csv_path.name}]({csv_path.name}).", "", *(f"{note}\n" for note in table.layout.notes),
                     markdown_table(table), ""]
        for name, figure in figures.items():
            for suffix in ("png", "svg"):
                files.append(write_atomically(output / f"{name}.{suffix}", figure_bytes(figure, suffix)))
            markdown += [f"![{name}]({name}.png)", ""]
        files.append(csv_path)
        sections.append((table, figures))
    markdown_path = write_atomically(output / "report.md", "\n".join(markdown))
    html_path = write_atomically(output / "report.html", html_page(TITLE, preamble, sections))
    return Report(markdown_path, html_path, files, lines)
