"""Reasoning blocks: what a thinking model writes before its answer, left out wherever a task reads an answer as a
person reads it (a robust letter reader, fields, a plan, what a judge rates).

lmms-eval strips ``<think>`` and ``<analysis>`` blocks before a task sees an answer (``--reasoning_tags``), except in
tasks that turn that off because their official parsers read the raw answer; the markers of other thinking models,
Kimi-VL-Thinking's ``◁think▷ ... ◁/think▷`` among them, it does not know. The readers here leave out every kind
below, whatever the run's ``--reasoning_tags``.
"""

from __future__ import annotations

import re

# (opening, closing), compared without case: <think> (Qwen3, DeepSeek-R1) and <analysis> (lmms-eval's default
# --reasoning_tags), <thinking>, and Kimi-VL-Thinking's (its model card's extract_thinking_and_summary).
REASONING_BLOCKS = (("<think>", "</think>"), ("<thinking>", "</thinking>"), ("<analysis>", "</analysis>"),
                    ("◁think▷", "◁/think▷"))

_OPENING = re.compile("|".join(re.escape(opening) for opening, _ in REASONING_BLOCKS), re.IGNORECASE)
_CLOSING = {opening: re.compile(re.escape(closing), re.IGNORECASE) for opening, closing in REASONING_BLOCKS}
# A chat template may open the block in the prompt: the answer then holds only its end.
_UP_TO_THE_LAST_CLOSING = re.compile(
    "^.*(?:" + "|".join(re.escape(closing) for _, closing in REASONING_BLOCKS) + ")", re.IGNORECASE | re.DOTALL)


def without_reasoning(text: str | None) -> str:
    """``text`` less its reasoning blocks; less a block it opens and never closes, to its end (a generation cut
    inside its thinking gave no answer: a draft there is not one); less everything up to a closing marker left
    alone; stripped."""
    text = text or ""
    kept, position = [], 0
    while opened := _OPENING.search(text, position):
        kept.append(text[position:opened.start()] + " ")
        closed = _CLOSING[opened.group().lower()].search(text, opened.end())
        position = closed.end() if closed else len(text)
    kept.append(text[position:])
    return _UP_TO_THE_LAST_CLOSING.sub("", "".join(kept)).strip()


def reasoning_left_open(text: str | None) -> bool:
    """Whether ``text`` opens a reasoning block more often than it closes one: a generation cut inside its thinking."""
    lowered = (text or "").lower()
    return any(lowered.count(opening) > lowered.count(closing) for opening, closing in REASONING_BLOCKS)
