"""How far two judges agree on the same answers: both scores with 95 % intervals, their difference,
exact agreement on the rating scale and Cohen's weighted kappa, per group of answers.

A ``RatingPair`` is one judge request rated by both judges (the run's judge first). ``agreement``
summarises the pairs of one group; ``most_disagreed`` ranks the pairs by how far apart the two
ratings are. ``lmms-egoplan judge-agreement`` (``lmms_egoplan.harness.agreement``) builds the pairs
from a finished run's logs and a second judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95
RESAMPLES = 2000  # paired percentile bootstrap over answers, seed 0 (a report is reproducible)
KAPPA_WEIGHTS = "linear"


@dataclass(frozen=True)
class RatingPair:
    group: str  # what the answer is scored in: a task, or a task's field ("<task> · <field>")
    id: str  # the judge request's id
    first: float  # the run's judge's rating
    second: float  # the second judge's rating
    prompt: str  # the judge prompt's user turn (it holds the answer judged)
    first_output: str  # each judge's raw answer
    second_output: str
    answer: str = ""  # the answer judged, where the rubric says where the prompt holds it (Rubric.answer_in)
    # settled without a judge (a FixedRating: e.g. a field missing from the answer, scored 0): both
    # "ratings" are that value; counted in the scores, as the run counts it, not in the agreement
    fixed: bool = False


@dataclass(frozen=True)
class Agreement:
    group: str
    pairs: int  # answers both judges rated
    scale: float  # a score is the mean rating x scale
    levels: tuple[float, ...]  # the rating scale, in order
    first_score: float
    first_interval: tuple[float, float]
    second_score: float
    second_interval: tuple[float, float]
    difference: float  # second - first
    difference_interval: tuple[float, float]
    exact: float  # the share of answers both judges rated alike
    kappa: float  # Cohen's kappa, linear weights over ``levels`` (NaN where no disagreement is to be expected)
    confusion: tuple[tuple[int, ...], ...]  # answers by (first's level, second's level)
    fixed: int = 0  # parts scored without a judge (in both scores, as the run scores them; not in the agreement)


def agreement(group: str, pairs: Sequence[RatingPair], levels: Sequence[float], scale: float) -> Agreement:
    """The agreement of the two judges over ``pairs`` (at least one rated by both), whose ratings are among
    ``levels`` (empty: the ratings the pairs hold). The scores count every pair, those settled without a
    judge too (the task's scale); exact agreement, kappa and the confusion only the judged ones."""
    import numpy as np

    judged = [pair for pair in pairs if not pair.fixed]
    if not judged:
        raise ValueError(f"{group}: no answer rated by both judges")
    levels = tuple(sorted(levels or {rating for pair in pairs for rating in (pair.first, pair.second)}))
    first = np.array([pair.first for pair in pairs], dtype=float)
    second = np.array([pair.second for pair in pairs], dtype=float)
    picks = np.random.default_rng(0).integers(0, len(pairs), size=(RESAMPLES, len(pairs)))
    first_means, second_means = first[picks].mean(axis=1) * scale, second[picks].mean(axis=1) * scale
    rated_first = np.array([pair.first for pair in judged], dtype=float)
    rated_second = np.array([pair.second for pair in judged], dtype=float)
    confusion = confusion_matrix(rated_first, rated_second, levels)
    return Agreement(group, len(judged), scale, levels, float(first.mean() * scale), _percentiles(first_means),
                     float(second.mean() * scale), _percentiles(second_means),
                     float((second.mean() - first.mean()) * scale), _percentiles(second_means - first_means),
                     float(np.mean(rated_first == rated_second)), weighted_kappa(confusion),
                     tuple(tuple(int(count) for count in row) for row in confusion), len(pairs) - len(judged))


def confusion_matrix(first: Sequence[float], second: Sequence[float], levels: Sequence[float]):
    """Counts of answers by (first judge's level, second judge's level); a rating off ``levels`` raises."""
    import numpy as np

    index = {float(level): position for position, level in enumerate(levels)}
    counts = np.zeros((len(levels), len(levels)), dtype=int)
    for a, b in zip(first, second):
        if float(a) not in index or float(b) not in index:
            raise ValueError(f"rating {a if float(a) not in index else b} is not on the scale {list(levels)}")
        counts[index[float(a)], index[float(b)]] += 1
    return counts


def weighted_kappa(confusion) -> float:
    """Cohen's (1968) weighted kappa of a confusion matrix over ordered levels, linear weights
    |i - j| / (k - 1): 1 - sum(w * observed) / sum(w * expected by chance from the marginals). NaN
    where chance predicts no disagreement (both judges gave one and the same rating throughout)."""
    import numpy as np

    observed = np.asarray(confusion, dtype=float)
    size = observed.shape[0]
    if size < 2 or observed.sum() == 0:
        return math.nan
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    weights = np.abs(np.subtract.outer(np.arange(size), np.arange(size))) / (size - 1)
    chance = (weights * expected).sum()
    return float(1 - (weights * observed).sum() / chance) if chance > 0 else math.nan


def most_disagreed(pairs: Sequence[RatingPair], count: int) -> list[RatingPair]:
    """The ``count`` pairs whose two ratings are furthest apart (ties by group and id), none rated alike."""
    apart = [pair for pair in pairs if pair.first != pair.second]
    return sorted(apart, key=lambda pair: (-abs(pair.first - pair.second), pair.group, pair.id))[:count]


def _percentiles(values) -> tuple[float, float]:
    import numpy as np

    tail = (1 - CONFIDENCE) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))
