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


@dataclass(frozen=True)
class Metric:
    """A metric a task reports: its name, its aggregation (a name the harness registers, such as "mean", or a
    function) and which way is better."""

    name: str
    aggregation: str | Callable
    higher_is_better: bool = True


@dataclass(frozen=True)
class TaskSpec:
    """What a benchmark's tasks do (its lmms-eval tasks, or its lm-eval baselines), as plain functions: the hooks
    the harness calls on each document, in its order, and the metrics they report. The task YAMLs keep what is
    configuration (``class:``, ``output_type``, ``generation_kwargs``, ``lmms_eval_specific_kwargs``, ``metadata``,
    group aggregations); the adapter their ``class:`` names holds the spec and hands the hooks to the harness (a
    YAML that sets one of them too is an error: one place says what a task does)."""

    doc_to_text: Callable
    process_results: Callable
    metrics: tuple[Metric, ...]
    doc_to_visual: Callable | None = None  # none for the text-only baselines (lm-eval)
    doc_to_messages: Callable | None = None
    doc_to_target: str | Callable | None = None

    # The config keys a spec sets (the harness's names).
    KEYS = ("doc_to_visual", "doc_to_text", "doc_to_messages", "doc_to_target", "process_results", "metric_list")

    def config_entries(self) -> dict[str, Any]:
        """The spec as entries of the harness's task config."""
        hooks = {key: getattr(self, key) for key in self.KEYS[:-1] if getattr(self, key) is not None}
        metrics = [{"metric": m.name, "aggregation": m.aggregation, "higher_is_better": m.higher_is_better}
                   for m in self.metrics]
        return {**hooks, "metric_list": metrics}
