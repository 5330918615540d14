"""What a task asks of the backend for its requests beyond lmms-eval's request arguments, per request.

lmms-eval's backends score and prompt by their own conventions. A task whose official evaluation
does otherwise sets an option on the requests it builds (their declared field ``request_options``, {option name:
value}: ``harness.lmms_eval_task.SuiteInstance``, lmms-eval's ``Instance`` with that field): which tokens of a
candidate answer are scored, e.g. the answer and
the token closing the assistant's turn (``SCORED_SPAN``); how their losses are averaged, e.g.
leaving out the tokens whose loss is exactly 0 (``LOSS_MEAN``); whether the task text comes before
the images (``INPUT_ORDER``); whether an answer its official parser reads nothing of is generated again
(``EMPTY_ANSWER_RETRY``); the task's system turn (``SYSTEM_PROMPT``, any text); whether the sampling settings a
request leaves unset are switched off rather than filled from the checkpoint's generation_config
(``SAMPLING_DEFAULTS``). The benchmarks' READMEs say which task asks for what. A backend declares the values it
honours in its class attribute
``request_options`` (``{option name: values}``). A request without the option, and a backend
without the declaration, follow lmms-eval's convention. (Proposed upstream as a field of
``Instance``: docs/upstream.md.)

This module imports nothing of the suite or the harness, so tasks and backends share it without an
import cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BACKEND_ATTRIBUTE = "request_options"  # a backend class's declaration of the values it honours
REQUEST_ATTRIBUTE = "request_options"  # a request's options, {option name: value}


@dataclass(frozen=True)
class RequestOption:
    name: str  # its key in a request's ``request_options`` and in a backend's declaration
    convention: str  # lmms-eval's: what a request without the attribute gets
    values: tuple[str, ...]
    # True: a backend that cannot honour a value would give other scores, so the task refuses it;
    # False: such a backend follows its own convention, and the task says so.
    binding: bool
    likelihood_only: bool  # only loglikelihood requests carry it
    # True: the task's ``on_backend`` hook says what a backend that does not honour it does instead (the harness's
    # generic warning would repeat it).
    said_by_task: bool = False
    generation_only: bool = False  # only generation requests carry it
    any_text: bool = False  # its value is any text (``values`` empty), e.g. a system prompt

    def of(self, request) -> str:
        """The value a request asks for (lmms-eval's own ``Instance``, which has no options: the convention)."""
        return getattr(request, REQUEST_ATTRIBUTE, {}).get(self.name, self.convention)

    def mark(self, requests, value: str) -> None:
        """Ask for ``value`` on ``requests`` (one ``SuiteInstance`` or a list of them)."""
        self.check(value, "a task")
        for request in requests if isinstance(requests, list) else [requests]:
            if not hasattr(request, REQUEST_ATTRIBUTE):
                raise TypeError(f"{type(request).__name__} has no {REQUEST_ATTRIBUTE} field: the suite's tasks build "
                                f"lmms_egoplan.harness.lmms_eval_task.SuiteInstance requests")
            getattr(request, REQUEST_ATTRIBUTE)[self.name] = value

    def honoured_by(self, backend_class: type, value: str) -> bool:
        declared = getattr(backend_class, BACKEND_ATTRIBUTE, {})
        if value == self.convention:
            return True
        return self.name in declared if self.any_text else value in declared.get(self.name, ())

    def check(self, value: str, where: str) -> str:
        if self.any_text:
            if not isinstance(value, str):
                raise ValueError(f"{where} asks for {self.name} {value!r}; expected text")
            return value
        if value not in self.values:
            raise ValueError(f"{where} asks for {self.name} {value!r}; known: {', '.join(self.values)}")
        return value


ANSWER = "answer"
ANSWER_AND_END_OF_TURN = "answer_and_end_of_turn"  # the answer, then the chat template's end-of-turn token(s)
SCORED_SPAN = RequestOption("scored_span", ANSWER, (ANSWER, ANSWER_AND_END_OF_TURN), binding=True, likelihood_only=True)

EVERY_SCORED_TOKEN = "every_scored_token"  # the mean over the scored tokens
NONZERO_LOSS_TOKENS = "nonzero_loss_tokens"  # the summed loss over the tokens whose loss is not exactly 0
LOSS_MEAN = RequestOption("loss_mean", EVERY_SCORED_TOKEN, (EVERY_SCORED_TOKEN, NONZERO_LOSS_TOKENS), binding=True,
                          likelihood_only=True)

VISUALS_FIRST = "visuals_first"
TEXT_FIRST = "text_first"
INPUT_ORDER = RequestOption("input_order", VISUALS_FIRST, (VISUALS_FIRST, TEXT_FIRST), binding=False,
                                  likelihood_only=False)

NEVER = "never"
# Cosmos-Reason1's official parsers (``cosmos_reason1.parsing``) read nothing: under its reasoning prompt, no capital
# letter inside the first <answer>...</answer>; under its letter prompt, no capital letter anywhere. The backend
# generates such an answer again (``models.empty_answer_retry``).
NO_LETTER_IN_ANSWER_TAG = "no_letter_in_answer_tag"
NO_CAPITAL_LETTER = "no_capital_letter"
EMPTY_ANSWER_MAX_RETRIES = 10  # cosmos-reason1 @3e7f1cb examples/benchmark/configs/evaluate.yaml: max_retries
# configs/evaluate.yaml: max_tokens, the new tokens a retry's 256 more per retry start from. The reasoning request asks
# for it itself; the letter request's 10 are run_model's own, so its retries start from this.
EMPTY_ANSWER_RETRY_BASE_TOKENS = {NO_CAPITAL_LETTER: 1024}
EMPTY_ANSWER_RETRY = RequestOption("empty_answer_retry", NEVER, (NEVER, NO_LETTER_IN_ANSWER_TAG, NO_CAPITAL_LETTER),
                                   binding=False, likelihood_only=False, said_by_task=True)
# How often at most (configs/evaluate.yaml's max_retries, a setting of the official run too): a request asking for a
# retry rule and none of these is retried the official 10 times; 0 to 10.
EMPTY_ANSWER_RETRIES = RequestOption("empty_answer_retries", str(EMPTY_ANSWER_MAX_RETRIES),
                                     tuple(str(count) for count in range(EMPTY_ANSWER_MAX_RETRIES + 1)),
                                     binding=False, likelihood_only=False, said_by_task=True)
# The system turn a task's official evaluation sends; "" (lmms-eval's convention): none of the task's, the backend's
# own (egoplan_hf / egoplan_server: their system_prompt model_arg, else the chat template's default).
SYSTEM_PROMPT = RequestOption("system_prompt", "", (), binding=False, likelihood_only=False, said_by_task=True,
                              generation_only=True, any_text=True)

# The sampling settings a generation request leaves unset (top_k, top_p, min_p, repetition_penalty): filled from the
# checkpoint's generation_config, else transformers' defaults (lmms-eval's backends, transformers' generate), or
# switched off, as vLLM's SamplingParams leave them (e.g. Cosmos-Reason1's official run).
MODEL_DEFAULTS = "model_defaults"
UNSET_IS_OFF = "unset_is_off"
SAMPLING_DEFAULTS = RequestOption("sampling_defaults", MODEL_DEFAULTS, (MODEL_DEFAULTS, UNSET_IS_OFF), binding=False,
                                  likelihood_only=False, said_by_task=True, generation_only=True)
# nvidia-cosmos/cosmos-reason1 @3e7f1cb examples/benchmark/tools/eval/utils/output.py: ANSWER_PATTERN,
# SINGLE_LETTER_PATTERN (parse_reasoning_response, parse_letter_response), verbatim.
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
SINGLE_LETTER_PATTERN = re.compile(r"[A-Z]")


def empty_answer(text: str, rule: str) -> bool:
    """Whether ``rule`` (an ``EMPTY_ANSWER_RETRY`` value) finds ``text`` empty."""
    if rule == NO_LETTER_IN_ANSWER_TAG:
        found = ANSWER_PATTERN.search(text)
        return not (found and SINGLE_LETTER_PATTERN.search(found.group(1)))
    if rule == NO_CAPITAL_LETTER:
        return not SINGLE_LETTER_PATTERN.search(text)
    return False
