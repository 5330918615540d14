"""EgoPlan-Bench's text-only baselines (lm-eval; YAMLs in ``lm_eval_tasks/egoplan/``): their specs, which share
the lmms-eval tasks' documents and scoring (``egoplan.task``), held by lm-eval's adapter."""

from __future__ import annotations

from lmms_egoplan.egoplan.benchmark import EGOPLAN
from lmms_egoplan.egoplan.task import BLIND, BLIND_TEST, NARRATED
from lmms_egoplan.harness.lm_eval_task import SuiteBaseline


class EgoPlanBlind(SuiteBaseline):
    """``egoplan_val_blind``: EgoPlan-Val from text alone (no media needed)."""

    BENCHMARK = EGOPLAN
    SPEC = BLIND


class EgoPlanNarrated(SuiteBaseline):
    """``egoplan_val_narrated``: EgoPlan-Val with the completed actions' narrations as text."""

    BENCHMARK = EGOPLAN
    SPEC = NARRATED


class EgoPlanBlindTest(SuiteBaseline):
    """``egoplan_test_blind``: EgoPlan-Test predictions from text alone, for the submission file."""

    BENCHMARK = EGOPLAN
    SPEC = BLIND_TEST
