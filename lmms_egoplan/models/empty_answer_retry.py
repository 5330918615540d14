"""The suite's backends generate an empty answer again where the request asks for it
(``core.request_options.EMPTY_ANSWER_RETRY``), as Cosmos-Reason1's official evaluation does:
``nvidia-cosmos/cosmos-reason1`` @3e7f1cb ``examples/benchmark/tools/eval/evaluate.py`` ``run_model`` (lines
335-488): under either answer type, an answer whose parser reads nothing (``if not answer``) is generated again, up
to ``max_retries`` times (``configs/evaluate.yaml``: 10; the request's ``EMPTY_ANSWER_RETRIES``), retry k with
``max_tokens + 256 * k`` new tokens (``max_tokens`` the config's 1,024, which the letter type's first 10 tokens do not
change: ``EMPTY_ANSWER_RETRY_BASE_TOKENS``) and temperature ``min(temperature + 0.05 * k, 0.9)`` (the letter type's
``top_k=1`` keeps its retries greedy), the first answer read kept; of one still empty after the last retry, the first
answer is kept (and scored wrong).

How often an answer was asked again and whether it is still empty are recorded on its request
(``core.request_facts.mark_retries``), which its task reads back to count them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lmms_egoplan.core.request_facts import AnswerRetries, mark_retries
from lmms_egoplan.core.request_options import (
    EMPTY_ANSWER_RETRIES,
    EMPTY_ANSWER_RETRY,
    EMPTY_ANSWER_RETRY_BASE_TOKENS,
    NEVER,
    empty_answer,
)


def retry_generation_kwargs(generation_kwargs: dict, retry: int, rule: str) -> dict:
    """run_model's sampling parameters of retry ``retry`` (1-based) of an answer empty by ``rule``: 256 more new
    tokens per retry than the rule's base (``EMPTY_ANSWER_RETRY_BASE_TOKENS``, else the request's own), the
    temperature 0.05 higher per retry up to 0.9 (a greedy request stays greedy)."""
    base = EMPTY_ANSWER_RETRY_BASE_TOKENS.get(rule, int(generation_kwargs.get("max_new_tokens", 0)))
    changed = {"max_new_tokens": base + 256 * retry}
    if generation_kwargs.get("do_sample") or float(generation_kwargs.get("temperature") or 0) > 0:
        changed["temperature"] = min(float(generation_kwargs.get("temperature") or 0) + 0.05 * retry, 0.9)
    return {**generation_kwargs, **changed}


def with_retries(texts: Sequence[str], requests: Sequence, generation_kwargs: dict,
                 generate_again: Callable[[list[int], dict], list[str]],
                 answered: Callable[[int, str], None] = lambda index, text: None,
                 asked_again: Callable[[int], None] = lambda count: None) -> list[str]:
    """``texts`` (the answers to ``requests``, asked with ``generation_kwargs``), those empty by their request's
    rule generated again by ``generate_again(indices, generation kwargs)`` (one call per rule and retry) until read
    or their request's retries (``EMPTY_ANSWER_RETRIES``) are spent, each one asked again recorded on its request;
    requests without the option keep their text. ``answered(index, answer)`` is called as each answer is final (its
    record made), so that a backend hands it over (and a stop keeps it) while others are still asked again;
    ``asked_again(count)`` after each call of ``generate_again`` with how many it asked."""
    rules = [EMPTY_ANSWER_RETRY.check(EMPTY_ANSWER_RETRY.of(request), "a generation request") for request in requests]
    limits = [int(EMPTY_ANSWER_RETRIES.check(EMPTY_ANSWER_RETRIES.of(request), "a generation request"))
              if rule != NEVER else 0 for request, rule in zip(requests, rules)]
    answers, retries = list(texts), [0] * len(texts)

    def final(index: int, still_empty: bool) -> None:
        mark_retries(requests[index], AnswerRetries(retries[index], still_empty))
        answered(index, answers[index])

    empty = []
    for index, (text, rule) in enumerate(zip(texts, rules)):
        if limits[index] and empty_answer(text, rule):
            empty.append(index)
        else:
            final(index, still_empty=False)
    for retry in range(1, max(limits, default=0) + 1):
        for index in [index for index in empty if limits[index] < retry]:
            final(index, still_empty=True)  # run_model keeps the first answer of one never read
        empty = [index for index in empty if limits[index] >= retry]
        if not empty:
            break
        still_empty = []
        for rule in dict.fromkeys(rules[index] for index in empty):
            asked = [index for index in empty if rules[index] == rule]
            regenerated = generate_again(asked, retry_generation_kwargs(generation_kwargs, retry, rule))
            asked_again(len(asked))
            for index, text in zip(asked, regenerated):
                retries[index] = retry
                if empty_answer(text, rule):
                    still_empty.append(index)
                else:
                    answers[index] = text
                    final(index, still_empty=False)
        empty = still_empty
    for index in empty:
        final(index, still_empty=True)
    return answers
