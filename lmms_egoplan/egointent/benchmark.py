"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egointent.commands import COMMANDS
from lmms_egoplan.egointent.protocol import RUBRIC_NAMES, RUBRICS, EgoIntentSettings
from lmms_egoplan.egointent.sources import DATA
from lmms_egoplan.egointent.task import STEPS


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.egointent.report_face import FACE

    return FACE


EGOINTENT = Benchmark(
    entry("egointent"),
    settings=EgoIntentSettings,
    load_report_face=report_face,
    rubrics={RUBRIC_NAMES[definitions]: rubric for definitions, rubric in RUBRICS.items()},
    commands=COMMANDS,
    lmms_eval_tasks={"steps": STEPS},
    data=DATA,
)
