"""The files of an lmms-eval run a suite task writes beside lmms-eval's results (judgements, plans, a submission),
and their stamp: one date-time per run, as lmms-eval writes it in its file names; ``LmmsEvalRunFiles``, what a task's
hooks get of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_egoplan.core.run import SuiteRun


def run_stamp(run: SuiteRun, args: Any = None) -> str:
    """One date-time per run (``SuiteRun.stamp``), as lmms-eval writes it in its file names: the one of this run's
    results file (the ``datetime_str`` of its ``simple_evaluate`` call, which made the run), else the time of the
    first call (``--timezone`` honoured)."""
    if run.stamp is None:
        from lmms_eval.utils import get_datetime_str

        timezone = getattr(args, "timezone", None)
        stamp = get_datetime_str(timezone=timezone) if timezone else get_datetime_str()
        run.stamp = stamp.replace(":", "-")
    return run.stamp


def run_model_name(args: Any) -> str:
    """The evaluated model as lmms-eval names it in its output folder (from ``pretrained=`` etc.)."""
    from lmms_eval.loggers.evaluation_tracker import GeneralConfigTracker

    model_args = getattr(args, "model_args", "")
    return GeneralConfigTracker._get_model_name(model_args if isinstance(model_args, str) else "")


def run_file(run: SuiteRun, args: Any, task: str, kind: str, suffix: str = ".jsonl") -> Path:
    """Where a task writes a file of this run (judgements, plans, a submission): beside lmms-eval's
    results file, ``<output_path>/<model>/<date-time>_<kind>_<task><suffix>`` (the date-time of
    the run, ``run_stamp``, in lmms-eval's format and ``--timezone``), so that runs of other
    models or at other times never overwrite it; ``./<kind>/`` without ``--output_path``."""
    file_name = f"{run_stamp(run, args)}_{kind}_{task}{suffix}"
    output_path = getattr(args, "output_path", None)
    if not output_path:
        return Path.cwd() / kind / file_name
    from lmms_eval.utils import sanitize_model_name

    return Path(output_path) / sanitize_model_name(run_model_name(args)) / file_name


@dataclass
class LmmsEvalRunFiles:
    """Where a task of an lmms-eval run writes its files (``contract.adapter.RunFiles``, what its hooks get); ``run``:
    the task's run, which names them (the adapter sets the evaluation's, ``SuiteTask.join_run``)."""

    task_name: str
    run: SuiteRun

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        return run_file(self.run, args, self.task_name, kind, suffix)

    def evaluated_model(self, args: Any) -> str:
        return run_model_name(args)
