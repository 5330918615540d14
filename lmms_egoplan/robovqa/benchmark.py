"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.robovqa.settings import RoboVQASettings
from lmms_egoplan.robovqa.sources import DATA
from lmms_egoplan.robovqa.task import GENERATION


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.robovqa.report_face import FACE

    return FACE


ROBOVQA = Benchmark(
    entry("robovqa"),
    settings=RoboVQASettings,
    load_report_face=report_face,
    lmms_eval_tasks={"generation": GENERATION},
    data=DATA,
)
