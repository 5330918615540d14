"""The classes EgoPlan-Bench's lmms-eval task YAMLs name (``tasks/egoplan/``): each holds the benchmark and one of
its task specs (``egoplan.task``) on lmms-eval's adapter, and adds nothing."""

from __future__ import annotations

from lmms_egoplan.egoplan.benchmark import EGOPLAN
from lmms_egoplan.egoplan.task import TEST, VALIDATION, VALIDATION_GENERATIVE
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class EgoPlanValidation(SuiteTask):
    """``egoplan_val``: EgoPlan-Val ranked by likelihood; accuracy, the paper's breakdowns, the submission file."""

    BENCHMARK = EGOPLAN
    SPEC = VALIDATION


class EgoPlanTest(SuiteTask):
    """``egoplan_test``: EgoPlan-Test (no labels): predictions for the leaderboard, never an accuracy."""

    BENCHMARK = EGOPLAN
    SPEC = TEST


class EgoPlanValidationGenerative(SuiteTask):
    """``egoplan_val_gen``: EgoPlan-Val as generative letter choice, for backends without likelihood."""

    BENCHMARK = EGOPLAN
    SPEC = VALIDATION_GENERATIVE
