"""A disk that fills up under a run, through the real lmms-eval CLI (a small tmpfs: a real full filesystem): the
judge cache and the output folder filling while EgoThink is judged, and the response cache filling while the model
answers. Each run stops before more is paid for, its last line saying how many answers were not stored, where, and
what is kept; no file is left with a cut line. Variants in process: tests/harness/test_full_disk.py,
tests/judge/test_judge_faults.py, tests/core/test_text_files.py."""
from __future__ import annotations

import json

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.judge.cache import JudgeCache
from tests.e2e.runs import egothink_run_args
from tests.e2e.test_resume import cached_rows, stored_responses


def test_a_judge_cache_and_output_folder_filling_while_judging_stop_the_judging_and_keep_what_was_stored(
        small_disk, tmp_path):
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    disk, filled = small_disk("1m"), []
    data = write_release(tmp_path / "data", per_dimension=12)

    def judge_answer(call):
        if len(judge.calls) == 5 and not filled:
            filled.append(disk.fill())
        return rating_responder(lambda _: "1")(call)

    with ChatServer(lambda call: Reply("Two.")) as model, ChatServer(judge_answer) as judge:
        args = egothink_run_args(data, model, judge, tmp_path, judge_concurrency="1")
        args["env"]["EGOTHINK_JUDGE_CACHE_DIR"] = str(disk.path / "judge")
        run = run_lmms_eval(output_dir=disk.path / "out", check=False, **args)
    cache = disk.path / "judge" / JudgeCache.FILE_NAME
    asked, last = len(judge.calls), run.log.rstrip().splitlines()[-1]
    assert run.returncode == 1 and len(model.calls) == 12
    assert asked <= 5 + 1, asked  # the call in flight when the cache could not store the 5th answer, no more
    disk.free()
    stored = cached_rows(cache, "judgements")
    assert last.startswith(f"lmms-egoplan: error: the judge cache {cache} could not store {asked - stored} of the "
                           f"{asked} answers received (the disk is full ("), last
    assert f"Judging stopped before asking for the {12 - asked} judgements left" in last
    assert f"the answers it stored ({stored} of this run's) are kept in the judge cache {cache}" in last
    for trail in (disk.path / "out").rglob("*_judgements_*.jsonl"):  # each line whole
        assert all(json.loads(line)["id"] for line in trail.read_text().splitlines())
    assert not list((disk.path / "out").rglob("*_results.json"))


def test_a_response_cache_filling_while_the_model_answers_stops_the_run_before_it_answers_more(small_disk, tmp_path):
    """lmms-eval's openai backend, two requests at a time, answers stored a chunk of 4 questions at a time: the
    disk fills at the 6th answer; the run ends with the second chunk (lmms-eval alone asks again for each of its
    questions, then for every question left, storing nothing)."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    disk, filled = small_disk("2m"), []
    data = write_release(tmp_path / "data", per_dimension=12)

    def model_answer(call):
        if len(model.calls) == 6 and not filled:
            filled.append(disk.fill())
        return Reply("Two.")

    with ChatServer(model_answer) as model, ChatServer(rating_responder(lambda call: "1")) as judge:
        args = egothink_run_args(data, model, judge, tmp_path, model_concurrency=2)
        args["extra_args"] = ["--use_cache", str(disk.path / "responses")]
        run = run_lmms_eval(output_dir=tmp_path / "out", check=False, **args)
        root, last = disk.path / "responses", run.log.rstrip().splitlines()[-1]
        assert run.returncode == 1 and len(model.calls) == 8 and judge.calls == []
        disk.free()
        stored = stored_responses(root)
        assert 4 <= stored < 8
        assert last.startswith(f"lmms-egoplan: error: --use_cache {root}: {8 - stored} model response"), last
        assert "The run stopped before the model computed more" in last and f"the {stored} responses it stored" in last
        audited = set()  # lmms-eval's log of every response: each line whole, and written before the response's row
        for audit in root.rglob("*.audit.jsonl"):
            audited |= {json.loads(line)["cache_key"] for line in audit.read_text().splitlines()}
        assert stored < len(audited) <= 8
        # The same command once there is room: every answer stored or kept whole in the audit log is served.
        model.reset()
        resumed = run_lmms_eval(output_dir=tmp_path / "again", check=False, **args)
    assert resumed.returncode == 0 and len(model.calls) == 12 - len(audited)
    assert f"recovered {len(audited)} responses of a killed run" in resumed.log
    assert f", {len(audited) - stored} of them from its audit log only" in resumed.log
