"""The persistent cache of judge answers (SQLite), shared by runs, processes and threads."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

from lmms_egoplan.core.files import disk_full, storage_failure
from lmms_egoplan.judge.protocol import Completion, Decoding
from lmms_egoplan.judge.settings import JudgeSetupError


class JudgeCacheError(JudgeSetupError):
    """The judge cache cannot be used; the message says whether its answers are intact."""


class JudgeCache:
    """Raw judge outputs (and the model and configuration the server said answered) on disk, keyed by
    (judge model, its revision where known, full prompt, decoding settings).

    SQLite in WAL mode: several processes (two evaluations sharing the cache) and the engine's
    threads can write at once; each answer is committed as it arrives. Only requests and
    outputs are stored, never credentials.
    """

    FILE_NAME = "judgements.sqlite"

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(os.path.expanduser(str(directory))) / self.FILE_NAME
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file in its place, no permission: before any judgement is asked for
            raise JudgeCacheError(f"the judge cache's folder {self.path.parent} cannot be made "
                                  f"({storage_failure(error, self.path.parent)}); point judge_cache_dir at another "
                                  f"folder") from None
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        except sqlite3.DatabaseError as error:  # a folder it cannot write into
            raise self._unusable(error) from None
        try:
            self._open()
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise self._unusable(error) from None

    def _unusable(self, error: sqlite3.DatabaseError) -> JudgeCacheError:
        """Why the cache cannot be used, and what to do: only a file that is no SQLite database is to be
        moved away; a full disk, a lock or a folder that cannot be written leave its answers intact."""
        if disk_full(error, self.path.parent):
            return JudgeCacheError(f"the judge cache {self.path} cannot store answers: "
                                   f"{storage_failure(error, self.path.parent)}. The answers it holds are intact "
                                   f"and kept; free space on its disk, or point judge_cache_dir at a folder on another "
                                   f"disk")
        if getattr(error, "sqlite_errorcode", None) in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return JudgeCacheError(f"the judge cache {self.path} is not a readable SQLite database ({error}); move it "
                                   f"away (its answers are lost to this run) or point judge_cache_dir elsewhere")
        return JudgeCacheError(f"the judge cache {self.path} cannot be used ({error}); the answers it holds are kept: "
                               f"make its folder writable, or point judge_cache_dir elsewhere")

    def _open(self) -> None:
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, judge_model TEXT NOT NULL, "
                         "request TEXT NOT NULL, output TEXT NOT NULL, created REAL NOT NULL, served_model TEXT, "
                         "system_fingerprint TEXT)")
        # A cache written before the served model (or the server's fingerprint) was recorded lacks its
        # column: add it, keeping the answers (paid for) it holds.
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(judgements)")}
        for column in ("served_model", "system_fingerprint"):
            if column not in columns:
                try:
                    self._db.execute(f"ALTER TABLE judgements ADD COLUMN {column} TEXT")
                except sqlite3.OperationalError:  # another process added it at the same moment
                    pass

    @staticmethod
    def key(judge_model: str, messages: Sequence[Mapping[str, str]], decoding: Decoding,
            revision: str | None = None) -> str:
        """The key of a judge answer; ``revision``: the judge's weights (``judge_revision``), part of the key where
        known, so that a judge of other weights never reads another's answers."""
        return hashlib.sha256(_request_json(judge_model, messages, decoding, revision).encode()).hexdigest()

    def get(self, key: str) -> Optional[Completion]:
        with self._lock:
            try:
                row = self._db.execute("SELECT output, served_model, system_fingerprint FROM judgements WHERE key = ?",
                                       (key,)).fetchone()
            except sqlite3.DatabaseError as error:
                raise self._unusable(error) from None
        return Completion(*row) if row else None

    def put(self, key: str, judge_model: str, messages: Sequence[Mapping[str, str]], decoding: Decoding,
            answer: Completion, revision: str | None = None) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO judgements (key, judge_model, request, output, created, served_model, "
                "system_fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, judge_model, _request_json(judge_model, messages, decoding, revision), answer.text, time.time(),
                 answer.model, answer.fingerprint))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _request_json(judge_model: str, messages, decoding: Decoding, revision: str | None = None) -> str:
    # Without a revision, the request as caches recorded it before revisions were keyed: their answers stay reachable.
    return json.dumps({"judge_model": judge_model, "messages": [dict(m) for m in messages],
                       "decoding": dataclasses.asdict(decoding), **({"revision": revision} if revision else {})},
                      sort_keys=True, ensure_ascii=False)
