"""The classes EgoPlan-Bench2's lmms-eval task YAMLs name (``tasks/egoplan_bench2/``): each holds the benchmark and
one of its task specs (``egoplan_bench2.task``) on lmms-eval's adapter, and adds nothing."""

from __future__ import annotations

from lmms_egoplan.egoplan_bench2.benchmark import EGOPLAN_BENCH2
from lmms_egoplan.egoplan_bench2.task import GENERATION, LIKELIHOOD
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class EgoPlanBench2Task(SuiteTask):
    """``egoplan_bench2``: the official evaluation, a letter read from the answer."""

    BENCHMARK = EGOPLAN_BENCH2
    SPEC = GENERATION


class EgoPlanBench2Likelihood(SuiteTask):
    """``egoplan_bench2_likelihood``: the questions ranked by likelihood, as ``egoplan_val`` ranks EgoPlan-Bench's."""

    BENCHMARK = EGOPLAN_BENCH2
    SPEC = LIKELIHOOD
