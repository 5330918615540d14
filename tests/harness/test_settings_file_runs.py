"""A run reads the settings file (issue 65 point 1): a task lmms-eval builds takes its data and judge from the file
LMMS_EGOPLAN_SETTINGS names, with no variable set; a <PREFIX>_<SETTING> variable still overrides the file, which
overrides the YAML; the results record every value and the file they came from."""

from pathlib import Path

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
