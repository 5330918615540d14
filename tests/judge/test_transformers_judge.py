"""The in-process transformers judge (``judge_backend=hf``) on tiny random-weight checkpoints: the prompts that
arrive while a generation runs gather into the next batch (issue 63: callers no longer queue on a generation lock,
which collapsed batches to 2-3 prompts), every answer reaches the caller that asked, and the model loads onto its
device in the checkpoint's dtype."""

import math
import threading

import pytest

from lmms_egoplan.judge.engine import Judge
from lmms_egoplan.judge.protocol import Decoding, JudgeRequest
from lmms_egoplan.judge.providers.transformers import TransformersBackend

DECODING = Decoding(max_tokens=6)
WORDS = "apple river stone cloud mirror violin garden rocket candle forest bridge pepper tunnel harbor lantern meadow"


def judge_requests(n):
    words = WORDS.split()
    return [JudgeRequest.from_prompt(f"q{i}", f"{words[i % 16]} {words[(i * 5 + 3) % 16]} {i}",
                                     system="You are a judge.") for i in range(n)]


def conversations(n):
    return [request.messages for request in judge_requests(n)]


@pytest.fixture(scope="module")
def backend(tiny_model):
    # float32: the same greedy text in a batch of any make-up; width 64: answers that differ between prompts
    return TransformersBackend(str(tiny_model("llama", hidden_size=64)), batch_size=8)


@pytest.fixture(scope="module")
def alone(backend):
    """Each conversation's answer generated on its own: what its caller must get back."""
    return [backend._generate([tuple(c)], DECODING)[0] for c in conversations(24)]


def test_callers_in_flight_fill_the_batches_and_each_gets_its_own_answer(backend, alone):
    assert len(set(alone)) >= 8  # answers tell most prompts apart, so a swapped answer shows
    judge = Judge(backend, decoding=DECODING, concurrency=8, retries=0)
    calls = backend.generate_calls
    results = judge.run(judge_requests(24), lambda text: 1.0, progress=False)
    assert [j.raw_output for j in results.judgements] == alone
    # 3 full batches of 8; the old lock made about 10 here (2-3 prompts each). Slack for a loaded machine.
    assert backend.generate_calls - calls <= math.ceil(24 / 8) + 2


def test_answers_reach_their_callers_when_prompts_arrive_one_by_one(backend, alone):
    prompts = conversations(12)
    answers = [None] * len(prompts)

    def ask(i):
        answers[i] = backend.complete(prompts[i], DECODING).text

    callers = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(120)
    assert answers == alone[:12]


def test_a_lone_caller_is_answered_in_batches_of_one(backend, alone):
    calls = backend.generate_calls
    assert [backend.complete(c, DECODING).text for c in conversations(3)] == alone[:3]
    assert backend.generate_calls - calls == 3


def test_prompts_of_another_decoding_wait_for_a_batch_of_their_own(backend, alone):
    longer = Decoding(max_tokens=9)
    prompts = conversations(6)
    answers = {}

    def ask(i, decoding):
        answers[i, decoding.max_tokens] = backend.complete(prompts[i], decoding).text

    callers = [threading.Thread(target=ask, args=(i, DECODING if i % 2 else longer)) for i in range(6)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(120)
    for i in range(1, 6, 2):
        assert answers[i, 6] == alone[i]
    for i in range(0, 6, 2):
        assert answers[i, 9] == backend._generate([tuple(prompts[i])], longer)[0]


def test_a_failed_generation_fails_every_caller_of_its_batch_and_the_judge_goes_on(backend, monkeypatch):
    from lmms_egoplan.judge.protocol import JudgeCallError

    real = backend._generate

    def out_of_memory(*_):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(backend, "_generate", out_of_memory)
    with pytest.raises(JudgeCallError, match="generation failed: out of memory"):
        backend.complete(conversations(1)[0], DECODING)
    monkeypatch.setattr(backend, "_generate", real)
    assert backend.complete(conversations(1)[0], DECODING).text == real([tuple(conversations(1)[0])], DECODING)[0]


def test_the_judge_loads_onto_its_device_in_the_checkpoints_dtype(tiny_model):
    import torch

    loaded = TransformersBackend(str(tiny_model("llama", dtype="bfloat16")), batch_size=2)._model
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}  # no float32 copy
    assert {p.device.type for p in loaded.parameters()} == {"cuda" if torch.cuda.is_available() else "cpu"}
