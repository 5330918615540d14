"""The lm-eval task classes of the text-only baselines (YAMLs in ``lm_eval_tasks/``, installed as
``lmms_egoplan.lm_eval_tasks``): each joins a benchmark's scoring, shared with its lmms-eval task,
to lm-eval's task base (``harness_lm_eval.LmEvalBenchmarkTask``)."""

from __future__ import annotations

from typing import ClassVar

from lmms_egoplan.egoplan import EgoPlanScoring
from lmms_egoplan.harness_lm_eval import LmEvalBenchmarkTask


class EgoPlanBlind(EgoPlanScoring, LmEvalBenchmarkTask):
    """``egoplan_val_blind`` / ``egoplan_val_narrated``: EgoPlan-Val from text alone (no media needed)."""

    WITH_MEDIA: ClassVar[bool] = False


class EgoPlanBlindTest(EgoPlanBlind):
    """``egoplan_test_blind``: EgoPlan-Test predictions from text alone, for the submission file."""

    LABELLED: ClassVar[bool] = False
