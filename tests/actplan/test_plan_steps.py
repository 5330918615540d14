"""ActPlan-1K's steps: a line of a model's output and the same line in a gold plan give the same steps, each step
whole as written (a name of words, nested arguments, empty arguments), in linear time on hostile lines."""

import time

import pytest

from lmms_egoplan.actplan.data import gold_steps
from lmms_egoplan.actplan.plans import parse_plan

# (line, its steps, in form); the upstream task's parser is held to these lines too (test_upstream_task.py).
STEP_LINES = [
    ("walk_to(kitchen)", ["walk_to(kitchen)"], True),
    # Words that start the line, joined by single spaces, name the step with the action: out of form, never the
    # fragment "to(kitchen)" (cosine 0.686 to walk_to(kitchen), where the whole line has 0.924).
    ("walk to(kitchen)", ["walk to(kitchen)"], False),
    ("switch on(faucet)", ["switch on(faucet)"], False),
    ("- walk to( kitchen )", ["walk to(kitchen)"], False),
    ("**Step 3:** `switch on(stove)`.", ["switch on(stove)"], False),
    ("Then walk_to(kitchen).", ["Then walk_to(kitchen)"], False),
    ("walk to(table) grab(cup)", ["walk to(table)", "grab(cup)"], False),
    # One level of nested arguments, re-joined with ", " at every depth.
    ("place_on_top(mousetrap3, floor, next_to(toilet))", ["place_on_top(mousetrap3, floor, next_to(toilet))"], True),
    ("place_on_top( mousetrap3,floor , next_to( toilet ,sink) )",
     ["place_on_top(mousetrap3, floor, next_to(toilet, sink))"], True),
    ("wait()", ["wait()"], True),
    ("wait( )", ["wait()"], True),
    ("1. grab(cup)", ["grab(cup)"], True),
    ("walk_to(table) grab(cup), wait() -> open(fridge)", ["walk_to(table)", "grab(cup)", "wait()", "open(fridge)"],
     True),
]
# (line, the steps a model's output scores, the gold plan's steps)
PROSE_LINES = [
    # Prose is a format error in a model's output and an annotated step in a gold plan; the steps are the same.
    ("Here is the plan: walk_to(kitchen), grab(cup)", ["walk_to(kitchen)", "grab(cup)"],
     ["Here is the plan:", "walk_to(kitchen)", "grab(cup)"]),
    # Words join a name only from the line's start: a space-joined plan keeps its annotations apart.
    ("walk_to(floor) wait grab(mop)", ["walk_to(floor)", "grab(mop)"], ["walk_to(floor)", "wait", "grab(mop)"]),
    # A line of one step and other text stays whole in a gold plan, as the release's lines do.
    ("grab(cup) # then wash it", ["grab(cup)"], ["grab(cup) # then wash it"]),
    ("Walk to the kitchen (left) and grab() the cup.", ["grab()"], ["Walk to the kitchen (left) and grab() the cup."]),
]


@pytest.mark.parametrize("line, steps, in_form", STEP_LINES)
def test_a_line_of_steps_gives_the_same_whole_steps_in_a_models_output_and_in_a_gold_plan(line, steps, in_form):
    assert parse_plan(line) == parse_plan(f"```\n{line}\n```")  # a line alone and in a code fence
    assert (parse_plan(line).steps, gold_steps(line)) == (steps, steps)
    assert parse_plan(line).format_errors == (not in_form)


@pytest.mark.parametrize("line, predicted, gold", PROSE_LINES)
def test_prose_around_steps_is_a_format_error_in_a_models_output_and_an_annotation_in_a_gold_plan(line, predicted,
                                                                                                    gold):
    assert (parse_plan(line).steps, parse_plan(line).format_errors, gold_steps(line)) == (predicted, 1, gold)


@pytest.mark.parametrize("line", [
    "a(" * 50_000,
    "(" * 100_000,
    "a(" + "b " * 50_000,  # an unclosed step: version 3's pattern took 35 s on it
    "x(" + "a, " * 33_333,  # 20 s in version 3
    "a " * 50_000 + "(x)",
    "walk to " * 12_500 + "(",
    "f(" + "g(x) " * 20_000,
    "a(x) " + " " * 50_000 + "b " + " " * 50_000 + "c(y)",
])
def test_a_long_degenerate_line_is_parsed_in_linear_time(line):
    started = time.perf_counter()
    parse_plan(line), gold_steps(line)
    assert time.perf_counter() - started < 0.5
