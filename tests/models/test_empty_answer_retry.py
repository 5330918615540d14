"""The suite's backends' retry of an empty answer (``models.empty_answer_retry``) against Cosmos-Reason1's official
``run_model`` (nvidia-cosmos/cosmos-reason1 @3e7f1cb, examples/benchmark/tools/eval/evaluate.py lines 335-488,
transcribed below with a scripted model), under both its answer types: the same answers kept, the same sampling per
retry, the same answers still empty; "empty" as the answer type's official parser reads it."""

import pytest
from lmms_eval.api.instance import Instance

from lmms_egoplan.core.request_facts import retries_of
from lmms_egoplan.core.request_options import (
    EMPTY_ANSWER_RETRIES,
    EMPTY_ANSWER_RETRY,
    NEVER,
    NO_CAPITAL_LETTER,
    NO_LETTER_IN_ANSWER_TAG,
    empty_answer,
)
from lmms_egoplan.cosmos_reason1.task import DECODING
from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models.empty_answer_retry import retry_generation_kwargs, with_retries
from tests.cosmos_reason1.test_answer_parsers import STRESS, parse_letter_response, parse_reasoning_response


def official_retries(first: list[str], model, answer_type: str, max_retries: int = 10, max_tokens: int = 1024,
                     temperature: float = 0.6) -> tuple[list[str], list[int]]:
    """evaluate.py run_model's retry loop, verbatim but for the logging, the correctness fields and the vLLM
    objects (configs/evaluate.yaml's max_retries, max_tokens and temperature as defaults): ``model(inputs,
    max_tokens, temperature, top_k)`` returns one text per input; the answers' full responses and the indices still
    empty are returned."""
    # run_model's SamplingParams of the answer type: top_k=1 only for letter answers (None: vLLM's default, -1).
    top_k = 1 if answer_type == "letter" else None
    parse = parse_letter_response if answer_type == "letter" else parse_reasoning_response
    full_response = list(first)
    empty_answer_indices = [i for i, text in enumerate(first) if not parse(text)[0]]
    current_empty_indices = empty_answer_indices
    for retry_count in range(max_retries):
        if not current_empty_indices:
            break
        retry_inputs = list(current_empty_indices)
        sampling_max_tokens = max_tokens + 256 * (retry_count + 1)
        sampling_temperature = min(temperature + (0.05 * (retry_count + 1)), 0.9)
        retry_outputs = model(retry_inputs, sampling_max_tokens, sampling_temperature, top_k)
        still_empty_indices = []
        for batch_idx, original_idx in enumerate(current_empty_indices):
            retry_text = retry_outputs[batch_idx]
            answer, reasoning = parse(retry_text)
            if answer:
                full_response[original_idx] = retry_text
            else:
                still_empty_indices.append(original_idx)
        current_empty_indices = still_empty_indices
    return full_response, current_empty_indices


class ScriptedModel:
    """Question i answers empty (no capital letter at all) until its ``empty_for[i]``-th retry; every call recorded
    with its decoding: "greedy" (temperature 0, or top_k 1 as vLLM samples it) or the temperature."""

    def __init__(self, empty_for: list[int]):
        self.empty_for, self.calls, self.asked = empty_for, [], [0] * len(empty_for)

    def __call__(self, indices: list[int], max_tokens: int, temperature: float, top_k: int | None) -> list[str]:
        greedy = temperature == 0 or top_k == 1
        self.calls.append((list(indices), max_tokens, "greedy" if greedy else pytest.approx(temperature, abs=1e-9)))
        texts = []
        for i in indices:
            self.asked[i] += 1
            texts.append(f"<think>try {self.asked[i]}</think>" + (f"<answer>{'ABCD'[i % 4]}</answer>"
                                                                  if self.asked[i] > self.empty_for[i] else ""))
        return texts


def as_asked(model: ScriptedModel):
    """The suite's ``generate_again`` over ``model``: greedy unless the kwargs sample."""
    def generate_again(indices: list[int], kwargs: dict) -> list[str]:
        return model(indices, kwargs["max_new_tokens"], kwargs["temperature"] if kwargs.get("do_sample") else 0, None)

    return generate_again


def request(rule: str, retries: int = 10) -> SuiteInstance:
    made = SuiteInstance.of(Instance("generate_until", ("text", {}, None, 0, "task", "test"), 0,
                                      {"task": "task", "doc_id": 0, "repeats": 1}))
    if rule != NEVER:
        EMPTY_ANSWER_RETRY.mark(made, rule)
    if retries != 10:
        EMPTY_ANSWER_RETRIES.mark(made, str(retries))
    return made


@pytest.mark.parametrize("text", STRESS)
def test_empty_is_what_the_official_parser_of_the_answer_type_reads_nothing_of(text):
    assert empty_answer(text, NO_LETTER_IN_ANSWER_TAG) == (parse_reasoning_response(text)[0] == "")
    assert empty_answer(text, NO_CAPITAL_LETTER) == (parse_letter_response(text)[0] == "")
    assert not empty_answer(text, NEVER)


# run_model's first SamplingParams per answer type: (max_tokens, temperature, top_k).
FIRST_SAMPLING = {"reasoning": (1024, 0.6, None), "letter": (10, 0.0, 1)}


@pytest.mark.parametrize("answer_type, rule, prompt", [("reasoning", NO_LETTER_IN_ANSWER_TAG, "official_reasoning"),
                                                       ("letter", NO_CAPITAL_LETTER, "official_letter")])
def test_the_retries_keep_what_the_official_loop_keeps_with_its_sampling(answer_type, rule, prompt):
    # Per question: the retry whose answer is first read (0: the first answer; 11: never, after 10 retries).
    empty_for = [0, 1, 3, 11, 10, 0]
    official, ours = ScriptedModel(empty_for), ScriptedModel(empty_for)
    first = official(list(range(len(empty_for))), *FIRST_SAMPLING[answer_type])
    expected, still_empty = official_retries(first, official, answer_type)
    kwargs = DECODING[prompt]
    assert first == as_asked(ours)([*range(len(empty_for))], kwargs)
    requests = [request(rule) for _ in first]
    answers = with_retries(first, requests, kwargs, as_asked(ours))
    assert answers == expected and ours.calls == official.calls
    assert answers[3] == first[3]  # the first answer of one never read, as run_model keeps it
    # What the task counts (retries, still empty), per request; one asked once has no record.
    assert [retries_of(asked) for asked in requests] == \
        [(0, False), (1, False), (3, False), (10, True), (10, False), (0, False)] and still_empty == [3]
    # Retry 10: 1,024 + 2,560 new tokens under both types; 0.6 + 0.5 capped at 0.9, greedy under letter (top_k 1).
    assert official.calls[-1][1:] == (1024 + 2560, "greedy" if answer_type == "letter" else pytest.approx(0.9))


def test_a_request_s_max_retries_is_the_official_config_s_max_retries():
    empty_for = [0, 2, 5, 11]
    official, ours = ScriptedModel(empty_for), ScriptedModel(empty_for)
    first = official(list(range(len(empty_for))), *FIRST_SAMPLING["letter"])
    expected, still_empty = official_retries(first, official, "letter", max_retries=3)
    assert first == as_asked(ours)([*range(len(empty_for))], DECODING["official_letter"])
    requests = [request(NO_CAPITAL_LETTER, retries=3) for _ in first]
    answers = with_retries(first, requests, DECODING["official_letter"], as_asked(ours))
    assert answers == expected and ours.calls == official.calls and len(ours.calls) == 1 + 3 and still_empty == [2, 3]
    assert [retries_of(asked) for asked in requests] == \
        [(0, False), (2, False), (3, True), (3, True)]
    never_asked = ScriptedModel([11])
    assert with_retries(["none"], [request(NO_CAPITAL_LETTER, retries=0)], {}, as_asked(never_asked)) == ["none"]
    assert never_asked.calls == []


def test_requests_that_do_not_ask_are_not_retried():
    texts = ["<answer></answer>", "no tag"]

    def never(indices, kwargs):
        raise AssertionError("asked again")

    assert with_retries(texts, [request(NEVER), request(NEVER)], {}, never) == texts
    requests = [request(NEVER), request(NO_LETTER_IN_ANSWER_TAG)]
    mixed = with_retries(texts, requests, {"max_new_tokens": 10},
                         lambda indices, kwargs: ["<answer>C</answer>"] * len(indices))
    assert mixed == ["<answer></answer>", "<answer>C</answer>"]
    assert [retries_of(asked) for asked in requests] == [(0, False), (1, False)]


def test_a_request_of_each_rule_is_retried_with_its_own_sampling_in_one_batch():
    texts = ["no capital", "<answer>no capital</answer>"]
    asked = []

    def generate_again(indices, kwargs):
        asked.append((indices, kwargs["max_new_tokens"]))
        return ["<answer>C</answer>"] * len(indices)

    kwargs = {"max_new_tokens": 10, "temperature": 0, "do_sample": False}
    requests = [request(NO_CAPITAL_LETTER), request(NO_LETTER_IN_ANSWER_TAG)]
    assert with_retries(texts, requests, kwargs, generate_again) == ["<answer>C</answer>"] * 2
    assert asked == [([0], 1024 + 256), ([1], 10 + 256)]
    assert [retries_of(asked) for asked in requests] == [(1, False)] * 2


def test_a_greedy_request_stays_greedy_and_only_gets_more_tokens():
    greedy = {"max_new_tokens": 10, "temperature": 0, "do_sample": False}
    assert retry_generation_kwargs(greedy, 2, NO_LETTER_IN_ANSWER_TAG) == {**greedy, "max_new_tokens": 522}
    # The letter rule's retries start from evaluate.yaml's max_tokens, not the request's 10.
    assert retry_generation_kwargs(greedy, 2, NO_CAPITAL_LETTER) == {**greedy, "max_new_tokens": 1024 + 512}
