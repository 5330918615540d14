"""Judged metrics as declarations: a benchmark's spec says *that* a metric is judged (``Judged``), the harness adapter
says *how* (``harness.judged``: the judge engine, one batch per task, the audit trail). Nothing here loads a judge."""

from __future__ import annotations

from lmms_egoplan.contract.benchmark import Judged, Metric

__all__ = ["JUDGED_METRICS", "PREDICT_ONLY_ITEMS", "Judged", "judged"]

# Where a --predict_only run logs the judge items of a sample (inside its "bypass" value): what the adapter writes
# (``harness.judged``) and ``rejudge`` and the report read.
PREDICT_ONLY_ITEMS = "judge_items"


def judged(name: str, what: Judged = Judged.SCORE) -> Metric:
    """A judged metric (a breakdown, a part): ``what`` its judge items aggregate to."""
    return Metric(name, what, higher_is_better=what is not Judged.FAILED, with_context=True)


# A judged task's metrics besides its breakdowns: what its spec lists (``TaskSpec.metrics``).
JUDGED_METRICS = (
    judged("score"),  # mean judge rating x the rubric's scale over successful ones
    judged("judged", Judged.COUNT),
    judged("failed", Judged.FAILED),  # failed calls, answers without a rating
)
