"""A run's row in the report says its own protocol and what its values are: every protocol setting it departs from,
even when it stands alone; "(not scored)" on a value only where that value measures nothing (a parser's accuracy by
that parser's own count of unreadable answers), on every benchmark alike."""

import json

from lmms_egoplan.report import write_report
from lmms_egoplan.report.tables import CHANGED_BY_BACKEND, DEPARTS, THIS_RUN
from lmms_egoplan.suite import report_faces
from tests.report.test_report import cosmos_reason1_run, egoplan_run, read_csv, robovqa_run, write_lmms_eval_run

FACES = report_faces()


def _own_rows(report, table):
    return [row for row in read_csv(report / f"{table}.csv") if row["source"] == THIS_RUN]


def test_a_run_alone_names_each_protocol_setting_it_departs_from(tmp_path):
    egoplan_run(tmp_path / "frames", settings={"num_frames": 4, "frame_sampling": "official", "loss_mean":
                                                "every_scored_token"})
    cosmos_reason1_run(tmp_path / "letter", settings={"prompt": "official_letter", "max_retries": 0, "fps": 4.0})
    write_report([tmp_path / "frames", tmp_path / "letter"], tmp_path / "report", FACES)
    [val] = _own_rows(tmp_path / "report", "egoplan_val")
    assert val["model"] == "tiny-model"  # alone: no other run to tell it apart from
    assert val["notes"].startswith(f"{DEPARTS}: num_frames 4 (default 8)")
    [cosmos] = _own_rows(tmp_path / "report", "cosmos_reason1")
    assert cosmos["notes"].startswith(f"{DEPARTS}: prompt official_letter (default official_reasoning), "
                                      "max_retries 0 (default 10);")
    assert "official prompt" not in cosmos["input"]
    cosmos_reason1_run(tmp_path / "frames_as_decoded", settings={"frame_timing": "sampled_rate",
                                                                 "frame_pixels": "decoded"})
    write_report([tmp_path / "frames_as_decoded"], tmp_path / "report3", FACES)
    [cosmos] = _own_rows(tmp_path / "report3", "cosmos_reason1")
    assert cosmos["notes"].startswith(f"{DEPARTS}: frame_timing sampled_rate (default assumed_2fps), "
                                      "frame_pixels decoded (default qwen_vl_utils);")

    # RoboVQA's multinet run scored by MultiNet's API module, not the script behind its published row
    robovqa_run(tmp_path / "multinet", settings={"protocol": "multinet", "multinet_scorer": "module"})
    write_report([tmp_path / "multinet"], tmp_path / "report4", FACES)
    [robovqa] = _own_rows(tmp_path / "report4", "robovqa")
    assert robovqa["notes"].startswith(f"{DEPARTS}: protocol multinet (default default), multinet_scorer module "
                                       "(default script)")

    egoplan_run(tmp_path / "default", settings={"num_frames": 8, "data_source": "official"})
    write_report([tmp_path / "default"], tmp_path / "report2", FACES)
    [val] = _own_rows(tmp_path / "report2", "egoplan_val")
    assert DEPARTS not in val["notes"]


def test_not_scored_marks_a_value_only_where_its_own_parser_read_nothing(tmp_path):
    """EgoPlan-Bench2: the robust parser read none of 8 answers, the official one read 1 (its 12.50 is a score);
    Cosmos-Reason1: a random model's zeros, every answer unreadable by the official parser, are no scores."""
    write_lmms_eval_run(tmp_path / "bench2", "20260101_100000", {"egoplan_bench2": {
        "accuracy": 0.0, "accuracy_official": 0.125, "accuracy_robust": 0.0, "unparseable": 8,
        "unparseable_official": 7, "unparseable_robust": 8, "predictions": 8}})
    cosmos_reason1_run(tmp_path / "cosmos", unparseable_official=4, accuracy_official=0.0, micro_official=0.0)
    write_report([tmp_path / "bench2", tmp_path / "cosmos"], tmp_path / "report", FACES)
    [bench2] = _own_rows(tmp_path / "report", "egoplan_bench2")
    assert float(bench2["Official parser (%)"]) == 12.5 and "8 of 8 answers unparseable (robust parser)" in bench2[
        "notes"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "| 12.50 |" in markdown and "12.50 (not scored)" not in markdown
    assert "| 0.00 (not scored) |" in markdown.split("Cosmos-Reason1: accuracy")[1]
    [cosmos] = _own_rows(tmp_path / "report", "cosmos_reason1")
    assert "not scored: cosmos_reason1_av: 4 of 4 answers unparseable (official parser)" in cosmos["notes"]


def test_what_the_runs_backend_changed_of_the_protocol_is_noted_once_on_its_row(tmp_path):
    """The suite records in the results where the run's backend changed a task's protocol (Cosmos-Reason1's retries
    that lmms-eval's backends do not make; frames a backend's model_args cut): the row says so, once for all of its
    tasks, though its settings are the defaults."""
    from lmms_egoplan.compat.results import PROTOCOL_CHANGES_KEY

    path = cosmos_reason1_run(tmp_path / "asked_once")
    data = json.loads(path.read_text())
    asked_once = "lmms-eval's openai backend asks once: an empty answer is not generated again (max_retries 10)"
    data[PROTOCOL_CHANGES_KEY] = {task: {"max_retries": asked_once} for task in data["results"]
                                  if task.startswith("cosmos_reason1_") and task.count("_") == 2}
    path.write_text(json.dumps(data))
    write_report([tmp_path / "asked_once"], tmp_path / "report", FACES)
    [cosmos] = _own_rows(tmp_path / "report", "cosmos_reason1")
    assert DEPARTS not in cosmos["notes"]
    assert cosmos["notes"].count(f"{CHANGED_BY_BACKEND}: {asked_once}") == 1


def test_egointent_egothink_and_actplan_rows_name_the_protocol_settings_they_depart_from(tmp_path):
    """A run with the step id shown (EgoIntent; the authors' prompt shows none), LLaVA's sampled decoding (EgoThink)
    or the images before the text (ActPlan-1K) says so on its row, as the other benchmarks' runs do."""
    write_lmms_eval_run(tmp_path / "egointent", "20260101_100000", {"egointent": {"overall": 40.0, "judged": 4}},
                        settings={"show_step_id": True, "definitions": "release"})
    write_lmms_eval_run(tmp_path / "egothink", "20260101_100000", {"ego_think_activity": {"score": 50.0, "judged": 2}},
                        settings={"decoding": "official_llava", "prompt_preset": None})
    write_lmms_eval_run(tmp_path / "actplan", "20260101_100000", {"actplan1k": {"norm_lcs": 0.5, "lcs": 3.0}},
                        settings={"input_order": "visuals_first", "instances": "all"})
    write_report([tmp_path / name for name in ("egointent", "egothink", "actplan")], tmp_path / "report", FACES)
    for table, departure in (("egointent", "show_step_id true (default false)"),
                             ("ego_think", "decoding official_llava (default greedy)"),
                             ("actplan1k", "input_order visuals_first (default text_first)")):
        [row] = _own_rows(tmp_path / "report", table)
        assert row["notes"].startswith(f"{DEPARTS}: {departure}"), (table, row["notes"])
