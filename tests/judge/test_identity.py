"""What judged a run, whole: the identity built from settings, rubric and the server's answer, read back from
results metadata and records; the server's fingerprint kept in the cache and the audit trail."""

import json
from types import SimpleNamespace

from lmms_egoplan.catalogue import CATALOGUE
from lmms_egoplan.demo.kit.judge_server import ChatServer, rating_responder
from lmms_egoplan.egothink.protocol import RUBRIC, RUBRIC_NAME
from lmms_egoplan.judge.engine import Judge, preflight
from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.settings import JudgeSettings


def test_the_identity_of_a_judge_its_rubric_and_what_its_server_said(tmp_path):
    with ChatServer(rating_responder(lambda call: "1"), system_fingerprint="fp_7") as server:
        settings = JudgeSettings(judge_base_url=server.base_url, judge_model="served-judge",
                                 judge_revision="abc1234def",
                                 judge_cache_dir=tmp_path)
        identity = JudgeIdentity.of(settings, RUBRIC_NAME, RUBRIC, preflight(settings))
    assert identity == JudgeIdentity("openai", "served-judge", "abc1234def", "egothink", RUBRIC.version,
                                     RUBRIC.prompt_hash, "served-judge", "fp_7")
    assert len(RUBRIC.prompt_hash) == 16 and RUBRIC.levels == (0, 0.5, 1)
    assert JudgeIdentity.from_record(identity.record()) == identity
    # As the report reads a task's metadata: judge settings and identity keys, values as JSON text.
    metadata = {"judge_backend": "openai", "judge_model": "served-judge", "judge_revision": "abc1234def",
                **{key: json.dumps(value) if value is None else value for key, value in identity.metadata().items()}}
    assert JudgeIdentity.from_record(metadata) == identity
    assert (identity.text() == f"openai:served-judge@abc1234 (fingerprint fp_7); rubric egothink v2, prompt "
                               f"{RUBRIC.prompt_hash}")
    assert JudgeIdentity.from_record({"judge_model": "null"}) is None and JudgeIdentity.from_record({}) is None


def test_the_fingerprint_of_each_answer_is_kept_in_the_cache_and_the_audit_trail(tmp_path):
    requests = [JudgeRequest.from_prompt(f"r{i}", f"answer {i}") for i in range(3)]
    with ChatServer(rating_responder(lambda call: "1"), system_fingerprint="fp_9") as server:
        settings = JudgeSettings(judge_base_url=server.base_url, judge_model="j", judge_cache_dir=tmp_path / "cache")
        Judge.from_settings(settings).run(requests, RUBRIC.parse_rating, progress=False)
        again = Judge.from_settings(settings).run(requests, RUBRIC.parse_rating, audit_path=tmp_path / "audit.jsonl",
                                                  progress=False, identity={"model": "j"})
        assert len(server.calls) == 3  # the second run: all from the cache
    assert {(j.cached, j.served_model, j.system_fingerprint) for j in again.judgements} == {(True, "j", "fp_9")}
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert {(line["system_fingerprint"], json.dumps(line["judge"])) for line in lines} == {("fp_9", '{"model": "j"}')}


def test_each_judged_task_names_the_rubric_its_items_name():
    from lmms_egoplan.egointent import protocol as egointent_protocol
    from lmms_egoplan.egointent import task as egointent
    from lmms_egoplan.egothink import protocol as egothink_protocol
    from lmms_egoplan.egothink import task as egothink

    assert egothink.DIMENSION.judge_rubric(None) == egothink.BLIND.judge_rubric(None) == egothink_protocol.RUBRIC_NAME
    for definitions, name in egointent_protocol.RUBRIC_NAMES.items():  # the setting definitions picks the rubric
        assert egointent.STEPS.judge_rubric(SimpleNamespace(definitions=definitions)) == name
    assert {name for row in CATALOGUE for name in row.rubrics} == {
        egothink_protocol.RUBRIC_NAME, *egointent_protocol.RUBRIC_NAMES.values()}
    assert egointent_protocol.RUBRIC.levels == tuple(range(11))
    assert egointent_protocol.RUBRIC.prompt_hash != egothink_protocol.RUBRIC.prompt_hash
