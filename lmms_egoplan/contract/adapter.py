"""The contract between a harness adapter and a benchmark's hooks, written down.

A benchmark's hooks are plain functions (``contract.benchmark.TaskSpec``); those that need their run get a
``TaskContext`` (``contract.benchmark``), whose values the adapter hands over when it compiles the task
(``harness.compiled_task``), none of them the adapter itself: ``RunFiles`` is where a task writes the files of its
run, from the adapter of lmms-eval (``harness.run_files.LmmsEvalRunFiles``) or of lm-eval
(``harness.lm_eval_task.LmEvalRunFiles``). ``ChecksBeforeTheModel``, ``KeysItsAnswers`` and ``JoinsARun`` are what
compat may call on lmms-eval's adapter (``JoinsARun`` on the suite's backends too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RunFiles(Protocol):
    """Where a task writes a file of its run beside the harness's results, and the evaluated model they name.
    ``args``: what the harness hands an aggregation (lmms-eval's CLI arguments; lm-eval hands none)."""

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        """``<output_path>/<model>/<date-time>_<kind>_<task><suffix>``; ``./<kind>/`` without an output path."""

    def evaluated_model(self, args: Any) -> str:
        """The evaluated model as the harness's results name it."""


# The run file of the per-sample values of metrics a task scores at aggregation (plans against gold plans, say): a
# JSON line per sample, holding each such metric in whose mean it counts; the report's intervals read it.
SAMPLE_SCORES = "sample_scores"


@runtime_checkable
class ChecksBeforeTheModel(Protocol):
    """A task that checks what depends on the run before the model loads: the call the lmms-eval workaround that
    builds the suite's tasks first makes on each (``compat.tasks.check_suite_tasks_before_the_model``); lmms-eval's
    adapter, ``harness.lmms_eval_task.SuiteTask``, declares it."""

    def check_before_the_model(self, cli_args: Any) -> None:
        """Refuse the run now (a ``SettingsError`` or ``InputError``) if it cannot serve this task."""


@runtime_checkable
class KeysItsAnswers(Protocol):
    """A task that says what the model's answers to it depend on, so that the response cache keys them by that alone
    (``compat.durability.key_suite_answers_by_what_changes_them``); lmms-eval's adapter,
    ``harness.lmms_eval_task.SuiteTask``, declares it."""

    def answer_identity(self) -> dict:
        """What the answers depend on, as JSON values: ``config`` (the task's config without what records or scores),
        ``settings`` (those that change answers, by name) and ``data`` (its sources by content)."""


@runtime_checkable
class JoinsARun(Protocol):
    """A task or backend that keeps what it learns on the run of the evaluation it takes part in
    (``core.run.SuiteRun``): the lmms-eval workaround that wraps ``simple_evaluate`` makes one run per call and hands
    it to each (``compat.tasks.check_suite_tasks_before_the_model``). lmms-eval's adapter,
    ``harness.lmms_eval_task.SuiteTask``, and the suite's backends (``models.doc_requests.DocRequests``) declare it;
    until they join one, each keeps its facts on a run of its own."""

    def join_run(self, run: Any) -> None:
        """Keep this evaluation's facts on ``run`` from now on."""
