"""lmms-eval's own ``llava_hf`` backend on the suite's egoplan_val and an lmms-eval image likelihood task (a local copy
of seedbench_ppl), in one run of the real CLI on the demo's tiny llava-hf LLaVA-1.5: both score, each candidate's
loss a number (lmms-eval 0.7.3 fails them all: docs/upstream/19-llava-hf-likelihood.md)."""

from __future__ import annotations

import math
import os

import numpy as np

from lmms_egoplan.demo.egoplan import build_fixture
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from tests.kit.lmms_eval_tasks import LETTERS, local_copies, seedbench_records

# lmms-eval's llava_hf imports decord for videos at module level (the extra lmms-builtins installs it); these
# tasks show images only, so a stand-in that refuses any video takes its place where it is not installed.
DECORD_STAND_IN = '''def VideoReader(*args, **kwargs):
    raise RuntimeError("decord stand-in of tests/e2e/test_lmms_eval_llava_hf.py: no video here")


def cpu(*args, **kwargs):
    raise RuntimeError("decord stand-in of tests/e2e/test_lmms_eval_llava_hf.py: no video here")
'''


def test_llava_hf_scores_egoplan_val_and_an_lmms_eval_image_likelihood_task_in_one_run(tiny_model, tmp_path):
    egoplan, local = build_fixture(tmp_path / "egoplan"), local_copies(tmp_path / "lmms_eval_tasks", ["seedbench_ppl"])
    stand_in = tmp_path / "stand_in"
    stand_in.mkdir()
    (stand_in / "decord.py").write_text(DECORD_STAND_IN)
    python_path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(stand_in)]))  # a real decord first
    seedbench = local.names["seedbench_ppl"]
    run = run_lmms_eval(model="llava_hf", model_args=f"pretrained={tiny_model('llava')},device=cpu,device_map=cpu,"
                                                     "dtype=float32", tasks=["egoplan_val", seedbench],
                        env={**egoplan.env(), **local.env, "EGOPLAN_SCORED_TOKENS": "answer",
                             "EGOPLAN_LOSS_MEAN": "every_scored_token", "PYTHONPATH": python_path},
                        output_dir=tmp_path / "run", include_path=local.include_path, extra_args=["--force_simple"])
    seedbench_golds = [LETTERS.index(record["answer"]) for record in seedbench_records(4)]
    for task, metric, gold in (("egoplan_val", "accuracy", lambda sample: int(sample["target"])),
                               (seedbench, "acc", lambda sample: seedbench_golds[sample["doc_id"]])):
        samples = run.samples(task)
        hits = []
        for sample in samples:
            # Every choice scored: llava_hf's (mean loss of the continuation's tokens, is_greedy), logged as text.
            losses = [float(loss) for loss, _ in sample["filtered_resps"]]
            assert len(losses) == 4 and all(math.isfinite(loss) and loss > 0 for loss in losses), sample
            hits.append(float(int(np.argmin(losses)) == gold(sample)))
        assert samples and run.metric(task, metric) == np.mean(hits), task
