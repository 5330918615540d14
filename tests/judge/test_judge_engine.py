"""The judge engine against a real loopback chat-completions server (and a tiny offline HF judge)."""
import dataclasses
import json
import math
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
from loguru import logger

from lmms_egoplan import suite
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, fail_first, hang, hash_rating, rating_responder
from lmms_egoplan.judge.cache import JudgeCache
from lmms_egoplan.judge.engine import Judge
from lmms_egoplan.judge.protocol import Completion, Decoding, JudgeRequest
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.providers.transformers import TransformersBackend
from lmms_egoplan.judge.rubrics import bracket_rating, judge_parts_item, score_judged
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError
from tests.fixtures import LOGS_BEFORE_RUBRIC_NAMES

ZERO_HALF_ONE = bracket_rating((0, 0.5, 1))
SECRET = "sk-loopback-SECRET-9f3b7c1e"


def requests(n, prefix="q"):
    return [JudgeRequest.from_prompt(f"{prefix}{i}", f"Question {prefix}{i}? Reference: r{i}. Answer: a{i}.",
                                     system="You are a helpful assistant.") for i in range(n)]


def judge_for(server, *, cache_dir=None, model="loopback-judge", concurrency=8, retries=3, backoff=0.01,
              timeout=10.0, decoding=Decoding(), revision=None):
    backend = OpenAIChatBackend(model, base_url=server.base_url, api_key_env="", timeout=timeout)
    return Judge(backend, cache=JudgeCache(cache_dir) if cache_dir else None, concurrency=concurrency,
                 retries=retries, backoff=backoff, decoding=decoding, revision=revision)


def mean_rating(results):
    """The mean rating a judged metric reports for ``results`` (EgoThink's rubric: 0 / 0.5 / 1, x 100)."""
    items = [judge_parts_item({"": JudgeRequest(j.id, j.messages)}, "egothink")
             for j in results.judgements]
    return score_judged(items, {j.id: j for j in results.judgements}, suite.rubrics(),
                        judge_model=results.judge_model).score / 100


def expected_rating(request):
    """What `hash_rating` answers for this request (it rates the user message)."""
    from lmms_egoplan.demo.kit.judge_server import ChatCall

    call = ChatCall("/v1/chat/completions", {"messages": [dict(m) for m in request.messages]}, {}, 0, 0.0)
    return float(hash_rating(call))


@pytest.fixture
def warnings_logged():
    messages = []
    sink = logger.add(lambda message: messages.append(str(message)), level="WARNING")
    yield messages
    logger.remove(sink)


def test_judgements_run_concurrently_up_to_the_limit_and_keep_request_order():
    batch = requests(40)
    with ChatServer(rating_responder(hash_rating, delay=0.1)) as server:
        results = judge_for(server, concurrency=8).run(batch, ZERO_HALF_ONE, progress=False)
    assert server.max_in_flight == 8
    assert len(server.calls) == 40
    assert [j.id for j in results.judgements] == [r.id for r in batch]
    assert [j.rating for j in results.judgements] == [expected_rating(r) for r in batch]
    assert (results.judged, results.failed) == (40, 0)
    assert mean_rating(results) == pytest.approx(sum(map(expected_rating, batch)) / 40)
    # The judge sees exactly the request's messages.
    sent = {call.messages[-1]["content"] for call in server.calls}
    assert sent == {r.messages[-1]["content"] for r in batch}


@pytest.mark.parametrize("status", [429, 500, 503])
def test_rate_limits_and_server_errors_are_retried_with_exponential_backoff(status):
    batch = requests(4)
    with ChatServer(fail_first(status, rating_responder(hash_rating), times=2)) as server:
        results = judge_for(server, backoff=0.1).run(batch, ZERO_HALF_ONE, progress=False)
    assert (results.judged, results.failed) == (4, 0)
    assert [j.attempts for j in results.judgements] == [3] * 4
    assert len(server.calls) == 12
    for request in batch:
        times = [c.received for c in server.calls if c.text == request.messages[-1]["content"]]
        # Waits of backoff x [0.5, 1] then 2 x backoff x [0.5, 1]: the second is at least the first's bound doubled.
        assert times[1] - times[0] >= 0.05 and times[2] - times[1] >= 0.1


def test_a_client_error_is_not_retried(warnings_logged):
    with ChatServer(lambda call: Reply("model does not exist", status=404)) as server:
        results = judge_for(server).run(requests(3), ZERO_HALF_ONE, progress=False)
    assert (results.judged, results.failed, len(server.calls)) == (0, 3, 3)
    assert all(j.error == "HTTP 404: model does not exist" and j.raw_output is None for j in results.judgements)


def test_timeouts_are_retried_then_counted_as_failed(warnings_logged):
    with ChatServer(hang(10)) as server:
        started = time.monotonic()
        results = judge_for(server, timeout=0.3, retries=1).run(requests(3), ZERO_HALF_ONE, progress=False)
        elapsed = time.monotonic() - started
    assert (results.judged, results.failed) == (0, 3)
    assert len(server.calls) == 6  # first attempt + one retry each
    assert all(j.error == "timed out (gave up after 2 attempts)" for j in results.judgements)
    assert elapsed < 3
    assert "3 of 3 judgements failed (100.0%)" in warnings_logged[-1]


def test_answers_without_a_valid_rating_are_failed_excluded_from_the_mean_and_warned(warnings_logged, tmp_path):
    def responder(call):
        number = int(call.text.split("?")[0].split("q")[-1])
        if number % 4 == 0:
            return Reply("I cannot rate this.")
        if number % 4 == 1:
            return Reply("Rating: [[7]]")  # another scale: not a valid rating here
        return Reply("Rating: [[1]]" if number % 2 else "Rating: [[0.5]]")

    with ChatServer(responder) as server:
        results = judge_for(server).run(requests(8), ZERO_HALF_ONE, audit_path=tmp_path / "audit.jsonl",
                                        progress=False)
    assert (results.judged, results.failed) == (4, 4)
    assert [j.rating for j in results.judgements if j.ok] == [0.5, 1.0, 0.5, 1.0]
    assert mean_rating(results) == 0.75
    errors = {j.id: j.error for j in results.judgements if not j.ok}
    assert errors == {"q0": "no [[rating]] in the judge output", "q4": "no [[rating]] in the judge output",
                      "q1": "rating 7 is not one of 0, 0.5, 1", "q5": "rating 7 is not one of 0, 0.5, 1"}
    assert "4 of 8 judgements failed (50.0%) and are excluded from the score" in warnings_logged[-1]
    assert str(tmp_path / "audit.jsonl") in warnings_logged[-1]


def test_a_broken_rating_parser_fails_judgements_instead_of_the_run(warnings_logged):
    with ChatServer(rating_responder(hash_rating)) as server:
        results = judge_for(server).run(requests(2), lambda text: text.no_such_method(), progress=False)
    assert results.failed == 2 and all(j.raw_output for j in results.judgements)
    assert results.judgements[0].error.startswith("the rating parser failed: AttributeError")


def test_nothing_judged_gives_nan_not_zero():
    with ChatServer(lambda call: Reply("no idea")) as server:
        results = judge_for(server).run(requests(2), ZERO_HALF_ONE, progress=False)
    assert results.judged == 0 and mean_rating(results) != mean_rating(results)


def test_audit_trail_records_prompt_raw_output_rating_and_judge_model(tmp_path):
    import json

    batch = requests(5)
    # The server answers "judge-v1" requests with a dated snapshot, as OpenAI does for its aliases.

    def snapshot(call):
        return dataclasses.replace(rating_responder(hash_rating)(call), model="judge-v1-2024-06-13")
    with ChatServer(snapshot) as server:
        results = judge_for(server, model="judge-v1", cache_dir=tmp_path / "cache").run(
            batch, ZERO_HALF_ONE, audit_path=tmp_path / "a" / "audit.jsonl", progress=False)
        cached = judge_for(server, model="judge-v1", cache_dir=tmp_path / "cache").run(batch, ZERO_HALF_ONE,
                                                                                       progress=False)
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "a" / "audit.jsonl").read_text().splitlines())}
    assert records.keys() == {r.id for r in batch}
    for request in batch:
        record = records[request.id]
        assert record["prompt"] == [dict(m) for m in request.messages]
        assert record["judge_model"] == "openai:judge-v1"
        assert record["served_model"] == "judge-v1-2024-06-13"
        assert record["raw_output"].endswith(f"Rating: [[{hash_rating_text(request)}]]")
        assert record["rating"] == expected_rating(request) and record["error"] is None
    # An answer read back from the cache keeps the model that gave it.
    assert all(j.cached for j in cached.judgements)
    assert [j.served_model for j in cached.judgements] == [j.served_model for j in results.judgements]


def hash_rating_text(request):
    rating = expected_rating(request)
    return "0.5" if rating == 0.5 else str(int(rating))


def test_rerun_makes_zero_calls_and_the_cache_key_covers_model_prompt_and_decoding(tmp_path):
    batch = requests(10)
    with ChatServer(rating_responder(hash_rating)) as server:
        first = judge_for(server, cache_dir=tmp_path).run(batch, ZERO_HALF_ONE, progress=False)
        assert len(server.calls) == 10 and first.calls == 10
        server.reset()
        again = judge_for(server, cache_dir=tmp_path).run(batch, ZERO_HALF_ONE, progress=False)
        assert len(server.calls) == 0 and again.calls == 0
        assert all(j.cached for j in again.judgements)
        assert [j.rating for j in again.judgements] == [j.rating for j in first.judgements]
        # Another decoding setting, another judge model or another prompt is a new judgement.
        judge_for(server, cache_dir=tmp_path, decoding=Decoding(max_tokens=16)).run(batch, ZERO_HALF_ONE,
                                                                                    progress=False)
        assert len(server.calls) == 10
        judge_for(server, cache_dir=tmp_path, model="other-judge").run(batch, ZERO_HALF_ONE, progress=False)
        assert len(server.calls) == 20
        judge_for(server, cache_dir=tmp_path).run(requests(10, prefix="p"), ZERO_HALF_ONE, progress=False)
        assert len(server.calls) == 30


def test_a_judge_of_other_weights_never_reads_another_revisions_answers_and_a_moved_server_reads_its_own(tmp_path):
    """judge_revision is part of the key where set; answers a cache holds from before revisions were keyed (their
    revision unknown) stay served; the server's URL is no part of the key."""
    with ChatServer(rating_responder(hash_rating)) as server, ChatServer(rating_responder(hash_rating)) as moved:
        judge_for(server, cache_dir=tmp_path).run(requests(10), ZERO_HALF_ONE, progress=False)  # keyed as before
        assert judge_for(server, cache_dir=tmp_path, revision="a").run(requests(10), ZERO_HALF_ONE,
                                                                       progress=False).calls == 0
        later = requests(10, prefix="p")
        assert judge_for(server, cache_dir=tmp_path, revision="a").run(later, ZERO_HALF_ONE, progress=False).calls == 10
        assert judge_for(server, cache_dir=tmp_path, revision="b").run(later, ZERO_HALF_ONE, progress=False).calls == 10
        assert judge_for(moved, cache_dir=tmp_path, revision="a").run(later, ZERO_HALF_ONE, progress=False).calls == 0
    assert len(server.calls) == 10 + 10 + 10 and moved.calls == []


def test_failed_calls_are_not_cached_so_a_rerun_retries_them(tmp_path):
    with ChatServer(lambda call: Reply(status=500) if call.attempt < 2 else Reply("Rating: [[1]]")) as server:
        failed = judge_for(server, cache_dir=tmp_path, retries=0).run(requests(3), ZERO_HALF_ONE, progress=False)
        assert failed.failed == 3
        retried = judge_for(server, cache_dir=tmp_path, retries=1).run(requests(3), ZERO_HALF_ONE, progress=False)
    assert retried.judged == 3 and retried.calls == 6


def test_identical_prompts_are_judged_once():
    twins = [JudgeRequest.from_prompt("a", "same prompt"), JudgeRequest.from_prompt("b", "same prompt")]
    with ChatServer(rating_responder(lambda call: "1")) as server:
        results = judge_for(server).run(twins, ZERO_HALF_ONE, progress=False)
    assert len(server.calls) == 1
    assert [j.rating for j in results.judgements] == [1.0, 1.0]


RESUMABLE_RUN = textwrap.dedent("""
    import sys
    from lmms_egoplan.judge.cache import JudgeCache
    from lmms_egoplan.judge.engine import Judge
    from lmms_egoplan.judge.protocol import JudgeRequest
    from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
    from lmms_egoplan.judge.rubrics import bracket_rating
    base_url, cache_dir = sys.argv[1:]
    batch = [JudgeRequest.from_prompt(f"q{i}", f"Question q{i}?") for i in range(40)]
    judge = Judge(OpenAIChatBackend("loopback-judge", base_url=base_url, api_key_env=""),
                  cache=JudgeCache(cache_dir), concurrency=4)
    judge.run(batch, bracket_rating((0, 0.5, 1)), progress=False)
""")


def test_a_run_killed_half_way_resumes_and_judges_only_what_is_missing(tmp_path):
    batch = [JudgeRequest.from_prompt(f"q{i}", f"Question q{i}?") for i in range(40)]
    with ChatServer(rating_responder(hash_rating, delay=0.1)) as server:
        child = subprocess.Popen([sys.executable, "-c", RESUMABLE_RUN, server.base_url, str(tmp_path)])
        deadline = time.monotonic() + 120
        while len(server.calls) < 16 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        stored = len(JudgeCache(tmp_path))
        assert 0 < stored < 40, "the run was not interrupted half-way"
        server.reset()
        results = judge_for(server, cache_dir=tmp_path, concurrency=4).run(batch, ZERO_HALF_ONE, progress=False)
    assert len(server.calls) == 40 - stored
    assert sum(j.cached for j in results.judgements) == stored
    assert results.judged == 40


def _write_entries(directory, worker, count):
    cache = JudgeCache(directory)
    for i in range(count):
        messages = ({"role": "user", "content": f"worker {worker} prompt {i}"},)
        cache.put(JudgeCache.key("m", messages, Decoding()), "m", messages, Decoding(),
                  Completion(f"output {worker}/{i}", "m-snapshot"))


def test_concurrent_writers_do_not_corrupt_the_cache(tmp_path):
    workers = [multiprocessing.get_context("fork").Process(target=_write_entries, args=(tmp_path, w, 150))
               for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
    assert all(p.exitcode == 0 for p in workers)
    cache = JudgeCache(tmp_path)
    assert len(cache) == 600
    assert cache.get(JudgeCache.key("m", ({"role": "user", "content": "worker 3 prompt 149"},),
                                    Decoding())) == Completion(
        "output 3/149", "m-snapshot")
    assert sqlite3.connect(cache.path).execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_the_api_key_is_sent_but_never_written(tmp_path, warnings_logged):
    settings = JudgeSettings(judge_model="loopback-judge", judge_api_key_env="LOOPBACK_JUDGE_KEY",
                             judge_cache_dir=tmp_path / "cache", judge_retries=1, judge_backoff=0.01)
    environ = {"LOOPBACK_JUDGE_KEY": SECRET}
    with ChatServer(fail_first(500, rating_responder(hash_rating))) as server:
        settings = dataclasses.replace(settings, judge_base_url=server.base_url)
        judge = Judge.from_settings(settings, environ)
        judge.run(requests(6), ZERO_HALF_ONE, audit_path=tmp_path / "audit.jsonl", progress=False)
        judge.run(requests(2, "unrated"), lambda text: float("nope"), audit_path=tmp_path / "audit2.jsonl",
                  progress=False)
    assert {c.headers["authorization"] for c in server.calls} == {f"Bearer {SECRET}"}
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"audit.jsonl", "audit2.jsonl", "judgements.sqlite"}
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert warnings_logged and not any(SECRET in m for m in warnings_logged)


def test_a_cache_written_before_served_models_were_recorded_keeps_its_answers(tmp_path):
    messages = ({"role": "user", "content": "an old prompt"},)
    key = JudgeCache.key("m", messages, Decoding())
    old = sqlite3.connect(tmp_path / JudgeCache.FILE_NAME)
    old.execute("CREATE TABLE judgements (key TEXT PRIMARY KEY, judge_model TEXT NOT NULL, request TEXT NOT NULL, "
                "output TEXT NOT NULL, created REAL NOT NULL)")
    old.execute("INSERT INTO judgements VALUES (?, 'm', '{}', 'Rating: [[1]]', 0)", (key,))
    old.commit()
    old.close()
    cache = JudgeCache(tmp_path)
    assert cache.get(key) == Completion("Rating: [[1]]", None)
    new_messages = ({"role": "user", "content": "a new prompt"},)
    new_key = JudgeCache.key("m", new_messages, Decoding())
    cache.put(new_key, "m", new_messages, Decoding(), Completion("Rating: [[0]]", "m-snapshot"))
    assert cache.get(new_key) == Completion("Rating: [[0]]", "m-snapshot") and len(cache) == 2


def test_settings_are_checked_before_anything_runs():
    with pytest.raises(JudgeSetupError, match="API key variable MY_JUDGE_KEY is not set"):
        JudgeSettings(judge_api_key_env="MY_JUDGE_KEY").check({})
    with pytest.raises(JudgeSetupError, match="judge_backend must be one of openai, azure, hf"):
        JudgeSettings(judge_backend="anthropic").check({})
    with pytest.raises(JudgeSetupError, match="azure needs judge_base_url"):
        JudgeSettings(judge_backend="azure", judge_base_url=None).check({})
    JudgeSettings(judge_api_key_env="").check({})  # a local server without authentication


def test_azure_openai_goes_to_the_deployment_route_with_the_api_version():
    with ChatServer(rating_responder(lambda call: "1")) as server:
        settings = JudgeSettings(judge_backend="azure", judge_model="my-gpt4-deployment",
                                 judge_base_url=server.base_url.removesuffix("/v1"), judge_api_key_env="AZ_KEY",
                                 judge_api_version="2024-10-21", judge_cache_dir=None)
        results = Judge.from_settings(settings, {"AZ_KEY": SECRET}).run(requests(2), ZERO_HALF_ONE, progress=False)
    assert results.judged == 2 and results.judge_model == "azure:my-gpt4-deployment"
    assert {c.path for c in server.calls} == {
        "/openai/deployments/my-gpt4-deployment/chat/completions?api-version=2024-10-21"}
    assert {c.headers["api-key"] for c in server.calls} == {SECRET}


def test_offline_transformers_judge_batches_records_and_caches(tiny_model, tmp_path):
    checkpoint = tiny_model("llama")
    backend = TransformersBackend(str(checkpoint), batch_size=4)
    judge = Judge(backend, decoding=Decoding(max_tokens=8), cache=JudgeCache(tmp_path), concurrency=4)
    batch = requests(6)

    def any_text(text):
        return 1.0

    lenient = judge.run(batch, any_text, progress=False)
    assert lenient.calls == 6 and lenient.failed == 0
    again = judge.run(batch, any_text, progress=False)  # valid ratings are cached
    assert again.calls == 0 and all(j.cached for j in again.judgements)
    # A random-weight model writes no rating: every judgement fails, with its raw output kept, and
    # a cached answer without a valid rating is asked again (greedy: the same text comes back).
    strict = judge.run(batch, ZERO_HALF_ONE, progress=False)
    assert strict.failed == 6 and strict.calls == 6 and all(isinstance(j.raw_output, str) for j in strict.judgements)
    assert [j.raw_output for j in lenient.judgements] == [j.raw_output for j in strict.judgements]
    assert lenient.judge_model == f"hf:{checkpoint}"
    assert {j.served_model for j in strict.judgements + lenient.judgements} == {str(checkpoint)}
    # Batched generation gives what one-at-a-time generation gives (greedy decoding).
    alone = Judge(backend, decoding=Decoding(max_tokens=8), concurrency=1).run(batch[:2], ZERO_HALF_ONE, progress=False)
    assert [j.raw_output for j in alone.judgements] == [j.raw_output for j in strict.judgements[:2]]


@pytest.mark.parametrize("text, rating", [
    ("The answer is right. Rating: [[1]]", 1.0),
    ("Partially. Rating: [[0.5]].", 0.5),
    ("Wrong [[0]] and later [[1]]", 0.0),  # the first rating counts, as in FastChat
    ("Rating: [0.5]", 0.5),  # FastChat's single-bracket fallback
    # A thinking judge's verdict, not its drafts: reasoning blocks of every kind left out first
    ("<think>Perhaps [[0]]?</think>The answer is right. Rating: [[1]]", 1.0),
    ("<THINKING>[0]</THINKING>Rating: [[0.5]]", 0.5),
    ("◁think▷Rating: [[1]], no: partly.◁/think▷Rating: [[0.5]]", 0.5),
    ("<analysis>[[1]]</analysis>Rating: [[0]]", 0.0),
    ("Drafted [[1]] with the block opened in the prompt.</think>\nRating: [[0]]", 0.0),
])
def test_bracket_rating_reads_fastchat_ratings(text, rating):
    assert ZERO_HALF_ONE(text) == rating


@pytest.mark.parametrize("text, reason", [
    ("no rating here", "no [[rating]]"),
    ("Rating: [[8]]", "rating 8 is not one of 0, 0.5, 1"),
    ("Rating: [[0.7]]", "rating 0.7 is not one of 0, 0.5, 1"),
    ("<think>Rating: [[1]] is likely, but", "the judge's reasoning never ended"),  # cut by the token limit
    ("◁think▷[[0.5]]", "the judge's reasoning never ended"),
    ("<think>[[1]]</think> The answer is right.", "no [[rating]]"),  # its verdict holds none
])
def test_bracket_rating_rejects_missing_and_off_scale_ratings(text, reason):
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace(".", r"\.")):
        ZERO_HALF_ONE(text)


@pytest.mark.parametrize("run", ["think", "intent"])
def test_logs_written_before_rubrics_had_names_rejudge_to_their_scores(run, tmp_path):
    from lmms_egoplan.cli import main

    logs = LOGS_BEFORE_RUBRIC_NAMES / run
    samples = [json.loads(line) for path in logs.glob("*_samples_*.jsonl") for line in path.read_text().splitlines()]
    assert {value["judge_rubric"] for sample in samples for value in sample.values()
            if isinstance(value, dict) and "judge_rubric" in value} <= {"lmms_egoplan.egothink:RUBRIC",
                                                                        "lmms_egoplan.egointent:RUBRIC"}
    # The judge of that run again: it answers every prompt as its audit trail says it did.
    answers = {json.dumps(record["prompt"]): record["raw_output"]
               for path in logs.glob("*_judgements_*.jsonl") for record in map(json.loads,
                                                                               path.read_text().splitlines())}
    reported = json.loads(next(logs.glob("*_results.json")).read_text())["results"]
    failed = sum(metrics["failed,none"] for task, metrics in reported.items()
                 if not task.startswith("ego_think_capability"))
    with ChatServer(lambda call: Reply(answers[json.dumps(call.messages)])) as judge:
        # The run's failed judgements fail again: rejudge's distinct exit status (judge_failed_exit_status).
        assert main(["rejudge", str(logs), "--output", str(tmp_path), "--judge_base_url", judge.base_url,
                     "--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"]) == (
            3 if failed else 0)
    assert len(judge.calls) == len(answers)
    rejudged = json.loads(next(tmp_path.glob("*_rejudged.json")).read_text(), parse_constant=refuse_constant)
    assert rejudged.keys() == reported.keys()
    for task, metrics in reported.items():
        not_scores = ("judge_model", "judge", "samples", "audit_trail", "unusable_rows", "failed_requests")
        scores = {metric: value for metric, value in rejudged[task].items() if metric not in not_scores}
        assert {"judged", "failed"} < scores.keys() <= {key.split(",")[0] for key in metrics}
        for metric, value in scores.items():  # no value: null here, NaN in files written before
            expected = metrics[f"{metric},none"]
            assert (value is None and math.isnan(expected)) or value == pytest.approx(expected), (task, metric)


def refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def test_the_suites_rubrics_are_found_by_name_or_legacy_reference_without_any_harness():
    """What ``lmms-egoplan rejudge`` reads logs with: the suite's rubrics (a value, nothing registered), found by
    the names logs carry, and by what logs written before rubrics had names carry."""
    script = textwrap.dedent("""
        import sys
        from lmms_egoplan import suite
        from lmms_egoplan.judge.rubrics import load_rubric
        rubrics = suite.rubrics()
        rubric = load_rubric("egothink", rubrics)
        assert rubric is sys.modules["lmms_egoplan.egothink.protocol"].RUBRIC and rubric.scale == 100.0
        assert load_rubric("lmms_egoplan.egothink:RUBRIC", rubrics) is rubric  # as logs written before names say
        assert load_rubric("lmms_egoplan.egointent:RUBRIC", rubrics) is load_rubric("egointent", rubrics)
        assert not {"lmms_eval", "lm_eval", "torch", "transformers"} & set(sys.modules)
    """)
    subprocess.run([sys.executable, "-c", script], check=True)


def test_a_rubric_is_found_among_those_a_reader_is_handed():
    from lmms_egoplan.catalogue import entry
    from lmms_egoplan.judge.rubrics import Rubric, load_rubric

    rubric = Rubric(ZERO_HALF_ONE, scale=2.0)
    assert load_rubric("test-halves", {"test-halves": rubric}) is rubric
    with pytest.raises(ValueError, match="no rubric is registered as 'test-halves' \\(registered: \\)"):
        load_rubric("test-halves", {})
    with pytest.raises(ValueError, match="no rubric is registered as 'no-such-rubric' \\(registered: test-halves\\)"):
        load_rubric("no-such-rubric", {"test-halves": rubric})
    with pytest.raises(ValueError, match="letters, digits"):  # a name judged items can carry, on the catalogue row
        dataclasses.replace(entry("egothink"), rubrics=("my.module:RUBRIC",))


@pytest.mark.parametrize("model", ["gpt-4o-2024-11-20", "gpt-4", "gpt-5-mini", "o1", "o3-mini", "o4-mini", "qwen3-32b"])
def test_openai_requests_set_token_limit_and_temperature_by_lmms_evals_rule(model):
    from lmms_eval.llm_judge.protocol import ServerConfig
    from lmms_eval.llm_judge.providers.openai import build_sampling_kwargs

    from lmms_egoplan.judge.providers.openai_compatible import sampling_kwargs

    decoding = Decoding(temperature=0.3, max_tokens=321)
    assert sampling_kwargs(model, decoding) == build_sampling_kwargs(
        ServerConfig(model_name=model, temperature=decoding.temperature, max_tokens=decoding.max_tokens))
