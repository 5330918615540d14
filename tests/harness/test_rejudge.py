"""rejudge: every row it cannot use named and counted, the rest judged; samples checked before the API key is asked
for; failed judgements exit with the distinct status."""

from __future__ import annotations

import json

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.judge.protocol import JudgeRequest


def judged_rows(count: int) -> list[dict]:
    """Samples-file rows of an EgoThink task as a judged run logs them."""
    from lmms_egoplan.egothink.protocol import RUBRIC_NAME
    from lmms_egoplan.judge.rubrics import judge_parts_item

    rows = []
    for doc_id in range(count):
        item = judge_parts_item({"": JudgeRequest.from_prompt(f"d{doc_id}", f"Rate answer {doc_id}")}, RUBRIC_NAME)
        rows.append({"doc_id": doc_id, "score": item, "judged": item, "failed": item})
    return rows


def test_rejudge_names_and_counts_every_row_it_cannot_use_and_judges_the_rest(tmp_path, capsys):
    from lmms_egoplan.cli import main

    samples = tmp_path / "logs" / "20261122_101010_samples_ego_think_counting.jsonl"
    samples.parent.mkdir()
    good = judged_rows(3)
    broken = {"doc_id": 5, "score": {"judge_parts": {"": {"judge_request_id": "d5"}}, "judge_rubric": "egothink"}}
    lines = [json.dumps(row) for row in good] + [json.dumps({"doc_id": 4, "resps": ["an answer"]}), json.dumps(broken),
                                                 "[1, 2]", json.dumps(judged_rows(7)[6])[:40]]
    samples.write_text("\n".join(lines))  # the last line cut off, as a killed run leaves it
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        status = main(["rejudge", str(samples.parent), "--output", str(tmp_path / "out"), "--judge_base_url",
                       judge.base_url, "--judge_model", "loopback-judge", "--judge_api_key_env", "",
                       "--judge_cache_dir", "none"])
    assert status == 0 and len(judge.calls) == 3
    err = capsys.readouterr().err
    for number, why in ((4, "holds no judged item (doc_id 4)"),
                        (5, "the judged item of metric score (doc_id 5) is broken"),
                        (6, "a JSON list, not a sample"), (7, "not JSON (the last line, cut off")):
        assert f"{samples}:{number}: {why}" in err
    assert "4 logged rows could not be used" in err.splitlines()[-1]
    summary = json.loads(next((tmp_path / "out").glob("*_rejudged.json")).read_text())["ego_think_counting"]
    assert (summary["judged"], summary["failed"], summary["unusable_rows"], summary["score"]) == (3, 0, 4, 100.0)


def test_rejudge_of_a_folder_without_samples_says_so_before_asking_for_an_api_key(tmp_path, capsys, monkeypatch):
    from lmms_egoplan.cli import main

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    (tmp_path / "results").mkdir()
    assert main(["rejudge", str(tmp_path / "results"), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"no lmms-eval samples files (*_samples_<task>.jsonl) under {tmp_path / 'results'}" in err
    assert "OPENAI_API_KEY" not in err


def test_an_output_folder_that_cannot_be_made_is_named_before_the_judge_is_asked(tmp_path, capsys):
    """It was a FileExistsError of an audit trail ("its lines before this one are whole") once the judge answered."""
    from lmms_egoplan.cli import main

    samples = tmp_path / "20261122_101010_samples_ego_think_counting.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in judged_rows(2)))
    blocking = tmp_path / "notes.txt"
    blocking.write_text("a file where the output folder was to go")
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        for command in ("rejudge", "judge-agreement"):
            assert main([command, str(samples), "--output", str(blocking / "out"), "--judge_base_url",
                         judge.base_url, "--judge_model", "loopback-judge", "--judge_api_key_env", ""]) == 1
            assert capsys.readouterr().err == (f"lmms-egoplan {command}: --output {blocking / 'out'}: cannot make this "
                                               f"folder ({blocking} is a file, where a folder goes)\n")
    assert not judge.calls


def test_rejudge_with_failed_judgements_exits_with_the_distinct_status_saying_how_to_finish(tmp_path, capsys):
    from lmms_egoplan.cli import main

    samples = tmp_path / "20261122_101010_samples_ego_think_counting.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in judged_rows(4)))
    args = ["rejudge", str(samples), "--output", str(tmp_path / "out"), "--judge_model", "loopback-judge",
            "--judge_api_key_env", "", "--judge_cache_dir", str(tmp_path / "cache"), "--judge_retries", "0"]
    with ChatServer(lambda call: Reply(status=503) if call.text.endswith(("1", "3"))
                    else rating_responder(lambda c: "1")(call)) as judge:
        assert main([*args, "--judge_base_url", judge.base_url]) == 3
        assert "2 judgements failed" in capsys.readouterr().err.splitlines()[-1]
        summary = json.loads(next((tmp_path / "out").glob("*_rejudged.json")).read_text())
        assert summary["ego_think_counting"]["failed"] == 2
        assert main([*args, "--judge_base_url", judge.base_url, "--judge_failed_exit_status", "0"]) == 0
        assert len(judge.calls) == 4 + 2  # the second run asked only for the two that had failed


def test_rejudge_judges_with_the_judge_the_run_recorded_unless_told_otherwise(tmp_path):
    from lmms_egoplan.cli import main

    samples = tmp_path / "run" / "20261122_101010_samples_ego_think_counting.jsonl"
    samples.parent.mkdir()
    samples.write_text("".join(json.dumps(row) + "\n" for row in judged_rows(2)))
    with ChatServer(rating_responder(lambda call: "1")) as recorded, \
            ChatServer(rating_responder(lambda call: "0")) as other:
        judge = {"judge_backend": "openai", "judge_model": "recorded-judge", "judge_base_url": recorded.base_url,
                 "judge_api_key_env": "", "judge_cache_dir": None, "judge_temperature": 0.0,
                 "judge_rubric": "egothink"}
        (samples.parent / "20261122_101010_results.json").write_text(json.dumps(
            {"results": {},
             "configs": {"ego_think_counting": {"metadata": {"version": 2, "source": "local", **judge}}}}))
        assert main(["rejudge", str(samples), "--output", str(tmp_path / "same")]) == 0
        assert [call.body["model"] for call in recorded.calls] == ["recorded-judge"] * 2 and other.calls == []
        assert main(["rejudge", str(samples), "--output", str(tmp_path / "other"), "--judge_base_url", other.base_url,
                     "--judge_model", "other-judge"]) == 0
        assert [call.body["model"] for call in other.calls] == ["other-judge"] * 2 and len(recorded.calls) == 2
    scores = [json.loads(next((tmp_path / out).glob("*_rejudged.json")).read_text())["ego_think_counting"]
              for out in ("same", "other")]
    assert [(s["score"], s["judge_model"]) for s in scores] == [(100.0, "openai:recorded-judge"),
                                                                (0.0, "openai:other-judge")]


def test_rejudge_of_a_run_judged_by_a_shut_down_model_says_so_and_what_to_use_instead(tmp_path, capsys):
    """Logs without a results file: the judge their items recorded (the paper's GPT-4 here)."""
    from lmms_egoplan.cli import main
    from lmms_egoplan.demo.kit.judge_server import shut_down_model

    samples = tmp_path / "20261122_101010_samples_ego_think_counting.jsonl"
    rows = judged_rows(1)
    rows[0]["score"]["judge"] = {"backend": "openai", "model": "gpt-4", "revision": None, "rubric": "egothink"}
    samples.write_text(json.dumps(rows[0]) + "\n")
    with ChatServer(shut_down_model("gpt-4"), answer_preflight=False) as server:
        assert main(["rejudge", str(samples), "--output", str(tmp_path / "out"), "--judge_base_url", server.base_url,
                     "--judge_cache_dir", "none"]) == 2
    assert [call.body["model"] for call in server.calls] == ["gpt-4"]  # the preflight's request only
    assert capsys.readouterr().err.splitlines()[-1].endswith(
        "OpenAI shut down the judge model gpt-4 on 2026-10-23 (announced 2026-04-22); set --judge_model to a current "
        "model (OpenAI names its substitutes on https://platform.openai.com/docs/deprecations), or serve the suite's "
        "default open-weights judge Qwen/Qwen3-30B-A3B-Instruct-2507 locally (docs/judges.md)")


def test_a_run_whose_judge_stopped_answering_says_so_once_with_what_resumes_it(tmp_path):
    """The run's last line (``failed_judgements_verdict``): the judge that stopped answering named once, for every
    task it left unjudged; with samples files the rejudge command, without them the same command, which reads the
    model's answers from the response cache."""
    from pathlib import Path

    from lmms_egoplan.core.run import SuiteRun
    from lmms_egoplan.harness.judged import TaskJudgements, failed_judgements_verdict
    from lmms_egoplan.judge.engine import Judge
    from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
    from lmms_egoplan.judge.settings import JudgeSettings

    settings = JudgeSettings(judge_model="loopback-judge", judge_cache_dir=None)
    judge = Judge(OpenAIChatBackend("loopback-judge", base_url="http://127.0.0.1:9/v1", api_key_env=""))
    judge.stopped_answering = "the judge openai:loopback-judge stopped answering (connection failed, 7 attempts)"
    run = SuiteRun(judges={settings: judge}, response_cache_root=str(tmp_path / "response_cache"),
                   task_judgements={task: TaskJudgements(2, 2, settings)
                                    for task in ("ego_think_counting", "ego_think_spatial")})
    out = tmp_path / "out" / "model"
    files = [out / "20260101_000000_results.json",
             *(out / f"20260101_000000_samples_{task}.jsonl" for task in run.task_judgements)]
    status, line = failed_judgements_verdict(run, files)
    assert status == 3 and line.count("stopped answering") == 1
    assert line.startswith("4 of 4 judgements failed (ego_think_counting 2, ego_think_spatial 2)")
    assert f"judge the failed ones with: lmms-egoplan rejudge {files[1]} {files[2]} --output {out}" in line
    _, line = failed_judgements_verdict(run, [Path(files[0])])  # no --log_samples
    assert line.endswith(f"re-run the same command to judge them (judgements already made come from the judge "
                         f"cache, the model's answers from the response cache {tmp_path / 'response_cache'}), or "
                         f"add --log_samples to judge them later with lmms-egoplan rejudge")


def test_a_rejudged_file_is_named_in_its_runs_time_zone_so_it_sorts_after_the_runs_files(tmp_path):
    """lmms-eval names a run's files in its --timezone (Asia/Singapore by default, UTC+08:00); a rejudged file named in
    this machine's zone (UTC here) would sort hours before the run it rescored."""
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    from lmms_egoplan.cli import main

    for folder, zone, recorded in (("default", "Asia/Singapore", {}), ("utc", "UTC", {"timezone": "UTC"})):
        logs = tmp_path / folder
        logs.mkdir()
        stamp = (datetime.now(ZoneInfo(zone)) - timedelta(seconds=5)).strftime("%Y%m%d_%H%M%S")
        (logs / f"{stamp}_samples_ego_think_counting.jsonl").write_text(
            "".join(json.dumps(row) + "\n" for row in judged_rows(2)))
        (logs / f"{stamp}_results.json").write_text(json.dumps({"config": {"resolved_cli_args": recorded}}))
        with ChatServer(rating_responder(lambda call: "1")) as judge:
            assert main(["rejudge", str(logs), "--output", str(logs), "--judge_base_url", judge.base_url,
                         "--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir",
                         "none"]) == 0
        [rejudged] = logs.glob("*_rejudged.json")
        made = datetime.strptime(rejudged.name[:15], "%Y%m%d_%H%M%S").replace(tzinfo=ZoneInfo(zone))
        assert sorted(path.name for path in logs.iterdir())[-1] == rejudged.name, folder
        assert abs(datetime.now(ZoneInfo(zone)) - made) < timedelta(minutes=2), folder
