"""The benchmark as one value (``lmms_egoplan.contract.benchmark.Benchmark``), listed by ``lmms_egoplan.suite``:
its code as objects, loaded without any harness."""

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.egothink.protocol import RUBRIC, RUBRIC_NAME, EgoThinkSettings, group_scores
from lmms_egoplan.egothink.report_face import FACE
from lmms_egoplan.egothink.task import BLIND, DIMENSION

EGOTHINK = Benchmark(
    entry("egothink"),
    settings=EgoThinkSettings,
    report_face=FACE,
    rubrics={RUBRIC_NAME: RUBRIC},
    rejudge_groups={"ego_think_": group_scores},
    lmms_eval_tasks={"dimension": DIMENSION},
    lm_eval_baselines={"blind": BLIND},
)
