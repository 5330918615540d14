"""Failed model requests through the real lmms-eval CLI: lmms-eval's own openai backend against a loopback
model that fails some requests, then answers them, then fails all, for every generative task of the seven
benchmarks in one run each. A failed request is never scored (each value equals the script's over the
answered samples), is counted and marked, is never sent to a judge, and ends the run with status 4 and
the command that asks only it again (answered requests come from the response cache). The same runs
show that neither the model's nor the judge's API key reaches a file or the console."""

from __future__ import annotations

import dataclasses
import re
import shlex
from contextlib import ExitStack
from pathlib import Path

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.scripted import (
    answering,
    differences,
    failed_request,
    rating_by_script,
    reported_metrics,
)
from lmms_egoplan.demo.smoke import suites

MODEL_KEY = "sk-model-secret-0123456789abcdef"
JUDGE_KEY = "sk-judge-secret-fedcba9876543210"
JUDGE_KEY_VARIABLE = "LOOPBACK_JUDGE_KEY"


def scripts_with_one_failing_request_each(workdir: Path, resources: ExitStack) -> tuple[dict, dict]:
    """Each benchmark's scripted answers (the demo's), and the same scripts with one request failing:
    EgoPlan-Bench2's on a gold-A question it answers wrongly (lmms-eval's failure text holds the A of
    "EVAL", which the official parser reads), the first question of every other benchmark (ActPlan-1K's
    first description: both its tasks ask it)."""
    scripts = {name: build(workdir / name, resources).scripted for name, build in suites().items()}
    failing = {}
    for name, script in scripts.items():
        key = next(key for key, answer in script.answers.items()
                   if name != "egoplan_bench2" or answer.startswith("The answer is"))
        failing[name] = dataclasses.replace(script, unanswered=frozenset([key]))
    return scripts, failing


def files_holding(root: Path, secret: str) -> list[Path]:
    return [path for path in root.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


def test_failed_requests_are_left_out_counted_never_judged_and_asked_again_alone(tmp_path):
    with ExitStack() as resources:
        scripts, failing = scripts_with_one_failing_request_each(tmp_path / "data", resources)
        state = {"failing": True}
        answered, failed_once = answering(list(scripts.values())), answering(list(failing.values()))
        model = resources.enter_context(ChatServer(lambda call: (failed_once if state["failing"] else answered)(call),
                                                   model_name="scripted-answers"))
        think_judge = resources.enter_context(ChatServer(rating_by_script([scripts["egothink"]])))
        rate_intent = rating_by_script([scripts["egointent"]])
        # EgoIntent's judge (or a proxy before it) first refuses the key, echoing the Authorization header.
        intent_judge = resources.enter_context(ChatServer(lambda call: Reply(
            f"Incorrect API key. Authorization: {call.headers.get('authorization')}", status=401)
            if state["failing"] else rate_intent(call)))
        env = {JUDGE_KEY_VARIABLE: JUDGE_KEY}
        for script in scripts.values():
            env.update(script.env)
        for prefix, judge, key_variable in (("EGOTHINK", think_judge, ""),
                                            ("EGOINTENT", intent_judge, JUDGE_KEY_VARIABLE)):
            env.update({f"{prefix}_JUDGE_BASE_URL": judge.base_url, f"{prefix}_JUDGE_MODEL": "scripted-judge",
                        f"{prefix}_JUDGE_API_KEY_ENV": key_variable,
                        f"{prefix}_JUDGE_CACHE_DIR": str(tmp_path / "judge-cache" / prefix.lower())})
        tasks = [task for script in scripts.values() for task in script.tasks]

        def failed_request(call) -> bool:
            return any(script.key(call.text) in script.unanswered for script in failing.values())

        arguments = dict(model="openai", tasks=tasks, output_dir=tmp_path / "out", env=env, check=False,
                         # lmms-eval's two attempts per request, without its sleep between them
                         model_args=f"model_version=scripted-answers,base_url={model.base_url},api_key={MODEL_KEY},"
                                    f"max_retries=2,retry_backoff_s=0",
                         extra_args=["--use_cache", str(tmp_path / "responses")])
        first = run_lmms_eval(**arguments)
        asked_first, judged_first = model.calls, {"egothink": think_judge.calls, "egointent": intent_judge.calls}

        # 8 failed requests (ActPlan-1K's in both its tasks), the judgements of EgoIntent too: the requests' status.
        assert first.returncode == 4, first.log_tail()
        judgements_line, requests_line = first.log.rstrip().splitlines()[-2:]
        assert judgements_line.startswith("lmms-egoplan: ") and "judgements failed (egointent " in judgements_line
        counts = re.fullmatch(r"lmms-egoplan: 8 of (\d+) model requests failed \((.*)\) and are left out of the scores "
                              r"\(each task's failed_requests counts them.*", requests_line)
        assert counts, requests_line
        assert sorted(counts.group(2).split(", ")) == sorted(
            f"{task} {metrics['failed_requests']}" for script in failing.values()
            for task, metrics in script.values(first).items() if metrics["failed_requests"]
                                                             and task in first.results["n-samples"])
        command = requests_line.split("with the same command: ")[1].removesuffix(" (your key in place of ***)")
        assert shlex.split(command)[:4] == ["LMMS_EVAL_PLUGINS=lmms_egoplan", "lmms-eval", "--model", "openai"]
        assert f"--use_cache {tmp_path / 'responses'}" in command and "api_key=***" in command

        # Every value is the script's over the answered samples (EgoIntent's judge refused every call: below).
        reported = reported_metrics(first.results)
        for name, script in failing.items():
            expected = script.values(first)
            if name == "egointent":  # its counts: the judgements the answered steps asked for all failed
                counts = ("failed_requests", "incomplete_answers", "missing_fields", "capped_samples")
                expected = {"egointent": {**{metric: expected["egointent"][metric] for metric in counts},
                                          "judged": 0, "failed": expected["egointent"]["judged"]}}
                reported["egointent"] = {m: v for m, v in reported["egointent"].items() if m in expected["egointent"]}
            assert differences(reported, expected) == [], name
        # EgoPlan-Bench2: the failed gold-A question counts in neither parser's accuracy, nor in any count.
        [failed_sample] = [s for s in first.samples("egoplan_bench2") if s["failed_requests"]]
        assert failed_sample["target"] == "0" and "accuracy_official" not in failed_sample  # gold A (its index)
        assert "[LMMS_EVAL_REQUEST_FAILED after 2 retries]" in str(failed_sample["filtered_resps"])
        assert "(Authorization: Bearer ***)" in str(failed_sample["filtered_resps"])  # the model's echo, masked
        # The judges never saw a failed request (EgoThink: one call per answered question; EgoIntent: its failed
        # count above is that of the answered steps' fields).
        assert not any("LMMS_EVAL_REQUEST_FAILED" in call.text for calls in judged_first.values() for call in calls)
        assert len(judged_first["egothink"]) == failing["egothink"].values(first)["ego_think"]["judged"]
        assert sum(map(failed_request, asked_first)) == 2 * 8  # two attempts each

        # The same command again: only the failed requests are asked; everything is then as the script implies.
        state["failing"] = False
        model.reset()
        think_judge.reset()
        second = run_lmms_eval(**arguments)
        assert second.returncode == 0, second.log_tail()
        # Cosmos-Reason1's official_reasoning samples (temperature 0.6): lmms-eval 0.7.3 caches only deterministic
        # requests, the suite keeps its tasks' sampled answers by seed (compat.durability.resume_sampled_runs), so of
        # its answered questions only those answered empty are asked again (lmms-eval's _is_valid_response stores no
        # empty answer).
        sampled = [call for call in model.calls if scripts["cosmos_reason1"].key(call.text) is not None
                   and not failed_request(call)]
        empty = sorted(key for key, answer in scripts["cosmos_reason1"].answers.items() if not answer.strip())
        assert sorted(scripts["cosmos_reason1"].key(call.text) for call in sampled) == empty and len(empty) == 4
        assert len(model.calls) - len(sampled) == 8 and all(map(failed_request, (c for c in model.calls
                                                                              if c not in sampled)))
        assert len(think_judge.calls) == 1  # the other judgements come from the judge cache
        reported = reported_metrics(second.results)
        for name, script in scripts.items():
            assert differences(reported, script.values(second)) == [], name

    # No key on disk or console: results, samples, judge audit trails and caches, response cache databases.
    summary = next(line for line in second.log.splitlines() if line.startswith("openai ("))
    assert "api_key=[REDACTED]" in summary
    for secret in (MODEL_KEY, JUDGE_KEY):
        assert secret not in first.log and secret not in second.log
        assert files_holding(tmp_path, secret) == []
    [intent_trail] = [path for path in (tmp_path / "out").rglob("*_judgements_egointent.jsonl")
                      if path.stat().st_mtime < second.started]
    assert "Authorization: Bearer ***" in intent_trail.read_text()  # the echo reached the trail, masked
    assert len(list((tmp_path / "responses").rglob("*.db"))) >= 2


def test_a_model_that_fails_every_request_leaves_no_score_and_says_how_to_ask_again(tmp_path):
    with ExitStack() as resources:
        scripts, _ = scripts_with_one_failing_request_each(tmp_path / "data", resources)
        model = resources.enter_context(ChatServer(failed_request))
        env = {name: value for script in scripts.values() for name, value in script.env.items()}
        for prefix in ("EGOTHINK", "EGOINTENT"):  # a judge that is never asked (no answer to judge)
            env.update({f"{prefix}_JUDGE_BASE_URL": model.base_url, f"{prefix}_JUDGE_MODEL": "judge",
                        f"{prefix}_JUDGE_API_KEY_ENV": "", f"{prefix}_JUDGE_CACHE_DIR": str(tmp_path / prefix)})
        tasks = [task for script in scripts.values() for task in script.tasks]
        run = run_lmms_eval(model="openai", tasks=tasks, output_dir=tmp_path / "out", env=env, check=False,
                            model_args=f"model_version=m,base_url={model.base_url},api_key=unused,max_retries=2,"
                                       f"retry_backoff_s=0")
    assert run.returncode == 4, run.log_tail()
    reported = reported_metrics(run.results)
    asked = 0
    for task, metrics in reported.items():
        # No score (a judged one null, EgoThink's Average too) and no count of answers; nothing judged.
        numbers = {metric: value for metric, value in metrics.items() if isinstance(value, (int, float))}
        assert numbers.keys() <= {"failed_requests", "skipped_samples", "judged", "failed"}, (task, numbers)
        assert numbers.get("judged", 0) == numbers.get("failed", 0) == 0 and metrics.get("score", None) is None
        if task in run.results["n-samples"]:  # a task, not a group
            assert metrics["failed_requests"] == run.results["n-samples"][task]["effective"]
            asked += metrics["failed_requests"]
    assert reported["ego_think"]["failed_requests"] == sum(
        reported[task]["failed_requests"] for task in reported if re.fullmatch(r"ego_think_(?!capability)\w+", task))
    assert len(model.calls) == 2 * asked  # lmms-eval's two attempts, each failed at once
    last = run.log.rstrip().splitlines()[-1]
    assert last.startswith(f"lmms-egoplan: {asked} of {asked} model requests failed (")
    # No --use_cache: the run kept its answers in its output folder's response cache (failures are not kept there).
    assert last.endswith(f"ask only them again (the answered ones come from the response cache "
                         f"{tmp_path / 'out' / 'response_cache'}) with the same command: "
                         f"LMMS_EVAL_PLUGINS=lmms_egoplan "
                         f"lmms-eval {shlex.join(run.command[3:]).replace('api_key=unused', 'api_key=***')} "
                         f"(your key in place of ***)")
