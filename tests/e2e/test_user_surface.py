"""Nothing users see in a run's files changes (issue 50, point 6): the offline demo, ``lmms-egoplan smoke`` (every
task of every benchmark through the real ``lmms-eval`` CLI on a tiny random model, then the generative ones with
scripted answers through lmms-eval's ``openai`` backend and loopback judges; with a text-only model, EgoPlan's
text-only baselines through the real ``lm_eval`` CLI), and the structure of what each of its runs writes compared to
the snapshots ``tests/architecture/user_surface/run_files*.json`` (taken at 5a0c717): file names and kinds, task and
group names, metric names, versions, recorded settings, the keys of the samples, judgements, plans files. Masked
(they vary): date-times in file names, the model's folder, scores, times, versions and hashes of the run, paths
under the work folder, the loopback judge's address and reply (the settings' defaults: the fast tier's snapshot).
The demo's printed table and report, from the same run (one run of the whole demo serves both checks)."""

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lmms_egoplan.demo import egoplan, smoke
from tests.architecture.user_surface import compare_with_snapshot, run_structure
from tests.report.test_report import markdown_rows


@dataclass(frozen=True)
class DemoRun:
    workdir: Path
    printed: str

    def structure(self) -> dict:
        """The structure of each of its runs (a folder of ``<workdir>/logs``)."""
        varying = (str(self.workdir), "127.0.0.1", "loopback-judge")  # the demo's own data, judge and judge model
        return {run.name: run_structure(run, varying) for run in sorted((self.workdir / "logs").iterdir())}


def run_demo(root: Path, *arguments: str) -> DemoRun:
    """``lmms-egoplan smoke <arguments>`` in ``root/demo``, hermetic: the user's own settings file at the default
    location and an EGOPLAN_* variable, both of which would change the demo's values (and its runs' recorded
    settings), are there and must not be read."""
    users = root / "config" / "lmms-egoplan" / "settings.yaml"
    users.parent.mkdir(parents=True)
    users.write_text("egoplan:\n  num_frames: 2\n  frame_sampling: bogus\n")
    environment = {key: value for key, value in os.environ.items() if key != "LMMS_EGOPLAN_SETTINGS"}
    command = Path(sys.executable).parent / "lmms-egoplan"
    completed = subprocess.run([str(command), "smoke", "--workdir", str(root / "demo"), *arguments],
                               capture_output=True, text=True, timeout=900,
                               env={**environment, "XDG_CONFIG_HOME": str(root / "config"), "EGOPLAN_MAX_SIDE": "3"})
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return DemoRun(root / "demo", completed.stdout)


@pytest.fixture(scope="module")
def whole_demo(tmp_path_factory) -> DemoRun:
    """The demo as a user runs it, every benchmark: once for this module's checks."""
    return run_demo(tmp_path_factory.mktemp("whole-demo"))


def test_the_demos_lmms_eval_runs_write_what_they_wrote_before_the_refactor(whole_demo):
    compare_with_snapshot("run_files", whole_demo.structure())


def test_the_demos_lm_eval_runs_write_what_they_wrote_before_the_refactor(tmp_path):
    """A text-only model: EgoPlan's baselines through ``lm_eval`` (its results, samples and submission files)."""
    compare_with_snapshot("run_files_lm_eval", run_demo(tmp_path, "--arch", "llama", "--benchmark", "egoplan")
                          .structure())


def test_the_demo_prints_one_table_a_benchmark_and_says_what_its_rows_measure(whole_demo):
    """EgoPlan's block of the table (the first), the plain words about random scores and the report."""
    printed, workdir = whole_demo.printed, whole_demo.workdir
    table = printed[printed.index("task "):printed.index("Rows without a mark")]
    assert max(map(len, table.splitlines())) <= 120  # fits a terminal: breakdowns and reasons listed below
    for task in ("egoplan_val", "egoplan_test", "egoplan_val_gen", f"egoplan_val_gen {smoke.SCRIPTED}"):
        assert f"\n{task} " in table
    assert "tiny RANDOM model" in printed and "measure nothing" in printed
    assert f"{workdir / 'logs' / 'egoplan'}" in printed and f"{workdir / 'logs' / 'scripted'}" in printed
    assert list((workdir / "logs" / "egoplan").rglob("*_results.json"))
    # the settings file of its data, which its runs read and a user re-runs a task with (docs/data.md)
    settings = workdir / "lmms-egoplan-settings.yaml"
    assert f"its judge stopped with the demo): {settings}\n" in printed
    results = json.loads(next((workdir / "logs" / "egoplan").rglob("*_results.json")).read_text())
    assert results["configs"]["egoplan_val"]["metadata"]["settings_file"] == str(settings)
    # one row per task, its main metrics as columns (each header with its unit); below, the breakdown bins in
    # their natural order
    header, _, *task_rows = table.strip().splitlines()
    assert re.split(r"\s{2,}", header)[:4] == ["task", "accuracy (%)", "accuracy_epic_kitchens (%)",
                                               "accuracy_ego4d (%)"]
    progress = next(line for line in task_rows if line.startswith("  egoplan_val, progress (%): "))
    similarity = next(line for line in task_rows if line.startswith("  egoplan_val, similarity (%): "))
    assert progress.index(": 0_4") < progress.index(", 5_9") < progress.index(", 10_14") < progress.index(", 15_plus")
    assert similarity.index(": low") < similarity.index(", medium") < similarity.index(", high")
    # the random model's letters are unreadable: its accuracy says it is no score, and why (below the table)
    random_row = next(line for line in task_rows if line.startswith("egoplan_val_gen "))
    assert "(not scored)" in random_row
    assert table.index(smoke.WHY_NOT_SCORED) < table.index("\n  egoplan_val_gen: 8 of 8 answers unparseable\n")
    # the scripted answers: 3 of every 5 right (stated letter, bare letter, candidate text), 1 in 5 unreadable
    scripted_row = next(line for line in task_rows if line.startswith(f"egoplan_val_gen {smoke.SCRIPTED}"))
    records = egoplan.build_fixture(workdir / "data" / "egoplan").records()
    right = sum(egoplan.SCRIPTED_STYLES[i % 5] in ("stated letter", "bare letter", "candidate text")
                for i in range(len(records)))
    assert scripted_row.split()[2] == f"{100 * right / len(records):.4g}" and "not scored" not in scripted_row  # in %
    assert f"{smoke.SCRIPTED} rows: answers of known quality; all 23 values equal" in printed
    report = workdir / "report" / "report.md"
    assert printed.rstrip().endswith(f"{report}; to open in a browser: {report.with_suffix('.html')}")
    assert "Every benchmark ran and every table above held; no failure (" in printed
    # the model, then its main score (column 2, ``value_order``), then where the row comes from
    percent = f"{100 * right / len(records):.2f}"
    [(scripted_line, scripted_notes)] = [(line, notes) for line, notes in markdown_rows(
        report.read_text(), "| this run | egoplan_val_gen |") if line.startswith("| scripted-answers ")]
    assert re.match(rf"\| scripted-answers \[[\d, ]+\] \| {percent} \[[^]]*\] \| this run \| egoplan_val_gen \|",
                    scripted_line) and scripted_notes.startswith(smoke.SCRIPTED_MODEL_NOTE)
    # the report says it too, first in the notes of every row of the random model
    random_rows = [(line, notes) for line, notes in markdown_rows(report.read_text(), "| this run |")
                   if not line.startswith("| scripted-answers ")]
    assert random_rows and all(notes.startswith(smoke.RANDOM_MODEL_NOTE) for _, notes in random_rows)
