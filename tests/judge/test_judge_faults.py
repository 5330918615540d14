"""Judge faults against a real loopback server: failed judgements never cached, malformed bodies retried (cut
JSON too), lone surrogates survive, a corrupt cache named, the preflight names what is wrong, a full disk stops the
judging before more is paid for and says what is kept."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.judge.cache import JudgeCache, JudgeCacheError
from lmms_egoplan.judge.engine import Judge, preflight
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.rubrics import bracket_rating
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError

ZERO_HALF_ONE = bracket_rating((0, 0.5, 1))


def judge_for(server: ChatServer, cache_dir: Path | None = None, retries: int = 2) -> Judge:
    backend = OpenAIChatBackend("loopback-judge", base_url=server.base_url, api_key_env="", timeout=10)
    return Judge(backend, cache=JudgeCache(cache_dir) if cache_dir else None, retries=retries, backoff=0.01)


def prompts(n: int, text: str = "Answer {i}") -> list[JudgeRequest]:
    return [JudgeRequest.from_prompt(f"q{i}", text.format(i=i)) for i in range(n)]


@pytest.mark.parametrize("bad", [Reply(""), Reply("Rating: [[7]]"), Reply("I cannot rate this."),
                                 Reply(body='{"choices": [{"index": 0, "message": {"role": "assistant", '
                                            '"content": null}}]}')])
def test_failed_judgements_are_never_cached_so_the_next_run_asks_again(bad, tmp_path):
    state = {"recovered": False}
    with ChatServer(lambda call: rating_responder(lambda _: "1")(call) if state["recovered"] else bad) as server:
        judge = judge_for(server, tmp_path)
        first = judge.run(prompts(3), ZERO_HALF_ONE, progress=False)
        assert first.failed == 3 and len(server.calls) == 3
        state["recovered"] = True
        second = judge.run(prompts(3), ZERO_HALF_ONE, progress=False)
        assert second.judged == 3 and len(server.calls) == 6  # asked again, now rated
        third = judge.run(prompts(3), ZERO_HALF_ONE, progress=False)
        assert third.judged == 3 and third.calls == 0 and len(server.calls) == 6  # good ratings are cached


# A chat completion's JSON cut in the middle of its choices, sent whole (its Content-Length) as JSON.
CUT_COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "loopback-judge",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "Rating: [[1]]"},
                                          "finish_reason": "stop"}]})[:90]


@pytest.mark.parametrize("broken", [Reply(body="<html><body><h1>502 Bad Gateway</h1></body></html>"),
                                    Reply(body=CUT_COMPLETION, headers={"Content-Type": "application/json"})],
                         ids=["html page", "cut JSON"])
def test_a_malformed_200_body_is_retried_like_a_server_error(broken, tmp_path):
    with ChatServer(lambda call: broken if call.attempt == 0 else Reply("Rating: [[0.5]]")) as server:
        results = judge_for(server, tmp_path).run(prompts(2), ZERO_HALF_ONE, progress=False)
    assert results.judged == 2 and [j.rating for j in results.judgements] == [0.5, 0.5]
    assert results.calls == 4
    with ChatServer(lambda call: broken) as server:  # never mended: a failed judgement saying why, after the retries
        failed = judge_for(server, retries=1).run(prompts(1), ZERO_HALF_ONE, progress=False).judgements[0]
    assert not failed.ok and failed.error.startswith("malformed response body")
    assert "gave up after 2 attempts" in failed.error
    assert len(server.calls) == 2


def test_lone_surrogates_in_model_output_survive_cache_key_audit_trail_and_request(tmp_path):
    with ChatServer(rating_responder(lambda call: "1")) as server:
        judge = judge_for(server, tmp_path)
        request = [JudgeRequest.from_prompt("q0", "Answer: Two plates \udcff.")]
        audit = tmp_path / "audit.jsonl"
        results = judge.run(request, ZERO_HALF_ONE, audit_path=audit, progress=False)
        assert results.judged == 1 and server.calls[0].text == "Answer: Two plates \ufffd."
        assert json.loads(audit.read_text())["prompt"][0]["content"] == "Answer: Two plates \ufffd."
        assert judge.run(request, ZERO_HALF_ONE, progress=False).calls == 0  # cached under its key


def test_a_corrupt_judge_cache_is_an_error_naming_its_path(tmp_path):
    (tmp_path / JudgeCache.FILE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(JudgeSetupError, match=rf"judge cache {tmp_path / JudgeCache.FILE_NAME} is not a readable"):
        JudgeCache(tmp_path)


def test_nothing_judged_writes_no_audit_file(tmp_path):
    with ChatServer(rating_responder(lambda call: "1")) as server:
        judge_for(server).run([], ZERO_HALF_ONE, audit_path=tmp_path / "audit.jsonl", progress=False)
    assert not (tmp_path / "audit.jsonl").exists()


def preflight_settings(server_url: str, cache_dir: Path, **overrides) -> JudgeSettings:
    return JudgeSettings(judge_base_url=server_url, judge_model="loopback-judge", judge_api_key_env="",
                         judge_cache_dir=cache_dir, **overrides)


def test_the_preflight_names_an_unreachable_server_an_unknown_model_a_refused_key_and_a_corrupt_cache(tmp_path):
    with ChatServer(rating_responder(lambda call: "1")) as server:
        preflight(preflight_settings(server.base_url, tmp_path))  # a judge that answers
        assert server.preflight_calls == 1 and server.calls == []
    with pytest.raises(JudgeSetupError, match=r"did not answer a test request: connection failed"):
        preflight(preflight_settings(server.base_url, tmp_path))  # the server is gone
    for status, text in ((404, "The model `loopback-judge` does not exist"), (401, "Incorrect API key provided")):
        with ChatServer(lambda call: Reply(text, status=status), answer_preflight=False) as server:
            with pytest.raises(JudgeSetupError, match=rf"did not answer a test request: HTTP {status}: {text}"):
                preflight(preflight_settings(server.base_url, tmp_path))
    # A base URL without /v1, answered as vLLM answers a path it has no route for: the reply names neither.
    no_route = Reply(status=404, body='{"detail":"Not Found"}', headers={"Content-Type": "application/json"})
    with ChatServer(lambda call: no_route, answer_preflight=False) as server:
        without_v1 = server.base_url.removesuffix("/v1")
        with pytest.raises(JudgeSetupError, match=re.escape(
                f"did not answer a test request: HTTP 404: Error code: 404 (POST {without_v1}/chat/completions: no "
                "such route on this server; an OpenAI-compatible server's routes are under /v1: a base URL such as "
                "http://localhost:8000/v1)")):
            preflight(preflight_settings(without_v1, tmp_path))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / JudgeCache.FILE_NAME).write_bytes(b"garbage" * 500)
    with pytest.raises(JudgeSetupError, match="is not a readable SQLite database"):
        preflight(preflight_settings("http://127.0.0.1:9/v1", tmp_path / "broken"))


def test_a_judge_cache_on_a_full_disk_is_called_full_and_its_answers_are_kept(small_disk):
    disk = small_disk()
    with ChatServer(rating_responder(lambda call: "1")) as server:
        judge = judge_for(server, disk.path / "cache")
        assert judge.run(prompts(24), ZERO_HALF_ONE, progress=False).judged == 24
        judge.cache.close()
        disk.fill()
        with pytest.raises(JudgeCacheError) as full:
            JudgeCache(disk.path / "cache")
        assert str(full.value).startswith(f"the judge cache {disk.path / 'cache' / JudgeCache.FILE_NAME} cannot store "
                                          f"answers: the disk is full (")
        assert "intact and kept" in str(full.value) and "move it away" not in str(full.value)
        with pytest.raises(JudgeSetupError, match="the disk is full"):
            preflight(preflight_settings(server.base_url, disk.path / "cache"))
        disk.free()
        again = judge_for(server, disk.path / "cache").run(prompts(24), ZERO_HALF_ONE, progress=False)
    assert again.judged == 24 and again.calls == 0  # every answer read back: nothing paid twice


def test_a_judge_cache_that_fills_stops_the_judging_saying_how_many_answers_were_not_stored(small_disk, tmp_path):
    """The disk fills at the 5th call: the call in flight ends, nothing more is asked, the error says how
    many answers were not stored and where; once space is freed the next run asks only for those."""
    disk, filled = small_disk(), []

    def answer(call):
        if len(server.calls) == 5 and not filled:
            filled.append(disk.fill())
        return Reply("Rating: [[1]]")

    with ChatServer(answer) as server:
        judge = judge_for(server, disk.path / "cache")
        judge.concurrency = 2
        with pytest.raises(StorageError) as stopped:
            judge.run(prompts(30), ZERO_HALF_ONE, progress=False, audit_path=tmp_path / "audit.jsonl")
        asked, stored = len(server.calls), len(judge.cache)
        # none asked after the first answer that could not be stored but the call then in flight (2 at a time)
        assert 3 <= stored < asked <= stored + 2
        assert str(stopped.value).startswith(f"the judge cache {judge.cache.path} could not store {asked - stored} of "
                                             f"the {asked} answers received (the disk is full (")
        assert f"Judging stopped before asking for the {30 - asked} judgements left" in str(stopped.value)
        assert len([json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]) == asked
        disk.free()
        server.reset()
        assert judge.run(prompts(30), ZERO_HALF_ONE, progress=False).judged == 30
    assert len(server.calls) == 30 - stored  # those stored are read back


def test_an_audit_trail_on_a_full_disk_stops_the_judging_and_keeps_its_lines_whole(small_disk, tmp_path):
    """Room for one audit line of 7 kB: the second is cut back off, the call then in flight ends and
    nothing more is asked; every answer received is in the cache (elsewhere)."""
    disk = small_disk()
    trail = disk.path / "20260101_000000_judgements_task.jsonl"
    disk.fill(leave=8192)
    with ChatServer(rating_responder(lambda call: "1", delay=0.1)) as server:
        judge = judge_for(server, tmp_path / "cache")
        judge.concurrency = 1
        with pytest.raises(StorageError) as stopped:
            judge.run(prompts(30, text="A long answer to judge, number {i}. " * 200), ZERO_HALF_ONE, progress=False,
                      audit_path=trail)
    asked = len(server.calls)
    assert str(stopped.value).startswith(f"cannot write {trail}: the disk is full")
    assert asked == 3 and len(judge.cache) == 3  # the second line met the full disk while the third call was out
    assert "the answers it stored (3 of this run's) are kept in the judge cache" in str(stopped.value)
    assert [json.loads(line)["id"] for line in trail.read_text().splitlines()] == ["q0"]  # whole lines only


def test_a_judge_that_stops_answering_is_waited_for_once_not_per_batch():
    with ChatServer(rating_responder(lambda call: "1")) as server:
        base_url = server.base_url
    # The server is gone (its port closed): the first batch spends one call's retries, then nothing more is asked.
    backend = OpenAIChatBackend("loopback-judge", base_url=base_url, api_key_env="", timeout=10)
    judge = Judge(backend, retries=3, backoff=0.05, concurrency=4)
    calls = []
    complete = backend.complete
    backend.complete = lambda messages, decoding: (calls.append(messages), complete(messages, decoding))[1]
    first = judge.run(prompts(12), ZERO_HALF_ONE, progress=False)
    assert first.failed == 12 and "connection failed" in judge.stopped_answering
    assert judge.stopped_answering.startswith("the judge openai:loopback-judge stopped answering")
    assert len(calls) <= judge.concurrency * (judge.retries + 1)  # the calls in flight, each at most its retries
    asked = len(calls)
    second = judge.run(prompts(5, "Second {i}"), ZERO_HALF_ONE, progress=False)
    assert second.failed == 5 and len(calls) == asked  # a later batch (another task) waits for nothing
    assert all(j.error.startswith("not asked: the judge openai:loopback-judge stopped answering")
               for j in second.judgements)


def test_a_judge_that_answers_after_failures_is_not_taken_for_silent(tmp_path):
    with ChatServer(lambda call: Reply("Rating: [[1]]") if call.attempt >= 2 else Reply("busy", status=503)) as server:
        judge = judge_for(server, retries=3)
        assert judge.run(prompts(3), ZERO_HALF_ONE, progress=False).judged == 3
        assert judge.stopped_answering is None
