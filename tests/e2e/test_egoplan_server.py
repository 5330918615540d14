"""egoplan_server through the real lmms-eval CLI against loopback servers: a wrong model name stops the run before any scoring; a server dying mid-run loses no scored question."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lmms_eval.api.instance import Instance

from lmms_egoplan.fixtures.media import index_image
from tests.fixtures import BACKEND_TASKS
from tests.models.engine_servers import EngineServer
from tests.models.test_egoplan_server import CHOICES, SPLIT, TASK, TOLERANCE, reference_backends

MC, GEN = "egoplan_backend_probe_mc", "egoplan_backend_probe_gen"


@pytest.fixture(scope="module")
def cli_setup(tiny_model, tmp_path_factory):
    """Probe docs in the backend tests' task format, and one loopback vLLM server for every CLI run."""
    import json

    from lmms_egoplan.fixtures.media import write_image

    root = tmp_path_factory.mktemp("server_probe")
    docs = []
    for d in range(4):
        frames = []
        for i in range(8):
            index_image(d * 8 + i).save(root / f"doc{d}_frame{i}.png")
            frames.append(str(root / f"doc{d}_frame{i}.png"))
        docs.append({"question": f"Task goal: make coffee (case {d}). What should I do next?", "choices": CHOICES,
                     "answer": d % 4, "frames": frames, "observation": str(write_image(root / f"doc{d}.png", seed=d)),
                     "video": None})
    (root / "docs.json").write_text(json.dumps(docs))
    with EngineServer("vllm", tiny_model("qwen2_vl")) as server:
        yield root / "docs.json", server


@pytest.fixture(scope="module")
def reference(tiny_model):
    return reference_backends(tiny_model)


def evaluate_through(server: EngineServer, data: Path, output: Path, *extra: str, model: str = "tiny"):
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

    return run_lmms_eval(model="egoplan_server", check=False, tasks=[MC, GEN], output_dir=output,
                         model_args=f"engine=vllm,base_url={server.base_url},model={model},max_frames=8,retries=1,"
                                    f"backoff=0.01,concurrency=1",
                         include_path=BACKEND_TASKS, use_plugin=False, env={"BACKEND_PROBE_DATA_FILE": str(data)},
                         extra_args=list(extra))


def test_cli_a_wrong_model_name_stops_the_run_before_any_scoring(cli_setup, tmp_path):
    data, server = cli_setup
    server.die_after(None)
    server.reset()
    run = evaluate_through(server, data, tmp_path, model="qwen-7b")
    assert run.returncode != 0 and run.results is None
    assert "serves ['tiny'], not 'qwen-7b': fix model_args model" in run.log
    assert server.requests == []


def test_cli_a_server_dying_mid_run_loses_no_scored_question(cli_setup, tmp_path, reference):
    data, server = cli_setup
    server.reset()
    server.die_after(1 + 2 * 4)  # the load probe, then two questions
    died = evaluate_through(server, data, tmp_path / "died", "--use_cache", str(tmp_path / "cache"))
    assert died.returncode != 0 and died.results is None
    assert "connection failed" in died.log
    server.die_after(None)
    resumed = evaluate_through(server, data, tmp_path / "resumed", "--use_cache", str(tmp_path / "cache"))
    assert resumed.returncode == 0, resumed.log_tail()
    assert "ResponseCache: 8/16 cache hits" in resumed.log  # the two questions scored before the server died
    # egoplan_hf in this process, on the same docs through the same task functions.
    sys.path.insert(0, str(BACKEND_TASKS))
    try:
        import backend_task
    finally:
        sys.path.remove(str(BACKEND_TASKS))
    import json

    docs = json.loads(data.read_text())
    hf = reference("qwen2_vl")
    hf.task_dict = {TASK: {SPLIT: docs}}
    requests = [Instance(request_type="loglikelihood", idx=i,
                         arguments=(backend_task.doc_to_text(d), " " + c, backend_task.doc_to_visual, doc_id, TASK, SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, d in enumerate(docs) for i, c in enumerate(CHOICES)]
    expected = [value for value, _ in hf.loglikelihood(requests)]
    got = [float(value) for sample in resumed.samples(MC) for value, _ in sample["filtered_resps"]]
    assert got == pytest.approx(expected, abs=TOLERANCE)
