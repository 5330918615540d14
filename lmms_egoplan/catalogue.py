"""The suite's benchmarks as data, one row each: what a reader, the lmms-eval workarounds (``compat``) and
the judge's rubric look-up need to know of a benchmark without loading its code. This module imports no
benchmark and nothing of the suite; the benchmarks themselves (their code, as values) are
``lmms_egoplan.suite``. What the task YAMLs say (the tasks a user names) is read from them, not restated here.

To add a benchmark: its folders (``lmms_egoplan/<name>/`` with its ``Benchmark`` value, ``tasks/<name>/``,
``lm_eval_tasks/<name>/``), a row below and a line in ``lmms_egoplan.suite``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

LMMS_EVAL_TASKS = "lmms_egoplan.tasks"  # the checkout's tasks/
LM_EVAL_TASKS = "lmms_egoplan.lm_eval_tasks"  # the checkout's lm_eval_tasks/


@dataclass(frozen=True)
class Entry:
    name: str  # its package, lmms_egoplan.<name>, and its task folders, tasks/<name>/ and lm_eval_tasks/<name>/
    title: str
    env_prefix: str  # its settings are overridden by environment variables <env_prefix>_<SETTING>
    task_prefixes: tuple[str, ...]  # every task and group it declares starts with one of these
    rubrics: tuple[str, ...] = ()  # the judge rubrics its judged items name, first the one legacy references mean
    legacy_rubric_references: tuple[str, ...] = ()  # what logs written before rubrics had names carry (the default)

    def __post_init__(self):
        for name in self.rubrics:  # what its judged items (and logs) carry
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"a rubric name is letters, digits and _ . - only, got {name!r}")

    @property
    def tasks(self) -> tuple[str, ...]:
        """Its lmms-eval tasks and groups a user names (``tasks/<name>/``)."""
        return declared_tasks(resources.files(LMMS_EVAL_TASKS) / self.name)

    @property
    def lm_eval_tasks(self) -> tuple[str, ...]:
        """Its text-only baselines, the lm-eval tasks and groups a user names (``lm_eval_tasks/<name>/``)."""
        return declared_tasks(resources.files(LM_EVAL_TASKS) / self.name)

    def rubric_name(self, reference: str) -> str | None:
        """The name of its rubric that ``reference`` (a name, or a legacy reference) stands for, or None."""
        if reference in self.rubrics:
            return reference
        return self.rubrics[0] if reference in self.legacy_rubric_references else None


CATALOGUE: tuple[Entry, ...] = (
    Entry("egoplan", "EgoPlan-Bench", "EGOPLAN", ("egoplan_val", "egoplan_test")),
    Entry("egothink", "EgoThink", "EGOTHINK", ("ego_think",),
          rubrics=("egothink",), legacy_rubric_references=("lmms_egoplan.egothink:RUBRIC",)),
    Entry("egointent", "EgoIntent", "EGOINTENT", ("egointent",),
          rubrics=("egointent", "egointent_release"), legacy_rubric_references=("lmms_egoplan.egointent:RUBRIC",)),
    Entry("actplan", "ActPlan-1K", "ACTPLAN", ("actplan1k",)),
    Entry("egoplan_bench2", "EgoPlan-Bench2", "EGOPLAN2", ("egoplan_bench2",)),
    Entry("cosmos_reason1", "Cosmos-Reason1", "COSMOS_REASON1", ("cosmos_reason1",)),
    Entry("robovqa", "RoboVQA", "ROBOVQA", ("robovqa",)),
)


def entry(name: str) -> Entry:
    found = [row for row in CATALOGUE if row.name == name]
    if not found:
        raise KeyError(f"no benchmark {name!r} (known: {', '.join(row.name for row in CATALOGUE)})")
    return found[0]


def rubric_name(reference: str) -> str | None:
    """The name of the suite rubric ``reference`` names (its name, or a legacy reference), or None."""
    return next((name for row in CATALOGUE if (name := row.rubric_name(reference))), None)


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
