"""ActPlan-1K's text-only baseline (lm-eval; YAML in ``lm_eval_tasks/actplan/``), held by lm-eval's adapter."""

from __future__ import annotations

from lmms_egoplan.actplan.benchmark import ACTPLAN
from lmms_egoplan.actplan.task import TEXT_ONLY_LM_EVAL
from lmms_egoplan.harness.lm_eval_task import SuiteBaseline


class ActPlanTextOnly(SuiteBaseline):
    """``actplan1k_text_only_lm``: ActPlan-1K's text-only ablation (paper Table 6) with lm-eval's
    models, generation and chat templates, scored as ``actplan1k_text_only``."""

    BENCHMARK = ACTPLAN
    SPEC = TEXT_ONLY_LM_EVAL
