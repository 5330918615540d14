"""A run reads the settings file (issue 65 point 1): a task lmms-eval builds takes its data and judge from the file
LMMS_EGOPLAN_SETTINGS names, with no variable set; a <PREFIX>_<SETTING> variable still overrides the file, which
overrides the YAML; the results record every value and the file they came from."""

from pathlib import Path

import pytest

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings_file import SETTINGS_VARIABLE, SettingsFile, write_settings_file
from lmms_egoplan.demo.egointent import write_dataset

CHECKOUT = Path(__file__).resolve().parents[2]


def build(task: str):
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(CHECKOUT / "tasks"), include_defaults=False).load_task_or_group([task])[task]


def test_a_task_takes_its_data_and_judge_from_the_file_and_a_variable_overrides_it(monkeypatch, tmp_path):
    settings = write_settings_file(tmp_path / "settings.yaml", SettingsFile(
        benchmarks={"egointent": {"annotations": str(write_dataset(tmp_path / "data")), "max_frames": 16}},
        judge={"judge_base_url": "http://127.0.0.1:9/v1", "judge_model": "judge-of-the-file",
               "judge_cache_dir": "none", "judge_preflight": False}), writer="a test")
    monkeypatch.setenv(SETTINGS_VARIABLE, str(settings))
    metadata = build("egointent").config.metadata
    assert metadata["annotations"] == str(tmp_path / "data" / "annotations.jsonl")
    assert metadata["judge_model"] == "judge-of-the-file" and metadata["max_frames"] == 16
    assert metadata["settings_file"] == str(settings)
    monkeypatch.setenv("EGOINTENT_MAX_FRAMES", "8")
    assert build("egointent").config.metadata["max_frames"] == 8


def test_without_a_file_nothing_is_recorded_of_one(monkeypatch, tmp_path):
    monkeypatch.setenv("EGOINTENT_ANNOTATIONS", str(write_dataset(tmp_path / "data")))
    for name, value in {"JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "JUDGE_MODEL": "judge", "JUDGE_CACHE_DIR": "none",
                        "JUDGE_PREFLIGHT": "false"}.items():
        monkeypatch.setenv(f"EGOINTENT_{name}", value)
    assert "settings_file" not in build("egointent").config.metadata


REFUSED = {
    "a boolean where a number goes": ("egointent:\n  annotations: {data}\n  max_frames: true\n",
                                      "egointent.max_frames (line 3): expected an integer, got true (true/false is "
                                      "no number)"),
    "a duplicate key": ("egointent:\n  annotations: {data}\n  max_frames: 8\n  max_frames: 16\n",
                        "egointent.max_frames is given twice (lines 3 and 4)"),
    "an unknown expected_counts part": (
        "egointent:\n  annotations: {data}\nexpected_counts:\n  egointent: {{step: 3}}\n",
        "expected_counts.egointent.step (line 4): egointent has no part 'step'; its parts: steps"),
    "an empty file": ("", "is empty: give it the blocks docs/data.md shows"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_check_data_and_the_run_refuse_the_file_naming_it_the_key_and_the_line(case, monkeypatch, tmp_path, capsys):
    from lmms_egoplan.cli import main

    text, said = REFUSED[case]
    settings = tmp_path / "settings.yaml"
    settings.write_text(text.format(data=write_dataset(tmp_path / "data")))
    report = tmp_path / "out.txt"
    # the file unreadable: exit 2, nothing checked; a value refused: the benchmark's problem, listed (exit 1)
    status = main(["check-data", "egointent", "--settings", str(settings), "--output", str(report)])
    told = capsys.readouterr().err + (report.read_text() if report.exists() else "")
    assert status == (1 if case == "a boolean where a number goes" else 2), told
    assert f"settings file {settings}" in told and said in told
    monkeypatch.setenv(SETTINGS_VARIABLE, str(settings))
    with pytest.raises(InputError) as refused:
        build("egointent")
    assert f"settings file {settings}" in str(refused.value) and said in str(refused.value)
