"""95 % intervals of a group's mean over its tasks (``report.intervals.group_interval``), from the tasks' logged
samples: a micro mean's the exact binomial over the pooled questions, a macro mean's (the mean of the tasks'
proportions) a stratified percentile bootstrap, checked against scipy's bootstrap and the normal approximation of a
mean of independent proportions; in the report, Cosmos-Reason1's group columns."""

import numpy as np
import pytest
from scipy import stats

from lmms_egoplan.cosmos_reason1.data import CS_CATEGORIES, ER_SOURCES
from lmms_egoplan.cosmos_reason1.sources import task_of
from lmms_egoplan.report import write_report
from lmms_egoplan.report.intervals import (
    STRATIFIED_BOOTSTRAP,
    bootstrap_interval,
    exact_binomial_interval,
    stratified_bootstrap_interval,
)
from lmms_egoplan.report.layout import GroupMean
from lmms_egoplan.report.tables import THIS_RUN
from tests.report.test_report import FACES, read_csv, write_lmms_eval_run

# Right answers of 100 questions per source, as in the paper's table (RoboVQA 110).
STRATA = [[1.0] * right + [0.0] * (size - right) for right, size in ((55, 100), (72, 100), (38, 100), (81, 100),
                                                                      (64, 100), (93, 110))]


def scipy_interval(strata, resamples=20000):
    """scipy's percentile bootstrap of the mean of the samples' means, each sample resampled on its own."""
    def mean_of_means(*samples, axis=-1):
        return np.mean([sample.mean(axis=axis) for sample in samples], axis=0)

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
    assert "scored 0; a bootstrap gives no interval of their macro mean" in row["notes"]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "[0.00, 0.00]" not in markdown
