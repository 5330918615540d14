"""Reading which of four lettered candidates a free-form answer picks, as a person reads it: a bare
letter, a stated one ("The answer is (B)", "I choose C"), a leading one ("B. open cupboard", a first line
"B"), one named ("option C is best"), the text of one candidate, or one stand-alone capital; never the
capital of an ordinary word ("Based on"), and never the article "a". Shared by the generative
multiple-choice tasks."""

from __future__ import annotations

import re
from collections.abc import Sequence

CHOICE_LETTERS = "ABCD"

_BARE_LETTER = re.compile(r"[(\[]?\s*([A-Da-d])\s*[)\]]?[.:]?")
_LETTER_AFTER = r"\s*(?:(?:option|choice)\s+)?(?P<open>[(\[])?(?P<letter>[A-Da-d])(?P<close>[)\]])?(?![A-Za-z0-9])"
# An answer given: "the answer is B", "Answer: B", "the best option would be (C)", "I choose D", "pick option A".
_STATED_LETTER = re.compile(
    r"\b(?:(?:answer|option|choice)(?:\s+(?:is|would\s+be|should\s+be|will\s+be)\s*[:\-]?|\s*[:\-])"
    r"|(?:choose|chose|select|pick)\b)" + _LETTER_AFTER, re.IGNORECASE)
# An option named, which may be one discussed ("option C is tempting", "not option D", "Answer A is premature").
_NAMED_LETTER = re.compile(r"\b(?:answer|option|choice)\b" + _LETTER_AFTER, re.IGNORECASE)
_LEADING_LETTER = re.compile(r"^(?:[(\[]([A-Da-d])[)\]]|([A-D])\s*[.:)\-]|([a-d])[.)])")
_LONE_CAPITAL = re.compile(r"(?<![A-Za-z0-9'])([A-D])(?![A-Za-z0-9'])")
# "A good step ..." is the article; "A or B", "A is right" name option A.
_ARTICLE_FOLLOWER = re.compile(r"\s+(?!(?:or|and|is|was|seems|would|should|because|since)\b)[a-z]")
# A letter ruled out, not chosen: "not C", "is not (C)", "the wrong answer is A", "not option D".
_RULED_OUT = re.compile(r"\b(?:not|wrong|incorrect)\s+(?:the\s+)?(?:(?:answer|option|choice)\s+)?[(\[]?\s*$",
                        re.IGNORECASE)


def extract_choice(response: str, choices: Sequence[str]) -> int | None:
    """The candidate a free-form answer picks, or None when it cannot be told.

    In order: a bare letter ("B", "(b)"); a stated answer ("The answer is (B)", "I choose C"; the
    last one counts, so a correction wins); a leading letter ("B. open cupboard", or a first line
    that is only "B"), whatever options the explanation after it discusses; a named option ("option
    C is best"; the last one counts); the text of exactly one candidate; exactly one distinct
    stand-alone capital A-D. An "a" / "A" followed by a word ("the answer is a knife", "A good step")
    is the article, not option A; a letter ruled out ("not C", "the wrong answer is A", "not option D")
    is not chosen.
    """
    text = (response or "").strip()
    if not text:
        return None
    if match := _BARE_LETTER.fullmatch(text):
        return CHOICE_LETTERS.index(match.group(1).upper())
    if stated := [m for m in _STATED_LETTER.finditer(text) if not _is_article(text, m) and not _ruled_out(text, m)]:
        return CHOICE_LETTERS.index(stated[-1].group("letter").upper())
    if match := _LEADING_LETTER.match(text) or _BARE_LETTER.fullmatch(text.split("\n", 1)[0].strip()):
        return CHOICE_LETTERS.index(next(g for g in match.groups() if g).upper())
    if mentioned := [m for m in _NAMED_LETTER.finditer(text) if not _is_article(text, m) and not _ruled_out(text, m)]:
        return CHOICE_LETTERS.index(mentioned[-1].group("letter").upper())
    named = _named_choices(text, choices)
    if len(named) == 1:
        return named[0]
    letters = {m.group(1) for m in _LONE_CAPITAL.finditer(text)
               if not (m.group(1) == "A" and _ARTICLE_FOLLOWER.match(text, m.end())) and not _ruled_out(text, m)}
    return CHOICE_LETTERS.index(letters.pop()) if len(letters) == 1 else None


def _ruled_out(text: str, match: re.Match) -> bool:
    return bool(_RULED_OUT.search(text, max(0, match.start() - 40), match.start()))


def _is_article(text: str, match: re.Match) -> bool:
    bracketed = match.group("open") or match.group("close")
    return match.group("letter") == "a" and not bracketed and bool(re.match(r"\s+[A-Za-z]", text[match.end():]))


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _named_choices(text: str, choices: Sequence[str]) -> list[int]:
    """Candidates whose text appears in ``text``, leaving out those inside a longer named one."""
    padded = f" {_normalized(text)} "
    named = {i: _normalized(c) for i, c in enumerate(choices) if _normalized(c) and f" {_normalized(c)} " in padded}
    return [i for i, c in named.items() if not any(j != i and c != other and c in other for j, other in named.items())]
