"""Predict-only runs of every suite task through the real lmms-eval CLI, and rejudge on their logs."""

from __future__ import annotations

import json

import pytest

from lmms_egoplan.demo.kit.judge_server import ChatServer, rating_responder


@pytest.fixture(scope="module")
def predict_only(tmp_path_factory, tiny_model):
    """Every task of the suite in one ``--predict_only`` run (its judge is never asked)."""
    from contextlib import ExitStack

    from lmms_egoplan.catalogue import entry
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
    from lmms_egoplan.demo.smoke import suites

    root = tmp_path_factory.mktemp("predict_only")
    with ExitStack() as resources:
        builders = suites()
        built = [build(root / "data" / name, resources) for name, build in builders.items()]
        env = {key: value for suite in built for key, value in suite.env.items()}
        tasks = [task for name in builders for task in entry(name).tasks]
        run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=tasks,
                            output_dir=root / "out", env=env, check=False,
                            extra_args=["--predict_only", "--gen_kwargs", "max_new_tokens=8"])
    return run, tasks


def test_predict_only_works_for_every_suite_task(predict_only):
    run, tasks = predict_only
    assert run.returncode == 0, run.log_tail()
    logged = {path.name.split("_samples_")[1].removesuffix(".jsonl")
              for path in run.output_dir.rglob("*_samples_*.jsonl")}
    leaves = {"egoplan_val", "egoplan_test", "egoplan_val_gen", "egointent", "actplan1k", "actplan1k_text_only",
              "egoplan_bench2", "egoplan_bench2_likelihood",
              *(f"cosmos_reason1_{part}" for part in ("av", "agibot", "bridgev2", "holoassist", "robofail", "robovqa",
                                                      "cs_space", "cs_time", "cs_other_physics")),
              *(f"ego_think_{d}" for d in ("existence", "attribute", "affordance", "activity", "location", "spatial",
                                          "counting", "comparing", "situated", "forecasting", "navigation",
                                           "assistance")),
              *(f"robovqa_{kind}" for kind in ("next_step", "next_five_steps", "success", "discriminative_affordance",
                                               "generative_affordance", "future_prediction", "past_description"))}
    assert logged == leaves
    for task in leaves:
        assert all(sample["filtered_resps"] for sample in run.samples(task))


def test_rejudge_judges_predict_only_logs_and_reports_every_group(predict_only, tmp_path):
    from lmms_egoplan.cli import main

    run, _ = predict_only
    judge_args = ["--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"]
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        assert main(["rejudge", str(run.output_dir), "--output", str(tmp_path), "--judge_base_url", judge.base_url,
                     *judge_args]) == 0
    summary = json.loads(next(tmp_path.glob("*_rejudged.json")).read_text())
    capabilities = {f"ego_think_capability_{c}" for c in ("object", "activity", "localization", "reasoning",
                                                           "forecasting", "planning")}
    assert capabilities | {"ego_think", "egointent"} <= summary.keys()
    assert not summary.keys() & {"egoplan_val", "actplan1k"}  # nothing of theirs is judged
    dimensions = [task for task in summary if task.startswith("ego_think_") and task not in capabilities]
    assert len(dimensions) == 12 and all(summary[task]["score"] == 100.0 for task in dimensions)
    assert summary["ego_think"]["judged"] == sum(summary[task]["judged"] for task in dimensions) > 0
    # EgoIntent's judge items are there; a random model writes none of the three fields, and a missing
    # field is not sent to the judge (as in the run itself).
    assert (summary["egointent"]["judged"], summary["egointent"]["failed"]) == (0, 0)
    assert len(judge.calls) == summary["ego_think"]["judged"]


def test_rejudge_with_nothing_to_judge_exits_non_zero_saying_so(predict_only, tmp_path, capsys):
    from lmms_egoplan.cli import main

    run, _ = predict_only
    [egoplan_log] = run.output_dir.rglob("*_samples_egoplan_val.jsonl")
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        status = main(["rejudge", str(egoplan_log), "--output", str(tmp_path), "--judge_base_url", judge.base_url,
                       "--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"])
    assert status == 2 and judge.calls == []
    assert "nothing to judge" in capsys.readouterr().err
    assert not list(tmp_path.glob("*_rejudged.json"))


def test_predict_only_then_rejudge_then_report_shows_the_judged_scores(predict_only, tmp_path, capsys):
    """The one-GPU path without a judge beside the model: the report of a --predict_only run says each judged row is
    not judged, with the rejudge command; that command (with the judge's address) writes the scores beside the run,
    and the report then shows them, rejudged; scores rejudged into another folder are found from that folder too."""
    import csv
    import shlex
    import shutil

    from lmms_egoplan.cli import main

    run, _ = predict_only
    runs = tmp_path / "runs"
    shutil.copytree(run.output_dir, runs, ignore=shutil.ignore_patterns("response_cache"))
    assert main(["report", str(runs), "--output", str(tmp_path / "before")]) == 0
    rows = list(csv.DictReader((tmp_path / "before" / "ego_think.csv").open()))
    [mine] = [row for row in rows if row["source"] == "this run"]
    assert mine["Average (0-100)"] == "" and "not judged (--predict_only): run `lmms-egoplan rejudge " in mine["notes"]
    command = shlex.split(mine["notes"].split("run `")[1].split("`")[0])
    [folder] = {path.parent for path in runs.rglob("*_results.json")}
    assert command == ["lmms-egoplan", "rejudge", str(folder), "--output", str(folder)]
    judge_args = ["--judge_model", "loopback-judge", "--judge_api_key_env", "", "--judge_cache_dir", "none"]
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        assert main([*command[1:], "--judge_base_url", judge.base_url, *judge_args]) == 0
        assert main(["rejudge", str(folder), "--output", str(tmp_path / "elsewhere"), "--judge_base_url",
                     judge.base_url, *judge_args]) == 0
    capsys.readouterr()
    for results, report in ((runs, "after"), (tmp_path / "elsewhere", "from_elsewhere")):
        assert main(["report", str(results), "--output", str(tmp_path / report)]) == 0
        rows = list(csv.DictReader((tmp_path / report / "ego_think.csv").open()))
        [mine] = [row for row in rows if row["source"] == "this run"]
        assert float(mine["Average (0-100)"]) == pytest.approx(100.0, abs=1e-9), mine
        assert "not judged" not in mine["notes"] and "judged by lmms-egoplan rejudge: " in mine["notes"]
        assert mine["judge"].startswith("openai:loopback-judge")
