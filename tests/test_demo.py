"""The demo's parts that need no harness run: the scripted answerer and judge, the check of reported
values against the script's, and the printed tables (scripted rows marked, zeros that are no score
saying why, every line within 120 columns)."""

import itertools
import json
import random

import pytest

from lmms_egoplan.core.text_tables import TERMINAL_WIDTH, format_table, format_value
from lmms_egoplan.demo import actplan, egointent, egoplan, egothink
from lmms_egoplan.demo.kit.judge_server import ChatCall
from lmms_egoplan.demo.kit.scripted import (
    ScriptedAnswers,
    answering,
    differences,
    lcs_length,
    rating_by_script,
    reported_metrics,
)
from lmms_egoplan.demo.smoke import BREAKDOWNS, SCRIPTED, WHY_NOT_SCORED, task_table
from lmms_egoplan.egointent.report_face import FACE as EGOINTENT_FACE
from lmms_egoplan.report.metric_roles import unscored_reason
from lmms_egoplan.suite import benchmark
from tests.fixtures import DEMO_RESULTS


def call(text: str) -> ChatCall:
    return ChatCall("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}, {}, 0, 0.0)


def test_lcs_length_against_brute_force():
    rng = random.Random(0)
    for _ in range(200):
        a, b = ([rng.choice("abcd") for _ in range(rng.randint(0, 6))] for _ in range(2))
        longest = max((n for n in range(len(a) + 1) for sub in itertools.combinations(a, n)
                       if _is_subsequence(sub, b)), default=0)
        assert lcs_length(a, b) == longest, (a, b)


def _is_subsequence(sub, sequence) -> bool:
    remaining = iter(sequence)
    return all(item in remaining for item in sub)


def test_the_scripted_model_answers_the_most_specific_key_and_flags_unknown_prompts():
    script = ScriptedAnswers(tasks=("t",), answers={"The goal is X.": "normal",
                                                    "The goal is X. It is wet.": "counterfactual",
                                                    "Step id: 7\n": "seven"}, expected=dict)
    respond = answering([script])
    assert respond(call("Task: The goal is X.\nPlan:")).text == "normal"
    assert respond(call("Task: The goal is X. It is wet.\nPlan:")).text == "counterfactual"
    assert respond(call("Step id: 7\nAnswer")).text == "seven"
    assert respond(call("something else")).text.startswith("(no scripted answer")  # scores as a wrong answer


def test_the_scripted_judges_read_reference_and_answer_from_the_benchmarks_judge_prompts(tmp_path):
    from lmms_egoplan.egointent import task as egointent_task
    from lmms_egoplan.egointent.data import DIMENSIONS as INTENT_FIELDS
    from lmms_egoplan.egothink import protocol as egothink_task_protocol

    think = egothink.scripted_answers(tmp_path, per_dimension=2)
    intent = egointent.scripted_answers(tmp_path / "EgoIntent")
    judge = rating_by_script([think, intent])
    record = egothink.synthetic_records(next(iter(egothink.DIMENSIONS.values())), 2)[1]
    doc = {"id": "x", "question": record["question"], "answer": record["answer"]}
    for kind, rating in egothink.SCRIPTED_RATINGS.items():
        request = egothink_task_protocol.judge_request(doc, egothink.scripted_answer(record["answer"], kind))
        prompt = request.messages[-1]["content"]
        assert judge(call(prompt)).text.endswith(f"Rating: [[{rating}]]")
    steps = egointent.released_steps()
    for number in range(len(egointent.SCRIPTED_STEPS)):  # the local intent of each kind of scripted answer
        kind = egointent.SCRIPTED_STEPS[number][1][0]
        step = {"step_id": steps[number].sample_id, "local_intent": steps[number].record["local_intent"],
                "definitions": "release"}
        prediction = egointent.field_answer(step["local_intent"], kind)
        prompt = egointent_task.judge_request(step, INTENT_FIELDS[0], prediction).messages[-1]["content"]
        assert judge(call(prompt)).text.endswith(f"Rating: [[{egointent.SCRIPTED_RATINGS[kind]}]]")
    unknown = egothink_task_protocol.judge_request(doc, "an answer nobody scripted").messages[-1]["content"]
    assert "[[" not in judge(call(unknown)).text  # no rating: the judgement fails and is counted


def test_differences_name_every_value_off_the_script_missing_or_unpredicted():
    expected = {"t": {"accuracy": 0.75, "judged": 3}}
    assert differences({"t": {"accuracy": 0.75 + 1e-12, "judged": 3, "alias": "t"}}, expected) == []
    assert differences({"t": {"accuracy": 0.5, "extra": 1.0}}, expected) == [
        "t accuracy: reported 0.5, expected 0.75", "t extra: reported 1.0, the script predicts no value",
        "t judged: reported None, expected 3"]


def test_scripted_answers_of_each_benchmark_cover_every_kind(tmp_path):
    """The scripts hold what the demo promises: right, partly right and wrong answers, incomplete
    ones, letters and candidate texts, plans and no plan."""
    fixture = egoplan.build_fixture(tmp_path / "egoplan")
    answers = list(egoplan.scripted_answers(fixture).answers.values())
    assert len(answers) == len(fixture.records())  # one per sample: the options blocks differ
    for looks_like in (lambda a: a.startswith("The answer is ("), lambda a: len(a) == 1,  # stated and bare letters
                       lambda a: a.startswith("I would "), lambda a: "cannot tell" in a):  # candidate text, nothing
        assert any(map(looks_like, answers))
    data = actplan.write_release_dataset(tmp_path / "actplan", scenes=2, activities=1, samples=1)
    plans = list(actplan.scripted_answers(data, tmp_path / "classifier").answers.values())
    assert len(plans) == 4 and plans[0].startswith("```") and plans[1].startswith("1. ") and actplan.NO_PLAN in plans[3]
    assert sum(kinds[2] is None for _, kinds in egointent.SCRIPTED_STEPS) == 1  # an incomplete answer
    intents = egointent.scripted_answers(tmp_path / "EgoIntent").answers.values()
    assert any(answer.startswith("◁think▷") for answer in intents)  # a draft the reader must leave out


def test_unscored_reasons_come_from_the_counts():
    assert unscored_reason({"overall": 0.0, "judged": 0, "failed": 0, "incomplete_answers": 15}, 15) == \
        "0 judged: 15 of 15 answers incomplete"
    assert unscored_reason({"score": float("nan"), "judged": 0, "failed": 24}) == "0 judged: 24 failed"
    assert unscored_reason({"accuracy": 0.0, "predictions": 8, "unparseable": 8.0}) == "8 of 8 answers unparseable"
    assert unscored_reason({"lcs": 0.0, "no_plan_rate": 1.0}, 4) == "no plan in 4 of 4 outputs"
    for scored in ({"score": 0.0, "judged": 2, "failed": 0}, {"accuracy": 0.0, "predictions": 8, "unparseable": 7.0},
                   {"lcs": 0.0, "no_plan_rate": 0.5}, {"accuracy": 0.0}):
        assert unscored_reason(scored, 8) is None  # a zero that is a score


@pytest.mark.parametrize("value", [None, float("nan")])
def test_null_and_nan_read_no_value(value):
    assert format_value(value) == "no value"


def test_a_value_nearer_0_than_a_ten_thousandth_reads_as_such_not_in_exponent_notation():
    """The scripted RoboVQA rows' BLEU-3 of 3.28e-153 (no 3-gram matched) read as an exponent in a column of %."""
    assert [format_value(value) for value in (3.28e-153, -2e-7, 0.0, 0.0001, 16.93, 27.4412)] == [
        "<0.0001", "-<0.0001", "0", "0.0001", "16.93", "27.44"]
    assert format_value(3.28e-153, ".3f") == "0.000"  # a format asked for is kept


def test_the_demo_table_marks_scripted_rows_and_says_why_zeros_are_no_scores():
    def results(**tasks):
        return {"results": {task: {f"{k},none": v for k, v in metrics.items()} for task, metrics in tasks.items()},
                "n-samples": {task: {"original": 15, "effective": 15} for task in tasks}}

    random_results = results(egointent={"overall": 0.0, "judged": 0, "failed": 0, "incomplete_answers": 15})
    scripted_results = results(egointent={"overall": 62.0, "judged": 42, "failed": 0, "incomplete_answers": 3})
    table = task_table([(random_results, ""), (scripted_results, SCRIPTED)], EGOINTENT_FACE)
    header, _, random_row, scripted_row, *below = table.splitlines()
    assert header.split()[:2] == ["task", "overall"] and "why not scored" not in header
    assert random_row.startswith("egointent ") and " 0 (not scored) " in random_row
    assert below == [WHY_NOT_SCORED, "  egointent: 0 judged: 15 of 15 answers incomplete"]  # below the table
    assert scripted_row.startswith(f"egointent {SCRIPTED}") and "62" in scripted_row
    assert "not scored" not in scripted_row


def test_a_table_wider_than_the_terminal_continues_in_blocks_each_naming_its_rows():
    header, rows = ["task", *(f"metric_{i:02d}" for i in range(20))], [["egointent", *map(str, range(20))]]
    blocks = format_table(header, rows, right=range(1, 21), width=60).split("\n\n")
    assert len(blocks) > 1 and all(len(line) <= 60 for block in blocks for line in block.splitlines())
    assert all(block.startswith("task ") and "\negointent " in block for block in blocks)
    cells = [block.splitlines()[2].split()[1:] for block in blocks]
    assert list(itertools.chain(*cells)) == rows[0][1:]  # every value, in order, once
    assert format_table(header, rows) == format_table(header, rows, width=1000)  # one block where it fits


def test_the_demos_tables_fit_120_columns_and_keep_every_breakdown_and_reason():
    """The tables the demo prints from its runs' results (as it wrote them: tests/fixtures/demo_results.json):
    no line over 120 columns; every value, breakdown bin (with its count) and reason of the rows still there."""
    for name, runs in json.loads(DEMO_RESULTS.read_text()).items():
        face = benchmark(name).report_face
        sources = [(runs["random"], ""), (runs["scripted"], SCRIPTED)]
        printed = task_table(sources, face)
        assert max(map(len, printed.splitlines())) <= TERMINAL_WIDTH, name
        joined = " ".join(printed.split())  # wrapped lines joined again
        for results, mark in sources:
            counts = results["n-samples"]
            for task, values in reported_metrics(results).items():
                row = f"{task} {mark}".strip()
                if reason := unscored_reason(values, (counts.get(task) or {}).get("effective")):
                    assert f" {row}: {reason}" in joined[joined.index(WHY_NOT_SCORED):], (name, row)
                for metric, value in values.items():
                    if found := face.breakdown(metric):
                        unit = face.unit(metric)
                        shown = format_value(value * unit.scale if isinstance(value, float) else value)
                        assert f"{row}, {unit.header(found[0])}:" in joined[joined.index(BREAKDOWNS):], (name, row)
                        assert f" {found[1]} {shown}" in joined[joined.index(BREAKDOWNS):], (name, row, metric)
                    elif value not in ("", " ") and not metric.startswith("n_"):
                        assert any(line.startswith(f"{row} ") for line in printed.splitlines()), (name, row)


def test_a_tables_columns_keep_the_faces_order_whatever_order_a_results_file_lists_them_in(tmp_path):
    """Cosmos-Reason1's: its main score's metric (the official parser's accuracy) first, then its table's other
    columns in their order, counts last, within 120 columns; the same table from a file listing its metrics shuffled."""
    from tests.report.test_report import cosmos_reason1_run

    face = benchmark("cosmos_reason1").report_face
    results = json.loads(cosmos_reason1_run(tmp_path / "run").read_text())
    printed = task_table([(results, "")], face)
    shuffled = random.Random(0)
    for task, values in results["results"].items():
        items = list(values.items())
        shuffled.shuffle(items)
        results["results"][task] = dict(items)
    assert task_table([(results, "")], face) == printed
    header = printed.splitlines()[0].split()
    assert header[1:5] == ["accuracy_official", "(%)", "micro_official", "(%)"]
    assert max(map(len, printed.splitlines())) <= TERMINAL_WIDTH
