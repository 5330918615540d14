"""Hostile results files: a results file with every field, one at a time and at any depth, replaced by
values of the other JSON types; the report of them all must name each it cannot read and report the rest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterator

from lmms_egoplan.report import write_report
from lmms_egoplan.report.runs import load_runs
from lmms_egoplan.report.tables import build_tables, csv_table, markdown_table
from lmms_egoplan.suite import report_faces

# For a value of each JSON type, values of the other types (an empty and a full container among them).
OTHER_TYPES = {
    dict: [["a", "list"], "text", 7, True, None],
    list: [{"an": "object"}, "text", 7.5, None],
    str: [{"an": "object"}, [1], 3, True, None],
    int: ["text", [1], {"k": 1}, False, None],
    float: ["text", [], {}, True, None],
    bool: ["text", 2, [], None],
    type(None): ["text", 4, [], {}],
}


def field_paths(value, path: tuple = ()) -> Iterator[tuple]:
    """The path (keys and indexes) of every field under ``value``, parents before children."""
    if path:
        yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from field_paths(item, (*path, key))


def replaced(data: dict, path: tuple, value) -> dict:
    copy = json.loads(json.dumps(data))
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return copy


def hostile_copies(results_file: Path, folder: Path) -> dict[Path, tuple[tuple, object]]:
    """A copy of ``results_file`` per field and value of another type, each in a folder of its own
    with the run's per-sample logs and side files; returns each copy's (field path, value)."""
    data = json.loads(results_file.read_text())
    stamp = results_file.name[:15]  # lmms-eval's <date>_<time>: the run's samples and side files share it
    beside = [p for p in results_file.parent.iterdir() if p.name.startswith(stamp) and p != results_file]
    copies = {}
    for path in field_paths(data):
        original = data
        for key in path:
            original = original[key]
        for value in OTHER_TYPES[type(original)]:
            copy = folder / f"copy{len(copies):05d}" / results_file.name
            copy.parent.mkdir(parents=True)
            copy.write_text(json.dumps(replaced(data, path, value)))
            for side in beside:
                shutil.copy(side, copy.parent / side.name)
            copies[copy] = (path, value)
    return copies


def dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def check_hostile_copies(results_file: Path, workdir: Path, named_fields: dict[tuple, tuple[type, ...]]) -> list[Path]:
    """Every hostile copy of ``results_file`` is either read or named, with its field, as unreadable;
    ``named_fields`` (those the report reads, with the types it reads), given a value of another type
    that is not null, are named; the tables of every copy read are built; and the report of the
    original and every copy named is written, naming each. Returns the copies named."""
    copies = hostile_copies(results_file, workdir / "hostile")
    runs, unreadable = load_runs([workdir / "hostile"], all_runs=True)
    read = {run.path for run in runs}
    named = {Path(line.split(": unreadable (")[0]): line for line in unreadable}
    assert read | named.keys() == copies.keys() and not read & named.keys()
    for copy, line in named.items():
        field = copies[copy][0]
        assert f"'{dotted(field)}' is " in line or (field == ("results",) and "no 'results' object" in line), line
    for field, types in named_fields.items():
        assert any(path == field for path, _ in copies.values()), f"{dotted(field)} is not a field of {results_file}"
        assert all(copy in named for copy, (path, value) in copies.items()
                   if path == field and value is not None and not isinstance(value, types)), field
    faces = report_faces()
    tables, _ = build_tables(runs, faces)
    assert all(markdown_table(table) and csv_table(table) for table in tables)
    original = workdir / "original"
    shutil.copytree(results_file.parent, original)
    report = write_report([original, *(copy.parent for copy in named)], workdir / "report", faces)
    assert sorted(report.lines[-len(named):]) == sorted(f"Unreadable: {line}" for line in unreadable)
    assert str(original / results_file.name) not in " ".join(report.lines)
    assert "| this run |" in report.markdown.read_text()  # the original's rows
    return sorted(named)
