"""The classes ActPlan-1K's lmms-eval task YAMLs name (``tasks/actplan/``): each holds the benchmark and one of
its task specs (``actplan.task``) on lmms-eval's adapter, and adds nothing."""

from __future__ import annotations

from lmms_egoplan.actplan.benchmark import ACTPLAN
from lmms_egoplan.actplan.task import TEXT_ONLY, WITH_IMAGES
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class ActPlanTask(SuiteTask):
    """``actplan1k``: the description and the images, in the order ``input_order`` sets."""

    BENCHMARK = ACTPLAN
    SPEC = WITH_IMAGES


class ActPlanTextOnlyTask(SuiteTask):
    """``actplan1k_text_only``: the description alone."""

    BENCHMARK = ACTPLAN
    SPEC = TEXT_ONLY
