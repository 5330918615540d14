"""The offline demo, ``lmms-egoplan smoke``: one table, plain words about random scores, scripted answers
whose values are checked, the report of its runs, and a non-zero exit status when a benchmark fails
or a scripted value is not the one its script implies."""

import dataclasses
import io
import json
import re
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from lmms_egoplan.demo import egoplan, robovqa, smoke
from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES, TEXT_ONLY_ARCHITECTURES
from lmms_egoplan.demo.kit.suite import SmokeSuite

# End to end: the real lmms-eval CLI in subprocesses.


def test_smoke_command_evaluates_a_benchmark_and_prints_one_table(tmp_path):
    """Hermetic: the user's own settings file at the default location and an EGOPLAN_* variable, both of which would
    change the demo's values, are not read."""
    import os

    command = Path(sys.executable).parent / "lmms-egoplan"
    users = tmp_path / "config" / "lmms-egoplan" / "settings.yaml"
    users.parent.mkdir(parents=True)
    users.write_text("egoplan:\n  num_frames: 2\n  frame_sampling: bogus\n")
    environment = {key: value for key, value in os.environ.items() if key != "LMMS_EGOPLAN_SETTINGS"}
    completed = subprocess.run([str(command), "smoke", "--workdir", str(tmp_path / "demo"), "--benchmark", "egoplan"],
                               capture_output=True, text=True, timeout=900,
                               env={**environment, "XDG_CONFIG_HOME": str(tmp_path / "config"),
                                    "EGOPLAN_MAX_SIDE": "3"})
    tmp_path = tmp_path / "demo"
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    printed = completed.stdout
    table = printed[printed.index("task "):printed.index("Rows without a mark")]
    assert max(map(len, table.splitlines())) <= 120  # fits a terminal: breakdowns and reasons listed below
    for task in ("egoplan_val", "egoplan_test", "egoplan_val_gen", f"egoplan_val_gen {smoke.SCRIPTED}"):
        assert f"\n{task} " in table
    assert "tiny RANDOM model" in printed and "measure nothing" in printed
    assert f"{tmp_path / 'logs' / 'egoplan'}" in printed and f"{tmp_path / 'logs' / 'scripted'}" in printed
    assert list((tmp_path / "logs" / "egoplan").rglob("*_results.json"))
    # the settings file of its data, which its runs read and a user re-runs a task with (docs/data.md)
    settings = tmp_path / "lmms-egoplan-settings.yaml"
    assert f"its judge stopped with the demo): {settings}\n" in printed
    results = json.loads(next((tmp_path / "logs" / "egoplan").rglob("*_results.json")).read_text())
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
    records = egoplan.build_fixture(tmp_path / "data" / "egoplan").records()
    right = sum(egoplan.SCRIPTED_STYLES[i % 5] in ("stated letter", "bare letter", "candidate text")
                for i in range(len(records)))
    assert scripted_row.split()[2] == f"{100 * right / len(records):.4g}" and "not scored" not in scripted_row  # in %
    assert f"{smoke.SCRIPTED} rows: answers of known quality; all 23 values equal" in printed
    report = tmp_path / "report" / "report.md"
    assert printed.rstrip().endswith(str(report))
    # the model, then its main score (column 2, ``value_order``), then where the row comes from
    percent = f"{100 * right / len(records):.2f}"
    assert re.search(rf"^\| scripted-answers \| {percent} \[[^]]*\] \| this run \| egoplan_val_gen \|",
                     report.read_text(), re.MULTILINE)


@pytest.fixture(scope="module")
def every_suite(tmp_path_factory):
    """Every benchmark's demo fixtures (data, loopback judges), built once."""
    root = tmp_path_factory.mktemp("suites")
    with ExitStack() as resources:
        yield {name: build(root / name, resources) for name, build in smoke.suites().items()}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_architecture_the_demo_offers_answers_a_question_of_each_benchmark_it_takes(arch, every_suite,
                                                                                          tiny_model, tmp_path):
    """One run per architecture, a document of every task of every benchmark it takes (``smoke.arch_plan``, as
    the demo runs them one benchmark at a time; new tokens capped at 16); a text-only model: the text-only
    baselines through lm-eval, and the benchmarks without any said to be left out, with the reason."""
    plans = {name: smoke.arch_plan(arch, name) for name in every_suite}
    text_only = arch in TEXT_ONLY_ARCHITECTURES
    left_out = {name for name, plan in plans.items() if not plan.tasks}
    assert left_out == ({"egointent", "egoplan_bench2", "cosmos_reason1", "robovqa"} if text_only else set())
    assert all("images or videos" in plans[name].left_out for name in left_out)
    tasks = [task for plan in plans.values() for task in plan.tasks]
    env = {key: value for suite in every_suite.values() for key, value in suite.env.items()}
    run = smoke.run_plan(smoke.ArchPlan(text_only, tuple(tasks)), tiny_model(arch), tmp_path, SmokeSuite(
        env=env, cli_args=("--gen_kwargs", "max_new_tokens=16")), limit=1)
    assert set(tasks) <= set(run.results["results"]) | set(run.results.get("groups", {}))


def broken_fixture(workdir, resources):
    raise RuntimeError("cannot build")


def missing_data(workdir, resources):
    return SmokeSuite(env={"EGOPLAN_ANNOTATION_DIR": str(workdir / "nowhere")}, tasks=("egoplan_val",))


def test_smoke_reports_every_failing_benchmark_and_fails(tmp_path, monkeypatch):
    # Suites are named by benchmark: the demo writes each one's block of its settings file.
    monkeypatch.setattr(smoke, "suites", lambda: {"broken": broken_fixture, "egoplan": missing_data})
    out = io.StringIO()
    assert smoke.run_smoke(tmp_path, out=out) == 2
    printed = out.getvalue()
    assert "FAILED building its fixtures: RuntimeError: cannot build" in printed
    # lmms-eval's own log tail names the cause
    assert "EgoPlan annotation file EgoPlan_validation.json not found" in printed
    assert printed.rstrip().endswith("FAILED: broken, egoplan")


def tampered_egoplan(workdir, resources):
    """EgoPlan's suite (its Test task only, for speed) whose script expects one accuracy too many."""
    suite = egoplan.smoke_suite(workdir, resources)
    script = suite.scripted

    def expected(run):
        values = script.expected(run)
        values["egoplan_val_gen"]["accuracy"] += 0.125
        return values

    return dataclasses.replace(suite, tasks=("egoplan_test",), scripted=dataclasses.replace(script, expected=expected))


def test_a_scripted_value_off_the_script_fails_the_demo(tmp_path, monkeypatch):
    monkeypatch.setattr(smoke, "suites", lambda: {"egoplan": tampered_egoplan})
    out = io.StringIO()
    assert smoke.run_smoke(tmp_path, out=out) == 1
    printed = out.getvalue()
    results = json.loads(next((tmp_path / "logs" / "scripted").rglob("*_results.json")).read_text())
    reported = results["results"]["egoplan_val_gen"]["accuracy,none"]
    assert f"[scripted] rows: 1 of 23 values differ from what the script implies:\n  egoplan_val_gen accuracy: " \
           f"reported {reported}, expected {reported + 0.125:.6g}" in printed
    assert printed.rstrip().endswith("FAILED: egoplan (scripted)")


def tampered_robovqa(workdir, resources):
    """RoboVQA's suite whose script expects the PhysBrain preset's BLEU over the group one point higher."""
    suite = robovqa.smoke_suite(workdir, resources)
    script = suite.scripted

    def rescorings(run, failed=frozenset()):
        rescored = script.rescorings(run, failed=failed)
        next(r for r in rescored if r.label == "physbrain").expected["robovqa"]["physbrain_bleu"] += 1.0
        return rescored

    return dataclasses.replace(suite, scripted=dataclasses.replace(script, rescorings=rescorings))


def test_robovqas_scripted_answers_go_through_every_presets_scorer_each_value_checked(tmp_path, monkeypatch):
    """One scripted run (the default protocol); its logged answers scored again by each preset's scorer, a table
    each, and every value checked against the transcriptions of the lineages' code: here only the tampered one
    differs."""
    monkeypatch.setattr(smoke, "suites", lambda: {"robovqa": tampered_robovqa})
    out = io.StringIO()
    assert smoke.run_smoke(tmp_path, out=out) == 1
    printed = out.getvalue()
    assert len(list((tmp_path / "logs" / "scripted").rglob("*_results.json"))) == 1  # no run per preset
    for preset in ("mimo", "physbrain", "robomamba", "multinet"):
        assert f"\nrobovqa [scripted, {preset}] " in printed and f"\nrobovqa_success [scripted, {preset}] " in printed
    found = re.search(r"\[scripted\] rows: 1 of (\d+) values differ from what the script implies:\n  "
                      r"\[scripted, physbrain\] robovqa physbrain_bleu: reported ([\d.]+), expected ([\d.]+)\n",
                      printed)
    assert found, printed[-3000:]
    # the group and the seven types: the default's 7 values, then mimo's 5, physbrain's 1, robomamba's 4, multinet's 3
    assert int(found.group(1)) == 8 * (7 + 5 + 1 + 4 + 3)
    assert float(found.group(3)) == pytest.approx(float(found.group(2)) + 1.0, abs=1e-3)
    assert printed.rstrip().endswith("FAILED: robovqa (scripted)")
