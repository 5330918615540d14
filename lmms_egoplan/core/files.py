"""Text and JSON-lines record files (one JSON object per line), read one way across the suite:
as UTF-8, with errors that name the file and line."""

from __future__ import annotations

import errno
import json
import math
import numbers
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from lmms_egoplan.core.errors import InputError, StorageError

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD. An API client can return them (from broken
    bytes); no UTF-8 file, database or HTTP body can hold them, so model output is cleaned once,
    where the suite first takes it."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite number replaced by None, in dicts, lists and tuples at
    any depth: how a metric without a value is written, as ``null`` (strict JSON has no NaN)."""
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):  # numpy's floats too
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(item) for item in value]
    return value


def strict_json(value: Any, **options) -> str:
    """``json.dumps`` that strict parsers read: a metric without a value (NaN, infinity) is ``null``."""
    return json.dumps(finite_or_null(value), allow_nan=False, **options)


def missing_file_message(what: str, path: Path, folder_setting: str, file_setting: str | None) -> str:
    """Why ``path`` (``what``: the file a setting names) is not there, and which setting to change:
    the folder ``folder_setting`` names does not exist, is empty, or holds other files (named);
    ``file_setting``, if any, names the file itself."""
    folder = path.parent
    or_file = f", or set {file_setting} to the file" if file_setting else ""
    if path.is_dir():  # the file's name leads to a folder: the file setting is the one to fix
        return f"{what} is a folder, not a file: {path}; " + (f"set {file_setting} to the file itself" if file_setting
                                                               else f"check {folder_setting}")
    if not folder.is_dir():
        return (f"{what} not found: the folder {folder}, named by {folder_setting}, does not exist; point it at the "
                f"folder that holds {path.name}{or_file}")
    others = sorted(entry.name for entry in folder.iterdir())
    holds = ("is empty" if not others else
             f"holds {', '.join(others[:5])}" + (f" and {len(others) - 5} more" if len(others) > 5 else ""))
    return (f"{what} not found: the folder {folder}, named by {folder_setting}, {holds}; point it at the folder that "
            f"holds {path.name}{or_file}")


def read_text(path: str | Path, error_class: type[InputError] = InputError) -> str:
    """The UTF-8 text of ``path``. A missing file raises FileNotFoundError; bytes that are not UTF-8
    raise ``error_class`` naming the file, the line and the column."""
    path = Path(path)
    if path.is_dir():
        raise error_class(f"{path} is a folder, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"file not found: {path}")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise error_class(f"{path}:{line}: not UTF-8 text (byte 0x{data[error.start]:02x} at column {column}); "
                          f"save the file as UTF-8") from None


def read_json_list(path: str | Path, error_class: type[InputError], *, what: str, folder_setting: str,
                   file_setting: str | None) -> list:
    """The records of a file holding one non-empty JSON list. A missing file (``missing_file_message``:
    which of the settings ``folder_setting`` / ``file_setting`` to change), bytes that are not UTF-8,
    text that is not JSON or not a non-empty list raise ``error_class`` naming the file as ``what``
    ("annotation file")."""
    path = Path(path)
    if not path.is_file():
        raise error_class(missing_file_message(f"{what} {path.name}", path, folder_setting, file_setting))
    try:
        records = json.loads(read_text(path, error_class))
    except error_class:
        raise
    except (OSError, ValueError) as error:
        raise error_class(f"cannot read {what} {path}: {error}") from error
    if not isinstance(records, list) or not records:
        raise error_class(f"{what} {path} must hold a non-empty JSON list of records")
    return records


def inside_root(path: str | Path, root: str | Path, *, where: str, setting: str, allow: bool = False,
                error_class: type[InputError] = InputError) -> Path:
    """``path``, built under the data folder ``root`` from an id or path of a record, if it stays
    inside ``root``: a record whose value is an absolute path (it replaces ``root``), climbs out
    with ``..``, or leads out through a symbolic link raises ``error_class`` naming ``where`` (the
    record and the field) and ``setting``, the switch that allows it (``allow``: it is on).
    Anything a run reads comes from where its settings point, not from wherever a record says."""
    path, root = Path(path), Path(root).expanduser()
    if allow:
        return path
    text, root_text = str(path), str(root)  # as pathlib writes them: "a//b", "a/./b" and "a/b/" are "a/b"
    if not _is_within(text, root_text):
        why = "is an absolute path"
    elif not _is_within(os.path.normpath(text), os.path.normpath(root_text)):
        why = "climbs out of it with '..'"
    elif not _is_within(os.path.realpath(text), os.path.realpath(root_text)):
        why = f"leads out of it through a symbolic link (to {os.path.realpath(path)})"
    else:
        return path
    raise error_class(f"{where} {why}: {path} is outside the data folder {root}; media and annotations are read "
                      f"only inside their data folders (set {setting} to true to allow paths outside it)")


def _is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or under it, both written alike (by pathlib, ``normpath`` or ``realpath``), by
    their text: ``Path.parents`` builds an object a level, felt where a task checks tens of thousands of frames."""
    return path == root or path.startswith(root if root.endswith(os.sep) else root + os.sep)


def _read_umask() -> int:
    """This process's umask, read without setting it where the system tells (Linux), else by setting
    and restoring it (then once: setting it is not thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    except (OSError, StopIteration, ValueError):
        return _UMASK_AT_IMPORT


def _umask_at_import() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


_UMASK_AT_IMPORT = _umask_at_import()


def disk_full(error: BaseException, where: str | Path | None = None) -> bool:
    """Whether ``error`` comes from a full disk (or quota): ENOSPC or EDQUOT, SQLite's SQLITE_FULL, or
    any failure to write where (``where``, a folder) no space is left: SQLite reports a WAL index it
    cannot grow on a full disk as a "disk I/O error"."""
    import sqlite3

    if isinstance(error, sqlite3.Error) and (error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_FULL
                                             if hasattr(error, "sqlite_errorcode") else "disk is full" in str(error)):
        return True
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    try:
        return where is not None and shutil.disk_usage(where).free < _NO_SPACE
    except OSError:
        return False


_NO_SPACE = 64 * 1024  # less than this free: a database or file that cannot grow meets a full disk


def storage_failure(error: BaseException, where: str | Path | None = None) -> str:
    """Why something could not be written, for a message: "the disk is full (...)" where it is (``disk_full``), the
    file that stands where a folder of ``where`` goes (mkdir's bare "File exists" names none)."""
    detail = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    if isinstance(error, (FileExistsError, NotADirectoryError)) and where is not None:
        path = Path(where).absolute()
        if blocking := next((each for each in (*reversed(path.parents), path) if each.exists() and not each.is_dir()),
                            None):
            return f"{blocking} is a file, where a folder goes"
    return f"the disk is full ({detail})" if disk_full(error, where) else f"{type(error).__name__}: {detail}"


def make_folder(folder: str | Path, what: str) -> Path:
    """``folder`` and its parents made where missing, before anything is computed for it: StorageError naming
    ``what`` (the option or setting that chose it) and why it cannot be made (a file in its place, no permission)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StorageError(f"{what} {folder}: cannot make this folder ({storage_failure(error, folder)})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        why = "its file system is read-only" if os.statvfs(folder).f_flag & os.ST_RDONLY else "no write permission"
        raise StorageError(f"{what} {folder}: cannot write into this folder ({why})")
    return folder


def refuse_unreadable_folder(path: Path) -> None:
    """Raise InputError where ``path`` is a folder this process cannot list: a search under it would find nothing,
    silently, and the user would read "no file there"."""
    if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):
        raise InputError(f"{path}: cannot read this folder (no permission)")


def output_file(path: str | Path, what: str) -> Path:
    """A file a command will write, checked before anything is computed for it: not a folder (InputError naming
    ``what``, the option that chose it), its folder made and writable (``make_folder``)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path} is a folder: name the file to write")
    make_folder(path.parent, f"the folder of {what}")
    return path


def write_atomically(path: str | Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` so that a reader sees the old file or the whole
    new one, never a part: a temporary file in the same folder, flushed to disk, then renamed over
    ``path``, with the permissions a file written directly would have (mkstemp's are 600). A file
    that cannot be written (a full disk) raises StorageError naming it; ``path`` is left as it was."""
    path = Path(path)
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(descriptor, "wb") as file:
            file.write(content.encode("utf-8") if isinstance(content, str) else content)
            file.flush()
            os.fsync(file.fileno())
            os.fchmod(file.fileno(), 0o666 & ~_read_umask())
        os.replace(temporary, path)
    except OSError as error:
        if temporary:
            Path(temporary).unlink(missing_ok=True)
        kept = "the file there before is kept" if path.exists() else "nothing was written there"
        raise StorageError(f"cannot write {path}: {storage_failure(error, path.parent)}; {kept}") from error
    except BaseException:
        if temporary:
            Path(temporary).unlink(missing_ok=True)
        raise
    return path


class LineAppender:
    """Appends lines to a file, each whole or not at all: a line the disk cannot take whole (it is
    full) is cut back off, and StorageError names the file. The file is created with its first line
    (``append=False``: replacing what was there)."""

    def __init__(self, path: str | Path, *, append: bool = True):
        self.path = Path(path)
        self._flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._descriptor: int | None = None

    def write(self, line: str) -> None:
        data = memoryview(line.encode("utf-8"))
        start = None
        try:
            if self._descriptor is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._descriptor = os.open(self.path, self._flags, 0o666)
            start = os.lseek(self._descriptor, 0, os.SEEK_END)
            while data:
                data = data[os.write(self._descriptor, data):]
        except OSError as error:
            if start is not None:
                os.ftruncate(self._descriptor, start)  # a cut line would join the next line written
            raise StorageError(f"cannot write {self.path}: {storage_failure(error, self.path.parent)}; "
                               f"its lines before this one are whole") from error

    def close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def parquet_rows(path: str | Path, error_class: type[InputError], advice: str) -> Iterable[dict]:
    """The rows of a parquet file (a ``datasets.Dataset`` in memory, read row by row); one that is not a parquet file
    (empty, cut short, another format) raises ``error_class`` naming it, with ``advice`` (what to fetch again, the
    setting that points at it)."""
    from datasets import Dataset

    try:
        return Dataset.from_parquet(str(path), keep_in_memory=True)
    except Exception as error:  # pyarrow's ArrowInvalid and OSError name no file
        raise error_class(f"{path}: not a readable parquet file ({type(error).__name__}: {error}); {advice}") from None


def read_jsonl(path: str | Path, error_class: type[InputError] = InputError) -> Iterator[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line of ``path``.

    A missing file raises FileNotFoundError; bytes that are not UTF-8, or a line that is not a
    JSON object, raise ``error_class`` naming the file and the line.
    """
    for number, line in enumerate(read_text(path, error_class).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise error_class(f"{path}:{number}: not JSON ({error})") from None
        if not isinstance(record, dict):
            raise error_class(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def folder_holding(root: str | Path, name: str, depth: int = 3) -> Path | None:
    """The shallowest folder at most ``depth`` levels under ``root`` (``root`` included) that holds ``name`` (a file
    or folder), in name order; None where none does: where an archive or a repository unpacked its release."""
    level = [Path(root)]
    for _ in range(depth + 1):
        for folder in level:
            if (folder / name).exists():
                return folder
        level = sorted(child for folder in level if folder.is_dir() for child in folder.iterdir() if child.is_dir())
    return None
