"""The class Cosmos-Reason1's lmms-eval task YAMLs name (``tasks/cosmos_reason1/``): the benchmark and its task spec
(``cosmos_reason1.task``) on lmms-eval's adapter, adding nothing; each YAML's ``dataset_name`` picks its source."""

from __future__ import annotations

from lmms_egoplan.cosmos_reason1.benchmark import COSMOS_REASON1
from lmms_egoplan.cosmos_reason1.task import GENERATION
from lmms_egoplan.harness.lmms_eval_task import SuiteTask


class CosmosReason1Task(SuiteTask):
    """``cosmos_reason1_<source>`` and ``cosmos_reason1_cs_<category>``: the official evaluation of one part."""

    BENCHMARK = COSMOS_REASON1
    SPEC = GENERATION
