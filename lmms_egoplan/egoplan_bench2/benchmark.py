"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egoplan_bench2.settings import EgoPlanBench2Settings
from lmms_egoplan.egoplan_bench2.sources import DATA
from lmms_egoplan.egoplan_bench2.task import GENERATION, LIKELIHOOD


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.egoplan_bench2.report_face import FACE

    return FACE


EGOPLAN_BENCH2 = Benchmark(
    entry("egoplan_bench2"),
    settings=EgoPlanBench2Settings,
    load_report_face=report_face,
    lmms_eval_tasks={"generation": GENERATION, "likelihood": LIKELIHOOD},
    data=DATA,
)
