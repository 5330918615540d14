"""What a benchmark is to the suite: one value, ``Benchmark``, holding its code as objects (its settings type,
report face, rubrics, commands, rejudge groups) beside its catalogue row (``lmms_egoplan.catalogue``). Each
benchmark's package builds its value in its ``benchmark`` module; ``lmms_egoplan.suite`` lists them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from lmms_egoplan.catalogue import Entry

if TYPE_CHECKING:
    from lmms_egoplan.judge.rubrics import Rubric
    from lmms_egoplan.report.layout import ReportFace

# A group function: the group scores ``rejudge`` reports as the run would, from its tasks' scores.
GroupScores = Callable[[dict[str, dict]], dict[str, dict]]


@dataclass(frozen=True)
class Benchmark:
    entry: Entry  # its catalogue row: name, title, env prefix, task prefixes, rubric names
    settings: type  # the dataclass of its settings (defaults < YAML metadata < <env_prefix>_<SETTING>)
    report_face: ReportFace  # its face in the report and the demo's table
    rubrics: Mapping[str, Rubric] = field(default_factory=dict)  # by the names its judged items carry
    commands: Mapping[str, tuple[str, Callable[[Any], None]]] = field(default_factory=dict)  # as cli.COMMANDS
    rejudge_groups: Mapping[str, GroupScores] = field(default_factory=dict)  # task-name prefix -> its groups

    def __post_init__(self):
        if set(self.rubrics) != set(self.entry.rubrics):
            raise ValueError(f"benchmark {self.entry.name}: rubrics {sorted(self.rubrics)} are not its catalogue "
                             f"row's {sorted(self.entry.rubrics)}")

    @property
    def name(self) -> str:
        return self.entry.name
