"""What crosses the judge's boundaries: requests, decoding settings, completions, judgements.

A benchmark builds ``JudgeRequest``s and a ``RatingParser``; a backend turns a request's messages
into a ``Completion`` (or raises ``TransientJudgeError`` / ``JudgeCallError``); the engine returns
``JudgeResults``, one ``Judgement`` per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional

from lmms_egoplan.core.files import valid_text

# A rating parser turns the judge's raw text into a rating, or raises ValueError (its message
# is recorded as the failure reason) when the text holds no valid rating.
RatingParser = Callable[[str], float]


@dataclass(frozen=True)
class JudgeRequest:
    """One thing to judge: an id (unique within a run) and the chat messages sent to the judge."""

    id: str
    messages: tuple[Mapping[str, str], ...]

    def __post_init__(self):
        # Model output inside a prompt must survive the cache key, the audit trail and the HTTP body.
        cleaned = tuple({key: valid_text(value) if isinstance(value, str) else value for key, value in message.items()}
                        for message in self.messages)
        object.__setattr__(self, "messages", cleaned)

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
class Completion:
    """A backend's answer to one request."""

    text: str
    model: Optional[str]  # the model the server says answered (None: not known)
    # The server's configuration that answered (OpenAI's ``system_fingerprint``; None where not given)
    fingerprint: Optional[str] = None


class TransientJudgeError(RuntimeError):
    """A call failed in a way worth retrying (rate limit, server error, timeout, lost connection)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class JudgeUnreachableError(TransientJudgeError):
    """A call the judge did not answer at all (the connection failed, or it timed out): retried like any transient
    failure, but a judge that still does not answer once a call's retries are spent has stopped answering
    (``Judge.stopped_answering``)."""


class JudgeCallError(RuntimeError):
    """A call failed for good (bad request, authentication, retries exhausted): with the HTTP status and
    the error code of the server's reply where there was one (OpenAI: ``model_not_found``)."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


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
    system_fingerprint: Optional[str] = None  # the server's configuration that answered, where it says

    @property
    def ok(self) -> bool:
        return self.rating is not None

    def audit_record(self) -> dict:
        return {"id": self.id, "judge_model": self.judge_model, "served_model": self.served_model,
                "system_fingerprint": self.system_fingerprint, "prompt": list(self.messages),
                "raw_output": self.raw_output, "rating": self.rating, "error": self.error, "cached": self.cached,
                "attempts": self.attempts}


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
