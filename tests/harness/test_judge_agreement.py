"""judge-agreement in process: samples judged on named parts (EgoIntent's fields) are compared per field and
overall; a run without its audit trail is named; the second judge's failures end with the distinct status and
are asked again alone."""

from __future__ import annotations

import csv
import json

import pytest

from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder


def egointent_run(folder, ratings: dict[str, list[int]]):
    """A run's samples file and audit trail: one step per rating index, three fields each."""
    from lmms_egoplan.egointent.protocol import RUBRIC_NAME
    from lmms_egoplan.judge.protocol import JudgeRequest
    from lmms_egoplan.judge.rubrics import judge_parts_item

    folder.mkdir()
    steps = len(next(iter(ratings.values())))
    rows, audit = [], []
    for step in range(steps):
        parts = {field: JudgeRequest.from_prompt(f"s{step}/{field}", f"Reference and prediction of {field} {step}")
                 for field in ratings}
        item = judge_parts_item(parts, RUBRIC_NAME)
        rows.append({"doc_id": step, "overall": item, "judged": item, "failed": item})
        audit += [{"id": f"s{step}/{field}", "rating": float(ratings[field][step]), "raw_output": "first"}
                  for field in ratings]
    (folder / "20261122_101010_samples_egointent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "20261122_101010_judgements_egointent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in audit))


def second_rating(call):
    """The second judge: 10 for the local intent, the step's number for the others."""
    field, step = call.text.rsplit(" ", 2)[-2:]
    return "10" if field == "local_intent" else str(int(step))


def test_fields_are_compared_one_by_one_and_together(tmp_path, capsys):
    from lmms_egoplan.cli import main

    ratings = {"local_intent": [10, 10, 9, 10], "global_intent": [0, 1, 2, 3], "next_step_plan": [3, 2, 1, 0]}
    egointent_run(tmp_path / "run", ratings)
    with ChatServer(rating_responder(second_rating)) as second:
        assert main(["judge-agreement", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--judge_base_url",
                     second.base_url, "--judge_model", "second"]) == 0
    assert len(second.calls) == 12
    rows = {row["group"]: row for row in csv.DictReader((tmp_path / "out" / "judge_agreement.csv").open())}
    assert list(rows) == ["egointent · local_intent", "egointent · global_intent", "egointent · next_step_plan",
                          "all (egointent_release)"]
    # 0-10 ratings reported on 0-100, as the task reports them.
    assert [float(rows[g]["first score"]) for g in rows] == pytest.approx([97.5, 15.0, 15.0, (97.5 + 15 + 15) / 3])
    assert [float(rows[g]["second score"]) for g in rows] == pytest.approx([100.0, 15.0, 15.0, (100 + 15 + 15) / 3])
    assert [float(rows[g]["exact agreement"]) for g in rows] == pytest.approx([0.75, 1.0, 0.0, 7 / 12])
    assert float(rows["egointent · global_intent"]["weighted kappa (linear)"]) == 1.0
    disagreed = list(csv.DictReader((tmp_path / "out" / "judge_disagreements.csv").open()))
    assert [(d["id"], d["first rating"], d["second rating"]) for d in disagreed][:2] == [
        ("s0/next_step_plan", "3.0", "0.0"), ("s3/next_step_plan", "0.0", "3.0")]
    assert "egointent · local_intent" in capsys.readouterr().out


def test_a_run_without_its_audit_trail_is_named(tmp_path, capsys):
    from lmms_egoplan.cli import main

    egointent_run(tmp_path / "run", {"local_intent": [1]})
    (tmp_path / "run" / "20261122_101010_judgements_egointent.jsonl").unlink()
    with ChatServer(rating_responder(lambda call: "1")) as second:
        assert main(["judge-agreement", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--judge_base_url",
                     second.base_url]) == 2
    assert "no audit trail 20261122_101010_judgements_egointent.jsonl beside" in capsys.readouterr().err


def test_failed_second_judgements_end_with_the_distinct_status_and_are_asked_again_alone(tmp_path, capsys):
    from lmms_egoplan.cli import main

    egointent_run(tmp_path / "run", {"local_intent": [5, 6, 7]})
    state = {"down": {"s1/local_intent"}}

    def flaky(call):
        step = call.text.rsplit(" ", 1)[-1]
        return Reply(status=503) if f"s{step}/local_intent" in state["down"] else Reply("Rating: [[5]]")

    args = ["judge-agreement", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--judge_retries", "0"]
    with ChatServer(flaky) as second:
        assert main([*args, "--judge_base_url", second.base_url]) == 3
        assert "1 judgements of the second judge failed" in capsys.readouterr().err
        state["down"] = set()
        second.reset()
        assert main([*args, "--judge_base_url", second.base_url]) == 0
        assert len(second.calls) == 1  # the others come from the second judge's own cache


def test_egointent_scores_are_on_the_tasks_scale_and_the_excerpts_show_the_answers(tmp_path, capsys):
    """A field missing from an answer scores 0 in the run: judge-agreement counts it so in both scores (the
    task's metric), leaves it out of the agreement, and its excerpts show the answer judged, not the prompt."""
    from lmms_egoplan.cli import main
    from lmms_egoplan.egointent import task as egointent

    folder = tmp_path / "run"
    folder.mkdir()
    answers = ['{"local_intent": "grip the jar lid", "procedural_intent": "open the jar", "next_step": "pour it"}',
               '{"local_intent": "grip the jar lid", "procedural_intent": "open the jar"}']  # no Next-Plan: 0
    rows, audit = [], []
    for number in range(4):
        doc = {"step_id": f"s{number}", "environment": "indoor", "scenario": "Kitchen",
               "local_intent": "loosen the lid", "procedural_intent": "open the jar",
               "next_step_plan": "pour the sauce", "frames_capped": False,
               "plausible_next_steps": [], "judge_sees_plausible_next_steps": False, "definitions": "release"}
        values = egointent.process_results(doc, [answers[number % 2]], None)
        rows.append({"doc_id": number, **{name: value for name, value in values.items() if isinstance(value, dict)}})
        audit += [{"id": part["judge_request_id"], "rating": 8.0, "raw_output": "Rating: [[8]]"}
                  for part in values["overall"]["judge_parts"].values() if "judge_request_id" in part]
    (folder / "20261122_101010_samples_egointent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "20261122_101010_judgements_egointent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in audit))
    with ChatServer(rating_responder(lambda call: "4")) as second:
        assert main(["judge-agreement", str(folder), "--output", str(tmp_path / "out"), "--judge_base_url",
                     second.base_url, "--judge_model", "second"]) == 0
    assert len(second.calls) == 3  # the three distinct judge prompts (cached); the missing fields are not asked
    table = {row["group"]: row for row in csv.DictReader((tmp_path / "out" / "judge_agreement.csv").open())}
    plan = table["egointent · next_step_plan"]
    # the task's next_step_plan: 10 x mean(8, 0, 8, 0) by the run's judge, 10 x mean(4, 0, 4, 0) by the second
    assert (float(plan["first score"]), float(plan["second score"])) == pytest.approx((40.0, 20.0))
    assert (plan["answers"], plan["scored without a judge"], float(plan["exact agreement"])) == ("2", "2", 0.0)
    assert (float(table["egointent · local_intent"]["first score"]), table["egointent · local_intent"]["answers"]) == (
        pytest.approx(80.0), "4")
    printed = capsys.readouterr().out
    assert "vs 4: grip the jar lid" in printed and "Rate meaning" not in printed
    disagreed = list(csv.DictReader((tmp_path / "out" / "judge_disagreements.csv").open()))
    assert {d["answer judged"] for d in disagreed} <= {"grip the jar lid", "open the jar", "pour it"}


def test_a_task_whose_answers_were_all_scored_without_a_judge_needs_no_audit_trail_and_asks_nothing(tmp_path,
                                                                                                    capsys):
    """EgoIntent answers missing every field score 0 with no judge asked, so the run wrote no audit trail for it
    (a tiny random model's answers, as the Run all seven page's test has them): nothing of it to compare, which
    alone is the usage error of a run with nothing judged (beside a judged task, the judged one is compared: that
    page's test)."""
    from lmms_egoplan.cli import main
    from lmms_egoplan.egointent import task as egointent

    folder = tmp_path / "run"
    folder.mkdir()
    doc = {"step_id": "s0", "environment": "indoor", "scenario": "Kitchen", "local_intent": "loosen the lid",
           "procedural_intent": "open the jar", "next_step_plan": "pour the sauce", "frames_capped": False,
           "plausible_next_steps": [], "judge_sees_plausible_next_steps": False, "definitions": "release"}
    values = egointent.process_results(doc, ["no fields at all"], None)
    row = {"doc_id": 0, **{name: value for name, value in values.items() if isinstance(value, dict)}}
    (folder / "20261122_101010_samples_egointent.jsonl").write_text(json.dumps(row) + "\n")
    with ChatServer(rating_responder(lambda call: "4")) as second:
        assert main(["judge-agreement", str(folder), "--output", str(tmp_path / "out"), "--judge_base_url",
                     second.base_url, "--judge_model", "second"]) == 2
    assert second.calls == []
    error = capsys.readouterr().err
    assert "no answer in" in error and "was rated by both judges" in error and "no audit trail" not in error
