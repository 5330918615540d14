"""lmms-eval's own tasks beside the suite's, through the real CLI: local copies of its likelihood tasks
(seedbench_ppl, egoschema_subset_mcppl) score on egoplan_hf by its losses, and in a run that mixes them and
the generative seedbench with the suite's egoplan_val and ego_think, egoplan_val, ego_think, seedbench_ppl and
seedbench each score as a run of that task alone does.

Two lmms-eval processes: the mixed run, and one whose ``--config`` holds a run per task (each its own
evaluation: task index, model, results file; one start-up for all)."""

from __future__ import annotations

import math
import os
import sys
import time
from contextlib import ExitStack
from types import SimpleNamespace

import pytest
import yaml

from lmms_egoplan.demo.egoplan import build_fixture
from lmms_egoplan.demo.egothink import write_release
from lmms_egoplan.demo.kit.judge_server import hash_rating, loopback_judge_settings
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV, finished_run, run_lmms_eval
from lmms_egoplan.demo.kit.warm_python import run_python
from tests.kit.lmms_eval_tasks import LETTERS, egoschema_records, local_copies, seedbench_records

SUITE_TASKS = ["egoplan_val", "ego_think"]
# A random model's answers are noise whatever their length: 8 new tokens keep the runs short.
GEN_KWARGS = "max_new_tokens=8"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("builtin")
    local = local_copies(root / "lmms_eval_tasks", ["seedbench", "seedbench_ppl", "egoschema_subset_mcppl"])
    egoplan, egothink = build_fixture(root / "egoplan"), write_release(root / "egothink", per_dimension=1)
    model_args = f"pretrained={tiny_model('qwen2_vl')},max_frames=4"
    tasks = [*SUITE_TASKS, *local.names.values()]
    with ExitStack() as resources:
        def env(name: str) -> dict[str, str]:  # each run its own judge cache: both ask the judge
            return {**egoplan.env(), **local.env, "EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(egothink),
                    **loopback_judge_settings("EGOTHINK", hash_rating, root / name, resources)}

        mixed = run_lmms_eval(model="egoplan_hf", model_args=model_args, tasks=tasks, output_dir=root / "mixed",
                              env=env("mixed"), include_path=local.include_path,
                              extra_args=["--gen_kwargs", GEN_KWARGS])
        # egoschema_subset_mcppl takes seedbench_ppl's path. lmms-eval's tasks first: none of them runs in a
        # process that has run a suite task.
        alone_tasks = [local.names["seedbench"], local.names["seedbench_ppl"], *SUITE_TASKS]
        alone = runs_alone(alone_tasks, root / "alone", env("alone"), model="egoplan_hf", model_args=model_args,
                           include_path=str(local.include_path), gen_kwargs=GEN_KWARGS, log_samples=True)
    return SimpleNamespace(mixed=mixed, alone=alone, local=local)


def runs_alone(tasks: list[str], folder, env: dict[str, str], **arguments) -> dict:
    """``{task: EvalRun}``: one lmms-eval process, one ``--config`` entry (a whole run) per task."""
    folder.mkdir(parents=True)
    entries = [{**arguments, "tasks": task, "output_path": str(folder / task)} for task in tasks]
    (folder / "alone.yaml").write_text(yaml.safe_dump(entries))
    command = [sys.executable, "-m", "lmms_eval", "--config", str(folder / "alone.yaml")]
    started = time.time()
    completed = run_python(command, cwd=folder, timeout=1800,
                           env={**os.environ, **OFFLINE_ENV, **env, "LMMS_EVAL_PLUGINS": "lmms_egoplan"})
    return {task: finished_run(command, completed.returncode, completed.stdout, folder / task, started, [task],
                               check=True) for task in tasks}


def test_lmms_evals_likelihood_tasks_score_on_egoplan_hf_by_its_losses(runs):
    tasks = {"seedbench_ppl": ("acc", [LETTERS.index(record["answer"]) for record in seedbench_records(4)]),
             "egoschema_subset_mcppl": ("score", [int(record["answer"]) for record in egoschema_records(4)])}
    for task, (metric, golds) in tasks.items():
        samples = runs.mixed.samples(runs.local.names[task])
        assert len(samples) == 4
        correct = []
        for sample in samples:
            # Every choice scored: the backend's (mean token loss, is_greedy) pair (logged as text).
            pairs = [(float(loss), greedy) for loss, greedy in sample["filtered_resps"]]
            assert len(pairs) == (5 if task == "egoschema_subset_mcppl" else 4)
            assert {greedy for _, greedy in pairs} <= {"True", "False"}
            losses = [loss for loss, _ in pairs]
            correct.append(losses.index(min(losses)) == golds[sample["doc_id"]])
        assert runs.mixed.metric(runs.local.names[task], metric) == pytest.approx(sum(correct) / 4, abs=1e-12)


def test_each_task_of_a_mixed_run_scores_as_a_run_of_that_task_alone(runs):
    for task, alone in runs.alone.items():
        for section in ("results", "groups"):
            for name, metrics in alone.results.get(section, {}).items():
                mixed = runs.mixed.results[section][name]
                for key, value in metrics.items():
                    assert same(mixed[key], value), f"{name} {key}: {mixed[key]} mixed, {value} alone"
        for name in alone.results["configs"]:  # its tasks (a group's too): each logged its samples
            for mixed, single in zip(runs.mixed.samples(name), alone.samples(name), strict=True):
                assert same(mixed["filtered_resps"], single["filtered_resps"], tolerance=1e-5), name


def same(a, b, tolerance: float = 1e-12) -> bool:
    """Equal; numbers (also logged as text: likelihoods) within ``tolerance``, as each run computes its own."""
    a, b = as_number(a), as_number(b)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=0, abs_tol=tolerance) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y, tolerance) for x, y in zip(a, b))
    return a == b


def as_number(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else value
    except ValueError:
        return value
