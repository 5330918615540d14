"""The classes EgoIntent's lmms-eval task YAMLs name (``tasks/egointent/``): each holds the benchmark and one of
its task specs (``egointent.task``) on lmms-eval's adapter, and adds nothing."""

from __future__ import annotations

from lmms_egoplan.egointent.benchmark import EGOINTENT
from lmms_egoplan.egointent.task import STEPS
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class EgoIntentTask(SuiteTask):
    """``egointent``: every step of the data, its answer judged per field after generation."""

    BENCHMARK = EGOINTENT
    SPEC = STEPS
