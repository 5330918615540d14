"""EgoThink's text-only baseline (lm-eval; YAMLs in ``lm_eval_tasks/egothink/``): its documents, scoring and
judge, shared with the lmms-eval tasks (``egothink.task.BLIND``), held by lm-eval's adapter."""

from __future__ import annotations

from lmms_egoplan.egothink.benchmark import EGOTHINK
from lmms_egoplan.egothink.task import BLIND
from lmms_egoplan.harness.lm_eval_task import SuiteBaseline


class EgoThinkBlind(SuiteBaseline):
    """``ego_think_blind_<dimension>``: an EgoThink dimension's questions without their images,
    answered in the default inference prompt and judged as ``ego_think_<dimension>``."""

    BENCHMARK = EGOTHINK
    SPEC = BLIND
