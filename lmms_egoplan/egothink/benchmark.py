"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egothink.protocol import RUBRIC, RUBRIC_NAME, EgoThinkSettings, group_scores
from lmms_egoplan.egothink.sources import DATA
from lmms_egoplan.egothink.task import BLIND, DIMENSION


def report_face():
    """Its face in the report, loaded when the report or the demo asks (no task loads the report's toolkit)."""
    from lmms_egoplan.egothink.report_face import FACE

    return FACE


EGOTHINK = Benchmark(
    entry("egothink"),
    settings=EgoThinkSettings,
    load_report_face=report_face,
    rubrics={RUBRIC_NAME: RUBRIC},
    rejudge_groups={"ego_think_": group_scores},
    lmms_eval_tasks={"dimension": DIMENSION},
    data=DATA,
    lm_eval_baselines={"blind": BLIND},
)
