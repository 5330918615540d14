"""The task set-up both harness adapters share (lmms-eval's ``lmms_eval_task.BenchmarkTask`` and
lm-eval's ``lm_eval_task.LmEvalBenchmarkTask``), written once: settings resolved and recorded in the
config's ``metadata``, the run context (``settings``, ``task_name``, ``task``) bound into
``process_results`` and the aggregations, metrics added at run time, the documents handed over as
the harness's dataset. It imports neither harness (each adapter names its aggregation registry)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from pathlib import Path
from typing import Any, Callable, ClassVar, Collection, Mapping

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.harness.benchmark import TaskSpec

# The metadata key lm-eval's task factory adds to every task it builds (lmms-eval adds none).
LM_EVAL_CONFIG_SOURCE = "config_source"


def bind_context(function: Any, context: Mapping[str, Any]) -> Any:
    """``function`` with the entries of ``context`` it declares as parameters bound by keyword."""
    if not callable(function):
        return function
    wanted = {name: value for name, value in context.items() if name in inspect.signature(function).parameters}
    return functools.partial(function, **wanted) if wanted else function


def jsonable_settings(settings: Any) -> dict[str, Any]:
    """The fields of a settings dataclass as a task config's ``metadata`` records them (JSON values)."""
    return {key: str(value) if isinstance(value, Path) else value for key, value in dataclasses.asdict(settings).items()}


def benchmark_dataset(task: Any) -> tuple[str, Any]:
    """A suite task's documents (``task.load_docs()``) as the harness's ``datasets.DatasetDict``, under
    the split its YAML names; shared by the lmms-eval and the lm-eval task classes."""
    import datasets

    split = task.config.test_split or task.config.validation_split
    if split is None:
        raise ValueError(f"task {task.config.task}: set test_split (or validation_split) in its YAML")
    docs = list(task.load_docs())
    if not docs:
        raise ValueError(f"task {task.config.task}: the benchmark loader returned no samples")
    return split, datasets.DatasetDict({split: datasets.Dataset.from_list(docs)})


class SuiteTaskSetup:
    """The shared half of a harness adapter (it comes before the harness's task class in the bases).

    Subclasses set ``Settings`` (a dataclass of the benchmark's settings) and ``ENV_PREFIX``
    (environment overrides are ``<ENV_PREFIX>_<SETTING>``); the adapter sets ``registered_aggregation``
    (its harness's aggregation registry) and calls ``harness_config`` before, ``bind_scoring`` after
    the harness's ``__init__``.
    """

    Settings: ClassVar[type]
    ENV_PREFIX: ClassVar[str]
    registered_aggregation: ClassVar[Callable[[str], Callable]]
    SPEC: ClassVar[TaskSpec | None] = None  # the benchmark's task spec: its hooks and metrics (none: the YAML's)

    def harness_config(self, config: Mapping[str, Any], *, foreign_keys: Collection[str] = frozenset(),
                       kept_metadata: Collection[str] | None = None) -> dict[str, Any]:
        """The config to hand the harness: without ``class``, its ``metadata`` the effective settings
        (``self.settings``, resolved once) plus ``kept_metadata`` keys (all when None).
        ``foreign_keys``: metadata keys that are not settings (a misspelt setting stays an error)."""
        config = {key: value for key, value in config.items() if key != "class"}
        if self.SPEC is not None:
            if doubled := [key for key in TaskSpec.KEYS if key in config]:
                raise InputError(f"task {config['task']}: {', '.join(doubled)} come from its benchmark's task "
                                    f"spec ({type(self).__module__}); remove them from its YAML")
            config.update(self.SPEC.config_entries())
        metadata = dict(config.get("metadata") or {})
        self.settings = resolve_settings(self.Settings, task=config["task"], metadata=metadata,
                                         env_prefix=self.ENV_PREFIX, foreign_keys=frozenset(foreign_keys))
        kept = metadata if kept_metadata is None else {key: metadata[key] for key in metadata.keys() & set(kept_metadata)}
        config["metadata"] = {**kept, **jsonable_settings(self.settings)}
        self._context = {"settings": self.settings, "task_name": config["task"], "task": self}
        return config

    def bind_scoring(self) -> None:
        """Bind the run context into the YAML's ``process_results``, kept as ``self.scoring``
        (``--predict_only`` removes it from the config)."""
        self.config.process_results = bind_context(self.config.process_results, self._context)
        self.scoring = self.config.process_results

    def bind_aggregations(self) -> None:
        self._aggregation_list = {name: bind_context(fn, self._context) for name, fn in self._aggregation_list.items()}

    def has_metric(self, name: str) -> bool:
        """Whether the task reports ``name`` (listed by its YAML or added)."""
        return name in self._aggregation_list

    def metrics_aggregated_by(self, *aggregations: Callable) -> list[str]:
        """The task's metrics whose aggregation is one of ``aggregations`` (context-bound or not)."""
        return [name for name, function in self._aggregation_list.items()
                if getattr(function, "func", function) in aggregations]

    def add_metric(self, name: str, aggregation: str | Callable, *, higher_is_better: bool = True) -> None:
        """Report ``name`` (which ``process_results`` returns for the docs it applies to), aggregated
        by ``aggregation`` (a name the harness registers, such as "mean", or a function, context-bound as above)."""
        function = type(self).registered_aggregation(aggregation) if isinstance(aggregation, str) else aggregation
        self._metric_fn_list[name] = None
        self._metric_fn_kwargs[name] = {}
        self._aggregation_list[name] = bind_context(function, self._context)
        self._higher_is_better[name] = higher_is_better
