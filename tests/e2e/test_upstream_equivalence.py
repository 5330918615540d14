"""docs/upstream/equivalence.py on the demo's data: each pull request's lmms-eval task (a patched scratch copy of the
installed lmms-eval, in a process that cannot import the suite) scores as the suite's task on the same data and
backend, request for request, sample for sample, aggregate for aggregate, but for the differences its declaration
names. Then the same command with the suite's plugin named, on lmms-eval carrying the task (the same scratch copy):
lmms-eval's own task runs, the run says so, and it scores as without the plugin (no name switches implementation
silently)."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Callable

import pytest

from docs.upstream.equivalence import SUITE, UPSTREAM, main
from lmms_egoplan.demo.kit.judge_server import ChatServer
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.scripted import MODEL_NAME, answering, reported_metrics
from tests.e2e.planned_equivalence import actplan_release, egothink_paper


def egoplan_bench2(workdir: Path, resources: contextlib.ExitStack, tiny_model) -> tuple[str, str, dict[str, str]]:
    """The demo's EgoPlan-Bench2 data (the release's layout), answered by the demo's script through lmms-eval's
    openai backend: answers of every shape, which the two parsers read differently. `accuracy` is read as lmms-eval's
    task reads it (eval.py's parser, fixed in its YAML; the suite's default is the robust reading, a declared
    difference), so that the run with the plugin named below is the same command."""
    from lmms_egoplan.demo.egoplan_bench2 import build_fixture, scripted_answers

    fixture = build_fixture(workdir / "data")
    return answered_through_openai(scripted_answers(fixture), resources, fixture.env(parser="official"))


def answered_through_openai(scripted, resources: contextlib.ExitStack, env: dict[str, str]) -> tuple[str, str, dict]:
    """lmms-eval's openai backend on a loopback server answering as ``scripted`` (the demo's answers) does."""
    model = resources.enter_context(ChatServer(answering([scripted]), model_name=MODEL_NAME))
    return "openai", f"model_version={MODEL_NAME},base_url={model.base_url},api_key=unused", env


def egoplan(workdir: Path, resources: contextlib.ExitStack, tiny_model) -> tuple[str, str, dict[str, str]]:
    """The demo's EgoPlan-Bench data (EPIC frame folders, Ego4D videos, the release's files), ranked by lmms-eval's
    qwen2_5_vl (the patched chat backend `--model qwen2_5_vl` resolves to) and by egoplan_hf on the same tiny
    random-weight Qwen2.5-VL. (qwen2_vl and qwen3_vl score as egoplan_hf in the fast tier's run of the GPU command
    at its smallest setting, speed/bench_qwen_loglikelihood.py --arch all, which needs no CLI start-up, and in their
    own lmms-eval test.)"""
    from lmms_egoplan.demo.egoplan import build_fixture

    return ("qwen2_5_vl", f"pretrained={tiny_model('qwen2_5_vl')},device=cpu,device_map=cpu",
            build_fixture(workdir / "data").env(loss_mean="every_scored_token"))  # lmms-eval's loglikelihood


def egoplan_gen(workdir: Path, resources: contextlib.ExitStack, tiny_model) -> tuple[str, str, dict[str, str]]:
    """The demo's EgoPlan-Bench data, egoplan_val_gen answered by the demo's script through lmms-eval's openai backend
    (a stated letter, a bare one, a candidate's text, a wrong letter, an unreadable answer)."""
    from lmms_egoplan.demo.egoplan import build_fixture, scripted_answers

    fixture = build_fixture(workdir / "data")
    return answered_through_openai(scripted_answers(fixture), resources, fixture.env())


# Each benchmark equivalence.py declares, run on the demo's data, alone or with others in one run per side (one
# lmms-eval start-up each): (workdir, resources, tiny_model) -> (model, model_args, the settings that point the
# suite's tasks at the data).
EQUIVALENCE_RUNS: dict[tuple[str, ...], Callable[..., tuple[str, str, dict[str, str]]]] = {
    ("egoplan_bench2",): egoplan_bench2,
    ("egoplan",): egoplan,
    ("egoplan_gen",): egoplan_gen,
    ("actplan1k",): actplan_release,
    ("egothink",): egothink_paper,
}


class Compared:
    """One equivalence run (one benchmark, or several together): what it printed and returned, and what it ran
    with."""

    def __init__(self, benchmarks: tuple[str, ...], workdir: Path, resources: contextlib.ExitStack, tiny_model):
        self.workdir = workdir / "equivalence"
        self.model, self.model_args, self.env = EQUIVALENCE_RUNS[benchmarks](workdir, resources, tiny_model)
        printed = io.StringIO()
        self.status = main([*benchmarks, "--model", self.model, "--model_args", self.model_args,
                            "--workdir", str(self.workdir)], environ={**os.environ, **self.env}, out=printed)
        self.printed = printed.getvalue()

    @property
    def scratch(self) -> Path:
        """The patched scratch copy of lmms-eval the comparison ran (kept for the tests that follow)."""
        return self.workdir / "lmms-eval"

    def upstream_results(self) -> dict:
        [results] = (self.workdir / UPSTREAM).rglob("*_results.json")
        return json.loads(results.read_text())


@pytest.fixture(scope="module")
def compared(tmp_path_factory, tiny_model):
    """benchmark -> its Compared run, run once per module (its model and scratch copy kept for later tests)."""
    runs: dict[tuple[str, ...], Compared] = {}
    with contextlib.ExitStack() as resources:
        def run(*benchmarks: str) -> Compared:
            if benchmarks not in runs:
                runs[benchmarks] = Compared(benchmarks, tmp_path_factory.mktemp("+".join(benchmarks)), resources,
                                            tiny_model)
            return runs[benchmarks]

        yield run


@pytest.mark.parametrize("benchmarks", sorted(EQUIVALENCE_RUNS), ids="+".join)
def test_the_pull_requests_task_scores_as_the_suites_but_for_the_named_differences(benchmarks, compared):
    run = compared(*benchmarks)
    assert run.status == 0, run.printed
    assert "DIFFERS" not in run.printed, run.printed
    assert f"{'+'.join(benchmarks)}: equal but for the deliberate differences above" in run.printed, run.printed
    assert "lmms_egoplan modules imported: none; refused: ['lmms_egoplan']" in run.printed, run.printed
    assert f"lmms_eval imported from the patched copy {run.scratch}/lmms_eval/__init__.py" in run.printed


def test_lmms_eval_carrying_a_suite_tasks_name_runs_its_own_and_scores_as_without_the_plugin(compared, tmp_path):
    run = compared("egoplan_bench2")
    with_plugin = run_lmms_eval(model=run.model, model_args=run.model_args, tasks=["egoplan_bench2"],
                                output_dir=tmp_path, env={**run.env, "PYTHONPATH": str(run.scratch)})
    assert reported_metrics(with_plugin.results)["egoplan_bench2"] == \
        reported_metrics(run.upstream_results())["egoplan_bench2"]


def test_actplan_runs_both_tasks_in_one_run_per_side(compared):
    """lmms-eval's actplan1k and actplan1k_text_only against the suite's (no BLEURT classifier on either side), in
    one run per side; the plans' scores and format agree."""
    run = compared("actplan1k")
    for task in ("actplan1k", "actplan1k_text_only"):
        assert f"== {task} (lmms-eval, patched) against {task} (the suite)" in run.printed, run.printed
    # What the script makes of the demo's data, on both sides: one output of the four holds no plan.
    assert "no_plan_rate 0.25," in run.printed, run.printed
    assert "bleurt" not in run.printed, run.printed


def logged_choices(workdir: Path, side: str, task: str) -> list[int]:
    """The candidate each logged sample of ``task`` ranks first (the lowest loss of its ``filtered_resps``)."""
    [samples] = (workdir / side).glob(f"*/*_samples_{task}.jsonl")
    choices = []
    for line in samples.read_text().splitlines():
        losses = [float(loss) for loss, _ in json.loads(line)["filtered_resps"]]
        choices.append(losses.index(min(losses)))
    return choices


def test_egoplan_by_likelihood_scores_every_candidate_alike_and_writes_the_same_leaderboard_file(compared):
    """Beyond the comparison's tolerance (absolute or relative): each candidate's loss within 1e-4 absolute, in the
    requests both backends answered; the same candidate first on every question; equal Test submission files."""
    run = compared("egoplan")
    answered = {}
    for side in (UPSTREAM, SUITE):
        for line in (run.workdir / f"{side}-likelihood-requests.jsonl").read_text().splitlines():
            record = json.loads(line)
            key = (record["context"], record["continuation"], tuple(record["images"]))
            answered.setdefault(key, {})[side] = record["result"][0]
    assert len(answered) == 44 and all(len(losses) == 2 for losses in answered.values())  # 8 + 3 questions x 4
    assert max(abs(losses[UPSTREAM] - losses[SUITE]) for losses in answered.values()) < 1e-4
    for tasks, questions in ((("egoplan_val_mcppl", "egoplan_val"), 8), (("egoplan_test_mcppl", "egoplan_test"), 3)):
        choices = [logged_choices(run.workdir, side, task) for side, task in zip((UPSTREAM, SUITE), tasks)]
        assert choices[0] == choices[1] and len(choices[0]) == questions, (tasks, choices)
    [upstream_file] = (run.workdir / UPSTREAM / "submissions").glob("egoplan_test_submission.json")
    [suite_file] = (run.workdir / SUITE).glob("*/*_submission_egoplan_test.json")
    assert json.loads(upstream_file.read_text()) == json.loads(suite_file.read_text())


def test_egothink_paper_is_judged_alike_and_the_withheld_ratings_fail_the_same_answers_on_both_sides(compared):
    """The judge received the same 24 prompts from both sides (lmms-eval's asking the 4 it gave no rating again, 3 times
    each, as the authors' code does: 20 + 4 x 3 requests); the 4 ratings it withheld (the answers whose reference is
    "Yes.") are failed judgements on both, left out of the scores; the groups agree."""
    run = compared("egothink")
    assert "judge (EGOTHINK): the same 24 distinct prompts on both sides (lmms-eval's llm_judge sent 32" in run.printed
    for value in ("aggregates equal: failed 4, judged 20, score 47.9167", "failed 1, judged 1, score 0",
                  "failed 2, judged 2, score 25"):
        assert value in run.printed, (value, run.printed)
