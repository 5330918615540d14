"""``lmms-egoplan report``: tables equal to the results files, intervals, figures, HTML, and robustness
(partial runs, several runs, other tasks, unreadable files, lm-eval baselines, nothing found)."""

import csv
import dataclasses
import html
import json
import os
import re
import stat
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.colors import to_hex, to_rgb

from lmms_egoplan.actplan.report_face import actplan_splits
from lmms_egoplan.cli import main
from lmms_egoplan.core.text_tables import TERMINAL_WIDTH
from lmms_egoplan.demo.smoke import task_table
from lmms_egoplan.egointent.report_face import egointent_scenarios
from lmms_egoplan.egoplan.report_face import egoplan_breakdowns
from lmms_egoplan.egothink.data import CAPABILITIES
from lmms_egoplan.egothink.report_face import egothink_dimensions
from lmms_egoplan.report import NothingFoundError, write_report
from lmms_egoplan.report.figures import INTERVAL_LABEL, PUBLISHED_COLOUR, table_figures
from lmms_egoplan.report.intervals import bootstrap_interval, exact_binomial_interval
from lmms_egoplan.report.layout import PUBLISHED_FIELDS
from lmms_egoplan.report.runs import load_runs
from lmms_egoplan.report.tables import APART, TEXT_ONLY_BASELINE, THIS_RUN, build_tables
from lmms_egoplan.robovqa.data import QUESTION_TYPES
from lmms_egoplan.suite import report_faces
from tests.report.hostile import check_hostile_copies

FACES = report_faces()  # the suite's benchmarks, as lmms-egoplan report reads them
TABLES = [table for face in FACES for table in face.tables]
DIMENSIONS = [name for names in CAPABILITIES.values() for name in names]
# EgoPlan per-sample outcomes: (correct, source, progress bin, similarity level)
EGOPLAN_SAMPLES = [(1, "epic_kitchens", "0_4", "low"), (0, "epic_kitchens", "0_4", "high"),
                   (1, "ego4d", "5_9", "high"), (0, "ego4d", "15_plus", "medium"), (1, "ego4d", "5_9", "low")]


def write_lmms_eval_run(folder, stamp, tasks, samples=None, *, n_samples=None, limit=None, version="0.7.3",
                        model_path="/ckpt/tiny-model", settings=None):
    """A results file as lmms-eval writes it; ``settings``: every task's effective settings (its config's metadata)."""
    folder.mkdir(parents=True, exist_ok=True)
    results = {task: {"alias": task, **{f"{m},none": v for m, v in metrics.items()},
                      **{f"{m}_stderr,none": "N/A" for m in metrics}} for task, metrics in tasks.items()}
    data = {"results": results, "n-samples": n_samples or {}, "config": {"model": "egoplan_hf", "limit": limit,
            "model_args": f"pretrained={model_path}"}, "model_name": model_path, "lmms_eval_version": version,
            "configs": {task: {"task": task, "metadata": {"version": 3, **(settings or {})}} for task in tasks}}
    (folder / f"{stamp}_results.json").write_text(json.dumps(data))
    for task, records in (samples or {}).items():
        (folder / f"{stamp}_samples_{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder / f"{stamp}_results.json"


def egoplan_run(folder, stamp="20260101_100000", **kwargs):
    def accuracy(rows):
        return sum(c for c, *_ in rows) / len(rows)
    metrics = {"accuracy": accuracy(EGOPLAN_SAMPLES), "predictions": len(EGOPLAN_SAMPLES)}
    for index, family in ((1, "source"), (2, "progress"), (3, "similarity")):
        for name in sorted({s[index] for s in EGOPLAN_SAMPLES}):
            rows = [s for s in EGOPLAN_SAMPLES if s[index] == name]
            prefix = "" if family == "source" else f"{family}_"
            metrics[f"accuracy_{prefix}{name}"], metrics[f"n_{prefix}{name}"] = accuracy(rows), len(rows)
    samples = [{"doc_id": i, "accuracy": c, f"accuracy_{src}": c, f"accuracy_progress_{p}": c,
                f"accuracy_similarity_{s}": c} for i, (c, src, p, s) in enumerate(EGOPLAN_SAMPLES)]
    return write_lmms_eval_run(folder, stamp, {"egoplan_val": metrics, "egoplan_test": {"predictions": 3}},
                               {"egoplan_val": samples}, **kwargs)


# EgoPlan-Bench2 per-sample outcomes: (correct, domain, scenario, read by the official parser)
EGOPLAN_BENCH2_SAMPLES = [(1, "daily_life", "cooking", True), (0, "daily_life", "cleaning", False),
                          (1, "work", "car_repair", True), (1, "hobbies", "baking", True)]


def egoplan_bench2_run(folder, stamp="20260101_103000", **kwargs):
    samples = EGOPLAN_BENCH2_SAMPLES
    metrics = {"accuracy": 0.75, "accuracy_official": 0.5, "accuracy_robust": 0.75, "unparseable": 0,
               "unparseable_official": 1, "unparseable_robust": 0, "predictions": len(samples)}
    for index, family in ((1, "domain"), (2, "scenario")):
        for name in {s[index] for s in samples}:
            members = [s[0] for s in samples if s[index] == name]
            metrics[f"accuracy_{family}_{name}"] = sum(members) / len(members)
            metrics[f"n_{family}_{name}"] = len(members)
    logged = [{"doc_id": i, "accuracy": c, f"accuracy_domain_{d}": c, f"accuracy_scenario_{s}": c}
              for i, (c, d, s, _) in enumerate(samples)]
    return write_lmms_eval_run(folder, stamp, {"egoplan_bench2": metrics}, {"egoplan_bench2": logged}, **kwargs)


def cosmos_reason1_run(folder, stamp="20260101_104000", settings=None, **metrics):
    """Each part 2 of 4 right (the robust parser 3), and the groups' means of them; ``metrics``: other values."""
    part = {"accuracy_official": 0.5, "accuracy_robust": 0.75, "micro_official": 0.5, "micro_robust": 0.75,
            "unparseable_official": 1, "unparseable_robust": 0, "disagreements": 1, "predictions": 4, **metrics}
    parts = [f"cosmos_reason1_{name}" for name in ("av", "agibot", "bridgev2", "holoassist", "robofail", "robovqa")]
    parts += [f"cosmos_reason1_cs_{name}" for name in ("space", "time", "other_physics")]
    groups = {group: {**part, "no_av_official": 0.5, "predictions": 4 * size}
              for group, size in (("cosmos_reason1_er", 6), ("cosmos_reason1_cs", 3), ("cosmos_reason1", 9))}
    return write_lmms_eval_run(folder, stamp, {**{task: part for task in parts}, **groups}, settings=settings)


def robovqa_run(folder, stamp="20260101_105000", settings=None):
    """Each question type's default score, and the group's macro and micro means of them (2 questions a type)."""
    types = [f"robovqa_{kind}" for kind in QUESTION_TYPES]
    scores = {task: {"score": 10.0 * (number + 1), "predictions": 2, "unextracted": 0}
              for number, task in enumerate(types)}
    macro = sum(metrics["score"] for metrics in scores.values()) / len(scores)
    return write_lmms_eval_run(folder, stamp, {**scores, "robovqa": {"score": macro, "micro_score": macro,
                                                                      "predictions": 2 * len(types)}},
                               settings=settings)


def judged(request_id):
    return {"judge_parts": {"": {"judge_request_id": request_id, "judge_messages": [{"role": "user", "content": "q"}]}},
            "judge_rubric": "egothink"}


@pytest.fixture
def results_tree(tmp_path):
    return write_results_tree(tmp_path / "results")


def write_results_tree(root: Path) -> Path:
    """A results folder with a run of every benchmark (two of EgoPlan's, the older one replaced by default)."""
    egoplan_run(root / "egoplan" / "tiny-model", stamp="20260101_090000")  # older run: replaced by default
    egoplan_run(root / "egoplan" / "tiny-model")
    ratings = {"existence": [1, 0.5, 0], "counting": [1, 1]}
    think = {f"ego_think_{d}": {"score": 100 * sum(ratings.get(d, [0.5])) / len(ratings.get(d, [0.5])), "judged": 1}
             for d in DIMENSIONS}
    think.update({f"ego_think_capability_{c}": {"score": 40.0 + i} for i, c in enumerate(CAPABILITIES)})
    think["ego_think"] = {"score": 45.5, "micro_score": 46.25}
    think_samples = {f"ego_think_{d}": [{"doc_id": i, "score": judged(f"{d}/{i}")} for i in range(len(r))]
                     for d, r in ratings.items()}
    folder = root / "egothink" / "tiny-model"
    write_lmms_eval_run(folder, "20260101_110000", think, think_samples)
    egoplan_bench2_run(root / "egoplan_bench2" / "tiny-model")
    cosmos_reason1_run(root / "cosmos_reason1" / "tiny-model")
    robovqa_run(root / "robovqa" / "tiny-model")
    for d, r in ratings.items():
        (folder / f"20260101_110000_judgements_ego_think_{d}.jsonl").write_text(
            "".join(json.dumps({"id": f"{d}/{i}", "rating": v}) + "\n" for i, v in enumerate(r)))
    write_lmms_eval_run(root / "egointent" / "tiny-model", "20260101_120000", {"egointent": {
        "overall": 30.0, "local_intent": 20.0, "global_intent": 40.0, "next_step_plan": 30.0, "indoor": 25.0,
        "outdoor": 35.0, "scenario_kitchen": 10.0, "scenario_yard": 50.0, "scenario_bedroom": 90.0}},
        n_samples={"egointent": {"original": 10, "effective": 4}}, limit=4)
    plans = {"lcs": 3.0, "lcs_normal": 4.0, "lcs_counterfactual": 2.0, "norm_lcs": 0.5, "norm_lcs_normal": 0.6,
             "norm_lcs_counterfactual": 0.4, "bleurt_accuracy": 0.25, "format_error_rate": 0.1, "plan_length": 12.0}
    write_lmms_eval_run(root / "actplan" / "tiny-model", "20260101_130000", {
        "actplan1k": plans, "actplan1k_text_only": {**plans, "norm_lcs": 0.3}, "mmmu_val": {"accuracy": 0.4}})
    lm_eval = root / "lm-eval" / "tiny-lm"
    lm_eval.mkdir(parents=True)
    (lm_eval / "results_2026-01-01T14-00-00.123456.json").write_text(json.dumps({
        "results": {"egoplan_val_blind": {"alias": "egoplan_val_blind", "accuracy,none": 0.4,
                                          "accuracy_stderr,none": 0.2, "accuracy_ego4d,none": 0.5}},
        "configs": {}, "versions": {"egoplan_val_blind": 1}, "n-shot": {"egoplan_val_blind": 0},
        "config": {"model": "hf", "model_args": "pretrained=tiny-lm", "limit": None},
        "n-samples": {"egoplan_val_blind": {"original": 5, "effective": 5}}, "model_name": "tiny-lm"}))
    (lm_eval / "samples_egoplan_val_blind_2026-01-01T14-00-00.123456.jsonl").write_text(
        "".join(json.dumps({"doc_id": i, "accuracy": c}) + "\n" for i, c in enumerate([1, 0, 1, 0, 0])))
    (root / "broken").mkdir()
    (root / "broken" / "20250101_000000_results.json").write_text("{not json")
    return root


def read_csv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def markdown_rows(markdown: str, needle: str) -> list[tuple[str, str]]:
    """report.md's rows holding ``needle``, each as (the row's line, its notes joined by "; "): the notes numbered
    beside its model ("| model [1, 3] |"), listed below its table."""
    lines, found = markdown.splitlines(), []
    for index, line in enumerate(lines):
        if not line.startswith("| ") or needle not in line:
            continue
        marks = re.match(r"\| [^|]*? \[([\d, ]+)\] \|", line)
        listed = {}
        for later in lines[index + 1:]:
            if later.startswith("## "):
                break
            if numbered := re.match(r"(\d+)\. (.*)", later):
                listed[numbered.group(1)] = numbered.group(2)
        found.append((line, "; ".join(listed[mark] for mark in marks.group(1).split(", ")) if marks else ""))
    return found


def markdown_row(markdown: str, needle: str) -> str:
    """The first report.md row holding ``needle``, its notes after it (``markdown_rows``)."""
    line, notes = markdown_rows(markdown, needle)[0]
    return f"{line} {notes}"


def test_published_rows_name_paper_table_model_and_values_of_the_table_columns():
    for face in FACES:  # each benchmark's rows (its folder's published_results.json) are of its own tables
        assert {r["benchmark"] for r in face.published} == {table.key for table in face.tables}
    rows = [row for face in FACES for row in face.published]
    columns = {b.key: {c.published_key for c in b.columns} for b in TABLES}
    for row in rows:
        assert PUBLISHED_FIELDS <= row.keys() and row["model"]
        # a paper's table (or two), a model's README or project page table (SEED-Bench-R1, HY-Embodied, PhysBrain
        # 1.5), EgoIntent's authors' leaderboard file, the PAI-Bench leaderboard (Cosmos-Reason1), or a lineage's own
        # results file (MultiNet's Magma run of RoboVQA)
        assert row["table"].startswith(("Table ", "README", "project page", "results file ")) or row["table"] in {
            "results/leaderboard.md", "leaderboard"}
        assert row["values"] and set(row["values"]) <= columns[row["benchmark"]], row
        assert all(isinstance(v, float) for v in row["values"].values())
    gpt4v = next(r for r in rows if r["paper"] == "EgoThink" and r["model"] == "GPT-4V")["values"]
    assert gpt4v["average"] == pytest.approx(sum(gpt4v[d] for d in DIMENSIONS) / 12, abs=0.05)


def test_intervals_against_hand_computed_cases():
    # Clopper-Pearson for 3 of 10 and 1 of 4 (standard tables), and the ends.
    assert exact_binomial_interval(3, 10) == pytest.approx((0.0667395, 0.6524529), abs=1e-6)
    assert exact_binomial_interval(1, 4) == pytest.approx((0.0063095, 0.8058796), abs=1e-6)
    assert exact_binomial_interval(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
    assert bootstrap_interval([2.0] * 7) == (2.0, 2.0)
    low, high = bootstrap_interval([0.0, 100.0] * 50)
    assert 35 < low < 50 < high < 65  # mean 50, standard error 5: about 50 +- 9.8


def test_every_number_in_the_tables_equals_its_results_file(results_tree, tmp_path):
    report = write_report([results_tree], tmp_path / "report", FACES)
    val = read_csv(tmp_path / "report" / "egoplan_val.csv")
    ours = [r for r in val if r["source"] == THIS_RUN]
    assert [r["task"] for r in ours] == ["egoplan_val"]
    results = json.loads((results_tree / "egoplan" / "tiny-model" / "20260101_100000_results.json").read_text())
    metrics = results["results"]["egoplan_val"]
    for header, metric in (("Accuracy (%)", "accuracy"), ("In-domain, EpicKitchens (%)", "accuracy_epic_kitchens"),
                           ("Out-of-domain, Ego4D (%)", "accuracy_ego4d")):
        assert float(ours[0][header]) == metrics[f"{metric},none"] * 100
    outcomes = [c for c, *_ in EGOPLAN_SAMPLES]
    low, high = exact_binomial_interval(sum(outcomes), len(outcomes))
    assert (float(ours[0]["Accuracy (%) 95% low"]),
            float(ours[0]["Accuracy (%) 95% high"])) == pytest.approx((low * 100, high * 100))
    markdown = report.markdown.read_text()
    assert f"| 60.00 [{low * 100:.2f}, {high * 100:.2f}] |" in markdown
    assert "| 5 |" in markdown and "20260101_100000" not in markdown  # the sample count; no submission file

    think = read_csv(tmp_path / "report" / "ego_think.csv")[0]
    assert float(think["Existence (0-100)"]) == 50.0 and float(think["Counting (0-100)"]) == 100.0 \
        and float(think["Average (0-100)"]) == 45.5
    assert float(think["Object (capability) (0-100)"]) == 40.0
    assert (float(think["Existence (0-100) 95% low"]), float(think["Existence (0-100) 95% high"])) == pytest.approx(
        tuple(100 * bound for bound in bootstrap_interval([1, 0.5, 0])))
    # Every rating the same: a bootstrap's [100, 100] would claim a certainty two answers do not give.
    assert think["Counting (0-100) 95% low"] == "" and ("no interval: ego_think_counting score: every logged sample "
                                                        "scored 100; a bootstrap gives no interval of their mean") \
        in think["notes"]
    assert think["Activity (0-100) 95% low"] == ""  # no samples logged for it
    published = [r for r in read_csv(tmp_path / "report" / "ego_think.csv") if r["source"].startswith("published")]
    assert float(next(r for r in published if r["model"] == "GPT-4V")["Average (0-100)"]) == 65.5
    # Two averages, each beside its own kind: the paper's over the twelve dimensions, PhysBrain's over the questions.
    assert float(think["Mean over questions (0-100)"]) == 46.25
    physbrain = next(r for r in published if r["model"] == "LLaVA-1.5-7B" and "PhysBrain" in r["source"])
    assert physbrain["Average (0-100)"] == "" and float(physbrain["Mean over questions (0-100)"]) == 51.6
    assert next(r for r in published if r["model"] == "GPT-4V")["Mean over questions (0-100)"] == ""

    intent = read_csv(tmp_path / "report" / "egointent.csv")[0]
    # written as global_intent (its name up to version 2), shown as Procedural Intent
    assert [float(intent[h]) for h in ("Local Intent (0-100)", "Procedural Intent (0-100)", "Next-Plan (0-100)",
                                        "Overall (0-100)")] == [20, 40, 30, 30]
    assert "partial: 4 of 10 samples (--limit 4)" in intent["notes"] and "no intervals" in intent["notes"]
    plans = {r["task"]: r for r in read_csv(tmp_path / "report" / "actplan1k.csv") if r["source"] == THIS_RUN}
    assert (float(plans["actplan1k"]["BLEURT accuracy (%)"]) == 25.0
            and float(plans["actplan1k_text_only"]["Norm. LCS (0-1)"]) == 0.3)
    bench2 = read_csv(tmp_path / "report" / "egoplan_bench2.csv")[0]
    assert [float(bench2[h]) for h in ("Accuracy (%)", "Daily life (%)", "Work (%)",
                                       "Official parser (%)")] == [75, 50, 100, 50]
    assert (bench2["Hobbies (%)"] == "100.0" and bench2["Recreation (%)"] == ""
            and float(bench2["Unparseable, official parser"]) == 1)
    low, high = exact_binomial_interval(1, 2)  # daily life: 1 of 2 right
    assert (float(bench2["Daily life (%) 95% low"]),
            float(bench2["Daily life (%) 95% high"])) == pytest.approx((low * 100, high * 100))
    assert report.lines[0] == "Ignored (no table of the suite reads them): mmmu_val"
    assert report.lines[1].startswith("Unreadable: ") and "broken/20250101_000000_results.json" in report.lines[1]


def test_lm_eval_results_are_text_only_baseline_rows_of_the_same_table(results_tree, tmp_path):
    write_report([results_tree], tmp_path / "report", FACES)
    blind = [r for r in read_csv(tmp_path / "report" / "egoplan_val.csv") if r["source"] == TEXT_ONLY_BASELINE]
    assert len(blind) == 1 and blind[0]["model"] == "tiny-lm" and blind[0]["input"] == "text only"
    assert float(blind[0]["Accuracy (%)"]) == 40.0 and float(blind[0]["Out-of-domain, Ego4D (%)"]) == 50.0
    low, high = exact_binomial_interval(2, 5)
    assert float(blind[0]["Accuracy (%) 95% low"]) == pytest.approx(low * 100)


def test_latest_run_by_default_every_run_with_all_runs(results_tree):
    latest, _ = load_runs([results_tree / "egoplan"])
    every, _ = load_runs([results_tree / "egoplan"], all_runs=True)
    assert [f"{r.stamp:%H}" for r in latest] == ["10"] and sorted(f"{r.stamp:%H}" for r in every) == ["09", "10"]
    tables, _ = build_tables(every, FACES)
    assert len(tables[0].user_rows) == 2


def test_figures_have_a_bar_or_cell_per_model_and_bin(results_tree):
    runs, _ = load_runs([results_tree])
    tables = {t.name: t for t in build_tables(runs, FACES)[0]}
    figure = egoplan_breakdowns(tables["egoplan_val"])
    progress, similarity = figure.axes[:2]
    # two rows (the multimodal run and the lm-eval baseline, which has no bins): bars of the run only
    assert [t.get_text() for t in progress.get_xticklabels()] == ["0-4", "5-9", "15+"]
    assert [round(p.get_height(), 6) for p in progress.patches] == [50.0, 100.0, 0.0]
    assert [t.get_text() for t in similarity.get_xticklabels()] == ["low", "medium", "high"]
    assert [round(p.get_height(), 6) for p in similarity.patches] == [100.0, 0.0, 50.0]
    assert [t.get_text() for t in progress.texts] == ["n=2", "n=2", "n=1"]
    assert len(progress.lines) > 0  # error bars from the samples
    # the chance line at 25%, and one legend for the figure, above the panels (none over the data)
    assert [line.get_ydata() for line in progress.lines if line.get_linestyle() == "--"] == [[25.0, 25.0]]
    assert len(figure.legends) == 1 and all(axes.get_legend() is None for axes in figure.axes)
    assert "chance (25%" in " ".join(t.get_text() for t in figure.legends[0].get_texts())
    assert [t.get_text() for t in figure.legends[0].get_texts()].count(INTERVAL_LABEL) == 1  # the error bars, once

    think_table = tables["ego_think"]
    think = egothink_dimensions(think_table).axes[0]
    # your run: 12 coloured bars; the published models: grey dots (one per model and dimension) over a grey band
    assert [round(p.get_height(), 6) for p in think.patches] == [50.0] * 6 + [100.0] + [50.0] * 5
    assert all(p.get_facecolor()[:3] != to_rgb(PUBLISHED_COLOUR) for p in think.patches)
    published = [row for row in think_table.rows if row.published]
    # one grey dot per published row that gives the dimension (later reports give some dimensions only)
    given = [sorted(row.values[i] for row in published if row.values[i] is not None) for i in range(len(DIMENSIONS))]
    dots = [c for c in think.collections if isinstance(c, PathCollection)]
    assert all(to_hex(c.get_facecolor()[0]) == PUBLISHED_COLOUR for c in dots) and len(given[0]) == 21
    assert [sorted(c.get_offsets()[:, 1]) for c in dots] == [values for values in given if values]
    # one error bar: existence's ratings vary; counting's are all alike (no interval), the others were not logged
    assert error_bars(think) == [pytest.approx(tuple(100 * b for b in bootstrap_interval([1, 0.5, 0])))]
    intent = egointent_scenarios(tables["egointent"])
    # as the paper's Figure 7: scenarios from the lowest mean score to the highest
    assert [t.get_text() for t in intent.axes[0].get_xticklabels()] == ["kitchen", "yard", "bedroom"]
    assert intent.axes[0].images[0].get_array().tolist() == [[10.0, 50.0, 90.0]]
    plans = actplan_splits(tables["actplan1k"])
    # normal and counterfactual per row, then the published models' overall values (Table 4), grey
    table_4 = [r["values"]["norm_lcs"] for face in FACES for r in face.published
               if r["benchmark"] == "actplan1k" and "norm_lcs" in r["values"]]
    assert [p.get_height() for p in plans.axes[0].patches] == [0.6, 0.6, 0.4, 0.4, *table_4]
    assert [to_hex(p.get_facecolor()) for p in plans.axes[0].patches[4:]] == [PUBLISHED_COLOUR] * len(table_4)
    assert [p.get_height() for p in plans.axes[1].patches] == [0.5, 0.3]


def error_bars(axes) -> list[tuple[float, float]]:
    """The (low, high) of each vertical error bar ``figures.bars`` drew on ``axes``."""
    from matplotlib.collections import LineCollection

    return [(min(segment[:, 1]), max(segment[:, 1])) for collection in axes.collections
            if isinstance(collection, LineCollection) for segment in collection.get_segments()]


def test_a_panel_without_data_says_so(tmp_path):
    write_lmms_eval_run(tmp_path / "r", "20260101_100000", {
        "egoplan_val": {"accuracy": 0.5, "predictions": 2},  # no breakdown bins
        "egointent": {"overall": 20.0, "judged": 3, "failed": 0}})  # no scenarios
    tables = {t.name: t for t in build_tables(load_runs([tmp_path / "r"])[0], FACES)[0]}
    for figure in (egoplan_breakdowns(tables["egoplan_val"]), egointent_scenarios(tables["egointent"])):
        assert all(any(t.get_text().startswith("no data") for t in axes.texts) for axes in figure.axes)
        assert not any(axes.patches or axes.images for axes in figure.axes)


class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_html_is_one_page_with_every_table_and_figure(results_tree, tmp_path):
    report = write_report([results_tree], tmp_path / "report", FACES)
    parser = _Collector()
    parser.feed(report.html.read_text())
    ids = {attrs.get("id") for _, attrs in parser.tags}
    assert {f"table-{b.key}" for b in TABLES} <= ids
    figures = {path.stem for path in report.files if path.suffix == ".svg"}
    assert figures == {"egoplan_breakdowns", "egothink_dimensions", "egointent_scenarios", "actplan_splits",
                       "egoplan_bench2_breakdowns"}
    assert {f"figure-{name}" for name in figures} <= ids
    assert sum(tag == "svg" for tag, _ in parser.tags) >= len(figures)
    assert not [a for t, a in parser.tags if t in ("script", "link", "img") and any("http" in v for v in a.values())]
    assert all(path.exists() and path.with_suffix(".png").exists() for path in report.files if path.suffix == ".svg")


def test_nothing_found_exits_2_naming_the_path(tmp_path, capsys):
    (tmp_path / "other").mkdir()
    write_lmms_eval_run(tmp_path / "other", "20260101_100000", {"mmmu_val": {"accuracy": 0.4}})
    with pytest.raises(NothingFoundError, match="other tasks: mmmu_val"):
        write_report([tmp_path / "other"], tmp_path / "out", FACES)
    assert main(["report", str(tmp_path / "empty-or-missing"), "--output", str(tmp_path / "out")]) == 2
    assert main(["report", str(tmp_path / "other"), "--output", str(tmp_path / "out")]) == 2
    assert "no results of the suite's tasks" in capsys.readouterr().err


def test_a_results_file_of_another_version_is_read_and_named(tmp_path):
    egoplan_run(tmp_path / "r", version="0.3.0")
    runs, unreadable = load_runs([tmp_path / "r"])
    assert not unreadable and runs[0].notes == ["written by lmms-eval 0.3.0; read with the 0.7.x layout"]
    (tmp_path / "r" / "20260101_100001_results.json").write_text(json.dumps({"results": ["not", "an", "object"]}))
    runs, unreadable = load_runs([tmp_path / "r"])
    assert len(runs) == 1 and "no 'results' object" in unreadable[0]


def test_a_row_with_answers_cut_at_the_token_limit_says_so(tmp_path):
    """EgoIntent counts incomplete answers that end unfinished (cut_answers): scored, their missing fields 0,
    and named in the row's notes; where nothing was judged, in the reason too."""
    scores = {"overall": 20.0, "local_intent": 20.0, "procedural_intent": 20.0, "next_step_plan": 20.0,
              "indoor": 20.0, "outdoor": 20.0}
    write_lmms_eval_run(tmp_path / "a", "20260101_100000", {"egointent": {
        **scores, "judged": 5, "failed": 0, "incomplete_answers": 4, "missing_fields": 10, "cut_answers": 3}})
    write_lmms_eval_run(tmp_path / "b", "20260101_110000", {"egointent": {
        **{name: 0.0 for name in scores}, "judged": 0, "failed": 0, "incomplete_answers": 15, "missing_fields": 45,
        "cut_answers": 15}}, n_samples={"egointent": {"original": 15, "effective": 15}})

    def notes(run):
        report = write_report([tmp_path / run], tmp_path / f"report-{run}", FACES)
        [row] = [row for row in read_csv(tmp_path / f"report-{run}" / "egointent.csv")
                 if not row["source"].startswith("published")]
        assert markdown_row(report.markdown.read_text(), "| egointent |").endswith(f"| {row['notes']}")
        return row["notes"]

    cut_some, cut_all = notes("a"), notes("b")
    assert cut_some.startswith("partial: 3 answers cut at the token limit (max_new_tokens), their missing fields "
                               "scored 0") and "not scored" not in cut_some
    assert cut_all.startswith("partial: 15 answers cut at the token limit")
    assert "not scored: 0 judged: 15 of 15 answers incomplete, 15 cut at the token limit" in cut_all


def test_values_that_are_no_score_say_why_in_the_tables_and_figures(tmp_path):
    """Nothing judged (every answer incomplete, or every judgement failed: NaN in older results
    files, null now), every answer unparseable: no bare 0.00 with an interval, but the reason."""
    folder = tmp_path / "r"
    write_lmms_eval_run(folder, "20260101_100000", {
        "egointent": {"overall": 0.0, "local_intent": 0.0, "global_intent": 0.0, "next_step_plan": 0.0, "indoor": 0.0,
                      "outdoor": 0.0, "scenario_kitchen": 0.0, "judged": 0, "failed": 0, "incomplete_answers": 15,
                      "missing_fields": 45},
        "egoplan_val_gen": {"accuracy": 0.0, "accuracy_ego4d": 0.0, "predictions": 8, "unparseable": 8.0},
        "ego_think_existence": {"score": float("nan"), "judged": 0, "failed": 2},
        "ego_think_counting": {"score": None, "judged": 0, "failed": 2},
        "ego_think_spatial": {"score": 50.0, "judged": 2, "failed": 0}},
        {"egoplan_val_gen": [{"doc_id": i, "accuracy": 0.0} for i in range(8)]},
        n_samples={"egointent": {"original": 15, "effective": 15}})
    assert "NaN" in (folder / "20260101_100000_results.json").read_text()  # as older files hold it
    report = write_report([folder], tmp_path / "report", FACES)
    markdown = report.markdown.read_text()
    intent = markdown_row(markdown, "| egointent |")
    assert intent.count("0.00 (not scored)") == 6 and "[" not in intent.split("| video |")[1]  # no interval
    assert "not scored: 0 judged: 15 of 15 answers incomplete" in intent
    generated = markdown_row(markdown, "| egoplan_val_gen |")
    assert "0.00 (not scored)" in generated and "not scored: 8 of 8 answers unparseable" in generated
    think = markdown_row(markdown, "| ego_think |")
    assert think.count("no value") == 2 and "50.0" in think and "nan" not in think.lower().replace("no value", "")
    assert "not scored: ego_think_existence: 0 judged: 2 failed" in think
    assert "not scored: ego_think_counting: 0 judged: 2 failed" in think
    rows = {r["task"]: r for r in read_csv(tmp_path / "report" / "ego_think.csv") if r["source"] == THIS_RUN}
    assert rows["ego_think"]["Existence (0-100)"] == rows["ego_think"]["Counting (0-100)"] == "" \
        and float(rows["ego_think"]["Spatial (0-100)"]) == 50
    # the CSV leaves a value that is no score empty (no tool averages it in), its notes say why; counts are whole
    [intent_csv] = [r for r in read_csv(tmp_path / "report" / "egointent.csv") if r["source"] == THIS_RUN]
    assert intent_csv["Overall (0-100)"] == intent_csv["Local Intent (0-100)"] == intent_csv["Indoor (0-100)"] == ""
    assert (intent_csv["Incomplete answers"], intent_csv["Judgements"], intent_csv["Failed judgements"]) == (
        "15", "0", "0")
    assert "not scored: 0 judged: 15 of 15 answers incomplete" in intent_csv["notes"]
    [generated_csv] = [r for r in read_csv(tmp_path / "report" / "egoplan_val.csv") if r["source"] == THIS_RUN]
    assert generated_csv["Accuracy (%)"] == "" and generated_csv["Unparseable (generated letter)"] == "8"
    assert generated_csv["Samples"] == "8"
    # figures leave them out and name them
    tables = {t.name: t for t in build_tables(load_runs([folder])[0], FACES)[0]}
    intent_figure = egointent_scenarios(tables["egointent"])
    assert not intent_figure.axes[0].images and "0 judged: 15 of 15 answers incomplete" in intent_figure.get_supxlabel()
    assert not egoplan_breakdowns(tables["egoplan_val"]).axes[0].patches
    think_figure = egothink_dimensions(tables["ego_think"])
    assert [p.get_height() for p in think_figure.axes[0].patches] == [50.0]  # spatial; not the two unscored
    assert think_figure.get_supxlabel().splitlines() == [
        "tiny-model · ego_think, Existence: not scored (0 judged: 2 failed)",
        "tiny-model · ego_think, Counting: not scored (0 judged: 2 failed)"]


def test_run_times_carry_their_time_zone(tmp_path):
    """lmms-eval stamps its files in the zone of --timezone (UTC+8 by default); lm-eval records a
    POSIX start time. The report says which zone, and orders runs by the real time."""
    results = egoplan_run(tmp_path / "a", stamp="20260101_100000")  # lmms-eval's default zone: UTC+8
    data = json.loads(results.read_text())
    data["config"]["resolved_cli_args"] = {"timezone": "America/New_York"}
    later = tmp_path / "b" / "20260101_090000_results.json"  # 09:00 in New York is 22:00 in Singapore
    later.parent.mkdir()
    later.write_text(json.dumps(data))
    runs, _ = load_runs([tmp_path / "a", tmp_path / "b"], all_runs=True)
    times = sorted(run.time_text for run in runs)
    assert times == ["2026-01-01 09:00:00 UTC-05:00", "2026-01-01 10:00:00 UTC+08:00"]
    latest, _ = load_runs([tmp_path / "a", tmp_path / "b"])
    assert [run.time_text for run in latest] == ["2026-01-01 09:00:00 UTC-05:00"]  # the later run, in real time
    lm_eval = tmp_path / "c" / "results_2026-01-01T14-00-00.123456.json"
    lm_eval.parent.mkdir()
    lm_eval.write_text(json.dumps({"results": {"egoplan_val_blind": {"accuracy,none": 0.4}}, "date": 1767276000.0,
                                   "config": {"model_args": "pretrained=tiny-lm"}}))
    [baseline], _ = load_runs([lm_eval])
    assert baseline.time_text == "2026-01-01 14:00:00 UTC"
    markdown = write_report([tmp_path / "a"], tmp_path / "report", FACES).markdown.read_text()
    assert "| 2026-01-01 10:00:00 UTC+08:00 |" in markdown


def test_every_output_file_has_the_permissions_of_the_umask(results_tree, tmp_path):
    previous = os.umask(0o027)
    try:
        report = write_report([results_tree], tmp_path / "report", FACES)
    finally:
        os.umask(previous)
    written = sorted((tmp_path / "report").iterdir())
    assert {report.markdown, report.html, *report.files} == set(written)
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in written} == {path.name: 0o640 for path in written}


def test_the_page_keeps_wide_tables_in_their_own_scrolling_box(results_tree, tmp_path):
    report = write_report([results_tree], tmp_path / "report", FACES)
    page = report.html.read_text()
    style = page[page.index("<style>"):page.index("</style>")]
    assert ".table-box{overflow-x:auto" in style and "figure svg{max-width:100%" in style
    assert page.count('<div class="table-box"><table id="table-') == len(TABLES)


class _Cells(HTMLParser):
    """The text of each table's rows (header first) and of each footnote list, by id."""

    def __init__(self):
        super().__init__()
        self.tables, self.notes, self._where = {}, {}, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._where = self.tables.setdefault(attrs["id"], [])
        elif tag == "ol":
            self._where = self.notes.setdefault(attrs["id"], [])
        elif tag == "tr" and isinstance(self._where, list):
            self._where.append([])
        elif tag in ("td", "th") and self._where:
            self._where[-1].append("")
        elif tag == "li" and self._where is not None:  # a footnote (the contents list is no table's)
            self._where.append("")

    def handle_endtag(self, tag):
        if tag in ("table", "ol"):
            self._where = None

    def handle_data(self, data):
        if self._where and isinstance(self._where[-1], list) and self._where[-1]:
            self._where[-1][-1] += data
        elif self._where and isinstance(self._where[-1], str):
            self._where[-1] += data


def test_the_page_shows_each_tables_main_score_after_the_model_and_judges_and_notes_as_footnotes(results_tree,
                                                                                                 tmp_path):
    report = write_report([results_tree], tmp_path / "report", FACES)
    cells = _Cells()
    cells.feed(report.html.read_text())
    for face in FACES:
        for layout in face.tables:
            header = cells.tables[f"table-{layout.key}"][0]
            assert header[:2] == ["model", face.heading(layout.columns[layout.main_column])], layout.key
            assert "judge" not in header and "notes" not in header and header[2:4] == ["task", "input"]
    think = cells.tables["table-ego_think"]
    assert think[0][1] == "Average (0-100)"
    mine = next(row for row in think[1:] if row[0].startswith("tiny-model"))
    assert mine[1] == "45.5" and mine[2] == "ego_think"
    gpt = next(row for row in think[1:] if row[0].startswith("GPT-4V"))  # its judge and source: footnotes
    marks = [int(mark) for mark in re.findall(r"\[(\d+)\]", gpt[0])]
    footnotes = [cells.notes["notes-ego_think"][mark - 1] for mark in marks]
    assert footnotes[0] == "judge: GPT-4 (snapshot not given), shut down by OpenAI on 2026-10-23"
    assert any(note.startswith("source: ") for note in footnotes)
    assert len(set(cells.notes["notes-ego_think"])) == len(cells.notes["notes-ego_think"])  # a shared text once
    assert max(len(cell) for row in think for cell in row) < 80  # no long text in a cell
    intent = cells.tables["table-egointent"]
    assert intent[0][1] == "Overall (0-100)" and intent[1][1] == "30.00"
    assert "partial: 4 of 10 samples (--limit 4)" in cells.notes["notes-egointent"]


def _report_headers(report) -> dict[str, tuple[list[str], list[str]]]:
    """Each table's report.md header (its first table line after the table's heading) and CSV header, by table."""
    markdown = report.markdown.read_text().splitlines()
    headers = {}
    for path in sorted(report.markdown.parent.glob("*.csv")):
        with open(path, newline="") as handle:
            csv_header = next(csv.reader(handle))
        line = next(line for line in markdown if line.startswith("| ") and line.endswith(" |")
                    and [cell.strip() for cell in line[2:-2].split(" | ")][:2] == csv_header[:2])
        headers[path.stem] = ([cell.strip() for cell in line[2:-2].split(" | ")], csv_header)
    return headers


def test_every_benchmarks_tables_show_the_main_score_second_in_a_fixed_order_and_print_within_120_columns(
        results_tree, tmp_path):
    """Every benchmark's face (a new one too: the results tree must hold a run of it): report.md, the CSV and
    report.html show the model, then the table's main score; the same columns in the same order from results files
    listing their metrics in another order; its console table (the demo's) within 120 columns."""
    with pytest.raises(ValueError, match="its main score 'Nowhere' names none of its columns"):
        dataclasses.replace(FACES[0].tables[0], main="Nowhere")
    report = write_report([results_tree], tmp_path / "report", FACES)
    headers = _report_headers(report)
    layouts = [(face, layout) for face in FACES for layout in face.tables]
    assert set(headers) == {layout.key for _, layout in layouts}  # a table of every benchmark's face
    files = {path: json.loads(path.read_text()) for path in results_tree.rglob("*_results.json")
             if path.parent.name != "broken"}
    for face, layout in layouts:
        main = face.heading(layout.columns[layout.main_column])
        markdown_header, csv_header = headers[layout.key]
        assert markdown_header[:2] == csv_header[:2] == ["model", main], layout.key
        printed = [task_table([(data, "")], face) for data in files.values()
                   if any(layout.reads(task) for task in data["results"])]
        assert printed and all(len(line) <= TERMINAL_WIDTH for text in printed for line in text.splitlines()), \
            layout.key
    for path, data in files.items():  # every metric listed in reverse order
        data["results"] = {task: dict(reversed(values.items())) for task, values in data["results"].items()}
        path.write_text(json.dumps(data))
    assert _report_headers(write_report([results_tree], tmp_path / "report2", FACES)) == headers


def test_a_value_beside_scores_that_measure_nothing_has_no_interval(tmp_path):
    """A plan length of outputs none of which holds a plan: shown, with no interval (it describes nothing scored)."""
    write_lmms_eval_run(tmp_path / "r", "20260101_100000", {"actplan1k": {
        "lcs": 0.0, "norm_lcs": 0.0, "plan_length": 0.0, "no_plan_rate": 1.0}},
        {"actplan1k": [{"doc_id": i, "plan_length": 0.0, "lcs": 0.0} for i in range(4)]},
        n_samples={"actplan1k": {"original": 4, "effective": 4}})
    write_report([tmp_path / "r"], tmp_path / "report", FACES)
    [row] = [row for row in read_csv(tmp_path / "report" / "actplan1k.csv") if row["source"] == THIS_RUN]
    assert row["Plan length (steps)"] == "0.0" and row["Plan length (steps) 95% low"] == ""
    assert "not scored: no plan in 4 of 4 outputs" in row["notes"]


def test_plan_scores_get_intervals_from_the_values_the_run_kept_and_none_without_them(tmp_path):
    """ActPlan-1K scores its plans at aggregation: its sample log holds plans, not values. The interval is the run's
    kept per-plan values' (``sample_scores``); a run that kept none (of an older version) says so, as does one whose
    kept values do not give its reported mean."""
    plans = [{"doc_id": i, "plan_length": 2.0 + i, "lcs": {"instance_id": f"i{i}", "split": "normal", "scope": "all"},
              "norm_lcs": {"instance_id": f"i{i}", "split": "normal", "scope": "all"}} for i in range(4)]
    kept = [{"instance_id": f"i{i}", "split": "normal", "lcs": i, "norm_lcs": i / 4} for i in range(4)]
    for name, metrics, sample_scores in (("kept", {"lcs": 1.5, "norm_lcs": 0.375}, kept),
                                         ("older", {"lcs": 1.5, "norm_lcs": 0.375}, None),
                                         ("other", {"lcs": 2.5, "norm_lcs": 0.375}, kept)):
        folder = write_lmms_eval_run(tmp_path / name, "20260101_100000", {"actplan1k": {
            **metrics, "plan_length": 3.5, "no_plan_rate": 0.0}}, {"actplan1k": plans},
            n_samples={"actplan1k": {"original": 4, "effective": 4}}).parent
        if sample_scores:
            (folder / "20260101_100000_sample_scores_actplan1k.jsonl").write_text(
                "".join(json.dumps(record) + "\n" for record in sample_scores))
        write_report([folder], tmp_path / f"report_{name}", FACES)
        [row] = [row for row in read_csv(tmp_path / f"report_{name}" / "actplan1k.csv") if row["source"] == THIS_RUN]
        bounds = {column: (row[f"{column} 95% low"], row[f"{column} 95% high"])
                  for column in ("LCS (steps)", "Norm. LCS (0-1)")}
        if name == "kept":
            assert bounds == {"LCS (steps)": tuple(map(str, bootstrap_interval([0, 1, 2, 3]))),
                              "Norm. LCS (0-1)": tuple(map(str, bootstrap_interval([0, 0.25, 0.5, 0.75])))}
            assert "no interval" not in row["notes"]
            # the figure's images-vs-text panel draws the interval of the normalised LCS
            [table] = [t for t in build_tables(load_runs([folder])[0], FACES)[0] if t.name == "actplan1k"]
            assert error_bars(actplan_splits(table).axes[1]) == [bootstrap_interval([0, 0.25, 0.5, 0.75])]
        elif name == "older":
            assert bounds == {"LCS (steps)": ("", ""), "Norm. LCS (0-1)": ("", "")}
            assert ("no interval: actplan1k lcs is scored at aggregation and the run kept no per-sample values of it "
                    "(no sample_scores file beside its results)") in row["notes"]
        else:
            assert bounds["LCS (steps)"] == ("", "") and bounds["Norm. LCS (0-1)"] != ("", "")
            assert ("actplan1k lcs is 2.5, but the mean of the per-sample values the run kept "
                    "(20260101_100000_sample_scores_actplan1k.jsonl) is 1.5") in row["notes"]


def test_the_report_says_which_time_zone_its_run_times_are_in(results_tree, tmp_path):
    report = write_report([results_tree], tmp_path / "report", FACES)
    for text in (report.markdown.read_text(), html.unescape(report.html.read_text())):
        assert "Run times are those in the results files' names, each with its time zone" in text
        assert "UTC+08:00 by default, not this machine's" in text


def egoplan_val_rows(folders, *, all_runs=False):
    runs, _ = load_runs(folders, all_runs=all_runs)
    tables, _ = build_tables(runs, FACES)
    table = next(t for t in tables if t.name == "egoplan_val")
    return [row for row in table.user_rows if row.task == "egoplan_val"]


def test_runs_that_differ_only_in_one_setting_are_two_rows_each_labelled_with_it(tmp_path):
    egoplan_run(tmp_path / "eight", stamp="20260101_090000", settings={"num_frames": 8})
    egoplan_run(tmp_path / "four", stamp="20260101_100000", settings={"num_frames": 4})
    rows = egoplan_val_rows([tmp_path])
    assert sorted(row.model for row in rows) == ["tiny-model (num_frames 4)", "tiny-model (num_frames 8)"]


def test_checkpoints_in_folders_of_the_same_name_are_two_models(tmp_path):
    egoplan_run(tmp_path / "a", stamp="20260101_090000", model_path="/ckpt/run-1/final")
    egoplan_run(tmp_path / "b", stamp="20260101_100000", model_path="/ckpt/run-2/final")
    egoplan_run(tmp_path / "c", stamp="20260101_110000", model_path="/other/tiny-model")
    assert sorted(row.model for row in egoplan_val_rows([tmp_path])) == ["run-1/final", "run-2/final", "tiny-model"]


def test_identical_runs_keep_the_latest_and_all_runs_shows_each_told_apart_by_time(tmp_path):
    egoplan_run(tmp_path / "first", stamp="20260101_090000", settings={"num_frames": 8})
    egoplan_run(tmp_path / "again", stamp="20260101_100000", settings={"num_frames": 8})
    latest = egoplan_val_rows([tmp_path])
    assert [(row.model, row.run.time_text) for row in latest] == [("tiny-model", "2026-01-01 10:00:00 UTC+08:00")]
    every = egoplan_val_rows([tmp_path], all_runs=True)
    assert [(row.model, row.run.time_text[11:19]) for row in every] == [("tiny-model", "09:00:00"),
                                                                        ("tiny-model", "10:00:00")]
    egoplan_run(tmp_path / "other backend", stamp="20260101_110000",
                settings={"num_frames": 8, "scored_tokens": "answer"})
    labelled = sorted(row.model for row in egoplan_val_rows([tmp_path], all_runs=True))
    assert labelled == ["tiny-model (scored_tokens answer)"] + ["tiny-model (scored_tokens unset)"] * 2


def test_a_results_file_with_any_field_of_another_type_is_named_and_left_out(results_tree, tmp_path):
    """Every field of a results file, at any depth, replaced by values of the other types: each copy is
    read or named with its field; the fields the report reads are named; the rest is reported."""
    egothink = next((results_tree / "egothink").rglob("*_results.json"))
    named = check_hostile_copies(egothink, tmp_path, {
        ("config",): (dict,), ("config", "model_args"): (str, dict), ("configs",): (dict,),
        ("configs", "ego_think"): (dict,), ("configs", "ego_think", "metadata"): (dict,), ("n-samples",): (dict,),
        ("model_name",): (str,), ("results", "ego_think"): (dict,)})
    assert len(named) > 20


@pytest.mark.parametrize("name, stamp", [("20261399_999999_results.json", "20261399_999999"),
                                         ("results_2026-02-30T10-00-00.json", "2026-02-30T10-00-00")])
def test_a_results_file_named_with_no_date_is_named_and_left_out_not_a_traceback(name, stamp, results_tree, tmp_path,
                                                                                  capsys):
    """The strptime of lmms-eval's name, or the ISO reading of lm-eval's, was a ValueError traceback: no report."""
    egothink = next((results_tree / "egothink").rglob("*_results.json"))
    renamed = egothink.rename(egothink.with_name(name))
    assert main(["report", str(results_tree), "--output", str(tmp_path / "report")]) == 0
    assert (f"Unreadable: {renamed}: unreadable (its name's date-time '{stamp}' is no date and time)"
            in capsys.readouterr().out)


def test_a_value_outside_its_metrics_range_is_invalid_with_a_note_never_a_number(tmp_path):
    """An accuracy of 1e308 or -5, a count below 0, a judge score of 150, a number written as text:
    "invalid" in every table (a note says what and why), left out of every figure."""
    egoplan_run(tmp_path / "r")
    path = next((tmp_path / "r").glob("*_results.json"))
    data = json.loads(path.read_text())
    data["results"]["egoplan_val"].update({"accuracy,none": 1e308, "accuracy_ego4d,none": -5, "predictions,none": -3,
                                           "accuracy_epic_kitchens,none": "0.5", "accuracy_progress_0_4,none": 2.0,
                                           "n_similarity_low,none": "many"})
    data["results"]["ego_think_counting"] = {"score,none": 150.0, "judged,none": 1}
    path.write_text(json.dumps(data))
    report = write_report([tmp_path / "r"], tmp_path / "report", FACES)
    [val] = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv")
             if row["task"] == "egoplan_val" and row["source"] == THIS_RUN]
    for header in ("Accuracy (%)", "In-domain, EpicKitchens (%)", "Out-of-domain, Ego4D (%)", "Samples"):
        assert val[header] == "invalid"
    assert val["Accuracy (%) 95% low"] == ""  # no interval for what is no value
    for note in ("invalid, left out: accuracy: 1e+308 is outside its range [0, 1]",
                 "invalid, left out: accuracy_ego4d: -5 is outside its range [0, 1]",
                 'invalid, left out: accuracy_epic_kitchens: "0.5" is not a number',
                 "invalid, left out: predictions: -3 is outside its range [0, inf]",
                 "invalid, left out: accuracy_progress_0_4: 2 is outside its range [0, 1]"):
        assert note in val["notes"]
    [think] = [row for row in read_csv(tmp_path / "report" / "ego_think.csv") if row["source"] == THIS_RUN]
    assert think["Counting (0-100)"] == "invalid" and "score: 150 is outside its range [0, 100]" in think["notes"]
    markdown = report.markdown.read_text()
    # the main score right after the model, the three others after what made the row
    assert re.search(r"^\| [^|\n]+ \| invalid \| this run \|[^\n]*\|(?: invalid \|){3}", markdown, re.M)
    assert not re.search(r"\binf\b", markdown.replace("[0, inf]", ""))
    assert "-500" not in markdown and "15000" not in markdown
    tables = {t.name: t for t in build_tables(load_runs([tmp_path / "r"])[0], FACES)[0]}
    figure = egoplan_breakdowns(tables["egoplan_val"])
    progress, similarity = figure.axes[:2]
    assert [round(p.get_height(), 6) for p in progress.patches] == [100.0, 0.0]  # 5-9 and 15+: 0-4 is left out
    assert "n=many" not in [t.get_text() for t in similarity.texts]
    assert "accuracy_progress_0_4: 2 is outside its range [0, 1]" in figure.get_supxlabel()


def test_a_nan_value_reads_invalid_and_a_task_set_to_null_is_noted(tmp_path):
    """docs/reliability.md: NaN (a file another writer wrote: strict JSON has none) is no number, "invalid" with its
    note; a task whose results are null has no value, and the run's notes say so."""
    egoplan_run(tmp_path / "r")
    path = next((tmp_path / "r").glob("*_results.json"))
    data = json.loads(path.read_text())
    data["results"]["egoplan_val"]["accuracy,none"] = float("nan")
    data["results"]["egoplan_test"] = None
    path.write_text(json.dumps(data))  # json writes NaN as NaN
    write_report([tmp_path / "r"], tmp_path / "report", FACES)
    [val] = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv")
             if row["task"] == "egoplan_val" and row["source"] == THIS_RUN]
    assert val["Accuracy (%)"] == "invalid" and "invalid, left out: accuracy: NaN is not a number" in val["notes"]
    assert "'results.egoplan_test' is null: the file holds no value of it" in val["notes"]


def test_report_md_escapes_what_report_html_escapes(tmp_path):
    """Model names, settings and paths holding HTML or Markdown markup stay text in both pages."""
    script, image = "<script>alert(1)</script>", '<img src=x onerror="alert(2)">'
    folder = tmp_path / "runs" / "<b>folder</b>"
    name = f"{script}|![x](http://example.invalid/t.png)"
    egoplan_run(folder, model_path=name, settings={"note": image})
    egoplan_run(tmp_path / "runs" / "other", model_path=name, settings={"note": "plain"})  # rows labelled with the note
    (folder / "20250101_000000_results.json").write_text(json.dumps({"results": {}, "config": image}))  # named
    report = write_report([tmp_path / "runs"], tmp_path / "report", FACES)
    markdown, page = report.markdown.read_text(), report.html.read_text()
    for text in (markdown, page):
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>folder" not in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "&lt;b&gt;folder&lt;/b&gt;" in text
        assert "(note &lt;img src=x onerror=" in text
    assert "![x]\\(http" in markdown and "\\|![x]" in markdown  # neither an image nor a cell's end
    assert "Unreadable: " in markdown and "&lt;b&gt;" not in " ".join(report.lines)  # escaped in pages, not the console


def write_many_runs(root: Path, count: int) -> Path:
    """``count`` checkpoints, each with a run of every benchmark, their scores spread (seeded)."""
    import random

    rng = random.Random(0)
    for index in range(count):
        model = f"/ckpt/{('Qwen2-VL-7B-Instruct', 'llava-onevision-qwen2-7b-ov', 'tiny')[index % 3]}-step-{index:03d}"
        egoplan_run(root / "egoplan" / str(index), model_path=model)
        egoplan_bench2_run(root / "egoplan_bench2" / str(index), model_path=model)
        think = {f"ego_think_{d}": {"score": rng.uniform(0, 100), "judged": 1} for d in DIMENSIONS}
        write_lmms_eval_run(root / "egothink" / str(index), "20260101_110000", think, model_path=model)
        write_lmms_eval_run(root / "egointent" / str(index), "20260101_120000", {"egointent": {
            "overall": rng.uniform(0, 100), "scenario_kitchen": rng.uniform(0, 100),
            "scenario_yard": rng.uniform(0, 100)}},
            model_path=model)
        plans = {"norm_lcs": rng.random(), "norm_lcs_normal": rng.random(), "norm_lcs_counterfactual": rng.random()}
        write_lmms_eval_run(root / "actplan" / str(index), "20260101_130000",
                            {"actplan1k": plans, "actplan1k_text_only": {**plans, "norm_lcs": rng.random()}},
                            model_path=model)
    return root


def test_figures_stay_readable_with_200_runs(tmp_path):
    """Past as many runs as colours, a run is a dot under one legend entry; past 30 groups, bars lie a
    group per line and the figure grows: no legend over a panel, no tick labels over each other, no
    panel squeezed (what the developer saw in Chromium: docs/reliability.md)."""
    runs, _ = load_runs([write_many_runs(tmp_path / "runs", 200)])
    tables, _ = build_tables(runs, FACES)
    assert sorted(len(table.user_rows) for table in tables) == [200, 200, 200, 200, 200, 400]
    for table in tables:
        for name, figure in table_figures(table).items():
            canvas = FigureCanvasAgg(figure)  # as the report's PNGs are drawn
            canvas.draw()
            renderer = canvas.get_renderer()
            panels = [axes for axes in figure.axes if axes.get_label() != "<colorbar>"]
            for axes in panels:
                box = axes.get_window_extent()
                assert box.width > 150 and box.height > 150, name  # not squeezed by a legend or labels
                for legend in figure.legends:
                    assert not legend.get_window_extent(renderer).overlaps(box), name
                    assert len(legend.get_texts()) <= 6, name
                for labels in (axes.get_xticklabels(), axes.get_yticklabels()):
                    boxes = [label.get_window_extent(renderer) for label in labels if label.get_text()]
                    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), name


def test_a_report_into_a_full_disk_names_the_file_it_could_not_write(results_tree, small_disk, capsys):
    disk = small_disk("256k")
    disk.fill()
    assert main(["report", str(results_tree), "--output", str(disk.path / "report")]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"lmms-egoplan report: cannot write {disk.path / 'report'}/")
    assert len(error.splitlines()) == 1
    assert error.endswith(": the disk is full (No space left on device); nothing was written there")
    assert [path.name for path in (disk.path / "report").iterdir()] == []  # no part of a file left


def test_a_report_into_a_folder_that_cannot_be_made_says_why_in_one_line(results_tree, tmp_path, capsys):
    """A file where the folder goes was mkdir's FileExistsError traceback."""
    blocking = tmp_path / "report"
    blocking.write_text("an earlier report.md, named report")
    for output in (blocking, blocking / "html"):
        assert main(["report", str(results_tree), "--output", str(output)]) == 1
        assert capsys.readouterr().err == (f"lmms-egoplan report: the report's folder {output}: cannot make this "
                                           f"folder ({blocking} is a file, where a folder goes)\n")


def test_a_cut_per_sample_log_costs_its_rows_intervals_not_the_report(tmp_path):
    egoplan_run(tmp_path / "r")
    log = next((tmp_path / "r").glob("*_samples_egoplan_val.jsonl"))
    log.write_bytes(log.read_bytes()[:-20])  # its last line cut, as a full disk leaves lmms-eval's appends
    write_report([tmp_path / "r"], tmp_path / "report", FACES)
    [val] = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv")
             if row["task"] == "egoplan_val" and row["source"] == THIS_RUN]
    assert val["Accuracy (%)"] == "60.0" and val["Accuracy (%) 95% low"] == ""
    assert f"no interval: {log}:5: not JSON" in val["notes"]


@pytest.mark.parametrize("case", ["cut at a line's end", "emptied", "of other values"])
def test_a_per_sample_log_that_is_not_the_runs_own_costs_its_rows_interval_saying_why(case, tmp_path):
    """A log cut between two lines (a full disk), emptied, or whose values are not the run's gave, with no note, an
    interval of the samples left (or none), or one around another value than the row's."""
    egoplan_run(tmp_path / "r", n_samples={"egoplan_val": {"original": 5, "effective": 5}})
    results = next((tmp_path / "r").glob("*_results.json"))
    log = next((tmp_path / "r").glob("*_samples_egoplan_val.jsonl"))
    lines = log.read_text().splitlines(keepends=True)
    logged = {"cut at a line's end": lines[:3], "emptied": [],
              "of other values": [line.replace('"accuracy": 0', '"accuracy": 1') for line in lines]}[case]
    log.write_text("".join(logged))
    assert main(["report", str(tmp_path / "r"), "--output", str(tmp_path / "report")]) == 0
    [val] = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv")
             if row["task"] == "egoplan_val" and row["source"] == THIS_RUN]
    assert val["Accuracy (%)"] == "60.0" and val["Accuracy (%) 95% low"] == ""
    assert (f"no interval: {log} logs {len(logged)} samples, the run scored 5: the log is not the whole run's"
            if len(logged) != 5 else f"no interval: {results}: egoplan_val accuracy is 0.6, but the mean of its "
                                     f"logged samples ({log.name}) is 1.0: an interval around another value is left "
                                     f"out") in val["notes"]


def test_every_row_of_a_judged_table_names_its_judge_and_runs_of_other_judge_prompts_are_other_rows(tmp_path):
    judge = {"judge_backend": "openai", "judge_model": "Qwen/Qwen3-30B-A3B-Instruct-2507",
             "judge_revision": "0d7cf23991f47feeb3a57ecb4c9cee8ea4a17bfe", "judge_rubric": "egothink",
             "judge_rubric_version": "1", "judge_prompt_hash": "aaaa",
             "judge_served_model": "Qwen/Qwen3-30B-A3B-Instruct-2507",
             "judge_system_fingerprint": "fp_1"}

    def run(folder, stamp, score, **recorded):
        write_lmms_eval_run(tmp_path / folder, stamp, {"ego_think_counting": {"score": score}},
                            settings={**judge, **recorded})

    run("a", "20260101_100000", 50.0)
    run("b", "20260101_110000", 50.0, judge_system_fingerprint="fp_2")  # the same judge: it replaces run a
    run("c", "20260101_120000", 75.0, judge_prompt_hash="bbbb")  # another judge prompt: a row of its own
    run("d", "20260101_130000", 25.0, judge_model="gpt-4", judge_revision=None, judge_served_model="gpt-4-0613")
    main(["report", str(tmp_path), "--output", str(tmp_path / "report")])
    rows = read_csv(tmp_path / "report" / "ego_think.csv")
    assert all(row["judge"] for row in rows)  # every row of a judged table names its judge
    mine = {row["model"]: row for row in rows if row["source"] == THIS_RUN}
    assert {name: row["Counting (0-100)"] for name, row in mine.items()} == {
        "tiny-model (judge_model Qwen/Qwen3-30B-A3B-Instruct-2507, judge_prompt_hash aaaa, judge_revision "
        "0d7cf23991f47feeb3a57ecb4c9cee8ea4a17bfe, judge_served_model Qwen/Qwen3-30B-A3B-Instruct-2507)": "50.0",
        "tiny-model (judge_model Qwen/Qwen3-30B-A3B-Instruct-2507, judge_prompt_hash bbbb, judge_revision "
        "0d7cf23991f47feeb3a57ecb4c9cee8ea4a17bfe, judge_served_model Qwen/Qwen3-30B-A3B-Instruct-2507)": "75.0",
        "tiny-model (judge_model gpt-4, judge_prompt_hash aaaa, judge_revision null, judge_served_model gpt-4-0613)":
            "25.0"}
    assert {row["judge"] for row in mine.values()} == {
        "openai:Qwen/Qwen3-30B-A3B-Instruct-2507@0d7cf23 (fingerprint fp_2); rubric egothink v1, prompt aaaa",
        "openai:Qwen/Qwen3-30B-A3B-Instruct-2507@0d7cf23 (fingerprint fp_1); rubric egothink v1, prompt bbbb",
        "openai:gpt-4 (served as gpt-4-0613, fingerprint fp_1); rubric egothink v1, prompt aaaa; shut down by OpenAI "
        "on 2026-10-23"}
    published = {(row["source"].split(f", {APART}")[0], row["model"]): row["judge"] for row in rows
                 if row["source"].startswith("published")}
    # the judge a row states (a dated snapshot) is not the runs': shown apart, naming it
    assert {row["source"] for row in rows if row["model"] == "EgoTools-8B"} == {
        f"published (EgoTools, Table 2), {APART}: judge gpt-4o-2024-11-20"}
    assert published[("published (EgoThink, Table 3)",
                      "GPT-4V")] == "GPT-4 (snapshot not given), shut down by OpenAI on 2026-10-23"
    assert published[("published (EgoTools, Table 2)", "EgoTools-8B")].endswith(
        ", to be shut down by OpenAI on 2027-01-14")
    assert "not stated" in published[("published (RAVEN, Table 3)", "RAVEN")]


def test_a_row_whose_model_requests_failed_says_how_many_were_left_out(tmp_path):
    """lmms-eval's API backends give up on requests; the task leaves them out of every score and counts them
    (failed_requests): its row is partial, saying so beside the --limit a run had too."""
    folder = tmp_path / "run"
    metrics = {"accuracy": 0.75, "accuracy_official": 0.5, "accuracy_robust": 0.75, "unparseable": 0,
               "predictions": 4, "failed_requests": 2}
    write_lmms_eval_run(folder, "20260101_103000", {"egoplan_bench2": metrics}, limit=6,
                        n_samples={"egoplan_bench2": {"effective": 6, "original": 10}})
    write_report([folder], tmp_path / "report", FACES)
    [row] = read_csv(tmp_path / "report" / "egoplan_bench2.csv")[:1]
    assert "partial: 6 of 10 samples (--limit 6); 2 of 6 model requests failed, left out of the scores" in row["notes"]
    assert float(row["Accuracy (%)"]) == 75.0  # the score of the answered samples, as the task computed it


def test_a_judged_run_whose_audit_trail_cannot_be_found_gets_no_interval_rather_than_a_wrong_one(tmp_path):
    """Logs of a release whose audit trail carries another second than its results: its ratings cannot be read,
    so its rows have no interval (not one computed over the fixed zeros of incomplete answers alone)."""
    import shutil

    from tests.fixtures import LOGS_BEFORE_RUBRIC_NAMES

    shutil.copytree(LOGS_BEFORE_RUBRIC_NAMES / "intent", tmp_path / "logs")
    write_report([tmp_path / "logs"], tmp_path / "report", FACES)
    ours = next(row for row in read_csv(tmp_path / "report" / "egointent.csv") if row["source"] == THIS_RUN)
    assert float(ours["Overall (0-100)"]) > 0
    assert [ours[f"{name} (0-100) 95% low"] for name in ("Local Intent", "Procedural Intent", "Overall")] == ["", "",
                                                                                                              ""]


def predict_only_egothink_run(folder, stamp="20260102_100000"):
    """An EgoThink --predict_only run as lmms-eval writes it: each task's one metric is ``bypass``, its judge items
    logged under ``bypass`` in its samples file."""
    tasks = {f"ego_think_{d}": {"bypass": 999} for d in DIMENSIONS}
    tasks.update({f"ego_think_capability_{c}": {} for c in CAPABILITIES} | {"ego_think": {}})
    samples = {f"ego_think_{d}": [{"doc_id": 0, "bypass": {"judge_items": {}}}] for d in DIMENSIONS}
    return write_lmms_eval_run(folder, stamp, tasks, samples, settings={"judge_model": "the-run's-judge"})


def rejudged_file(folder, results, score: float, stamp="20260102_120000", judge_model="second-judge"):
    """What ``lmms-egoplan rejudge`` writes for the run of ``results``: each dimension, capability and the average."""
    folder.mkdir(parents=True, exist_ok=True)
    prefix = results.name.removesuffix("_results.json")
    judge = {"judge_backend": "openai", "judge_model": judge_model, "judge_revision": None}
    rows = {f"ego_think_{d}": {"score": score, "judged": 1, "failed": 0, "unusable_rows": 0, "failed_requests": 0,
                               "judge_model": f"openai:{judge_model}", "judge": judge,
                               "samples": str(results.parent / f"{prefix}_samples_ego_think_{d}.jsonl"),
                               "audit_trail": str(folder / f"{stamp}_judgements_ego_think_{d}.jsonl")}
            for d in DIMENSIONS}
    rows.update({f"ego_think_capability_{c}": {"score": score} for c in CAPABILITIES} | {"ego_think": {"score": score}})
    path = folder / f"{stamp}_rejudged.json"
    path.write_text(json.dumps(rows))
    return path


def this_run_row(report_folder):
    [row] = [row for row in read_csv(report_folder / "ego_think.csv") if row["source"] == THIS_RUN]
    return row


def test_a_predict_only_row_says_it_is_not_judged_and_gives_the_rejudge_command(tmp_path):
    results = predict_only_egothink_run(tmp_path / "runs" / "tiny-model")
    write_report([tmp_path / "runs"], tmp_path / "report", FACES)
    row = this_run_row(tmp_path / "report")
    assert row["Average (0-100)"] == "" and row["Existence (0-100)"] == ""
    folder = results.parent
    assert f"not judged (--predict_only): run `lmms-egoplan rejudge {folder} --output {folder}` with the judge " \
           f"running, then this report again" in row["notes"]
    # A later run in the same folder: rejudge would read its samples there, so the command names this run's files.
    write_lmms_eval_run(folder, "20260103_100000", {"ego_think_existence": {"score": 10.0}},
                        {"ego_think_existence": [{"doc_id": 0}]})
    write_report([results], tmp_path / "report2", FACES)
    note = this_run_row(tmp_path / "report2")["notes"]
    assert f"lmms-egoplan rejudge {folder / '20260102_100000_samples_ego_think_activity.jsonl'} " in note


def test_a_predict_only_row_of_a_benchmark_no_judge_scores_says_what_scores_it(tmp_path):
    write_lmms_eval_run(tmp_path / "runs" / "tiny-model", "20260102_100000", {"egoplan_val": {"bypass": 999}},
                        {"egoplan_val": [{"doc_id": 0, "bypass": 999}]})
    write_report([tmp_path / "runs"], tmp_path / "report", FACES)
    [row] = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv") if row["source"] == THIS_RUN]
    assert row["Accuracy (%)"] == ""
    assert ("not scored (--predict_only): the run logged its answers unscored; run lmms-eval with `--tasks "
            "egoplan_val` again without --predict_only, then this report again") in row["notes"]
    assert "not judged" not in row["notes"]


def test_the_report_reads_rejudged_scores_beside_the_run_or_elsewhere_and_prefers_the_latest(tmp_path):
    results = predict_only_egothink_run(tmp_path / "runs" / "tiny-model")
    rejudged_file(results.parent, results, 25.0, stamp="20260102_120000")
    write_report([tmp_path / "runs"], tmp_path / "beside", FACES)
    row = this_run_row(tmp_path / "beside")
    assert float(row["Average (0-100)"]) == pytest.approx(25.0, abs=1e-9)
    assert float(row["Existence (0-100)"]) == pytest.approx(25.0, abs=1e-9)
    assert "not judged" not in row["notes"] and "judged by lmms-egoplan rejudge: " in row["notes"]
    assert row["judge"] == "openai:second-judge"  # the rejudging judge, for the groups too
    # Rejudged again, into another folder: that folder alone finds the run, and the later scores win.
    later = rejudged_file(tmp_path / "elsewhere", results, 75.0, stamp="20260102_130000", judge_model="third-judge")
    for paths, report in (([tmp_path / "elsewhere"], "elsewhere"), ([tmp_path / "runs", later], "both")):
        write_report(paths, tmp_path / report, FACES)
        row = this_run_row(tmp_path / report)
        assert float(row["Average (0-100)"]) == pytest.approx(75.0, abs=1e-9), report
        assert row["judge"] == "openai:third-judge" and str(later) in row["notes"]


def test_a_rejudged_file_that_cannot_be_read_is_named_and_the_run_still_reported(tmp_path):
    results = predict_only_egothink_run(tmp_path / "runs" / "tiny-model")
    (results.parent / "20260102_120000_rejudged.json").write_text("[1, 2")
    report = write_report([tmp_path / "runs"], tmp_path / "report", FACES)
    assert any("20260102_120000_rejudged.json: unreadable" in line for line in report.lines)
    assert "not judged (--predict_only)" in this_run_row(tmp_path / "report")["notes"]


def test_an_lm_eval_run_reads_its_metrics_alone_and_the_side_files_its_run_began(tmp_path):
    """lm-eval 0.4.13 writes a task's name and sample counts beside its metrics; a suite task of an lm-eval run names
    its side files (an audit trail) by the time the run began, before its results' time."""
    from lmms_egoplan.report.runs import load_runs

    folder = tmp_path / "tiny-lm"
    folder.mkdir()
    for written in ("2026-01-01T10-00-00.000001", "2026-01-01T12-00-00.000001"):
        (folder / f"results_{written}.json").write_text(json.dumps({
            "results": {"egoplan_val_blind": {"alias": "egoplan_val_blind", "name": "egoplan_val_blind",
                                              "sample_len": 5, "accuracy,none": 0.4, "accuracy_stderr,none": 0.2,
                                              "sample_count": {"accuracy,none": 5}}},
            "configs": {}, "config": {"model": "hf", "model_args": "pretrained=tiny-lm", "limit": None},
            "n-samples": {"egoplan_val_blind": {"original": 5, "effective": 5}}, "model_name": "tiny-lm"}))
    for begun in ("2026-01-01T09-59-00.000001", "2026-01-01T11-59-00.000001", "2026-01-01T12-30-00.000001"):
        (folder / f"{begun}_judgements_egoplan_val_blind.jsonl").write_text("")
    runs, unreadable = load_runs([folder], all_runs=True)
    assert not unreadable and len(runs) == 2
    for run, begun in zip(sorted(runs, key=lambda run: run.path.name), ("09-59", "11-59")):
        assert run.metrics["egoplan_val_blind"] == {"accuracy": 0.4}
        assert run.side_file("judgements", "egoplan_val_blind").name.startswith(f"2026-01-01T{begun}")
        assert run.side_file("plans", "egoplan_val_blind") is None


def test_a_reason_several_columns_share_is_said_once_in_the_rows_notes(tmp_path):
    """Every answer unparseable by both parsers: one note naming both, not one per column; two question types whose
    samples all scored 0: one "no interval" note naming both."""
    folder = tmp_path / "r"
    unread = {"accuracy": 0.0, "accuracy_official": 0.0, "accuracy_robust": 0.0, "unparseable": 4,
              "unparseable_official": 4, "unparseable_robust": 4, "predictions": 4}
    zeros = {"score": 0.0, "micro_score": 0.0, "predictions": 2}
    types = [f"robovqa_{kind}" for kind in QUESTION_TYPES]
    yes_no = ("robovqa_success", "robovqa_discriminative_affordance")
    write_lmms_eval_run(folder, "20260101_100000", {
        "egoplan_bench2": unread, **{task: zeros for task in types},
        **{task: {**zeros, "unextracted": 2} for task in yes_no},  # no yes or no read: not a 0% score
        "robovqa": {"score": 0.0, "micro_score": 0.0, "predictions": 2 * len(types)}},
        {task: [{"doc_id": i, "score": 0.0, "micro_score": 0.0} for i in range(2)] for task in types})
    tables = {table.name: table for table in build_tables(load_runs([folder])[0], FACES)[0]}
    [bench2] = tables["egoplan_bench2"].user_rows
    assert [note for note in bench2.notes if note.startswith("not scored")] == [
        "not scored: 4 of 4 answers unparseable (official and robust parsers)"]
    [robovqa] = tables["robovqa"].user_rows
    scored = [task for task in types if task not in yes_no]
    assert [note for note in robovqa.notes if note.startswith("no interval")] == [
        f"no interval: {', '.join(f'{task} score' for task in scored)}: every logged sample scored 0; a bootstrap "
        "gives no interval of their mean",
        f"no interval: robovqa score, robovqa micro_score: every logged sample of {', '.join(types)} scored 0; a "
        "bootstrap gives no interval of their mean"]  # the macro and the micro mean: one note
    assert [note for note in robovqa.notes if note.startswith("not scored")] == [
        f"not scored: {task}: 2 of 2 yes / no answers unread" for task in yes_no]
    # one parser alone reading nothing: its note names it, the main column's (the default parser's) says it once
    write_lmms_eval_run(folder, "20260101_110000", {"egoplan_bench2": {**unread, "accuracy_robust": 0.5,
                                                                       "unparseable_robust": 0}})
    tables = {table.name: table for table in build_tables(load_runs([folder], all_runs=True)[0], FACES)[0]}
    latest = next(row for row in tables["egoplan_bench2"].user_rows if row.run.path.name.startswith("20260101_11"))
    assert [note for note in latest.notes if note.startswith("not scored")] == [
        "not scored: 4 of 4 answers unparseable (official parser)"]


def test_the_demos_rows_say_first_that_they_measure_no_model(tmp_path):
    """``model_notes`` (the demo's: a random model, scripted answers) lead the notes of that model's rows, in every
    table and the CSV."""
    folder = tmp_path / "r"
    egoplan_run(folder / "tiny-model")
    note = "a tiny RANDOM model: measures nothing"
    write_report([folder], tmp_path / "report", FACES, model_notes={"tiny-model": note, "other": "not this"})
    rows = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv") if row["source"] == THIS_RUN]
    assert rows and all(row["notes"].startswith(note) and "not this" not in row["notes"] for row in rows)
    published = [row for row in read_csv(tmp_path / "report" / "egoplan_val.csv") if row["source"] != THIS_RUN]
    assert published and not any(note in row["notes"] for row in published)
    own = markdown_rows((tmp_path / "report" / "report.md").read_text(), "| this run |")
    assert own and all(notes.startswith(note) for _, notes in own)


def test_judged_tables_count_the_judged_answers_and_the_failed_judgements(tmp_path):
    """Failed judgements are left out of the scores and counted: each judged table shows both counts (and EgoIntent
    its incomplete answers), never hidden behind a score."""
    folder = tmp_path / "r"
    write_lmms_eval_run(folder, "20260101_100000", {
        "egointent": {"overall": 30.0, "local_intent": 20.0, "procedural_intent": 40.0, "next_step_plan": 30.0,
                      "indoor": 30.0, "judged": 3.0, "failed": 2.0, "incomplete_answers": 1.0, "capped_samples": 1},
        "ego_think": {"score": 45.5, "micro_score": 46.0, "judged": 20, "failed": 4}})
    write_report([folder], tmp_path / "report", FACES)
    [intent] = [row for row in read_csv(tmp_path / "report" / "egointent.csv") if row["source"] == THIS_RUN]
    assert (intent["Judgements"], intent["Failed judgements"], intent["Incomplete answers"],
            intent["Clips capped at max_frames"]) == ("3", "2", "1", "1")
    [think] = [row for row in read_csv(tmp_path / "report" / "ego_think.csv") if row["source"] == THIS_RUN]
    assert (think["Judgements"], think["Failed judgements"]) == ("20", "4")
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Failed judgements" in markdown.split("## EgoIntent")[1] and "Failed judgements" in markdown.split(
        "## EgoThink")[1]


def test_the_preamble_counts_runs_in_words_explains_its_marks_and_speaks_of_the_tables_shown_only(tmp_path, capsys):
    """An EgoPlan-only report said "1 results files" and explained ActPlan-1K's format-error rate; the command said
    "3 tables and figures" of one table's CSV and one figure's two files."""
    from lmms_egoplan.cli import main

    egoplan_run(tmp_path / "r")
    assert main(["report", str(tmp_path / "r"), "--output", str(tmp_path / "report")]) == 0
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Runs: 1 results file (" in markdown and "A cell '—': the row reports no such value" in markdown
    assert "ActPlan-1K" not in markdown.split("\n## ")[0]
    tables = len(list((tmp_path / "report").glob("*.csv")))
    figures = len(list((tmp_path / "report").glob("*.png")))
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"Report: {tmp_path / 'report' / 'report.md'} (and report.html; beside them {tables} CSV "
        f"{'table' if tables == 1 else 'tables'} and {figures} {'figure' if figures == 1 else 'figures'}, PNG and "
        f"SVG)")
