"""The LLM-judge engine: many judgements at once, cached, retried, counted, audited.

A benchmark asks a judge model to rate model outputs. It builds one ``JudgeRequest`` per
output (an id and chat messages) and supplies a rating parser; ``Judge.run`` then

* answers what the persistent cache already holds without calling the judge (a re-run of the
  same evaluation makes zero calls; a run killed half-way resumes where it stopped: every
  answer is stored the moment it arrives);
* sends the rest concurrently (``concurrency`` calls in flight, a progress bar), retrying
  rate limits (429), server errors (5xx) and timeouts with exponential backoff;
* parses every answer with the benchmark's parser; a call that still fails, or an answer
  without a valid rating, becomes a *failed* judgement: counted, excluded from the mean, and
  warned about with the failure rate;
* writes an audit trail (JSON lines: prompt, raw judge output, parsed rating, judge model and
  the model the server says answered, e.g. the snapshot behind an alias such as ``gpt-4``).

Backends: any OpenAI-compatible chat-completions endpoint through the official ``openai``
client (OpenAI, Azure OpenAI, a local vLLM or SGLang server) and an in-process transformers
causal LM for fully offline judging. API keys are read from the environment variable *named*
in the settings; they never reach the cache, the audit trail or a log line.

A sample may be judged on several parts (e.g. three answer fields: ``judge_parts_item``); a
part that needs no judge (a field the model left out) carries a ``FixedRating`` instead.

Inside lmms-eval, tasks use this engine through ``lmms_egoplan.judged_task.JudgedTask``;
``lmms-egoplan rejudge`` uses it to re-score logged model outputs with another judge.
This module deliberately does not import lmms-eval (slow to import) at module level.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
import os
import random
import sqlite3
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from loguru import logger

from lmms_egoplan.errors import InputError
from lmms_egoplan.metrics import mean_or_nan, resolve_device

JUDGE_BACKENDS = ("openai", "azure", "hf")

# A rating parser turns the judge's raw text into a rating, or raises ValueError (its message
# is recorded as the failure reason) when the text holds no valid rating.
RatingParser = Callable[[str], float]


class JudgeSetupError(InputError):
    """The judge settings cannot work (unknown backend, missing key variable, ...)."""


# =============================================================================================
# Settings
# =============================================================================================


@dataclass(frozen=True)
class JudgeSettings:
    """Judge settings, shared by every judged benchmark.

    A benchmark's Settings dataclass inherits these fields, so inside lmms-eval they come from
    the task YAML's ``metadata`` and environment variables ``<BENCH>_JUDGE_MODEL`` etc.
    (see ``lmms_egoplan.settings.resolve_settings``). A benchmark may redeclare a field to
    change its default (EgoThink's judge is the paper's GPT-4).
    """

    judge_backend: str = "openai"  # "openai" (any OpenAI-compatible server), "azure" or "hf"
    judge_model: str = "gpt-4o-2024-11-20"  # API model / Azure deployment / HF model path or id
    judge_base_url: Optional[str] = None  # e.g. http://localhost:8000/v1; Azure: the endpoint
    judge_api_key_env: str = "OPENAI_API_KEY"  # NAME of the variable holding the key ("" = no key)
    judge_api_version: str = "2024-10-21"  # Azure OpenAI only
    judge_temperature: float = 0.0
    judge_max_tokens: int = 2048
    judge_concurrency: int = 16  # calls in flight (hf: generation batch size)
    judge_timeout: float = 120.0  # seconds per call
    judge_retries: int = 6  # retries after the first attempt (429 / 5xx / timeouts only)
    judge_backoff: float = 1.0  # seconds before the first retry; doubles with each retry
    judge_cache_dir: Optional[Path] = Path("~/.cache/lmms_egoplan/judge")  # none = no cache

    @classmethod
    def of(cls, settings: Any) -> "JudgeSettings":
        """The judge part of a benchmark's settings (an instance of a subclass)."""
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})

    def check(self, environ: Mapping[str, str] = os.environ, *, name: Callable[[str], str] = str) -> None:
        """Fail before anything is generated if these settings cannot judge. ``name`` says how the
        user sets a field (inside lmms-eval: its environment variable; default: the field name)."""
        if self.judge_backend not in JUDGE_BACKENDS:
            raise JudgeSetupError(f"{name('judge_backend')} must be one of {', '.join(JUDGE_BACKENDS)}, "
                                  f"got {self.judge_backend!r}")
        if self.judge_backend in ("openai", "azure") and self.judge_api_key_env and self.judge_api_key_env not in environ:
            raise JudgeSetupError(
                f"the judge's API key variable {self.judge_api_key_env} is not set: export it, or name another "
                f"variable with {name('judge_api_key_env')} (set it to an empty value for a server without "
                f"authentication)")
        if self.judge_backend == "azure" and not self.judge_base_url:
            raise JudgeSetupError(f"{name('judge_backend')} azure needs {name('judge_base_url')}, the Azure OpenAI "
                                  f"endpoint")
        for setting, least in (("judge_concurrency", 1), ("judge_max_tokens", 1), ("judge_retries", 0),
                               ("judge_backoff", 0)):
            if getattr(self, setting) < least:
                raise JudgeSetupError(f"{name(setting)} must be at least {least}, got {getattr(self, setting)}")
        if self.judge_timeout <= 0:
            raise JudgeSetupError(f"{name('judge_timeout')} must be > 0 (seconds), got {self.judge_timeout}")


# =============================================================================================
# Requests and results
# =============================================================================================


@dataclass(frozen=True)
class JudgeRequest:
    """One thing to judge: an id (unique within a run) and the chat messages sent to the judge."""

    id: str
    messages: tuple[Mapping[str, str], ...]

    @classmethod
    def from_prompt(cls, id: str, prompt: str, system: str | None = None) -> "JudgeRequest":
        system_turn = ({"role": "system", "content": system},) if system else ()
        return cls(id, (*system_turn, {"role": "user", "content": prompt}))


@dataclass(frozen=True)
class Decoding:
    """The judge's decoding settings (part of the cache key)."""

    temperature: float = 0.0
    max_tokens: int = 2048


@dataclass(frozen=True)
class Judgement:
    """The outcome of one request. ``rating`` is None exactly when the judgement failed."""

    id: str
    judge_model: str
    messages: tuple[Mapping[str, str], ...]
    raw_output: Optional[str]  # None when no answer came back
    rating: Optional[float]
    error: Optional[str]  # why it failed (None when it did not)
    cached: bool  # answered from the cache, without a call
    attempts: int  # calls made for it in this run (0 when cached)
    # The model the server says answered: names like "gpt-4" are aliases of changing snapshots.
    # None when no answer came back (or for answers cached before it was recorded).
    served_model: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.rating is not None

    def audit_record(self) -> dict:
        return {"id": self.id, "judge_model": self.judge_model, "served_model": self.served_model,
                "prompt": list(self.messages), "raw_output": self.raw_output, "rating": self.rating,
                "error": self.error, "cached": self.cached, "attempts": self.attempts}


@dataclass
class JudgeResults:
    """All judgements of one run, in request order."""

    judgements: list[Judgement]
    judge_model: str
    audit_path: Optional[Path] = None

    @property
    def judged(self) -> int:
        return sum(j.ok for j in self.judgements)

    @property
    def failed(self) -> int:
        return len(self.judgements) - self.judged

    @property
    def failure_rate(self) -> float:
        return self.failed / len(self.judgements) if self.judgements else 0.0

    @property
    def calls(self) -> int:
        return sum(j.attempts for j in self.judgements)


# =============================================================================================
# Rating parsers
# =============================================================================================


def bracket_rating(allowed: Sequence[float]) -> RatingParser:
    """Parser for FastChat-style single-answer grading: ``Rating: [[0.5]]``.

    Like FastChat (and the EgoThink and MT-Bench judges built on it) it takes the first
    ``[[x]]`` and falls back to the first ``[x]``. The rating must then be one of ``allowed``;
    anything else is no valid rating (a judge answering on another scale is a failed
    judgement, not a score).
    """
    import re

    double = re.compile(r"\[\[(\d+\.?\d*)\]\]")
    single = re.compile(r"\[(\d+\.?\d*)\]")

    def parse(text: str) -> float:
        match = double.search(text) or single.search(text)
        if match is None:
            raise ValueError("no [[rating]] in the judge output")
        rating = float(match.group(1))
        if rating not in allowed:
            raise ValueError(f"rating {match.group(1)} is not one of {', '.join(f'{a:g}' for a in allowed)}")
        return rating

    return parse


# =============================================================================================
# Backends
# =============================================================================================


@dataclass(frozen=True)
class Completion:
    text: str
    model: Optional[str]  # the model the server says answered (None: not known)


class TransientJudgeError(RuntimeError):
    """A call failed in a way worth retrying (rate limit, server error, timeout, lost connection)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class JudgeCallError(RuntimeError):
    """A call failed for good (bad request, authentication, retries exhausted)."""


class OpenAIChatBackend:
    """Chat completions through the official ``openai`` client: OpenAI, Azure OpenAI, vLLM, SGLang, ..."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 azure_api_version: str | None = None, timeout: float = 120.0,
                 environ: Mapping[str, str] = os.environ):
        import openai

        self.model = model
        self.kind = "azure" if azure_api_version else "openai"
        self._sampling_kwargs = _lmms_eval_sampling_rule()
        # Local servers without authentication still need a non-empty key for the client.
        api_key = environ[api_key_env] if api_key_env else "EMPTY"
        # Retries are ours (exponential backoff, counted, and only for transient errors).
        if azure_api_version:
            self._client = openai.AzureOpenAI(api_key=api_key, azure_endpoint=base_url, api_version=azure_api_version,
                                              timeout=timeout, max_retries=0)
        else:
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    @property
    def identity(self) -> str:
        return f"{self.kind}:{self.model}"

    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        import openai

        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=list(messages), **self._sampling_kwargs(self.model, decoding))
        except openai.APIStatusError as error:
            message = f"HTTP {error.status_code}: {_error_message(error)}"
            if error.status_code in (408, 409, 429) or error.status_code >= 500:
                raise TransientJudgeError(message, _retry_after(error)) from None
            raise JudgeCallError(message) from None
        except openai.APITimeoutError:
            raise TransientJudgeError("timed out") from None
        except openai.APIConnectionError as error:
            raise TransientJudgeError(f"connection failed: {error.__cause__ or error}") from None
        except openai.APIError as error:  # e.g. a malformed response
            raise JudgeCallError(f"{type(error).__name__}: {error}") from None
        if not response.choices:
            raise JudgeCallError("the response has no choices")
        return Completion(text=response.choices[0].message.content or "", model=response.model or self.model)


def _lmms_eval_sampling_rule() -> Callable[[str, Decoding], dict]:
    """lmms-eval's rule for the token limit and temperature: reasoning models (gpt-5, o1, ...) take
    max_completion_tokens and no temperature. Imported once per backend: lmms-eval is slow to import."""
    from lmms_eval.llm_judge.protocol import ServerConfig
    from lmms_eval.llm_judge.providers.openai import build_sampling_kwargs

    return lambda model, decoding: build_sampling_kwargs(
        ServerConfig(model_name=model, temperature=decoding.temperature, max_tokens=decoding.max_tokens))


def _error_message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    return str(getattr(error, "message", error))


def _retry_after(error) -> float | None:
    try:
        return float(error.response.headers["retry-after"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


class TransformersBackend:
    """An in-process transformers causal LM, for judging with no server and no network.

    Concurrent calls are gathered into batches (left-padded generation), so the engine's
    ``concurrency`` is the generation batch size here.
    """

    def __init__(self, model: str, *, batch_size: int = 8):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        self.kind = "hf"
        self._batch_size = batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(model, padding_side="left")
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        self._model = AutoModelForCausalLM.from_pretrained(model, dtype="auto").to(resolve_device("auto")).eval()
        self._pending: list[tuple[tuple, Decoding, Future]] = []
        self._pending_lock = threading.Lock()
        self._generate_lock = threading.Lock()

    @property
    def identity(self) -> str:
        return f"{self.kind}:{self.model}"

    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        mine: Future = Future()
        with self._pending_lock:
            self._pending.append((tuple(messages), decoding, mine))
        # Whoever holds the generation lock serves a batch of what is pending, ours or not.
        while not mine.done():
            with self._generate_lock:
                if mine.done():
                    break
                with self._pending_lock:
                    batch = [p for p in self._pending if p[1] == self._pending[0][1]][: self._batch_size]
                    self._pending = [p for p in self._pending if p not in batch]
                try:
                    texts = self._generate([m for m, _, _ in batch], batch[0][1])
                except Exception as error:  # every waiter of this batch gets the error
                    for _, _, future in batch:
                        future.set_exception(JudgeCallError(f"generation failed: {error}"))
                else:
                    for (_, _, future), text in zip(batch, texts):
                        future.set_result(Completion(text=text, model=self.model))
        return mine.result()

    def _generate(self, conversations: list[tuple], decoding: Decoding) -> list[str]:
        import torch

        tokenizer = self._tokenizer
        if tokenizer.chat_template:
            prompts = [tokenizer.apply_chat_template(list(c), add_generation_prompt=True, tokenize=False)
                       for c in conversations]
            encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        else:
            prompts = ["\n\n".join(m["content"] for m in c) for c in conversations]
            encoded = tokenizer(prompts, return_tensors="pt", padding=True)
        encoded = encoded.to(self._model.device)
        sampling = ({"do_sample": True, "temperature": decoding.temperature} if decoding.temperature > 0
                    else {"do_sample": False})
        with torch.inference_mode():
            output = self._model.generate(**encoded, max_new_tokens=decoding.max_tokens,
                                          pad_token_id=tokenizer.pad_token_id, **sampling)
        new_tokens = output[:, encoded["input_ids"].shape[1]:]
        return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def make_backend(settings: JudgeSettings, environ: Mapping[str, str] = os.environ):
    settings.check(environ)
    if settings.judge_backend == "hf":
        return TransformersBackend(settings.judge_model, batch_size=settings.judge_concurrency)
    return OpenAIChatBackend(
        settings.judge_model, base_url=settings.judge_base_url, api_key_env=settings.judge_api_key_env,
        azure_api_version=settings.judge_api_version if settings.judge_backend == "azure" else None,
        timeout=settings.judge_timeout, environ=environ)


# =============================================================================================
# Cache
# =============================================================================================


class JudgeCache:
    """Raw judge outputs (and the model the server said answered) on disk, keyed by (judge model,
    full prompt, decoding settings).

    SQLite in WAL mode: several processes (two evaluations sharing the cache) and the engine's
    threads can write at once; each answer is committed as it arrives. Only requests and
    outputs are stored, never credentials.
    """

    FILE_NAME = "judgements.sqlite"

    def __init__(self, directory: str | os.PathLike):
        self.path = Path(os.path.expanduser(str(directory))) / self.FILE_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, judge_model TEXT NOT NULL, "
                         "request TEXT NOT NULL, output TEXT NOT NULL, created REAL NOT NULL, served_model TEXT)")
        # A cache written before the served model was recorded lacks its column: add it, keeping
        # the answers (paid for) it holds.
        if "served_model" not in {row[1] for row in self._db.execute("PRAGMA table_info(judgements)")}:
            try:
                self._db.execute("ALTER TABLE judgements ADD COLUMN served_model TEXT")
            except sqlite3.OperationalError:  # another process added it at the same moment
                pass

    @staticmethod
    def key(judge_model: str, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> str:
        return hashlib.sha256(_request_json(judge_model, messages, decoding).encode()).hexdigest()

    def get(self, key: str) -> Optional[Completion]:
        with self._lock:
            row = self._db.execute("SELECT output, served_model FROM judgements WHERE key = ?", (key,)).fetchone()
        return Completion(*row) if row else None

    def put(self, key: str, judge_model: str, messages: Sequence[Mapping[str, str]], decoding: Decoding,
            answer: Completion) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO judgements (key, judge_model, request, output, created, served_model) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, judge_model, _request_json(judge_model, messages, decoding), answer.text, time.time(), answer.model))

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _request_json(judge_model: str, messages, decoding: Decoding) -> str:
    return json.dumps({"judge_model": judge_model, "messages": [dict(m) for m in messages],
                       "decoding": dataclasses.asdict(decoding)}, sort_keys=True, ensure_ascii=False)


# =============================================================================================
# Engine
# =============================================================================================


class Judge:
    """Runs batches of judge requests against one judge model. Thread-safe; reuse it."""

    def __init__(self, backend, *, decoding: Decoding = Decoding(), cache: JudgeCache | None = None,
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
            description: str = "Judging") -> JudgeResults:
        """Judge every request; returns the judgements in request order. Never raises for a
        failed call or an unparsable answer: those are failed judgements. The audit trail
        replaces ``audit_path``, or adds to it with ``append_audit``."""
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

        audit = _AuditWriter(audit_path, append=append_audit)
        done: dict[str, Judgement] = {}

        def record(key: str, answer: Completion | None, error: str | None, cached: bool, attempts: int) -> None:
            raw, rating = (answer.text if answer else None), None
            if raw is not None:
                try:
                    rating = float(parse_rating(raw))
                except ValueError as problem:
                    error = str(problem)
                except Exception as problem:  # a parser bug shows in the failure reasons, not as a lost run
                    error = f"the rating parser failed: {type(problem).__name__}: {problem}"
            for position, request in enumerate(by_key[key]):
                judgement = Judgement(request.id, self.model, request.messages, raw, rating,
                                      error if rating is None else None, cached, attempts if position == 0 else 0,
                                      answer.model if answer else None)
                done[request.id] = judgement
                audit.write(judgement)

        try:
            missing = []
            for key in by_key:
                cached = self.cache.get(key) if self.cache is not None else None
                if cached is None:
                    missing.append(key)
                else:
                    record(key, cached, None, True, 0)
            with tqdm(total=len(missing), desc=description, disable=not progress or not missing) as bar, \
                    ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                futures = {pool.submit(self._call, key, by_key[key][0].messages): key for key in missing}
                for future in as_completed(futures):
                    answer, error, attempts = future.result()
                    record(futures[future], answer, error, False, attempts)
                    bar.update()
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

    def _call(self, key: str, messages) -> tuple[Optional[Completion], Optional[str], int]:
        """(answer or None, error or None, attempts) for one prompt; stores answers in the cache."""
        attempt = 0
        while True:
            attempt += 1
            try:
                completion = self.backend.complete(messages, self.decoding)
            except TransientJudgeError as error:
                if attempt > self.retries:
                    return None, f"{error} (gave up after {attempt} attempts)", attempt
                time.sleep(self._delay(attempt, error.retry_after))
                continue
            except JudgeCallError as error:
                return None, str(error), attempt
            except Exception as error:  # a judge problem must not cost the evaluation its generations
                return None, f"{type(error).__name__}: {error}", attempt
            if self.cache is not None:
                try:
                    self.cache.put(key, self.model, messages, self.decoding, completion)
                except sqlite3.Error as error:  # the answer is still good; only a re-run would ask again
                    logger.warning(f"judge cache {self.cache.path}: could not store an answer: {error}")
            return completion, None, attempt

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with jitter (so that throttled calls do not return in lockstep)."""
        delay = min(self.backoff * 2 ** (attempt - 1), self.max_backoff) * random.uniform(0.5, 1.0)
        return min(max(delay, retry_after or 0.0), self.max_backoff)


class _AuditWriter:
    """Appends one JSON line per judgement as it is made, so a crash keeps what was judged."""

    def __init__(self, path: str | os.PathLike | None, *, append: bool = False):
        self.path = Path(path) if path else None
        self._file = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a" if append else "w", encoding="utf-8")

    def write(self, judgement: Judgement) -> None:
        if self._file:
            self._file.write(json.dumps(judgement.audit_record(), ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file:
            self._file.close()


# =============================================================================================
# Judged items: what a task logs per sample, and scoring them
# =============================================================================================


@dataclass(frozen=True)
class Rubric:
    """How a benchmark reads its judge: the rating parser and the scale of the reported score
    (score = mean rating x scale, over successful judgements)."""

    parse_rating: RatingParser
    scale: float = 1.0


@dataclass(frozen=True)
class FixedRating:
    """A part of a judged item settled without the judge (e.g. an answer field the model left
    out scores 0): it counts in the score like a rating, and is neither judged nor failed."""

    rating: float
    reason: str


def judge_parts_item(parts: Mapping[str, JudgeRequest | FixedRating], rubric: str) -> dict:
    """The per-sample value a judged task's ``process_results`` returns for each judged metric:
    the sample's parts by name, each a judge request or a ``FixedRating`` (e.g. three answer
    fields; a sample judged as a whole is one part named ``""``).

    It is self-contained (lmms-eval logs it with ``--log_samples``), so the outputs can be
    re-judged later without the model: ``rubric`` names the benchmark's ``Rubric`` as
    ``"module:attribute"``. A metric over such items scores each part over all items (mean
    rating x scale, failed judgements excluded) and reports the mean of the part scores; an item
    holding one part of a sample is how a metric reports that part alone.
    """
    if not parts:
        raise ValueError("a judged item needs at least one part")
    return {"judge_parts": {name: _part_value(part) for name, part in parts.items()}, "judge_rubric": rubric}


def _part_value(part: JudgeRequest | FixedRating) -> dict:
    if isinstance(part, FixedRating):
        return {"fixed_rating": float(part.rating), "fixed_reason": part.reason}
    return {"judge_request_id": part.id, "judge_messages": [dict(m) for m in part.messages]}


def is_judge_parts_item(value: Any) -> bool:
    return isinstance(value, dict) and {"judge_parts", "judge_rubric"} <= value.keys()


def item_parts(item: Mapping[str, Any]) -> dict[str, JudgeRequest | FixedRating]:
    """The parts of a logged judged item (``judge_parts_item``), by name."""
    if not is_judge_parts_item(item):
        raise ValueError(f"not a judged item (judge_parts_item): {str(item)[:120]}")
    return {name: FixedRating(part["fixed_rating"], part.get("fixed_reason", "")) if "fixed_rating" in part
            else JudgeRequest(part["judge_request_id"], tuple(part["judge_messages"]))
            for name, part in item["judge_parts"].items()}


def item_requests(items: Sequence[Mapping[str, Any]]) -> list[JudgeRequest]:
    """The distinct judge requests of ``items`` in order: a request that several items carry (a
    sample counted both overall and in a breakdown) appears once. One id with two different
    prompts raises."""
    requests: dict[str, JudgeRequest] = {}
    for item in items:
        for part in item_parts(item).values():
            if isinstance(part, FixedRating):
                continue
            known = requests.setdefault(part.id, part)
            if known.messages != part.messages:
                raise ValueError(f"judge request id {part.id!r} is used for two different prompts")
    return list(requests.values())


def load_rubric(reference: str) -> Rubric:
    module, _, attribute = reference.partition(":")
    rubric = getattr(importlib.import_module(module), attribute, None)
    if not isinstance(rubric, Rubric):
        raise ValueError(f"{reference!r} does not name a lmms_egoplan.judge.Rubric")
    return rubric


def items_rubric(items: Sequence[Mapping[str, Any]]) -> Rubric:
    """The one rubric that ``items`` name (a judged metric reads one rubric)."""
    rubrics = {item["judge_rubric"] for item in items}
    if len(rubrics) != 1:
        raise ValueError(f"a judged metric needs items of one rubric, got {sorted(rubrics) or 'no items'}")
    return load_rubric(rubrics.pop())


@dataclass
class ItemScore:
    """A judged metric: ``score`` (the mean of the part scores; for one-request items the mean
    rating x scale; NaN when a part has no rating), the score of each part, and the judgements."""

    score: float
    results: JudgeResults = field(repr=False)
    part_scores: dict[str, float] = field(default_factory=dict)


def score_judged(items: Sequence[Mapping[str, Any]], judgements: Mapping[str, Judgement], *, judge_model: str,
                 audit_path: str | os.PathLike | None = None) -> ItemScore:
    """The score of ``items`` from judgements already made (by request id), so that metrics over
    different subsets of one task's samples all read the same judgements."""
    scale = items_rubric(items).scale
    ratings: dict[str, list[float]] = {}
    for item in items:
        for name, part in item_parts(item).items():
            rating = part.rating if isinstance(part, FixedRating) else judgements[part.id].rating
            bucket = ratings.setdefault(name, [])
            if rating is not None:  # a failed judgement: counted, never averaged in
                bucket.append(rating)
    part_scores = {name: mean_or_nan(part_ratings) * scale for name, part_ratings in ratings.items()}
    score = mean_or_nan(part_scores.values())
    results = JudgeResults([judgements[r.id] for r in item_requests(items)], judge_model,
                           Path(audit_path) if audit_path else None)
    return ItemScore(score, results, part_scores)


def unjudged(items: Sequence[Mapping[str, Any]], judge_model: str, reason: str) -> ItemScore:
    """The outcome when no judge could be asked: every judge request of ``items`` failed, for ``reason``."""
    failed = [Judgement(request.id, judge_model, request.messages, None, None, reason, False, 0)
              for request in item_requests(items)]
    return ItemScore(math.nan, JudgeResults(failed, judge_model))
