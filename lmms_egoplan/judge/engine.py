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
  ``gpt-4``; with the run's ``JudgeIdentity`` when given);
* stops asking a judge that has stopped answering: once one call's retries are spent without the judge
  answering at all (the connection failed or timed out: ``JudgeUnreachableError``), every request not yet
  answered, of this batch and of every later one, fails at once, saying so (``stopped_answering``): a judge
  server that died mid-run costs one call's retries, not every task's;
* stops asking when an answer cannot be stored or the audit trail cannot take a whole line (a
  full disk): StorageError, once the calls in flight end, says how many, where, and what is kept.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from loguru import logger

from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.core.files import LineAppender, storage_failure
from lmms_egoplan.core.hub_download import missing_folder
from lmms_egoplan.core.retry import backoff_delay
from lmms_egoplan.core.secrets import mask_secrets
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
    JudgeUnreachableError,
    RatingParser,
    TransientJudgeError,
)
from lmms_egoplan.judge.retirements import Retirement, retirement, says_model_is_gone
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError


class Judge:
    """Runs batches of judge requests against one judge model. Thread-safe; reuse it."""

    def __init__(self, backend: JudgeBackend, *, decoding: Decoding = Decoding(), cache: JudgeCache | None = None,
                 concurrency: int = 16, retries: int = 6, backoff: float = 1.0, max_backoff: float = 60.0,
                 revision: str | None = None):
        self.backend = backend
        self.revision = revision  # the judge's weights (judge_revision): part of its answers' cache key
        self.decoding = decoding
        self.cache = cache
        self.concurrency = concurrency
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        # Why the judge is taken to have stopped answering (a call's retries spent without any answer), or None.
        self.stopped_answering: str | None = None
        self._asking: set[threading.Event] = set()  # the ``stopping`` event of each batch being judged now

    @classmethod
    def from_settings(cls, settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> "Judge":
        return cls(make_backend(settings, environ),
                   decoding=Decoding(settings.judge_temperature, settings.judge_max_tokens),
                   cache=JudgeCache(settings.judge_cache_dir) if settings.judge_cache_dir else None,
                   concurrency=settings.judge_concurrency, retries=settings.judge_retries,
                   backoff=settings.judge_backoff, revision=settings.judge_revision)

    @property
    def model(self) -> str:
        return self.backend.identity

    def run(self, requests: Sequence[JudgeRequest], parse_rating: RatingParser, *,
            audit_path: str | os.PathLike | None = None, append_audit: bool = False, progress: bool = True,
            description: str = "Judging", identity: Mapping | None = None) -> JudgeResults:
        """Judge every request; returns the judgements in request order. Never raises for a
        failed call or an unparsable answer: those are failed judgements. The audit trail
        replaces ``audit_path``, or adds to it with ``append_audit``; each of its lines carries
        ``identity`` (``JudgeIdentity.record()``) under "judge" when given. An answer the cache cannot
        store, or a line the audit trail cannot take (a full disk), stops the asking: the calls in
        flight end, then StorageError says what was not stored, where, and what is kept."""
        from tqdm import tqdm

        by_key = self._by_prompt(requests)
        audit = _AuditWriter(audit_path, append=append_audit, identity=identity)
        done: dict[str, Judgement] = {}
        unstored: list[str] = []  # why the cache could not store each answer that it could not
        received = stored = 0  # answers that came back this run, and those the cache stored

        def record(key: str, answer: Completion | None, error: str | None, cached: bool, attempts: int) -> None:
            raw, rating = (answer.text if answer else None), None
            error = mask_secrets(error) if error else error  # what any backend's error quotes: to the audit and the log
            if raw is not None:
                rating, error = _parsed(parse_rating, raw)
            for position, request in enumerate(by_key[key]):
                judgement = Judgement(request.id, self.model, request.messages, raw, rating,
                                      error if rating is None else None, cached, attempts if position == 0 else 0,
                                      answer.model if answer else None, answer.fingerprint if answer else None)
                done[request.id] = judgement
                audit.write(judgement)

        stopping = threading.Event()
        self._asking.add(stopping)
        try:
            missing = self._record_cached(by_key, parse_rating, record)
            pool = ThreadPoolExecutor(max_workers=self.concurrency)

            def stop_asking() -> None:
                stopping.set()
                for pending in futures:
                    pending.cancel()  # those not yet sent; the calls in flight end, their answers are stored

            try:
                with tqdm(total=len(missing), desc=description, disable=not progress or not missing) as bar:
                    futures = {pool.submit(self._call, key, by_key[key][0].messages, parse_rating, stopping): key
                               for key in missing}
                    for future in as_completed(futures):
                        if future.cancelled() or future.result() is None:  # never asked: the asking had stopped
                            continue
                        answer, error, attempts, not_stored = future.result()
                        received += answer is not None
                        stored += bool(answer and not not_stored and self.cache is not None
                                       and _parsed(parse_rating, answer.text)[0] is not None)
                        if not_stored:  # a full disk: every answer asked for now would be paid for again
                            unstored.append(not_stored)
                            stop_asking()
                        try:
                            record(futures[future], answer, error, False, attempts)
                        except StorageError:  # the audit trail's disk is full (_AuditWriter keeps why)
                            stop_asking()
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
        if unstored or audit.failure:
            unasked = sum(future.cancelled() or future.result() is None for future in futures)
            raise self._not_kept(unstored, audit, received=received, stored=stored, unasked=unasked)

        results = JudgeResults([done[r.id] for r in requests], self.model, audit.path)
        if results.failed:
            self._warn_of_failures(results)
        return results

    def _by_prompt(self, requests: Sequence[JudgeRequest]) -> dict[str, list[JudgeRequest]]:
        """The requests grouped by their cache key: identical prompts are judged once."""
        ids = Counter(r.id for r in requests)
        duplicates = [i for i, n in ids.items() if n > 1]
        if duplicates:
            raise ValueError(f"judge request ids must be unique; repeated: {duplicates[:5]}")
        by_key: dict[str, list[JudgeRequest]] = {}
        for request in requests:
            key = JudgeCache.key(self.model, request.messages, self.decoding, self.revision)
            by_key.setdefault(key, []).append(request)
        return by_key

    def _record_cached(self, by_key: Mapping[str, list[JudgeRequest]], parse_rating: RatingParser,
                       record: Callable[..., None]) -> list[str]:
        """Records each prompt whose cached answer carries a valid rating; returns the keys left to ask."""
        missing = []
        for key, requests in by_key.items():
            cached = self._cached(key, requests[0].messages)
            if cached is None or _parsed(parse_rating, cached.text)[0] is None:
                missing.append(key)
            else:
                record(key, cached, None, True, 0)
        return missing

    def _cached(self, key: str, messages) -> Completion | None:
        """The cached answer to ``messages``: under ``key``, else (a judge with a revision) under the key a cache
        written before revisions were keyed gave it, whose revision is not known."""
        if self.cache is None:
            return None
        cached = self.cache.get(key)
        if cached is None and self.revision:
            cached = self.cache.get(JudgeCache.key(self.model, messages, self.decoding))
        return cached

    def _warn_of_failures(self, results: JudgeResults) -> None:
        reasons = Counter(j.error for j in results.judgements if not j.ok)
        logger.warning(
            f"judge {self.model}: {results.failed} of {len(results.judgements)} judgements failed "
            f"({100 * results.failure_rate:.1f}%) and are excluded from the score; reasons: "
            + "; ".join(f"{reason} (x{count})" for reason, count in reasons.most_common(3))
            + (f"; audit trail: {results.audit_path}" if results.audit_path else ""))

    def _call(self, key: str, messages, parse_rating: RatingParser,
              stopping: threading.Event) -> tuple[Optional[Completion], Optional[str], int, Optional[str]] | None:
        """(answer or None, error or None, attempts, why the cache could not store the answer or None)
        for one prompt, or None if ``stopping`` was set before it was asked. An answer with a valid
        rating is stored in the cache the moment it arrives (a run killed a second later keeps it);
        one that cannot be stored sets ``stopping`` at once; no retry once ``stopping`` is set. A judge that has
        stopped answering (``stopped_answering``) is not asked: a failure saying so."""
        attempt = 0
        while True:
            if self.stopped_answering:  # not asked: a judge that has stopped answering is not waited for again
                return None, f"not asked: {self.stopped_answering}", attempt, None
            if stopping.is_set() and not attempt:
                return None
            attempt += 1
            try:
                completion = self.backend.complete(messages, self.decoding)
            except TransientJudgeError as error:
                if attempt > self.retries or stopping.is_set():
                    if isinstance(error, JudgeUnreachableError) and attempt > self.retries:
                        self._stop_asking_a_silent_judge(error, attempt, stopping)
                    return None, f"{error} (gave up after {attempt} attempts)", attempt, None
                stopping.wait(self._delay(attempt, error.retry_after))
                continue
            except JudgeCallError as error:
                return None, str(error), attempt, None
            except Exception as error:  # a judge problem must not cost the evaluation its generations
                return None, f"{type(error).__name__}: {error}", attempt, None
            rated = _parsed(parse_rating, completion.text)[0] is not None
            not_stored = self._store(key, messages, completion) if rated else None
            if not_stored:
                stopping.set()  # a full disk: whatever is asked now would be paid for again
            return completion, None, attempt, not_stored

    def _stop_asking_a_silent_judge(self, error: JudgeUnreachableError, attempts: int,
                                    stopping: threading.Event) -> None:
        """Remember that the judge stopped answering, and wake the calls waiting to retry, so that they give up."""
        if self.stopped_answering is None:
            self.stopped_answering = (f"the judge {self.model} stopped answering ({error}, {attempts} attempts in a "
                                      f"row); nothing more is asked of it in this run")
            logger.error(f"{self.stopped_answering}: every judgement not made yet counts as failed")
        stopping.set()
        for asking in list(self._asking):  # the batches of other tasks judged at the same time
            asking.set()

    def _store(self, key: str, messages, answer: Completion) -> Optional[str]:
        """Store the answer; returns why it could not be (a full disk), or None."""
        if self.cache is None:
            return None
        try:
            self.cache.put(key, self.model, messages, self.decoding, answer, self.revision)
        except sqlite3.Error as error:
            return storage_failure(error, self.cache.path.parent)
        return None

    def _not_kept(self, unstored: list[str], audit: "_AuditWriter", *, received: int, stored: int,
                  unasked: int) -> StorageError:
        """What a run whose answers could not all be stored (the cache's disk, or the audit trail's, is
        full) says as it stops: how many were not stored, where, what is kept, what to do."""
        problems = [f"the judge cache {self.cache.path} could not store {len(unstored)} of the {received} answers "
                    f"received ({unstored[0]})"] if unstored else []
        problems += [str(audit.failure)] if audit.failure else []
        kept = (f"the answers it stored ({stored} of this run's) are kept in the judge cache "
                f"{self.cache.path} and read back by the next run" if self.cache is not None
                else "this judge has no cache (judge_cache_dir): nothing it answered is kept")
        return StorageError(f"{'; '.join(problems)}. Judging stopped before asking for the {unasked} judgements "
                            f"left, so that none is paid for twice; {kept}. Free space on that disk (or point "
                            f"judge_cache_dir or --output_path at another) and run the same command again")

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

        if problem := missing_folder(settings.judge_model):
            raise JudgeSetupError(f"the hf judge cannot be loaded: {problem}")
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
    """Appends one JSON line per judgement as it is made, each whole (``core.files.LineAppender``), so
    that a crash or a full disk keeps every line written whole. The file is created with its first
    line: nothing judged, no file. After a line that could not be written (``failure``), it writes
    no more: the trail has no gap."""

    def __init__(self, path: str | os.PathLike | None, *, append: bool = False, identity: Mapping | None = None):
        self.path = Path(path) if path else None
        self._lines = LineAppender(self.path, append=append) if self.path else None
        self._identity = {"judge": dict(identity)} if identity else {}
        self.failure: StorageError | None = None

    def write(self, judgement: Judgement) -> None:
        if self._lines is None or self.failure:
            return
        try:
            self._lines.write(json.dumps({**judgement.audit_record(), **self._identity}, ensure_ascii=False) + "\n")
        except StorageError as error:
            self.failure = error
            raise

    def close(self) -> None:
        if self._lines:
            self._lines.close()
