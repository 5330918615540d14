"""Which tokens of a ``loglikelihood`` request a backend scores: the task decides, per request.

lmms-eval's backends score the continuation's tokens (``ANSWER``). A task whose official
evaluation scores more -- EgoPlan-Bench's loss covers the answer and the token that closes the
assistant's turn -- asks for ``ANSWER_AND_END_OF_TURN`` by setting ``REQUEST_ATTRIBUTE`` on the
requests it builds. A backend declares the spans it honours in its class attribute
``BACKEND_ATTRIBUTE``; a request carries no attribute, and a backend no declaration, for
lmms-eval's convention. (Proposed upstream as a field of ``Instance``: docs/upstream.md.)

This module imports nothing, so tasks and backends share it without an import cycle.
"""

from __future__ import annotations

ANSWER = "answer"
ANSWER_AND_END_OF_TURN = "answer_and_end_of_turn"  # the answer, then the chat template's end-of-turn token(s)
SPANS = (ANSWER, ANSWER_AND_END_OF_TURN)
REQUEST_ATTRIBUTE = "scored_span"
BACKEND_ATTRIBUTE = "scored_spans"


def request_span(request) -> str:
    """The span a request asks for."""
    return getattr(request, REQUEST_ATTRIBUTE, ANSWER)


def mark_requests(requests, span: str) -> None:
    """Ask for ``span`` on ``requests`` (one lmms-eval Instance or a list of them)."""
    for request in requests if isinstance(requests, list) else [requests]:
        setattr(request, REQUEST_ATTRIBUTE, span)


def backend_scores(backend_class: type, span: str) -> bool:
    return span in getattr(backend_class, BACKEND_ATTRIBUTE, (ANSWER,))
