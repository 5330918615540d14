"""The classes EgoThink's lmms-eval task YAMLs name (``tasks/egothink/``): each holds the benchmark and one of
its task specs (``egothink.task``) on lmms-eval's adapter, and adds nothing."""

from __future__ import annotations

from lmms_egoplan.egothink.benchmark import EGOTHINK
from lmms_egoplan.egothink.task import DIMENSION
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class EgoThinkTask(SuiteTask):
    """``ego_think_<dimension>`` (lmms-eval): one EgoThink dimension (YAML ``dataset_name``), judged by an LLM after
    generation."""

    BENCHMARK = EGOTHINK
    SPEC = DIMENSION
