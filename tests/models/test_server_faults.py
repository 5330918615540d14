"""egoplan_server against loopback servers that misbehave as cluster nodes do: a reply that is no whole
answer (aborted, null, empty, split by a reasoning parser), a scored log-probability missing or NaN,
one question the server fails (500), a hung node, a server that starts late or comes back after a
drop; and the pool's concurrency per live server. Each server bounded in time, on 127.0.0.1 only."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from lmms_egoplan.core.failed_requests import failed_request
from lmms_egoplan.models import egoplan_server, engines
from lmms_egoplan.models.engines import (
    IncompleteReplyError,
    QuestionFailedError,
    ServerNotAnsweringError,
    ServerPool,
    ServerSetupError,
    ServerUnavailableError,
    VLLMEngine,
)
from lmms_egoplan.models.likelihood import PromptAlignmentError
from tests.models.engine_servers import EngineServer
from tests.models.test_egoplan_server import assert_same_scores, doc, gen_requests, mc_requests, server_backend

ARCH = "llama"  # text only: the faults are the engines', not the visuals'


def text_docs(*seeds: int) -> list[dict]:
    return [doc(seed, video=False, observation=False) for seed in seeds]


@pytest.fixture(scope="module")
def reference(tiny_model):
    from tests.models.test_egoplan_server import reference_backends

    return reference_backends(tiny_model)


@pytest.fixture
def started(tiny_model):
    """``started(engine, count)``: that many loopback servers of the tiny Llama, closed after the test."""
    servers: list[EngineServer] = []

    def start(engine: str, count: int = 1) -> list[EngineServer]:
        new = [EngineServer(engine, tiny_model(ARCH)).start() for _ in range(count)]
        servers.extend(new)
        return new

    yield start
    for server in servers:
        server.close()


def several(servers: list[EngineServer], **model_args) -> egoplan_server.EgoPlanServer:
    return egoplan_server.EgoPlanServer(engine=servers[0].engine, base_urls=[s.base_url for s in servers],
                                        model="tiny", **{"retries": 0, "backoff": 0.01, "concurrency": 2,
                                                         **model_args})


# ---------------------------------------------------------------------------------------------
# Replies that are no whole answer
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine,fault,reason", [("vllm", "abort", "'abort'"), ("vllm", "null", "no content"),
                                                 ("vllm", "empty", "'length'"), ("sglang", "abort", "Abort request"),
                                                 ("sglang", "empty", "'length'")])
def test_a_reply_that_is_no_whole_answer_is_a_failed_request(engine, fault, reason, started, reference):
    """HTTP 200 with finish_reason abort and the text cut, vLLM's null content, an empty reply cut by
    length: lmms-eval's failure placeholder, which the suite counts as a failed request (and the
    response cache never keeps), tried once on the other server; never the model's answer."""
    servers = started(engine, 2)
    backend = several(servers)
    for server in servers:
        server.reply_fault = fault
    handed = []
    backend.response_sink = lambda request, response: handed.append(response)
    got = backend.generate_until(gen_requests(backend, text_docs(1, 2)))
    for answer in got:
        why = failed_request(answer, "egoplan_server")
        assert why is not None and reason in why and "probe doc" in why and "2 server(s)" in why
    assert sorted(handed) == sorted(got)
    # Answered again as the model answers once the servers give whole replies.
    for server in servers:
        server.reply_fault = None
    hf = reference(ARCH)
    assert backend.generate_until(gen_requests(backend, text_docs(1, 2))) == \
        hf.generate_until(gen_requests(hf, text_docs(1, 2)))


def test_an_empty_reply_the_model_stopped_itself_is_its_answer():
    engine = VLLMEngine(SimpleNamespace(base_url="http://127.0.0.1:1"), "tiny", concurrency=1)
    assert engine.whole_answer("", "stop", "probe doc 0") == ""
    assert engine.whole_answer("Open it", "length", "probe doc 0") == "Open it"
    with pytest.raises(IncompleteReplyError, match=r"probe doc 0 \(finish_reason 'error', 3 characters\)"):
        engine.whole_answer("Ope", "error", "probe doc 0")


def test_a_reasoning_parser_that_splits_the_reply_is_refused_naming_the_flag(started):
    [server] = started("vllm")
    backend = server_backend(server)
    server.reply_fault = "reasoning"
    with pytest.raises(ServerSetupError, match="splits the model's output for probe doc 0 into reasoning.*"
                                               "start it without --reasoning-parser"):
        backend.generate_until(gen_requests(backend, text_docs(1)))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_nan_log_probability_is_an_error_naming_the_question_never_a_ranking(engine, started):
    [server] = started(engine)
    backend = server_backend(server)
    server.nan_logprobs = True
    with pytest.raises(ValueError, match="log-probability nan for position .* of probe doc 0, a scored token"):
        backend.loglikelihood(mc_requests(backend, text_docs(3)))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_cut_logprob_list_is_a_named_alignment_error(engine, started):
    [server] = started(engine)
    backend = server_backend(server)
    server.truncate_logprobs = 3
    with pytest.raises(PromptAlignmentError,
                       match="probe doc 0: the .* server returned 3 prompt log-probabilities .*cut short"):
        backend.loglikelihood(mc_requests(backend, text_docs(3)))


# ---------------------------------------------------------------------------------------------
# Failover: a bad question is not a dead server
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_one_question_that_fails_with_500_everywhere_is_a_failed_request_not_a_dead_cluster(engine, started,
                                                                                               reference):
    """The question of case 7 makes every server's processor fail (500): generation hands over the
    failure placeholder for it and the others' answers; likelihood scores the others, hands them
    over, then names the question; both servers stay in."""
    servers = started(engine, 2)
    backend = several(servers, retries=1)
    for server in servers:
        server.fail_on = "case 7"
    docs = text_docs(6, 7, 8)
    hf = reference(ARCH)
    got = backend.generate_until(gen_requests(backend, docs))
    expected = hf.generate_until(gen_requests(hf, docs))
    assert [got[0], got[2]] == [expected[0], expected[2]]
    assert "probe doc 1 failed on 2 server(s), which still answer" in failed_request(got[1], "egoplan_server")
    handed = []
    backend.response_sink = lambda request, response: handed.append(request.doc_id)
    with pytest.raises(QuestionFailedError, match=r"1 of 3 questions failed .*: probe doc 1 .*--use_cache"):
        backend.loglikelihood(mc_requests(backend, docs))
    assert sorted(handed) == [0] * 4 + [2] * 4
    assert backend.servers._live == backend.servers.engines


def test_a_hung_server_is_dropped_after_one_read_timeout_and_its_failed_health_probe(started, reference,
                                                                                     monkeypatch):
    """One of two servers hangs (every request, its health probe too): after one read timeout the
    probe fails, it is dropped without a retry, and every question is scored on the other."""
    monkeypatch.setattr(engines, "HEALTH_TIMEOUT_S", 0.5)
    servers = started("vllm", 2)
    backend = several(servers, retries=3, timeout=1.0, concurrency=1)
    servers[0].hang = 3.0
    docs = text_docs(10, 11, 12)
    began = time.monotonic()
    got = backend.loglikelihood(mc_requests(backend, docs))
    assert time.monotonic() - began < 20
    hf = reference(ARCH)
    assert_same_scores(got, hf.loglikelihood(mc_requests(hf, docs)), len(docs))
    assert backend.servers._live == [backend.servers.engines[1]]
    servers[0].hang = 0.0


def test_a_dropped_server_is_probed_again_after_the_cool_down_and_takes_questions_again(started):
    servers = started("vllm", 2)
    backend = several(servers, recheck_after=0.0, concurrency=1)
    servers[0].die_after(0)
    backend.loglikelihood(mc_requests(backend, text_docs(13)))
    assert backend.servers._live == [backend.servers.engines[1]]
    servers[0].die_after(None)
    servers[0].reset()
    backend.loglikelihood(mc_requests(backend, text_docs(14, 15)))
    assert set(backend.servers._live) == set(backend.servers.engines) and servers[0].requests


def test_a_server_that_starts_late_is_waited_for_where_wait_for_servers_says_so(started, monkeypatch):
    monkeypatch.setattr(egoplan_server, "SERVER_WAIT_INTERVAL_S", 0.2)
    [server] = started("vllm")
    server.starting = True
    with pytest.raises(ServerNotAnsweringError, match="HTTP 503.*wait_for_servers=<seconds>"):
        server_backend(server)
    threading.Timer(1.0, lambda: setattr(server, "starting", False)).start()
    backend = server_backend(server, wait_for_servers=15)
    assert backend.loglikelihood(mc_requests(backend, text_docs(16)))


class _Engine:
    """A stand-in server for the pool's bookkeeping: ``healthy`` answers its probe."""

    def __init__(self, name: str, healthy: bool = True):
        self.client = SimpleNamespace(base_url=name, healthy=lambda: healthy)


def test_concurrency_stays_per_live_server_after_a_drop():
    """Two servers, concurrency 2: once one fails its health probe, the other never has more than
    2 calls in flight, where 16 callers wait."""
    dead, live = _Engine("dead", healthy=False), _Engine("live")
    pool = ServerPool([dead, live], concurrency=2, recheck_after=3600)
    in_flight, most, lock = {"live": 0}, [0], threading.Lock()

    def work(engine):
        if engine is dead:
            raise ServerUnavailableError("connection failed")
        with lock:
            in_flight["live"] += 1
            most[0] = max(most[0], in_flight["live"])
        time.sleep(0.02)
        with lock:
            in_flight["live"] -= 1
        return engine.client.base_url

    results = []
    callers = [threading.Thread(target=lambda: results.append(pool.run(work, "q"))) for _ in range(16)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=30)
    assert results == ["live"] * 16 and most[0] == 2 and pool._live == [live]


# ---------------------------------------------------------------------------------------------
# The prompt the server ran
# ---------------------------------------------------------------------------------------------


def test_a_server_that_moves_images_before_the_text_is_caught_before_anything_is_scored(tiny_model, reference):
    """vLLM reading a template's content format as string moves each turn's images before its text:
    ActPlan-1K's text-first question then reaches the model reordered. Likelihood and generation
    stop at the first such prompt, naming where the prompts part and the flag; nothing handed over."""
    from lmms_egoplan.core.request_options import INPUT_ORDER, TEXT_FIRST
    from lmms_egoplan.models.prompt_check import PromptMismatchError

    with EngineServer("vllm", tiny_model("qwen2_vl")) as server:
        backend = server_backend(server)
        server.images_first = True
        handed = []
        backend.response_sink = lambda request, response: handed.append(response)
        docs = [doc(20, video=False)]
        with pytest.raises(PromptMismatchError, match=r"ran another prompt than the suite's for probe doc 0: they "
                                                      r"differ from character \d+ .*text_first.*"
                                                      r"--chat-template-content-format openai"):
            backend.loglikelihood(mc_requests(backend, docs, input_order=TEXT_FIRST))
        generation = gen_requests(backend, docs)
        INPUT_ORDER.mark(generation, TEXT_FIRST)
        with pytest.raises(PromptMismatchError, match="--chat-template-content-format openai"):
            backend.generate_until(generation)
        assert handed == []
        # The images-first order the server imposes is the suite's own default: scored as egoplan_hf.
        hf = reference("qwen2_vl")
        assert_same_scores(backend.loglikelihood(mc_requests(backend, docs)),
                           hf.loglikelihood(mc_requests(hf, docs)), len(docs))


def test_the_first_difference_skips_each_visual_expansion_and_names_the_first_text_that_differs():
    from lmms_egoplan.models.prompt_check import UNREPORTED, first_difference

    image = 9
    suite = [1, 2, 3, 4, image, 5, 6, 7, 11, 12, image, 8, 10]
    expanded = [1, 2, 3, 4, image, image, image, 5, 6, 7, 11, 12, 40, image, 41, 8, 10]  # markers in an expansion
    assert first_difference(expanded, suite, frozenset({image})) is None
    assert first_difference([UNREPORTED] * 3 + expanded[3:], suite, frozenset({image})) is None
    # The image moved before the text (one token on each side of a placeholder may change).
    assert first_difference([1, 2, image, image, 3, 4, 5, 6, 7, 11, 12, image, 8, 10], suite,
                            frozenset({image})) == (2, 2)
    assert first_difference([1, 2, 3, 4, image, 5, 7, 6, 11, 12, image, 8, 10], suite, frozenset({image})) == (6, None)
    assert first_difference([1, 2, 3, 4, image, 5, 6, 7, 11, 12, image, 8, 0], suite, frozenset({image})) == (12, 12)
    assert first_difference([0, 1, 2, 3], [1, 2, 3], frozenset()) == (0, 0)
    assert first_difference([1, 2, 3], [1, 2, 3], frozenset()) is None


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_server_that_adds_a_bos_to_a_prompt_with_images_is_named_with_the_cause(engine, tiny_model, monkeypatch):
    """The server's tokenizer adds a BOS the suite's prompt does not hold (SGLang tokenizes a prompt with
    images itself): named with the cause, a BOS."""
    from lmms_egoplan.models.prompt_check import PromptMismatchError

    arch = "llava"  # a Llama tokenizer with a BOS
    with EngineServer(engine, tiny_model(arch)) as server:
        backend = server_backend(server)
        bos = backend.tokenizer.bos_token_id
        original = server.model.encode

        def with_a_second_bos(text, **kwargs):
            inputs = original(text, **kwargs)
            import torch
            ids = inputs["input_ids"]
            inputs["input_ids"] = torch.cat([torch.tensor([[bos]]), ids], dim=1)
            inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
            return inputs

        monkeypatch.setattr(server.model, "encode", with_a_second_bos)
        with pytest.raises(PromptMismatchError, match=r"from character \d+ .*likely cause: the server adds a BOS "
                                                      r".*\(2 BOS where the suite has 1"):
            backend.generate_until(gen_requests(backend, [doc(21, video=False)]))


# ---------------------------------------------------------------------------------------------
# Servers checked at load
# ---------------------------------------------------------------------------------------------


def test_an_sglang_server_running_multi_item_scoring_is_named_at_load(tiny_model):
    with EngineServer("sglang", tiny_model(ARCH), enable_mis=True) as server:
        with pytest.raises(ServerSetupError, match="runs multi-item scoring \\(--enable-mis.*start the server without"):
            server_backend(server)


def test_servers_that_load_the_model_from_other_folders_or_score_it_otherwise_are_named(started, monkeypatch):
    from lmms_egoplan.core.settings import SettingsError

    servers = started("vllm", 2)
    servers[1].logprob_offset = -0.5
    with pytest.raises(SettingsError, match="give the load probe's answer log-probabilities 0.5 apart"):
        several(servers)
    servers[1].logprob_offset = 0.0
    listing = servers[1].models()
    listing["data"][0]["root"] = "/models/another"
    monkeypatch.setattr(servers[1], "models", lambda: listing)
    with pytest.raises(SettingsError, match="serve the model from different folders .*'/models/another'"):
        several(servers)
