"""The contract between a harness adapter and a benchmark's scoring, written down.

A benchmark's scoring class (its ``<Benchmark>Scoring``, or ``judged.JudgedScoring`` and a subclass) comes
first in a task class's bases and one adapter after it: ``lmms_eval_task.BenchmarkTask`` (lmms-eval)
or ``lm_eval_task.LmEvalBenchmarkTask`` (lm-eval). ``HarnessTask`` is all the scoring may read or
call on ``self`` that the adapter provides; the scoring provides ``BenchmarkScoring`` in return. No
private attribute of either side is read across (tests/harness/test_benchmark_task.py checks both adapters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Protocol, runtime_checkable


@runtime_checkable
class HarnessTask(Protocol):
    """What an adapter gives a benchmark's scoring."""

    settings: Any  # the benchmark's Settings dataclass, resolved once: defaults < the task's metadata (its YAML; under lm-eval with the run's --metadata merged in) < <ENV_PREFIX>_<SETTING> environment variables
    config: Any  # the harness's task config: ``task`` (the name), ``generation_kwargs``, ``dataset_name``, ...
    scoring: Callable[..., dict]  # the YAML's process_results, context-bound (kept under --predict_only)

    @property
    def predict_only(self) -> bool:
        """The run logs outputs and scores nothing (the harness replaced the metrics by "bypass")."""

    def add_metric(self, name: str, aggregation: str | Callable, *, higher_is_better: bool = True) -> None:
        """Report ``name`` beside the YAML's metrics, aggregated by a registered name or a function."""

    def has_metric(self, name: str) -> bool:
        """Whether the task reports ``name``."""

    def metrics_aggregated_by(self, *aggregations: Callable) -> list[str]:
        """The task's metrics whose aggregation is one of ``aggregations``."""

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        """Where the task writes a file of this run, beside the harness's results."""

    def evaluated_model(self, args: Any) -> str:
        """The evaluated model as the harness's results name it."""


class BenchmarkScoring(Protocol):
    """What a benchmark's scoring gives the adapter."""

    Settings: ClassVar[type]  # a dataclass of the benchmark's settings
    ENV_PREFIX: ClassVar[str]  # environment overrides are <ENV_PREFIX>_<SETTING>

    def load_docs(self) -> Iterable[dict]:
        """The benchmark's documents, read from the release files its settings point at."""
