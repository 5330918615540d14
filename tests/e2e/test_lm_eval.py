"""End to end: the text-only baselines through the real `lm_eval` CLI (offline), on a tiny Llama
(`hf`) and through `local-chat-completions` against the loopback server; every reported metric
equals the one recomputed from lm-eval's logged samples."""

import csv
import hashlib
import json
import os
import sys
from pathlib import Path
from statistics import mean

import pytest

from lmms_egoplan.actplan import settings as actplan_settings
from lmms_egoplan.actplan import task as actplan
from lmms_egoplan.actplan.data import load_instances
from lmms_egoplan.actplan.plans import score_lcs
from lmms_egoplan.cli import main
from lmms_egoplan.demo.actplan import write_release_dataset
from lmms_egoplan.demo.egoplan import build_fixture
from lmms_egoplan.demo.egothink import write_release
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV
from lmms_egoplan.demo.kit.warm_python import run_python
from lmms_egoplan.egoplan.data import CHOICE_LETTERS
from lmms_egoplan.egothink.data import DIMENSIONS
from lmms_egoplan.report.intervals import bootstrap_interval, stratified_bootstrap_interval
from lmms_egoplan.report.tables import TEXT_ONLY_BASELINE

CHECKOUT = Path(__file__).resolve().parents[2]
RATINGS = ("0", "0.5", "1")


def run_lm_eval(model: str, model_args: str, tasks: str, output: Path, env: dict, *extra: str) -> dict:
    """``python -m lm_eval run`` with logged samples; the results file's JSON."""
    command = [sys.executable, "-m", "lm_eval", "run", "--model", model, "--model_args", model_args,
               "--include_path", str(CHECKOUT / "lm_eval_tasks"), "--tasks", tasks,
               "--output_path", str(output), "--log_samples", *extra]
    # one thread, through the tier's warm Python: forked where a worker's share of the cores is one thread too (two
    # workers on two cores: tests/conftest.py); else it starts plain, with the task index memo first
    completed = run_python(command, env={**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", **env}, timeout=600,
                           stderr_apart=True)
    assert completed.returncode == 0, completed.stderr[-4000:]
    [results] = output.glob("*/results_*.json")
    return json.loads(results.read_text())


def logged_samples(output: Path, task: str) -> list[dict]:
    [path] = output.glob(f"*/samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_egoplan_baselines_on_a_tiny_llama_report_what_their_logged_likelihoods_give(tiny_model, tmp_path):
    data = build_fixture(tmp_path / "egoplan")
    output = tmp_path / "out"
    report = run_lm_eval("hf", f"pretrained={tiny_model('llama')},dtype=float32",
                         "egoplan_val_blind,egoplan_val_narrated,egoplan_test_blind", output, {}, "--device", "cpu",
                         # a setting by lm-eval's flag
                         "--metadata", json.dumps({"annotation_dir": str(data.annotation_dir)}))
    for task in ("egoplan_val_blind", "egoplan_val_narrated"):
        samples, reported = logged_samples(output, task), report["results"][task]
        assert len(samples) == len(data.records()) == reported["predictions,none"]
        correct, by_source = [], {"epic_kitchens": [], "ego4d": []}
        for sample in samples:
            likelihoods = [float(response[0][0]) for response in sample["resps"]]  # logged as strings
            hit = float(likelihoods.index(max(likelihoods)) == int(sample["target"]))
            correct.append(hit)
            by_source["epic_kitchens" if sample["doc"]["video_source"] == "EpicKitchens" else "ego4d"].append(hit)
            assert sample["predictions"]["label"] == CHOICE_LETTERS[likelihoods.index(max(likelihoods))]
            context = sample["arguments"]["gen_args_0"]["arg_0"]
            assert sample["doc"]["task_goal"] in context and ("So far:" in context) == (task == "egoplan_val_narrated")
        assert reported["accuracy,none"] == pytest.approx(mean(correct))
        for source, hits in by_source.items():
            assert reported[f"accuracy_{source},none"] == pytest.approx(mean(hits))
            assert reported[f"n_{source},none"] == len(hits)
    test_samples = logged_samples(output, "egoplan_test_blind")
    [submission] = output.glob("*/*_submission_egoplan_test_blind.json")  # the whole split: a real submission
    expected = sorted(({"sample_id": s["doc"]["sample_id"],
                        "label": CHOICE_LETTERS[max(range(4), key=lambda i: float(s["resps"][i][0][0]))]}
                       for s in test_samples),
                      key=lambda record: record["sample_id"])
    assert json.loads(submission.read_text()) == expected
    # The report names it in the text-only row (written under the time the run began, before lm-eval's results).
    assert main(["report", str(output), "--output", str(tmp_path / "report")]) == 0
    [row] = [row for row in csv.DictReader((tmp_path / "report" / "egoplan_test.csv").open())
             if row["source"] == TEXT_ONLY_BASELINE]
    assert row["Submission file"] == submission.name and float(row["Predictions"]) == len(expected)


def judge_rating(text: str) -> str:
    """The loopback judge's rating of a grading prompt (recomputable from the logged prompt)."""
    return RATINGS[int(hashlib.sha256(text.encode()).hexdigest(), 16) % len(RATINGS)]


def test_chat_completions_baselines_report_what_their_logged_samples_give(tmp_path):
    # The release's proportions: activity and forecasting have twice the others' questions.
    egothink = write_release(tmp_path / "egothink", per_dimension=2, counts={"activity": 4, "forecasting": 4})
    actplan_root = write_release_dataset(tmp_path / "actplan", scenes=1, activities=2)
    gold = {doc["description"]: doc["gold_plans"][0] for doc in load_instances(actplan_root)}

    def respond(call):
        if call.text.startswith("[Instruction]"):
            return Reply(f"Compared. Rating: [[{judge_rating(call.text)}]]")
        plan = gold.get(call.text)  # ActPlan-1K: the first half of the gold plan; EgoThink: a short answer
        return Reply("\n".join(plan[: len(plan) // 2]) if plan else "A knife.")

    output = tmp_path / "out"
    with ChatServer(respond) as server:
        env = {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(egothink),
               "EGOTHINK_JUDGE_BASE_URL": server.base_url,
               "EGOTHINK_JUDGE_MODEL": "loopback-judge", "EGOTHINK_JUDGE_API_KEY_ENV": "",
               "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "judge-cache"), "ACTPLAN_DATA_ROOT": str(actplan_root)}
        report = run_lm_eval("local-chat-completions",
                             f"model=scripted,base_url={server.base_url}/chat/completions,tokenized_requests=False",
                             "ego_think_blind,actplan1k_text_only_lm", output, env, "--apply_chat_template")
    dimension_scores, sizes, strata = [], [], {}
    for dimension in DIMENSIONS.values():
        task = f"ego_think_blind_{dimension.name}"
        samples, reported = logged_samples(output, task), report["results"][task]
        ratings = []
        for sample in samples:
            [message] = [m for m in sample["score"]["judge_parts"][""]["judge_messages"] if m["role"] == "user"]
            assert sample["doc"]["question"] in message["content"] and sample["doc"]["answer"] in message["content"]
            ratings.append(float(judge_rating(message["content"])))
            assert "image" not in json.dumps(sample["arguments"])  # the question's text only
        assert reported["score,none"] == pytest.approx(100 * mean(ratings))
        assert (reported["judged,none"], reported["failed,none"]) == (len(samples), 0)
        dimension_scores.append(reported["score,none"])
        sizes.append(len(samples))
        strata[dimension.name] = [100 * rating for rating in ratings]
    assert report["results"]["ego_think_blind"]["score,none"] == pytest.approx(mean(dimension_scores))
    assert report["results"]["ego_think_blind"]["micro_score,none"] == pytest.approx(
        sum(score * size for score, size in zip(dimension_scores, sizes)) / sum(sizes))
    assert sorted(sizes) == [2] * 10 + [4, 4]
    # The report's Average of the text-only row, with its interval from the logged judgements of the blind dimensions.
    assert main(["report", str(output), "--output", str(tmp_path / "report")]) == 0
    [row] = [row for row in csv.DictReader((tmp_path / "report" / "ego_think.csv").open())
             if row["source"] == TEXT_ONLY_BASELINE]
    assert float(row["Average (0-100)"]) == pytest.approx(mean(dimension_scores))
    # Nothing of lm-eval's bookkeeping (name, sample_count) read as an invalid metric: the notes say only which
    # dimensions' two ratings were alike (a bootstrap of them would print a point).
    alike = [name for name, ratings in strata.items() if len(set(ratings)) == 1]
    by_value: dict[float, list[str]] = {}  # dimensions whose samples all scored one value: named in one note
    for name in alike:
        by_value.setdefault(strata[name][0], []).append(f"ego_think_blind_{name} score")
    assert alike and row["notes"] == "; ".join(
        f"no interval: {', '.join(names)}: every logged sample scored {value:g}; a bootstrap gives no interval of "
        f"their mean" for value, names in by_value.items())
    assert (float(row["Average (0-100) 95% low"]), float(row["Average (0-100) 95% high"])) == pytest.approx(
        stratified_bootstrap_interval(list(strata.values())), rel=1e-9)
    # The mean over the questions: no judgement failed, so the pooled ratings' bootstrap.
    assert (float(row["Mean over questions (0-100) 95% low"]), float(row["Mean over questions (0-100) 95% high"])) \
        == pytest.approx(bootstrap_interval([rating for ratings in strata.values() for rating in ratings]), rel=1e-9)
    # Each dimension's from its own, read from the audit trail lm-eval's run wrote before its results.
    assert (float(row["Counting (0-100) 95% low"]), float(row["Counting (0-100) 95% high"])) == pytest.approx(
        bootstrap_interval(strata["counting"]), rel=1e-9)

    samples, reported = logged_samples(output, "actplan1k_text_only_lm"), report["results"]["actplan1k_text_only_lm"]
    items = [sample["lcs"] for sample in samples]
    scores = score_lcs([(item["prediction"], item["gold"]) for item in items],
                       actplan.configured_matcher(actplan_settings.ActPlanSettings()), "first")
    assert reported["lcs,none"] == pytest.approx(mean(score.lcs for score in scores)) and reported["lcs,none"] > 0
    assert reported["norm_lcs,none"] == pytest.approx(mean(score.norm_lcs for score in scores))
    assert reported["plan_length,none"] == pytest.approx(mean(len(item["prediction"]) for item in items))
    # The report's text-only ActPlan-1K row: its intervals from the per-plan scores the run kept beside its results.
    [plans_row] = [row for row in csv.DictReader((tmp_path / "report" / "actplan1k.csv").open())
                   if row["source"] == TEXT_ONLY_BASELINE]
    for header, values in (("LCS (steps)", [score.lcs for score in scores]),
                           ("Norm. LCS (0-1)", [score.norm_lcs for score in scores])):
        assert (float(plans_row[f"{header} 95% low"]), float(plans_row[f"{header} 95% high"])) == pytest.approx(
            bootstrap_interval(values), rel=1e-9), header
