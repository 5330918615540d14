"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egoplan.settings import EgoPlanSettings
from lmms_egoplan.egoplan.sources import DATA
from lmms_egoplan.egoplan.task import BLIND, BLIND_TEST, NARRATED, TEST, VALIDATION, VALIDATION_GENERATIVE


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.egoplan.report_face import FACE

    return FACE


EGOPLAN = Benchmark(
    entry("egoplan"),
    settings=EgoPlanSettings,
    load_report_face=report_face,
    lmms_eval_tasks={"validation": VALIDATION, "test": TEST, "validation_generative": VALIDATION_GENERATIVE},
    data=DATA,
    lm_eval_baselines={"blind": BLIND, "narrated": NARRATED, "blind_test": BLIND_TEST},
)
