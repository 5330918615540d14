"""Judge failures through the real lmms-eval CLI: a judge that does not answer stops the run before generation; lone
surrogates in model output are judged, scored and logged; failed judgements end the run with status 3 and the
rejudge command."""
from __future__ import annotations

import json

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from tests.e2e.runs import egothink_run_args, refuse_constant, strict_json_files


def test_a_judge_that_does_not_answer_stops_the_run_before_generation(tmp_path):
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=1)
    with ChatServer(lambda call: Reply("an answer")) as model:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                            tasks=["ego_think_counting"], output_dir=tmp_path / "out", check=False,
                            env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data),
                                 "EGOTHINK_JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "EGOTHINK_JUDGE_MODEL": "j",
                                 "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 1 and model.calls == []  # not one answer generated
    assert "did not answer a test request" in run.log and "EGOTHINK_JUDGE_PREFLIGHT" in run.log


def test_lone_surrogates_in_model_output_are_judged_and_scored_and_logged(tmp_path):
    """An OpenAI-compatible model whose output holds a lone surrogate (broken bytes): the judged
    task and ActPlan score it, and the samples file holds every sample."""
    from contextlib import ExitStack

    from lmms_egoplan.demo.actplan import smoke_suite as actplan_suite
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    with ExitStack() as resources, ChatServer(lambda call: Reply("Two plates \udcff.\nwalk_to(sink\udcff)")) as model, \
            ChatServer(rating_responder(lambda call: "1")) as judge:
        actplan = actplan_suite(tmp_path / "actplan", resources)
        env = {**actplan.env, "EGOTHINK_SOURCE": "local",
               "EGOTHINK_DATA_ROOT": str(write_release(tmp_path / "think", 1)),
               "EGOTHINK_JUDGE_BASE_URL": judge.base_url, "EGOTHINK_JUDGE_MODEL": "loopback-judge",
               "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "cache")}
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                            tasks=["ego_think_counting", "actplan1k"], output_dir=tmp_path / "out", env=env,
                            check=False)
    assert run.returncode == 0, run.log_tail()
    assert run.metric("ego_think_counting", "score") == 100.0 and run.metric("ego_think_counting", "failed") == 0
    assert "Two plates \ufffd." in judge.calls[0].text
    assert run.metric("actplan1k", "plan_length") == 1
    for task in ("ego_think_counting", "actplan1k"):
        assert len(run.samples(task)) > 0


def test_a_judge_failing_after_a_good_preflight_ends_the_run_with_status_3_and_the_rejudge_command(tmp_path):
    import shlex
    import sys

    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
    from lmms_egoplan.demo.kit.warm_python import run_python

    data = write_release(tmp_path / "data", per_dimension=3)
    state = {"down": True}
    with ChatServer(lambda call: Reply("Two.")) as model, \
            ChatServer(lambda call: Reply(status=503)
                       if state["down"] else rating_responder(lambda c: "1")(call)) as judge:
        run = run_lmms_eval(check=False, output_dir=tmp_path / "out",
                            **egothink_run_args(data, model, judge, tmp_path, judge_retries="1", judge_backoff="0"))
        assert run.returncode == 3
        assert run.metric("ego_think_counting", "failed") == 3 and run.metric("ego_think_counting", "score") is None
        strict_json_files(run)  # the score without a value is null, beside judged 0 / failed 3
        last = run.log.splitlines()[-1]
        assert last.startswith("lmms-egoplan: 3 of 3 judgements failed (ego_think_counting 3) and are left out of the "
                               "scores; the results and the judge cache are written; judge the failed ones with: ")
        command = shlex.split(last.split("judge the failed ones with: ")[1])
        [samples] = run.output_dir.rglob("*_samples_ego_think_counting.jsonl")
        assert command[:3] == ["lmms-egoplan", "rejudge", str(samples)]
        assert f"--judge_base_url {judge.base_url}" in last and f"--judge_cache_dir {tmp_path / 'judge'}" in last
        state["down"] = False
        judge.reset()
        finished = run_python([sys.executable, "-m", "lmms_egoplan.cli", *command[1:]], stderr_apart=True)
    assert finished.returncode == 0, finished.stderr
    assert len(judge.calls) == 3
    rejudged = json.loads(next(samples.parent.glob("*_rejudged.json")).read_text(), parse_constant=refuse_constant)
    assert rejudged["ego_think_counting"]["score"] == 100.0 and rejudged["ego_think_counting"]["failed"] == 0


def test_a_judge_that_is_not_running_is_waited_for_once_and_the_run_ends_with_the_rejudge_command(tmp_path):
    """The judge check off and no judge running (the issue's EgoThink run): the first judge call spends its retries,
    every later one, of every task, fails at once; the generations are kept in the samples files and the response
    cache, and the last line says the judge stopped answering and gives the rejudge command."""
    import shlex

    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=2)
    with ChatServer(lambda call: Reply("gone")) as gone:
        dead_url = gone.base_url  # its port closed: nothing answers there
    tasks = ["ego_think_counting", "ego_think_existence", "ego_think_spatial"]
    with ChatServer(lambda call: Reply("Two.")) as model:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                            tasks=tasks, output_dir=tmp_path / "out", check=False,
                            env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data),
                                 "EGOTHINK_JUDGE_BASE_URL": dead_url, "EGOTHINK_JUDGE_MODEL": "loopback-judge",
                                 "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_PREFLIGHT": "false",
                                 "EGOTHINK_JUDGE_RETRIES": "3", "EGOTHINK_JUDGE_BACKOFF": "0.2",
                                 "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "judge")})
    assert run.returncode == 3, run.log_tail()
    assert len(model.calls) == 6 and all(len(run.samples(task)) == 2 for task in tasks)  # every generation logged
    assert run.log.count("stopped answering (connection failed") >= 2  # its error line, and the run's last line
    assert run.log.count("nothing more is asked of it in this run: every judgement not made yet counts as failed") == 1
    attempts = [json.loads(line)["attempts"] for path in run.output_dir.rglob("*_judgements_*.jsonl")
                for line in path.read_text().splitlines()]
    assert len(attempts) == 6 and sum(attempts) <= 2 * 4  # the calls in flight, each at most its retries, once
    last = run.log.splitlines()[-1]
    assert last.startswith("lmms-egoplan: 6 of 6 judgements failed") and "stopped answering" in last
    command = shlex.split(last.split("judge the failed ones with: ")[1])
    assert command[:2] == ["lmms-egoplan", "rejudge"] and len([c for c in command if "_samples_" in c]) == 3
    assert (tmp_path / "out" / "response_cache" / "cache.db").is_file()  # the answers, for the same command again
