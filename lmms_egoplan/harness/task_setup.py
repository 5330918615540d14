"""What both harness adapters (lmms-eval's ``lmms_eval_task.SuiteTask``, lm-eval's ``lm_eval_task.SuiteBaseline``)
hold, written once: ``TaskSetup``, the benchmark and its task spec made into a harness config, the settings resolved
once and recorded in the config's ``metadata``, the ``TaskContext`` the spec's hooks get, the metrics added once the
documents are loaded, and the documents handed over as the harness's dataset. It imports neither harness (each
adapter hands it its aggregation registry)."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from lmms_egoplan.contract.benchmark import Benchmark, Judged, Metric, TaskContext, TaskSpec
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.core.statistics import largest

# The metadata key lm-eval's task factory adds to every task it builds (lmms-eval adds none).
LM_EVAL_CONFIG_SOURCE = "config_source"
# Samples a loader skipped (``skip_missing``): a run-level number every document repeats.
SKIPPED_SAMPLES = Metric("skipped_samples", largest, higher_is_better=False)


def declared_aggregation(metric: Metric) -> str | Callable:
    """``metric``'s aggregation as the harness's config holds it: a judged declaration (``contract.judged``) made
    the judge's aggregation (``harness.judged``, loaded only for a judged metric)."""
    if isinstance(metric.aggregation, Judged):
        from lmms_egoplan.harness.judged import JUDGED_AGGREGATIONS

        return JUDGED_AGGREGATIONS[metric.aggregation]
    return metric.aggregation


def jsonable_settings(settings: Any) -> dict[str, Any]:
    """The fields of a settings dataclass as a task config's ``metadata`` records them (JSON values)."""
    return {key: str(value) if isinstance(value, Path) else value
            for key, value in dataclasses.asdict(settings).items()}


class TaskSetup:
    """A suite task's benchmark and spec, as its adapter holds them: ``harness_config`` before the harness builds
    the task, ``bind`` after; ``load`` when the harness asks for the data."""

    def __init__(self, task: Any, benchmark: Benchmark, spec: TaskSpec, registered_aggregation: Callable[[str], Any]):
        self.task = task
        self.benchmark = benchmark
        self.spec = spec
        self._registered_aggregation = registered_aggregation

    @property
    def env_prefix(self) -> str:
        return self.benchmark.entry.env_prefix

    def harness_config(self, config: Mapping[str, Any], *, foreign_keys: Collection[str] = frozenset(),
                       kept_metadata: Collection[str] | None = None) -> dict[str, Any]:
        """The config to hand the harness: the YAML's without ``class``, with the spec's hooks and metrics, its
        ``metadata`` the effective settings (``self.settings``, resolved once) plus ``kept_metadata`` keys (all when
        None). ``foreign_keys``: metadata keys that are not settings (a misspelt setting stays an error)."""
        config = {key: value for key, value in config.items() if key != "class"}
        if doubled := [key for key in TaskSpec.KEYS if key in config]:
            raise InputError(f"task {config['task']}: {', '.join(doubled)} come from its benchmark's task spec "
                             f"({self.spec.doc_to_text.__module__}); remove them from its YAML")
        config.update(self.spec.config_entries(declared_aggregation))
        metadata = dict(config.get("metadata") or {})
        self.settings = resolve_settings(self.benchmark.settings, task=config["task"], metadata=metadata,
                                         env_prefix=self.env_prefix, foreign_keys=frozenset(foreign_keys))
        kept = metadata if kept_metadata is None else {key: metadata[key]
                                                       for key in metadata.keys() & set(kept_metadata)}
        config["metadata"] = {**kept, **jsonable_settings(self.settings)}
        self.context = TaskContext(task_name=config["task"], settings=self.settings, task=self.task)
        if self.spec.run_state is not None:
            self.context.state = self.spec.run_state(self.context)
        return config

    def bind(self) -> None:
        """Once the harness has built the task: the context bound into ``process_results`` (kept as ``scoring``:
        ``--predict_only`` removes it from the config) and into the aggregations that take it; a judged task's
        judge recorded in its config."""
        if self.spec.process_results is not None:
            self.scoring = functools.partial(self.spec.process_results, context=self.context)
            self.task.config.process_results = self.scoring
        for metric in self.spec.metrics:
            if metric.with_context and metric.name in self.task._aggregation_list:
                self.task._aggregation_list[metric.name] = self._aggregation(metric)
        if self.task.judging is not None:
            self.task.judging.record_judge()

    def load(self) -> tuple[str, Any]:
        """The spec's documents as the harness's ``datasets.DatasetDict``, under the split the YAML names; the
        metrics of the data added."""
        import datasets

        config = self.task.config
        split = config.test_split or config.validation_split
        if split is None:
            raise ValueError(f"task {config.task}: set test_split (or validation_split) in its YAML")
        self.context.loaded = loaded = self.spec.load_docs(self.context)
        if not loaded.docs:
            raise ValueError(f"task {config.task}: the benchmark loader returned no samples")
        if loaded.skipped is not None:
            self.add_metric(SKIPPED_SAMPLES)
        if self.spec.metrics_of_the_data is not None:
            for metric in self.spec.metrics_of_the_data(self.context, loaded.docs):
                if not self.has_metric(metric.name):
                    self.add_metric(metric)
        return split, datasets.DatasetDict({split: datasets.Dataset.from_list(list(loaded.docs))})

    def finished_scores(self, scores: dict) -> dict:
        """A document's metric values as the task reports them: with the run's skipped samples (when the loader
        skips any kind) and, in a judged task, each judged item carrying its judge."""
        loaded = self.context.loaded
        if not self.task.predict_only and loaded is not None and loaded.skipped is not None:
            scores = {**scores, SKIPPED_SAMPLES.name: float(len(loaded.skipped))}
        return self.task.judging.with_judge(scores) if self.task.judging is not None else scores

    def has_metric(self, name: str) -> bool:
        """Whether the task reports ``name`` (the spec lists it, or it was added)."""
        return name in self.task._aggregation_list

    def metrics_aggregated_by(self, *aggregations: Callable) -> list[str]:
        """The task's metrics whose aggregation is one of ``aggregations`` (context-bound or not)."""
        return [name for name, function in self.task._aggregation_list.items()
                if getattr(function, "func", function) in aggregations]

    def add_metric(self, metric: Metric) -> None:
        """Report ``metric`` (which ``process_results`` returns for the documents it applies to)."""
        task = self.task
        task._metric_fn_list[metric.name] = None
        task._metric_fn_kwargs[metric.name] = {}
        task._aggregation_list[metric.name] = self._aggregation(metric)
        task._higher_is_better[metric.name] = metric.higher_is_better

    def _aggregation(self, metric: Metric) -> Callable:
        """``metric``'s aggregation as the harness calls it: a registered name looked up, the context bound."""
        aggregation = declared_aggregation(metric)
        if isinstance(aggregation, str):
            return self._registered_aggregation(aggregation)
        if metric.with_context:
            return functools.partial(aggregation, context=self.context)
        return aggregation
