"""The text-only baselines as lm-eval tasks (lm_eval_tasks/): discovery, names, settings under
lm-eval, prompts and ranking. The real `lm_eval` CLI runs them in tests/e2e/test_lm_eval.py."""

from pathlib import Path

import pytest

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.demo.egoplan import build_fixture
from lmms_egoplan.egoplan import task as egoplan
from lmms_egoplan.egoplan.settings import EgoPlanSettings

CHECKOUT = Path(__file__).resolve().parents[2]
LM_EVAL_TASKS = CHECKOUT / "lm_eval_tasks"
BASELINES = {"egoplan_val_blind", "egoplan_val_narrated", "egoplan_test_blind", "ego_think_blind",
             "actplan1k_text_only_lm"}


@pytest.fixture(scope="module")
def egoplan_data(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("egoplan"))


def test_lm_eval_finds_every_baseline_and_no_name_clashes_with_a_builtin():
    from lm_eval.tasks import TaskManager

    ours = TaskManager(include_path=str(LM_EVAL_TASKS), include_defaults=False).task_index
    assert BASELINES <= set(ours)
    assert {f"ego_think_blind_{name}" for name in ("activity", "navigation", "assistance")} <= set(ours)
    builtin = TaskManager(include_defaults=True).task_index
    clashes = sorted(name for name in ours if name in builtin and builtin[name].yaml_path != ours[name].yaml_path)
    assert not clashes, f"names lm-eval registers itself (an include path would replace them): {clashes}"


def test_the_lmms_eval_folder_under_lm_eval_names_the_folder_to_use_instead():
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(CHECKOUT / "tasks"), include_defaults=False, metadata={"pretrained": "m"})
    with pytest.raises(InputError, match=r"egoplan_val is an lmms-eval task.*lm_eval --include_path "
                                         r"<checkout>/lm_eval_tasks \(--tasks list names them\)"):
        manager.load(["egoplan_val"])


def test_foreign_metadata_keys_are_skipped_and_a_misspelt_setting_is_still_an_error():
    metadata = {"version": 1, "pretrained": "/models/m", "device": "cpu", "annotation_dir": "/data/egoplan"}
    settings = resolve_settings(EgoPlanSettings, task="t", metadata=metadata, env_prefix="EGOPLAN", environ={},
                                foreign_keys={"pretrained", "device"})
    assert settings.annotation_dir == "/data/egoplan"
    with pytest.raises(SettingsError, match="unknown setting 'pretrained'"):
        resolve_settings(EgoPlanSettings, task="t", metadata=metadata, env_prefix="EGOPLAN", environ={})
    with pytest.raises(SettingsError, match="task t: unknown setting 'anotation_dir'"):
        resolve_settings(EgoPlanSettings, task="t", metadata={**metadata, "anotation_dir": "/x"}, env_prefix="EGOPLAN",
                         environ={}, foreign_keys={"pretrained", "device"})


def _evaluate(model_path: Path, metadata: dict, **kwargs):
    """lm-eval's Python API as its CLI calls it: the task manager's metadata is model_args | --metadata."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    model_args = {"pretrained": str(model_path), "dtype": "float32"}
    manager = TaskManager(include_path=str(LM_EVAL_TASKS), metadata=model_args | metadata)
    return lm_eval.simple_evaluate(model="hf", model_args=model_args, tasks=["egoplan_val_blind"], task_manager=manager,
                                   device="cpu", **kwargs)


def test_under_lm_eval_model_args_are_not_settings_but_a_misspelt_metadata_key_stops_the_run(tiny_model, egoplan_data,
                                                                                             tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no --output_path: the submission file goes to ./submission_partial/
    llama = tiny_model("llama")
    with pytest.raises(SettingsError, match="egoplan_val_blind: unknown setting 'anotation_dir'"):
        _evaluate(llama, {"anotation_dir": str(egoplan_data.annotation_dir)}, limit=2)
    evaluated = _evaluate(llama, {"annotation_dir": str(egoplan_data.annotation_dir)}, limit=2)
    results = evaluated["results"]["egoplan_val_blind"]
    assert results["predictions,none"] == 2 and 0 <= results["accuracy,none"] <= 1
    [submission] = (tmp_path / "submission_partial").glob("*_submission_partial_egoplan_val_blind.json")
    assert len(egoplan.json.loads(submission.read_text())) == 2


def test_blind_prompt_has_goal_and_question_and_the_narrated_one_adds_the_completed_actions(egoplan_data):
    records = {record["sample_id"]: record for record in egoplan_data.records()}
    record = next(r for r in records.values() if len(r["task_progress_metadata"]) >= 2)
    blind, narrated = egoplan.doc_to_text_blind(record), egoplan.doc_to_text_narrated(record)
    narrations = [action["narration_text"] for action in record["task_progress_metadata"]]
    assert blind == f"Task goal: {record['task_goal']}\nQuestion: {record['question']}\nNext action:"
    so_far = f"So far: {', '.join(narrations)}.\n"
    assert f"\n{so_far}" in narrated and narrated.replace(so_far, "") == blind
    unstarted = next(r for r in records.values() if not r["task_progress_metadata"])
    assert "So far: nothing.\n" in egoplan.doc_to_text_narrated(unstarted)


def test_a_later_action_than_the_observation_is_not_narrated():
    record = {"task_goal": "g", "question": "q?", "current_observation_frame": 50,
              "task_progress_metadata": [{"narration_text": "open drawer", "start_frame": 1, "stop_frame": 20},
                                         {"narration_text": "grab knife", "start_frame": 40, "stop_frame": 60}]}
    assert "So far: open drawer.\n" in egoplan.doc_to_text_narrated(record)


def test_lm_eval_likelihoods_rank_the_most_likely_candidate_first():
    results = [(-7.5, False), (-1.25, True), (-3.0, False), (-1.25, False)]
    assert egoplan.lm_eval_losses(results) == [7.5, 1.25, 3.0, 1.25]
    assert egoplan.ranked_choice(egoplan.lm_eval_losses(results), "q") == 1  # ties: the earlier, as argmin
