"""egoplan_hf through the real lmms-eval CLI: one process, two ranks (torchrun, gloo), and --use_cache."""
from __future__ import annotations

import json
import re
import socket
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import index_image, write_image, write_video
from tests.fixtures import BACKEND_TASKS

# End to end: the real lmms-eval CLI in subprocesses.

MC, GEN = "egoplan_backend_probe_mc", "egoplan_backend_probe_gen"
CHOICES = ["open the fridge", "wash the hands", "put the pan on the stove", "take the cup"]
NUM_DOCS = 4


@pytest.fixture(scope="module")
def probe_data(tmp_path_factory) -> Path:
    """EgoPlan-shaped docs (8 progress frames + an observation image); the last one uses a video file."""
    root = tmp_path_factory.mktemp("backend_probe")
    docs = []
    for d in range(NUM_DOCS):
        frames = []
        for i in range(8):
            index_image(d * 8 + i).save(root / f"doc{d}_frame{i}.jpg")
            frames.append(str(root / f"doc{d}_frame{i}.jpg"))
        docs.append({"question": f"Task goal: make coffee (case {d}). What should I do next?",
                     "choices": CHOICES, "answer": d % 4, "frames": frames,
                     "observation": str(write_image(root / f"doc{d}_observation.jpg", seed=d)), "video": None})
    docs[-1].update(frames=None, video=str(write_video(root / "progress.mp4", num_frames=30)))
    (root / "docs.json").write_text(json.dumps(docs))
    return root / "docs.json"


def evaluate(model_dir: Path, data: Path, output: Path, *extra: str, launcher=None, model_args: str = ""):
    # One CPU thread per process in every run: torchrun gives each rank one (OMP_NUM_THREADS=1), and
    # greedy generations compared across runs must not hang on how many cores this machine has.
    return run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={model_dir},max_frames=8{model_args}",
                         tasks=[MC, GEN],
                         output_dir=output, include_path=BACKEND_TASKS, launcher=launcher,
                         env={"BACKEND_PROBE_DATA_FILE": str(data), "OMP_NUM_THREADS": "1"}, extra_args=list(extra))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scores(run) -> dict[int, list[float]]:
    return {s["doc_id"]: [float(value) for value, _ in s["filtered_resps"]] for s in run.samples(MC)}


@pytest.fixture(scope="module")
def single_process(tiny_model, probe_data, tmp_path_factory):
    """A run killed after two docs (simulated by --limit 2), then the full run resumed from --use_cache."""
    out = tmp_path_factory.mktemp("single")
    model = tiny_model("qwen2_vl")
    partial = evaluate(model, probe_data, out / "partial", "--use_cache", str(out / "cache"), "--limit", "2")
    full = evaluate(model, probe_data, out / "full", "--use_cache", str(out / "cache"))
    return partial, full


def test_single_process_run_scores_every_choice_and_picks_the_argmin(single_process):
    _, run = single_process
    samples = run.samples(MC)
    assert [s["doc_id"] for s in samples] == list(range(NUM_DOCS))
    for sample in samples:
        values = [float(value) for value, _ in sample["filtered_resps"]]
        assert len(values) == 4 and all(v > 0 for v in values)
        assert sample["acc"] == float(int(np.argmin(values)) == int(sample["target"]))
    assert run.metric(MC, "acc") == pytest.approx(np.mean([s["acc"] for s in samples]))
    assert all(isinstance(s["filtered_resps"][0], str) for s in run.samples(GEN))
    assert all("\n" not in s["filtered_resps"][0] for s in run.samples(GEN))  # until: ["\n"]


def test_the_results_name_the_evaluated_model(single_process, tiny_model):
    """The revision asked for, and the hashes of the weights (its one file: no index) and the chat template."""
    import hashlib

    from lmms_egoplan.core.provenance import PROVENANCE_KEY

    _, run = single_process
    model = tiny_model("qwen2_vl")
    assert run.results[PROVENANCE_KEY]["model"] == {
        "pretrained": str(model), "revision": None, "commit": None,
        "weights_index_sha256": hashlib.sha256((model / "model.safetensors").read_bytes()).hexdigest(),
        "chat_template_sha256": hashlib.sha256((model / "chat_template.jinja").read_bytes()).hexdigest()}


def test_use_cache_resumes_with_the_responses_of_the_interrupted_run(single_process):
    partial, full = single_process
    assert "ResponseCache: 8/16 cache hits" in full.log  # 2 docs x 4 choices of 4 x 4
    assert "ResponseCache: 2/4 cache hits" in full.log  # 2 generations of 4
    # Read back from the cache, not recomputed: the very same floats.
    assert {d: v for d, v in scores(full).items() if d < 2} == scores(partial)


def test_two_ranks_give_the_single_process_results(single_process, tiny_model, probe_data, tmp_path):
    _, single = single_process
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
    distributed = evaluate(tiny_model("qwen2_vl"), probe_data, tmp_path, "--use_cache", str(tmp_path / "cache"),
                           launcher=launcher)
    assert re.search(r"Running on rank 1 \(local rank 1\)", distributed.log)
    # Each rank stored its responses as it computed them in a database of its own; all were merged.
    [run_folder] = (tmp_path / "cache" / "runs").iterdir()
    assert sorted(p.name for p in run_folder.glob("rank_*.db")) == ["rank_0.db", "rank_1.db"]
    with sqlite3.connect(tmp_path / "cache" / "cache.db") as db:
        assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == NUM_DOCS * 4 + NUM_DOCS
    got, expected = scores(distributed), scores(single)
    assert got.keys() == expected.keys()
    for doc_id in expected:
        assert got[doc_id] == pytest.approx(expected[doc_id], abs=1e-5)
    assert [s["filtered_resps"] for s in distributed.samples(GEN)] == [s["filtered_resps"] for s in single.samples(GEN)]
    assert distributed.metric(MC, "acc") == single.metric(MC, "acc")


@pytest.mark.parametrize("strategy", ["auto", "balanced", "sequential"])
def test_a_device_map_strategy_gives_the_single_process_results(strategy, single_process, tiny_model, probe_data,
                                                                tmp_path):
    """What lmms-eval's examples pass every model, on this CPU-only machine (one device): the same
    likelihoods as the single-process run, within 1e-6, and the same generations."""
    _, single = single_process
    mapped = evaluate(tiny_model("qwen2_vl"), probe_data, tmp_path, model_args=f",device_map={strategy}")
    got, expected = scores(mapped), scores(single)
    assert got.keys() == expected.keys()
    for doc_id in expected:
        assert got[doc_id] == pytest.approx(expected[doc_id], abs=1e-6)
    assert [s["filtered_resps"] for s in mapped.samples(GEN)] == [s["filtered_resps"] for s in single.samples(GEN)]


def test_batches_prepared_in_a_worker_process_give_the_single_process_results(single_process, tiny_model, probe_data,
                                                                              tmp_path):
    """prefetch_processes: the questions prepared in a process forked from lmms-eval's (its threads, its logging),
    the same likelihoods and generations as the run that prepares each when it is reached."""
    _, single = single_process
    forked = evaluate(tiny_model("qwen2_vl"), probe_data, tmp_path,
                      model_args=",visual_prefetch=2,prefetch_processes=1")
    got, expected = scores(forked), scores(single)
    assert got.keys() == expected.keys()
    for doc_id in expected:
        assert got[doc_id] == pytest.approx(expected[doc_id], abs=1e-6)
    assert [s["filtered_resps"] for s in forked.samples(GEN)] == [s["filtered_resps"] for s in single.samples(GEN)]
