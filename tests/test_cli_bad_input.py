"""The commands' bad input, as a review of every subcommand met it: one line naming the option, file or setting to
fix, exit status 2 (1 for storage), before the long work; never a traceback, never a silent partial result."""

import json
import shutil

import pytest

from lmms_egoplan.cli import main
from tests.fixtures import LOGS_BEFORE_RUBRIC_NAMES

INTENT_SAMPLES = "20261122_180622_samples_egointent.jsonl"


def run(argv, capsys) -> tuple[int, str]:
    """The command's exit status (argparse's included) and its standard error."""
    try:
        status = main(argv)
    except SystemExit as exited:  # argparse's usage errors
        status = exited.code
    error = capsys.readouterr().err
    assert "Traceback" not in error
    return status, error


@pytest.fixture
def pairs(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"candidate": "walk(kitchen)", "reference": "walk(kitchen)"}) + "\n")
    return path


@pytest.mark.parametrize("option, value, said", [
    ("--device", "bogus", "argument --device: 'bogus' names no torch device"),
    ("--device", "cuda", "argument --device: 'cuda' names a CUDA device, but torch sees no GPU here"),
    ("--batch_size", "0", "argument --batch_size: must be at least 1, got 0"),
    ("--threshold", "abc", "argument --threshold: 'abc' is not a number"),
])
def test_actplan_score_refuses_an_option_value_before_any_model_loads(pairs, capsys, option, value, said):
    status, error = run(["actplan-score", "--pairs", str(pairs), option, value], capsys)
    assert status == 2 and said in error.splitlines()[-1]


def test_actplan_score_says_what_it_cannot_do_with_its_inputs_before_scoring(pairs, tmp_path, capsys):
    status, error = run(["actplan-score", "--pairs", str(pairs), "--model", "gpt4"], capsys)
    assert status == 2 and "--model picks the release's plan_<model>.txt files: it needs --data_root" in error
    status, error = run(["actplan-score", "--pairs", str(pairs), "--output", str(tmp_path)], capsys)
    assert (status, error) == (2, f"lmms-egoplan actplan-score: --output {tmp_path} is a folder: name the file to "
                                  f"write\n")
    status, error = run(["actplan-score", "--pairs", str(tmp_path)], capsys)
    assert (status, error) == (2, f"lmms-egoplan actplan-score: {tmp_path} is a folder, not a file\n")


def test_actplan_train_bleurt_checks_its_output_base_and_length_before_training(tmp_path, capsys):
    from lmms_egoplan.demo.actplan import build_tiny_bert, write_finetuning_data

    rows, activities = write_finetuning_data(tmp_path / "ft")
    given = ["actplan-train-bleurt", "--data", str(rows), "--activities", str(activities)]
    blocking = tmp_path / "afile"
    blocking.write_text("")
    status, error = run([*given, "--base", str(tmp_path), "--output", str(blocking)], capsys)
    assert status == 1 and f"the classifier's output folder {blocking}: cannot make this folder" in error
    status, error = run([*given, "--base", str(blocking), "--output", str(tmp_path / "out")], capsys)
    assert status == 2 and f"BLEURT base checkpoint {blocking}: not a BERT-based checkpoint folder" in error
    base = build_tiny_bert(tmp_path / "bert")
    status, error = run([*given, "--base", str(base), "--output", str(tmp_path / "out"), "--max_length", "100000"],
                        capsys)
    assert status == 2 and "max_length 100000 is more than the" in error and "token positions" in error


def test_rejudge_refuses_one_tasks_runs_of_two_folders_instead_of_keeping_the_newest(tmp_path, capsys):
    """Two models' runs of egointent under one folder: rejudging the newest alone dropped the other silently."""
    for model, stamp in (("modelA", "20261122_180622"), ("modelB", "20261123_090000")):
        folder = tmp_path / "runs" / model
        folder.mkdir(parents=True)
        shutil.copy(LOGS_BEFORE_RUBRIC_NAMES / "intent" / INTENT_SAMPLES, folder / f"{stamp}_samples_egointent.jsonl")
    status, error = run(["rejudge", str(tmp_path / "runs"), "--output", str(tmp_path / "out")], capsys)
    assert status == 2 and "hold runs of one task in several folders" in error
    assert f"egointent in {tmp_path / 'runs' / 'modelA'}, {tmp_path / 'runs' / 'modelB'}" in error


def test_rejudge_names_a_missing_path_and_a_samples_file_without_rows(tmp_path, capsys):
    status, error = run(["rejudge", str(tmp_path / "gone" / INTENT_SAMPLES), "--output", str(tmp_path / "o")], capsys)
    assert status == 2 and f"{tmp_path / 'gone' / INTENT_SAMPLES} does not exist" in error
    damaged = tmp_path / "s" / INTENT_SAMPLES
    damaged.parent.mkdir()
    for content, why in (("{bad\n", "no line is a JSON row: line 1: not JSON"), ("", "the file is empty")):
        damaged.write_text(content)
        status, error = run(["rejudge", str(damaged.parent), "--output", str(tmp_path / "o")], capsys)
        assert status == 2 and f"{damaged}: {why}" in error and "not a judged task" not in error


def test_judge_options_that_cannot_work_stop_before_a_judge_is_asked(tmp_path, capsys):
    samples = str(LOGS_BEFORE_RUBRIC_NAMES / "intent")
    status, error = run(["rejudge", samples, "--output", str(tmp_path / "o"), "--judge_model", ""], capsys)
    assert status == 2 and "--judge_model must not be empty" in error
    blocking = tmp_path / "afile"
    blocking.write_text("")
    status, error = run(["rejudge", samples, "--output", str(tmp_path / "o"), "--judge_base_url",
                         "http://127.0.0.1:9/v1", "--judge_cache_dir", str(blocking / "cache")], capsys)
    assert status == 2 and f"the judge cache's folder {blocking / 'cache'} cannot be made" in error
    status, error = run(["judge-agreement", samples, "--output", str(tmp_path / "o"), "--top", "0"], capsys)
    assert status == 2 and "argument --top: must be at least 1, got 0" in error


def test_egointent_check_names_its_own_options_and_lists_what_it_would_skip(tmp_path, capsys):
    from lmms_egoplan.demo.egointent import write_dataset

    flat = write_dataset(tmp_path / "flat")
    for video in flat.parent.rglob("*.mp4"):
        video.unlink()
    status, error = run(["egointent-check", str(flat)], capsys)
    assert status == 2 and "Set --skip_missing to skip the" in error and "EGOINTENT_" not in error
    status, error = run(["egointent-check", str(flat), "--skip_missing"], capsys)
    assert status == 2 and "every step's media is unusable" in error and "video not found" in error


def test_report_says_why_a_lone_rejudged_file_cannot_be_read(tmp_path, capsys):
    damaged = tmp_path / "20240101_120000_rejudged.json"
    damaged.write_text("{bad")
    status, error = run(["report", str(damaged), "--output", str(tmp_path / "report")], capsys)
    assert status == 2 and "no results files" in error and f"{damaged}" in error.split("; ", 1)[1]
