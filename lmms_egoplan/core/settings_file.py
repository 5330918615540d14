"""The settings file a run reads (``lmms-egoplan prepare`` writes it; the demo writes one for its data): each
benchmark's settings, the judge's, and the record counts ``check-data`` expects of a declared subset. A run
needs no variables with it; ``<PREFIX>_<SETTING>`` variables still override it (``core.settings.resolve_settings``:
defaults < YAML metadata < this file < variables).

Which file: the one ``LMMS_EGOPLAN_SETTINGS`` names (empty: none), else ``$XDG_CONFIG_HOME/lmms-egoplan/settings.yaml``
(``~/.config/...``) where it exists. Its layout (YAML)::

    judge:                 # JudgeSettings fields, for every judged benchmark
      judge_base_url: http://127.0.0.1:8000/v1
    <benchmark>:           # a benchmark (its catalogue name): its settings, as its YAML metadata spells them
      annotation_dir: /data/<benchmark>/annotations
    expected_counts:       # check-data: a declared subset's record counts, by benchmark and part
      <benchmark>: {val: 8, test: 3}
    prepared:              # what prepare fetched: repositories and revisions (read by nobody; a record)
      <benchmark>: {root: /data/<benchmark>, hub: {<owner>/<dataset>: {revision: 0123abcd..., ...}}}
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.files import write_atomically

SETTINGS_VARIABLE = "LMMS_EGOPLAN_SETTINGS"
JUDGE_FIELD_PREFIX = "judge_"  # every judge setting's name starts so (judge.settings.JudgeSettings)
JUDGE_BLOCK = "judge"
COUNTS_BLOCK = "expected_counts"
PREPARED_BLOCK = "prepared"
HEADER = ("# lmms-egoplan settings (docs/data.md): every run of the suite's tasks reads this file; <PREFIX>_<SETTING>\n"
          "# variables override it. Written by {writer}; edit freely.\n")


class SettingsFileError(InputError):
    """The settings file cannot be read, or holds a key that names nothing."""


@dataclass(frozen=True)
class SettingsFile:
    """A settings file's content: ``benchmarks`` by catalogue name, each its settings by field name."""

    path: Path | None = None
    benchmarks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    judge: Mapping[str, Any] = field(default_factory=dict)
    expected_counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    prepared: Mapping[str, Any] = field(default_factory=dict)
    # The line of each key in the file, by its dotted path ("egothink.data_root", "expected_counts.egoplan.val").
    lines: Mapping[str, int] = field(default_factory=dict, compare=False)

    def values_for(self, benchmark: str, fields: Collection[str]) -> dict[str, Any]:
        """The values the file gives a benchmark whose settings have ``fields``: the judge block's where it is
        judged (its settings have the ``judge_*`` fields of ``judge.settings.JudgeSettings``; every key of the block,
        so that one that names no setting is refused), then its own block's over them."""
        judged = any(name.startswith(JUDGE_FIELD_PREFIX) for name in fields)
        return {**(self.judge if judged else {}), **self.benchmarks.get(benchmark, {})}

    def where(self, benchmark: str, key: str) -> str:
        """How a message names a value of the file: the file, the key and its line."""
        block = benchmark if key in self.benchmarks.get(benchmark, {}) else JUDGE_BLOCK
        return self.at(f"{block}.{key}")

    def at(self, dotted: str) -> str:
        """``settings file <path>: <dotted key> (line <n>)``."""
        line = f" (line {self.lines[dotted]})" if dotted in self.lines else ""
        return f"settings file {self.path}: {dotted}{line}"

    def check_counted_parts(self, benchmark: str, parts: Collection[str]) -> None:
        """Refuse an ``expected_counts`` part that ``benchmark``'s data does not have (a misspelt part would count
        nothing, and check-data would compare the release's count instead)."""
        for part in self.expected_counts.get(benchmark, {}):
            if part not in parts:
                raise SettingsFileError(f"{self.at(f'{COUNTS_BLOCK}.{benchmark}.{part}')}: {benchmark} has no part "
                                        f"{part!r}; its parts: {', '.join(parts)}")

    def merged(self, other: SettingsFile) -> SettingsFile:
        """This file's content with ``other``'s blocks over it (a benchmark's block replaced as a whole)."""
        return SettingsFile(other.path or self.path, {**self.benchmarks, **other.benchmarks},
                            {**self.judge, **other.judge}, {**self.expected_counts, **other.expected_counts},
                            {**self.prepared, **other.prepared}, {**self.lines, **other.lines})

    def as_yaml(self, writer: str) -> str:
        import yaml

        content = {**({JUDGE_BLOCK: dict(self.judge)} if self.judge else {}),
                   **{name: dict(values) for name, values in self.benchmarks.items()},
                   **({COUNTS_BLOCK: {k: dict(v) for k, v in self.expected_counts.items()}}
                      if self.expected_counts else {}),
                   **({PREPARED_BLOCK: dict(self.prepared)} if self.prepared else {})}
        return HEADER.format(writer=writer) + yaml.safe_dump(content, sort_keys=False, default_flow_style=False)


def default_settings_path(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CONFIG_HOME/lmms-egoplan/settings.yaml`` (``~/.config`` without it)."""
    config_home = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config_home) / "lmms-egoplan" / "settings.yaml"


def settings_path(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The settings file a run reads: ``LMMS_EGOPLAN_SETTINGS`` (empty: none), else the default where it exists."""
    if SETTINGS_VARIABLE in environ:
        named = environ[SETTINGS_VARIABLE].strip()
        return Path(named).expanduser() if named else None
    default = default_settings_path(environ)
    return default if default.is_file() else None


def settings_source(settings_file: SettingsFile, environ: Mapping[str, str] = os.environ) -> str:
    """Which settings file ``settings_file`` came from, or why there is none: a command that reads the data says it
    first, since without one every benchmark reads its default source (the Hub, for most)."""
    if settings_file.path:
        return f"the settings file {settings_file.path}"
    why = (f"{SETTINGS_VARIABLE} is empty" if SETTINGS_VARIABLE in environ
           else f"none at {default_settings_path(environ)}, and {SETTINGS_VARIABLE} is not set")
    return (f"no settings file ({why}): each benchmark reads its default source and its variables; "
            f"`lmms-egoplan prepare` writes one")


def run_settings_file(benchmarks: Collection[str], environ: Mapping[str, str] = os.environ) -> SettingsFile:
    """The settings file of this run (an empty one where there is none); a file that ``LMMS_EGOPLAN_SETTINGS``
    names and that does not exist is an error."""
    path = settings_path(environ)
    if path is None:
        return SettingsFile()
    if not path.is_file():
        raise SettingsFileError(f"{SETTINGS_VARIABLE} names {path}, which is no file (run `lmms-egoplan prepare` to "
                                f"write it, or set {SETTINGS_VARIABLE} to an empty value for none)")
    return _read_cached(path, path.stat().st_mtime_ns, tuple(benchmarks))


@functools.lru_cache(maxsize=8)
def _read_cached(path: Path, modified: int, benchmarks: tuple[str, ...]) -> SettingsFile:
    return read_settings_file(path, benchmarks)


def read_settings_file(path: Path, benchmarks: Collection[str]) -> SettingsFile:
    """The file at ``path``; a top-level key that is neither a block nor one of ``benchmarks`` is an error naming it,
    as are an empty file and a key given twice in a block."""
    content, lines = _load(Path(path))
    if not isinstance(content, dict):
        raise SettingsFileError(f"settings file {path}: expected a mapping of blocks, got {type(content).__name__}")
    blocks = {JUDGE_BLOCK, COUNTS_BLOCK, PREPARED_BLOCK}
    for key, value in content.items():
        if key not in blocks and key not in benchmarks:
            raise SettingsFileError(f"settings file {path}: {key!r} (line {lines[str(key)]}) names no block; known: "
                                    f"{', '.join(sorted(blocks | set(benchmarks)))}")
        if not isinstance(value, dict):
            raise SettingsFileError(f"settings file {path}: {key} (line {lines[str(key)]}) must be a mapping, got "
                                    f"{value!r}")
    counts = content.get(COUNTS_BLOCK, {})
    for name, parts in counts.items():
        if name not in benchmarks or not isinstance(parts, dict) or not all(
                isinstance(count, int) and not isinstance(count, bool) and count >= 0 for count in parts.values()):
            raise SettingsFileError(f"settings file {path}: {COUNTS_BLOCK}.{name} (line "
                                    f"{lines[f'{COUNTS_BLOCK}.{name}']}) must map a benchmark's parts to record "
                                    f"counts, got {parts!r}")
    return SettingsFile(Path(path), {name: content[name] for name in content if name in benchmarks},
                        content.get(JUDGE_BLOCK, {}), counts, content.get(PREPARED_BLOCK, {}), lines)


def _load(path: Path) -> tuple[Any, dict[str, int]]:
    """The file's YAML content and the line of each key by its dotted path; an empty file and a key given twice in
    one mapping (YAML takes the last silently) are errors naming the file and the lines."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        content = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise SettingsFileError(f"settings file {path}: cannot be read: {error}") from None
    if node is None:
        raise SettingsFileError(f"settings file {path} is empty: give it the blocks docs/data.md shows (`lmms-egoplan "
                                f"prepare` writes them), or set {SETTINGS_VARIABLE} to an empty value for no file")
    lines: dict[str, int] = {}
    _key_lines(node, "", lines, path)
    return content, lines


def _key_lines(node: Any, prefix: str, lines: dict[str, int], path: Path) -> None:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        return
    for key, value in node.value:
        dotted, line = f"{prefix}{key.value}", key.start_mark.line + 1
        if dotted in lines:
            raise SettingsFileError(f"settings file {path}: {dotted} is given twice (lines {lines[dotted]} and "
                                    f"{line}); YAML would take the last silently: keep one")
        lines[dotted] = line
        _key_lines(value, f"{dotted}.", lines, path)


def write_settings_file(path: Path, content: SettingsFile, writer: str) -> Path:
    """Write ``content`` to ``path`` atomically (a crash leaves the old file or the new, never half of one)."""
    return write_atomically(Path(path), content.as_yaml(writer))

