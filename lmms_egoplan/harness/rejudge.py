"""``lmms-egoplan rejudge``: the judged metrics of logged samples (``--log_samples`` files, a
``--predict_only`` run's too) scored again by a judge, without running the model: what it reads
(``read_logged_items``), which judge the run recorded (``recorded_judge``: ``rejudge`` judges with it
unless told otherwise), how it scores (``rejudge_samples``), and the command line a run whose
judgements failed suggests (``rejudge_command``). It needs neither lmms-eval nor the benchmarks: the
logged items hold the full judge requests and name their rubric."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loguru import logger

from lmms_egoplan.compat.results import LMMS_EVAL_DEFAULT_TIMEZONE
from lmms_egoplan.contract.judged import PREDICT_ONLY_ITEMS
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.files import read_text, refuse_unreadable_folder, strict_json, write_atomically
from lmms_egoplan.harness.failed_requests import FAILED_REQUEST_MARK, FAILED_REQUESTS
from lmms_egoplan.judge.engine import Judge, RetiredJudgeError, preflight
from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.judge.rubrics import (
    Rubric,
    is_judge_parts_item,
    item_parts,
    item_requests,
    items_rubric,
    load_rubric,
    score_judged,
)
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError

# Metrics that count judgements rather than score them (a judged task's judged / failed).
COUNT_METRICS = ("judged", "failed")


class NothingToJudgeError(InputError):
    """The samples files hold no judged items."""


@dataclass
class LoggedItems:
    """What ``rejudge`` judges: the judged items of logged samples (``--log_samples`` files), by
    task and metric, with each task's samples file, and every row that could not be used and why."""

    columns: dict[str, dict[str, list[dict]]]
    files: dict[str, Path]
    unusable: dict[str, list[str]]  # by task: "<file>:<line>: why"
    # by task: samples whose model request failed (nothing to judge: asked again by the run, not here)
    failed_requests: dict[str, int] = field(default_factory=dict)
    rubrics: Mapping[str, Rubric] = field(default_factory=dict)  # what reads the items, by the names they carry


def read_logged_items(paths: Sequence[str | Path], rubrics: Mapping[str, Rubric]) -> LoggedItems:
    """The judged items of the samples files in ``paths`` (files, or folders searched for them: the
    newest file per task), each naming one of ``rubrics`` (the suite's: ``lmms_egoplan.suite.rubrics``). No judge
    is needed to read them (``rejudge`` reads them first, so that a folder without samples says so before anything
    asks for a key). A row that is not JSON (the last
    line of a log whose run was killed while writing it is cut off), not an object, holds no judged
    item where the other rows of its file do, or holds a broken one, is named and counted; the other
    rows are judged. Raises NothingToJudgeError when no file holds anything to judge."""
    files = _samples_files(paths)
    columns: dict[str, dict[str, list[dict]]] = {}
    unusable: dict[str, list[str]] = {}
    failed_requests: dict[str, int] = {}
    nothing: list[str] = []  # why each file had nothing to judge
    for task, samples_file in files.items():
        rows, problems = _logged_rows(samples_file)
        task_columns: dict[str, list[dict]] = {}
        without_items = []
        for number, sample in rows:
            if _request_failed(sample):
                failed_requests[task] = failed_requests.get(task, 0) + 1
                continue
            items, problem = _judged_items(sample, rubrics)
            if problem:
                problems.append((number, problem))
            elif not items:
                without_items.append((number, f"holds no judged item (doc_id {sample.get('doc_id')!r}); it is not "
                                              f"a sample of a judged task of this suite"))
            for metric, item in items.items():
                task_columns.setdefault(metric, []).append(item)
        if not task_columns:
            if not rows:  # an empty file, or one whose every line is damaged
                why = (f"no line is a JSON row: line {problems[0][0]}: {problems[0][1]}" if problems
                       else "the file is empty")
            elif failed_requests.get(task) == len(rows):
                why = "every model request of the file failed"
            else:
                why = f"task {task} is not a judged task of this suite"
            logger.warning(f"{samples_file}: nothing to judge ({why})")
            nothing.append(f"{samples_file}: {why}")
            continue
        problems += without_items  # the other rows of the file have judged items
        columns[task] = task_columns
        unusable[task] = [f"{samples_file}:{number}: {problem}" for number, problem in sorted(problems)]
    if not columns:
        raise NothingToJudgeError(f"nothing to judge in {', '.join(map(str, paths))}: " + "; ".join(nothing))
    return LoggedItems(columns, {task: files[task] for task in columns}, unusable,
                       {task: failed_requests.get(task, 0) for task in columns}, rubrics)


def _request_failed(sample: dict) -> bool:
    """Whether a logged sample is one whose model request failed (``harness.failed_requests``)."""
    logged = sample.get("bypass")  # a --predict_only run's log
    return bool(sample.get(FAILED_REQUESTS)) or (isinstance(logged, dict) and FAILED_REQUEST_MARK in logged)


def _logged_rows(samples_file: Path) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    """(line number, row) of each JSON object in ``samples_file``, and what is wrong with the other lines."""
    lines = read_text(samples_file).splitlines()
    last = max((number for number, line in enumerate(lines, 1) if line.strip()), default=0)
    rows, problems = [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            cut = " (the last line, cut off: the run was stopped while writing it)" if number == last else ""
            problems.append((number, f"not JSON{cut}: {error}"))
            continue
        if not isinstance(row, dict):
            problems.append((number, f"a JSON {type(row).__name__}, not a sample"))
            continue
        rows.append((number, row))
    return rows, problems


def _judged_items(sample: dict, rubrics: Mapping[str, Rubric]) -> tuple[dict[str, dict], str | None]:
    """(judged items by metric, None), or ({}, why they cannot be used)."""
    logged = sample.get("bypass")  # a --predict_only run's log
    items = logged.get(PREDICT_ONLY_ITEMS, {}) if isinstance(logged, dict) else sample
    judged = {metric: value for metric, value in items.items() if is_judge_parts_item(value)}
    for metric, item in judged.items():
        try:
            item_parts(item)
            load_rubric(item["judge_rubric"], rubrics)
        except (KeyError, TypeError, ValueError) as error:
            return {}, f"the judged item of metric {metric} (doc_id {sample.get('doc_id')!r}) is broken: {error}"
    return judged, None


def recorded_judge(logged: LoggedItems, task: str) -> dict[str, Any]:
    """The judge settings that judged ``task``'s run, as it recorded them: the ``judge_*`` settings of
    the task's config metadata in the results file written beside its samples file (lmms-eval's
    ``<date>_results.json``), else the backend, model and revision its judged items carry; {} when
    neither says (logs of runs before judges were recorded)."""
    samples = logged.files[task]
    results = samples.with_name(samples.name.split("_samples_")[0] + "_results.json")
    names = {field.name for field in fields(JudgeSettings)}
    if results.is_file():
        try:
            metadata = ((json.loads(read_text(results)).get("configs") or {}).get(task) or {}).get("metadata") or {}
        except (OSError, ValueError, AttributeError):
            metadata = {}
        if recorded := {name: value for name, value in metadata.items() if name in names}:
            return recorded
    identity = next((JudgeIdentity.from_record(item["judge"]) for items in logged.columns[task].values()
                     for item in items if isinstance(item.get("judge"), dict)), None)
    return {"judge_backend": identity.backend, "judge_model": identity.model,
            "judge_revision": identity.revision} if identity else {}


def answering_judge(settings: JudgeSettings) -> Judge:
    """The judge of ``settings`` once it has answered the preflight's request (unless judge_preflight is
    off), as a run checks its judge: one whose model its provider shut down is named so, with what to
    use instead."""
    if settings.judge_preflight:
        try:
            preflight(settings)
        except RetiredJudgeError as error:
            raise JudgeSetupError(f"{error}; {error.retirement.explain('--judge_model')}") from None
    return Judge.from_settings(settings)


def rejudge_samples(logged: LoggedItems, judge: Judge | Mapping[str, Judge], output_dir: str | Path, *,
                    progress: bool = True,
                    group_scores: Callable[[dict[str, dict]], dict[str, dict]] | None = None,
                    settings: Mapping[str, JudgeSettings] | None = None) -> dict[str, dict]:
    """Re-score the judged metrics of logged samples (``read_logged_items``) with ``judge`` (one
    for every task, or one per task).

    No model runs: the logged judge items hold the full judge requests (a ``--predict_only`` run
    logs them too). Every judged metric of a task (whole-sample scores, parts, breakdowns) is
    scored from one set of judgements, each request judged once, as in the evaluation itself.
    Writes an audit trail per task and ``<date>_rejudged.json`` (the scores; a metric without a
    value is ``null``) into ``output_dir``; returns the scores by task and by group (as the run
    reports groups, ``group_scores`` turning task scores into group scores: the registry's
    ``lmms_egoplan.suite.group_scores``): each judged metric, then ``judged`` / ``failed`` and ``unusable_rows``,
    and, given each task's judge ``settings``, the judge as a run records it (``judge``: backend, model, revision),
    which ``lmms-egoplan report`` shows beside the scores it reads from this file.
    """
    output_dir = Path(output_dir)
    stamp = datetime.now(files_zone(logged.files.values())).strftime("%Y%m%d_%H%M%S")  # as lmms-eval names files
    summary: dict[str, dict] = {}
    for task, columns in logged.columns.items():
        task_judge = judge[task] if isinstance(judge, Mapping) else judge
        every_item = [item for items in columns.values() for item in items]
        audit = output_dir / f"{stamp}_judgements_{task}.jsonl"
        results = task_judge.run(item_requests(every_item), items_rubric(every_item, logged.rubrics).parse_rating,
                                 audit_path=audit, progress=progress, description=f"Judging {task}")
        judgements = {j.id: j for j in results.judgements}
        scores = {metric: score_judged(items, judgements, logged.rubrics, judge_model=results.judge_model).score
                  for metric, items in columns.items() if metric not in COUNT_METRICS}
        summary[task] = {**scores, "judged": results.judged, "failed": results.failed,
                         "unusable_rows": len(logged.unusable[task]),
                         FAILED_REQUESTS: logged.failed_requests.get(task, 0), "judge_model": task_judge.model,
                         "samples": str(logged.files[task]), "audit_trail": str(audit)}
        if settings and task in settings:
            summary[task]["judge"] = {name: getattr(settings[task], name)
                                      for name in ("judge_backend", "judge_model", "judge_revision")}
    judges = " / ".join(sorted({row["judge_model"] for row in summary.values()}))
    groups = (group_scores or dict)(summary)
    summary.update({group: {**scores, "judge_model": judges} for group, scores in groups.items()})
    write_atomically(output_dir / f"{stamp}_rejudged.json", strict_json(summary, indent=2))
    return summary


def files_zone(samples_files: Iterable[Path]) -> ZoneInfo | None:
    """The time zone the rejudged runs named their files in (the ``--timezone`` their results files beside the samples
    record, lmms-eval's default where they record none), so that a rejudged file's name sorts after the run's own
    files; None, this machine's local time, where a results file is missing or the runs' zones differ."""
    zones = set()
    for samples in samples_files:
        results = samples.with_name(samples.name.split("_samples_")[0] + "_results.json")
        try:
            config = json.loads(results.read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError, AttributeError):
            return None
        arguments = config.get("resolved_cli_args") if isinstance(config, dict) else None
        zone = arguments.get("timezone") if isinstance(arguments, dict) else None
        zones.add(zone if isinstance(zone, str) and zone else LMMS_EVAL_DEFAULT_TIMEZONE)
    try:
        return ZoneInfo(zones.pop()) if len(zones) == 1 else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _samples_files(paths: Sequence[str | Path]) -> dict[str, Path]:
    """Task name -> its logged samples file (the newest, when a folder holds several runs of one model). The runs of
    one task in several folders (two models' runs) are refused, naming them: one rejudging scores one run."""
    found: dict[str, Path] = {}
    folders: dict[str, set[Path]] = {}
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        refuse_unreadable_folder(path)
        candidates = sorted(path.rglob("*_samples_*.jsonl")) if path.is_dir() else [path]
        if not candidates:
            raise FileNotFoundError(f"no lmms-eval samples files (*_samples_<task>.jsonl) under {path}")
        for candidate in candidates:
            match = re.search(r"_samples_(.+)\.jsonl$", candidate.name)
            if match is None or not candidate.is_file():
                raise FileNotFoundError(f"{candidate} is not an lmms-eval samples file (<date>_samples_<task>.jsonl)")
            folders.setdefault(match.group(1), set()).add(candidate.parent)
            if match.group(1) not in found or candidate.name > found[match.group(1)].name:
                found[match.group(1)] = candidate
    if several := {task: sorted(map(str, where)) for task, where in folders.items() if len(where) > 1}:
        raise InputError("the samples files given hold runs of one task in several folders (one rejudging scores "
                         "one run; give one run's folder or files): " + "; ".join(
                             f"{task} in {', '.join(where)}" for task, where in sorted(several.items())))
    return found


def rejudge_command(samples: Sequence[str], output: Path, settings: JudgeSettings) -> str:
    """The ``lmms-egoplan rejudge`` command judging ``samples`` with ``settings`` (its options for
    the settings that differ from the defaults)."""
    options = []
    for setting in fields(JudgeSettings):
        value = getattr(settings, setting.name)
        if value != setting.default and setting.name != "judge_preflight":
            options += [f"--{setting.name}", "none" if value is None else str(value)]
    return shlex.join(["lmms-egoplan", "rejudge", *samples, "--output", str(output), *options])
