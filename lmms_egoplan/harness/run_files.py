"""The files of an lmms-eval run a suite task writes beside lmms-eval's results (judgements, plans, a submission),
and their stamp: one date-time per run, as lmms-eval writes it in its file names; ``LmmsEvalRunFiles``, what a task's
hooks get of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_egoplan.compat.results import run_datetime_str
from lmms_egoplan.core.run_state import RUN


def run_stamp(args: Any = None) -> str:
    """One date-time per run (``RUN.stamp``), as lmms-eval writes it in its file names: the one of
    this run's results file (``compat.results.run_datetime_str``), else the time of the first call
    (``--timezone`` honoured)."""
    if RUN.stamp is None:
        stamp = run_datetime_str(args)
        if stamp is None:
            from lmms_eval.utils import get_datetime_str

            timezone = getattr(args, "timezone", None)
            stamp = get_datetime_str(timezone=timezone) if timezone else get_datetime_str()
        RUN.stamp = stamp.replace(":", "-")
    return RUN.stamp


def run_model_name(args: Any) -> str:
    """The evaluated model as lmms-eval names it in its output folder (from ``pretrained=`` etc.)."""
    from lmms_eval.loggers.evaluation_tracker import GeneralConfigTracker

    model_args = getattr(args, "model_args", "")
    return GeneralConfigTracker._get_model_name(model_args if isinstance(model_args, str) else "")


def run_file(args: Any, task: str, kind: str, suffix: str = ".jsonl") -> Path:
    """Where a task writes a file of this run (judgements, plans, a submission): beside lmms-eval's
    results file, ``<output_path>/<model>/<date-time>_<kind>_<task><suffix>`` (the date-time of
    this process's first such file, in lmms-eval's format and ``--timezone``), so that runs of other
    models or at other times never overwrite it; ``./<kind>/`` without ``--output_path``."""
    file_name = f"{run_stamp(args)}_{kind}_{task}{suffix}"
    output_path = getattr(args, "output_path", None)
    if not output_path:
        return Path.cwd() / kind / file_name
    from lmms_eval.utils import sanitize_model_name

    return Path(output_path) / sanitize_model_name(run_model_name(args)) / file_name


@dataclass(frozen=True)
class LmmsEvalRunFiles:
    """Where a task of an lmms-eval run writes its files (``contract.adapter.RunFiles``, what its hooks get)."""

    task_name: str

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        return run_file(args, self.task_name, kind, suffix)

    def evaluated_model(self, args: Any) -> str:
        return run_model_name(args)
