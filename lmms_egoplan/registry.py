"""The suite's benchmarks, listed once: what the CLI, the demo, the judge's rubric look-up,
``rejudge`` and the report read instead of lists of their own. A benchmark's code is named by
"module:attribute" strings, imported when used: this module imports no benchmark (it is imported
with the package, and the judge below it must find rubrics without loading lmms-eval). What the
task YAMLs say (the tasks a user names) is read from them, not restated here.

To add a benchmark: its folder (``lmms_egoplan/<name>/`` with its report face, and its YAML folders
``tasks/<name>/``, ``lm_eval_tasks/<name>/``) and one entry below; the CLI, the demo and the report
name no benchmark.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lmms_egoplan.compat import SUITE_COUNTERPARTS
from lmms_egoplan.judge.rubrics import add_rubric_finder

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    from lmms_egoplan.report.layout import ReportFace

LMMS_EVAL_TASKS = "lmms_egoplan.tasks"  # the checkout's tasks/
LM_EVAL_TASKS = "lmms_egoplan.lm_eval_tasks"  # the checkout's lm_eval_tasks/


@dataclass(frozen=True)
class Benchmark:
    name: str  # its package, lmms_egoplan.<name>, and its task folders, tasks/<name>/ and lm_eval_tasks/<name>/
    title: str
    report_face: str  # "module:attribute" of its face in the report and the demo's table (report.layout.ReportFace)
    commands: str = ""  # "module:attribute" of its lmms-egoplan commands: name -> (help, add_arguments), as cli.COMMANDS
    rubric: str | None = None  # the judge rubric its judged items name (registered by its task module)
    other_rubrics: tuple[str, ...] = ()  # further rubrics its task module registers (a setting picks one)
    legacy_rubric_references: tuple[str, ...] = ()  # what logs written before rubrics had names carry
    rejudge_groups: Mapping[str, str] = field(default_factory=dict)  # task-name prefix -> "module:function"
    # lmms-eval built-in tasks named after its paper (a name, or a prefix ending in "_") -> the suite's task
    lmms_eval_builtins: Mapping[str, str] = field(default_factory=dict)

    @property
    def task_module(self) -> str:
        return f"lmms_egoplan.{self.name}.task"

    @property
    def tasks(self) -> tuple[str, ...]:
        """Its lmms-eval tasks and groups a user names (``tasks/<name>/``)."""
        return declared_tasks(resources.files(LMMS_EVAL_TASKS) / self.name)

    @property
    def lm_eval_tasks(self) -> tuple[str, ...]:
        """Its text-only baselines, the lm-eval tasks and groups a user names (``lm_eval_tasks/<name>/``)."""
        return declared_tasks(resources.files(LM_EVAL_TASKS) / self.name)


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("egoplan", "EgoPlan-Bench", "lmms_egoplan.egoplan.report_face:FACE", lmms_eval_builtins={"egoplan": "egoplan_val"}),
    Benchmark("egothink", "EgoThink", "lmms_egoplan.egothink.report_face:FACE",
              rubric="egothink", legacy_rubric_references=("lmms_egoplan.egothink:RUBRIC",),
              rejudge_groups={"ego_think_": "lmms_egoplan.egothink.task:group_scores"},
              lmms_eval_builtins={"egothink": "ego_think", "egothink_": "ego_think_"}),
    Benchmark("egointent", "EgoIntent", "lmms_egoplan.egointent.report_face:FACE",
              commands="lmms_egoplan.egointent.commands:COMMANDS",
              rubric="egointent", legacy_rubric_references=("lmms_egoplan.egointent:RUBRIC",),
              other_rubrics=("egointent_release",)),
    Benchmark("actplan", "ActPlan-1K", "lmms_egoplan.actplan.report_face:FACE",
              commands="lmms_egoplan.actplan.commands:COMMANDS"),
    Benchmark("egoplan_bench2", "EgoPlan-Bench2", "lmms_egoplan.egoplan_bench2.report_face:FACE", lmms_eval_builtins={"egoplan2": "egoplan_bench2"}),
)


def benchmark(name: str) -> Benchmark:
    found = [b for b in BENCHMARKS if b.name == name]
    if not found:
        raise KeyError(f"no benchmark {name!r} (known: {', '.join(b.name for b in BENCHMARKS)})")
    return found[0]


def load(reference: str) -> Any:
    """The attribute a "module:attribute" reference names, its module imported."""
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


def declared_tasks(folder: Traversable) -> tuple[str, ...]:
    """The tasks and groups a user names of a folder of task YAMLs: those its YAMLs declare
    (``task:`` or ``group:``) that no group of the folder includes, sorted; none if there is no folder."""
    import yaml

    class Loader(yaml.SafeLoader):  # reads the YAMLs' tags (!function ...) as nothing
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    declared, included = set(), set()
    for path in folder.iterdir() if folder.is_dir() else ():
        if not path.name.endswith(".yaml"):
            continue  # lmms-eval's templates (_default_template_yaml) are included, never run
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=Loader) or {}
        if isinstance(config.get("group"), str):
            declared.add(config["group"])
            members = config.get("task") or []
            included.update(member if isinstance(member, str) else member.get("task") for member in members)
        elif isinstance(config.get("task"), str):
            declared.add(config["task"])
    return tuple(sorted(declared - included))


def report_faces() -> list[ReportFace]:
    """Each benchmark's report face (``report.layout.ReportFace``), in the registry's order."""
    return [load(entry.report_face) for entry in BENCHMARKS]


def commands() -> dict[str, tuple[str, Callable]]:
    """The benchmarks' ``lmms-egoplan`` commands: name -> (help, add_arguments), in the registry's order."""
    return {name: command for entry in BENCHMARKS if entry.commands for name, command in load(entry.commands).items()}


def find_rubric(reference: str) -> str | None:
    """The registered name of the suite rubric ``reference`` names (its name, or a module path that
    logs written before rubrics had names carry), its benchmark's task module imported (which
    registers it); None for a rubric of no benchmark here."""
    for entry in BENCHMARKS:
        if entry.rubric and reference in (entry.rubric, *entry.legacy_rubric_references, *entry.other_rubrics):
            importlib.import_module(entry.task_module)
            return reference if reference in entry.other_rubrics else entry.rubric
    return None


def group_scores(task_scores: dict[str, dict]) -> dict[str, dict]:
    """The group scores ``rejudge`` reports as the run would, from its tasks' scores."""
    groups: dict[str, dict] = {}
    for entry in BENCHMARKS:
        for prefix, reference in entry.rejudge_groups.items():
            tasks = {task: scores for task, scores in task_scores.items() if task.startswith(prefix)}
            if tasks:
                groups.update(load(reference)(tasks))
    return groups


add_rubric_finder(find_rubric)
SUITE_COUNTERPARTS.update((builtin, task) for entry in BENCHMARKS for builtin, task in entry.lmms_eval_builtins.items())
