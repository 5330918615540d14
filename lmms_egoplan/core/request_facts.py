"""Facts of one request, travelling on it from the backend that answers it to the task that scores it.

A backend marks the request it answers (lmms-eval's ``Instance``; the suite's tasks build ``SuiteInstance``, a
dataclass subclass) with how often it asked the answer again because it was empty (``models.empty_answer_retry``),
and the response cache marks a request it serves with the record it keeps beside the answer
(``compat.durability.resume_sampled_runs``). lmms-eval hands a task's ``process_results`` only the answer's text, so
the task, which holds its own requests, hands each answer over as ``RetriedAnswer`` (a ``str`` that carries its
request's record: ``harness.lmms_eval_task.SuiteTask.apply_filters``); nothing is matched by the answer's text.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class AnswerRetries(NamedTuple):
    """How often a request's answer was generated again because it was empty, and whether it still is."""

    retries: int = 0
    still_empty: bool = False


# The attribute of a request its record is kept in (a request asked once has none)
_RETRIES_ATTRIBUTE = "lmms_egoplan_answer_retries"


def mark_retries(request: Any, record: AnswerRetries) -> None:
    """Record on ``request`` how often its answer was asked again (``record``: asked once leaves none)."""
    if record.retries:
        setattr(request, _RETRIES_ATTRIBUTE, record)


def retries_of(request: Any) -> AnswerRetries:
    """What ``mark_retries`` recorded on ``request``; (0, False): asked once."""
    return getattr(request, _RETRIES_ATTRIBUTE, AnswerRetries())


class RetriedAnswer(str):
    """An answer's text as lmms-eval hands it to the task, with its request's ``AnswerRetries`` (``retries``)."""

    retries: AnswerRetries

    def __new__(cls, text: str, retries: AnswerRetries) -> RetriedAnswer:
        answer = super().__new__(cls, text)
        answer.retries = retries
        return answer

    def strip(self, chars: str | None = None) -> RetriedAnswer:
        # lmms-eval strips a generation task's answers before its process_results: the record stays with the text
        return RetriedAnswer(super().strip(chars), self.retries)


def answer_retries(answer: Any) -> AnswerRetries:
    """The record a ``RetriedAnswer`` carries; (0, False) for any other answer (asked once)."""
    return answer.retries if isinstance(answer, RetriedAnswer) else AnswerRetries()
