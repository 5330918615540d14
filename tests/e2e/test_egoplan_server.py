"""egoplan_server through the real lmms-eval CLI against loopback servers: a wrong model name stops the run before any
scoring; a server dying mid-run loses no scored question; three servers behind an API key (read from the variable
api_key_env names, never written out), one of them killed mid-run, complete the run with egoplan_hf's values."""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from lmms_eval.api.instance import Instance

from lmms_egoplan.demo.kit.media import index_image
from tests.fixtures import BACKEND_TASKS
from tests.models.engine_servers import EngineServer
from tests.models.test_egoplan_server import CHOICES, SPLIT, TASK, TOLERANCE, reference_backends

MC, GEN = "egoplan_backend_probe_mc", "egoplan_backend_probe_gen"


@pytest.fixture(scope="module")
def cli_setup(tiny_model, tmp_path_factory):
    """Probe docs in the backend tests' task format, and one loopback vLLM server for every CLI run."""
    from lmms_egoplan.demo.kit.media import write_image

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


# The POSTs of a vLLM server's load check for the tiny Qwen2-VL: the probe, its log-probability check,
# its media_io_kwargs check (videos go as videos).
LOAD_REQUESTS = 3


def evaluate_through(server: EngineServer | str, data: Path, output: Path, *extra: str, model: str = "tiny",
                     env: dict | None = None, tasks: tuple[str, ...] = (MC, GEN)):
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    where = f"base_url={server.base_url}" if isinstance(server, EngineServer) else server
    return run_lmms_eval(model="egoplan_server", check=False, tasks=list(tasks), output_dir=output,
                         model_args=f"engine=vllm,{where},model={model},"
                                    "max_frames=8,retries=1,backoff=0.01,concurrency=1",
                         include_path=BACKEND_TASKS,
                         env={"BACKEND_PROBE_DATA_FILE": str(data), **(env or {})}, extra_args=list(extra))


def reference_scores(data: Path, reference) -> list[float]:
    """egoplan_hf in this process, on the same docs through the same task functions."""
    sys.path.insert(0, str(BACKEND_TASKS))
    try:
        import backend_task
    finally:
        sys.path.remove(str(BACKEND_TASKS))
    docs = json.loads(data.read_text())
    hf = reference("qwen2_vl")
    hf.task_dict = {TASK: {SPLIT: docs}}
    requests = [Instance(request_type="loglikelihood", idx=i,
                         arguments=(backend_task.doc_to_text(d), " " + c, backend_task.doc_to_visual, doc_id, TASK,
                                    SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, d in enumerate(docs) for i, c in enumerate(CHOICES)]
    return [value for value, _ in hf.loglikelihood(requests)]


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
    server.die_after(LOAD_REQUESTS + 2 * 4)  # the load check, then two questions
    died = evaluate_through(server, data, tmp_path / "died", "--use_cache", str(tmp_path / "cache"))
    assert died.returncode != 0 and died.results is None
    assert "connection failed" in died.log
    server.die_after(None)
    resumed = evaluate_through(server, data, tmp_path / "resumed", "--use_cache", str(tmp_path / "cache"))
    assert resumed.returncode == 0, resumed.log_tail()
    assert "ResponseCache: 8/16 cache hits" in resumed.log  # the two questions scored before the server died
    got = [float(value) for sample in resumed.samples(MC) for value, _ in sample["filtered_resps"]]
    assert got == pytest.approx(reference_scores(data, reference), abs=TOLERANCE)


def test_cli_three_keyed_servers_one_killed_mid_run_complete_the_run(cli_setup, tiny_model, tmp_path, reference):
    """base_urls as lmms-eval's model_args carry it (brackets keep its commas), the key from the variable
    api_key_env names: the second server stops answering after its load check and two requests; its
    question goes to the others, the run completes with egoplan_hf's values, and the key is in no file
    the run wrote nor in its log."""
    data, _ = cli_setup
    key = "sk-e2e-not-in-results-4711"
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(EngineServer("vllm", tiny_model("qwen2_vl"), api_key=key)) for _ in range(3)]
        started[1].die_after(LOAD_REQUESTS + 2)
        run = evaluate_through(f"base_urls=[{','.join(s.base_url for s in started)}],api_key_env=E2E_SERVER_KEY",
                               data, tmp_path, "--log_samples", env={"E2E_SERVER_KEY": key})
        served = [len(server.requests) for server in started]
    assert run.returncode == 0, run.log_tail()
    assert "stopped answering" in run.log and served[1] == LOAD_REQUESTS + 2 and served[0] > LOAD_REQUESTS < served[2]
    got = [float(value) for sample in run.samples(MC) for value, _ in sample["filtered_resps"]]
    assert got == pytest.approx(reference_scores(data, reference), abs=TOLERANCE)
    assert len(run.samples(GEN)) == 4
    assert key not in run.log and not [path for path in tmp_path.rglob("*") if path.is_file()
                                       and key in path.read_text()]
    assert "api_key_env=E2E_SERVER_KEY" in json.dumps(run.results["config"])


def test_cli_an_aborted_reply_is_a_failed_request_asked_again_alone(cli_setup, tmp_path, reference):
    """The server answers each generation HTTP 200 with finish_reason abort and half its text (a router
    draining, SGLang's abort): no answer is scored, every one is a failed request, the run exits 4
    with the command that asks them again; the likelihood task is scored as egoplan_hf scores it.
    Asked again once the server answers whole, only the generations are sent, and the run exits 0."""
    data, server = cli_setup
    server.die_after(None)
    server.reset()
    server.reply_fault = "abort"
    cache = str(tmp_path / "cache")
    try:
        aborted = evaluate_through(server, data, tmp_path / "aborted", "--use_cache", cache)
    finally:
        server.reply_fault = None
    assert aborted.returncode == 4, aborted.log_tail()
    assert aborted.results["results"][GEN]["failed_requests,none"] == 4
    assert "finish_reason 'abort'" in aborted.log
    assert "4 of 4 model requests failed (egoplan_backend_probe_gen 4)" in aborted.log_tail(3)
    got = [float(value) for sample in aborted.samples(MC) for value, _ in sample["filtered_resps"]]
    assert got == pytest.approx(reference_scores(data, reference), abs=TOLERANCE)
    server.reset()
    again = evaluate_through(server, data, tmp_path / "again", "--use_cache", cache)
    assert again.returncode == 0, again.log_tail()
    assert again.results["results"][GEN]["failed_requests,none"] == 0
    assert again.results["results"][GEN]["answered,none"] == 1.0
    generations = [body for path, body in server.requests if body.get("add_generation_prompt", True)]
    assert len(generations) == 4 and len(server.requests) == LOAD_REQUESTS + 4


def test_cli_one_question_failing_on_every_server_is_a_failed_request_not_a_dead_cluster(cli_setup, tiny_model,
                                                                                          tmp_path):
    """Two servers whose processor fails (500) on one question: that question is a failed request
    (exit 4), the other three answered; both servers keep answering to the end."""
    data, _ = cli_setup
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(EngineServer("vllm", tiny_model("qwen2_vl"))) for _ in range(2)]
        for server in started:
            server.fail_on = "case 2"
        run = evaluate_through(f"base_urls=[{','.join(s.base_url for s in started)}]", data, tmp_path, tasks=(GEN,))
    assert run.returncode == 4, run.log_tail()
    assert run.results["results"][GEN]["failed_requests,none"] == 1
    assert run.results["results"][GEN]["answered,none"] == 1.0
    assert "egoplan_backend_probe_gen doc 2 failed on 2 server(s), which still answer" in run.log
    assert "stopped answering" not in run.log
