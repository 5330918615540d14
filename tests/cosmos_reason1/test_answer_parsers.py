"""The official parsers and correctness rule, against a transcription of the official code on answers that stress
them; the robust reading beside them."""

import re

import pytest

from lmms_egoplan.cosmos_reason1.parsing import LETTER, REASONING, official_answer, official_correct, robust_answer

# nvidia-cosmos/cosmos-reason1 @3e7f1cb, examples/benchmark/tools/eval/utils/output.py lines 79-141, verbatim but
# for the docstrings; and tools/eval/evaluate.py run_model's correctness rule (is_correct).
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
REASONING_PATTERN = re.compile(r"<think>(.*?)</think>", re.DOTALL)
SINGLE_LETTER_PATTERN = re.compile(r"[A-Z]")


def parse_reasoning_response(output_text: str) -> tuple[str, str]:
    answer = ""
    reasoning = ""
    answer_match = ANSWER_PATTERN.search(output_text)
    if answer_match:
        letter_match = SINGLE_LETTER_PATTERN.search(answer_match.group(1))
        if letter_match:
            answer = letter_match.group(0)
    reasoning_match = REASONING_PATTERN.search(output_text)
    if reasoning_match:
        reasoning = reasoning_match.group(1).strip()
    return answer, reasoning


def parse_letter_response(output_text: str) -> tuple[str, str]:
    answer = ""
    reasoning = ""
    letter_match = SINGLE_LETTER_PATTERN.search(output_text)
    if letter_match:
        answer = letter_match.group(0)
    return answer, reasoning


def is_correct(answer: str, correct_answer: str) -> bool:
    return answer.lower() == correct_answer.lower()


OPTIONS = {"A": "push the red block", "B": "wait for the car", "C": "open the drawer", "D": "turn left"}
STRESS = [
    "<think>the car is stopping.</think> <answer>B</answer>",
    "<think>Option A looks right, then C.</think>\n<answer>B</answer>",  # the reasoning names other options
    "<answer>The answer is B</answer>",  # two capitals inside the tag
    "<answer>(C) open the drawer</answer>",
    "<answer>A</answer> <answer>B</answer>",  # two tags
    "B and C",  # two capitals, no tag
    "open the drawer",  # option text only
    "<answer>open the drawer</answer>",
    "<answer>b</answer>",  # lower case
    "b",
    "",  # empty
    "<answer></answer>",
    "<answer>\nD\n</answer>",
    "I think D. <answer>C</answer>",
    "Based on the video, C.",
]


@pytest.mark.parametrize("text", STRESS)
def test_the_official_parsers_read_as_the_official_code(text):
    assert official_answer(text, REASONING) == parse_reasoning_response(text)[0]
    assert official_answer(text, LETTER) == parse_letter_response(text)[0]


@pytest.mark.parametrize("text", STRESS)
@pytest.mark.parametrize("gold", ["A", "B", "C", "D", "b"])
def test_the_official_correctness_rule_is_the_official_codes(text, gold):
    for prompt, parse in ((REASONING, parse_reasoning_response), (LETTER, parse_letter_response)):
        assert official_correct(official_answer(text, prompt), gold) == is_correct(parse(text)[0], gold)


def test_the_traps_of_the_official_parsers_are_kept():
    assert official_answer("<answer>The answer is B</answer>", REASONING) == "T"
    assert official_answer("Based on the video, C.", LETTER) == "B"
    assert official_answer("<answer>b</answer>", REASONING) == "" and official_answer("b", LETTER) == ""
    assert official_answer("C", REASONING) == ""  # no tag: nothing, which the official run retries


@pytest.mark.parametrize("text, letter", [
    ("<think>Option A looks right, then C.</think>\n<answer>B</answer>", "B"),
    ("<answer>The answer is B</answer>", "B"),
    ("<answer>open the drawer</answer>", "C"),
    ("open the drawer", "C"),
    ("<answer>b</answer>", "B"),
    ("<think>maybe A</think> D", "D"),
    ("◁think▷maybe A◁/think▷ D", "D"),  # Kimi-VL-Thinking's markers
    ("<think>maybe A, or", ""),  # cut inside its thinking: no answer
    ("B and C", ""),
    ("", ""),
    ("<answer>E</answer>", ""),  # no such option
])
def test_the_robust_reading_is_what_a_person_reads(text, letter):
    assert robust_answer(text, list(OPTIONS), list(OPTIONS.values())) == letter


def test_an_option_past_d_is_not_read_by_the_shared_reader_of_a_to_d():
    letters, options = list("ABCDE"), ["one", "two", "three", "four", "five"]
    assert robust_answer("<answer>B</answer>", letters, options) == "B"
    assert robust_answer("<answer>two</answer>", letters, options) == "B"
    assert robust_answer("<answer>E</answer>", letters, options) == ""
    assert robust_answer("<answer>five</answer>", letters, options) == ""
    # E's text holds D's: naming E is not read as D
    letters, options = list("ABCDE"), ["a cup", "a plate", "a bowl", "open the drawer", "open the drawer slowly"]
    assert robust_answer("<answer>open the drawer slowly</answer>", letters, options) == ""
    assert robust_answer("<answer>Open the drawer.</answer>", letters, options) == "D"
