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

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.core.files import read_jsonl, read_text, valid_text
from lmms_egoplan.core.run_state import RUN
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
    from lmms_egoplan.actplan.data import load_instances
    from lmms_egoplan.actplan.plans import candidates_from_jsonl
    from lmms_egoplan.actplan.synthetic import write_release_dataset
    from lmms_egoplan.egointent import data as egointent_data
    from lmms_egoplan.egointent.synthetic import write_dataset

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
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import task as egoplan
    from lmms_egoplan.egoplan.synthetic import build_fixture

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

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import lmms_eval_task as harness

    monkeypatch.setattr(RUN, "stamp", "20261122_101010")
    monkeypatch.setattr(RUN, "claimed_folders", set())
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    harness.claim_output_folder(args)
    assert (tmp_path / "models__tiny" / "20261122_101010.lmms_egoplan.lock").is_file()
    monkeypatch.setattr(RUN, "claimed_folders", set())  # as in another process
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(args)


def test_a_run_of_the_same_second_that_has_ended_is_found_by_its_files(tmp_path, monkeypatch):
    """The run that ended removed its lock, but its files are there: a slow start of a second run of the
    same second must not overwrite them."""
    from argparse import Namespace

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import lmms_eval_task as harness

    monkeypatch.setattr(RUN, "stamp", "20261122_101010")
    monkeypatch.setattr(RUN, "claimed_folders", set())
    folder = tmp_path / "models__tiny"
    folder.mkdir()
    (folder / "20261122_101010_results.json").write_text("{}")
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(args)
    assert not (folder / "20261122_101010.lmms_egoplan.lock").exists()


def test_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from lmms_egoplan.core.files import write_atomically

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

    from lmms_egoplan.demo import SUITES
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval
    from lmms_egoplan.registry import benchmark, load

    root = tmp_path_factory.mktemp("predict_only")
    with ExitStack() as resources:
        suites = [load(reference)(root / "data" / name, resources) for name, reference in SUITES.items()]
        env = {key: value for suite in suites for key, value in suite.env.items()}
        tasks = [task for name in SUITES for task in benchmark(name).tasks]
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
              "egoplan_bench2", "egoplan_bench2_likelihood",
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
    from lmms_egoplan.egoplan.synthetic import build_fixture

    return build_fixture(tmp_path_factory.mktemp("egoplan"))


def broken_copy(egoplan_data, tmp_path):
    """A copy of the EgoPlan data to damage."""
    import shutil

    from lmms_egoplan.egoplan.synthetic import build_fixture

    shutil.copytree(egoplan_data.root, tmp_path / "data")
    return build_fixture(tmp_path / "data")


def egoplan_run(data, output: Path, *, model: str = "dummy", model_args: str = "", extra_args=(), **settings):
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

    scored = {} if model == "egoplan_hf" else {"scored_tokens": "answer"}  # dummy scores no end-of-turn
    return run_lmms_eval(model=model, model_args=model_args, tasks=["egoplan_val"], output_dir=output,
                         env=data.env(**{**scored, **settings}), extra_args=list(extra_args), check=False)


def first_epic_frame(data) -> Path:
    doc = next(d for d in load_docs(data) if d["media_kind"] == "epic_frames")
    return Path(doc["media_path"]) / f"frame_{doc['clips'][0][-2]:010d}.jpg"


def load_docs(data, **settings):
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import task as egoplan

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
        from lmms_egoplan.fixtures.media import write_video

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
    from lmms_egoplan.egothink.synthetic import write_release
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

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

    from lmms_egoplan.actplan.synthetic import smoke_suite as actplan_suite
    from lmms_egoplan.egothink.synthetic import write_release
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

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


# ---------------------------------------------------------------------------------------------
# Paths from records stay inside their data folders (all four loaders)
# ---------------------------------------------------------------------------------------------


def escape_path(escape: str, root: Path, name: str, outside_file: Path) -> str:
    """A record's value for ``name`` under ``root`` that leads to ``outside_file`` (outside ``root``):
    with ``..``, as an absolute path, or through a symbolic link inside ``root``."""
    import os
    import shutil

    if escape == "dotdot":
        shutil.copy(outside_file, root.parent / f"{name}{outside_file.suffix}")
        return f"../{name}"
    if escape == "absolute":
        return str(outside_file.with_suffix(""))
    (root / f"{name}{outside_file.suffix}").symlink_to(outside_file)
    os.utime(root, None)
    return name


@pytest.mark.parametrize("escape, why", [("dotdot", "climbs out of it with '..'"), ("absolute", "is an absolute path"),
                                         ("symlink", "leads out of it through a symbolic link")])
def test_an_egoplan_video_id_that_leaves_its_root_is_an_error_naming_the_sample_and_field(escape, why, tmp_path):
    import shutil

    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import task as egoplan
    from lmms_egoplan.egoplan.synthetic import build_fixture

    data = build_fixture(tmp_path / "egoplan")
    records = data.records()
    record = next(r for r in records if r["video_source"] != "EpicKitchens")  # <ego4d root>/<video_id>.mp4
    outside = tmp_path / "elsewhere" / "video.mp4"
    outside.parent.mkdir()
    shutil.copy(data.ego4d_root / f"{record['video_id']}.mp4", outside)
    record["video_id"] = escape_path(escape, data.ego4d_root, "escaped", outside)
    data.validation_file.write_text(json.dumps(records))

    def load(**settings):
        resolved = resolve_settings(egoplan.EgoPlanSettings, task="t", metadata={"annotation_file": "EgoPlan_validation.json"},
                                    env_prefix="EGOPLAN", environ=data.env(**settings))
        return egoplan_data.load_samples(resolved, labelled=True).docs

    message = (rf"EgoPlan sample {record['sample_id']}: field video_id {re.escape(repr(record['video_id']))} {why}.*"
               rf"set EGOPLAN_ALLOW_PATHS_OUTSIDE_ROOT \(metadata.allow_paths_outside_root\) to true")
    with pytest.raises(egoplan_data.EgoPlanDataError, match=message):
        load()
    with pytest.raises(egoplan_data.EgoPlanDataError, match=message):
        load(skip_missing="true")  # not a missing file: never skipped in silence
    assert len(load(allow_paths_outside_root="true")) == len(records)


def test_an_egothink_image_that_leads_out_of_the_data_root_is_an_error_naming_the_record(tmp_path):
    from lmms_egoplan.egothink.data import DIMENSIONS, EgoThinkDataError, load_release_dimension
    from lmms_egoplan.egothink.synthetic import write_release

    root = write_release(tmp_path / "data", per_dimension=2)
    dimension = DIMENSIONS["Object_existence"]
    image = root / dimension.release_dirs[0] / "images" / "2.jpg"
    outside = tmp_path / "elsewhere.jpg"
    image.rename(outside)
    image.symlink_to(outside)
    annotations = root / dimension.release_dirs[0] / "annotations.json"
    with pytest.raises(EgoThinkDataError, match=rf"{re.escape(str(annotations))}, record 1: field image_path '2.jpg' leads "
                                                rf"out of it through a symbolic link \(to {re.escape(str(outside))}\).*"
                                                rf"EGOTHINK_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_release_dimension(root, dimension)
    assert len(load_release_dimension(root, dimension, allow_outside=True)) == 2


@pytest.mark.parametrize("escape, why", [("dotdot", "climbs out of it with '..'"), ("absolute", "is an absolute path"),
                                         ("symlink", "leads out of it through a symbolic link")])
def test_an_egointent_video_that_leaves_the_video_root_is_named_with_its_record_and_field(escape, why, tmp_path):
    from lmms_egoplan.egointent.data import EgoIntentDataError, load_steps
    from lmms_egoplan.egointent.synthetic import write_dataset

    annotations = write_dataset(tmp_path / "data")
    records = [json.loads(line) for line in annotations.read_text().splitlines()]
    record = next(r for r in records if "video" in r)
    outside = tmp_path / "elsewhere" / "video.mp4"
    outside.parent.mkdir()
    outside.write_bytes((annotations.parent / record["video"]).read_bytes())
    record["video"] = escape_path(escape, annotations.parent, "escaped", outside) + ".mp4"
    annotations.write_text("".join(json.dumps(r) + "\n" for r in records))
    number = records.index(record) + 1
    with pytest.raises(EgoIntentDataError, match=rf"record {number} \(step_id '{record['step_id']}'\): field video "
                                                 rf"{re.escape(repr(record['video']))} {why}.*EGOINTENT_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_steps(annotations)
    assert len(load_steps(annotations, allow_outside=True)) == len(records)


def test_an_actplan_instance_file_that_leads_out_of_the_release_is_an_error_naming_the_instance(tmp_path):
    from lmms_egoplan.actplan.data import ActPlanDataError, load_instances
    from lmms_egoplan.actplan.synthetic import write_release_dataset

    release = write_release_dataset(tmp_path / "ActPlan-1K", scenes=1, activities=1, samples=1)
    image = sorted(release.rglob("*.png"))[0]
    outside = tmp_path / "elsewhere.png"
    image.rename(outside)
    image.symlink_to(outside)
    instance = image.parent.relative_to(release / "annotation").as_posix()
    with pytest.raises(ActPlanDataError, match=rf"ActPlan-1K instance {re.escape(instance)}: {image.parent.name}/{image.name} "
                                               rf"leads out of it through a symbolic link.*ACTPLAN_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_instances(release)
    assert len(load_instances(release, allow_outside=True)) == 2


def test_a_dataset_path_in_a_stored_image_name_is_reduced_to_a_plain_extension(tmp_path):
    from lmms_egoplan.egothink.data import _stored_image

    for given, suffix in (("photo.png", ".png"), ("a/../../../etc/x.j pg", ".jpg"), ("x.jpg\n", ".jpg"), ("", ".jpg")):
        stored = _stored_image({"bytes": given.encode() + b"content", "path": given}, tmp_path, 0)
        assert stored.parent == tmp_path and stored.suffix == suffix and stored.is_file()


@pytest.mark.e2e
def test_a_record_whose_media_leaves_the_data_root_stops_the_run_naming_it_last(egoplan_data, tmp_path):
    data = broken_copy(egoplan_data, tmp_path)
    records = data.records()
    records[4]["video_id"] = "../../../../etc/passwd"
    data.validation_file.write_text(json.dumps(records))
    run = egoplan_run(data, tmp_path / "out")
    assert run.returncode == 1 and run.results is None
    assert run.log.splitlines()[-1].startswith(f"lmms-egoplan: error: EgoPlan sample {records[4]['sample_id']}: field "
                                               f"video_id '../../../../etc/passwd' climbs out of it with '..'")


# ---------------------------------------------------------------------------------------------
# rejudge: every row it cannot use named and counted, the rest judged; samples before keys
# ---------------------------------------------------------------------------------------------


def judged_rows(count: int) -> list[dict]:
    """Samples-file rows of an EgoThink task as a judged run logs them."""
    from lmms_egoplan.egothink.task import RUBRIC_NAME
    from lmms_egoplan.judge import judge_parts_item

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
                       judge.base_url, "--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"])
    assert status == 0 and len(judge.calls) == 3
    err = capsys.readouterr().err
    for number, why in ((4, "holds no judged item (doc_id 4)"), (5, "the judged item of metric score (doc_id 5) is broken"),
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


def test_rejudge_with_failed_judgements_exits_with_the_distinct_status_saying_how_to_finish(tmp_path, capsys):
    from lmms_egoplan.cli import main

    samples = tmp_path / "20261122_101010_samples_ego_think_counting.jsonl"
    samples.write_text("".join(json.dumps(row) + "\n" for row in judged_rows(4)))
    args = ["rejudge", str(samples), "--output", str(tmp_path / "out"), "--judge_model", "loopback-judge",
            "--judge_api_key_env", "", "--judge_cache_dir", str(tmp_path / "cache"), "--judge_retries", "0"]
    with ChatServer(lambda call: Reply(status=503) if call.text.endswith(("1", "3")) else rating_responder(lambda c: "1")(call)) as judge:
        assert main([*args, "--judge_base_url", judge.base_url]) == 3
        assert "2 judgements failed" in capsys.readouterr().err.splitlines()[-1]
        summary = json.loads(next((tmp_path / "out").glob("*_rejudged.json")).read_text())
        assert summary["ego_think_counting"]["failed"] == 2
        assert main([*args, "--judge_base_url", judge.base_url, "--judge_failed_exit_status", "0"]) == 0
        assert len(judge.calls) == 4 + 2  # the second run asked only for the two that had failed


# ---------------------------------------------------------------------------------------------
# The invocations users type: a task or model_arg misspelt, the plugin variable forgotten; the
# suite's error is the run's last line
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("case, model, tasks, plugin, last_line", [
    ("a misspelt task", "dummy", "egoplan_vall", True,
     "lmms-egoplan: error: --tasks: no task named egoplan_vall; did you mean egoplan_val or egoplan_val_gen?"),
    ("the plugin variable forgotten", "egoplan_hf", "egoplan_val", False,
     "lmms-egoplan: error: --tasks: egoplan_val is a task of lmms_egoplan, whose tasks lmms-eval indexes only when "
     "LMMS_EVAL_PLUGINS names it; add this line before the command: export LMMS_EVAL_PLUGINS=lmms_egoplan"),
    ("a misspelt suite task and no plugin variable", "egoplan_hf", "ego_think_countng", False,
     "lmms-egoplan: error: --tasks: no task named ego_think_countng; did you mean ego_think_counting or egothink_counting "
     "or ego_think_comparing?; add this line before the command: export LMMS_EVAL_PLUGINS=lmms_egoplan"),
])
def test_a_task_that_is_not_found_in_a_run_of_the_suite_exits_1_saying_what_to_type(case, model, tasks, plugin,
                                                                                     last_line, tmp_path):
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

    run = run_lmms_eval(model=model, model_args="pretrained=unused", tasks=[tasks], output_dir=tmp_path, check=False,
                        use_plugin=plugin)
    assert run.returncode == 1, case
    assert run.log.splitlines()[-1] == last_line


@pytest.mark.e2e
def test_an_unknown_model_arg_names_the_closest_one_on_the_last_line(egoplan_data, tiny_model, tmp_path):
    run = egoplan_run(egoplan_data, tmp_path, model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')},max_frame=8")
    assert run.returncode == 1
    assert run.log.splitlines()[-1] == ("lmms-egoplan: error: egoplan_hf: unknown model_args max_frame (did you mean "
                                        f"max_frames?); every model_arg is in {doc_page('backend.md')}")


@pytest.mark.e2e
def test_a_missing_annotation_folder_is_named_on_the_last_line_under_lmms_evals_traceback(egoplan_data, tmp_path):
    run = egoplan_run(egoplan_data, tmp_path, annotation_dir=str(tmp_path / "no_such_folder"))
    assert run.returncode == 1 and "Traceback" in run.log
    last = run.log.splitlines()[-1]
    assert last.startswith(f"lmms-egoplan: error: EgoPlan annotation file EgoPlan_validation.json not found: the folder "
                           f"{tmp_path / 'no_such_folder'}, named by EGOPLAN_ANNOTATION_DIR")


# ---------------------------------------------------------------------------------------------
# Killed mid-pass (SIGKILL) or preempted (SIGTERM): the same command resumes; nothing paid for is
# computed or judged twice
# ---------------------------------------------------------------------------------------------


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


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_a_likelihood_pass_stopped_mid_way_keeps_every_scored_question(signum, egoplan_data, tiny_model, tmp_path):
    """egoplan_hf hands each question's four likelihoods to the response cache as it scores them: the
    stored count grows a question at a time, and the same command run again scores only the rest.

    The run is frozen (SIGSTOP) as soon as anything is stored, so what it stored can be counted
    before the signal under test ends it; a model a few hundred times the default tiny size makes a
    question take long enough that the first count is at most one question, whatever the machine's
    speed (each response is committed on its own, so the count may stop inside a question).
    lmms-eval's own storing, a chunk of ``RESPONSE_CHUNK_MIN_DOCS`` documents at a time, would show 16."""
    import signal

    from lmms_egoplan.compat.durability import RESPONSE_CHUNK_MIN_DOCS
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval, start_lmms_eval

    cache = tmp_path / "cache"
    model = tiny_model("qwen2_vl", hidden_size=512, num_layers=8)
    args = dict(model="egoplan_hf", model_args=f"pretrained={model}", tasks=["egoplan_val"],
                env=egoplan_data.env(), extra_args=["--use_cache", str(cache)])
    running = start_lmms_eval(output_dir=tmp_path / "first", **args)
    running.wait_for(lambda: stored_responses(cache) > 0, poll=0.005, what="a question stored")
    running.signal(signal.SIGSTOP)
    frozen = stored_responses(cache)
    # a response at a time (the poll may find a question part-stored, or lag one question behind),
    # not lmms-eval's chunk of documents: all 8 questions (32 responses) at once
    assert 1 <= frozen <= 8 < 4 * min(8, RESPONSE_CHUNK_MIN_DOCS)
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
    assert cache_hits(resumed.log) == kept and f"{kept}/32 cache hits" in resumed.log  # 8 questions x 4 choices
    strict_json_files(resumed)


def strict_json_files(run) -> None:
    """Every results and samples file of the run parses as strict JSON (no NaN, no Infinity)."""
    for path in [*run.output_dir.rglob("*_results.json"), *run.output_dir.rglob("*_samples_*.jsonl")]:
        for line in [path.read_text()] if path.suffix == ".json" else path.read_text().splitlines():
            json.loads(line, parse_constant=refuse_constant)


def refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def egothink_run_args(data: Path, model, judge, cache: Path, **settings) -> dict:
    env = {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data), "EGOTHINK_JUDGE_BASE_URL": judge.base_url,
           "EGOTHINK_JUDGE_MODEL": "loopback-judge", "EGOTHINK_JUDGE_API_KEY_ENV": "",
           "EGOTHINK_JUDGE_CACHE_DIR": str(cache / "judge"),
           **{f"EGOTHINK_{name.upper()}": value for name, value in settings.items()}}
    return dict(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                tasks=["ego_think_counting"], env=env, extra_args=["--use_cache", str(cache / "responses")])


@pytest.mark.e2e
def test_a_generation_pass_killed_mid_way_resumes_from_what_lmms_evals_cache_kept(tmp_path):
    """lmms-eval's own openai backend: the killed run's per-run cache folder, never merged by lmms-eval,
    is merged by the next run, which asks the model only for the answers it lacks."""
    from lmms_egoplan.egothink.synthetic import write_release
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval, start_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=12)
    with ChatServer(lambda call: Reply("Two.", delay=0.2)) as model, ChatServer(rating_responder(lambda call: "1")) as judge:
        args = egothink_run_args(data, model, judge, tmp_path)
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


@pytest.mark.e2e
@pytest.mark.parametrize("signum", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_a_run_stopped_while_judging_asks_no_model_again_and_the_judge_only_what_it_had_not_answered(signum, tmp_path):
    from lmms_egoplan.egothink.synthetic import write_release
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval, start_lmms_eval
    from lmms_egoplan.judge import JudgeCache

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
    assert resumed.metric("ego_think_counting", "judged") == 12 and resumed.metric("ego_think_counting", "score") == 100.0


# ---------------------------------------------------------------------------------------------
# Failed judgements: results first, then a distinct exit status and the command that finishes them
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_judge_failing_after_a_good_preflight_ends_the_run_with_status_3_and_the_rejudge_command(tmp_path):
    import shlex
    import subprocess
    import sys

    from lmms_egoplan.egothink.synthetic import write_release
    from lmms_egoplan.fixtures.lmms_eval_run import run_lmms_eval

    data = write_release(tmp_path / "data", per_dimension=3)
    state = {"down": True}
    with ChatServer(lambda call: Reply("Two.")) as model, \
            ChatServer(lambda call: Reply(status=503) if state["down"] else rating_responder(lambda c: "1")(call)) as judge:
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
        finished = subprocess.run([sys.executable, "-m", "lmms_egoplan.cli", *command[1:]], capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert len(judge.calls) == 3
    rejudged = json.loads(next(samples.parent.glob("*_rejudged.json")).read_text(), parse_constant=refuse_constant)
    assert rejudged["ego_think_counting"]["score"] == 100.0 and rejudged["ego_think_counting"]["failed"] == 0
