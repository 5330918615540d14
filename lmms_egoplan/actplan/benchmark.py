"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.actplan.commands import COMMANDS
from lmms_egoplan.actplan.settings import ActPlanSettings
from lmms_egoplan.actplan.sources import DATA
from lmms_egoplan.actplan.task import TEXT_ONLY, TEXT_ONLY_LM_EVAL, WITH_IMAGES
from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.actplan.report_face import FACE

    return FACE


ACTPLAN = Benchmark(
    entry("actplan"),
    settings=ActPlanSettings,
    load_report_face=report_face,
    commands=COMMANDS,
    lmms_eval_tasks={"with_images": WITH_IMAGES, "text_only": TEXT_ONLY},
    data=DATA,
    lm_eval_baselines={"text_only": TEXT_ONLY_LM_EVAL},
)
