"""The offline demo, ``lmms-egoplan smoke``: one table, plain words about random scores, the report of
its runs, and a non-zero exit status when a benchmark fails."""

import io
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan import smoke
from lmms_egoplan.testing.suite import SmokeSuite

# End to end: the real lmms-eval CLI in subprocesses.
pytestmark = pytest.mark.e2e


def test_smoke_command_evaluates_a_benchmark_and_prints_one_table(tmp_path):
    command = Path(sys.executable).parent / "lmms-egoplan"
    completed = subprocess.run([str(command), "smoke", "--workdir", str(tmp_path), "--benchmark", "egoplan"],
                               capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    printed = completed.stdout
    table = printed[printed.index("task "):printed.index("These scores")]
    for task in ("egoplan_val", "egoplan_test", "egoplan_val_gen"):
        assert f"\n{task} " in table
    assert "tiny RANDOM model" in printed and "measure nothing" in printed
    assert f"{tmp_path / 'logs' / 'egoplan'}" in printed
    assert list((tmp_path / "logs" / "egoplan").rglob("*_results.json"))
    # one row per task, its main metrics as columns, then the breakdown bins in their natural order
    header, _, *task_rows = table.strip().splitlines()
    assert header.split()[:4] == ["task", "accuracy", "accuracy_epic_kitchens", "accuracy_ego4d"]
    val_row = next(line for line in task_rows if line.startswith("egoplan_val "))
    assert val_row.index("progress: 0_4") < val_row.index(", 5_9") < val_row.index(", 10_14") < val_row.index(
        ", 15_plus") < val_row.index("similarity: low") < val_row.index(", medium") < val_row.index(", high")
    report = tmp_path / "report" / "report.md"
    assert printed.rstrip().endswith(str(report)) and "| this run |" in report.read_text()


def broken_fixture(workdir, resources):
    raise RuntimeError("cannot build")


def missing_data(workdir, resources):
    return SmokeSuite(name="missing", tasks=("egoplan_val",), env={"EGOPLAN_ANNOTATION_DIR": str(workdir / "nowhere")})


def test_smoke_reports_every_failing_benchmark_and_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "SUITES", (f"{__name__}:broken_fixture", f"{__name__}:missing_data"))
    out = io.StringIO()
    assert smoke.run_smoke(tmp_path, out=out) == 2
    printed = out.getvalue()
    assert "FAILED building its fixtures: RuntimeError: cannot build" in printed
    assert "EgoPlan annotation file not found" in printed  # lmms-eval's own log tail names the cause
    assert printed.rstrip().endswith(f"FAILED: {__name__.rsplit('.', 1)[-1]}, {__name__.rsplit('.', 1)[-1]}")
