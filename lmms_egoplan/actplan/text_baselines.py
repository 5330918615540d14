"""ActPlan-1K's text-only baseline (lm-eval; YAML in ``lm_eval_tasks/actplan/``)."""

from __future__ import annotations

from lmms_egoplan.actplan.task import ActPlanScoring
from lmms_egoplan.harness.lm_eval_task import LmEvalBenchmarkTask


class ActPlanTextOnly(ActPlanScoring, LmEvalBenchmarkTask):
    """``actplan1k_text_only_lm``: ActPlan-1K's text-only ablation (paper Table 6) with lm-eval's
    models, generation and chat templates, scored as ``actplan1k_text_only``."""
