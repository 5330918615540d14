"""The contract between a harness adapter and a benchmark's hooks, written down.

A benchmark's hooks are plain functions (``contract.benchmark.TaskSpec``); those that need their task get a
``TaskContext`` whose ``task`` is the adapter: ``lmms_eval_task.SuiteTask`` (lmms-eval) or
``lm_eval_task.SuiteBaseline`` (lm-eval). ``HarnessTask`` is all a hook may read or call on it; no private
attribute of the adapter is read by a benchmark (tests/harness/test_benchmark_task.py checks both adapters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class HarnessTask(Protocol):
    """What an adapter gives a benchmark's hooks."""

    # The benchmark's settings, resolved once: defaults < the task's metadata (its YAML; under lm-eval with the
    # run's --metadata merged in) < <ENV_PREFIX>_<SETTING> environment variables.
    settings: Any
    config: Any  # the harness's task config: ``task`` (the name), ``generation_kwargs``, ``dataset_name``, ...
    judging: Any  # a judged task's judge (``harness.judged.Judging``), else None

    @property
    def predict_only(self) -> bool:
        """The run logs outputs and scores nothing (the harness replaced the metrics by "bypass")."""

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        """Where the task writes a file of this run, beside the harness's results."""

    def evaluated_model(self, args: Any) -> str:
        """The evaluated model as the harness's results name it."""


@runtime_checkable
class ChecksBeforeTheModel(Protocol):
    """A task that checks what depends on the run before the model loads: the call the lmms-eval workaround that
    builds the suite's tasks first makes on each (``compat.tasks.check_suite_tasks_before_the_model``); lmms-eval's
    adapter, ``harness.lmms_eval_task.SuiteTask``, declares it."""

    def check_before_the_model(self, cli_args: Any) -> None:
        """Refuse the run now (a ``SettingsError`` or ``InputError``) if it cannot serve this task."""
