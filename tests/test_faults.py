"""The fault suite: broken inputs, judge faults, crashes and concurrent runs, each reproduced with
real files, a real loopback server or the real ``lmms-eval`` CLI, and the fixed behaviour asserted:
a failed run says so (exit status), a bad input names itself, nothing a user paid for is lost.

Sections follow the run-integrity issue: settings and records, media, outputs, judges,
predict-only and rejudge, the backend's chat template. End-to-end cases are marked e2e.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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
from lmms_egoplan.records import read_jsonl, read_text, valid_text
from lmms_egoplan.testing.judge_server import ChatServer, Reply, rating_responder

ZERO_HALF_ONE = bracket_rating((0, 0.5, 1))


def judge_for(server: ChatServer, cache_dir: Path | None = None, retries: int = 2) -> Judge:
    backend = OpenAIChatBackend("loopback-judge", base_url=server.base_url, api_key_env="", timeout=10)
    return Judge(backend, cache=JudgeCache(cache_dir) if cache_dir else None, retries=retries, backoff=0.01)


def prompts(n: int, text: str = "Answer {i}") -> list[JudgeRequest]:
    return [JudgeRequest.from_prompt(f"q{i}", text.format(i=i)) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Text files
# ---------------------------------------------------------------------------------------------


def test_text_that_is_not_utf8_is_an_error_naming_file_line_and_column(tmp_path):
    path = tmp_path / "annotations.jsonl"
    path.write_bytes(b'{"a": "fine"}\n{"b": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"annotations\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 11\)"):
        read_text(path)
    with pytest.raises(ValueError, match=r"annotations\.jsonl:2: not UTF-8"):
        list(read_jsonl(path))


def test_every_reader_of_text_names_a_file_that_is_not_utf8(tmp_path):
    from lmms_egoplan import egointent_data
    from lmms_egoplan.actplan_data import load_instances
    from lmms_egoplan.actplan_plans import candidates_from_jsonl
    from lmms_egoplan.testing.actplan import write_release_dataset
    from lmms_egoplan.testing.egointent import write_dataset

    annotations = write_dataset(tmp_path / "egointent")
    annotations.write_bytes(annotations.read_bytes().replace(b"loosen", b"l\xf6osen", 1))
    with pytest.raises(ValueError, match=rf"{annotations}:\d+: not UTF-8 text"):
        egointent_data.load_steps(annotations)
    release = write_release_dataset(tmp_path / "actplan" / "ActPlan-1K", scenes=1, activities=1, samples=1)
    description = next(release.rglob("task_description_0.txt"))
    description.write_bytes(b"Put the cups away.\nCaf\xe9 table.\n")
    with pytest.raises(ValueError, match=rf"{description}:2: not UTF-8 text \(byte 0xe9 at column 4\)"):
        load_instances(release)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b'{"candidate": "walk_to(sink)", "reference": "walk_to(sink)"}\n{"candidate": "\xff"}\n')
    with pytest.raises(ValueError, match=rf"{pairs}:2: not UTF-8"):
        candidates_from_jsonl(pairs)


@pytest.mark.parametrize("field, value, message", [
    ("current_observation_frame", "abc", "current_observation_frame must be a frame number (an integer >= 0), got 'abc'"),
    ("sample_id", [1], "sample_id must be an integer, got [1]"),
    ("choice_a", 3, "choice_a must be a non-empty string, got 3"),
    ("question", None, "question must be a non-empty string, got None"),
])
def test_egoplan_record_fields_of_the_wrong_type_are_named_at_load(field, value, message, tmp_path):
    from lmms_egoplan import egoplan, egoplan_data
    from lmms_egoplan.settings import resolve_settings
    from lmms_egoplan.testing.egoplan import build_fixture

    data = build_fixture(tmp_path / "egoplan")
    records = data.records()
    records[2][field] = value
    annotation = tmp_path / "EgoPlan_validation.json"
    annotation.write_text(json.dumps(records))
    settings = resolve_settings(egoplan.EgoPlanSettings, task="t", metadata={"annotation_file": str(annotation)},
                                env_prefix="EGOPLAN", environ=data.env())
    with pytest.raises(egoplan_data.EgoPlanDataError, match=rf"{annotation}, record #2 .*: {re.escape(message)}"):
        egoplan_data.load_samples(settings, labelled=True)


def test_lone_surrogates_become_replacement_characters():
    assert valid_text("Two plates \udcff.") == "Two plates \ufffd."
    assert valid_text("naïve 😀") == "naïve 😀"


# ---------------------------------------------------------------------------------------------
# Judges
# ---------------------------------------------------------------------------------------------


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


def test_a_malformed_200_body_is_retried_like_a_server_error(tmp_path):
    html = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    with ChatServer(lambda call: Reply(body=html) if call.attempt == 0 else Reply("Rating: [[0.5]]")) as server:
        results = judge_for(server, tmp_path).run(prompts(2), ZERO_HALF_ONE, progress=False)
    assert results.judged == 2 and [j.rating for j in results.judgements] == [0.5, 0.5]
    assert results.calls == 4


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


# ---------------------------------------------------------------------------------------------
# Outputs
# ---------------------------------------------------------------------------------------------


def test_a_second_run_of_the_same_second_into_the_same_folder_is_refused(tmp_path, monkeypatch):
    from argparse import Namespace

    from lmms_egoplan import harness
    from lmms_egoplan.errors import InputError

    monkeypatch.setattr(harness, "_run_stamp", "20261122_101010")
    monkeypatch.setattr(harness, "_claimed_folders", set())
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    harness.claim_output_folder(args)
    assert (tmp_path / "models__tiny" / "20261122_101010.lmms_egoplan.lock").is_file()
    monkeypatch.setattr(harness, "_claimed_folders", set())  # as in another process
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(args)


def test_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from lmms_egoplan.records import write_atomically

    path = write_atomically(tmp_path / "submission.json", "[1, 2, 3]\n")
    monkeypatch.setattr("os.replace", lambda *_: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, "[4, 5")
    assert path.read_text() == "[1, 2, 3]\n" and [p.name for p in tmp_path.iterdir()] == ["submission.json"]


# ---------------------------------------------------------------------------------------------
# Predict-only runs and rejudge
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def predict_only(tmp_path_factory, tiny_model):
    """Every task of the suite in one ``--predict_only`` run (its judge is never asked)."""
    from contextlib import ExitStack

    from lmms_egoplan.smoke import SUITES, load_suite_builder, suite_name
    from lmms_egoplan.testing.lmms_eval_run import run_lmms_eval

    root = tmp_path_factory.mktemp("predict_only")
    with ExitStack() as resources:
        suites = [load_suite_builder(entry)(root / "data" / suite_name(entry), resources) for entry in SUITES]
        env = {key: value for suite in suites for key, value in suite.env.items()}
        tasks = [task for suite in suites for task in suite.tasks]
        run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=tasks,
                            output_dir=root / "out", env=env, check=False,
                            extra_args=["--predict_only", "--gen_kwargs", "max_new_tokens=8"])
    return run, tasks


@pytest.mark.e2e
def test_predict_only_works_for_every_suite_task(predict_only):
    run, tasks = predict_only
    assert run.returncode == 0, run.log_tail()
    logged = {path.name.split("_samples_")[1].removesuffix(".jsonl") for path in run.output_dir.rglob("*_samples_*.jsonl")}
    leaves = {"egoplan_val", "egoplan_test", "egoplan_val_gen", "egointent", "actplan1k", "actplan1k_text_only",
              *(f"ego_think_{d}" for d in ("existence", "attribute", "affordance", "activity", "location", "spatial",
                                          "counting", "comparing", "situated", "forecasting", "navigation", "assistance"))}
    assert logged == leaves
    for task in leaves:
        assert all(sample["filtered_resps"] for sample in run.samples(task))


@pytest.mark.e2e
def test_rejudge_judges_predict_only_logs_and_reports_every_group(predict_only, tmp_path):
    from lmms_egoplan.cli import main

    run, _ = predict_only
    judge_args = ["--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"]
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        assert main(["rejudge", str(run.output_dir), "--output", str(tmp_path), "--judge_base_url", judge.base_url,
                     *judge_args]) == 0
    summary = json.loads(next(tmp_path.glob("*_rejudged.json")).read_text())
    capabilities = {f"ego_think_capability_{c}" for c in ("object", "activity", "localization", "reasoning",
                                                           "forecasting", "planning")}
    assert capabilities | {"ego_think", "egointent"} <= summary.keys()
    assert not summary.keys() & {"egoplan_val", "actplan1k"}  # nothing of theirs is judged
    dimensions = [task for task in summary if task.startswith("ego_think_") and task not in capabilities]
    assert len(dimensions) == 12 and all(summary[task]["score"] == 100.0 for task in dimensions)
    assert summary["ego_think"]["judged"] == sum(summary[task]["judged"] for task in dimensions) > 0
    # EgoIntent's judge items are there; a random model writes none of the three fields, and a missing
    # field is not sent to the judge (as in the run itself).
    assert (summary["egointent"]["judged"], summary["egointent"]["failed"]) == (0, 0)
    assert len(judge.calls) == summary["ego_think"]["judged"]


@pytest.mark.e2e
def test_rejudge_with_nothing_to_judge_exits_non_zero_saying_so(predict_only, tmp_path, capsys):
    from lmms_egoplan.cli import main

    run, _ = predict_only
    [egoplan_log] = run.output_dir.rglob("*_samples_egoplan_val.jsonl")
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        status = main(["rejudge", str(egoplan_log), "--output", str(tmp_path), "--judge_base_url", judge.base_url,
                       "--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"])
    assert status == 2 and judge.calls == []
    assert "nothing to judge" in capsys.readouterr().err
    assert not list(tmp_path.glob("*_rejudged.json"))


# ---------------------------------------------------------------------------------------------
# Through the lmms-eval CLI: a failed run exits non-zero, names what to fix, loses nothing
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def egoplan_data(tmp_path_factory):
    from lmms_egoplan.testing.egoplan import build_fixture

    return build_fixture(tmp_path_factory.mktemp("egoplan"))


def broken_copy(egoplan_data, tmp_path):
    """A copy of the EgoPlan data to damage."""
    import shutil

    from lmms_egoplan.testing.egoplan import build_fixture

    shutil.copytree(egoplan_data.root, tmp_path / "data")
    return build_fixture(tmp_path / "data")


def egoplan_run(data, output: Path, *, model: str = "dummy", model_args: str = "", extra_args=(), **settings):
    from lmms_egoplan.testing.lmms_eval_run import run_lmms_eval

    scored = {} if model == "egoplan_hf" else {"scored_tokens": "answer"}  # dummy scores no end-of-turn
    return run_lmms_eval(model=model, model_args=model_args, tasks=["egoplan_val"], output_dir=output,
                         env=data.env(**{**scored, **settings}), extra_args=list(extra_args), check=False)


def first_epic_frame(data) -> Path:
    doc = next(d for d in load_docs(data) if d["media_kind"] == "epic_frames")
    return Path(doc["media_path"]) / f"frame_{doc['clips'][0][-2]:010d}.jpg"


def load_docs(data, **settings):
    from lmms_egoplan import egoplan, egoplan_data
    from lmms_egoplan.settings import resolve_settings

    resolved = resolve_settings(egoplan.EgoPlanSettings, task="check", metadata={"annotation_file": "EgoPlan_validation.json"},
                                env_prefix="EGOPLAN", environ=data.env(**settings))
    return egoplan_data.load_samples(resolved, labelled=True).docs


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


@pytest.mark.e2e
@pytest.mark.parametrize("case, settings, message", [
    ("a value of the wrong type", {"num_frames": "abc"}, "EGOPLAN_NUM_FRAMES: expected an integer, got 'abc'"),
    ("a misspelt setting", {"numframes": "16"}, "EGOPLAN_NUMFRAMES names no setting; did you mean EGOPLAN_NUM_FRAMES?"),
    ("a value out of range", {"max_side": "-5"}, "EGOPLAN_MAX_SIDE (metadata.max_side) must be at least 1, got -5"),
])
def test_bad_settings_stop_the_run_with_exit_status_1(case, settings, message, egoplan_data, tmp_path):
    run = egoplan_run(egoplan_data, tmp_path, **settings)
    assert run.returncode == 1 and run.results is None, case
    assert message in run.log and "lmms-egoplan: the evaluation failed" in run.log


@pytest.mark.e2e
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_an_unusable_frame_is_named_at_load_or_skipped_and_counted(damage, egoplan_data, tmp_path):
    data = broken_copy(egoplan_data, tmp_path)
    frame = first_epic_frame(data)
    frame.write_bytes(b"") if damage == "empty" else truncate(frame, 0.6)
    stopped = egoplan_run(data, tmp_path / "stopped")
    assert stopped.returncode == 1 and stopped.results is None
    assert f"{damage}" in stopped.log and str(frame) in stopped.log and "EGOPLAN_EPIC_FRAMES_ROOT" in stopped.log
    skipped = egoplan_run(data, tmp_path / "skipped", skip_missing="true")
    assert skipped.returncode == 0 and skipped.metric("egoplan_val", "skipped_samples") == 1


@pytest.mark.e2e
@pytest.mark.parametrize("damage", ["empty", "not a video", "cut short"])
def test_an_unusable_clip_is_named_at_load(damage, egoplan_data, tmp_path):
    data = broken_copy(egoplan_data, tmp_path)
    clip = data.clips_dir / "106.mp4"
    if damage == "cut short":  # its index comes first, so it opens; only its packets show the loss
        from lmms_egoplan.testing.media import write_video

        record = next(r for r in data.records() if r["sample_id"] == 106)
        start = record["task_progress_metadata"][0]["start_frame"]
        write_video(clip, first_index=start, num_frames=record["current_observation_frame"] - start + 1, faststart=True)
        truncate(clip, 0.5)
    else:
        clip.write_bytes(b"" if damage == "empty" else b"\x00\x01garbage" * 999)
    run = egoplan_run(data, tmp_path / "out", visual_source="clips")
    assert run.returncode == 1 and "sample 106" in run.log and str(clip) in run.log and "EGOPLAN_CLIPS_DIR" in run.log
    assert "Running loglikelihood requests" not in run.log
    if damage == "cut short":  # the packets stop early, or the last one read is marked damaged
        assert "cut short" in run.log or "damaged packet" in run.log
        skipped = egoplan_run(data, tmp_path / "skipped", visual_source="clips", skip_missing="true")
        assert skipped.returncode == 0 and skipped.metric("egoplan_val", "skipped_samples") == 1


@pytest.mark.e2e
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
    args = dict(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}",
                extra_args=["--use_cache", str(tmp_path / "cache")])
    stopped = egoplan_run(data, tmp_path / "first", **args)
    assert stopped.returncode == 1 and stopped.results is None
    assert "EgoPlan sample 104" in stopped.log and str(frame) in stopped.log and "EGOPLAN_EPIC_FRAMES_ROOT" in stopped.log
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


@pytest.mark.e2e
def test_an_output_path_that_cannot_be_written_fails_before_any_model_call(egoplan_data, tmp_path):
    blocker = tmp_path / "some_file"
    blocker.write_text("not a folder")
    run = egoplan_run(egoplan_data, tmp_path / "cwd", extra_args=["--output_path", str(blocker / "out")])
    assert run.returncode == 1 and f"--output_path {blocker / 'out'}: cannot write into" in run.log
    assert "Running loglikelihood requests" not in run.log


@pytest.mark.e2e
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


@pytest.mark.e2e
def test_a_judge_that_does_not_answer_stops_the_run_before_generation(tmp_path):
    from lmms_egoplan.testing.egothink import write_release
    from lmms_egoplan.testing.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=1)
    with ChatServer(lambda call: Reply("an answer")) as model:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                            tasks=["ego_think_counting"], output_dir=tmp_path / "out", check=False,
                            env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data),
                                 "EGOTHINK_JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "EGOTHINK_JUDGE_MODEL": "j",
                                 "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 1 and model.calls == []  # not one answer generated
    assert "did not answer a test request" in run.log and "EGOTHINK_JUDGE_PREFLIGHT" in run.log


@pytest.mark.e2e
def test_lone_surrogates_in_model_output_are_judged_and_scored_and_logged(tmp_path):
    """An OpenAI-compatible model whose output holds a lone surrogate (broken bytes): the judged
    task and ActPlan score it, and the samples file holds every sample."""
    from contextlib import ExitStack

    from lmms_egoplan.testing.actplan import smoke_suite as actplan_suite
    from lmms_egoplan.testing.egothink import write_release
    from lmms_egoplan.testing.lmms_eval_run import run_lmms_eval

    with ExitStack() as resources, ChatServer(lambda call: Reply("Two plates \udcff.\nwalk_to(sink\udcff)")) as model, \
            ChatServer(rating_responder(lambda call: "1")) as judge:
        actplan = actplan_suite(tmp_path / "actplan", resources)
        env = {**actplan.env, "EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(write_release(tmp_path / "think", 1)),
               "EGOTHINK_JUDGE_BASE_URL": judge.base_url, "EGOTHINK_JUDGE_MODEL": "loopback-judge",
               "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "cache")}
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                            tasks=["ego_think_counting", "actplan1k"], output_dir=tmp_path / "out", env=env, check=False)
    assert run.returncode == 0, run.log_tail()
    assert run.metric("ego_think_counting", "score") == 100.0 and run.metric("ego_think_counting", "failed") == 0
    assert "Two plates \ufffd." in judge.calls[0].text
    assert run.metric("actplan1k", "plan_length") == 1
    for task in ("ego_think_counting", "actplan1k"):
        assert len(run.samples(task)) > 0


@pytest.mark.e2e
def test_a_chat_template_without_visual_placeholders_names_the_model_and_the_model_arg(egoplan_data, tiny_model, tmp_path):
    template = tmp_path / "text-only.jinja"
    template.write_text("{% for m in messages %}{{ m['role'] }}: {% for p in m['content'] %}{% if p['type'] == 'text' %}"
                        "{{ p['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}assistant: "
                        "{% endif %}")
    checkpoint = tiny_model("qwen2_vl")
    run = egoplan_run(egoplan_data, tmp_path / "out", model="egoplan_hf",
                      model_args=f"pretrained={checkpoint},chat_template={template}")
    assert run.returncode == 1
    assert f"{checkpoint}: the chat template renders 0 video placeholder(s)" in run.log
    assert "pass chat_template=<path" in run.log
