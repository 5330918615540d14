"""Run the real ``lmms-eval`` CLI in a subprocess, as a user would, and read what it wrote.

lmms-eval 0.7.3 exits with status 0 even when a task fails (it prints the traceback and carries
on); runs that use the suite exit 1 instead (``lmms_eval_compat.fail_runs_with_failed_tasks``), but
runs here may also use only lmms-eval's own tasks, so success means: exit status 0 *and* a results
file naming every task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

# Nothing may reach the network: weights, datasets and tokenizers are all local.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class EvalRunError(RuntimeError):
    """An lmms-eval run failed; the message carries the end of its log."""


@dataclass
class EvalRun:
    command: list[str]
    returncode: int
    log: str
    output_dir: Path
    results: dict | None = field(default=None)
    started: float = 0.0  # time.time() when the run started: files older than it are an earlier run's

    def _written(self, pattern: str) -> list[Path]:
        """Files matching ``pattern`` that this run wrote, oldest first."""
        found = [p for p in self.output_dir.rglob(pattern) if p.stat().st_mtime >= self.started]
        return sorted(found, key=lambda p: p.stat().st_mtime)

    @property
    def results_file(self) -> Path | None:
        found = self._written("*_results.json")
        return found[-1] if found else None

    def metric(self, task: str, metric: str, filter_key: str = "none"):
        section = "groups" if task in (self.results or {}).get("groups", {}) else "results"
        return self.results[section][task][f"{metric},{filter_key}"]

    def samples(self, task: str) -> list[dict]:
        """The logged samples of ``task`` (needs ``--log_samples``), in document order."""
        files = self._written(f"*_samples_{task}.jsonl")
        if not files:
            raise FileNotFoundError(f"this run logged no samples for {task} under {self.output_dir}")
        rows = [json.loads(line) for line in files[-1].read_text().splitlines() if line.strip()]
        return sorted(rows, key=lambda row: row["doc_id"])

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.splitlines()[-lines:])

    def judged(self, *tasks: str) -> "EvalRun":
        """This run, checked as a finished judged run (started with ``check=False``): its results
        written, and exit status 0, or the distinct status for failed judgements where ``tasks`` have
        some (``judge_failed_exit_status``, default)."""
        from lmms_egoplan.judge import JudgeSettings

        failed = self.results is not None and any(self.metric(task, "failed") for task in tasks)
        expected = JudgeSettings().judge_failed_exit_status if failed else 0
        if self.results is None or self.returncode != expected:
            raise EvalRunError(f"expected a finished judged run with exit status {expected}, got {self.returncode}: "
                               f"{' '.join(self.command)}\n{self.log_tail()}")
        return self


def lmms_eval_command(*, model: str, model_args: str, tasks: Iterable[str], output_dir: str | os.PathLike,
                      env: Mapping[str, str] | None = None, use_plugin: bool = True,
                      include_path: str | os.PathLike | None = None, extra_args: Iterable[str] = (),
                      launcher: Iterable[str] | None = None) -> tuple[list[str], dict[str, str], Path]:
    """(command, environment, working directory) of an lmms-eval run (see ``run_lmms_eval``)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    command = [*(launcher or [sys.executable]), "-m", "lmms_eval",
               "--model", model, "--model_args", model_args, "--tasks", ",".join(tasks),
               "--output_path", str(output_dir), "--log_samples", *extra_args]
    if include_path is not None:
        command += ["--include_path", str(include_path)]
    run_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    if use_plugin:
        run_env["LMMS_EVAL_PLUGINS"] = "lmms_egoplan"
    else:
        run_env.pop("LMMS_EVAL_PLUGINS", None)
    # The output folder as working directory: a source checkout in the caller's working directory
    # would otherwise shadow the installed package (``python -m`` puts the cwd first on sys.path).
    return command, run_env, output_dir


def run_lmms_eval(*, model: str, model_args: str, tasks: Iterable[str], output_dir: str | os.PathLike,
                  env: Mapping[str, str] | None = None, use_plugin: bool = True,
                  include_path: str | os.PathLike | None = None, extra_args: Iterable[str] = (),
                  launcher: Iterable[str] | None = None, check: bool = True, timeout: float = 1800) -> EvalRun:
    """Evaluate ``tasks`` through ``python -m lmms_eval`` with logged samples.

    ``use_plugin`` registers the suite's tasks with ``LMMS_EVAL_PLUGINS=lmms_egoplan``;
    ``include_path`` passes ``--include_path`` instead (or as well). ``launcher`` replaces
    ``python`` (e.g. ``torchrun --nproc_per_node 2``). With ``check``, a failed run raises
    EvalRunError with the end of its log.
    """
    tasks = list(tasks)
    command, run_env, output_dir = lmms_eval_command(model=model, model_args=model_args, tasks=tasks,
                                                     output_dir=output_dir, env=env, use_plugin=use_plugin,
                                                     include_path=include_path, extra_args=extra_args, launcher=launcher)
    started = time.time()
    completed = subprocess.run(command, env=run_env, cwd=output_dir, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return finished_run(command, completed.returncode, completed.stdout, output_dir, started, tasks, check)


def finished_run(command: list[str], returncode: int, log: str, output_dir: Path, started: float,
                 tasks: list[str], check: bool) -> EvalRun:
    run = EvalRun(command=command, returncode=returncode, log=log, output_dir=output_dir, started=started)
    if run.results_file is not None:
        run.results = json.loads(run.results_file.read_text())
    missing = [t for t in tasks if not run.results or (t not in run.results.get("results", {})
                                                       and t not in run.results.get("groups", {}))]
    if check and (run.returncode != 0 or missing):
        reason = f"exit status {run.returncode}" if run.returncode else f"no results for {', '.join(missing)}"
        raise EvalRunError(f"lmms-eval failed ({reason}): {' '.join(command)}\n{run.log_tail()}")
    return run


class RunningEval:
    """An lmms-eval run started in the background (``start_lmms_eval``), to be stopped mid-pass:
    ``signal`` it, then ``wait`` for its EvalRun."""

    def __init__(self, command: list[str], env: dict[str, str], output_dir: Path, tasks: list[str]):
        self.command, self.output_dir, self.tasks = command, output_dir, tasks
        self.log_path = output_dir / "lmms-eval.log"
        self.started = time.time()
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(command, env=env, cwd=output_dir, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_for(self, condition, *, timeout: float = 900, poll: float = 0.05, what: str = "the condition") -> None:
        """Poll ``condition()`` until it holds; fails if the run ends first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.process.poll() is not None:
                raise EvalRunError(f"the run ended (status {self.process.returncode}) before {what}:\n"
                                   f"{self.log_path.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise EvalRunError(f"{what} did not happen within {timeout} s")
            time.sleep(poll)

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 600) -> EvalRun:
        self.process.wait(timeout=timeout)
        self._log.close()
        return finished_run(self.command, self.process.returncode, self.log_path.read_text(), self.output_dir,
                            self.started, self.tasks, check=False)


def start_lmms_eval(**arguments) -> RunningEval:
    """``run_lmms_eval``'s run (same arguments, without ``check`` / ``timeout``), in the background;
    its output goes to ``<output_dir>/lmms-eval.log``."""
    command, env, output_dir = lmms_eval_command(**arguments)
    return RunningEval(command, env, output_dir, list(arguments["tasks"]))
