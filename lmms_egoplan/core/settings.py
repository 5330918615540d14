"""Benchmark settings: typed dataclass fields, set in a task YAML's ``metadata`` block, the settings file
(``core.settings_file``) or ``<PREFIX>_<FIELD>`` environment variables (lmms-eval 0.7 has no per-task CLI overrides).

This module does not import lmms-eval, so command-line tools and tests can use it cheaply.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from pathlib import Path
from typing import Any, Callable, Collection, Mapping

from lmms_egoplan.core.errors import InputError

if typing.TYPE_CHECKING:
    from lmms_egoplan.core.settings_file import SettingsFile

# lmms-eval copies a task's `metadata` into every request's metadata next to these keys.
_RESERVED_SETTING_NAMES = frozenset({"task", "doc_id", "repeats", "split", "version"})
# The metadata key a task's results record the settings file under (``core.settings_file``): no setting.
SETTINGS_FILE_KEY = "settings_file"


class SettingsError(InputError):
    """A benchmark setting is unknown or has a value of the wrong type."""


def setting(default: Any, *, choices: tuple | None = None, minimum: float | None = None,
            above: float | None = None, maximum: float | None = None, non_empty: bool | None = None,
            changes_answers: bool = True) -> Any:
    """A settings field whose allowed values ``resolve_settings`` checks: one of ``choices``, or a
    number ``>= minimum``, ``> above``, ``<= maximum``, or (``non_empty``) a text that is not blank (None, where the
    type allows it, is always allowed).
    ``changes_answers=False``: the model's answers do not depend on it (where data or caches lie, how answers are
    judged or scored), so the response cache serves answers across a change of it (``answer_settings``)."""
    limits = {"choices": choices, "minimum": minimum, "above": above, "maximum": maximum, "non_empty": non_empty}
    metadata = {key: value for key, value in limits.items() if value is not None}
    return dataclasses.field(default=default, metadata=metadata if changes_answers else {**metadata,
                                                                                         _KEEPS_ANSWERS: True})


# The field metadata of a setting the model's answers do not depend on (``setting(changes_answers=False)``).
_KEEPS_ANSWERS = "keeps_answers"


def answer_settings(settings: Any) -> dict[str, Any]:
    """The fields of ``settings`` (a dataclass) that change the model's answers, by name, as JSON values."""
    return {field.name: _jsonable(getattr(settings, field.name)) for field in dataclasses.fields(settings)
            if not field.metadata.get(_KEEPS_ANSWERS)}


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def value_problems(settings: Any, name: Callable[[str], str] = str) -> list[str]:
    """What is wrong with the values of ``settings`` (fields declared with ``setting``), one line per
    field; ``name`` says how the user sets a field (an environment variable, a command-line flag)."""
    problems = []
    for field in dataclasses.fields(settings):
        value, limits = getattr(settings, field.name), field.metadata
        if value is None or not limits:
            continue
        if "choices" in limits and value not in limits["choices"]:
            problems.append(f"{name(field.name)} must be one of {', '.join(map(str, limits['choices']))}, "
                            f"got {value!r}")
        if "minimum" in limits and value < limits["minimum"]:
            problems.append(f"{name(field.name)} must be at least {limits['minimum']}, got {value!r}")
        if "above" in limits and not value > limits["above"]:
            problems.append(f"{name(field.name)} must be greater than {limits['above']}, got {value!r}")
        if "maximum" in limits and value > limits["maximum"]:
            problems.append(f"{name(field.name)} must be at most {limits['maximum']}, got {value!r}")
        if limits.get("non_empty") and not str(value).strip():
            problems.append(f"{name(field.name)} must not be empty")
    return problems


def env_var(prefix: str, field: str) -> str:
    return f"{prefix}_{field}".upper()


def setting_name(prefix: str, field: str) -> str:
    """How a user changes setting ``field``: its environment variable and its YAML metadata key."""
    return f"{env_var(prefix, field)} (metadata.{field})"


def resolve_settings(settings_class: type, *, task: str, metadata: Mapping[str, Any] | None,
                     env_prefix: str, environ: Mapping[str, str] = os.environ,
                     foreign_keys: Collection[str] = (), settings_file: SettingsFile | None = None,
                     benchmark: str = ""):
    """Build ``settings_class`` (a dataclass): defaults < YAML ``metadata`` < ``settings_file``'s values for
    ``benchmark`` (its block, the judge's) < ``<PREFIX>_<FIELD>`` env vars.

    ``foreign_keys``: ``metadata`` keys another program put there, never settings (lm-eval merges
    the run's ``--model_args`` into every task's metadata); they are skipped, and any other key
    still has to name a setting.

    Unknown ``metadata`` keys, environment variables with the prefix that name no setting (a
    misspelt ``<PREFIX>_NUMFRAMES`` would otherwise be ignored), unparsable values and values out of
    a field's range (``setting``) raise SettingsError naming the task, the key or variable, and what
    was expected.
    """
    hints = typing.get_type_hints(settings_class)
    fields = {f.name: f for f in dataclasses.fields(settings_class)}
    clash = _RESERVED_SETTING_NAMES & fields.keys()
    if clash:
        raise TypeError(f"{settings_class.__name__} uses names reserved by lmms-eval: {sorted(clash)}")
    values: dict[str, Any] = {}
    for key, raw in (metadata or {}).items():
        if key in ("version", SETTINGS_FILE_KEY) or key in foreign_keys:
            continue
        if key not in fields:
            raise SettingsError(
                f"task {task}: unknown setting {key!r} in the YAML metadata; "
                f"known settings: {', '.join(sorted(fields))}"
            )
        values[key] = coerce_setting(raw, hints[key], f"task {task}: metadata.{key}")
    from_file = _file_values(settings_file, benchmark, fields, hints, task)
    values.update(from_file)
    variables = {env_var(env_prefix, name): name for name in fields}
    for variable, name in variables.items():
        if variable in environ:
            from_file.pop(name, None)
            values[name] = coerce_setting(environ[variable], hints[name],
                                          f"task {task}: environment variable {variable}")
    settings = settings_class(**values)
    # Variables that settings name (``judge_api_key_env``: where a key is) are not settings.
    named = {getattr(settings, name) for name in fields if name.endswith("_env")}
    for variable in sorted(environ):
        if variable.startswith(f"{env_prefix.upper()}_") and variable not in variables and variable not in named:
            hint = closest_name_hint(variable, variables, listing="the settings are")
            raise SettingsError(f"task {task}: environment variable {variable} names no setting; {hint}")
    # a value out of range is named where it was given: the settings file's key and line, else how to set it
    problems = value_problems(settings, lambda field: settings_file.where(benchmark, field) if field in from_file
                              else setting_name(env_prefix, field))
    if problems:
        raise SettingsError(f"task {task}: " + "; ".join(problems))
    return settings


def _file_values(settings_file: SettingsFile | None, benchmark: str, fields: Mapping[str, Any], hints: Mapping,
                 task: str) -> dict[str, Any]:
    """The values the settings file gives the task's benchmark, checked and converted like the YAML's."""
    if settings_file is None:
        return {}
    values = {}
    for key, raw in settings_file.values_for(benchmark, fields).items():
        where = f"task {task}: {settings_file.where(benchmark, key)}"
        if key not in fields:
            raise SettingsError(f"{where} names no setting; {closest_name_hint(key, fields, 'the settings are')}")
        values[key] = coerce_setting(raw, hints[key], where)
    return values


def closest_name_hint(name: str, known: Collection[str], listing: str = "known:") -> str:
    """"did you mean X?" for the closest of ``known`` names, else ``listing`` and all of them."""
    closest = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {closest[0]}?" if closest else f"{listing} {', '.join(sorted(known))}"


def coerce_setting(raw: Any, annotation: Any, where: str, *, minimum: float | None = None,
                   above: float | None = None) -> Any:
    """Convert a YAML, environment or command-line value to the annotated type (str / int / float /
    bool / Path / Optional); a value that does not fit, or a number below ``minimum`` or not above ``above``,
    raises SettingsError naming ``where``."""
    value = _coerced(raw, annotation, where)
    if value is not None and minimum is not None and value < minimum:
        raise SettingsError(f"{where} must be at least {minimum}, got {raw!r}")
    if value is not None and above is not None and value <= above:
        raise SettingsError(f"{where} must be greater than {above}, got {raw!r}")
    return value


def _coerced(raw: Any, annotation: Any, where: str) -> Any:
    optional = type(None) in typing.get_args(annotation)
    target = next((a for a in typing.get_args(annotation) if a is not type(None)),
                  annotation) if optional else annotation
    if raw is None or (optional and isinstance(raw, str) and raw.strip().lower() in ("", "none", "null")):
        if optional:
            return None
        raise SettingsError(f"{where}: a value is required")
    if target is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{where}: expected true/false, got {raw!r}")
    if target in (int, float):
        if isinstance(raw, bool):  # YAML's true is Python's 1: max_side true would mean 1-pixel frames
            raise SettingsError(f"{where}: expected {'an integer' if target is int else 'a number'}, got "
                                f"{str(raw).lower()} (true/false is no number)")
        try:
            value = target(raw)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int() of YAML's .inf
            raise SettingsError(f"{where}: expected "
                                f"{'an integer' if target is int else 'a number'}, got {raw!r}") from None
        if not math.isfinite(value):  # nan passes every range check, inf every minimum (a backoff, a frame rate)
            raise SettingsError(f"{where}: expected a finite number, got {raw!r}")
        if target is int and isinstance(raw, float) and raw != value:
            raise SettingsError(f"{where}: expected an integer, got {raw!r}")
        return value
    if target is str:
        return str(raw)
    if target is Path:
        return Path(os.path.expanduser(str(raw)))
    return raw
