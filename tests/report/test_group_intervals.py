"""95 % intervals of a group's mean over its tasks (``report.intervals.group_interval``), from the tasks' logged
samples: a micro mean's the exact binomial over the pooled questions, a macro mean's (the mean of the tasks'
proportions) a stratified percentile bootstrap, checked against scipy's bootstrap and the normal approximation of a
mean of independent proportions; in the report, Cosmos-Reason1's group columns."""

import json

import numpy as np
import pytest
from scipy import stats

from lmms_egoplan.cosmos_reason1.data import CS_CATEGORIES, ER_SOURCES
from lmms_egoplan.cosmos_reason1.sources import task_of
from lmms_egoplan.report import write_report
from lmms_egoplan.report.intervals import (
    STRATIFIED_BOOTSTRAP,
    WEIGHTED_STRATIFIED_BOOTSTRAP,
    bootstrap_interval,
    exact_binomial_interval,
    stratified_bootstrap_interval,
)
from lmms_egoplan.report.layout import GroupMean
from lmms_egoplan.report.tables import THIS_RUN
from tests.report.test_report import FACES, judged, read_csv, write_lmms_eval_run

# Right answers of 100 questions per source, as in the paper's table (RoboVQA 110).
STRATA = [[1.0] * right + [0.0] * (size - right) for right, size in ((55, 100), (72, 100), (38, 100), (81, 100),
                                                                      (64, 100), (93, 110))]


def scipy_interval(strata, resamples=20000, weights=None):
    """scipy's percentile bootstrap of the (``weights``-weighted) mean of the samples' means, each sample resampled on
    its own."""
    def mean_of_means(*samples, axis=-1):
        return np.average([sample.mean(axis=axis) for sample in samples], axis=0, weights=weights)

    found = stats.bootstrap(tuple(np.asarray(s) for s in strata), mean_of_means, method="percentile",
                            n_resamples=resamples, vectorized=True, rng=np.random.default_rng(1))
    return found.confidence_interval.low, found.confidence_interval.high


def test_the_macro_interval_is_scipy_s_stratified_bootstrap():
    # Tolerance 0.005 (half a point): the Monte Carlo error of a 2.5 % percentile over 2,000 resamples of a mean
    # whose standard error is about 0.02 is about 0.0012.
    assert stratified_bootstrap_interval(STRATA) == pytest.approx(scipy_interval(STRATA), abs=0.005)


def test_the_macro_interval_is_near_the_normal_one_of_a_mean_of_independent_proportions():
    """By hand: mean +- 1.96 sqrt(sum p_i (1 - p_i) / n_i) / k; the bootstrap agrees within 0.01 at these sizes."""
    proportions = [(sum(s) / len(s), len(s)) for s in STRATA]
    mean = sum(p for p, _ in proportions) / len(proportions)
    half = 1.959964 * sum(p * (1 - p) / n for p, n in proportions) ** 0.5 / len(proportions)
    assert stratified_bootstrap_interval(STRATA) == pytest.approx((mean - half, mean + half), abs=0.01)


def test_the_weighted_interval_is_scipy_s_stratified_bootstrap_of_the_weighted_mean():
    weights = [100, 100, 50, 50, 50, 110]  # far from equal: the weighted and unweighted intervals differ
    found = stratified_bootstrap_interval(STRATA, weights=weights)
    assert found == pytest.approx(scipy_interval(STRATA, weights=weights), abs=0.005)
    assert found != pytest.approx(stratified_bootstrap_interval(STRATA), abs=0.005)
    assert stratified_bootstrap_interval(STRATA, weights=[3] * 6) == pytest.approx(
        stratified_bootstrap_interval(STRATA), abs=1e-12)
    with pytest.raises(ValueError, match="a weight >= 0 per stratum"):
        stratified_bootstrap_interval(STRATA, weights=[1, 2])


def test_one_stratum_is_the_plain_bootstrap_and_the_interval_is_reproducible():
    assert stratified_bootstrap_interval([STRATA[0]]) == bootstrap_interval(STRATA[0])
    assert stratified_bootstrap_interval(STRATA) == stratified_bootstrap_interval(STRATA)
    with pytest.raises(ValueError, match="every stratum"):
        stratified_bootstrap_interval([STRATA[0], []])
    with pytest.raises(ValueError, match="micro or macro"):
        GroupMean(("a",), "median")


# Cosmos-Reason1 parts: (right, questions), AV first, then the common-sense categories.
PARTS = dict(zip((*ER_SOURCES, *CS_CATEGORIES), ((3, 5), (4, 6), (1, 4), (5, 7), (2, 5), (6, 8), (2, 3), (7, 9),
                                                  (4, 8))))


def cosmos_reason1_run(folder, er_macro_written=None, parts=PARTS):
    """A run of the group with each part's 0 / 1 outcomes logged (``parts``: right of questions), the groups' means as
    lmms-eval aggregates them (``er_macro_written``: another ER macro value, as a results file of other members would
    hold)."""
    samples, metrics = {}, {}
    for part, (right, size) in parts.items():
        outcomes = [1] * right + [0] * (size - right)
        logged = {"accuracy_official": None, "micro_official": None, "micro_robust": None}
        if part in ER_SOURCES and part != "av":
            logged["no_av_official"] = None
        samples[task_of(part)] = [{"doc_id": i, **dict.fromkeys(logged, c)} for i, c in enumerate(outcomes)]
        metrics[task_of(part)] = {**dict.fromkeys(logged, right / size), "predictions": size}

    def means(names):
        pooled = [c for part in names for c in [1] * parts[part][0] + [0] * (parts[part][1] - parts[part][0])]
        macro = sum(right / size for right, size in map(parts.get, names)) / len(names)
        return {"accuracy_official": macro, "micro_official": sum(pooled) / len(pooled),
                "micro_robust": sum(pooled) / len(pooled), "predictions": len(pooled)}

    no_av = [part for part in ER_SOURCES if part != "av"]
    metrics["cosmos_reason1_er"] = {**means(ER_SOURCES), "no_av_official": means(no_av)["accuracy_official"]}
    if er_macro_written is not None:
        metrics["cosmos_reason1_er"]["accuracy_official"] = er_macro_written
    metrics["cosmos_reason1_cs"] = means(CS_CATEGORIES)
    metrics["cosmos_reason1"] = means((*ER_SOURCES, *CS_CATEGORIES))
    write_lmms_eval_run(folder, "20260101_104000", metrics, samples)


def interval_of(row, header):
    return float(row[f"{header} (%) 95% low"]), float(row[f"{header} (%) 95% high"])


def strata(parts):
    return [[1.0] * PARTS[part][0] + [0.0] * (PARTS[part][1] - PARTS[part][0]) for part in parts]


def test_the_report_gives_each_group_mean_its_interval_from_its_parts_samples(tmp_path):
    cosmos_reason1_run(tmp_path / "results")
    report = write_report([tmp_path / "results"], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "cosmos_reason1.csv") if r["source"] == THIS_RUN]
    scaled = [100 * bound for bound in exact_binomial_interval(sum(r for r, _ in PARTS.values()),
                                                               sum(n for _, n in PARTS.values()))]
    assert interval_of(row, "Overall micro") == pytest.approx(scaled, abs=1e-6)
    assert interval_of(row, "Overall micro, robust parser") == pytest.approx(scaled, abs=1e-6)
    er = [PARTS[part] for part in ER_SOURCES]
    assert interval_of(row, "ER micro") == pytest.approx(
        [100 * b for b in exact_binomial_interval(sum(r for r, _ in er), sum(n for _, n in er))], abs=1e-6)
    for header, parts in (("ER macro", ER_SOURCES), ("CS macro", CS_CATEGORIES),
                          ("ER macro without AV", [part for part in ER_SOURCES if part != "av"])):
        low, high = interval_of(row, header)
        assert (low, high) == pytest.approx([100 * b for b in stratified_bootstrap_interval(strata(parts))],
                                            abs=1e-6), header
        assert low <= float(row[f"{header} (%)"]) <= high
        # scipy's bootstrap within 3 points: the parts hold 3 to 9 questions, so the percentiles are coarse.
        assert (low, high) == pytest.approx([100 * b for b in scipy_interval(strata(parts))], abs=3), header
    assert STRATIFIED_BOOTSTRAP in report.markdown.read_text()


def test_a_group_whose_value_is_not_its_parts_mean_gets_no_interval_and_says_why(tmp_path):
    cosmos_reason1_run(tmp_path / "results", er_macro_written=0.9)
    write_report([tmp_path / "results"], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "cosmos_reason1.csv") if r["source"] == THIS_RUN]
    assert row["ER macro (%) 95% low"] == "" and row["ER micro (%) 95% low"] != ""
    assert "no interval:" in row["notes"] and "cosmos_reason1_er accuracy_official is 0.9, but the macro mean" \
        in row["notes"]


def test_a_macro_mean_whose_samples_all_score_alike_gets_no_interval_and_says_why(tmp_path):
    """A random model's zeros: the micro means keep their exact binomial interval ([0, x]); a bootstrap of the macro
    means would print [0.00, 0.00], a certainty the samples do not give."""
    cosmos_reason1_run(tmp_path / "results", parts={part: (0, size) for part, (_, size) in PARTS.items()})
    write_report([tmp_path / "results"], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "cosmos_reason1.csv") if r["source"] == THIS_RUN]
    assert interval_of(row, "ER micro")[0] == 0 < interval_of(row, "ER micro")[1]
    for header in ("ER macro", "CS macro", "ER macro without AV"):
        assert row[f"{header} (%) 95% low"] == "" and float(row[f"{header} (%)"]) == 0, header
    assert "no interval: cosmos_reason1_er accuracy_official: every logged sample of " in row["notes"]
    assert "scored 0; a bootstrap gives no interval of their mean" in row["notes"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "[0.00, 0.00]" not in markdown


def test_a_macro_mean_whose_tasks_each_score_alike_within_gets_no_interval_and_the_pooled_mean_keeps_its_own(tmp_path):
    """Parts all right or all wrong: every resample of the stratified bootstrap draws the same means, so its interval
    would be a point; the pooled questions are not alike, and the micro means keep their exact binomial interval."""
    parts = {part: (size * (index % 2), size) for index, (part, (_, size)) in enumerate(PARTS.items())}
    cosmos_reason1_run(tmp_path / "results", parts=parts)
    write_report([tmp_path / "results"], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "cosmos_reason1.csv") if r["source"] == THIS_RUN]
    er = [parts[part] for part in ER_SOURCES]
    assert interval_of(row, "ER micro") == pytest.approx(
        [100 * b for b in exact_binomial_interval(sum(r for r, _ in er), sum(n for _, n in er))], abs=1e-6)
    for header in ("ER macro", "CS macro", "ER macro without AV"):
        assert row[f"{header} (%) 95% low"] == "" and 0 < float(row[f"{header} (%)"]) < 100, header
    assert "scored alike within its task; a bootstrap gives no interval of their mean" in row["notes"]


# EgoThink dimensions' ratings (None: a failed judgement, left out of its dimension's score, not of its weight), in
# the report's order of the dimensions (the bootstrap draws the strata in it).
RATINGS = {"existence": [1, 0, 0.5], "activity": [1, 0.5, 0, 1, None, 1], "counting": [0, 0, 1]}


def egothink_run(folder, ratings):
    """An EgoThink run of three dimensions, the group's mean over the questions as lmms-eval weighs it (each
    dimension's score by all the samples it logged)."""
    scores = {d: [r for r in values if r is not None] for d, values in ratings.items()}
    metrics = {f"ego_think_{d}": {"score": 100 * sum(v) / len(v), "judged": len(v),
                                  "failed": len(ratings[d]) - len(v)} for d, v in scores.items()}
    metrics["ego_think"] = {
        "score": sum(m["score"] for m in metrics.values()) / len(metrics),
        "micro_score": sum(metrics[f"ego_think_{d}"]["score"] * len(ratings[d]) for d in ratings)
        / sum(map(len, ratings.values()))}
    samples = {f"ego_think_{d}": [{"doc_id": i, "score": judged(f"{d}/{i}")} for i in range(len(r))]
               for d, r in ratings.items()}
    write_lmms_eval_run(folder, "20260101_110000", metrics, samples)
    for d, r in ratings.items():
        (folder / f"20260101_110000_judgements_ego_think_{d}.jsonl").write_text(
            "".join(json.dumps({"id": f"{d}/{i}", "rating": v}) + "\n" for i, v in enumerate(r)))
    return scores


def test_the_mean_over_questions_weighs_each_dimension_by_all_it_logged_failed_judgements_included(tmp_path):
    """Without a failed judgement the mean over the questions is the pooled ratings' mean (their bootstrap); with one,
    lmms-eval still weighs its dimension by all its questions, which no pooling gives: the stratified bootstrap of the
    dimensions' scores, each weighted by its logged questions."""
    answered = {d: [0.5 if r is None else r for r in values] for d, values in RATINGS.items()}
    for name, ratings in (("answered", answered), ("failed", RATINGS)):
        scores = egothink_run(tmp_path / name, ratings)
        report = write_report([tmp_path / name], tmp_path / f"report_{name}", FACES)
        (row,) = [r for r in read_csv(tmp_path / f"report_{name}" / "ego_think.csv") if r["source"] == THIS_RUN]
        found = (float(row["Mean over questions (0-100) 95% low"]), float(row["Mean over questions (0-100) 95% high"]))
        strata = [[100 * r for r in scores[d]] for d in ratings]
        if name == "answered":
            expected = bootstrap_interval([value for stratum in strata for value in stratum])
        else:
            expected = stratified_bootstrap_interval(strata, weights=[len(ratings[d]) for d in ratings])
            assert expected != pytest.approx(bootstrap_interval([v for stratum in strata for v in stratum]))
        assert found == pytest.approx(expected, rel=1e-9), name
        assert found[0] <= float(row["Mean over questions (0-100)"]) <= found[1]
        assert "no interval" not in row["notes"], row["notes"]
        assert WEIGHTED_STRATIFIED_BOOTSTRAP in report.markdown.read_text()


def test_robovqa_yes_no_scores_get_the_exact_binomial_interval_on_their_0_100_scale(tmp_path):
    """The binary types' default score is 0 or 100 a question: a proportion on the 0-100 scale. Its interval is
    scipy's exact (Clopper-Pearson) one times 100, also where every answer is wrong (a bootstrap would give none);
    a BLEU type keeps the bootstrap."""
    from lmms_egoplan.robovqa.data import QUESTION_TYPES

    logged = {"success": [0.0, 0.0], "discriminative_affordance": [100.0, 0.0, 100.0, 0.0],
              "next_step": [12.5, 30.0, 0.0]}
    logged.update({kind: [50.0] for kind in QUESTION_TYPES if kind not in logged})
    tasks = {f"robovqa_{kind}": {"score": sum(values) / len(values), "predictions": len(values), "unextracted": 0}
             for kind, values in logged.items()}
    samples = {f"robovqa_{kind}": [{"doc_id": i, "score": value, "micro_score": value}
                                   for i, value in enumerate(values)] for kind, values in logged.items()}
    write_lmms_eval_run(tmp_path / "results", "20260101_105000", tasks, samples)
    write_report([tmp_path / "results"], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "robovqa.csv") if r["source"] == THIS_RUN]

    def bounds(header):
        return float(row[f"{header} (0-100) 95% low"]), float(row[f"{header} (0-100) 95% high"])

    for header, (right, size) in (("Success", (0, 2)), ("Discriminative affordance", (2, 4))):
        exact = stats.binomtest(right, size).proportion_ci(confidence_level=0.95, method="exact")
        assert bounds(header) == pytest.approx((100 * exact.low, 100 * exact.high), abs=1e-6), header
    assert bounds("Success")[1] == pytest.approx(84.19, abs=0.01)
    assert bounds("Next step") == pytest.approx([bound for bound in bootstrap_interval(logged["next_step"])], abs=1e-6)


def test_a_group_of_one_task_without_an_interval_is_said_with_its_task(tmp_path):
    """EgoThink's Forecasting capability is its one dimension: where every rating of it was 0, the row names both in
    one note, not the same samples twice."""
    from lmms_egoplan.egothink.data import CAPABILITIES

    assert CAPABILITIES["forecasting"] == ("forecasting",)
    folder = tmp_path / "run"
    egothink_run(folder, {"forecasting": [0, 0], "existence": [1, 0.5]})
    results = next(folder.glob("*_results.json"))
    data = json.loads(results.read_text())
    data["results"]["ego_think_capability_forecasting"] = {"alias": "forecasting", "score,none": 0.0}
    results.write_text(json.dumps(data))
    write_report([folder], tmp_path / "report", FACES)
    (row,) = [r for r in read_csv(tmp_path / "report" / "ego_think.csv") if r["source"] == THIS_RUN]
    assert [note for note in row["notes"].split("; ") if note.startswith("no interval")] == [
        "no interval: ego_think_forecasting score, ego_think_capability_forecasting score: every logged sample scored "
        "0"], row["notes"]


def test_a_later_report_in_the_same_process_reads_the_logs_and_audit_trails_again(tmp_path):
    """The report kept every log and audit trail it read for the rest of the process, by path: a report written
    after a run's files changed (judged again into the same audit trail) showed the intervals of the old ones."""
    again = {d: [None if r is None else 1.0 - r for r in values] for d, values in RATINGS.items()}
    egothink_run(tmp_path / "changed", RATINGS)
    write_report([tmp_path / "changed"], tmp_path / "report_before", FACES)
    egothink_run(tmp_path / "changed", again)  # the same files, other ratings
    egothink_run(tmp_path / "fresh", again)
    for name in ("changed", "fresh"):
        write_report([tmp_path / name], tmp_path / f"report_{name}", FACES)
    before, changed, fresh = ([r for r in read_csv(tmp_path / report / "ego_think.csv") if r["source"] == THIS_RUN][0]
                              for report in ("report_before", "report_changed", "report_fresh"))
    header = "Mean over questions (0-100) 95% low"
    assert changed[header] == fresh[header] != before[header]
