"""lmms-eval's own likelihood tasks on the suite's backend, in process: local copies of seedbench_ppl and
egoschema_subset_mcppl (their own utils.py, synthetic data) score with egoplan_hf by the losses it returns.
docs/upstream/'s first patch must make this pass on lmms-eval alone (tests/e2e/test_upstream_patches.py)."""

import pytest
from lmms_eval.evaluator import simple_evaluate
from lmms_eval.tasks import TaskManager

from tests.kit.lmms_eval_tasks import LETTERS, local_copies


def test_lmms_evals_likelihood_tasks_score_by_the_losses_of_egoplan_hf(tiny_model, tmp_path, monkeypatch):
    local = local_copies(tmp_path, ["seedbench_ppl", "egoschema_subset_mcppl"])
    for name, value in local.env.items():
        monkeypatch.setenv(name, value)
    manager = TaskManager("ERROR", include_path=str(local.include_path), include_defaults=False)
    run = simple_evaluate(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')},max_frames=4",
                         tasks=list(local.names.values()), task_manager=manager, log_samples=True)

    golds = {"seedbench_ppl": lambda doc: LETTERS.index(doc["answer"]),
             "egoschema_subset_mcppl": lambda doc: int(doc["answer"])}
    metrics = {"seedbench_ppl": "acc,none", "egoschema_subset_mcppl": "score,none"}
    for task, name in local.names.items():
        samples = run["samples"][name]
        assert len(samples) == 4
        correct = []
        for sample in samples:
            # Each choice's result reaches the task as the backend's (mean token loss, is_greedy) pair.
            assert all(isinstance(loss, float) and isinstance(greedy, bool)
                       for loss, greedy in sample["filtered_resps"])
            losses = [loss for loss, _ in sample["filtered_resps"]]
            correct.append(losses.index(min(losses)) == golds[task](sample["doc"]))
        assert run["results"][name][metrics[task]] == pytest.approx(sum(correct) / len(correct), abs=1e-12)
