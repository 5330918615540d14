"""The fast LCS equals ActPlan-1K's release algorithm (auto_lcs/lcs.py) on every pair.

The oracle is ``lmms_egoplan.demo.actplan.release_lcs``: the release's memoised recursion with
its is_similar (one-sentence encodings of all-MiniLM-L6-v2, util.cos_sim, >= threshold). Its
encodings are memoised here (the release re-encodes at every cell; same values, much slower).
"""

import functools
import json
import random

import numpy as np
import pytest

from lmms_egoplan.actplan.lcs import StepMatcher, lcs_length, normalized_lcs
from lmms_egoplan.demo.actplan import make_activities, model_output, release_lcs, vlm_plan, write_release_dataset
from lmms_egoplan.report.intervals import bootstrap_interval


def recursive_lcs(matches) -> int:
    """The release's recursion over a given match matrix (candidate steps x reference steps)."""

    @functools.cache
    def lcs(m, n):
        if m == 0 or n == 0:
            return 0
        if matches[m - 1][n - 1]:
            return 1 + lcs(m - 1, n - 1)
        return max(lcs(m, n - 1), lcs(m - 1, n))

    return lcs(len(matches), len(matches[0]) if matches else 0)


def test_iterative_dp_equals_the_recursion_for_any_match_relation():
    # Embedding matches are not transitive; the recurrence must agree for arbitrary matrices.
    rng = np.random.default_rng(0)
    for _ in range(300):
        m, n = rng.integers(0, 12, size=2)
        matches = (rng.random((m, n)) < rng.uniform(0.05, 0.6)).tolist()
        assert lcs_length(matches) == recursive_lcs(matches)
    assert normalized_lcs(3, 4, 6) == 0.5 and normalized_lcs(0, 0, 0) == 0.0


@pytest.fixture(scope="module")
def matcher():
    return StepMatcher()  # all-MiniLM-L6-v2 on the CPU


@pytest.fixture(scope="module")
def encode(matcher):
    return functools.lru_cache(maxsize=None)(lambda step: matcher.model.encode(step, convert_to_tensor=True,
                                                                               show_progress_bar=False))


def near_threshold_pairs(matcher, steps, low=0.76, high=0.84):
    """Step pairs whose cosine is close to 0.8: where a careless implementation would differ."""
    vectors = np.stack(matcher.embeddings(steps))
    cosines = vectors @ vectors.T
    return [(steps[i], steps[j]) for i, j in zip(*np.nonzero((cosines > low) & (cosines < high))) if i < j]


def test_fast_lcs_equals_the_release_on_realistic_and_borderline_pairs(matcher, encode):
    rng = random.Random(1)
    pairs = []
    for activity in make_activities(2, seed=3):
        for problem in (0, 1):
            gold = activity.in_scene(rng).gold_plan(problem, rng.randrange(2))[:12]
            pairs.append((vlm_plan(gold, rng, rng.choice((0.3, 0.9))), gold))
    steps = sorted({s for pair in pairs for plan in pair for s in plan})
    borderline = near_threshold_pairs(matcher, steps)
    assert len(borderline) >= 5
    for _ in range(3):  # plans built from steps whose matches hinge on cosines near 0.8
        chosen = rng.sample(borderline, 5)
        pairs.append(([a for a, _ in chosen], [b for _, b in rng.sample(chosen, len(chosen))]))
    pairs.append((["walk_to(table)", ""], ["walk_to(table)", "grab(cup)", ""]))  # the release's trailing empty line
    pairs.append(([], ["walk_to(table)"]))
    fast = matcher.lcs_many(pairs)
    assert fast == [release_lcs(candidate, reference, encode) for candidate, reference in pairs]
    assert len(set(fast)) > 5


def test_a_cosine_on_the_threshold_is_decided_as_the_release_decides(matcher, encode):
    # With the threshold set to a pair's exact release cosine, the batched cosine (which differs in
    # the last float32 bits) must not decide alone: the release says match at >=, no match just above.
    a, b = "place_inside(cabinet, cookie_1)", "place_inside(cabinet_2, cookie)"
    exact = float(matcher.reference_cosine(a, b))
    on = StepMatcher(matcher.encoder, threshold=exact)
    above = StepMatcher(matcher.encoder, threshold=float(np.nextafter(np.float32(exact), np.float32(2))))
    assert on.lcs([a], [b]) == release_lcs([a], [b], encode, threshold=exact) == 1
    assert above.lcs([a], [b]) == release_lcs([a], [b], encode, threshold=above.threshold) == 0
    assert on.rechecked_pairs == above.rechecked_pairs == 1


def test_scoring_command_on_the_release_layout(tmp_path, matcher, encode, capsys):
    from lmms_egoplan.cli import main

    release = write_release_dataset(tmp_path / "release", scenes=1, activities=1, samples=1, models=("gpt-4v",), seed=3)
    # A model whose plans come as free text: parsed steps are scored, format errors reported.
    rng = random.Random(0)
    for gold in release.glob("annotation/*/*/*/sample_*/plan_gold_1.txt"):
        steps = vlm_plan(gold.read_text().split("\n")[:-1], rng, 0.5)
        (gold.parent / "plan_chatty.txt").write_text(model_output(steps, rng))
    output = tmp_path / "scores.jsonl"
    assert main(["actplan-score", "--data_root", str(release), "--steps", "lines", "--gold", "plan_gold_2.txt",
                 "--output", str(output)]) == 0
    table = capsys.readouterr().out
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert {r["model"] for r in rows} == {"gpt-4v", "chatty"} and len(rows) == 4
    assert [(r["model"], r["split"]) for r in (rows[0], rows[-1])] == [("chatty", "normal"),
                                                                       ("gpt-4v", "counterfactual")]
    for row in (rows[0], rows[-1]):
        folder = release / "annotation" / row["instance_id"]
        # --steps lines reproduces the release's pairs exactly: its text.split("\n"), its gold file.
        candidate = (folder / f"plan_{row['model']}.txt").read_text().split("\n")
        reference = (folder / "plan_gold_2.txt").read_text().split("\n")
        assert row["lcs"] == release_lcs(candidate, reference, encode)
        assert row["norm_lcs"] == row["lcs"] / max(len(candidate), len(reference))
    mean = np.mean([r["lcs"] for r in rows if r["model"] == "gpt-4v"])
    [line] = [line for line in table.splitlines() if line.split()[:2] == ["gpt-4v", "all"]]
    assert float(line.split()[3]) == pytest.approx(mean, abs=0.005)
    # the report's bootstrap interval of each mean, over the model's plans in their order; "—" where they are alike
    # (here the two plans' LCS, and the one plan of each split)
    printed = line.split("%", 1)[1].split()
    for metric, digits, shown in (("lcs", 2, printed[:1]), ("norm_lcs", 3, printed[1:])):
        values = [r[metric] for r in rows if r["model"] == "gpt-4v"]
        low, high = bootstrap_interval(values)
        assert shown == (["—"] if len(set(values)) == 1 else [f"[{low:.{digits}f},", f"{high:.{digits}f}]"]), metric
    assert printed == ["—", "[0.706,", "0.923]"]  # both kinds shown
    assert [line.split()[-2:] for line in table.splitlines() if line.split()[:2] == ["gpt-4v", "normal"]] == [
        ["—", "—"]]


def test_scoring_command_says_what_is_missing_without_a_traceback(tmp_path, capsys):
    from lmms_egoplan.cli import main

    def one_line_error(argv) -> str:
        assert main(argv) == 2
        error = capsys.readouterr().err
        assert error.startswith("lmms-egoplan actplan-score: ") and "Traceback" not in error
        return error

    assert "give --data_root (release layout) and/or --pairs" in one_line_error(["actplan-score"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "no plans to score" in one_line_error(["actplan-score", "--pairs", str(empty)])
    assert f"ActPlan-1K data folder not found: {tmp_path / 'nowhere'}" in one_line_error(
        ["actplan-score", "--data_root", str(tmp_path / "nowhere")])
    assert f"file not found: {tmp_path / 'missing.jsonl'}" in one_line_error(
        ["actplan-score", "--pairs", str(tmp_path / "missing.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"candidate": "grab(x)", "reference": "grab(x)"}) + "\n{candidate: grab(x)}\n")
    assert f"{bad}:2: not JSON" in one_line_error(["actplan-score", "--pairs", str(bad)])
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"candidate": "grab(x)", "reference": "grab(x)"}) + "\n")
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "config.json").write_text("{}")
    assert f"{tmp_path / 'not-a-model'} is no sentence-transformers model folder" in one_line_error(
        ["actplan-score", "--pairs", str(good), "--embedding_model", str(tmp_path / "not-a-model")])
    assert f"no such folder: {tmp_path / 'nowhere'}" in one_line_error(
        ["actplan-score", "--pairs", str(good), "--embedding_model", str(tmp_path / "nowhere")])


@pytest.mark.parametrize("threshold", ["0", "1.5", "high"])
def test_scoring_command_takes_a_cosine_threshold(threshold, capsys):
    from lmms_egoplan.cli import main

    with pytest.raises(SystemExit) as exit:
        main(["actplan-score", "--pairs", "any.jsonl", "--threshold", threshold])
    assert exit.value.code == 2
    assert "argument --threshold:" in capsys.readouterr().err
