"""EgoPlan-Bench's text-only baselines (lm-eval; YAMLs in ``lm_eval_tasks/egoplan/``): its scoring,
shared with the lmms-eval tasks, joined to lm-eval's task base."""

from __future__ import annotations

from typing import ClassVar

from lmms_egoplan.egoplan.task import EgoPlanScoring
from lmms_egoplan.harness.lm_eval_task import LmEvalBenchmarkTask


class EgoPlanBlind(EgoPlanScoring, LmEvalBenchmarkTask):
    """``egoplan_val_blind`` / ``egoplan_val_narrated``: EgoPlan-Val from text alone (no media needed)."""

    WITH_MEDIA: ClassVar[bool] = False


class EgoPlanBlindTest(EgoPlanBlind):
    """``egoplan_test_blind``: EgoPlan-Test predictions from text alone, for the submission file."""

    LABELLED: ClassVar[bool] = False
