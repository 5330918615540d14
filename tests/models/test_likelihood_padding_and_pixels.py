"""Issue 78 point 3: egoplan_hf's questions batched by length (``EgoPlanHF._length_sorted``), with the scores of the
batches they arrive in, back in request order."""

from __future__ import annotations

import pytest

from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models import egoplan_hf
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from tests.models.test_egoplan_hf import egoplan_doc, mc_requests
from tests.models.test_likelihood_batching import TREE_ARCHS, assert_same_scores


def uneven_docs() -> list[dict]:
    """Questions whose prompts alternate short and long, so that batches of two in arrival order pad every one."""
    docs = [egoplan_doc(seed) for seed in range(6)]
    for doc in docs[1::2]:
        doc["question"] += " Mind the kettle, the mugs and the beans on the shelf." * 4
    return docs


def requests_of(backend: EgoPlanHF, arch: str) -> list:
    if arch != "llama":
        return mc_requests(backend, uneven_docs())
    return [SuiteInstance(request_type="loglikelihood", idx=i, arguments=(context, continuation),
                          metadata={"task": None, "doc_id": None, "repeats": 1})
            for context in ["Short.", "A much longer context than the others, to pad it well.", "Mid one.",
                            "Another long context, as long as the second one is, or so."]
            for i, continuation in enumerate([" yes", " no way", " maybe", " later on"])]


def scored_with_padding(backend: EgoPlanHF, requests) -> tuple[list, list, float]:
    """(values, what the response sink got, padded tokens over all tokens of the forward passes)."""
    tokens, handed = [0, 0], []
    forward = backend.scorer._forward

    def counted(inputs, padded_tokens, **options):
        tokens[0] += inputs["input_ids"].numel()
        tokens[1] += padded_tokens
        return forward(inputs, padded_tokens, **options)

    backend.scorer._forward, backend.response_sink = counted, lambda request, score: handed.append((request, score))
    try:
        values = backend.loglikelihood(requests)
    finally:
        del backend.scorer._forward
        backend.response_sink = None
    return values, handed, tokens[1] / tokens[0]


@pytest.mark.parametrize("arch", TREE_ARCHS)
def test_questions_batched_by_length_score_as_the_batches_they_arrive_in(arch, tiny_model, monkeypatch):
    """Batches formed from questions of similar length pad less than the batches of their arrival order (a window of
    one batch: today's), with values within float32's batching tolerance, the same choices, each score handed to the
    response sink with its own request and returned at its request's index."""
    backend = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=2)
    requests = requests_of(backend, arch)
    with monkeypatch.context() as arrival_order:
        arrival_order.setattr(egoplan_hf, "LENGTH_SORTED_BATCHES", 1)
        expected, _, arrival_padding = scored_with_padding(backend, requests)
    values, handed, padding = scored_with_padding(backend, requests)
    assert_same_scores(values, expected)
    assert padding < arrival_padding
    assert len(handed) == len(requests)
    assert {id(request): score for request, score in handed} == {id(request): value
                                                                 for request, value in zip(requests, values)}
    assert [request for request, _ in handed] != requests  # sorted: the order of scoring is not the requests'
