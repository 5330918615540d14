"""Compile, don't patch: what both harness adapters (lmms-eval's ``lmms_eval_task.SuiteTask``, lm-eval's
``lm_eval_task.SuiteBaseline``) do before the harness builds a task, written once. ``compile_task`` turns a benchmark,
its task spec and the YAML's config into the whole config the harness's constructor takes, once: the settings
resolved and recorded in its ``metadata``, the hooks with the task's ``TaskContext`` bound, and every metric with its
aggregation, those the documents decide included. Both harnesses prepare a task's metrics before they ask for its
data, so the documents are read here, after the judge's settings are checked, and handed over as the harness's
dataset. It imports neither harness."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

from loguru import logger

from lmms_egoplan.catalogue import CATALOGUE
from lmms_egoplan.contract.adapter import RunFiles
from lmms_egoplan.contract.benchmark import Benchmark, Configuration, Judged, LoadedDocs, Metric, TaskContext, TaskSpec
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.provenance import data_source
from lmms_egoplan.core.settings import SETTINGS_FILE_KEY, answer_settings, resolve_settings
from lmms_egoplan.core.settings_file import run_settings_file
from lmms_egoplan.core.statistics import largest

if TYPE_CHECKING:
    from lmms_egoplan.harness.judged import Judging

# The metadata key lm-eval's task factory adds to every task it builds (lmms-eval adds none).
LM_EVAL_CONFIG_SOURCE = "config_source"
# The keys of a suite task's YAML that name what it runs: its benchmark's value by dotted path
# (``contract.benchmark.Benchmark``, e.g. ``lmms_egoplan.egoplan.benchmark.EGOPLAN``; a ``!function`` tag resolves one
# beside the YAML, as lmms-eval's ``class:`` does) and the name of one of that value's task specs.
BENCHMARK_KEY, TASK_SPEC_KEY = "benchmark", "task_spec"
# The output types of generative tasks (lmms-eval's; lm-eval's is the first): lmms-eval's adapter counts their
# failed requests.
GENERATIVE_OUTPUT_TYPES = ("generate_until", "generate_until_multi_round", "generate_until_agentic")
# Samples a loader skipped (``skip_missing``): a run-level number every document repeats.
SKIPPED_SAMPLES = Metric("skipped_samples", largest, higher_is_better=False)

# The config keys no answer depends on: the record of the settings, judge and data (``answer_identity`` takes what
# of them does), and the scoring.
_NOT_IN_ANSWERS = frozenset({"metadata", "metric_list", "process_results"})
# Where a data source lies (``core.provenance.data_source``): its content (SHA-256, Hub revision) identifies it.
_DATA_LOCATIONS = frozenset({"file", "folder"})


@dataclass(frozen=True)
class CompiledTask:
    """A suite task, compiled: ``config`` is what the adapter hands the harness's constructor; the rest is what the
    adapter keeps of it (``scoring``: ``process_results`` with the context bound, which ``--predict_only`` removes
    from the harness's config; ``dataset``: the documents, a ``datasets.DatasetDict`` under ``split``)."""

    config: dict[str, Any]
    context: TaskContext
    metrics: tuple[Metric, ...]
    scoring: Callable | None
    split: str
    dataset: Any
    configuration: Configuration

    @property
    def settings(self) -> Any:
        return self.context.settings

    @property
    def judging(self) -> Judging | None:
        return self.context.judging

    @property
    def aggregations(self) -> dict[str, str | Callable]:
        """Each metric's aggregation by its name, as the config's ``metric_list`` holds them."""
        return {entry["metric"]: entry["aggregation"] for entry in self.config["metric_list"]}

    @property
    def judged_metrics(self) -> list[str]:
        """The metrics a judge scores (declared ``Judged``)."""
        return [metric.name for metric in self.metrics if isinstance(metric.aggregation, Judged)]

    def answer_identity(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """What the model's answers in this task depend on (``contract.adapter.KeysItsAnswers``): ``config`` (the
        harness's, as it dumps it) without the record of the settings and the scoring, the settings that change
        answers (``core.settings.answer_settings``), and the data by content, not by where it lies."""
        return {"config": {key: value for key, value in config.items() if key not in _NOT_IN_ANSWERS},
                "settings": answer_settings(self.settings),
                "data": [{key: value for key, value in source.items() if key not in _DATA_LOCATIONS}
                         for source in self.config["metadata"]["data_read_from"]]}

    def finished_scores(self, scores: dict, *, predict_only: bool) -> dict:
        """A document's metric values as the task reports them: with the run's skipped samples (when the loader
        skips any kind) and, in a judged task, each judged item carrying its judge."""
        loaded = self.context.loaded
        if not predict_only and loaded.skipped is not None:
            scores = {**scores, SKIPPED_SAMPLES.name: float(len(loaded.skipped))}
        return self.judging.with_judge(scores) if self.judging is not None else scores


def compile_task(benchmark: Benchmark, spec: TaskSpec, yaml_config: Mapping[str, Any], *,
                 run_files: Callable[[str], RunFiles], counted: Sequence[Metric] = (),
                 foreign_keys: Collection[str] = frozenset(), kept_metadata: Collection[str] | None = None,
                 record_judgements: Callable | None = None) -> CompiledTask:
    """The task the YAML names, compiled, in the order a user sees its checks: its settings (``metadata`` keys
    other than ``foreign_keys`` must be settings; the YAML's ``kept_metadata`` keys stay, all when None), the
    spec's configuration, the judge's settings (a judged spec: ``harness.judged.Judging``, reporting its outcomes to
    ``record_judgements``), the documents, then every metric: the spec's, the adapter's ``counted`` ones (those not
    listed yet), ``skipped_samples`` where the loader skips, and those the documents decide."""
    config = without_spec_keys(yaml_config, spec)
    metadata = dict(config.get("metadata") or {})
    settings_file = run_settings_file([row.name for row in CATALOGUE])
    if benchmark.data is not None:  # the run refuses what check-data refuses of the file
        settings_file.check_counted_parts(benchmark.name, [part.name for part in benchmark.data.parts])
    settings = resolve_settings(benchmark.settings, task=config["task"], metadata=metadata,
                                env_prefix=benchmark.entry.env_prefix, foreign_keys=frozenset(foreign_keys),
                                settings_file=settings_file, benchmark=benchmark.name)
    kept = metadata if kept_metadata is None else {key: metadata[key] for key in metadata.keys() & set(kept_metadata)}
    # The results record the settings file the values came from (over the YAML's, under the variables).
    read = {SETTINGS_FILE_KEY: str(settings_file.path)} if settings_file.path else {}
    config["metadata"] = {**kept, **jsonable_settings(settings), **read}
    context = TaskContext(task_name=config["task"], settings=settings, run_files=run_files(config["task"]),
                          dataset_name=config.get("dataset_name"))
    configuration = spec.configure(context, config) if spec.configure is not None else Configuration()
    if configuration.generation_kwargs:
        config["generation_kwargs"] = {**(config.get("generation_kwargs") or {}), **configuration.generation_kwargs}
    if spec.judged:
        context.judging = judging(benchmark, spec, context, config["metadata"], record_judgements)
        context.judging.check_settings()  # a run must not read data, let alone generate, with a judge that cannot work
    if spec.run_state is not None:
        context.state = spec.run_state(context)
    split = config.get("test_split") or config.get("validation_split")
    if split is None:
        raise ValueError(f"task {context.task_name}: set test_split (or validation_split) in its YAML")
    context.loaded = loaded = spec.load_docs(context)
    if not loaded.docs:  # nothing to evaluate: a data problem (an empty file, a filter that keeps nothing), named
        read = ", ".join(map(str, loaded.read_from)) or "its data"
        raise InputError(f"task {context.task_name}: no sample to evaluate in {read}; check the files there and the "
                         f"{benchmark.entry.env_prefix}_* settings (data, splits, filters) that choose them")
    config["metadata"]["data_read_from"] = data_source(loaded.read_from)
    config["metadata"]["not_scored"] = not_scored(spec, context)
    if context.judging is not None:
        context.judging.record_judge()
    metrics = every_metric(spec, context, counted)
    config["metric_list"] = [{"metric": metric.name, "aggregation": aggregation(metric, context),
                              "higher_is_better": metric.higher_is_better} for metric in metrics]
    scoring = functools.partial(spec.process_results, context=context) if spec.process_results is not None else None
    config.update(spec.hooks, **({"process_results": scoring} if scoring is not None else {}))
    return CompiledTask(config=config, context=context, metrics=metrics, scoring=scoring, split=split,
                        dataset=as_dataset(split, loaded), configuration=configuration)


def not_scored(spec: TaskSpec, context: TaskContext) -> dict[str, str]:
    """The metrics the settings leave unscored, each "not scored: <why, and the setting to set>", said once in the
    log as the task is built (the results record them; the report shows them)."""
    unscored = {metric: f"{NOT_SCORED}: {why}" for metric, why in (spec.not_scored(context).items()
                                                                   if spec.not_scored is not None else ())}
    for metric, why in unscored.items():
        logger.warning(f"{context.task_name}: {metric} {why}")
    return unscored


NOT_SCORED = "not scored"


def named_task(yaml_config: Mapping[str, Any], harness_specs: str) -> tuple[Benchmark, TaskSpec]:
    """The benchmark and the task spec the YAML names (``benchmark``, ``task_spec``): one of the value's
    ``harness_specs`` (``Benchmark.lmms_eval_tasks`` or ``Benchmark.lm_eval_baselines``). A missing or unknown name
    is an InputError naming the YAML and the key."""
    where = yaml_of(yaml_config)
    benchmark = yaml_config.get(BENCHMARK_KEY)
    if not isinstance(benchmark, Benchmark):
        said = "names no benchmark" if benchmark is None else \
            f"`{BENCHMARK_KEY}:` is {benchmark!r}, not a Benchmark value (lmms_egoplan.contract.benchmark.Benchmark)"
        raise InputError(f"{where} {said}: set `{BENCHMARK_KEY}: !function lmms_egoplan.<benchmark>.benchmark.<VALUE>`"
                         f" (the harness imports the value, as it imports `class:`)")
    specs: Mapping[str, TaskSpec] = getattr(benchmark, harness_specs)
    name = yaml_config.get(TASK_SPEC_KEY)
    if not isinstance(name, str) or name not in specs:
        said = "names no task spec" if name is None else f"`{TASK_SPEC_KEY}: {name}` is not a task spec of it"
        raise InputError(f"{where}: {said}; set `{TASK_SPEC_KEY}:` to one of {benchmark.name}'s {harness_specs}: "
                         f"{', '.join(sorted(specs)) or '(none)'}")
    return benchmark, specs[name]


def yaml_of(yaml_config: Mapping[str, Any]) -> str:
    """The YAML a config came from, as an error names it: its task, and its path where the harness says it (lm-eval's
    ``metadata.config_source``; lmms-eval hands a task no path)."""
    path = (yaml_config.get("metadata") or {}).get(LM_EVAL_CONFIG_SOURCE)
    return f"the YAML of task {yaml_config.get('task')}" + (f" ({path})" if path else "")


def without_spec_keys(yaml_config: Mapping[str, Any], spec: TaskSpec) -> dict[str, Any]:
    """The YAML's config without ``class`` and the keys naming the task spec; a key the spec sets is an error (one
    place says what a task does)."""
    config = {key: value for key, value in yaml_config.items() if key not in ("class", BENCHMARK_KEY, TASK_SPEC_KEY)}
    if doubled := [key for key in TaskSpec.KEYS if key in config]:
        raise InputError(f"task {config['task']}: {', '.join(doubled)} come from its benchmark's task spec "
                         f"({spec.doc_to_text.__module__}); remove them from its YAML")
    return config


def jsonable_settings(settings: Any) -> dict[str, Any]:
    """The fields of a settings dataclass as a task config's ``metadata`` records them (JSON values)."""
    return {key: str(value) if isinstance(value, Path) else value
            for key, value in dataclasses.asdict(settings).items()}


def judging(benchmark: Benchmark, spec: TaskSpec, context: TaskContext, metadata: dict,
            record_judgements: Callable | None) -> Judging:
    """A judged task's judge (loaded only for a judged spec), recording itself in the config's ``metadata``."""
    from lmms_egoplan.harness.judged import Judging

    return Judging(benchmark, spec, context, metadata, record_outcome=record_judgements)


def every_metric(spec: TaskSpec, context: TaskContext, counted: Sequence[Metric]) -> tuple[Metric, ...]:
    """Every metric the task reports, in the order the results list them."""
    metrics = {metric.name: metric for metric in spec.metrics}
    metrics.update((metric.name, metric) for metric in counted if metric.name not in metrics)
    if context.loaded.skipped is not None:
        metrics[SKIPPED_SAMPLES.name] = SKIPPED_SAMPLES
    if spec.metrics_of_the_data is not None:
        for metric in spec.metrics_of_the_data(context, context.loaded.docs):
            metrics.setdefault(metric.name, metric)
    return tuple(metrics.values())


def aggregation(metric: Metric, context: TaskContext) -> str | Callable:
    """``metric``'s aggregation as the harness's config holds it: a registered name (such as "mean") as it is, a
    judged declaration (``contract.judged``) made the judge's aggregation (``harness.judged``, loaded only for a
    judged metric), the context bound where the metric takes it."""
    function = metric.aggregation
    if isinstance(function, Judged):
        from lmms_egoplan.harness.judged import JUDGED_AGGREGATIONS

        function = JUDGED_AGGREGATIONS[function]
    if metric.with_context and not isinstance(function, str):
        return functools.partial(function, context=context)
    return function


def as_dataset(split: str, loaded: LoadedDocs) -> Any:
    """The documents as the harness's ``datasets.DatasetDict``, under the split the YAML names."""
    import datasets

    return datasets.DatasetDict({split: datasets.Dataset.from_list(list(loaded.docs))})
