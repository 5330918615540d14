"""Judge faults against a real loopback server: failed judgements never cached, malformed bodies retried, lone surrogates survive, a corrupt cache named, the preflight names what is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmms_egoplan.fixtures.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.judge import (
    Judge,
    JudgeCache,
    JudgeRequest,
    JudgeSettings,
    JudgeSetupError,
    OpenAIChatBackend,
    bracket_rating,
    preflight,
)

ZERO_HALF_ONE = bracket_rating((0, 0.5, 1))


def judge_for(server: ChatServer, cache_dir: Path | None = None, retries: int = 2) -> Judge:
    backend = OpenAIChatBackend("loopback-judge", base_url=server.base_url, api_key_env="", timeout=10)
    return Judge(backend, cache=JudgeCache(cache_dir) if cache_dir else None, retries=retries, backoff=0.01)


def prompts(n: int, text: str = "Answer {i}") -> list[JudgeRequest]:
    return [JudgeRequest.from_prompt(f"q{i}", text.format(i=i)) for i in range(n)]


@pytest.mark.parametrize("bad", [Reply(""), Reply("Rating: [[7]]"), Reply("I cannot rate this."),
                                 Reply(body='{"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]}')])
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
CUT_COMPLETION = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "loopback-judge", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "Rating: [[1]]"}, "finish_reason": "stop"}]})[:90]


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
    assert not failed.ok and failed.error.startswith("malformed response body") and "gave up after 2 attempts" in failed.error
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
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / JudgeCache.FILE_NAME).write_bytes(b"garbage" * 500)
    with pytest.raises(JudgeSetupError, match="is not a readable SQLite database"):
        preflight(preflight_settings("http://127.0.0.1:9/v1", tmp_path / "broken"))
