"""The offline demo (``lmms-egoplan smoke``): every task of the suite, end to end, on this machine.

It builds a tiny random-weight model and synthetic data in each benchmark's real on-disk
layout, starts a loopback judge where a benchmark needs one, and runs each benchmark's tasks
through the real ``lmms-eval`` CLI with ``LMMS_EVAL_PLUGINS=lmms_egoplan`` (as a user would): this
checks the pipeline, and its scores measure nothing. A random model writes no parseable plan,
intent or letter, so the generative benchmarks then run once more with scripted answers of known
quality (``lmms_egoplan.demo.kit.scripted``), through lmms-eval's ``openai`` backend, so that
every scorer shows what it computes (scorers a run cannot apply beside its own, a benchmark's other
protocols, score its logged answers again in this process); each of their values is checked against
the one the script implies. A text-only architecture (``llama``) runs what it can take, each benchmark's text-only
baselines through the real ``lm_eval`` CLI (``--model hf``), and says what it leaves out and why. It
prints a table per benchmark (a row per task, its main metrics as columns; scripted
rows marked) and writes the report of its runs (``lmms-egoplan report``).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Mapping, Sequence, TextIO

from loguru import logger

from lmms_egoplan import catalogue
from lmms_egoplan.core.text_tables import TERMINAL_WIDTH, format_table, format_value, indented_list
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun, EvalRunError, run_lm_eval, run_lmms_eval
from lmms_egoplan.demo.kit.scripted import MODEL_NAME as SCRIPTED_MODEL_NAME
from lmms_egoplan.demo.kit.scripted import ScriptedAnswers, differences, reported_metrics, scripted_environment
from lmms_egoplan.demo.kit.settings import DEMO_SETTINGS_FILE, users_settings_kept_out, with_demo_settings
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.report import write_report
from lmms_egoplan.report.layout import ReportFace
from lmms_egoplan.report.metric_roles import Unit, natural_order, unscored_reason
from lmms_egoplan.report.runs import LMMS_EVAL_DEFAULT_ZONE, zone_text
from lmms_egoplan.suite import benchmark, report_faces


def suites() -> dict[str, Callable[[Path, ExitStack], SmokeSuite]]:
    """Each benchmark's demo, by its name: the function of its module here (named as the benchmark) building its
    synthetic data (and whatever it needs, e.g. a loopback judge) and returning a SmokeSuite; every benchmark of the
    catalogue, in its order (one without a demo module is an error naming it). Imported when the demo runs
    (``lmms-egoplan smoke --help`` loads none of them); by plain import, as ``lmms_egoplan.suite`` lists the
    benchmarks."""
    from lmms_egoplan.demo import actplan, cosmos_reason1, egointent, egoplan, egoplan_bench2, egothink, robovqa

    demos = {module.__name__.rpartition(".")[2]: module.smoke_suite
             for module in (actplan, cosmos_reason1, egointent, egoplan, egoplan_bench2, egothink, robovqa)}
    missing = [row.name for row in catalogue.CATALOGUE if row.name not in demos]
    if missing:
        raise LookupError(f"no demo module (lmms_egoplan/demo/<benchmark>.py) for {', '.join(missing)}")
    return {row.name: demos[row.name] for row in catalogue.CATALOGUE}


MODEL = "egoplan_hf"
DEFAULT_ARCH = "qwen2_vl"
SCRIPTED = "[scripted]"  # marks the rows of the scripted answers in the printed tables
# What the report says first of the demo's rows: none is a model's measurement to set beside a published row.
RANDOM_MODEL_NOTE = "the demo's tiny RANDOM model on synthetic data: checks the pipeline end to end, measures nothing"
SCRIPTED_MODEL_NOTE = ("the demo's scripted answers of known quality on synthetic data: check the scoring, "
                       "measure no model")


def run_smoke(workdir: str | Path, *, arch: str = DEFAULT_ARCH, only: list[str] | None = None,
              out: TextIO | None = None) -> int:
    """Run the demo under ``workdir``; returns the number of failures (0 = all passed): benchmarks
    that failed, and benchmarks whose scripted answers did not score as their script implies. The user's settings
    (file, variables) are kept out (``users_settings_kept_out``)."""
    with users_settings_kept_out():
        return _run_smoke(workdir, arch=arch, only=only, out=out)


def _run_smoke(workdir: str | Path, *, arch: str, only: list[str] | None, out: TextIO | None) -> int:
    import sys

    from datasets.utils import logging as datasets_logging
    from transformers.utils import logging as transformers_logging

    from lmms_egoplan.demo.kit.checkpoints import TEXT_ONLY_ARCHITECTURES, tiny_checkpoint

    # Building the fixtures' random models and datasets is not news: keep the libraries' reports and bars out of the
    # table's way.
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    datasets_logging.disable_progress_bar()
    began = time.monotonic()
    out = out or sys.stdout
    workdir = Path(workdir).resolve()
    entries = {name: build for name, build in suites().items() if not only or name in only}
    if not entries:
        print("No benchmark registers a smoke suite yet.", file=out)
        return 0

    print(f"Building a tiny random-weight {arch} checkpoint under {workdir / 'checkpoints'} ...", file=out)
    checkpoint = tiny_checkpoint(arch, workdir / "checkpoints")
    random_runs: dict[str, EvalRun] = {}
    scripts: dict[str, ScriptedAnswers] = {}
    failures: list[str] = []
    log_dirs: list[Path] = []
    left_out: list[str] = []
    by_hand: str | None = None  # a task the closing lines show how to run by hand
    with ExitStack() as resources:
        for name, build in entries.items():
            # A text-only model's plan first: a benchmark it leaves out builds no fixtures.
            plan = arch_plan(arch, name) if arch in TEXT_ONLY_ARCHITECTURES else None
            if plan and plan.left_out:
                print(f"[{name}] {plan.left_out}", file=out)
                left_out.append(name)
                if not plan.tasks:
                    continue
            suite = _built_fixtures(name, build, workdir, resources, out)
            if suite is None:
                failures.append(name)
                continue
            log_dir = workdir / "logs" / name
            log_dirs.append(log_dir)
            plan = plan or ArchPlan(False, suite.tasks or catalogue.entry(name).tasks)
            if by_hand is None and not plan.text_only and not catalogue.entry(name).rubrics:  # its judge stops
                by_hand = plan.tasks[0]
            print(f"[{name}] {plan.harness} --model {plan.model} --tasks {','.join(plan.tasks)} ...", file=out,
                  flush=True)
            started = time.monotonic()
            try:
                random_runs[name] = run_plan(plan, checkpoint, log_dir, suite)
            except EvalRunError as error:
                failures.append(name)
                print(f"[{name}] FAILED\n{error}", file=out)
                continue
            print(f"[{name}] done in {time.monotonic() - started:.0f} s", file=out)
            scripts.update({name: suite.scripted} if suite.scripted else {})
        scripted_run = None
        if scripts:
            log_dirs.append(workdir / "logs" / "scripted")
            scripted_run = run_scripted(scripts, log_dirs[-1], resources, out)
            failures += [f"{name} (scripted)" for name in scripts] if scripted_run is None else []

    failures += print_tables(random_runs, scripts, scripted_run, out)
    print("\nRows without a mark: a tiny RANDOM model on synthetic data; they check the pipeline end to end "
          "and measure nothing.", file=out)
    if left_out:
        print(f"Left out for the text-only {arch}: what [{'], ['.join(left_out)}] say above.", file=out)
    print_where(workdir, log_dirs, out, checkpoint, by_hand)
    _report_and_close(workdir, log_dirs, checkpoint, failures, time.monotonic() - began, out)
    return len(failures)


def _report_and_close(workdir: Path, log_dirs: Sequence[Path], checkpoint: Path, failures: Sequence[str],
                      seconds: float, out: TextIO) -> None:
    """The report of the demo's runs, then how the demo ended: the report's pages last, or what failed."""
    results_dirs = [d for d in log_dirs
                    if any(next(d.rglob(pattern), None) for pattern in ("*_results.json", "results_*.json"))]
    if results_dirs:
        notes = {checkpoint.name: RANDOM_MODEL_NOTE, SCRIPTED_MODEL_NAME: SCRIPTED_MODEL_NOTE}
        report = write_report(results_dirs, workdir / "report", report_faces(), model_notes=notes)
        if not failures:
            print(f"Every benchmark ran and every table above held; no failure ({seconds:.0f} s).", file=out)
        print(f"Report of these runs (tables beside the published rows, figures): {report.markdown}; to open in a "
              f"browser: {report.html}", file=out)
    if failures:
        print(f"FAILED: {', '.join(failures)}", file=out)


def _built_fixtures(name: str, build: Callable[[Path, ExitStack], SmokeSuite], workdir: Path, resources: ExitStack,
                    out: TextIO) -> SmokeSuite | None:
    """A benchmark's fixtures and the demo settings pointing at them; None, said, where building them failed (a
    broken fixture fails its benchmark, not the whole demo). The suite's notes on the fixtures are not news (the
    runs log on their own)."""
    logger.disable("lmms_egoplan")
    try:
        return with_demo_settings(workdir / DEMO_SETTINGS_FILE, name, build(workdir / "data" / name, resources))
    except Exception as error:  # noqa: BLE001 (whatever broke, the demo goes on with the other benchmarks)
        print(f"[{name}] FAILED building its fixtures: {type(error).__name__}: {error}", file=out)
        return None
    finally:
        logger.enable("lmms_egoplan")


def print_where(workdir: Path, log_dirs: Sequence[Path], out: TextIO, checkpoint: Path | None = None,
                task: str | None = None) -> None:
    """Where the demo's runs wrote, the settings file of its data (with ``task``, the command that runs it by hand
    on ``checkpoint``), and in which time zone its logs are."""
    print("Logs, per-sample outputs and results:" + "".join(f"\n  {d}" for d in log_dirs), file=out)
    settings = workdir / DEMO_SETTINGS_FILE
    if settings.is_file():
        print(f"Settings file of the demo's data (its judge stopped with the demo): {settings}", file=out)
    if settings.is_file() and checkpoint is not None and task is not None:
        print(f"A task by hand on it: LMMS_EVAL_PLUGINS=lmms_egoplan LMMS_EGOPLAN_SETTINGS={settings} lmms-eval "
              f"--model egoplan_hf --model_args pretrained={checkpoint} --tasks {task} --output_path "
              f"{workdir / 'logs' / 'by-hand'} --log_samples", file=out)
    print(f"Times: lmms-eval logs in this machine's zone ({zone_text(datetime.now().astimezone())}); it names its "
          f"files, and the report shows run times, in {LMMS_EVAL_DEFAULT_ZONE} (its --timezone's default).", file=out)


@dataclass(frozen=True)
class ArchPlan:
    """What the demo runs of one benchmark on one architecture: its lmms-eval tasks on ``egoplan_hf``, or,
    for a text-only model, its text-only baselines through lm-eval (``hf``), and what it leaves out and why."""

    text_only: bool
    tasks: tuple[str, ...]  # empty: the benchmark is left out
    left_out: str = ""  # what is left out and why ("" where nothing is)

    @property
    def harness(self) -> str:
        return "lm_eval" if self.text_only else "lmms-eval"

    @property
    def model(self) -> str:
        return "hf" if self.text_only else MODEL


def arch_plan(arch: str, name: str) -> ArchPlan:
    """What the demo runs of benchmark ``name`` on a tiny ``arch`` checkpoint: every lmms-eval task of the
    benchmark on a multimodal architecture; on a text-only one, whose model cannot take the images and
    videos every lmms-eval task of the suite shows it, the benchmark's text-only baselines (lm-eval), if any."""
    from lmms_egoplan.demo.kit.checkpoints import TEXT_ONLY_ARCHITECTURES

    entry = catalogue.entry(name)
    if arch not in TEXT_ONLY_ARCHITECTURES:
        return ArchPlan(False, entry.tasks)
    shown = (f"its lmms-eval tasks ({', '.join(entry.tasks)}) show the model images or videos, which the text-only "
             f"{arch} cannot take")
    if not entry.lm_eval_tasks:
        return ArchPlan(True, (), f"left out: {shown}, and it has no text-only baselines")
    return ArchPlan(True, entry.lm_eval_tasks, f"its text-only baselines only: {shown}")


def run_plan(plan: ArchPlan, checkpoint: Path, log_dir: Path, suite: SmokeSuite, limit: int | None = None) -> EvalRun:
    """One run of the demo: the plan's tasks on the checkpoint through its harness and backend, in the
    settings of ``suite`` (its data, its judge); ``limit``: that many documents per task."""
    from importlib import resources

    limited = ("--limit", str(limit)) if limit else ()
    if plan.text_only:
        return run_lm_eval(model_args=f"pretrained={checkpoint},dtype=float32", tasks=plan.tasks, output_dir=log_dir,
                           include_path=resources.files(catalogue.LM_EVAL_TASKS), env=suite.env, extra_args=limited)
    return run_lmms_eval(model=MODEL, model_args=f"pretrained={checkpoint}", tasks=plan.tasks, output_dir=log_dir,
                         env=suite.env, extra_args=(*suite.cli_args, *limited))


def run_scripted(scripts: Mapping[str, ScriptedAnswers], log_dir: Path, resources: ExitStack,
                 out: TextIO) -> EvalRun | None:
    """One lmms-eval run of every scripted benchmark's tasks against the scripted model and judge."""
    model_args, env = scripted_environment(list(scripts.values()), log_dir.parent.parent, resources)
    tasks = [task for script in scripts.values() for task in script.tasks]
    print(f"[scripted] lmms-eval --model openai (scripted answers) --tasks {','.join(tasks)} ...", file=out, flush=True)
    started = time.monotonic()
    try:
        run = run_lmms_eval(model="openai", model_args=model_args, tasks=tasks, output_dir=log_dir, env=env)
    except EvalRunError as error:
        print(f"[scripted] FAILED\n{error}", file=out)
        return None
    print(f"[scripted] done in {time.monotonic() - started:.0f} s", file=out)
    return run


def print_tables(random_runs: Mapping[str, EvalRun], scripts: Mapping[str, ScriptedAnswers],
                 scripted_run: EvalRun | None, out: TextIO) -> list[str]:
    """A table per benchmark: the random model's rows, then the scripted rows; a table per other scorer of the
    scripted answers (``ScriptedAnswers.rescored``); their check. Returns the benchmarks whose scripted values
    differ from their script's."""
    failures = []
    for name, run in random_runs.items():
        script = scripts.get(name) if scripted_run is not None else None
        scripted = _subset(scripted_run, script) if script else None
        face = benchmark(name).report_face
        print("\n" + task_table([(run.results, ""), *([(scripted, SCRIPTED)] if script else [])], face), file=out)
        if not script:
            continue
        expected = script.values(scripted_run)
        found = differences(reported_metrics(scripted), expected)
        checked = sum(len(metrics) for metrics in expected.values())
        for rescored in script.rescored(scripted_run):
            mark = f"[scripted, {rescored.label}]"
            print("\n" + task_table([(rescored.results, mark)], face), file=out)
            found += [f"{mark} {difference}" for difference in
                      differences(reported_metrics(rescored.results), rescored.expected, rescored.tolerance)]
            checked += sum(len(metrics) for metrics in rescored.expected.values())
        if found:
            failures.append(f"{name} (scripted)")
            print(f"{SCRIPTED} rows: {len(found)} of {checked} values differ from what the script implies:\n  "
                  + "\n  ".join(found), file=out)
        else:
            print(f"{SCRIPTED} rows: answers of known quality; all {checked} values equal those the script "
                  "implies\n  (computed without the suite's scorers).", file=out)
    return failures


def _subset(run: EvalRun, script: ScriptedAnswers) -> dict:
    """The part of a results file about one script's tasks (their subtasks and groups, sample counts)."""
    tasks = set(script.values(run))
    return {section: {task: values for task, values in (run.results.get(section) or {}).items() if task in tasks}
            for section in ("results", "groups", "n-samples")}


def task_table(sources: Sequence[tuple[dict, str]], face: ReportFace, width: int = TERMINAL_WIDTH) -> str:
    """One row per task or group of lmms-eval results of one benchmark: its main metrics as columns
    (a count ``n_X`` beside its ``accuracy_X``), each value in its metric's unit (``face.unit``:
    accuracies in percent, as the papers and the report print them), the unit in the header; below
    the table, its breakdowns (``face.breakdowns``), a line per task and family, bins in their natural
    order with their counts. Every line fits ``width`` characters: a table with more columns than
    fit continues in a block below, long lines wrap.

    ``sources``: (results, mark) pairs, the mark appended to their rows' task names. A task whose
    scores measure nothing (nothing judged, no answer readable) shows "(not scored)" after them, and
    why in a list below the table.
    """
    columns: list[str] = []
    rows = []
    for results, mark in sources:
        counts = results.get("n-samples") or {}
        for task, values in reported_metrics(results).items():
            effective = (counts.get(task) or {}).get("effective")
            reasons: list[str] = []  # why its values measure nothing, each metric by its own counts
            main: dict[str, str] = {}
            breakdowns: dict[str, list[str]] = {}
            for metric in natural_order(values, face.levels):
                if values[metric] in ("", " ") or metric.startswith("n_") and f"accuracy_{metric[2:]}" in values:
                    continue  # empty placeholders; counts are shown beside their accuracy
                text = format_value(_in_unit(values[metric], face.unit(metric)))
                count = values.get(f"n_{metric.removeprefix('accuracy_')}") if metric.startswith("accuracy_") else None
                count_text = f" ({format_value(count)})" if count is not None else ""
                if found := face.breakdown(metric):
                    family, bin_name = found
                    breakdowns.setdefault(face.unit(metric).header(family), []).append(f"{bin_name} {text}{count_text}")
                else:
                    reason = None if metric in face.descriptive_metrics else unscored_reason(values, effective, metric)
                    reasons += [reason] if reason and reason not in reasons else []
                    main[metric] = text + (" (not scored)" if reason else "") + count_text
                    columns += [] if metric in columns else [metric]
            rows.append((f"{task} {mark}".strip(), main, breakdowns, "; ".join(reasons)))
    # scores first, counts after; the face's tables' metrics in their order (its main score first), whatever order a
    # results file lists them in; the rest as first met
    order = face.metric_order
    columns.sort(key=lambda column: (column in face.bookkeeping_metrics,
                                     order.index(column) if column in order else len(order)))
    header = ["task", *(face.unit(column).header(column) for column in columns)]
    table = format_table(header, [[name, *(main.get(column, "") for column in columns)] for name, main, *_ in rows],
                         width=width)
    below = [indented_list(BREAKDOWNS, [(f"{name}, {family}", ", ".join(bins)) for name, _, breakdowns, _ in rows
                                        for family, bins in breakdowns.items()], width),
             indented_list(WHY_NOT_SCORED, [(name, reason) for name, _, _, reason in rows if reason], width)]
    return "\n".join([table, *filter(None, below)])


BREAKDOWNS = "Breakdowns (each bin's value; its number of samples in brackets, where counted):"
WHY_NOT_SCORED = "Why not scored:"


def _in_unit(value: object, unit: Unit) -> object:
    """A results-file value in its metric's unit (a share of 0.25 reads 25.00 %)."""
    return value * unit.scale if isinstance(value, float) and unit.scale != 1 else value
