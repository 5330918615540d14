"""How this suite plugs into lm-eval 0.4.x, for the text-only baselines (YAMLs in ``lm_eval_tasks/``).

``SuiteBaseline`` is the lm-eval counterpart of ``harness.lmms_eval_task.SuiteTask``: it compiles a benchmark and a
task spec the same way (``harness.compiled_task.compile_task``): the same settings (YAML ``metadata`` <
``<PREFIX>_<SETTING>`` environment variables; lm-eval's ``--metadata`` JSON overrides the YAML's), the same
benchmark loaders, and the same ``TaskContext`` handed to ``process_results`` and aggregations, so that a
benchmark's scoring code serves both harnesses unchanged.

lm-eval hands a task nothing of its run but the config, and merges the run's ``--model_args`` into
every task's ``metadata``. What a task needs of the run -- which metadata keys are model arguments
(not settings: a misspelt setting must still be an error) and where the results go (side files such
as a leaderboard submission lie beside them) -- is read from lm-eval's ``simple_evaluate`` call, which
builds the tasks: the suite's one stack walk, until lm-eval hands a task its run
(docs/upstream/issues/lm-eval-task-run-context.md).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from lm_eval.api.task import ConfigurableTask

from lmms_egoplan.core.run import SuiteRun, hand_over, run_of
from lmms_egoplan.harness.compiled_task import LM_EVAL_CONFIG_SOURCE, compile_task, named_task


@dataclass(frozen=True)
class LmEvalRun:
    """What a task knows of the lm-eval run that builds it."""

    model_arg_names: frozenset[str]
    model_name: str  # as lm-eval names the model in its results (from ``pretrained=``, ``model=``, ...)
    output_path: str | None
    model_folder: str  # lm-eval's results folder name for the model (``<output_path>/<model_folder>/``)
    facts: SuiteRun  # what the run learns (shared by its tasks); its stamp: the side files' date-time, lm-eval's format


def current_run() -> LmEvalRun:
    """The run of the innermost ``lm_eval.evaluator.simple_evaluate`` call on the stack (the CLI and
    the Python API both build their tasks inside it); no model arguments and no output path when
    tasks are built outside it (e.g. by a ``TaskManager`` directly)."""
    from lm_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lm_eval.utils import sanitize_model_name, simple_parse_args_string

    frame = sys._getframe()
    while frame is not None and not (frame.f_code.co_name == "simple_evaluate"
                                     and frame.f_globals.get("__name__") == "lm_eval.evaluator"):
        frame = frame.f_back
    model_args = frame.f_locals.get("model_args") if frame is not None else None
    tracker = frame.f_locals.get("evaluation_tracker") if frame is not None else None
    if isinstance(model_args, str):
        model_args = simple_parse_args_string(model_args)
    model_args = model_args if isinstance(model_args, dict) else {}
    model_name = GeneralConfigTracker._get_model_name(model_args) or ""
    return LmEvalRun(
        model_arg_names=frozenset(model_args),
        model_name=model_name,
        output_path=getattr(tracker, "output_path", None),
        model_folder=sanitize_model_name(model_name),
        facts=_call_run(tracker),
    )


def _call_run(tracker: Any) -> SuiteRun:
    """The suite's run of one lm-eval ``simple_evaluate`` call (its side files' date-time, its judges, shared by its
    tasks): kept on the call's results writer (``tracker``, the one object of the call a task reaches), a run of the
    task's own without one."""
    run = run_of(tracker)
    if run is None:
        run = SuiteRun(stamp=datetime.now().isoformat().replace(":", "-"))
        if tracker is not None:
            hand_over(run, tracker)
    return run


@dataclass(frozen=True)
class LmEvalRunFiles:
    """Where a task of an lm-eval run writes its files (``contract.adapter.RunFiles``, what its hooks get): beside
    lm-eval's results, ``<output_path>/<model>/<date-time>_<kind>_<task><suffix>``; ``./<kind>/`` without
    ``--output_path``. ``args``: unused (lm-eval hands an aggregation none)."""

    run: LmEvalRun
    task_name: str

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        file_name = f"{self.run.facts.stamp}_{kind}_{self.task_name}{suffix}"
        if not self.run.output_path:
            return Path.cwd() / kind / file_name
        return Path(self.run.output_path) / self.run.model_folder / file_name

    def evaluated_model(self, args: Any) -> str:
        return self.run.model_name


class SuiteBaseline(ConfigurableTask):
    """The lm-eval adapter: a text-only baseline of the suite, as lm-eval builds it from the YAML whose ``class:``
    names it. The YAML names ``benchmark`` and ``task_spec`` (one of its ``lm_eval_baselines``), as for lmms-eval's
    ``harness.lmms_eval_task.SuiteTask``: the adapter compiles both with the YAML's config into lm-eval's
    (``compiled``), hands it to lm-eval's constructor once, and keeps a judged spec's judge (``judging``)."""

    def __init__(self, config: Mapping[str, Any], **kwargs):
        run = current_run()
        self.benchmark, self.spec = named_task(config, "lm_eval_baselines")
        self.compiled = compile_task(self.benchmark, self.spec, config,
                                     run_files=functools.partial(LmEvalRunFiles, run),
                                     foreign_keys=run.model_arg_names | {LM_EVAL_CONFIG_SOURCE},
                                     kept_metadata=("version", LM_EVAL_CONFIG_SOURCE))
        self.settings = self.compiled.settings
        self.judging = self.compiled.judging
        self.compiled.context.run = run.facts
        if self.judging is not None:
            self.judging.check_answers()  # before any model call, as the lmms-eval tasks do
        super().__init__(config=self.compiled.config, **kwargs)

    def process_results(self, doc, results):
        return self.compiled.finished_scores(super().process_results(doc, results), predict_only=self.predict_only)

    @property
    def predict_only(self) -> bool:
        """``--predict_only``: lm-eval's ``override_metric("bypass")`` replaced the task's metrics."""
        return "bypass" in self._metric_fn_list

    def download(self, dataset_kwargs=None, **kwargs) -> None:
        # lm-eval asks for the data in its constructor; the documents were read when the task was compiled.
        self.dataset = self.compiled.dataset
