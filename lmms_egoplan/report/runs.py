"""Finding and reading results files: lmms-eval's ``<date>_results.json`` and lm-eval's
``results_<date-time>.json``, with the per-sample logs (``--log_samples``) written beside them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lmms_egoplan.core.errors import InputError

LMMS_EVAL = "lmms-eval"
LM_EVAL = "lm-eval"
# lmms-eval 0.7: 20261123_025423_results.json; lm-eval 0.4: results_2026-11-22T18-53-03.123456.json
_LMMS_EVAL_RESULTS = re.compile(r"^(\d{8}_\d{6})_results\.json$")
_LM_EVAL_RESULTS = re.compile(r"^results_(\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?)\.json$")
SUPPORTED_LMMS_EVAL = "0.7."
# lmms-eval stamps its files in the time zone of its --timezone argument, this one by default (UTC+8).
LMMS_EVAL_DEFAULT_TIMEZONE = "Asia/Singapore"
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
    model_path: str = ""  # the checkpoint as the run named it: pretrained= (a folder or hub id), else the model name
    producer: dict[str, str] = field(default_factory=dict)  # backend, every model_arg, the run's options
    settings: dict[str, dict[str, str]] = field(default_factory=dict)  # task or group -> its effective settings
    # task -> {metric name prefix: "not scored: <why, and the setting to set>"} (its config's metadata.not_scored)
    not_scored: dict[str, dict[str, str]] = field(default_factory=dict)

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
        """A file an lmms-eval run of the suite wrote beside its results (``<date>_<kind>_<task>.<ext>``)."""
        if self.harness != LMMS_EVAL:
            return None
        prefix = self.path.name.removesuffix("_results.json")
        return next(iter(sorted(self.path.parent.glob(f"{prefix}_{kind}_{task}.*"))), None)


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
        naive = datetime.fromisoformat(stamp_text[:10] + stamp_text[10:].replace("-", ":"))
        return naive.astimezone(), ["no start time recorded: the file name's local time is read in this machine's zone"]
    naive = datetime.strptime(stamp_text, "%Y%m%d_%H%M%S")
    arguments = _field(_field(data, "config", dict) or {}, "resolved_cli_args", dict, "config.") or {}
    name = _field(arguments, "timezone", str, "config.resolved_cli_args.") or LMMS_EVAL_DEFAULT_TIMEZONE
    try:
        return naive.replace(tzinfo=ZoneInfo(name)), []
    except (ZoneInfoNotFoundError, ValueError):
        return naive.replace(tzinfo=ZoneInfo(LMMS_EVAL_DEFAULT_TIMEZONE)), [
            f"time zone {name!r} unknown here: its time read as lmms-eval's default {LMMS_EVAL_DEFAULT_TIMEZONE}"]


def results_files(paths: list[str | Path]) -> list[Path]:
    """Every results file named, or found at any depth under the folders named."""
    found = []
    for path in map(Path, paths):
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        candidates = [path] if path.is_file() else sorted(path.rglob("*.json"))
        found += [c for c in candidates if _stamp_text(c) is not None]
        if path.is_file() and _stamp_text(path) is None:
            raise InputError(f"{path} is not a results file (<date>_results.json of lmms-eval or "
                             "results_<date-time>.json of lm-eval)")
    return sorted(set(found))


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


def _run(path: Path, harness: str, stamp_text: str, data: dict) -> Run:
    metrics: dict[str, dict[str, object]] = {}
    for section in ("results", "groups"):
        for task in _field(data, section, dict) or {}:
            # "accuracy,none" (metric,filter) since lmms-eval 0.2 / lm-eval 0.4; a bare name before.
            values = _field(data[section], task, dict, f"{section}.") or {}
            metrics.setdefault(task, {}).update((key.split(",")[0], value) for key, value in values.items()
                                                if "_stderr" not in key and key != "alias")
    stamp, time_notes = _run_time(harness, stamp_text, data)
    model_path, producer = _producer(data)
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
    if not files:
        raise NothingFoundError(f"no results files (<date>_results.json, results_<date-time>.json) under "
                                f"{', '.join(map(str, paths))}")
    runs, unreadable = [], []
    for path in files:
        try:
            runs.append(read_run(path))
        except InputError as error:
            unreadable.append(str(error))
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
