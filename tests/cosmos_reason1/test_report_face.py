"""Cosmos-Reason1's table in the report: the paper's layout (a column per source in Table 8's order, then per category
in Table 7's, each part's accuracy from its own task; the embodied-reasoning macro mean as the main score), the three
averaging conventions named, and the transcribed published rows consistent with themselves: each printed mean is
the mean of the row's own values in its source's convention, to its printed rounding."""

import pytest

from lmms_egoplan.cosmos_reason1.data import CS_CATEGORIES, ER_SOURCES
from lmms_egoplan.cosmos_reason1.report_face import FACE, PAPER_SOURCES

(TABLE,) = FACE.tables
ROWS = {(row["table"], row["model"]): row["values"] for row in FACE.published}
HALF_A_LAST_DIGIT = 0.05 + 1e-9  # printed to 0.1: the true mean is within half a unit of the printed one


def _sources(values):
    return [values[f"accuracy_{source}"] for source in PAPER_SOURCES]


def test_the_table_has_a_column_per_part_from_its_task_and_the_means_from_the_groups():
    columns = {column.header: (column.task, column.metric) for column in TABLE.columns}
    assert columns["RoboVQA"] == ("cosmos_reason1_robovqa", "accuracy_official")
    assert columns["Other physics"] == ("cosmos_reason1_cs_other_physics", "accuracy_official")
    assert columns["ER macro"] == ("cosmos_reason1_er", "accuracy_official")
    assert columns["ER micro"] == ("cosmos_reason1_er", "micro_official")
    assert columns["ER macro without AV"] == ("cosmos_reason1_er", "no_av_official")
    assert columns["Overall micro"] == ("cosmos_reason1", "micro_official")


def test_the_columns_follow_the_papers_tables_and_the_main_score_is_the_embodied_reasoning_macro_mean():
    headers = [column.header for column in TABLE.columns]
    assert headers[:6] == ["BridgeData V2", "RoboVQA", "AgiBot", "HoloAssist", "AV", "RoboFail"]  # Table 8
    assert headers[9:12] == ["Space", "Time", "Other physics"]  # Table 7
    assert sorted(PAPER_SOURCES) == sorted(ER_SOURCES) and tuple(CS_CATEGORIES) == ("space", "time", "other_physics")
    assert headers[TABLE.main_column] == "ER macro"


def test_the_papers_rows_average_as_printed():
    paper = {model: values for (table, model), values in ROWS.items() if table == "Table 7 and Table 8"}
    assert set(paper) == {"Gemini 2.0 Flash", "GPT-4o", "OpenAI o1", "Qwen2.5-VL-7B", "Nemotron-H-56B",
                          "Cosmos-Reason1-7B", "Cosmos-Reason1-56B"}
    for model, values in paper.items():
        # Table 8: the macro mean over the six sources, rounded to 0.1 (Qwen2.5-VL-7B's 50.75 printed 50.8)
        assert values["er_macro"] == pytest.approx(sum(_sources(values)) / 6, abs=HALF_A_LAST_DIGIT), model
        parts = [values["accuracy_space"], values["accuracy_time"], values["accuracy_other_physics"]]
        # Table 7: the macro mean, printed to 0.1 (cut, not rounded, in places: o1's 59.97 is printed 59.9), not the
        # micro one
        assert values["cs_macro"] == pytest.approx(sum(parts) / 3, abs=0.1), model
    assert paper["Cosmos-Reason1-7B"]["accuracy_bridgev2"] == 58.8  # nvidia-cosmos/cosmos-reason1 issue 26 quotes it


def test_the_rl_row_averages_as_table_9_prints_it_over_seven_columns():
    values = ROWS[("Table 9", "Cosmos-Reason1-7B + Physical AI RL")]
    assert "er_macro" not in values  # Table 9 prints no embodied-reasoning mean; its Avg. is another convention
    assert (values["cs_macro"] + sum(_sources(values))) / 7 == pytest.approx(65.7, abs=HALF_A_LAST_DIGIT)


def test_every_later_report_names_its_averaging_in_its_note():
    conventions = {"Table 2": "five-source macro mean without AV", "leaderboard": "micro mean"}
    for row in FACE.published:
        if row["table"] in conventions:
            assert conventions[row["table"]] in row["note"] and row["source"], row["model"]
