"""Ranking a question's candidates by their loss, as the likelihood tasks rank them: the lowest wins, ties go to the
earlier candidate (numpy's and torch's ``argmin``). A NaN loss means the backend's scoring failed (an fp16 overflow):
``min`` would pick a candidate by where the NaN stands (the first when it stands first), a failure scored, so it
stops the run naming the question."""

from __future__ import annotations

import math
from collections.abc import Sequence


class CandidateLossError(ValueError):
    """A backend scored a question's candidates with a loss that is not a number."""


def lowest_loss(losses: Sequence[float], question: str) -> int:
    """The index of the candidate with the lowest loss (ties: the earlier); ``question`` names the question in the
    error a NaN loss raises."""
    if any(math.isnan(loss) for loss in losses):
        raise CandidateLossError(f"{question}: the backend's candidate losses {list(losses)} hold a NaN, which ranks "
                                 f"nothing; check the model's dtype and the backend's scoring")
    return min(range(len(losses)), key=losses.__getitem__)
