"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egoplan_bench2.report_face import FACE
from lmms_egoplan.egoplan_bench2.settings import EgoPlanBench2Settings
from lmms_egoplan.egoplan_bench2.task import GENERATION, LIKELIHOOD

EGOPLAN_BENCH2 = Benchmark(
    entry("egoplan_bench2"),
    settings=EgoPlanBench2Settings,
    report_face=FACE,
    lmms_eval_tasks={"generation": GENERATION, "likelihood": LIKELIHOOD},
)
