"""The suite's benchmarks, each by plain import: what the CLI, the judge's rubric look-up, ``rejudge`` and the
report read instead of lists of their own. Each is one ``Benchmark`` value (``lmms_egoplan.contract.benchmark``);
what is known of them without their code is their row in ``lmms_egoplan.catalogue``. Importing this module
loads no harness (no lmms-eval, lm-eval, torch or transformers: tests/architecture/test_suite.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from lmms_egoplan import catalogue
from lmms_egoplan.actplan.benchmark import ACTPLAN
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.cosmos_reason1.benchmark import COSMOS_REASON1
from lmms_egoplan.egointent.benchmark import EGOINTENT
from lmms_egoplan.egoplan.benchmark import EGOPLAN
from lmms_egoplan.egoplan_bench2.benchmark import EGOPLAN_BENCH2
from lmms_egoplan.egothink.benchmark import EGOTHINK
from lmms_egoplan.robovqa.benchmark import ROBOVQA

if TYPE_CHECKING:
    from lmms_egoplan.judge.rubrics import Rubric
    from lmms_egoplan.report.layout import ReportFace

BENCHMARKS: tuple[Benchmark, ...] = (EGOPLAN, EGOTHINK, EGOINTENT, ACTPLAN, EGOPLAN_BENCH2,  # the catalogue's order
                                      COSMOS_REASON1, ROBOVQA)


def benchmark(name: str) -> Benchmark:
    """The value of the benchmark the catalogue names ``name`` (an unknown name: the catalogue's KeyError)."""
    row = catalogue.entry(name)
    return next(value for value in BENCHMARKS if value.entry is row)


def report_faces() -> list[ReportFace]:
    """Each benchmark's report face (``report.layout.ReportFace``), in the suite's order."""
    return [entry.report_face for entry in BENCHMARKS]


def commands() -> dict[str, tuple[str, Callable]]:
    """The benchmarks' ``lmms-egoplan`` commands: name -> (help, add_arguments), in the suite's order."""
    return {name: command for entry in BENCHMARKS for name, command in entry.commands.items()}


def rubrics() -> dict[str, Rubric]:
    """Every benchmark's judge rubrics, by the names their judged items (and logs) carry: what a process that
    reads logged judged items without running their tasks is handed (``rejudge``, ``judge-agreement``; the
    report reads each benchmark's through its face). A name stands for one rubric."""
    found: dict[str, Rubric] = {}
    for entry in BENCHMARKS:
        for name, rubric in entry.rubrics.items():
            if found.setdefault(name, rubric) is not rubric:
                raise ValueError(f"two benchmarks name a rubric {name!r}")
    return found


def group_scores(task_scores: dict[str, dict]) -> dict[str, dict]:
    """The group scores ``rejudge`` reports as the run would, from its tasks' scores."""
    groups: dict[str, dict] = {}
    for entry in BENCHMARKS:
        for prefix, scores_of in entry.rejudge_groups.items():
            tasks = {task: scores for task, scores in task_scores.items() if task.startswith(prefix)}
            if tasks:
                groups.update(scores_of(tasks))
    return groups
