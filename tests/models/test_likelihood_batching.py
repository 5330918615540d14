"""egoplan_hf scores several questions per forward pass (``batch_size``) and attends a Qwen-VL vision tower's windows
in one call (``models.vision_attention``), with the values of one question at a time and of the per-window loop; and
the model step's counts (speed/bench_loglikelihood.py's ``model_step_counts``) at Qwen2.5-VL-7B's structure."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import math
from typing import Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models.egoplan_hf import GPU_DEFAULTS, EgoPlanHF
from tests.gpu.conftest import load_speed_module
from tests.models.test_egoplan_hf import egoplan_doc, mc_requests

# float32: a question's losses batched and alone differ only by the summation order of padded and unpadded kernels.
BATCHED_TOLERANCE = 1e-5
# Questions of different prompt lengths (the case number's digits), so that a batch is left padded.
SEEDS = (0, 12, 3, 1234, 7)
# Architectures whose positions differ: M-RoPE (Qwen), 1-D RoPE with token types (Gemma 3), a plain LLaVA.
BATCHED_ARCHS = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "llava", "gemma3"]


def choices(values: list) -> list[int]:
    return [min(range(4), key=lambda i: values[q + i][0]) for q in range(0, len(values), 4)]


def assert_same_scores(batched: list, alone: list) -> None:
    assert len(batched) == len(alone)
    for (value, greedy), (expected, expected_greedy) in zip(batched, alone):
        assert value == pytest.approx(expected, abs=BATCHED_TOLERANCE) and greedy == expected_greedy
    assert choices(batched) == choices(alone)


def forward_passes(model: EgoPlanHF, requests) -> tuple[list, int]:
    passes = []
    hook = model.model.register_forward_pre_hook(lambda *_: passes.append(1))
    try:
        return model.loglikelihood(requests), len(passes)
    finally:
        hook.remove()


@pytest.mark.parametrize("arch", BATCHED_ARCHS)
def test_questions_scored_in_batches_score_as_one_at_a_time(arch, tiny_model):
    alone = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32")
    # 3 questions a batch, 5 candidates a continuation batch: chunks that span two questions.
    batched = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=3,
                        continuation_batch_size=5)
    docs = [egoplan_doc(seed) for seed in SEEDS]
    expected, passes_alone = forward_passes(alone, mc_requests(alone, docs))
    values, passes = forward_passes(batched, mc_requests(batched, docs))
    assert_same_scores(values, expected)
    assert passes_alone == 2 * len(docs)  # a prefill and a continuation batch per question
    assert passes == 2 + math.ceil(12 / 5) + math.ceil(8 / 5)  # 2 prefills of 3 and 2 questions, their chunks


@pytest.mark.parametrize("continuation_batch_size", [16, 1])
@pytest.mark.parametrize("arch", ["llama", "qwen2_vl"])
def test_text_only_questions_of_different_lengths_batch_too(arch, continuation_batch_size, tiny_model):
    """No visuals (a context-free request, or a text-only model): the positions of a left-padded row come from the
    attention mask, for M-RoPE models too. One candidate a continuation batch (no right padding in any) still masks
    the left padding of its question's prefill in every batch, not only in the first."""
    contexts = ["Short one.", "A much longer context, with many more words in it than the others, to pad.", "Mid."]
    requests = [SuiteInstance(request_type="loglikelihood", idx=i, arguments=(context, continuation),
                              metadata={"task": None, "doc_id": None, "repeats": 1})
                for context in contexts for i, continuation in enumerate([" yes", " no way", " maybe", " later"])]
    alone, batched = (EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=size,
                                continuation_batch_size=continuation_batch_size) for size in (1, 3))
    assert_same_scores(batched.loglikelihood(requests), alone.loglikelihood(requests))


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_a_vision_towers_windows_attended_in_one_call_score_as_the_per_window_loop(arch, tiny_model):
    bench = load_speed_module("bench_loglikelihood")
    model = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32")
    requests = mc_requests(model, [egoplan_doc(0)])
    packed, values = bench.model_step_counts(model, requests)
    model.vision_attention.enabled = False
    looped, expected = bench.model_step_counts(model, requests)
    assert_same_scores(values, expected)
    vision = model.model.model.visual
    blocks = len(vision.blocks)
    # Per question: the video and the image each through every block once, then the decoder's layers in the
    # prefill and the continuation batch.
    text_calls = 2 * model.model.config.get_text_config().num_hidden_layers
    assert packed["attention_calls_per_question"] == 2 * blocks + text_calls
    assert looped["attention_calls_per_question"] > packed["attention_calls_per_question"]
    # The loop reads the lengths three times a block; the packed forward none (its longest segments come with the
    # tower's layout, computed on the host: test_a_vision_towers_layout_is_computed_on_the_host).
    assert looped["device_syncs_per_question"] - packed["device_syncs_per_question"] == 2 * 3 * blocks


@pytest.mark.parametrize("lengths", [(16, 16, 16), (10, 22, 16)], ids=["uniform", "uneven"])
def test_packed_vision_attention_views_uniform_segments_and_gathers_uneven_ones(lengths, tiny_model):
    """Segments of one length (the 7B's windows and frames at 448 px) are attended as a view of the packed sequence,
    with no gathering or mask; uneven ones gathered into a padded batch; both as the module's own per-segment loop."""
    model = EgoPlanHF(pretrained=str(tiny_model("qwen2_5_vl")), device="cpu", dtype="float32")
    attention = model.model.model.visual.blocks[0].attn
    torch.manual_seed(0)
    tokens, head_dim = sum(lengths), attention.head_dim
    hidden = torch.randn(tokens, model.model.model.visual.config.hidden_size)
    angles = torch.randn(tokens, head_dim)
    cu_seqlens = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    gathers = []

    class CountingGathers(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            gathers.append(func) if func is torch.ops.aten.index.Tensor else None
            return func(*args, **(kwargs or {}))

    with torch.inference_mode(), CountingGathers():
        packed = attention(hidden, cu_seqlens=cu_seqlens, position_embeddings=(angles.cos(), angles.sin()))
    with torch.inference_mode():
        looped = attention._per_segment_forward(hidden, cu_seqlens, (angles.cos(), angles.sin()))
    assert torch.allclose(packed, looped, atol=BATCHED_TOLERANCE)
    # Uneven: the layout's lookup of each token's segment start, query, key and value gathered, the output scattered.
    assert len(gathers) == (0 if len(set(lengths)) == 1 else 5)


def test_the_model_step_counts_at_the_qwen2_5_vl_7b_structure(checkpoint_cache):
    """speed/bench_loglikelihood.py --shape qwen2.5-vl-7b --width narrow --batch-size 8 at 2 of the 28 decoder layers
    (2 vision blocks, one of full attention): the 7B's processor, frames and token counts (1,354-token prompts,
    5,120 patches a question). The forward passes and host reads do not grow with depth; the attention calls do,
    by one per vision block and vision call and one per decoder layer and forward pass, so the full depth's follow."""
    bench = load_speed_module("bench_loglikelihood")
    layers, questions, batch_size = 2, 8, 8
    pretrained = bench.realistic_checkpoint("qwen2.5-vl-7b", layers, checkpoint_cache, "cpu", "narrow")
    model = EgoPlanHF(pretrained=str(pretrained), device="cpu", dtype="float32")
    docs = bench.egoplan_docs(questions, bench.FRAME_SIDE["qwen2.5-vl-7b"], observation=True)
    model.task_dict = {bench.TASK: {bench.SPLIT: docs}}
    requests = bench.requests_for(docs, "answer_and_end_of_turn")
    bench.use_method(model, "batched", batch_size, None)
    counts, _ = bench.model_step_counts(model, requests)
    passes = 1 + math.ceil(4 * batch_size / model.scorer.continuation_batch_size)  # per batch of 8
    assert counts["forward_passes_per_question"] == passes / batch_size <= 0.5
    assert counts["device_syncs_per_question"] <= 30
    vision_blocks = len(model.model.model.visual.blocks)
    assert counts["attention_calls_per_question"] == (2 * vision_blocks + layers * passes) / batch_size
    assert (2 * 32 + 28 * passes) / batch_size <= 200  # at the published depth
    bench.use_method(model, "prefix_shared", batch_size, None)  # the path before: a question at a time, windows looped
    before, _ = bench.model_step_counts(model, requests[:4])
    assert before["forward_passes_per_question"] == 2
    assert before["attention_calls_per_question"] > 10 * counts["attention_calls_per_question"]


class HostReads(TorchFunctionMode):
    """Counts the host reads of tensor values (``reads_of``: speed/bench_loglikelihood.py's ``host_read``, what would
    synchronise a GPU) made outside ``vision``'s forward (the vision tower's own are not the prefill's), or
    (``inside``) in it."""

    def __init__(self, vision: torch.nn.Module, reads_of: Callable[[Callable, tuple, dict], bool], inside=False):
        super().__init__()
        self.vision, self.reads_of, self.count, self.in_vision, self.inside = vision, reads_of, 0, 0, inside

    def __enter__(self):
        self.hooks = [self.vision.register_forward_pre_hook(lambda *_: self._enter(1)),
                      self.vision.register_forward_hook(lambda *_: self._enter(-1))]
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        return super().__exit__(*exc)

    def _enter(self, step: int) -> None:
        self.in_vision += step

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += bool(self.in_vision) == self.inside and self.reads_of(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_m_rope_positions_are_computed_on_the_host_and_are_the_models_own(arch, tiny_model):
    """prefill_on_host calls the model's own get_rope_index on the host tensors (egoplan_hf's background thread), so
    score_shared neither calls it nor reads a tensor back for the positions; the positions are the model's, to the
    integer, and the scores those of the model computing them in the prefill (the path before, kept where the model's
    get_rope_index asks for a value the processor did not give)."""
    bench = load_speed_module("bench_loglikelihood")
    model = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=3)
    requests = mc_requests(model, [egoplan_doc(seed) for seed in SEEDS[:3]])  # different lengths: left padded
    [batch] = model._question_batches(model._questions(requests))
    inner = model.model.model
    rope_index_calls, positions = [], []
    rope_index = inner.get_rope_index
    counted = functools.wraps(rope_index)(lambda *args, **kwargs: rope_index_calls.append(1)
                                          or rope_index(*args, **kwargs))
    inner.get_rope_index = counted
    inner.language_model.register_forward_pre_hook(lambda _, __, kwargs: positions.append(kwargs["position_ids"]),
                                                   with_kwargs=True)
    prepared = model._prepared_batch(batch)
    questions = [sequences for _, sequences in prepared.conversations]
    on_host = prepared.prefill
    assert on_host.inputs["position_ids"].shape == (3, *on_host.inputs["input_ids"].shape)
    # The path before, which prefill_on_host keeps where the model's get_rope_index asks for a value the processor
    # did not give: the prefill's positions and the continuations' offsets left to the model.
    parameters = list(inspect.signature(rope_index).parameters.values())
    asked_for = inspect.Parameter("frame_rate", inspect.Parameter.KEYWORD_ONLY)
    counted.__signature__ = inspect.Signature([p for p in parameters if p.kind != p.VAR_KEYWORD] + [asked_for]
                                              + [p for p in parameters if p.kind == p.VAR_KEYWORD])
    by_model = model._prepared_batch(batch).prefill
    assert by_model.starts is None and "position_ids" not in by_model.inputs

    def scored(prefill) -> tuple[list, int, int, list]:
        rope_index_calls.clear(), positions.clear()
        with HostReads(inner.visual, bench.host_read) as reads:
            values = model.scorer.score_shared(prefill, questions)
        return [score for scores in values for score in scores], len(rope_index_calls), reads.count, positions[:]

    assert len(rope_index_calls) == 1  # on the host, in _prepared_batch
    values, calls, reads, host_positions = scored(on_host)
    expected, calls_before, reads_before, model_positions = scored(by_model)
    assert calls == 0 and calls_before == 1
    # The model's get_rope_index reads at least a grid's three sizes per visual (a video and an image) and question;
    # what is left outside the vision tower is the model's own checks and the losses' read (answer_scores).
    assert reads_before - reads >= 3 * 2 * len(questions)
    assert len(host_positions) == len(model_positions) == 1 + math.ceil(12 / model.scorer.continuation_batch_size)
    for mine, theirs in zip(host_positions, model_positions):
        assert torch.equal(mine, theirs)
    # float32, the same positions and the same kernels: the same values but for rounding.
    assert_same_scores(values, expected)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_a_vision_towers_layout_is_computed_on_the_host(arch, tiny_model):
    """prefill_on_host also computes what the vision tower derives from each grid (segment bounds, window order,
    rotary positions, the longest segments: transformers' own ``precompute_export_inputs``), handed to the tower as
    its ``image_`` / ``video_`` kwargs: Qwen2-VL's and Qwen2.5-VL's towers then read nothing back to the host
    (Qwen3-VL's attention still loops over its frames), with the values of the tower computing it."""
    bench = load_speed_module("bench_loglikelihood")
    model = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=3)
    requests = mc_requests(model, [egoplan_doc(seed) for seed in SEEDS[:3]])
    [batch] = model._question_batches(model._questions(requests))
    prepared = model._prepared_batch(batch)
    questions = [sequences for _, sequences in prepared.conversations]
    layout = [key for key in prepared.prefill.inputs if key.startswith(("image_", "video_")) and "grid_thw" not in key]
    assert {"image_cu_seqlens", "video_cu_seqlens", "image_position_ids", "video_max_seqlen"} <= set(layout)
    inputs = prepared.prefill.inputs
    by_tower = dataclasses.replace(prepared.prefill, inputs={key: inputs[key] for key in inputs if key not in layout})
    results = {}
    for name, prefill in (("host", prepared.prefill), ("tower", by_tower)):
        with HostReads(model.model.model.visual, bench.host_read, inside=True) as reads:
            values = model.scorer.score_shared(prefill, questions)
        results[name] = [score for scores in values for score in scores], reads.count
    (values, reads), (expected, reads_before) = results["host"], results["tower"]
    assert reads == 0 if arch != "qwen3_vl" else 0 < reads < reads_before
    assert reads_before >= 2 * 3  # at least the grids' sizes, read for the image and the video
    assert_same_scores(values, expected)


# Issue 78 point 2: every architecture the suite scores (the tiny checkpoints of ARCHITECTURES, text-only Llama too).
TREE_ARCHS = ["llava", "llava_onevision", "qwen2_vl", "idefics3", "qwen2_5_vl", "qwen3_vl", "internvl", "gemma3",
              "smolvlm", "llava_next_video", "mistral3", "llama"]


def questions_of_every_kind(arch: str, model: EgoPlanHF, *others: EgoPlanHF) -> list:
    """Likelihood requests for ``model`` (and ``others``, given its task index): EgoPlan questions of different prompt
    lengths; a text-only model's: contexts of different lengths, no visuals."""
    if arch == "llama":
        return [SuiteInstance(request_type="loglikelihood", idx=i, arguments=(context, continuation),
                              metadata={"task": None, "doc_id": None, "repeats": 1})
                for context in ["Short one.", "A much longer context than the others, to pad it.", "Mid."]
                for i, continuation in enumerate([" yes", " no way", " maybe", " later on"])]
    requests = mc_requests(model, [egoplan_doc(seed) for seed in SEEDS])
    for other in others:
        other.task_dict = model.task_dict
    return requests


@pytest.mark.parametrize("arch", TREE_ARCHS)
def test_candidates_scored_inside_the_prefill_score_as_the_continuations(arch, tiny_model):
    """candidates_in_prefill: a batch's prompts and every candidate in one forward pass under the tree mask (each
    candidate sees its question's prompt and itself), with the values and choices of the prefill and its
    continuations; an architecture that cannot take the mask keeps that path and says why."""
    from loguru import logger

    settings = dict(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=3)
    continuations = EgoPlanHF(**settings)
    warnings = []
    sink = logger.add(lambda message: warnings.append(str(message)), level="WARNING")
    try:
        in_prefill = EgoPlanHF(**settings, candidates_in_prefill=True)
    finally:
        logger.remove(sink)
    requests = questions_of_every_kind(arch, continuations, in_prefill)
    expected, passes_before = forward_passes(continuations, requests)
    values, passes = forward_passes(in_prefill, requests)
    assert_same_scores(values, expected)
    batches = math.ceil(len(requests) / 4 / 3)
    if in_prefill.scorer.candidates_in_prefill:
        assert passes == batches < passes_before and not warnings
    else:
        assert passes == passes_before
        assert any("candidates_in_prefill" in warning and in_prefill.scorer.tree_unsupported in warning
                   for warning in warnings), warnings


@pytest.mark.parametrize("arch", TREE_ARCHS)
def test_the_gpu_defaults_together_score_as_the_plain_path_on_every_architecture(arch, tiny_model):
    """What a GPU run gets unless it says otherwise (``GPU_DEFAULTS``: the elementwise work fused, batches prepared in
    worker processes, the candidates inside the prefill), all at once on the CPU: the plain path's values, greedy
    flags and choices, on every architecture (the GPU command checks the same on a GPU against the CPU)."""
    torch._dynamo.reset()  # each architecture's compiled functions from scratch, below torch's recompile limit
    settings = dict(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", batch_size=3)
    plain = EgoPlanHF(**settings)
    defaults = EgoPlanHF(**settings, **GPU_DEFAULTS, visual_prefetch=2)
    requests = questions_of_every_kind(arch, plain, defaults)
    assert_same_scores(defaults.loglikelihood(requests), plain.loglikelihood(requests))
    assert defaults.fused_elementwise.compiled_variants() > 0
    assert defaults.scorer.candidates_in_prefill == (arch != "gemma3")
