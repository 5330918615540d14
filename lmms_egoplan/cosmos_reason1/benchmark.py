"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.cosmos_reason1.settings import CosmosReason1Settings
from lmms_egoplan.cosmos_reason1.sources import DATA
from lmms_egoplan.cosmos_reason1.task import GENERATION


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.cosmos_reason1.report_face import FACE

    return FACE


COSMOS_REASON1 = Benchmark(
    entry("cosmos_reason1"),
    settings=CosmosReason1Settings,
    load_report_face=report_face,
    lmms_eval_tasks={"generation": GENERATION},
    data=DATA,
)
