"""The offline demo (``lmms-egoplan smoke``): every task of the suite, end to end, on this machine.

It builds a tiny random-weight model and synthetic data in each benchmark's real on-disk
layout, starts a loopback judge where a benchmark needs one, runs each benchmark's tasks
through the real ``lmms-eval`` CLI with ``LMMS_EVAL_PLUGINS=lmms_egoplan`` (as a user would),
prints a table per benchmark (a row per task, its main metrics as columns) and writes the report of its runs (``lmms-egoplan report``). A random model's scores check the pipeline; they measure nothing.
"""

from __future__ import annotations

import importlib
import re
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, TextIO

from lmms_egoplan.report import write_report
from lmms_egoplan.tables import format_table, format_value, natural_order
from lmms_egoplan.testing.lmms_eval_run import EvalRunError, run_lmms_eval
from lmms_egoplan.testing.suite import SmokeSuite

# One entry per benchmark: "module:function", the function building that benchmark's
# synthetic data (and whatever it needs, e.g. a loopback judge) and returning a SmokeSuite.
SUITES: tuple[str, ...] = (
    "lmms_egoplan.testing.egoplan:smoke_suite",
    "lmms_egoplan.testing.egothink:smoke_suite",
    "lmms_egoplan.testing.egointent:smoke_suite",
    "lmms_egoplan.testing.actplan:smoke_suite",
)

MODEL = "egoplan_hf"
DEFAULT_ARCH = "qwen2_vl"


SuiteBuilder = Callable[[Path, ExitStack], SmokeSuite]


def load_suite_builder(entry: str) -> SuiteBuilder:
    module_name, function_name = entry.split(":")
    return getattr(importlib.import_module(module_name), function_name)


def suite_name(entry: str) -> str:
    return entry.split(":")[0].rsplit(".", 1)[-1]


def run_smoke(workdir: str | Path, *, arch: str = DEFAULT_ARCH, only: list[str] | None = None,
              out: TextIO | None = None) -> int:
    """Run the demo under ``workdir``; returns the number of failed benchmarks (0 = all passed)."""
    import sys

    from transformers.utils import logging as transformers_logging

    from lmms_egoplan.testing.checkpoints import tiny_checkpoint

    # Building the fixtures' random models is not news: keep transformers' reports and bars out of the table's way.
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    out = out or sys.stdout
    workdir = Path(workdir).resolve()
    entries = [e for e in SUITES if not only or suite_name(e) in only]
    if not entries:
        print("No benchmark registers a smoke suite yet.", file=out)
        return 0

    print(f"Building a tiny random-weight {arch} checkpoint under {workdir / 'checkpoints'} ...", file=out)
    checkpoint = tiny_checkpoint(arch, workdir / "checkpoints")
    tables: list[str] = []
    results_dirs: list[Path] = []
    failures: list[str] = []
    log_dirs: list[Path] = []
    with ExitStack() as resources:
        for entry in entries:
            name = suite_name(entry)
            try:
                suite = load_suite_builder(entry)(workdir / "data" / name, resources)
            except Exception as error:  # a broken fixture fails its benchmark, not the whole demo
                failures.append(name)
                print(f"[{name}] FAILED building its fixtures: {type(error).__name__}: {error}", file=out)
                continue
            log_dir = workdir / "logs" / name
            log_dirs.append(log_dir)
            print(f"[{name}] lmms-eval --model {MODEL} --tasks {','.join(suite.tasks)} ...", file=out, flush=True)
            started = time.monotonic()
            try:
                run = run_lmms_eval(model=MODEL, model_args=f"pretrained={checkpoint}", tasks=suite.tasks,
                                    output_dir=log_dir, env=suite.env, extra_args=suite.cli_args)
            except EvalRunError as error:
                failures.append(name)
                print(f"[{name}] FAILED\n{error}", file=out)
                continue
            print(f"[{name}] done in {time.monotonic() - started:.0f} s", file=out)
            tables.append(task_table(run.results))
            results_dirs.append(log_dir)

    print("\n\n".join(tables), file=out)
    print("\nThese scores come from a tiny RANDOM model on synthetic data: they check the pipeline "
          "end to end and measure nothing.", file=out)
    print("Logs, per-sample outputs and results: " + ", ".join(str(d) for d in log_dirs), file=out)
    if results_dirs:
        report = write_report(results_dirs, workdir / "report")
        print(f"Report of these runs (tables beside the published rows, figures, HTML): {report.markdown}", file=out)
    if failures:
        print(f"FAILED: {', '.join(failures)}", file=out)
    return len(failures)


# A breakdown bin: (accuracy_)family_bin (EgoPlan, EgoIntent) or metric_split (ActPlan-1K).
BREAKDOWN = re.compile(r"^(?:accuracy_)?(progress|similarity|scenario)_(.+)$|^(.+)_(normal|counterfactual)$")

# Counts that say how a score was reached, shown after the scores.
BOOKKEEPING = ("predictions", "skipped_samples", "judged", "failed", "unparseable", "incomplete_answers",
               "missing_fields", "no_plan_rate")


def task_table(results: dict) -> str:
    """One row per task or group of an lmms-eval run: its main metrics as columns (a count ``n_X``
    beside its ``accuracy_X``), then its breakdowns in one column, bins in their natural order."""
    columns: list[str] = []
    rows = []
    for section in ("groups", "results"):
        for name, metrics in (results.get(section) or {}).items():
            if section == "results" and name in (results.get("groups") or {}):
                continue
            values = {key.split(",")[0]: value for key, value in metrics.items()
                      if key != "alias" and "stderr" not in key and value not in ("", " ")}
            main: dict[str, str] = {}
            breakdowns: dict[str, list[str]] = {}
            for metric in natural_order(values):
                if metric.startswith("n_") and f"accuracy_{metric[2:]}" in values:
                    continue  # shown beside its accuracy
                text = format_value(values[metric])
                count = values.get(f"n_{metric.removeprefix('accuracy_')}") if metric.startswith("accuracy_") else None
                text += f" ({format_value(count)})" if count is not None else ""
                if match := BREAKDOWN.match(metric):
                    family, bin_name = (match[1], match[2]) if match[1] else (match[3], match[4])
                    breakdowns.setdefault(family, []).append(f"{bin_name} {text}")
                else:
                    main[metric] = text
                    columns += [] if metric in columns else [metric]
            rows.append((name, main, "; ".join(f"{family}: {', '.join(bins)}" for family, bins in breakdowns.items())))
    columns.sort(key=lambda column: column in BOOKKEEPING)  # stable: scores first, counts after
    with_breakdowns = any(breakdowns for *_, breakdowns in rows)
    return format_table(["task", *columns, *["breakdowns (n)"] * with_breakdowns],
                        [[name, *(main.get(column, "") for column in columns), *[breakdowns] * with_breakdowns]
                         for name, main, breakdowns in rows])
