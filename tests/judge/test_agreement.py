"""Two judges' agreement: Cohen's weighted kappa against a hand-computed case and scikit-learn, scores and
their difference with paired bootstrap intervals, exact agreement, the answers most disagreed on."""

import math
import random

import pytest
from sklearn.metrics import cohen_kappa_score

from lmms_egoplan.judge.agreement import RatingPair, agreement, confusion_matrix, most_disagreed, weighted_kappa

LEVELS = (0, 0.5, 1)


def pairs_of(first, second, group="g"):
    return [RatingPair(group, f"{group}/{i}", a, b, f"answer {i}", "", "")
            for i, (a, b) in enumerate(zip(first, second))]


def test_weighted_kappa_of_a_hand_computed_case():
    # first: 0 0 0.5 1 1 1; second: 0 0.5 0.5 1 1 0. Linear weights 0, 1/2, 1.
    # Observed (rows: first, columns: second): [[1,1,0],[0,1,0],[1,0,2]]; weighted disagreement
    # 1 * 1/2 (0 vs 0.5) + 1 * 1 (1 vs 0) = 1.5 of 6. Marginals: first (2,1,3), second (2,2,2): expected
    # counts r_i * c_j / 6, weighted sum = (2*2*0.5 + 2*2*1 + 1*2*0.5 + 1*2*0.5 + 3*2*1 + 3*2*0.5) / 6 = 17 / 6.
    # kappa = 1 - 1.5 / (17 / 6) = 1 - 9 / 17 = 8 / 17.
    confusion = confusion_matrix([0, 0, 0.5, 1, 1, 1], [0, 0.5, 0.5, 1, 1, 0], LEVELS)
    assert confusion.tolist() == [[1, 1, 0], [0, 1, 0], [1, 0, 2]]
    assert weighted_kappa(confusion) == pytest.approx(8 / 17, abs=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_kappa_equals_scikit_learns_on_random_ratings(seed):
    rng = random.Random(seed)
    levels = tuple(range(11)) if seed % 2 else LEVELS
    first = [rng.choice(levels) for _ in range(80)]
    second = [min(levels[-1], max(levels[0], a + rng.choice([-1, 0, 0, 1]) * (levels[1] - levels[0]))) for a in first]
    labels = [str(level) for level in levels]
    expected = cohen_kappa_score([str(a) for a in first], [str(b) for b in second], labels=labels, weights="linear")
    assert weighted_kappa(confusion_matrix(first, second, levels)) == pytest.approx(expected, abs=1e-12)
    assert agreement("g", pairs_of(first, second), levels, 10.0).kappa == pytest.approx(expected, abs=1e-12)


def test_scores_difference_exact_agreement_and_their_intervals():
    first, second = [1, 1, 0.5, 0, 1, 0.5] * 10, [1, 0.5, 0.5, 0, 1, 0] * 10
    found = agreement("ego_think_counting", pairs_of(first, second), LEVELS, 100.0)
    assert (found.pairs, found.first_score, found.second_score) == (60, pytest.approx(200 / 3), pytest.approx(50.0))
    assert found.difference == pytest.approx(50.0 - 200 / 3) and found.exact == pytest.approx(4 / 6)
    for value, (low, high) in ((found.first_score, found.first_interval), (found.second_score, found.second_interval),
                               (found.difference, found.difference_interval)):
        assert low <= value <= high and high - low < 40
    assert found.difference_interval[1] < 0  # the second judge is stricter on every resample
    assert agreement("ego_think_counting", pairs_of(first, second), LEVELS, 100.0) == found  # seeded: repeatable


def test_judges_that_give_one_rating_throughout_leave_kappa_without_value_and_off_scale_ratings_are_refused():
    assert math.isnan(agreement("g", pairs_of([1, 1, 1], [1, 1, 1]), LEVELS, 1.0).kappa)  # chance agrees too
    assert agreement("g", pairs_of([1, 0, 0.5], [1, 1, 1]), LEVELS, 1.0).kappa == 0.0  # as scikit-learn's
    with pytest.raises(ValueError, match=r"rating 0.7 is not on the scale"):
        agreement("g", pairs_of([1, 0.7], [1, 1]), LEVELS, 1.0)
    with pytest.raises(ValueError, match="no answer rated by both judges"):
        agreement("g", [], LEVELS, 1.0)


def test_the_answers_most_disagreed_on_come_first_and_agreed_ones_never():
    pairs = pairs_of([0, 1, 0.5, 1, 0], [1, 1, 0, 0.5, 0])
    assert [(p.id, p.first, p.second) for p in most_disagreed(pairs, 10)] == [
        ("g/0", 0, 1), ("g/2", 0.5, 0), ("g/3", 1, 0.5)]
    assert len(most_disagreed(pairs, 1)) == 1
