"""ActPlan-1K end to end: both tasks through the real `lmms-eval` CLI on a synthetic release.

* lmms-eval's ``openai`` chat backend against a loopback server that writes plans the way
  models do (lists, fences, prose, malformed lines): real LCS values, format errors, BLEURT
  verdicts, and the images each request carried;
* the suite's ``egoplan_hf`` backend on a tiny random Qwen2-VL: multi-image input.

Every reported metric must equal the one recomputed here from the logged outputs.
"""

import base64
import io
import json
import random
import re

import pytest
from PIL import Image

from lmms_egoplan.actplan.classifier import load_classifier
from lmms_egoplan.actplan.data import load_instances
from lmms_egoplan.actplan.lcs import StepMatcher
from lmms_egoplan.actplan.plans import (
    bleurt_correct,
    parse_plan,
    plan_text,
    score_lcs,
)
from lmms_egoplan.catalogue import entry
from lmms_egoplan.demo.actplan import (
    build_tiny_bert,
    model_output,
    vlm_plan,
    write_classifier_checkpoint,
    write_release_dataset,
)
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.report.intervals import bootstrap_interval

TASKS = entry("actplan").tasks  # actplan1k, actplan1k_text_only

# End to end: the real lmms-eval CLI in subprocesses.


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release_dataset(tmp_path_factory.mktemp("actplan") / "ActPlan-1K", scenes=2, activities=1, samples=1)


@pytest.fixture(scope="module")
def docs(release):
    return load_instances(release)


@pytest.fixture(scope="module")
def scripted(docs):
    """What the loopback model answers, by task description (the same with and without images)."""
    rng = random.Random(7)
    answers = {}
    for number, doc in enumerate(docs):
        plan = vlm_plan(doc["gold_plans"][0], rng, (0.2, 0.7)[number % 2])
        if number % 2:
            plan.insert(3, "Then walk to the sink.")  # a line not in the action(object) form
        answers.setdefault(doc["description"], model_output(plan, rng))
    return answers


@pytest.fixture(scope="module")
def classifier(docs, scripted, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bleurt")
    calibration = [(plan_text(d["gold_plans"][0]),
                    plan_text(parse_plan(scripted[d["description"]]).steps)) for d in docs]
    return write_classifier_checkpoint(folder / "classifier", build_tiny_bert(folder / "tiny-bert"), calibration)


def env(release, classifier):
    return {"ACTPLAN_DATA_ROOT": str(release), "ACTPLAN_BLEURT_CHECKPOINT": str(classifier),
            "ACTPLAN_SCORING_DEVICE": "cpu"}


@pytest.fixture(scope="module")
def chat_run(release, classifier, scripted, tmp_path_factory):
    with ChatServer(lambda call: Reply(scripted[call.text.strip()])) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused",
                            tasks=TASKS, output_dir=tmp_path_factory.mktemp("out"), env=env(release, classifier))
    return run, server.calls


@pytest.fixture(scope="module")
def matcher():
    return StepMatcher()


def logged_output(sample) -> str:
    response = sample["filtered_resps"]
    return response if isinstance(response, str) else response[0]


def recomputed(samples, docs, matcher, classifier_dir):
    """Every metric of a task, from its logged outputs and the release files alone."""
    assert [s["doc_id"] for s in samples] == list(range(len(docs)))
    plans = [parse_plan(logged_output(s)) for s in samples]
    pairs = [(plan.steps, doc["gold_plans"]) for plan, doc in zip(plans, docs)]
    lcs = score_lcs(pairs, matcher, "first")
    correct = bleurt_correct(pairs, load_classifier(classifier_dir, device="cpu"), "first")
    values = {"format_error_rate": sum(p.format_errors for p in plans) / sum(p.plan_lines for p in plans),
              "plan_length": mean([len(p.steps) for p in plans]),
              "no_plan_rate": mean([float(not p.steps) for p in plans])}
    for suffix, chosen in (("", range(len(docs))),
                           *((f"_{split}", [i for i, d in enumerate(docs) if d["split"] == split])
                             for split in ("normal", "counterfactual"))):
        values[f"lcs{suffix}"] = mean([lcs[i].lcs for i in chosen])
        values[f"norm_lcs{suffix}"] = mean([lcs[i].norm_lcs for i in chosen])
        values[f"bleurt_accuracy{suffix}"] = mean([correct[i] for i in chosen])
    return values


def mean(values):
    return sum(values) / len(values)


def test_reported_metrics_are_those_of_the_logged_plans(chat_run, docs, matcher, classifier):
    run, _ = chat_run
    for task in TASKS:
        expected = recomputed(run.samples(task), docs, matcher, classifier)
        for metric, value in expected.items():
            assert run.metric(task, metric) == pytest.approx(value), (task, metric)
        assert 0 < expected["lcs"] < mean([len(d["gold_plans"][0]) for d in docs])
        assert 0 < expected["format_error_rate"] < 1 and 0 < expected["bleurt_accuracy"] < 1
    # The same outputs were scored the same way with and without images.
    assert run.metric(TASKS[0], "lcs") == run.metric(TASKS[1], "lcs")
    config = run.results["configs"]["actplan1k"]["metadata"]
    assert (config["gold_plan"], config["match_threshold"]) == ("first", 0.8)


def test_requests_carry_the_description_then_all_images_or_none(chat_run, docs):
    _, calls = chat_run
    assert len(calls) == 2 * len(docs)
    with_images = {}
    for call in calls:
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
        assert [p["type"] for p in parts] == ["text"] + ["image_url"] * len(urls)  # the paper's [T, I1, I2, ...]
        shown = [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls]
        with_images.setdefault(call.text.strip(), []).append(shown)
    for doc in docs:
        expected = [read_index(Image.open(path)) for path in doc["image_paths"]]
        assert sorted(with_images[doc["description"]]) == sorted([expected, []])  # actplan1k, text only


def test_plans_are_kept_for_the_scoring_command(chat_run, docs, capsys):
    from lmms_egoplan.cli import main

    run, _ = chat_run
    # Beside the results file, named by model, date-time and task, so that no other run overwrites it.
    kept = {task: list((run.output_dir / "fake").glob(f"*_plans_{task}.jsonl")) for task in TASKS}
    assert all(len(files) == 1 for files in kept.values())
    rows = [json.loads(line) for line in kept["actplan1k"][0].read_text().splitlines()]
    assert [r["candidate"] for r in rows] == [logged_output(s) for s in run.samples("actplan1k")]
    assert [r["instance_id"] for r in rows] == [d["instance_id"] for d in docs]
    assert main(["actplan-score", *(f"--pairs={files[0]}" for files in kept.values())]) == 0
    printed = {tuple(line.split()[:2]): line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    for task in TASKS:
        assert float(printed[(f"{task}:fake", "all")][3]) == pytest.approx(run.metric(task, "lcs"), abs=0.005)
        assert float(printed[(f"{task}:fake", "all")][4]) == pytest.approx(run.metric(task, "norm_lcs"), abs=0.0005)
        # with the intervals the report gives the run (from the per-plan values the run kept, in the same order)
        kept_scores = [json.loads(line) for line in
                       next((run.output_dir / "fake").glob(f"*_sample_scores_{task}.jsonl")).read_text().splitlines()]
        intervals = re.findall(r"\[([\d.]+), ([\d.]+)\]", " ".join(printed[(f"{task}:fake", "all")]))
        for (low, high), metric, digits in zip(intervals, ("lcs", "norm_lcs"), (2, 3)):
            expected = bootstrap_interval([scores[metric] for scores in kept_scores])
            assert (float(low), float(high)) == pytest.approx(expected, abs=0.6 * 10 ** -digits), metric
        assert len(intervals) == 2


def test_the_report_gives_the_plan_scores_intervals_from_the_plans_the_run_scored(chat_run, docs, matcher, classifier,
                                                                               tmp_path):
    import csv

    from lmms_egoplan.cli import main
    from lmms_egoplan.report.intervals import bootstrap_interval, exact_binomial_interval
    from lmms_egoplan.report.tables import THIS_RUN

    run, _ = chat_run
    assert main(["report", str(run.output_dir), "--output", str(tmp_path)]) == 0
    table = csv.DictReader((tmp_path / "actplan1k.csv").open())
    rows = {row["task"]: row for row in table if row["source"] == THIS_RUN}
    for task in TASKS:
        samples, row = run.samples(task), rows[task]
        # Each plan's scores recomputed from its logged output, in the logged order (the bootstrap's draws follow it).
        pairs = [(parse_plan(logged_output(s)).steps, docs[s["doc_id"]]["gold_plans"]) for s in samples]
        lcs = score_lcs(pairs, matcher, "first")
        correct = bleurt_correct(pairs, load_classifier(classifier, device="cpu"), "first")
        for suffix, split in (("", None), (" normal", "normal"), (" counterfactual", "counterfactual")):
            chosen = [i for i, s in enumerate(samples) if split in (None, docs[s["doc_id"]]["split"])]
            expected = {f"LCS{suffix} (steps)": bootstrap_interval([lcs[i].lcs for i in chosen]),
                        f"Norm. LCS{suffix} (0-1)": bootstrap_interval([lcs[i].norm_lcs for i in chosen])}
            if not split:  # the splits' BLEURT accuracies are in the results, not the report's table
                hits = sum(correct[i] for i in chosen)
                expected["BLEURT accuracy (%)"] = tuple(100 * b for b in exact_binomial_interval(hits, len(chosen)))
            for header, (low, high) in expected.items():
                found = (float(row[f"{header} 95% low"]), float(row[f"{header} 95% high"]))
                assert found == pytest.approx((low, high), rel=1e-9, abs=1e-12), (task, header)
                assert found[0] <= float(row[header]) <= found[1], (task, header)
        assert "no interval" not in row["notes"], row["notes"]
    # The per-plan values the run scored, kept beside its results for the report (and for anyone to read).
    kept = [json.loads(line) for line in
            next((run.output_dir / "fake").glob("*_sample_scores_actplan1k.jsonl")).read_text().splitlines()]
    assert [k["instance_id"] for k in kept] == [docs[s["doc_id"]]["instance_id"] for s in run.samples("actplan1k")]


def test_egoplan_hf_backend_with_multi_image_input(release, classifier, docs, matcher, tiny_model, tmp_path):
    run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=TASKS,
                        output_dir=tmp_path, env=env(release, classifier),
                        extra_args=["--batch_size", "4", "--gen_kwargs", "max_new_tokens=24"])
    for task in TASKS:
        samples = run.samples(task)
        for metric, value in recomputed(samples, docs, matcher, classifier).items():
            assert run.metric(task, metric) == pytest.approx(value, nan_ok=True), (task, metric)


def test_bleurt_without_a_classifier_is_reported_not_scored_in_the_log_the_results_and_the_report(release, tiny_model,
                                                                                                 tmp_path, capsys):
    """No ACTPLAN_BLEURT_CHECKPOINT: the BLEURT metrics are not dropped silently (issue 65, point 5): the log, the
    results (the task's metadata.not_scored) and the report say "not scored", why, and the setting to set."""
    from lmms_egoplan.cli import main

    run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=["actplan1k"],
                        output_dir=tmp_path / "run", env={"ACTPLAN_DATA_ROOT": str(release)},
                        extra_args=["--limit", "2", "--gen_kwargs", "max_new_tokens=8"])
    said = [line for line in run.log.splitlines() if "actplan1k: bleurt_accuracy not scored: " in line]
    assert len(said) == 1 and "ACTPLAN_BLEURT_CHECKPOINT" in said[0], run.log_tail()
    recorded = run.results["configs"]["actplan1k"]["metadata"]["not_scored"]
    assert list(recorded) == ["bleurt_accuracy"] and recorded["bleurt_accuracy"].startswith("not scored: ")
    assert "ACTPLAN_BLEURT_CHECKPOINT" in recorded["bleurt_accuracy"]
    assert not any(key.startswith("bleurt_accuracy") for key in run.results["results"]["actplan1k"])
    assert main(["report", str(tmp_path / "run"), "--output", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"BLEURT accuracy: {recorded['bleurt_accuracy']}" in report
