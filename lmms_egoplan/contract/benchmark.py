"""What a benchmark is to the suite: one value, ``Benchmark``, holding its code as objects (its settings type,
report face, rubrics, commands, rejudge groups and its tasks' specs) beside its catalogue row
(``lmms_egoplan.catalogue``); what a task does, ``TaskSpec``, its ``Metric``s, and the ``TaskContext`` its hooks get.
Each benchmark's package builds its value in its ``benchmark`` module; ``lmms_egoplan.suite`` lists them. Nothing
here loads a harness."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from loguru import logger

from lmms_egoplan.catalogue import Entry
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import count

if TYPE_CHECKING:
    from lmms_egoplan.contract.adapter import RunFiles
    from lmms_egoplan.contract.data import DataSources
    from lmms_egoplan.core.request_options import RequestOption
    from lmms_egoplan.judge.rubrics import Rubric

# A group function: the group scores ``rejudge`` reports as the run would, from its tasks' scores.
GroupScores = Callable[[dict[str, dict]], dict[str, dict]]


@dataclass(frozen=True)
class Benchmark:
    entry: Entry  # its catalogue row: name, title, env prefix, task prefixes, rubric names
    settings: type  # the dataclass of its settings (defaults < YAML metadata < <env_prefix>_<SETTING>)
    # Loads its face in the report and the demo's table (``report.layout.ReportFace``, a floor above): read when the
    # report or the demo asks (``report_face``), so that building a task loads no report module.
    load_report_face: Callable[[], Any]
    rubrics: Mapping[str, Rubric] = field(default_factory=dict)  # by the names its judged items carry
    commands: Mapping[str, tuple[str, Callable[[Any], None]]] = field(default_factory=dict)  # as cli.COMMANDS
    rejudge_groups: Mapping[str, GroupScores] = field(default_factory=dict)  # task-name prefix -> its groups
    # What its tasks do, by name (``TaskSpec``): its lmms-eval tasks, and its text-only baselines under lm-eval. Their
    # YAMLs name this value (``benchmark: !function ...``) and one of these names (``task_spec:``).
    lmms_eval_tasks: Mapping[str, TaskSpec] = field(default_factory=dict)
    lm_eval_baselines: Mapping[str, TaskSpec] = field(default_factory=dict)
    # Its data (``contract.data``): its release's parts and counts, its authors' Hub datasets, what else it needs
    # (``lmms-egoplan prepare`` and ``check-data``); none: neither command knows it.
    data: DataSources | None = None

    def __post_init__(self):
        if set(self.rubrics) != set(self.entry.rubrics):
            raise ValueError(f"benchmark {self.entry.name}: rubrics {sorted(self.rubrics)} are not its catalogue "
                             f"row's {sorted(self.entry.rubrics)}")

    @property
    def name(self) -> str:
        return self.entry.name

    def __deepcopy__(self, memo: dict) -> Benchmark:
        # One value per benchmark: lm-eval deep-copies the YAML config holding it (``benchmark: !function ...``).
        return self

    @functools.cached_property
    def report_face(self) -> Any:
        """Its face in the report (loaded once), reading its judged items with its rubrics: the value hands them
        over, no table holds them."""
        return replace(self.load_report_face(), rubrics=dict(self.rubrics))


class Judged(enum.Enum):
    """A judged metric's aggregation, declared (``contract.judged``): what its samples' judge items aggregate to.
    The adapters' ``harness.judged`` makes it the judge's aggregation."""

    SCORE = "score"  # mean rating x the rubric's scale over successful judgements (NaN if none)
    COUNT = "judged"  # judgements with a valid rating
    FAILED = "failed"  # failed judgements (no answer, or no valid rating)


@dataclass(frozen=True)
class Metric:
    """A metric a task reports: its name, its aggregation (a name the harness registers, such as "mean", a
    function of the per-document values, or a judged metric's declaration, ``Judged``, which the
    adapter turns into the judge's aggregation) and which way is better. ``with_context``: the function also takes the
    task's ``TaskContext`` (keyword ``context``), e.g. a metric that writes a run file or asks the judge."""

    name: str
    aggregation: str | Callable | Judged
    higher_is_better: bool = True
    with_context: bool = False


@dataclass(frozen=True)
class LoadedDocs:
    """What a benchmark's loader returns: the documents, and the samples it skipped (``skip_missing``), which the
    task reports as its ``skipped_samples`` metric (None: the benchmark's loader never skips, no such metric)."""

    docs: Sequence[dict]
    skipped: Sequence[Any] | None = None
    # Where the documents came from: the annotation files or folders read, or a Hub dataset as
    # ``hub:<repo>@<revision>``; recorded with their hashes in the task's results (``core.provenance.data_source``).
    read_from: Sequence[str] = ()

    @property
    def split_size(self) -> int:
        """The samples of the split the loader read, skipped ones included."""
        return len(self.docs) + len(self.skipped or ())


def warn_of_skipped(task_name: str, skipped: Sequence[Any], what: str, env_prefix: str) -> None:
    """Say which samples a loader skipped (``what``: e.g. "sample(s) with missing media"), naming the setting that
    skips them (``<env_prefix>_SKIP_MISSING``); nothing when none."""
    if skipped:
        logger.warning(f"{task_name}: skipped {len(skipped)} {what} ({setting_name(env_prefix, 'skip_missing')}):\n  "
                       + "\n  ".join(map(str, skipped)))


def accuracy_breakdowns(names: Iterable[str]) -> list[Metric]:
    """An accuracy per breakdown (``accuracy_<name>``, the mean over its samples), its sample count (``n_<name>``)
    beside it."""
    return [metric for name in names for metric in (Metric(f"accuracy_{name}", "mean"), Metric(f"n_{name}", count))]


@dataclass
class TaskContext:
    """What a benchmark's hooks know of the task that runs them, handed over explicitly: ``process_results`` and
    the spec's run-time hooks always get it, an aggregation when its ``Metric`` says ``with_context``.

    Values, not the adapter that runs the task: ``run_files`` where the task writes the files of its run and the
    model they name (``contract.adapter.RunFiles``), ``dataset_name`` the YAML's (one loader serving several tasks
    reads which of its parts a task asks for), ``judging`` a judged task's judge (``harness.judged.Judging``, else
    None). ``state`` is what the spec's ``run_state`` made for the task (what its metrics share over a run),
    ``loaded`` what its loader returned once the documents are read. ``run``: the run of the evaluation the task takes
    part in (``core.run.SuiteRun``: its judges, failed requests, exit reasons), set by the adapter."""

    task_name: str
    settings: Any
    run_files: RunFiles | None = None
    dataset_name: str | None = None
    judging: Any = None
    state: Any = None
    loaded: LoadedDocs | None = None
    run: Any = None

    # A handle on the running task (its judge and run state), not a value: the harnesses copy and print their task
    # configs, whose hooks are bound to it; a copy is the same context, its text the task's name.
    def __deepcopy__(self, memo: dict) -> TaskContext:
        return self

    def __repr__(self) -> str:
        return f"TaskContext(task_name={self.task_name!r})"


@dataclass(frozen=True)
class Configuration:
    """What a spec's ``configure`` hook sets from the settings beyond the YAML: generation arguments over the YAML's
    (a run's ``--gen_kwargs`` still overrides them) and the inference-prompt preset (None: the harness's choice by
    model, lmms-eval's ``lmms_eval_specific_kwargs``)."""

    generation_kwargs: Mapping[str, Any] = field(default_factory=dict)
    prompt_preset: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TaskSpec:
    """What a benchmark's task does (an lmms-eval task, or an lm-eval baseline), as plain functions: where its
    documents come from, the hooks the harness calls on each document in its order, and the metrics they report.

    The task YAMLs keep what is configuration (``class:``, ``benchmark:``, ``task_spec:``, ``output_type``,
    ``generation_kwargs``, ``lmms_eval_specific_kwargs``, ``metadata``, group aggregations); the adapter their
    ``class:`` names holds the spec and hands the hooks to the harness (a YAML that sets one of them too is an error:
    one place says what a task does). Hooks of the harness's own signature (``doc_to_text`` and the other
    ``doc_to_*``) get no context: what they need of the settings the loader puts into each document."""

    load_docs: Callable[[TaskContext], LoadedDocs]
    doc_to_text: Callable
    metrics: tuple[Metric, ...]
    # (doc, results, context) -> {metric: value}; none: the harness scores the output type its own way (e.g.
    # lmms-eval's multiple-choice accuracy)
    process_results: Callable[[dict, list, TaskContext], dict] | None = None
    doc_to_visual: Callable | None = None  # none for the text-only baselines (lm-eval)
    doc_to_messages: Callable | None = None
    doc_to_target: str | Callable | None = None
    doc_to_choice: Callable | None = None
    # Metrics whose names come from the settings or the documents, which no list can name in advance: added once the
    # documents are loaded, after ``metrics`` and ``skipped_samples`` (those already reported are kept).
    metrics_of_the_data: Callable[[TaskContext, Sequence[dict]], Iterable[Metric]] | None = None
    # What the task's metrics share over a run (made when the task is built; ``TaskContext.state``).
    run_state: Callable[[TaskContext], Any] | None = None
    # Judged tasks: the name of the rubric their judged items carry, from the settings (``contract.judged``).
    judge_rubric: Callable[[Any], str] | None = None
    # Settings that choose what the task asks of the backend beyond the harness's request arguments
    # ({setting name: core.request_options.RequestOption}), and the generative task that asks a backend without
    # loglikelihood the same questions (for a task that ranks candidates by likelihood).
    request_options: Mapping[str, RequestOption] = field(default_factory=dict)
    generative_variant: str | None = None
    # What the settings set of the harness's configuration (generation arguments, the prompt preset), from the YAML's
    # config: called once, when the adapter compiles the task, before the judge and the data are checked.
    configure: Callable[[TaskContext, Mapping[str, Any]], Configuration] | None = None
    # The metrics the settings leave unscored ({metric name prefix: why, naming the setting that would score them}):
    # said in the log and recorded in the task's results (``metadata.not_scored``), which the report shows.
    not_scored: Callable[[TaskContext], Mapping[str, str]] | None = None
    # What the task says of the run's backend once lmms-eval has resolved it, before the model loads: (context, the
    # --model name, whether it takes chat messages); a protocol the backend cannot deliver is said in the log.
    on_backend: Callable[[TaskContext, str, bool], None] | None = None

    # The config keys a spec sets (the harness's names).
    KEYS = ("doc_to_visual", "doc_to_text", "doc_to_messages", "doc_to_target", "doc_to_choice", "process_results",
            "metric_list")

    @property
    def judged(self) -> bool:
        return self.judge_rubric is not None

    @property
    def hooks(self) -> dict[str, Callable]:
        """The harness's per-document hooks the spec sets, by their config keys (``process_results`` aside: the
        adapter binds it to the task's context)."""
        return {key: getattr(self, key) for key in self.KEYS if key not in ("process_results", "metric_list")
                and getattr(self, key) is not None}


def chat_messages(system: str, visuals: list, text: str) -> list[dict]:
    """A chat backend's messages in lmms-eval's form (a ``doc_to_messages`` hook's value): the system prompt as a
    system turn (none when empty), then a user turn of the visuals and the text (lmms-eval's own user turn)."""
    from lmms_eval.api.task import ConfigurableMessagesTask  # imported when lmms-eval asks a task for messages

    system_turn = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    return system_turn + ConfigurableMessagesTask._build_user_turn(visuals, text)
