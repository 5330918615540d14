"""Finding and reading results files: lmms-eval's ``<date>_results.json`` and lm-eval's
``results_<date-time>.json``, with the per-sample logs (``--log_samples``) written beside them, and the scores
``lmms-egoplan rejudge`` wrote for them (``<date>_rejudged.json``), which replace the judged metrics the run
itself reported (none, for a ``--predict_only`` run)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lmms_egoplan.compat.results import LMMS_EVAL_DEFAULT_TIMEZONE, PROTOCOL_CHANGES_KEY
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.files import refuse_unreadable_folder

LMMS_EVAL = "lmms-eval"
LM_EVAL = "lm-eval"
# lmms-eval 0.7: 20261123_025423_results.json; lm-eval 0.4: results_2026-11-22T18-53-03.123456.json
_LMMS_EVAL_RESULTS = re.compile(r"^(\d{8}_\d{6})_results\.json$")
_LM_EVAL_RESULTS = re.compile(r"^results_(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.json$")
# lmms-egoplan rejudge: 20261123_031500_rejudged.json
_REJUDGED = re.compile(r"^\d{8}_\d{6}_rejudged\.json$")
SUPPORTED_LMMS_EVAL = "0.7."
# lmms-eval stamps its files in the time zone of its --timezone argument, this one by default (UTC+8).
LMMS_EVAL_DEFAULT_ZONE = "UTC+08:00"  # its offset, as the report shows a time's zone (``zone_text``)


class NothingFoundError(InputError):
    """No results file of the suite's tasks under the paths given."""


# What a run recorded that it observed rather than chose (the configuration a judge server said answered,
# which OpenAI changes without notice): shown, but runs that differ only in it are runs of one setting.
OBSERVED_SETTINGS = ("judge_system_fingerprint",)


@dataclass
class Run:
    """One results file: every task it reports, with what the report needs of each, and what
    produced them (``identity``)."""

    path: Path
    harness: str  # LMMS_EVAL or LM_EVAL
    model: str  # the evaluated model as the report names it (``name_models``: unique for unique checkpoints)
    stamp: datetime  # when the run was stamped, with its time zone
    metrics: dict[str, dict[str, object]]  # task or group -> metric (filter dropped) -> value
    samples: dict[str, Path] = field(default_factory=dict)  # task -> its --log_samples file
    partial: dict[str, str] = field(default_factory=dict)  # task -> why its numbers cover part of the data
    notes: list[str] = field(default_factory=list)
    sample_counts: dict[str, int] = field(default_factory=dict)  # task -> samples evaluated (n-samples)
    original_counts: dict[str, int] = field(default_factory=dict)  # task -> samples of its split (before --limit)
    model_path: str = ""  # the checkpoint as the run named it: pretrained= (a folder or hub id), else the model name
    producer: dict[str, str] = field(default_factory=dict)  # backend, every model_arg, the run's options
    settings: dict[str, dict[str, str]] = field(default_factory=dict)  # task or group -> its effective settings
    rejudged: dict[str, Path] = field(default_factory=dict)  # task or group -> the rejudged file its judged scores are
    audit_trails: dict[str, Path] = field(default_factory=dict)  # task -> the judge's audit trail of those scores
    # task -> {metric name prefix: "not scored: <why, and the setting to set>"} (its config's metadata.not_scored)
    not_scored: dict[str, dict[str, str]] = field(default_factory=dict)
    # task -> {setting: what the run's backend changed of the protocol} (the suite's record in the results)
    protocol_changes: dict[str, dict[str, str]] = field(default_factory=dict)
    # What the report read of the run's other files (its logged samples, audit trails, per-sample scores), read once
    # by its intervals (``report.intervals``) and kept with the run: a later report reads them again
    read_files: dict[tuple[str, Path | None], Any] = field(default_factory=dict, repr=False, compare=False)

    def identity(self, tasks: Iterable[str]) -> dict[str, str]:
        """What produced this run's values of ``tasks``: the backend, every model_arg and the run's
        options (``producer``), and the tasks' effective settings (``recorded``, but what the run only
        observed); runs with equal identities differ only in time."""
        return {**self.producer, **{name: value for name, value in self.recorded(tasks).items()
                                    if name not in OBSERVED_SETTINGS}}

    def recorded(self, tasks: Iterable[str]) -> dict[str, str]:
        """The effective settings (and what the tasks recorded beside them) of ``tasks``, merged
        (``merged_settings``)."""
        return merged_settings(self.settings.get(task, {}) for task in tasks)

    @property
    def time_text(self) -> str:
        """The run's time with its time zone: ``2026-11-23 16:51:08 UTC+08:00``."""
        return f"{self.stamp:%Y-%m-%d %H:%M:%S} {zone_text(self.stamp)}"

    def side_file(self, kind: str, task: str) -> Path | None:
        """A file a run of the suite wrote beside its results (``<date>_<kind>_<task>.<ext>``): an lmms-eval run's
        carries its results' date; an lm-eval run's the time the run began (``harness.lm_eval_task``), before its
        results' (``results_<date>.json``): the latest of them not after it."""
        if kind == "judgements" and task in self.audit_trails:  # rejudged: the audit trail of the scores shown
            return self.audit_trails[task]
        if self.harness == LMMS_EVAL:
            prefix = self.path.name.removesuffix("_results.json")
            return next(iter(sorted(self.path.parent.glob(f"{prefix}_{kind}_{task}.*"))), None)
        written = self.path.stem.removeprefix("results_")
        begun = [path for path in sorted(self.path.parent.glob(f"*_{kind}_{task}.*"))
                 if path.name.split(f"_{kind}_")[0] <= written]
        return begun[-1] if begun else None


# The one metric lmms-eval reports for each task of a ``--predict_only`` run.
PREDICTED_ONLY = "bypass"


def not_judged(run: Run, tasks: Iterable[str]) -> str | None:
    """Where ``tasks`` of ``run`` were generated with ``--predict_only`` and not rejudged since: what says so, with
    the ``lmms-egoplan rejudge`` command that judges them (with the judge the run recorded) beside the run, where
    this report finds its scores; None where they are judged."""
    waiting = sorted(task for task in tasks if task in run.samples and task not in run.rejudged
                     and PREDICTED_ONLY in run.metrics.get(task, {}))
    if not waiting:
        return None
    folder = run.path.parent
    # rejudge reads the newest samples file of each task in a folder: the folder, where this run's are those
    newest = all(max(folder.glob(f"*_samples_{task}.jsonl")) == run.samples[task] for task in waiting)
    targets = [str(folder)] if newest and len(waiting) > 1 else [str(run.samples[task]) for task in waiting]
    command = shlex.join(["lmms-egoplan", "rejudge", *targets, "--output", str(folder)])
    return f"not judged (--predict_only): run `{command}` with the judge running, then this report again"


def not_scored_predicted(run: Run, tasks: Iterable[str]) -> str | None:
    """Where ``tasks`` of ``run``, which no judge scores, were generated with ``--predict_only``: what says so, and
    what scores them (a run without it: lmms-eval scores as it evaluates, rejudge has nothing to judge); None where
    they are scored."""
    waiting = sorted(task for task in tasks if PREDICTED_ONLY in run.metrics.get(task, {}))
    if not waiting:
        return None
    return (f"not scored (--predict_only): the run logged its answers unscored; run lmms-eval with `--tasks "
            f"{','.join(waiting)}` again without --predict_only, then this report again")


def zone_text(stamp: datetime) -> str:
    """``UTC`` or ``UTC+08:00``: the offset, which names the zone unambiguously and briefly."""
    offset = stamp.utcoffset()
    if not offset:
        return "UTC"
    minutes = int(offset.total_seconds()) // 60
    return f"UTC{'+' if minutes > 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _run_time(harness: str, stamp_text: str, data: dict) -> tuple[datetime, list[str]]:
    """When the run was stamped, time-zone aware, and a note where the zone had to be assumed.

    lmms-eval names its files with the local time of its ``--timezone`` (recorded under
    ``config.resolved_cli_args``); lm-eval records the start as a POSIX time (``date``) and names
    its files with the machine's local time, whose zone it does not record.
    """
    if harness == LM_EVAL:
        started = data.get("date")
        if isinstance(started, (int, float)) and not isinstance(started, bool):
            try:
                return datetime.fromtimestamp(started, tz=timezone.utc), []
            except (OverflowError, OSError, ValueError):
                raise FieldError(f"'date' is {started!r}, not a time") from None
        naive = _named_time(lambda: datetime.fromisoformat(stamp_text[:10] + stamp_text[10:].replace("-", ":")),
                            stamp_text)
        return naive.astimezone(), ["no start time recorded: the file name's local time is read in this machine's zone"]
    naive = _named_time(lambda: datetime.strptime(stamp_text, "%Y%m%d_%H%M%S"), stamp_text)
    arguments = _field(_field(data, "config", dict) or {}, "resolved_cli_args", dict, "config.") or {}
    name = _field(arguments, "timezone", str, "config.resolved_cli_args.") or LMMS_EVAL_DEFAULT_TIMEZONE
    try:
        return naive.replace(tzinfo=ZoneInfo(name)), []
    except (ZoneInfoNotFoundError, ValueError):
        return naive.replace(tzinfo=ZoneInfo(LMMS_EVAL_DEFAULT_TIMEZONE)), [
            f"time zone {name!r} unknown here: its time read as lmms-eval's default {LMMS_EVAL_DEFAULT_TIMEZONE}"]


def _named_time(read: Callable[[], datetime], stamp_text: str) -> datetime:
    """The date-time a results file's name holds: one of the right shape but no date (a renamed file's
    20261399_999999) is named, never a traceback that costs the whole report."""
    try:
        return read()
    except ValueError:
        raise FieldError(f"its name's date-time {stamp_text!r} is no date and time") from None


def results_files(paths: list[str | Path]) -> list[Path]:
    """Every results file named, or found at any depth under the folders named."""
    found = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        refuse_unreadable_folder(path)
        candidates = [path] if path.is_file() else sorted(path.rglob("*.json"))
        found += [c for c in candidates if _stamp_text(c) is not None]
        if path.is_file() and _stamp_text(path) is None and not _REJUDGED.match(path.name):
            raise InputError(f"{path} is not a results file (<date>_results.json of lmms-eval or "
                             "results_<date-time>.json of lm-eval) nor scores of lmms-egoplan rejudge "
                             "(<date>_rejudged.json)")
    return sorted(set(found))


def rejudged_files(paths: list[str | Path]) -> list[Path]:
    """Every ``lmms-egoplan rejudge`` scores file named, or found at any depth under the folders named, oldest
    first (a later rejudging of a task replaces an earlier one)."""
    found = []
    for path in map(Path, paths):
        candidates = [path] if path.is_file() else sorted(path.rglob("*_rejudged.json"))
        found += [c for c in candidates if _REJUDGED.match(c.name)]
    return sorted(set(found), key=lambda path: (path.name, str(path)))


# What a rejudged task's row holds beside its scores (``harness.rejudge.rejudge_samples``).
_REJUDGED_FILES = ("samples", "audit_trail", "judge_model", "judge")


def _rejudged(path: Path) -> dict[str, dict]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
    if not isinstance(data, dict) or not all(isinstance(row, dict) for row in data.values()):
        raise InputError(f"{path}: unreadable (not the scores of lmms-egoplan rejudge: an object of tasks)")
    return data


def _results_of_samples(row: dict) -> Path | None:
    """The results file lmms-eval wrote beside the samples file a rejudged task's row names
    (``<date>_samples_<task>.jsonl``); None for a group's row."""
    samples = row.get("samples")
    if not isinstance(samples, str) or "_samples_" not in samples:
        return None
    path = Path(samples)
    return path.with_name(path.name.split("_samples_")[0] + "_results.json")


def apply_rejudged(runs: list[Run], rejudged: list[Path], unreadable: list[str]) -> None:
    """Replace the judged metrics of each rejudged task (and of the groups rejudged with them) by the scores of its
    latest ``rejudged`` file, with that judge and audit trail; a run's row then says it was rejudged."""
    by_path = {run.path.resolve(): run for run in runs}
    for path in rejudged:
        try:
            data = _rejudged(path)
        except InputError as error:
            unreadable.append(str(error))
            continue
        touched: dict[Path, Run] = {}  # the runs this file rejudged, by results file
        for task, row in data.items():
            results = _results_of_samples(row)
            run = by_path.get(results.resolve()) if results is not None else None
            if run is not None:
                _rejudge_task(run, task, row, path)
                touched[run.path] = run
        judges = {json.dumps(row["judge"], sort_keys=True) for row in data.values() if "judge" in row}
        judge = {"judge": json.loads(judges.pop())} if len(judges) == 1 else {}  # a group's: its tasks' one judge
        for group, row in data.items():
            owners = [run for run in touched.values() if group in run.metrics] or list(touched.values())
            if _results_of_samples(row) is None and len(owners) == 1:
                _rejudge_task(owners[0], group, {**judge, **row}, path)


def _rejudge_task(run: Run, task: str, row: dict, path: Path) -> None:
    run.metrics.setdefault(task, {}).update((metric, value) for metric, value in row.items()
                                            if metric not in _REJUDGED_FILES)
    run.rejudged[task] = path
    if row.get("audit_trail"):
        run.audit_trails[task] = Path(row["audit_trail"])
    judge = row.get("judge")
    if isinstance(judge, dict):  # the judge that rejudged it; what its server said answered is not known
        recorded = run.settings.setdefault(task, {})
        recorded.update((name, _text(value)) for name, value in judge.items())
        for name in OBSERVED_SETTINGS + ("judge_served_model",):
            recorded.pop(name, None)


def _stamp_text(path: Path) -> tuple[str, str] | None:
    for harness, pattern in ((LMMS_EVAL, _LMMS_EVAL_RESULTS), (LM_EVAL, _LM_EVAL_RESULTS)):
        if match := pattern.match(path.name):
            return harness, match.group(1)
    return None


def read_run(path: Path) -> Run:
    """The run a results file records. Raises InputError naming the file and what is wrong with it:
    unreadable, not JSON, or a field the report reads holding a value of another type."""
    harness, stamp_text = _stamp_text(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise InputError(f"{path}: unreadable (no 'results' object: not a results file of a known layout)")
    try:
        return _run(path, harness, stamp_text, data)
    except FieldError as error:
        raise InputError(f"{path}: unreadable ({error})") from None


# What the harnesses write beside a task's metrics in its results: its display name; lm-eval 0.4.13 also its name, its
# samples' count and each metric's (not metrics).
TASK_BOOKKEEPING = ("alias", "name", "sample_len", "sample_count")


def _run(path: Path, harness: str, stamp_text: str, data: dict) -> Run:
    metrics: dict[str, dict[str, object]] = {}
    null_tasks = []
    for section in ("results", "groups"):
        for task in _field(data, section, dict) or {}:
            # "accuracy,none" (metric,filter) since lmms-eval 0.2 / lm-eval 0.4; a bare name before.
            values = _field(data[section], task, dict, f"{section}.")
            if values is None:
                null_tasks.append(f"{section}.{task}")
            values = values or {}
            metrics.setdefault(task, {}).update((key.split(",")[0], value) for key, value in values.items()
                                                if "_stderr" not in key and key not in TASK_BOOKKEEPING)
    stamp, time_notes = _run_time(harness, stamp_text, data)
    model_path, producer = _producer(data)
    time_notes += [f"'{task}' is null: the file holds no value of it" for task in null_tasks]
    run = Run(path, harness, _model_name(data, path), stamp, metrics, notes=time_notes,
              model_path=model_path or _model_name(data, path), producer=producer, settings=_effective_settings(data))
    version = data.get("lmms_eval_version")
    if (harness == LMMS_EVAL and re.match(r"\d+\.\d+", str(version or ""))
            and not str(version).startswith(SUPPORTED_LMMS_EVAL)):
        run.notes.append(f"written by lmms-eval {version}; read with the {SUPPORTED_LMMS_EVAL}x layout")
    limit = _field(_field(data, "config", dict) or {}, "limit", (int, float), "config.")
    counted = _field(data, "n-samples", dict) or {}
    for task in counted:
        counts = _field(counted, task, dict, "n-samples.") or {}
        effective, original = (_field(counts, name, int, f"n-samples.{task}.") for name in ("effective", "original"))
        if effective is not None:
            run.sample_counts[task] = effective
        if original is not None:
            run.original_counts[task] = original
        if (effective or 0) < (original or 0):
            run.partial[task] = f"{effective or 0} of {original} samples" + (f" (--limit {limit:g})" if limit else "")
    for task, values in metrics.items():
        skipped, failed, cut = (values.get(name) for name in ("skipped_samples", "failed_requests", "cut_answers"))
        reasons = [run.partial[task]] if task in run.partial else []
        if isinstance(skipped, (int, float)) and not isinstance(skipped, bool) and skipped > 0:
            reasons.append(f"{skipped:g} samples skipped at load")
        if isinstance(failed, (int, float)) and not isinstance(failed, bool) and failed > 0:  # left out of every score
            of = f" of {run.sample_counts[task]:g}" if task in run.sample_counts else ""
            reasons.append(f"{failed:g}{of} model requests failed, left out of the scores")
        if isinstance(cut, (int, float)) and not isinstance(cut, bool) and cut > 0:  # scored, their missing fields 0
            reasons.append(f"{cut:g} answers cut at the token limit (max_new_tokens), their missing fields scored 0")
        if reasons:
            run.partial[task] = "; ".join(reasons)
    run.samples = _samples_files(path, harness, stamp_text)
    run.not_scored = _not_scored(data)
    run.protocol_changes = _protocol_changes(data)
    return run


def _not_scored(data: dict) -> dict[str, dict[str, str]]:
    """Each task's metrics its settings left unscored, as the suite records them (``metadata.not_scored``)."""
    configs = _field(data, "configs", dict) or {}
    found = {}
    for task in configs:
        metadata = _field(_field(configs, task, dict, "configs.") or {}, "metadata", dict, f"configs.{task}.") or {}
        unscored = _field(metadata, "not_scored", dict, f"configs.{task}.metadata.") or {}
        found[task] = {str(metric): _text(why) for metric, why in unscored.items()}
    return {task: unscored for task, unscored in found.items() if unscored}


def _protocol_changes(data: dict) -> dict[str, dict[str, str]]:
    """What the run's backend changed of each task's protocol, as the suite records it (``PROTOCOL_CHANGES_KEY``)."""
    recorded = _field(data, PROTOCOL_CHANGES_KEY, dict) or {}
    found = {task: _field(recorded, task, dict, f"{PROTOCOL_CHANGES_KEY}.") or {} for task in recorded}
    return {task: {str(setting): _text(change) for setting, change in changes.items()}
            for task, changes in found.items() if changes}


class FieldError(InputError):
    """A field of a results file holds a value of a type the report cannot read."""


_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a whole number", float: "a number",
               bool: "true or false", type(None): "null"}


def _field(container: dict, name: str, expected: type | tuple[type, ...], where: str = "") -> Any:
    """``container[name]`` where it is of an ``expected`` type (true and false are not numbers), None
    where it is absent or null; any other value raises FieldError naming the field (``where`` + ``name``)."""
    expected = expected if isinstance(expected, tuple) else (expected,)
    value = container.get(name)
    if value is None or (isinstance(value, expected) and (bool in expected or not isinstance(value, bool))):
        return value
    wanted = " or ".join(dict.fromkeys(_TYPE_NAMES[kind] for kind in expected))
    raise FieldError(f"'{where}{name}' is {_TYPE_NAMES.get(type(value), type(value).__name__)}, not {wanted}")


def _model_name(data: dict, path: Path) -> str:
    """The evaluated checkpoint's name: its folder or hub name, else the results folder's name."""
    name = _field(data, "model_name", str) or ""
    if not name:
        args = _field(_field(data, "config", dict) or {}, "model_args", (str, dict), "config.")
        args = args if isinstance(args, str) else ""
        name = next((part.split("=", 1)[1] for part in args.split(",") if part.startswith("pretrained=")), "")
    return Path(name).name if name.startswith("/") else (name or path.parent.name)


# The run options of a results file's "config" that change what is computed (lmms-eval and lm-eval
# name them alike), and the values that mean "not set".
_RUN_OPTIONS = ("gen_kwargs", "num_fewshot", "system_instruction", "apply_chat_template", "limit", "offset")
_UNSET = (None, "", False, 0, {}, [])


def _producer(data: dict) -> tuple[str, dict[str, str]]:
    """(the checkpoint as given, {backend, each model_arg, each run option that is set}) of a results file."""
    config = _field(data, "config", dict) or {}
    arguments = _field(config, "model_args", (str, dict), "config.") or {}
    if isinstance(arguments, str):
        arguments = dict(part.split("=", 1) if "=" in part else (part, "") for part in arguments.split(",") if part)
    producer = {"backend": _field(config, "model", str, "config.") or ""}
    producer.update((str(name), _text(value)) for name, value in sorted(arguments.items()))
    options = {**(_field(config, "resolved_cli_args", dict, "config.") or {}), **config}
    producer.update((name, _text(options[name])) for name in _RUN_OPTIONS if options.get(name) not in _UNSET)
    if data.get("system_instruction") not in _UNSET:
        producer["system_instruction"] = _text(data["system_instruction"])
    return str(arguments.get("pretrained") or arguments.get("model") or ""), producer


def _effective_settings(data: dict) -> dict[str, dict[str, str]]:
    """Each task's effective settings as the suite records them in its config's ``metadata`` (every
    setting, and the task's version), a group's those of its tasks ("group_subtasks")."""
    configs = _field(data, "configs", dict) or {}
    settings = {task: {name: _text(value) for name, value in sorted(
        (_field(_field(configs, task, dict, "configs.") or {}, "metadata", dict, f"configs.{task}.") or {}).items())}
        for task in configs}
    groups = _field(data, "group_subtasks", dict) or {}
    for group in groups:
        members = _field(groups, group, list, "group_subtasks.") or []
        if not all(isinstance(member, str) for member in members):
            raise FieldError(f"'group_subtasks.{group}' holds a value that is not a task name")

    def of_group(group: str, seen: frozenset = frozenset()) -> dict[str, str]:
        return merged_settings(of_group(task, seen | {group}) if task in groups and task not in seen
                               else settings.get(task, {}) for task in groups.get(group, []))

    for group in groups:
        if group not in settings or not settings[group]:
            settings[group] = of_group(group)
    return settings


def merged_settings(settings: Iterable[dict[str, str]]) -> dict[str, str]:
    """Several tasks' settings as one: a setting they set differently reads "a / b"."""
    merged: dict[str, set[str]] = {}
    for member in settings:
        for name, value in member.items():
            merged.setdefault(name, set()).add(value)
    return {name: next(iter(values)) if len(values) == 1 else " / ".join(sorted(values))
            for name, values in merged.items()}


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _samples_files(path: Path, harness: str, stamp_text: str) -> dict[str, Path]:
    pattern = (re.compile(rf"^{re.escape(stamp_text)}_samples_(.+)\.jsonl$") if harness == LMMS_EVAL
               else re.compile(rf"^samples_(.+)_{re.escape(stamp_text)}\.jsonl$"))
    return {match.group(1): candidate for candidate in sorted(path.parent.iterdir())
            if (match := pattern.match(candidate.name))}


def load_runs(paths: list[str | Path], *, all_runs: bool = False) -> tuple[list[Run], list[str]]:
    """The runs under ``paths`` and one line per file that could not be read.

    Without ``all_runs``, of the runs of a task whose identities are equal (the same checkpoint,
    backend, model_args, run options and effective settings: ``Run.identity``) only the latest
    keeps that task; runs that differ in any of them all keep it. Models are named so that two
    checkpoints never share a name (``name_models``). Raises NothingFoundError when no results file
    is found.
    """
    files = results_files(paths)
    rejudged = rejudged_files(paths)
    unreadable: list[str] = []
    damaged: list[str] = []  # rejudged files that cannot be read: said with the runs, or as why none was found
    # The runs a rejudged file scores, where they were not named (``rejudge --output`` another folder).
    for path in rejudged:
        try:
            files += [results for row in _rejudged(path).values()
                      if (results := _results_of_samples(row)) is not None and results.is_file()]
        except InputError as error:
            damaged.append(str(error))  # with runs to report: said once, by apply_rejudged
    files = sorted({path.resolve(): path for path in files}.values())
    if not files:
        raise NothingFoundError(f"no results files (<date>_results.json, results_<date-time>.json) under "
                                f"{', '.join(map(str, paths))}" + "".join(f"; {problem}" for problem in damaged))
    runs = []
    for path in files:
        try:
            runs.append(read_run(path))
        except InputError as error:
            unreadable.append(str(error))
    apply_rejudged(runs, rejudged, unreadable)
    name_models(runs)
    if not all_runs:
        latest: dict[tuple, Run] = {}
        for run in sorted(runs, key=lambda r: r.stamp):
            for task in run.metrics:
                latest[_identity_key(run, task)] = run
        for run in runs:
            run.metrics = {task: values for task, values in run.metrics.items()
                           if latest[_identity_key(run, task)] is run}
        runs = [run for run in runs if run.metrics]
    return runs, unreadable


def _identity_key(run: Run, task: str) -> tuple:
    return run.harness, run.model_path, task, tuple(sorted(run.identity([task]).items()))


def name_models(runs: list[Run]) -> None:
    """Name each run's model by its checkpoint's folder name (or hub id), lengthened by parent folders
    where checkpoints of different paths share it (``a/final``, ``b/final``)."""
    by_name: dict[str, set[str]] = {}
    for run in runs:
        by_name.setdefault(run.model, set()).add(run.model_path)
    for run in runs:
        paths = by_name[run.model]
        if len(paths) < 2:
            continue
        parts = Path(run.model_path).parts
        for length in range(2, len(parts) + 1):
            suffix = parts[-length:]
            if sum(Path(other).parts[-length:] == suffix for other in paths) == 1:
                run.model = "/".join(suffix)
                break
        else:
            run.model = run.model_path
