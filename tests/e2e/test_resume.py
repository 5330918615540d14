"""Runs that survive kills, through the real lmms-eval CLI: a frame that fails to decode stops the run at its sample
and the next run resumes; two runs into one folder never overwrite; a pass stopped by SIGKILL or SIGTERM resumes
without computing or judging anything twice."""
from __future__ import annotations

from pathlib import Path

import pytest

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.judge.cache import JudgeCache
from tests.e2e.runs import broken_copy, egoplan_run, egothink_run_args, load_docs, strict_json_files


def test_a_frame_that_fails_to_decode_stops_the_run_at_its_sample_and_the_next_run_resumes_from_the_cache(
        egoplan_data, tiny_model, tmp_path):
    """Every byte of the frame is there, JPEG markers at both ends, but its content is not an
    image: only decoding finds it, mid-run. With --use_cache the requests scored before it are
    stored, and the run after the frame is repaired reads them back."""
    data = broken_copy(egoplan_data, tmp_path)
    doc = next(d for d in load_docs(data) if d["sample_id"] == 104)  # doc 4 of 8; frame 217 is its alone
    frame = Path(doc["media_path"]) / "frame_0000000217.jpg"
    intact = frame.read_bytes()
    frame.write_bytes(b"\xff\xd8\xff\xe0" + b"not an image" * 99 + b"\xff\xd9")
    # No frame decoded before the model loads (decoded then, the damage would stop the run before any model
    # call): it is found mid-run, where the cache must keep what was scored before it. The same settings in both
    # runs: they are part of what the response cache keys its answers by.
    args = dict(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}",
                extra_args=["--use_cache", str(tmp_path / "cache")], images_decoded_at_load="0")
    stopped = egoplan_run(data, tmp_path / "first", **args)
    assert stopped.returncode == 1 and stopped.results is None
    assert ("EgoPlan sample 104" in stopped.log and str(frame) in stopped.log
            and "EGOPLAN_EPIC_FRAMES_ROOT" in stopped.log)
    frame.write_bytes(intact)
    resumed = egoplan_run(data, tmp_path / "second", **args)
    assert resumed.returncode == 0
    hits = [int(line.split("ResponseCache: ")[1].split("/")[0]) for line in resumed.log.splitlines()
            if "ResponseCache: " in line and "cache hits" in line]
    assert sum(hits) >= 3 * 4  # the three questions before sample 104, four candidates each
    # The run's side file carries its results file's date-time.
    [results] = (tmp_path / "second").rglob("*_results.json")
    [submission] = (tmp_path / "second").rglob("*_submission_egoplan_val.json")
    assert submission.name.split("_submission_")[0] == results.name.removesuffix("_results.json")


def test_two_runs_into_one_output_path_never_overwrite_each_others_files(egoplan_data, tmp_path):
    """Started together: either they got different seconds (two complete sets of files) or the
    second refuses before any model call (exit 1, one set of files): never one set shared."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: egoplan_run(egoplan_data, tmp_path / "out", extra_args=["--log_samples"]),
                             range(2)))
    results = sorted(p.name for p in (tmp_path / "out").rglob("*_results.json"))
    samples = sorted(p.name for p in (tmp_path / "out").rglob("*_samples_egoplan_val.jsonl"))
    statuses = sorted(run.returncode for run in runs)
    if statuses == [0, 0]:
        assert len(set(results)) == len(set(samples)) == 2
    else:
        assert statuses == [0, 1] and len(results) == len(samples) == 1
        refused = next(run for run in runs if run.returncode == 1)
        assert "another run" in refused.log and "Running loglikelihood requests" not in refused.log
    assert not list((tmp_path / "out").rglob("*.lmms_egoplan.lock"))  # released at exit


def cached_rows(database: Path, table: str) -> int:
    import contextlib
    import sqlite3

    try:
        with contextlib.closing(sqlite3.connect(database)) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def stored_responses(cache: Path) -> int:
    """Responses the runs of ``cache`` stored in their per-run folders (not yet merged)."""
    return sum(cached_rows(db, "responses") for db in cache.glob("runs/*/rank_*.db"))


def cache_hits(log: str) -> int:
    return sum(int(line.split("ResponseCache: ")[1].split("/")[0]) for line in log.splitlines()
               if "ResponseCache: " in line and "cache hits" in line)


def stop(running, signum: int):
    """Send ``signum``; the run's end as lmms-eval left it."""
    running.signal(signum)
    return running.wait()


QUESTIONS = 3  # of the likelihood pass stopped mid-way


@pytest.mark.parametrize("signum", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_a_likelihood_pass_stopped_mid_way_keeps_every_scored_question(signum, egoplan_data, tiny_model, tmp_path):
    """egoplan_hf hands each question's four likelihoods to the response cache as it scores them: the
    stored count grows a question at a time, and the same command run again scores only the rest.

    The run is frozen (SIGSTOP) as soon as anything is stored, so what it stored can be counted
    before the signal under test ends it; a model a few hundred times the default tiny size makes a
    question take long enough that the first count is at most one question, whatever the machine's
    speed (each response is committed on its own, so the count may stop inside a question).
    lmms-eval's own storing, a chunk of ``RESPONSE_CHUNK_MIN_DOCS`` documents at a time, would show all
    12 responses of the run's 3 questions (``--limit 3``: the resumed run scores only what is left of them)."""
    import signal

    from lmms_egoplan.compat.durability import RESPONSE_CHUNK_MIN_DOCS
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval

    cache = tmp_path / "cache"
    model = tiny_model("qwen2_vl", hidden_size=512, num_layers=8)
    args = dict(model="egoplan_hf", model_args=f"pretrained={model}", tasks=["egoplan_val"],
                env=egoplan_data.env(), extra_args=["--use_cache", str(cache), "--limit", str(QUESTIONS)])
    running = start_lmms_eval(output_dir=tmp_path / "first", **args)
    running.wait_for(lambda: stored_responses(cache) > 0, poll=0.005, what="a question stored")
    running.signal(signal.SIGSTOP)
    frozen = stored_responses(cache)
    # a response at a time (the poll may find a question part-stored, or lag one question behind),
    # not lmms-eval's chunk of documents: all 3 questions (12 responses) at once
    assert 1 <= frozen <= 8 < 4 * min(QUESTIONS, RESPONSE_CHUNK_MIN_DOCS)
    running.signal(signum)
    running.signal(signal.SIGCONT)  # SIGTERM is handled once the process runs again
    stopped = running.wait()
    kept = stored_responses(cache)
    if signum == 15:
        assert stopped.returncode == 143
        assert frozen <= kept <= frozen + 4  # at most the question in flight added
        assert stopped.log.splitlines()[-1].startswith(
            f"lmms-egoplan: stopped by SIGTERM (exit status 143); the model responses it computed are kept in the "
            f"response cache {cache}")
    else:
        assert stopped.returncode == -9 and kept == frozen
    resumed = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert cache_hits(resumed.log) == kept and f"{kept}/{4 * QUESTIONS} cache hits" in resumed.log  # 4 choices each
    strict_json_files(resumed)


@pytest.mark.parametrize("signum", [15, 2], ids=["SIGTERM", "Ctrl-C"])
def test_a_run_without_use_cache_stopped_by_sigterm_or_ctrl_c_keeps_its_answers_and_the_same_command_resumes(
        signum, egoplan_data, tiny_model, tmp_path):
    """No --use_cache: the suite's run keeps its responses in <output_path>/response_cache as they are computed
    (said in one line); SIGTERM or Ctrl-C (SIGINT) keeps every one, ends with a line saying so (no traceback) and
    status 128 + the signal, and leaves no lock file, and the same command resumes from them."""
    import signal

    from lmms_egoplan.compat.durability import DEFAULT_RESPONSE_CACHE
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval

    output = tmp_path / "out"
    cache = output / DEFAULT_RESPONSE_CACHE
    model = tiny_model("qwen2_vl", hidden_size=512, num_layers=8)
    args = dict(model="egoplan_hf", model_args=f"pretrained={model}", tasks=["egoplan_val"], output_dir=output,
                env=egoplan_data.env(), extra_args=["--limit", str(QUESTIONS)])
    running = start_lmms_eval(**args)
    running.wait_for(lambda: stored_responses(cache) > 0, poll=0.005, what="a question stored")
    running.signal(signal.SIGSTOP)
    frozen = stored_responses(cache)
    running.signal(signum)
    running.signal(signal.SIGCONT)
    stopped = running.wait()
    kept = stored_responses(cache)
    # where the stop reached the run (the traceback's last frames), should it keep more than the question in flight
    assert 1 <= frozen <= kept <= frozen + 4, (frozen, kept, stopped.returncode, stopped.log_tail())
    assert (f"no --use_cache given: the model's responses are kept as they are computed in the response cache "
            f"{cache}") in stopped.log
    # Ctrl-C as SIGTERM, the last line saying what is kept, no traceback (lmms-eval alone prints Ctrl-C's); the status
    # a shell reports, 128 + the signal: SIGTERM's run exits 143, Ctrl-C's ends by SIGINT after its cleanup, as
    # Python's own does (so that a shell script running it stops too)
    assert stopped.returncode == (-signum if signum == signal.SIGINT else 128 + signum), stopped.log_tail()
    assert "Traceback" not in stopped.log and "KeyboardInterrupt" not in stopped.log, stopped.log_tail()
    assert stopped.log.splitlines()[-1].startswith(
        f"lmms-egoplan: stopped by {signal.Signals(signum).name} (exit status {128 + signum}); the model responses "
        f"it computed are kept in the response cache {cache}; the same command (the same --output_path) resumes "
        f"from them"), stopped.log_tail()
    assert not list(output.rglob("*.lmms_egoplan.lock"))
    resumed = run_lmms_eval(**args)
    assert cache_hits(resumed.log) == kept and f"{kept}/{4 * QUESTIONS} cache hits" in resumed.log
    assert not list(output.rglob("*.lmms_egoplan.lock"))


# lmms-eval's CLI in a process of its own, its run stopped by Ctrl-C and its cleanup slow (``sys.argv[1]``: where the
# stop finds it): each step said on stdout.
SLOW_CLEANUP = """
import sys, time
from lmms_eval import __main__ as cli
from lmms_egoplan.compat import durability
from lmms_egoplan.core.run import SuiteRun, hand_over

def cli_evaluate_single(args):
    hand_over(SuiteRun(), args)  # a run of the suite: its CLI arguments carry its run
    durability.stop_cleanly_on_sigterm()  # where a run of the suite switches it on
    try:
        print("running", flush=True)
        time.sleep(120)
    finally:
        print("cleaning up", flush=True)
        time.sleep(120)

cli.cli_evaluate_single = cli_evaluate_single
sys.argv = ["lmms-eval", "--model", "dummy", "--tasks", "plain_probe"]
cli.cli_evaluate()
"""


def test_a_second_ctrl_c_during_the_cleanup_ends_the_process_at_once(tmp_path):
    """The first Ctrl-C unwinds the run, saying so; its cleanup may take long (a merge, calls in flight): a second
    Ctrl-C does not wait for it."""
    import os
    import signal
    import subprocess
    import sys

    from lmms_egoplan.compat import OFF_SWITCH

    with open(tmp_path / "stderr", "w+") as stderr:
        process = subprocess.Popen([sys.executable, "-c", SLOW_CLEANUP], env={**os.environ, OFF_SWITCH: ""},
                                   stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            steps = []
            for signal_after in ("running", "cleaning up"):
                while (line := process.stdout.readline()) and line.strip() != signal_after:
                    pass
                steps.append(line.strip())
                process.send_signal(signal.SIGINT)
            process.wait(timeout=60)  # the cleanup would take 120 s
        finally:
            process.kill()
        stderr.seek(0)
        said = stderr.read()
    assert steps == ["running", "cleaning up"], said[-3000:]
    assert process.returncode == -signal.SIGINT, said[-3000:]
    assert "lmms-egoplan: SIGINT received: stopping" in said and "Traceback" not in said, said[-3000:]


def test_a_generation_pass_killed_mid_way_resumes_from_what_lmms_evals_cache_kept(tmp_path):
    """lmms-eval's own openai backend: the killed run's per-run cache folder, never merged by lmms-eval,
    is merged by the next run, which asks the model only for the answers it lacks. Two requests at a time
    (``num_concurrent=2``): at its default 32 the backend gets the 12 questions in one chunk, its concurrency kept."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=12)
    with ChatServer(lambda call: Reply("Two.", delay=0.2)) as model, \
            ChatServer(rating_responder(lambda call: "1")) as judge:
        args = egothink_run_args(data, model, judge, tmp_path, model_concurrency=2)
        running = start_lmms_eval(output_dir=tmp_path / "first", **args)
        running.wait_for(lambda: len(model.calls) >= 6, what="six answers")
        assert stop(running, 9).returncode == -9
        kept = stored_responses(tmp_path / "responses")
        assert kept >= 4 and judge.calls == []  # stored per chunk of documents; nothing judged yet
        model.reset()
        resumed = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert f"recovered {kept} responses of a killed run" in resumed.log
    assert len(model.calls) == 12 - kept and len(judge.calls) == 12
    assert resumed.metric("ego_think_counting", "judged") == 12


@pytest.mark.parametrize("signum", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_a_run_stopped_while_judging_asks_no_model_again_and_the_judge_only_what_it_had_not_answered(signum, tmp_path):
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=12)
    with ChatServer(lambda call: Reply("Two.")) as model, \
            ChatServer(rating_responder(lambda call: "1", delay=0.3)) as judge:
        args = egothink_run_args(data, model, judge, tmp_path, judge_concurrency="1")
        running = start_lmms_eval(output_dir=tmp_path / "first", **args)
        running.wait_for(lambda: len(judge.calls) >= 4, what="four judgements")
        stopped = stop(running, signum)
        judged = cached_rows(tmp_path / "judge" / JudgeCache.FILE_NAME, "judgements")
        asked = len(judge.calls)
        assert len(model.calls) == 12 and 3 <= judged <= asked
        if signum == 15:  # the call in flight is answered and stored; nothing more is asked
            assert stopped.returncode == 143 and judged == asked
            assert stopped.log.splitlines()[-1].endswith(
                f"judgements already made are in the judge cache {tmp_path / 'judge' / JudgeCache.FILE_NAME}")
        model.reset(), judge.reset()
        resumed = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert model.calls == [] and len(judge.calls) == 12 - judged
    assert resumed.metric("ego_think_counting", "judged") == 12 and resumed.metric("ego_think_counting",
                                                                                   "score") == 100.0


def test_a_run_stopped_while_judging_resumes_with_the_judge_moved_and_says_which_answer_changing_setting_moved(
        tmp_path):
    """The response cache keys the suite's answers by what changes them: the same command with the judge on another
    port, another judge timeout and the settings file at another path asks the model nothing again; a moved prompt
    preset is named before every answer is computed again."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=12)
    settings = tmp_path / "first.yaml"
    settings.write_text("egothink:\n  images_decoded_at_load: 4\n")
    with ChatServer(lambda call: Reply("Two.")) as model:
        with ChatServer(rating_responder(lambda call: "1", delay=0.3)) as judge:
            args = egothink_run_args(data, model, judge, tmp_path, judge_concurrency="1")
            args["env"]["LMMS_EGOPLAN_SETTINGS"] = str(settings)
            running = start_lmms_eval(output_dir=tmp_path / "first", **args)
            running.wait_for(lambda: len(judge.calls) >= 4, what="four judgements")
            assert stop(running, 15).returncode == 143
        judged = cached_rows(tmp_path / "judge" / JudgeCache.FILE_NAME, "judgements")
        moved_settings = tmp_path / "elsewhere" / "settings.yaml"
        moved_settings.parent.mkdir()
        moved_settings.write_text(settings.read_text())
        model.reset()
        with ChatServer(rating_responder(lambda call: "1")) as moved_judge:
            moved = egothink_run_args(data, model, moved_judge, tmp_path, judge_concurrency="1", judge_timeout="30")
            moved["env"]["LMMS_EGOPLAN_SETTINGS"] = str(moved_settings)
            assert moved["env"]["EGOTHINK_JUDGE_BASE_URL"] != args["env"]["EGOTHINK_JUDGE_BASE_URL"]
            resumed = run_lmms_eval(output_dir=tmp_path / "second", **moved)
            assert model.calls == [] and len(moved_judge.calls) == 12 - judged and cache_hits(resumed.log) == 12
            assert "were made with other settings" not in resumed.log
            assert resumed.metric("ego_think_counting", "judged") == 12

            moved["env"]["EGOTHINK_PROMPT_PRESET"] = "blip2"
            reworded = run_lmms_eval(output_dir=tmp_path / "third", **moved)
    assert len(model.calls) == 12 and cache_hits(reworded.log) == 0
    said = next(line for line in reworded.log.splitlines() if "task ego_think_counting's answers in" in line)
    assert reworded.log.index(said) < reworded.log.index("ResponseCache stats")
    assert "were made with other settings (setting prompt_preset None -> 'blip2'" in said, said


def test_answers_an_earlier_lmms_egoplan_stored_are_said_not_to_be_served_and_why(tmp_path):
    """A cache written with the whole config in its key (the switch off, as before) holds answers this run's keys
    cannot reach: one line says so before they are computed again."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=3)
    with ChatServer(lambda call: Reply("Two.")) as model, ChatServer(rating_responder(lambda call: "1")) as judge:
        args = egothink_run_args(data, model, judge, tmp_path)
        earlier = {**args, "env": {**args["env"],
                                   "LMMS_EGOPLAN_COMPAT_OFF": "durability.key_suite_answers_by_what_changes_them"}}
        run_lmms_eval(output_dir=tmp_path / "first", **earlier)
        model.reset()
        later = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert len(model.calls) == 3 and (
        f"the 3 answers of task ego_think_counting in {tmp_path / 'responses'} were stored by an earlier lmms-egoplan, "
        f"keyed by the task's whole config") in later.log


def stored_answers(cache: Path, task: str) -> dict[int, str]:
    """{doc: answer} of ``task`` the runs of ``cache`` stored (their run folders and the merged database)."""
    import contextlib
    import json
    import sqlite3

    answers = {}
    for database in [*cache.glob("runs/*/rank_*.db"), cache / "cache.db"]:
        if database.exists():
            with contextlib.closing(sqlite3.connect(database)) as db:
                answers |= {doc: json.loads(answer) for doc, answer in db.execute(
                    "SELECT doc_id, response FROM responses WHERE task_name = ?", (task,))}
    return answers


SAMPLED_TASK = "cosmos_reason1_av"  # official_reasoning: temperature 0.6, top-p 0.95; 4 questions in the demo's data


def test_a_sampled_run_stopped_part_way_resumes_from_its_answers_and_another_seed_draws_new_ones(tiny_model,
                                                                                                 tmp_path):
    """Cosmos-Reason1 under its sampled official_reasoning protocol on egoplan_hf: a random model's answers never hold
    a letter in an <answer> tag, so each is asked 10 times again (counted). Stopped by SIGTERM after its first answers,
    the same command asks the model only for the rest, keeps the answers it had (the samples file shows the stored
    texts) and counts every retry; the same cache with another --seed asks every question again, and lmms-eval's own
    seedbench, sampled in that run, is neither stored nor served (lmms-eval's rule for its tasks)."""
    import signal

    import yaml

    from lmms_egoplan.demo.cosmos_reason1 import build_fixture
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval, start_lmms_eval
    from tests.kit.lmms_eval_tasks import local_copies

    data = build_fixture(tmp_path / "data")
    cache = tmp_path / "cache"
    # 6 frames: the protocol's plan for the demo's clips; 240 tokens of context: about 40 new tokens per answer, so
    # that eleven generations per question take seconds on a CPU (the cut is said, the protocol's kwargs unchanged)
    args = dict(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')},max_frames=6,max_length=240",
                env=data.env(), extra_args=["--use_cache", str(cache)])
    running = start_lmms_eval(tasks=[SAMPLED_TASK], output_dir=tmp_path / "first", **args)
    running.wait_for(lambda: stored_responses(cache) > 0, poll=0.005, what="an answer stored")
    running.signal(signal.SIGSTOP)
    running.signal(signal.SIGTERM)
    running.signal(signal.SIGCONT)
    assert running.wait().returncode == 143
    kept = stored_answers(cache, SAMPLED_TASK)
    assert 1 <= len(kept) < 4

    resumed = run_lmms_eval(tasks=[SAMPLED_TASK], output_dir=tmp_path / "second", **args)
    assert cache_hits(resumed.log) == len(kept) and (
        f"{len(kept)}/4 cache hits (the suite's answers with their retry records; {len(kept)} sampled with --seed "
        f"0,1234,1234,1234 by an earlier run, reused") in resumed.log
    # lmms-eval's count: the rest asked (its "skipped": sampled), the kept ones read from the merged cache
    assert f"stats: {len(kept)} hits, {len(kept)} from shared DB, 0 misses, {4 - len(kept)} skipped" in resumed.log
    samples = resumed.samples(SAMPLED_TASK)
    assert {sample["doc_id"]: sample["filtered_resps"] for sample in samples if sample["doc_id"] in kept} == kept
    assert [sample["predictions"]["retries"] for sample in samples] == [10] * 4  # the served ones' records too
    assert resumed.metric(SAMPLED_TASK, "empty_answer_retried") == resumed.metric(SAMPLED_TASK,
                                                                                  "empty_after_retries") == 4

    first_seed = stored_answers(cache, SAMPLED_TASK)
    assert len(first_seed) == 4
    lmms_evals = local_copies(tmp_path / "lmms_eval_tasks", ["seedbench"], count=2)
    local_yaml = lmms_evals.include_path / "seedbench" / "seedbench_local.yaml"
    sampled = {**yaml.safe_load(local_yaml.read_text()),
               "generation_kwargs": {"max_new_tokens": 4, "temperature": 0.6, "do_sample": True}}
    local_yaml.write_text(yaml.safe_dump(sampled, sort_keys=False))
    reseeded = run_lmms_eval(tasks=[SAMPLED_TASK, "seedbench_local"], output_dir=tmp_path / "third",
                             include_path=lmms_evals.include_path,
                             **{**args, "env": {**data.env(), **lmms_evals.env},
                                "extra_args": [*args["extra_args"], "--seed", "1,2,3,4"]})
    assert cache_hits(reseeded.log) == 0 and "0 hits, 0 misses, 6 skipped" in reseeded.log
    answers = {sample["doc_id"]: sample["filtered_resps"] for sample in reseeded.samples(SAMPLED_TASK)}
    assert all(answers[doc] != answer for doc, answer in first_seed.items())  # drawn anew
    assert len(reseeded.samples("seedbench_local")) == 2 and stored_answers(cache, "seedbench_local") == {}


def test_a_commit_in_the_repository_that_holds_the_environment_leaves_every_stored_answer_served(egoplan_data,
                                                                                                 tmp_path):
    """lmms-eval put the commit of the repository around its installed package in every response key: with the
    environment inside a project's repository (``GIT_DIR`` stands for one here), a commit there between two runs
    made every stored answer unreachable. The same command after a commit asks the model nothing."""
    import subprocess

    def git(*arguments: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments], cwd=tmp_path, check=True,
                       capture_output=True)

    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    git("init", "-q", "project")
    git("-C", "project", "commit", "-q", "--allow-empty", "-m", "first")
    args = dict(model="dummy", model_args="", tasks=["egoplan_val"], check=False,
                env={**egoplan_data.env(scored_tokens="answer", loss_mean="every_scored_token"),
                     "GIT_DIR": str(tmp_path / "project" / ".git")},
                extra_args=["--use_cache", str(tmp_path / "cache")])
    first = run_lmms_eval(output_dir=tmp_path / "first", **args)
    assert first.returncode == 0 and cache_hits(first.log) == 0
    git("-C", "project", "commit", "-q", "--allow-empty", "-m", "second")
    again = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert again.returncode == 0 and "0 misses" in again.log and cache_hits(again.log) == 4 * 8  # 4 choices each


@pytest.mark.parametrize("damage", ["cut", "emptied", "copied alone"])
def test_a_response_cache_database_cut_short_is_rebuilt_from_the_runs_it_merged(damage, egoplan_data, tmp_path):
    """``cache.db`` cut to half (a copy that stopped) or to nothing: lmms-eval warned that it could not open it, asked
    the model every question again, and could not merge the answers into it, in every later run. It is set aside,
    said, and built again from the finished runs' folders under ``runs/``: the same command asks the model nothing.
    Copied without its run folders, it is set aside all the same, and the answers are computed again."""
    import shutil

    from tests.e2e.runs import truncate

    args = dict(extra_args=["--use_cache", str(tmp_path / "cache")])
    assert egoplan_run(egoplan_data, tmp_path / "first", **args).returncode == 0
    database = tmp_path / "cache" / "cache.db"
    truncate(database, keep=0 if damage == "emptied" else 0.5)
    if damage == "copied alone":
        shutil.rmtree(tmp_path / "cache" / "runs")
    again = egoplan_run(egoplan_data, tmp_path / "second", **args)
    served = 0 if damage == "copied alone" else 4 * 8  # 4 choices each
    assert again.returncode == 0 and cache_hits(again.log) == served and f"{served} hits" in again.log
    [aside] = database.parent.glob("cache.db.unreadable-*[0-9]")
    assert (f"ResponseCache: {database} is no readable SQLite database (" in again.log
            and f"it is kept as {aside}, and was built again with the {served} responses of {served // 32} finished "
                f"run(s)" in again.log)


def test_a_judge_of_other_weights_judges_again_and_the_same_weights_read_their_answers(tmp_path):
    """judge_revision names the judge's weights: the same command with another revision asks the judge again for every
    answer (and the model for none); back at the first revision, the judge is asked nothing."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=3)
    with ChatServer(lambda call: Reply("Two.")) as model, ChatServer(rating_responder(lambda call: "1")) as judge:
        def judged_with(revision: str) -> tuple[int, int]:
            model.reset(), judge.reset()
            run = run_lmms_eval(output_dir=tmp_path / revision, **egothink_run_args(data, model, judge, tmp_path,
                                                                                   judge_revision=revision * 40))
            assert run.metric("ego_think_counting", "judged") == 3
            return len(model.calls), len(judge.calls)

        assert judged_with("a") == (3, 3)
        assert judged_with("b") == (0, 3)
        assert judged_with("a") == (0, 0)
