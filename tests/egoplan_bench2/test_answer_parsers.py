"""EgoPlan-Bench2's two answer parsers: the official one against the official function itself
(transcribed below from qiulu66/EgoPlan-Bench2 eval.py, as the oracle), the robust one against what a
person reads."""

import random
import re

import pytest

from lmms_egoplan.egoplan_bench2.parsing import official_letter, read_letters, robust_letter


# --- The oracle: eval.py at 5be81557715e30aff1c8ce2e9ae62beef8151272, lines 35-60, verbatim ----------
# (its missing commas after "The best option is" and "Best answer:" included; the implicit joins are the bug)
def extract_characters_regex(s):
    # https://github.com/thanku-all/parse_answer/blob/main/eval_your_results.py
    s = s.strip()
    answer_prefixes = [
        "The best answer is",
        "The correct answer is",
        "The answer is",
        "The answer",
        "The best option is"
        "The correct option is",
        "Best answer:"
        "Best option:",
        "Answer:",
        "Option:",
        "The correct answer",
        "The correct option",
    ]
    for answer_prefix in answer_prefixes:
        s = s.replace(answer_prefix, "")

    if len(s.split()) > 10 and not re.search("[ABCD]", s):
        return ""
    matches = re.search(r'[ABCD]', s)
    if matches is None:
        return ""
    return matches[0]


def official_oracle(response: str) -> str | None:
    """What eval.py scores: ``extract_characters_regex(response).upper()`` (line 129), "" as None."""
    return extract_characters_regex(response).upper() or None


OFFICIAL = [
    ("A", "A"), ("B", "B"), (" C ", "C"), ("D.", "D"), ("(B)", "B"),
    ("Answer: D", "D"), ("Answer:D", "D"), ("Option: C", "C"), ("The answer is B", "B"),
    ("The best answer is C.", "C"), ("The correct answer is (D)", "D"), ("The correct option C", "C"),
    # the fused prefixes: "Best answer:" and "Best option:" are never removed, and their B is read
    ("Best answer: D", "B"), ("Best option: A", "B"), ("The best option is C", "C"),
    ("The best option isThe correct option is D", "D"), ("Best answer:Best option: C", "C"),
    # the first capital A-D anywhere
    ("Based on the video, D.", "B"), ("Clearly, the answer is D", "C"), ("After opening the oven, C", "A"),
    ("I choose D", "D"), ("I would pick option B.", "B"), ("Definitely A", "D"),
    ("c", None), ("the answer is d", None), ("<answer>C</answer>", "C"), ("**B**", "B"),
    ("place oven tray", None), ("", None), ("   ", None),
    ("i am not sure which of these is right because the video is too dark to see", None),
    ("I am not sure which of these is right because the video is too dark to see", None),
    ("The answer is: A", "A"), ("ANSWER: C", "A"), ("Answer: (d) attach stopwatch", None),
    ("The answer\nC", "C"), ("Answer: B, then D", "B"),
]


@pytest.mark.parametrize("response, expected", OFFICIAL)
def test_the_official_parser_reads_what_eval_py_reads(response, expected):
    assert official_oracle(response) == expected  # the table says what the official code does ...
    assert official_letter(response) == expected  # ... and so does the reproduction


def test_the_official_parser_agrees_with_eval_py_on_random_answers():
    words = ["The", "the", "answer", "Answer:", "is", "best", "Best", "option", "Option:", "correct", "A", "B", "C",
             "D",
             "a", "d", "(C)", "Based", "on", "video", "Clearly", "\n", "<answer>", "</answer>", "I", "choose", "place",
             "tray", "The answer is", "Best answer:", "The best option is", "The correct option", ".", "D."]
    rng = random.Random(0)
    for _ in range(3000):
        response = " ".join(rng.choice(words) for _ in range(rng.randint(0, 16)))
        assert official_letter(response) == official_oracle(response), response


CHOICES = ["attach stopwatch", "place oven tray", "operate oven", "set stopwatch"]

ROBUST = [
    ("A", "A"), ("b", "B"), ("(C)", "C"), ("d.", "D"), (" [B] ", "B"), ("**D**", "D"),
    ("Answer: D", "D"), ("answer: c", "C"), ("Best answer: D", "D"), ("The best option is C", "C"),
    ("The correct answer is (D)", "D"), ("I choose D", "D"), ("I would pick option B.", "B"),
    ("Option (b)", "B"), ("Based on the video, the next step is D.", "D"),
    ("Based on the video, the oven is closed.\n\nAnswer: C", "C"),
    ("Clearly, the answer is D", "D"), ("Option A is tempting, but option C is right.", "C"),
    ("The answer is C, not A.", "C"), ("A is wrong; the answer is B", "B"),
    ("<answer>C</answer>", "C"), ("<think>Option B looks plausible.</think><answer>D</answer>", "D"),
    ("<think>hmm</think>\n<answer> (a) </answer>", "A"), ("<answer>operate oven</answer>", "C"),
    ("<think>The answer is B... no, the tray is in.</think>\nD", "D"), ("the answer may be A.</think> C", "C"),
    ("<answer>A</answer> Wait, the tray is in. <answer>C</answer>", "C"),  # the last answer tag counts
    ("<answer>D</answer>\n<thinking>Option B would fit too.</thinking>", "D"),  # reasoning after the answer
    ("◁think▷The answer is B... no.◁/think▷The answer is D.", "D"),  # Kimi-VL-Thinking's markers
    ("<think>The answer is B, I think, but the tray", None),  # cut inside its thinking: no answer
    ("B. place oven tray", "B"), ("c) operate oven", "C"), ("Place oven tray.", "B"),
    # the answer first, then an explanation that discusses other options: the answer counts
    ("B. place oven tray. Option C is incorrect because the tray is not in.", "B"),
    ("B\n\nOption A is not needed yet.", "B"), ("The best answer is B. Answer A is premature.", "B"),
    ("The answer is B, not option D.", "B"), ("The answer is A. Wait, actually the answer is C.", "C"),
    ("I would set stopwatch next.", "D"), ("The next action: attach stopwatch", "A"),
    ("the answer is a knife", None), ("A good next step would be to wait.", None),
    ("I cannot tell from these frames.", None), ("", None), ("A or B", None),
    ("Based on what I see, I cannot decide.", None), ("Definitely the stopwatch.", None),
]


@pytest.mark.parametrize("response, expected", ROBUST)
def test_the_robust_parser_reads_what_a_person_reads(response, expected):
    assert robust_letter(response, CHOICES) == expected


def test_each_table_holds_at_least_thirty_answers_and_the_parsers_differ_where_the_official_one_errs():
    assert len(OFFICIAL) >= 30 and len(ROBUST) >= 30
    assert read_letters("Based on the video, the oven is closed.\n\nAnswer: C", CHOICES) == {"official": "B",
                                                                                             "robust": "C"}
    assert read_letters("Best answer: D", CHOICES) == {"official": "B", "robust": "D"}
    assert read_letters("i would operate oven", CHOICES) == {"official": None, "robust": "C"}
