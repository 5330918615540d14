"""Cosmos-Reason1's table in the report: the paper's layout (a column per source, then per category, each part's
accuracy from its own task), the three averaging conventions named, and the transcribed published rows consistent
with themselves."""

import pytest

from lmms_egoplan.cosmos_reason1.report_face import FACE


def test_the_table_has_a_column_per_part_from_its_task_and_the_means_from_the_groups():
    (table,) = FACE.tables
    columns = {column.header: (column.task, column.metric) for column in table.columns}
    assert columns["RoboVQA"] == ("cosmos_reason1_robovqa", "accuracy_official")
    assert columns["Other physics"] == ("cosmos_reason1_cs_other_physics", "accuracy_official")
    assert columns["ER macro"] == ("cosmos_reason1_er", "accuracy_official")
    assert columns["ER micro"] == ("cosmos_reason1_er", "micro_official")
    assert columns["ER macro without AV"] == ("cosmos_reason1_er", "no_av_official")
    assert columns["Overall micro"] == ("cosmos_reason1", "micro_official")
    headers = [column.header for column in table.columns]
    assert headers[:6] == ["AV", "AgiBot", "BridgeData V2", "HoloAssist", "RoboFail", "RoboVQA"]


def test_the_published_common_sense_rows_average_as_printed():
    assert len(FACE.published) == 7
    for row in FACE.published:
        values = row["values"]
        parts = [values["accuracy_space"], values["accuracy_time"], values["accuracy_other_physics"]]
        # the macro mean, printed to 0.1 (cut, not rounded, in places: o1's 59.97 is printed 59.9), not the micro one
        assert values["cs_macro"] == pytest.approx(sum(parts) / 3, abs=0.1), row["model"]
