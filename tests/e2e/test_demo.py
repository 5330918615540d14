"""The offline demo, ``lmms-egoplan smoke``: every architecture it offers, scripted answers whose values are checked,
and a non-zero exit status when a benchmark fails or a scripted value is not the one its script implies. Its one
table, plain words about random scores and the report of its runs: tests/e2e/test_user_surface.py, on the run of the
whole demo it compares to the snapshots."""

import dataclasses
import io
import json
import re
from contextlib import ExitStack

import pytest

from lmms_egoplan.demo import egoplan, robovqa, smoke
from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES, TEXT_ONLY_ARCHITECTURES
from lmms_egoplan.demo.kit.suite import SmokeSuite

# End to end: the real lmms-eval CLI in subprocesses.


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
