"""EgoPlan-Bench end to end: the three tasks through the real `lmms-eval` CLI, the suite's backend,
a tiny random Qwen2-VL and synthetic data in the official layouts."""

import base64
import io
import json

import pytest
from PIL import Image

from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.core.statistics import parse_bins
from lmms_egoplan.demo.egoplan import build_fixture
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.egoplan import data as egoplan_data
from lmms_egoplan.egoplan import settings as egoplan_settings
from lmms_egoplan.egoplan import task as egoplan

# End to end: the real lmms-eval CLI in subprocesses.

TASKS = ("egoplan_val", "egoplan_test", "egoplan_val_gen")
UNAVAILABLE_SAMPLE = 109  # an extra record whose frame folder does not exist


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    fixture = build_fixture(tmp_path_factory.mktemp("egoplan"))
    records = fixture.records()
    records.append({**records[0], "sample_id": UNAVAILABLE_SAMPLE, "video_id": "P09_99"})
    fixture.validation_file.write_text(json.dumps(records))
    return fixture


@pytest.fixture(scope="module")
def run(fixture, tiny_model, tmp_path_factory):
    # A random model's answers are noise whatever their length: 16 new tokens keep the run short.
    return run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=TASKS,
                         output_dir=tmp_path_factory.mktemp("out"), env=fixture.env(skip_missing="true"),
                         extra_args=["--batch_size", "8", "--gen_kwargs", "max_new_tokens=16"])


def evaluated_docs(fixture, split="validation"):
    """The docs lmms-eval evaluated, in doc_id order (as the tasks load them)."""
    annotation = "EgoPlan_validation.json" if split == "validation" else "EgoPlan_test.json"
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="check",
                                metadata={"annotation_file": annotation}, env_prefix="EGOPLAN",
                                environ=fixture.env(skip_missing="true"))
    return egoplan_data.load_samples(settings, labelled=split == "validation").docs


def mean(values):
    return sum(values) / len(values)


def test_reported_accuracies_are_those_of_the_logged_candidate_losses(run, fixture):
    docs, samples = evaluated_docs(fixture), run.samples("egoplan_val")
    assert len(samples) == len(docs) == len(fixture.records()) - 1
    correct = {}
    for doc, sample in zip(docs, samples):
        losses = egoplan.candidate_losses(sample["filtered_resps"])
        assert len(losses) == 4 and len(set(losses)) > 1  # a real model scored four different continuations
        correct[doc["sample_id"]] = float(losses.index(min(losses)) == egoplan.doc_to_target(doc))
        # The logged sample shows what it was scored and binned by.
        record = sample["predictions"]
        assert record["candidate_losses"] == dict(zip("ABCD", losses)) and record["gold"] == doc["golden_choice_idx"]
        assert record["label"] == "ABCD"[losses.index(min(losses))]
        assert (record["video_source"], record["progress_length"], record["progress_bin"]) == (
            doc["video_source"], doc["progress_length"], doc["progress_bucket"])
        assert (record["goal_answer_similarity"], record["similarity_level"]) == pytest.approx(
            (doc["goal_answer_similarity"], doc["similarity_level"]))
    results = run.results["results"]["egoplan_val"]
    breakdowns = {"accuracy": list(correct)}
    for source, suffix in egoplan_data.VIDEO_SOURCES.items():
        breakdowns[f"accuracy_{suffix}"] = [d["sample_id"] for d in docs if d["video_source"] == source]
    for value_bin in parse_bins(egoplan_settings.EgoPlanSettings.progress_length_bins):
        breakdowns[f"accuracy_progress_{value_bin.label}"] = [d["sample_id"] for d in docs
                                                              if d["progress_length"] in value_bin]
    for level in egoplan_data.SIMILARITY_LEVELS:
        breakdowns[f"accuracy_similarity_{level}"] = [d["sample_id"] for d in docs if d["similarity_level"] == level]
    for metric, members in breakdowns.items():
        values = [correct[sample_id] for sample_id in members]
        assert run.metric("egoplan_val", metric) == pytest.approx(mean(values))
        if metric != "accuracy":  # each breakdown's sample count beside it
            assert run.metric("egoplan_val", "n_" + metric.removeprefix("accuracy_")) == len(members)
        stderr = results[f"{metric},none".replace(",", "_stderr,")]
        if len(values) > 1:  # lmms-eval's mean_stderr: the sample standard deviation over sqrt(n)
            spread = sum((v - mean(values)) ** 2 for v in values) / (len(values) - 1)
            assert stderr == pytest.approx((spread / len(values)) ** 0.5)
    assert sorted(len(breakdowns[f"accuracy_similarity_{level}"]) for level in egoplan_data.SIMILARITY_LEVELS) == [2, 3,
                                                                                                                   3]
    assert run.metric("egoplan_val", "skipped_samples") == 1
    recorded = run.results["configs"]["egoplan_val"]["metadata"]
    assert recorded["version"] == 6 and recorded["frame_sampling"] == "official"
    assert recorded["scored_tokens"] == "answer_and_end_of_turn" and recorded["loss_mean"] == "nonzero_loss_tokens"


def test_validation_writes_its_submission_file_marked_partial_when_samples_were_skipped(run, fixture):
    assert not list(run.output_dir.rglob("*_submission_egoplan_val.json"))  # one sample was skipped
    [file] = run.output_dir.rglob("*_submission_partial_egoplan_val.json")
    assert file.parent == run.results_file.parent
    submission = json.loads(file.read_text())
    egoplan.validate_submission(submission, sample_ids=[d["sample_id"] for d in evaluated_docs(fixture)])
    labels = {s["predictions"]["sample_id"]: s["predictions"]["label"] for s in run.samples("egoplan_val")}
    assert {entry["sample_id"]: entry["label"] for entry in submission} == labels
    assert "1 skipped for missing media" in run.log and "not a leaderboard submission" in run.log
    assert run.metric("egoplan_val", "predictions") == len(submission)


def test_a_run_names_its_results_file_which_lmms_eval_does_not_and_the_report_command(run):
    assert (f"lmms-egoplan: results in {run.results_file}; `lmms-egoplan report {run.results_file.parent.parent}` "
            f"sets them beside the papers' rows") in run.log


def test_test_split_writes_a_valid_submission_and_reports_no_accuracy(run, fixture):
    files = list(run.output_dir.rglob("*_submission_egoplan_test.json"))
    assert [file.parent for file in files] == [run.results_file.parent]  # one file, beside the results
    submission = json.loads(files[0].read_text())
    test_ids = [r["sample_id"] for r in fixture.records("test")]
    egoplan.validate_submission(submission, sample_ids=test_ids)
    for entry, sample in zip(submission, run.samples("egoplan_test")):  # both in sample-id order here
        losses = egoplan.candidate_losses(sample["filtered_resps"])
        assert entry["label"] == "ABCD"[losses.index(min(losses))]
    reported = {key.split(",")[0] for key in run.results["results"]["egoplan_test"]} - {"alias"}
    assert run.metric("egoplan_test", "predictions") == len(test_ids)
    assert not any(key.startswith("accuracy") for key in reported)


def test_the_report_names_each_copy_of_this_runs_results_with_a_field_of_another_type(run, tmp_path):
    """lmms-egoplan report over this run's results file copied with every field (any depth) replaced
    by values of the other types: each copy it cannot read named with the field, the rest reported."""
    from tests.report.hostile import check_hostile_copies

    task_fields = {(section, task): (dict,) for section in ("results", "configs", "n-samples") for task in TASKS}
    named = check_hostile_copies(run.results_file, tmp_path, {
        **task_fields, **{("configs", task, "metadata"): (dict,) for task in TASKS},
        ("config",): (dict,), ("config", "model_args"): (str, dict), ("config", "model"): (str,),
        ("config", "resolved_cli_args"): (dict,), ("config", "resolved_cli_args", "timezone"): (str,),
        ("configs",): (dict,), ("n-samples",): (dict,), ("group_subtasks",): (dict,), ("model_name",): (str,)})
    assert len(named) > 100


def test_generative_variant_scores_the_extracted_letters(run, fixture):
    docs, samples = evaluated_docs(fixture), run.samples("egoplan_val_gen")
    picks = [egoplan.extract_choice(s["filtered_resps"][0], egoplan.doc_to_choice(d)) for d, s in zip(docs, samples)]
    correct = [float(p is not None and p == egoplan.doc_to_target(d)) for p, d in zip(picks, docs)]
    assert run.metric("egoplan_val_gen", "accuracy") == pytest.approx(mean(correct))
    assert run.metric("egoplan_val_gen", "unparseable") == sum(p is None for p in picks)
    assert run.metric("egoplan_val_gen", "skipped_samples") == 1


def test_missing_media_stop_the_run_with_the_sample_path_and_setting(fixture, tmp_path):
    failed = run_lmms_eval(model="dummy", model_args="", tasks=["egoplan_val"], output_dir=tmp_path,
                           env=fixture.env(), check=False)
    assert failed.results is None
    assert (f"EgoPlan sample {UNAVAILABLE_SAMPLE}: frame folder not found: "
            f"{fixture.epic_root / 'P09' / 'rgb_frames' / 'P09_99'}") in failed.log
    assert "EGOPLAN_EPIC_FRAMES_ROOT" in failed.log and "EGOPLAN_SKIP_MISSING" in failed.log


def test_generative_variant_through_lmms_evals_openai_backend(fixture, tmp_path):
    """A chat backend gets the visuals as images (progress frames, then the observation) and free-form
    answers are read: a stated letter, the candidate's text, or nothing usable."""
    docs = evaluated_docs(fixture)
    options = {"\n".join(f"{x}. {c}" for x, c in zip("ABCD", egoplan.doc_to_choice(d))): d for d in docs}

    def doc_of(call):
        return next(doc for block, doc in options.items() if block in call.text)

    def answer(call):
        doc = doc_of(call)
        golden = egoplan.doc_to_target(doc)
        return Reply({0: f"The answer is ({'ABCD'[golden]}).",
                      1: f"I would {egoplan.doc_to_choice(doc)[golden].upper()} next.",
                      2: "I cannot tell from these frames."}[doc["sample_id"] % 3])

    with ChatServer(answer) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused",
                            tasks=["egoplan_val_gen"], output_dir=tmp_path, env=fixture.env(skip_missing="true"))
    unreadable = sum(d["sample_id"] % 3 == 2 for d in docs)
    assert run.metric("egoplan_val_gen", "accuracy") == pytest.approx(1 - unreadable / len(docs))
    assert run.metric("egoplan_val_gen", "unparseable") == unreadable
    assert len(server.calls) == len(docs)
    for call in server.calls:
        doc = doc_of(call)
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        shown = [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls]
        assert shown == egoplan_data.doc_frame_numbers(doc)
