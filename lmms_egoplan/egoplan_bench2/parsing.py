"""The letter an answer picks, read two ways; every run reports both (tasks/egoplan_bench2/README.md,
Answer parsing).

* ``official`` (the default, since version 6): ``extract_characters_regex`` of ``qiulu66/EgoPlan-Bench2``
  ``eval.py`` (lines 35-60), upper-cased as ``run_inference`` does (line 129), reproduced exactly, its defects
  included, so that published numbers can be compared: two missing commas fuse two pairs of answer prefixes into one
  string each (lines 43-46: "The best option is" and "Best answer:" are never removed alone); the
  prefixes are case-sensitive and removed anywhere in the answer; then the first capital A-D anywhere
  is the answer, so "Based on the video, D." reads as B, "Best answer: D" as B (its prefix is one of
  the fused ones) and "Clearly, the answer is D" as C.
* ``robust`` (versions 1-5's default): what a person reads. Reasoning blocks (``<think>...</think>`` and the other
  kinds of ``lmms_egoplan.core.reasoning``, Kimi-VL-Thinking's ``◁think▷`` among them) are left out; then the content
  of an ``<answer>`` tag first (the last one), then the rest of the answer, each read by
  ``lmms_egoplan.core.letter_choice.extract_choice``: a bare
  letter ("D", "(c)", "b."), a stated one ("Answer: D", "The answer is (C)", "option B"; the last
  one counts), a leading one ("B. place oven tray"), the text of exactly one candidate, or one
  stand-alone capital; never a capital out of an ordinary word, never the article "a".

Both return a letter A-D, or None for an answer they cannot read (counted as wrong and counted as
unparseable).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lmms_egoplan.core.letter_choice import CHOICE_LETTERS, extract_choice
from lmms_egoplan.core.reasoning import without_reasoning

PARSERS = ("robust", "official")

# eval.py lines 38-51, in order. The release writes lines 43-46 without their commas, so Python joins
# each pair into one string: written out here as the interpreter reads them.
OFFICIAL_ANSWER_PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
    "Answer:",
    "Option:",
    "The correct answer",
    "The correct option",
)


def official_letter(response: str) -> str | None:
    """``extract_characters_regex(response).upper()`` (eval.py lines 35-60 and 129); None where it
    returns ""."""
    text = response.strip()
    for prefix in OFFICIAL_ANSWER_PREFIXES:
        text = text.replace(prefix, "")
    if len(text.split()) > 10 and not re.search("[ABCD]", text):
        return None
    match = re.search(r"[ABCD]", text)
    return match[0].upper() if match else None


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def robust_letter(response: str, choices: Sequence[str]) -> str | None:
    """The letter a person reads in ``response`` (module docstring), or None."""
    final = without_reasoning(response)
    tagged = _ANSWER_TAG.findall(final)
    for text in ([tagged[-1]] if tagged else []) + [final]:
        picked = extract_choice(text, choices)
        if picked is not None:
            return CHOICE_LETTERS[picked]
    return None


def read_letters(response: str, choices: Sequence[str]) -> dict[str, str | None]:
    """The letter each parser reads, by parser name."""
    return {"official": official_letter(response), "robust": robust_letter(response, choices)}
