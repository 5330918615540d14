"""How Cosmos-Reason1's answers are read: the official parser of each prompt and its correctness rule, transcribed
from ``nvidia-cosmos/cosmos-reason1`` @3e7f1cb ``examples/benchmark/tools/eval/utils/output.py``
(``parse_reasoning_response``, ``parse_letter_response``) and ``tools/eval/evaluate.py`` (``run_model``: the
answer is correct when ``answer.lower() == correct_answer.lower()``), and beside them a robust reading
(``core.letter_choice``): what a person reads as the chosen option. No harness."""

from __future__ import annotations

from collections.abc import Sequence

from lmms_egoplan.core.letter_choice import CHOICE_LETTERS, extract_choice
from lmms_egoplan.core.reasoning import without_reasoning
from lmms_egoplan.core.request_options import ANSWER_PATTERN, SINGLE_LETTER_PATTERN

REASONING = "official_reasoning"
LETTER = "official_letter"
PROMPTS = (REASONING, LETTER)


def official_answer(text: str, prompt: str) -> str:
    """The official parser of ``prompt``: ``official_reasoning``, the first capital letter inside the first
    ``<answer>...</answer>``; ``official_letter``, the first capital letter anywhere; "" when there is none (the
    official run retries such an answer)."""
    if prompt == REASONING:
        found = ANSWER_PATTERN.search(text)
        letter = SINGLE_LETTER_PATTERN.search(found.group(1)) if found else None
    else:
        letter = SINGLE_LETTER_PATTERN.search(text)
    return letter.group(0) if letter else ""


def official_correct(answer: str, gold: str) -> bool:
    """evaluate.py's rule: a case-insensitive comparison (an empty answer matches no gold letter)."""
    return answer.lower() == gold.lower()


def robust_answer(text: str, letters: Sequence[str], options: Sequence[str]) -> str:
    """The option a person reads: inside the ``<answer>`` tag where there is one, else the answer without its
    reasoning blocks (``core.reasoning``), read by ``core.letter_choice.extract_choice`` (a bare or stated letter,
    the text of one option, one stand-alone capital); "" when it cannot be told. An option past D is not read (the
    shared reader knows A-D)."""
    found = ANSWER_PATTERN.search(text)
    body = found.group(1) if found else without_reasoning(text)
    lettered = [letter for letter in letters if letter.upper() in CHOICE_LETTERS]
    texts = [options[letters.index(letter)] for letter in lettered]
    # Options past D are not read; an answer naming one's text is not read by the texts of A-D either (E's text
    # may hold D's: "open the drawer slowly" is not D's "open the drawer").
    past_d = [text for letter, text in zip(letters, options) if letter not in lettered]
    names_past_d = any(text.strip() and text.strip().lower() in body.lower() for text in past_d)
    in_order = lettered == list(CHOICE_LETTERS[:len(lettered)])
    position = extract_choice(body, texts if in_order and not names_past_d else ())
    if position is None:
        return ""
    letter = CHOICE_LETTERS[position]
    return letter if letter in letters else ""
