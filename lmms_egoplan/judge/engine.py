"""The judge engine: many judgements at once, cached, retried, counted, audited.

``Judge.run`` takes judge requests and a rating parser, and

* answers what the persistent cache already holds without calling the judge (a re-run of the
  same evaluation makes zero calls; a run killed half-way resumes where it stopped: every
  answer is stored the moment it arrives, by the thread that receives it);
* sends the rest concurrently (``concurrency`` calls in flight, a progress bar), retrying
  rate limits (429), server errors (5xx) and timeouts with exponential backoff;
* parses every answer with the benchmark's parser; a call that still fails, or an answer
  without a valid rating, becomes a *failed* judgement: counted, excluded from the mean, and
  warned about with the failure rate. Only answers with a valid rating are cached: a failed
  judgement is asked again by the next run or ``rejudge`` (a cached answer that no longer parses,
  too);
* writes an audit trail (JSON lines: prompt, raw judge output, parsed rating, judge model and
  the model and configuration the server says answered, e.g. the snapshot behind an alias such as
  ``gpt-4``; with the run's ``JudgeIdentity`` when given).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Mapping, Optional, Sequence

from loguru import logger

from lmms_egoplan.core.retry import backoff_delay
from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.cache import JudgeCache
from lmms_egoplan.judge.factory import make_backend
from lmms_egoplan.judge.protocol import (
    Completion,
    Decoding,
    JudgeCallError,
    Judgement,
    JudgeRequest,
    JudgeResults,
    RatingParser,
    TransientJudgeError,
)
from lmms_egoplan.judge.retirements import Retirement, retirement, says_model_is_gone
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError


class Judge:
    """Runs batches of judge requests against one judge model. Thread-safe; reuse it."""

    def __init__(self, backend: JudgeBackend, *, decoding: Decoding = Decoding(), cache: JudgeCache | None = None,
                 concurrency: int = 16, retries: int = 6, backoff: float = 1.0, max_backoff: float = 60.0):
        self.backend = backend
        self.decoding = decoding
        self.cache = cache
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    @classmethod
    def from_settings(cls, settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> "Judge":
        return cls(make_backend(settings, environ),
                   decoding=Decoding(settings.judge_temperature, settings.judge_max_tokens),
                   cache=JudgeCache(settings.judge_cache_dir) if settings.judge_cache_dir else None,
                   concurrency=settings.judge_concurrency, retries=settings.judge_retries,
                   backoff=settings.judge_backoff)

    @property
    def model(self) -> str:
        return self.backend.identity

    def run(self, requests: Sequence[JudgeRequest], parse_rating: RatingParser, *,
            audit_path: str | os.PathLike | None = None, append_audit: bool = False, progress: bool = True,
            description: str = "Judging", identity: Mapping | None = None) -> JudgeResults:
        """Judge every request; returns the judgements in request order. Never raises for a
        failed call or an unparsable answer: those are failed judgements. The audit trail
        replaces ``audit_path``, or adds to it with ``append_audit``; each of its lines carries
        ``identity`` (``JudgeIdentity.record()``) under "judge" when given."""
        from tqdm import tqdm

        ids = Counter(r.id for r in requests)
        duplicates = [i for i, n in ids.items() if n > 1]
        if duplicates:
            raise ValueError(f"judge request ids must be unique; repeated: {duplicates[:5]}")
        # Identical prompts are judged once.
        by_key: dict[str, list[JudgeRequest]] = {}
        for request in requests:
            key = JudgeCache.key(self.model, request.messages, self.decoding)
            by_key.setdefault(key, []).append(request)

        audit = _AuditWriter(audit_path, append=append_audit, identity=identity)
        done: dict[str, Judgement] = {}

        def record(key: str, answer: Completion | None, error: str | None, cached: bool, attempts: int) -> None:
            raw, rating = (answer.text if answer else None), None
            if raw is not None:
                rating, error = _parsed(parse_rating, raw)
            for position, request in enumerate(by_key[key]):
                judgement = Judgement(request.id, self.model, request.messages, raw, rating,
                                      error if rating is None else None, cached, attempts if position == 0 else 0,
                                      answer.model if answer else None, answer.fingerprint if answer else None)
                done[request.id] = judgement
                audit.write(judgement)

        try:
            missing = []
            for key in by_key:
                cached = self.cache.get(key) if self.cache is not None else None
                if cached is None or _parsed(parse_rating, cached.text)[0] is None:
                    missing.append(key)
                else:
                    record(key, cached, None, True, 0)
            stopping = threading.Event()
            pool = ThreadPoolExecutor(max_workers=self.concurrency)
            try:
                with tqdm(total=len(missing), desc=description, disable=not progress or not missing) as bar:
                    futures = {pool.submit(self._call, key, by_key[key][0].messages, parse_rating, stopping): key
                               for key in missing}
                    for future in as_completed(futures):
                        answer, error, attempts = future.result()
                        record(futures[future], answer, error, False, attempts)
                        bar.update()
            except BaseException:
                # Stopped (SIGTERM, Ctrl-C) or failing: ask nothing more. The calls in flight end
                # (without retries), and their good answers are stored as they arrive.
                stopping.set()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            pool.shutdown()
        finally:
            audit.close()

        results = JudgeResults([done[r.id] for r in requests], self.model, audit.path)
        if results.failed:
            reasons = Counter(j.error for j in results.judgements if not j.ok)
            logger.warning(
                f"judge {self.model}: {results.failed} of {len(results.judgements)} judgements failed "
                f"({100 * results.failure_rate:.1f}%) and are excluded from the score; reasons: "
                + "; ".join(f"{reason} (x{count})" for reason, count in reasons.most_common(3))
                + (f"; audit trail: {audit.path}" if audit.path else ""))
        return results

    def _call(self, key: str, messages, parse_rating: RatingParser,
              stopping: threading.Event) -> tuple[Optional[Completion], Optional[str], int]:
        """(answer or None, error or None, attempts) for one prompt. An answer with a valid rating
        is stored in the cache the moment it arrives (a run killed a second later keeps it); no
        retry once ``stopping`` is set."""
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = self.backend.complete(messages, self.decoding)
            except TransientJudgeError as error:
                if attempt > self.retries or stopping.is_set():
                    return None, f"{error} (gave up after {attempt} attempts)", attempt
                stopping.wait(self._delay(attempt, error.retry_after))
                continue
            except JudgeCallError as error:
                return None, str(error), attempt
            except Exception as error:  # a judge problem must not cost the evaluation its generations
                return None, f"{type(error).__name__}: {error}", attempt
            if _parsed(parse_rating, completion.text)[0] is not None:
                self._store(key, messages, completion)
            return completion, None, attempt

    def _store(self, key: str, messages, answer: Completion) -> None:
        if self.cache is None:
            return
        try:
            self.cache.put(key, self.model, messages, self.decoding, answer)
        except sqlite3.Error as error:  # the answer is still good; only a re-run would ask again
            logger.warning(f"judge cache {self.cache.path}: could not store an answer: {error}")

    def preflight(self) -> Completion:
        """One short request; returns the answer (what the server says answered it). Raises
        JudgeSetupError when the judge cannot answer (server unreachable, model unknown, key refused),
        RetiredJudgeError when the server does not know a model that the retirement table does."""
        try:
            return self.backend.complete(PREFLIGHT_MESSAGES, Decoding(temperature=0.0, max_tokens=8))
        except (TransientJudgeError, JudgeCallError) as error:
            message = f"the judge {self.model} did not answer a test request: {error}"
            gone = isinstance(error, JudgeCallError) and says_model_is_gone(error.status, error.code, str(error))
            retired = retirement(self.backend.model, self.backend.kind) if gone else None
            raise (RetiredJudgeError(message, retired) if retired else JudgeSetupError(message)) from None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        return backoff_delay(attempt, self.backoff, self.max_backoff, retry_after)


# The preflight request (a judge server in a test can recognise it).
PREFLIGHT_MESSAGES = ({"role": "user", "content": "This is a connection test. Reply with the word OK."},)


class RetiredJudgeError(JudgeSetupError):
    """The judge server does not know a model that its provider has shut down (or will): the message
    says why the call failed, ``retirement`` the table's row (``Retirement.explain`` says what to do)."""

    def __init__(self, message: str, retirement: Retirement):
        super().__init__(message)
        self.retirement = retirement


def preflight(settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> Completion | None:
    """What a judged task checks when it loads, before anything is generated: the judge cache
    opens, and the judge answers one short request (an hf judge: its configuration loads; its
    weights load when judging starts). Returns the server's answer (None for an hf judge). Raises
    JudgeSetupError (RetiredJudgeError for a model its provider shut down)."""
    if settings.judge_cache_dir:
        JudgeCache(settings.judge_cache_dir).close()
    if settings.judge_backend == "hf":
        from transformers import AutoConfig

        try:
            AutoConfig.from_pretrained(settings.judge_model, revision=settings.judge_revision)
        except (OSError, ValueError) as error:
            raise JudgeSetupError(f"the hf judge {settings.judge_model} cannot be loaded: {error}") from None
        return None
    return Judge(make_backend(settings, environ)).preflight()


def _parsed(parse_rating: RatingParser, raw: str) -> tuple[float | None, str | None]:
    """(rating, None), or (None, why there is none)."""
    try:
        return float(parse_rating(raw)), None
    except ValueError as problem:
        return None, str(problem)
    except Exception as problem:  # a parser bug shows in the failure reasons, not as a lost run
        return None, f"the rating parser failed: {type(problem).__name__}: {problem}"


class _AuditWriter:
    """Appends one JSON line per judgement as it is made, so a crash keeps what was judged (a
    reader recovers every line up to the last complete one). The file is created with its first
    line: nothing judged, no file."""

    def __init__(self, path: str | os.PathLike | None, *, append: bool = False, identity: Mapping | None = None):
        self.path = Path(path) if path else None
        self._mode = "a" if append else "w"
        self._identity = {"judge": dict(identity)} if identity else {}
        self._file = None

    def write(self, judgement: Judgement) -> None:
        if self.path is None:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open(self._mode, encoding="utf-8")
        self._file.write(json.dumps({**judgement.audit_record(), **self._identity}, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()
