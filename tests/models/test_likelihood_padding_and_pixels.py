"""Issue 78 point 3: egoplan_hf's questions batched by length (``EgoPlanHF._length_sorted``), with the scores of the
batches they arrive in, back in request order; and a Qwen-VL's pixels sent as the processor's uint8 patches and
normalised on the device (``models.device_pixels``) to the processor's own values."""

from __future__ import annotations

import pytest
import torch

from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models import egoplan_hf
from lmms_egoplan.models.device_pixels import RAW_VALUES, DevicePixels
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from lmms_egoplan.models.likelihood import ForwardTokens
from tests.gpu.conftest import load_speed_module
from tests.models.test_egoplan_hf import SPLIT, TASK, egoplan_doc, egoplan_visuals, mc_requests
from tests.models.test_likelihood_batching import TREE_ARCHS, assert_same_scores

QWEN_VL = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]


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
    handed = []
    backend.scorer.forward_tokens = tokens = ForwardTokens()
    backend.response_sink = lambda request, score: handed.append((request, score))
    try:
        values = backend.loglikelihood(requests)
    finally:
        backend.response_sink = None
    return values, handed, tokens.padded / tokens.total


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


@pytest.mark.parametrize("arch", QWEN_VL)
def test_pixels_travel_as_uint8_and_are_normalised_on_the_device_as_the_processor_does(arch, tiny_model):
    """The prompt's pixels leave the host as uint8 patches (a quarter of float32's bytes) and are, on the device, the
    processor's own float32 values bit for bit, bfloat16's as the host cast them; the scores are those of pixels
    normalised on the host (device_pixels None: every other architecture's path)."""
    backend = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=2)
    requests = mc_requests(backend, uneven_docs())
    visuals = [backend._doc_visuals((TASK, SPLIT, doc_id, egoplan_visuals)) for doc_id in (0, 1)]
    texts = [backend.chat.generation_prompt(backend.chat.user_turn(v.parts, "What next?")) for v in visuals]
    sent = backend._encode(texts, visuals, "docs 0 and 1")
    host_normalised = backend.processor(text=texts, return_tensors="pt", padding=True,
                                        videos=[video.frames for v in visuals for video in v.videos],
                                        video_metadata=[video.metadata() for v in visuals for video in v.videos],
                                        do_sample_frames=False, images=[v.images for v in visuals],
                                        add_special_tokens=backend.chat.adds_special_tokens(texts[0]))
    arrived = backend._on_device(sent)
    pixels = [key for key in ("pixel_values", "pixel_values_videos") if key in host_normalised]
    assert pixels
    for key in pixels:
        assert sent[key].dtype == torch.uint8  # what is copied to the device
        assert torch.equal(arrived[key], host_normalised[key])
        in_bfloat16 = DevicePixels(backend.processor, torch.bfloat16).normalised({key: sent[key]})[key]
        assert torch.equal(in_bfloat16, host_normalised[key].to(torch.bfloat16))
    on_device = backend.loglikelihood(requests)
    backend.device_pixels = None
    assert backend.loglikelihood(requests) == on_device


def test_other_architectures_normalise_on_the_host(tiny_model):
    backend = EgoPlanHF(pretrained=str(tiny_model("llava")), device="cpu", dtype="float32")
    assert backend.device_pixels is None
    assert DevicePixels.for_model("llava", backend.processor, torch.float32) is None
    assert set(RAW_VALUES) == {"do_rescale", "do_normalize"}


def test_the_bench_counts_padding_and_bytes_at_the_qwen2_5_vl_7b_structure(checkpoint_cache, monkeypatch):
    """speed/bench_loglikelihood.py's ``padding_share`` and ``host_to_device_bytes_per_question`` at Qwen2.5-VL-7B's
    processor, frames and token counts (2 decoder layers): the demo's EgoPlan questions (prompts of unequal length)
    batched 8 at a time pad at most 5% of the tokens; the pixels' bytes are at most a third of float32's."""
    bench = load_speed_module("bench_loglikelihood")
    pretrained = bench.realistic_checkpoint("qwen2.5-vl-7b", 2, checkpoint_cache, "cpu", "narrow")
    model = EgoPlanHF(pretrained=str(pretrained), device="cpu", dtype="float32")
    docs = bench.egoplan_docs(16, bench.FRAME_SIDE["qwen2.5-vl-7b"], observation=True)
    model.task_dict = {bench.TASK: {bench.SPLIT: docs}}
    requests = bench.requests_for(docs, "answer_and_end_of_turn")
    bench.use_method(model, "batched", 8, None)
    counts, _ = bench.model_step_counts(model, requests)
    with monkeypatch.context() as before:  # the batches of arrival order, pixels normalised on the host
        before.setattr(egoplan_hf, "LENGTH_SORTED_BATCHES", 1)
        before.setattr(model, "device_pixels", None)
        today, _ = bench.model_step_counts(model, requests)
    assert counts["padding_share"] <= 0.05 and counts["padding_share"] < today["padding_share"]
    assert counts["host_to_device_bytes_per_question"] <= today["host_to_device_bytes_per_question"] / 3
