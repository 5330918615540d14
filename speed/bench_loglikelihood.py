"""Questions per second of egoplan_hf's multiple-choice scoring: one pass per candidate, prefix-shared, batched.

EgoPlan-Bench questions as egoplan_val sends them (the release's question through the task's
prompt builder, 4 candidate actions appended with no delimiter, scored over the answer and the
end-of-turn token) are scored by the same backend instance three ways (``METHODS``): a full forward
pass per candidate (vision encoder included, as lmms-eval's own backends do; only the logits of the
scored tokens are computed); prefix sharing a question at a time with the vision tower's windows
attended one by one (the path before issue 63: one prefill per question, candidates batched on its
KV cache); and batched (``--batch-size`` questions per prefill, the windows attended in one call a
block). Rounds alternate between the methods so that a busy machine slows them alike; the median
round counts. ``--one-pass-questions N`` gives one pass per candidate only the first N questions: it and
prefix sharing score a question at a time with nothing overlapping, so their rate does not depend on how many
questions they score, while the batched method hides a batch's decoding and processing behind the model step
of the one before only from its second batch on, so it needs several batches a round (``--questions`` a
multiple of ``--batch-size``, 4 batches or more) to be measured at the steady state that a run of EgoPlan Val
(3,355 questions) sees; the values are compared on the questions both methods scored. Before the rounds, each
method scores its questions once with the model step counted (``model_step_counts``: attention calls, host
reads of tensor values, forward passes and bytes handed to the device, per question, and the padded tokens' share of
the forward passes' tokens); each method's peak memory is the largest of its rounds. The questions are the demo's
EgoPlan-Val ones (``lmms_egoplan.demo.egoplan.VALIDATION_SAMPLES``, 8 prompts of unequal length, taken in turn), so
the padding is that of prompts of realistic, unequal lengths.
Visuals are decoded in every method alike (the batched method ``--visual-prefetch`` batches ahead), so the ratios
are model work only.

Shapes (random weights, nothing downloaded):

* ``tiny``: the suite's tiny checkpoints (``--arch``, ``--hidden-size``, ``--layers``), 8 frames of
  224 px, no separate observation image;
* ``qwen2-vl-7b``, ``qwen2.5-vl-7b``: the published hyper-parameters written out below, 8 frames
  of 448 px plus the observation image at 448 px (1,280 visual tokens); ``--layers N`` keeps N of
  the 28 decoder layers and the same share of the 32 vision blocks where memory or time needs it.

    python speed/bench_loglikelihood.py                                    # tiny qwen2_vl, CPU
    python speed/bench_loglikelihood.py --shape qwen2-vl-7b --layers 1 --questions 2 --rounds 3
    python speed/bench_loglikelihood.py --shape qwen2.5-vl-7b --device cuda --dtype bfloat16 --batch-size 8 \
        --questions 32 --one-pass-questions 8 --rounds 3
    python speed/bench_loglikelihood.py --shape qwen2.5-vl-7b --width narrow --batch-size 8 --skip-one-pass  # CPU

Each method's rate is given twice: over whole rounds, and at the steady state (``steady_questions_per_second``: each
round after its first batch, whose preparation nothing hides, ``first_batch_seconds``). It ends with the time the full
EgoPlan-Bench Val (3,355 questions) would take as a run sees it: the first batch, the compile (a fused method), then
the questions at the steady rate (model time: these visuals are made in memory, nothing is decoded); ``--json FILE``
also writes the figures there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TASK, SPLIT = "bench", "test"
GiB = 2 ** 30
EGOPLAN_VAL_QUESTIONS = 3355  # the released EgoPlan_validation.json

# Published hyper-parameters: config.json / preprocessor_config.json of Qwen/Qwen2-VL-7B-Instruct
# and Qwen/Qwen2.5-VL-7B-Instruct (text: hidden 3584, 28 layers, 28 query / 4 key-value heads,
# MLP 18944, vocabulary 152064, rope theta 1e6, M-RoPE sections 16/24/24; vision: 32 blocks,
# width 1280, 16 heads, patch 14, 2x2 merge, temporal patch 2; Qwen2-VL: MLP ratio 4 with
# quick-GELU; Qwen2.5-VL: SwiGLU MLP 3420, 112-pixel windows, full attention in blocks 7/15/23/31;
# processor: 3136 to 12845056 pixels per image or frame).
TEXT_7B = {"vocab_size": 152064, "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]}}
SHAPES = {
    "qwen2-vl-7b": {"text": {**TEXT_7B, "max_position_embeddings": 32768},
                    "vision": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "mlp_ratio": 4,
                               "hidden_act": "quick_gelu",
                               "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2,
                               "temporal_patch_size": 2}},
    "qwen2.5-vl-7b": {"text": {**TEXT_7B, "max_position_embeddings": 128000},
                      "vision": {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16,
                                 "hidden_act": "silu", "out_hidden_size": 3584, "patch_size": 14,
                                 "spatial_merge_size": 2,
                                 "temporal_patch_size": 2, "window_size": 112, "tokens_per_second": 2,
                                 "fullatt_block_indexes": [7, 15, 23, 31]}},
}
# ``--width narrow``: the same structure (layers, blocks, heads, windows, full-attention blocks, vocabulary, processor,
# so the same token counts, attention calls and host reads) with every head 8 wide, so that a CPU runs all of it.
NARROW = {"text": {"hidden_size": 224, "intermediate_size": 1184,
                   "rope_parameters": {**TEXT_7B["rope_parameters"], "mrope_section": [2, 1, 1]}},
          "qwen2-vl-7b": {"embed_dim": 128, "hidden_size": 224},
          "qwen2.5-vl-7b": {"hidden_size": 128, "intermediate_size": 342, "out_hidden_size": 224}}
PIXELS = {"shortest_edge": 3136, "longest_edge": 12845056}
FRAME_SIDE = {"tiny": 224, "qwen2-vl-7b": 448, "qwen2.5-vl-7b": 448}


def realistic_checkpoint(shape: str, layers: int | None, cache: Path, device: str, width: str = "published") -> Path:
    """A random-weight checkpoint of ``shape`` (bfloat16 on disk), built once per (shape, depth, width)."""
    import torch
    import transformers

    from lmms_egoplan.demo.kit.checkpoints import CHAT_TEMPLATES, build_tokenizer

    text, vision = dict(SHAPES[shape]["text"]), dict(SHAPES[shape]["vision"])
    if width == "narrow":
        text.update(NARROW["text"])
        vision.update(NARROW[shape])
    if layers is not None:  # the published share of vision blocks; Qwen2.5-VL keeps every 8th block global
        text["num_hidden_layers"] = layers
        vision["depth"] = max(1, round(layers * vision["depth"] / TEXT_7B["num_hidden_layers"]))
        if "fullatt_block_indexes" in vision:
            vision["fullatt_block_indexes"] = list(range(7, vision["depth"], 8)) or [vision["depth"] - 1]
    key = hashlib.sha256(json.dumps([shape, text, vision, transformers.__version__],
                                    sort_keys=True).encode()).hexdigest()
    folder = cache / f"{shape}-{key[:12]}"
    if (folder / "config.json").is_file():
        return folder
    # The tiny checkpoints' tokenizer and chat template of the architecture, at the published geometry.
    classes = {"qwen2-vl-7b": ("qwen2_vl", "Qwen2VLConfig", "Qwen2VLForConditionalGeneration", "Qwen2VLProcessor"),
               "qwen2.5-vl-7b": ("qwen2_5_vl", "Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration",
                                 "Qwen2_5_VLProcessor")}
    arch, *names = classes[shape]
    config_class, model_class, processor_class = (getattr(transformers, name) for name in names)
    tokenizer = build_tokenizer(arch)
    text.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    config = config_class(text_config=text, vision_config=vision,
                          **{f"{name}_token_id": tokenizer.convert_tokens_to_ids(token) for name, token in
                             (("image", "<|image_pad|>"), ("video", "<|video_pad|>"),
                              ("vision_start", "<|vision_start|>"), ("vision_end", "<|vision_end|>"))})
    geometry = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}
    processor = processor_class(
        image_processor=transformers.Qwen2VLImageProcessor(size=PIXELS, **geometry),
        video_processor=transformers.Qwen2VLVideoProcessor(size=PIXELS, cap_pixels_per_frame=True, min_frames=2,
                                                           **geometry),
        tokenizer=tokenizer, chat_template=CHAT_TEMPLATES[arch])
    with torch.device(device):
        model = model_class._from_config(config, dtype=torch.bfloat16)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache))
    model.save_pretrained(partial)
    processor.save_pretrained(partial)
    partial.rename(folder)
    return folder


def egoplan_docs(count: int, frame_side: int, observation: bool) -> list[dict]:
    """EgoPlan-Val records in the release format (the suite's synthetic ones), with the frame size."""
    from lmms_egoplan.demo.egoplan import VALIDATION_SAMPLES, release_record

    return [{**release_record(*VALIDATION_SAMPLES[i % len(VALIDATION_SAMPLES)], labelled=True), "seed": i,
             "frame_side": frame_side, "observation": observation} for i in range(count)]


def egoplan_visuals(doc: dict) -> list[Image.Image]:
    """8 progress frames as one clip, then (realistic shapes) the observation as an image of its own."""
    from lmms_egoplan.core.media import as_video_frames

    rng = np.random.default_rng(doc["seed"])
    side = doc["frame_side"]
    frames = [Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)) for _ in range(9)]
    return [*as_video_frames(frames[:8], clip="task_progress_1"), *frames[8:9 if doc["observation"] else 8]]


def requests_for(docs: list[dict], span: str) -> list:
    from lmms_egoplan.core.request_options import SCORED_SPAN
    from lmms_egoplan.egoplan import task as egoplan
    from lmms_egoplan.harness.lmms_eval_task import SuiteInstance

    # egoplan_val: the task's prompt builder, candidates appended with target_delimiter "".
    requests = [SuiteInstance(request_type="loglikelihood", idx=i,
                         arguments=(egoplan.doc_to_text(doc), choice, egoplan_visuals, doc_id, TASK, SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, doc in enumerate(docs) for i, choice in enumerate(egoplan.doc_to_choice(doc))]
    SCORED_SPAN.mark(requests, span)
    return requests


# The methods compared, as egoplan_hf settings: a full forward pass per candidate (lmms-eval's way), the path before
# issue 63 (one question per forward pass, the vision tower's windows attended one by one), the batched path, and
# (--fused) the batched path with the elementwise work fused (egoplan_hf's fused_elementwise: regional torch.compile),
# and (--prefetch-processes) the batched path, fused with --fused, prepared ahead in worker processes instead of a
# thread (egoplan_hf's prefetch_processes), and (--in-prefill) the candidates scored inside the prefill on top of the
# other options asked for (fused with --fused, in processes with --prefetch-processes): the whole design measured
# beside the defaults it would join; batch_size None: --batch-size; fused None: as --fused; processes: the method
# prepares in --prefetch-processes worker processes where given.
METHODS = {"one_pass_per_candidate": {"prefix_sharing": False, "batch_size": 1, "packed": False, "fused": False},
           "prefix_shared": {"prefix_sharing": True, "batch_size": 1, "packed": False, "fused": False},
           "batched": {"prefix_sharing": True, "batch_size": None, "packed": True, "fused": False},
           "batched_fused": {"prefix_sharing": True, "batch_size": None, "packed": True, "fused": True},
           "batched_processes": {"prefix_sharing": True, "batch_size": None, "packed": True, "fused": None,
                                 "processes": True},
           "batched_in_prefill": {"prefix_sharing": True, "batch_size": None, "packed": True, "fused": None,
                                  "processes": True, "in_prefill": True}}
# the methods that decode ahead (--visual-prefetch)
BATCHED = ("batched", "batched_fused", "batched_processes", "batched_in_prefill")
# Tensor methods and torch functions that read a tensor's values to the host (on a GPU: a device synchronisation),
# and calls with data-dependent output shapes, which synchronise alike.
HOST_READS = frozenset({"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy", "nonzero",
                        "masked_select", "unique", "unique_consecutive", "equal", "allclose"})


def fused_methods(args) -> set[str]:
    """The methods measured with fused_elementwise on (those that follow --fused, where it is given)."""
    return {method for method, settings in METHODS.items()
            if settings["fused"] or (settings["fused"] is None and args.fused)}


def use_method(backend, method: str, batch_size: int, visual_prefetch: int | None, processes: int = 0) -> None:
    """``backend`` set to score as ``method`` (``processes``: batched_processes' worker processes)."""
    settings = METHODS[method]
    backend.prefix_sharing = settings["prefix_sharing"]
    backend.batch_size = settings["batch_size"] or batch_size
    backend.visual_prefetch = visual_prefetch if method in BATCHED and visual_prefetch is not None else 0
    backend.prefetch_processes = processes if settings.get("processes") and backend.visual_prefetch else 0
    fused = backend.fused_elementwise is not None if settings["fused"] is None else settings["fused"]
    if backend.vision_attention is not None:
        backend.vision_attention.enabled = settings["packed"]
    if backend.fused_elementwise is not None:
        backend.fused_elementwise.enabled = fused
    elif fused:
        raise SystemExit(f"{method}: the model has no module that fused_elementwise compiles")
    in_prefill = settings.get("in_prefill", False)
    if in_prefill and backend.scorer.tree_unsupported:
        raise SystemExit(f"{method}: the model cannot score its candidates inside the prefill: "
                         f"{backend.scorer.tree_unsupported}")
    backend.scorer.candidates_in_prefill = in_prefill


@dataclass
class Timing:
    """One scoring of ``requests`` with one method: its seconds, the values, the host seconds (decoding, the processor
    and, prefix sharing, the prefill's host step: ``_prepared_batch``, in whichever thread or process they ran), the
    peak memory in GiB, and each batch's end (seconds from the start, questions in it). A batch ends when its scores
    are on the host, which waits for the device."""

    seconds: float
    values: list
    host_seconds: float
    peak_gib: float
    batch_ends: list[tuple[float, int]]

    @property
    def first_batch_seconds(self) -> float:
        """From the start to the first batch's scores: its preparation, with nothing before it to hide behind, and its
        model step."""
        return self.batch_ends[0][0]

    @property
    def steady_questions_per_second(self) -> float | None:
        """The rate after the first batch, the one a run of thousands of questions sees (the first batch's preparation
        is paid once); None: one batch only."""
        if len(self.batch_ends) < 2:
            return None
        after_first = sum(questions for _, questions in self.batch_ends[1:])
        return after_first / (self.seconds - self.first_batch_seconds)


def timed(backend, requests, method: str, batch_size: int = 1, visual_prefetch: int | None = None,
          processes: int = 0) -> Timing:
    """``requests`` scored with ``method`` (``Timing``). Peak memory: CUDA allocated memory on a GPU, else the
    process's peak resident set (weights included): freed heap memory is handed back to the system first (glibc's
    malloc_trim) and the peak reset (/proc/self/clear_refs), so each method counts its own."""
    import ctypes

    import torch

    use_method(backend, method, batch_size, visual_prefetch, processes)
    host = [0.0]
    prepare = type(backend)._prepared_batch.__get__(backend)
    score = type(backend)._score_questions.__get__(backend)

    def timed_prepare(batch):  # the seconds travel with the batch: a worker process's counter would be its own
        started = time.perf_counter()
        prepared = prepare(batch)
        prepared.host_seconds = time.perf_counter() - started
        return prepared

    batch_ends: list[tuple[float, int]] = []

    def counted_score(prepared):
        host[0] += prepared.host_seconds
        scores = score(prepared)
        batch_ends.append((time.perf_counter() - started, len(scores)))
        return scores

    cuda = backend.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(backend.device)
    else:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    # Instance attributes shadow the methods for this measurement only.
    backend._prepared_batch, backend._score_questions = timed_prepare, counted_score
    started = time.perf_counter()
    try:
        values = backend.loglikelihood(requests)
        if cuda:
            torch.cuda.synchronize()
    finally:
        del backend._prepared_batch, backend._score_questions
    elapsed = time.perf_counter() - started
    if cuda:
        peak = torch.cuda.max_memory_allocated(backend.device) / GiB
    else:
        peak = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:")) / 2 ** 20
    return Timing(elapsed, values, host[0], peak, batch_ends)


# The model step's counts per question (model_step_counts), and what --batched's are compared by against prefix sharing
STEP_COUNTS = ("attention_calls_per_question", "device_syncs_per_question", "forward_passes_per_question")


def model_step_counts(backend, requests) -> tuple[dict[str, float], list]:
    """(counts, values): per question, while the model scores ``requests`` as ``backend`` is set (``use_method``;
    the scorer's calls only: the processor and the decoding before them are host work): the attention calls
    (``scaled_dot_product_attention``), the host reads of tensor values (``host_read``: what would synchronise a
    GPU; on the CPU every tensor is on the host, so this is an upper bound) and the model's forward passes; the bytes
    of the tensors handed to the device (``host_to_device_bytes_per_question``: each prefill or processor output as
    ``EgoPlanHF._on_device`` takes it; on a CPU nothing is copied, on a GPU all of it); and the padded tokens' share of
    all the tokens of the forward passes (``padding_share``: each pass's padding as the scorer counted it where it
    built the batch, ``LikelihoodScorer.forward_tokens``).
    Prefix sharing's host step (``LikelihoodScorer.prefill_on_host``: the prompts cut to their common prefixes, an
    M-RoPE model's positions) runs in ``_prepared_batch``, ahead of the model on host tensors, so its reads are not
    counted: they synchronise nothing."""
    import torch
    from torch.overrides import TorchFunctionMode

    from lmms_egoplan.models.likelihood import ForwardTokens

    counts = {"attention_calls": 0, "device_syncs": 0, "forward_passes": 0}

    class Counting(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            counts["attention_calls"] += getattr(func, "__name__", "") == "scaled_dot_product_attention"
            counts["device_syncs"] += host_read(func, args, kwargs)
            return func(*args, **kwargs)

    def counted(score):
        def run(*args, **kwargs):
            # Compiled regions (fused_elementwise) run eagerly: they hold no attention call, host read or forward
            # pass, and torch.compile would trace the counting mode into their graphs, guarded on the counts.
            with Counting(), torch.compiler.set_stance("force_eager"):
                return score(*args, **kwargs)
        return run

    on_device = backend._on_device

    def counted_on_device(inputs):  # a prefill (each of its tensors) or a processor output
        def count(tensor):
            counts["host_to_device_bytes"] += tensor.nbytes
            return tensor
        if hasattr(inputs, "moved"):
            inputs.moved(count)
        else:
            for value in inputs.values():
                if isinstance(value, torch.Tensor):
                    count(value)
        return on_device(inputs)

    counts["host_to_device_bytes"] = 0
    scorer = backend.scorer
    scorer.forward_tokens = tokens = ForwardTokens()  # these requests' passes only
    hook = backend.model.register_forward_pre_hook(lambda *_: counts.__setitem__("forward_passes",
                                                                                 counts["forward_passes"] + 1))
    scorer.score_full, scorer.score_shared = counted(scorer.score_full), counted(scorer.score_shared)
    backend._on_device = counted_on_device
    try:
        values = backend.loglikelihood(requests)
    finally:
        hook.remove()
        del scorer.score_full, scorer.score_shared, backend._on_device
    questions = len({request.args[3] for request in requests})
    return {**{f"{name}_per_question": count / questions for name, count in counts.items()},
            "padding_share": tokens.padded / max(tokens.total, 1)}, values


MODEL_STEP = "model step"  # the profiler's record of the scorer's calls (kernels_per_question)
ALLOCATIONS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::result_type",
                         "aten::lift_fresh"})  # operators that launch no kernel and are no views


def kernels_per_question(backend, requests, method: str, batch_size: int) -> float:
    """The kernels the model step launches per question, ``requests`` scored with ``method`` under torch.profiler
    (the scorer's calls only): on a GPU, its device kernels and copies; on a CPU, which runs a compiled graph's fused
    kernels as C++ functions, what would launch one on a GPU: each operator called from Python or from a compiled
    graph that computes (``_computes``: no view, allocation or cast to the dtype a tensor has), and each fused
    kernel (recorded with inductor's ``cpp.enable_kernel_profile``, set before anything compiles)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    use_method(backend, method, batch_size, None)
    cuda = backend.device.type == "cuda"
    scorer = backend.scorer

    def recorded(score):
        def run(*args, **kwargs):
            with record_function(MODEL_STEP):
                return score(*args, **kwargs)
        return run

    scorer.score_full, scorer.score_shared = recorded(scorer.score_full), recorded(scorer.score_shared)
    try:
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as profiler:
            backend.loglikelihood(requests)
            if cuda:
                torch.cuda.synchronize()
    finally:
        del scorer.score_full, scorer.score_shared
    events = profiler.events()
    if cuda:
        # not the device events record_function adds: one a scorer call, spanning its kernels
        kernels = sum(event.device_type == torch.autograd.DeviceType.CUDA and not event.is_user_annotation
                      for event in events)
    else:
        kernels = sum(_in_model_step(event) and (_computes(event) or "cpp_fused" in event.name) for event in events
                      if event.cpu_parent is None or not event.cpu_parent.name.startswith("aten::"))
    return kernels / len({request.args[3] for request in requests})


def _in_model_step(event) -> bool:
    while event is not None and event.name != MODEL_STEP:
        event = event.cpu_parent
    return event is not None


def _computes(event) -> bool:
    """An operator event that runs a kernel: one of its parts does (``linear``: its ``addmm``), or it has no parts
    and a kernel of its own (not only a composition of others, as ``to`` that returns its input)."""
    import torch

    if not event.name.startswith("aten::") or event.name in ALLOCATIONS:
        return False
    packet = getattr(torch.ops.aten, event.name.removeprefix("aten::"), None)
    overloads = [getattr(packet, name) for name in packet.overloads()] if packet is not None else []
    if any(overload.is_view for overload in overloads):
        return False
    if event.cpu_children:
        return any(_computes(child) for child in event.cpu_children)
    # No part recorded: a kernel of its own, unless only composed of others (``to`` returning its input).
    return not all(torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd")
                   for overload in overloads)


def host_read(func, args: tuple, kwargs: dict) -> bool:
    """Whether the torch function call ``func(*args, **kwargs)`` reads tensor values to the host (``HOST_READS``,
    boolean-mask indexing, ``repeat_interleave`` without its output size): what would synchronise a GPU."""
    import torch

    name = getattr(func, "__name__", "")
    return name in HOST_READS or (name in ("__getitem__", "__setitem__") and _bool_index(args[1])) or (
        name == "repeat_interleave" and isinstance(args[1] if len(args) > 1 else kwargs.get("repeats"), torch.Tensor)
        and "output_size" not in kwargs)


def _bool_index(index) -> bool:
    import torch

    indices = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=["tiny", *SHAPES])
    parser.add_argument("--width", default="published", choices=["published", "narrow"],
                        help="realistic shapes: the published widths, or every head 8 wide (NARROW: the same "
                             "structure, token counts and calls, at a width a CPU runs)")
    parser.add_argument("--arch", default="qwen2_vl", help="tiny shape: checkpoint architecture (one of "
                                                            "lmms_egoplan.demo.kit.checkpoints.ARCHITECTURES)")
    parser.add_argument("--pretrained", help="score with this checkpoint instead of a random one")
    parser.add_argument("--hidden-size", type=int, default=512, help="tiny shape: text hidden size")
    parser.add_argument("--layers", type=int, help="decoder layers (tiny: default 8; realistic shapes: default "
                                                   "the published 28, vision blocks in proportion)")
    parser.add_argument("--questions", type=int, default=8, help="questions per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per method (alternating)")
    parser.add_argument("--batch-size", type=int, default=4, help="the batched method's questions per forward pass")
    parser.add_argument("--visual-prefetch", type=int, help="the batched method's batches prepared ahead in the "
                                                            "background (default: egoplan_hf's, 2 on a GPU, 0 on CPU)")
    parser.add_argument("--one-pass-questions", type=int,
                        help="one pass per candidate scores only the first N of the questions (default: all), so that "
                             "the others run on enough batches to reach their steady state in the same time")
    parser.add_argument("--skip-one-pass", action="store_true",
                        help="leave out one pass per candidate (at a realistic shape on a CPU: minutes a question); "
                             "the batched values are then compared with prefix-shared ones")
    parser.add_argument("--skip-prefix-shared", action="store_true",
                        help="leave out prefix sharing a question at a time (the path before issue 63) too")
    parser.add_argument("--fused", action="store_true",
                        help="also the batched method with the elementwise work fused (egoplan_hf's fused_elementwise: "
                             "regional torch.compile), with its compile time, compiled graphs and kernels per question "
                             "against the batched method's")
    parser.add_argument("--in-prefill", action="store_true",
                        help="also the batched method with the candidates scored inside the prefill (egoplan_hf's "
                             "candidates_in_prefill: one forward pass a batch under a tree-shaped attention mask), on "
                             "top of --fused and --prefetch-processes where given (judged beside them)")
    parser.add_argument("--prefetch-processes", type=int, default=0,
                        help="also the batched method (fused with --fused) with its batches prepared ahead in this "
                             "many worker processes instead of a thread (egoplan_hf's prefetch_processes; needs "
                             "--visual-prefetch 1 or more, on a CPU 0 by default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--scored-span", default="answer_and_end_of_turn", choices=["answer_and_end_of_turn", "answer"])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--profile", help="after the rounds, score the questions once more with the fastest batched "
                                          "method (batched, fused or in processes: the highest median rate) under "
                                          "torch.profiler and write its operators, most device time first, here "
                                          "(--json: the leading ones too)")
    args = parser.parse_args()

    import torch

    from lmms_egoplan.demo.kit.checkpoints import tiny_checkpoint
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    if args.threads:
        torch.set_num_threads(args.threads)
    realistic = args.shape != "tiny"
    if args.pretrained:
        pretrained = args.pretrained
    elif realistic:
        Path(args.cache).mkdir(parents=True, exist_ok=True)
        pretrained = str(realistic_checkpoint(args.shape, args.layers, Path(args.cache), args.device, args.width))
    else:
        pretrained = str(tiny_checkpoint(args.arch, args.cache, hidden_size=args.hidden_size,
                                         num_layers=args.layers or 8))
    if args.fused and args.device == "cpu":  # the C++ kernels record themselves for kernels_per_question
        import torch._inductor.config

        torch._inductor.config.cpp.enable_kernel_profile = True
    backend = EgoPlanHF(pretrained=pretrained, device=args.device, dtype=args.dtype, fused_elementwise=args.fused)
    if args.visual_prefetch is None:
        args.visual_prefetch = backend.visual_prefetch
    if args.prefetch_processes and not args.visual_prefetch:
        parser.error(f"--prefetch-processes prepares batches ahead: give --visual-prefetch 1 or more ({args.device}'s "
                     f"default is {args.visual_prefetch})")
    docs = egoplan_docs(args.questions, FRAME_SIDE[args.shape], observation=realistic)
    backend.task_dict = {TASK: {SPLIT: docs}}
    requests = requests_for(docs, args.scored_span)
    visuals = backend._doc_visuals((TASK, SPLIT, 0, egoplan_visuals))
    prompt = backend._encode([backend.chat.generation_prompt(backend.chat.user_turn(visuals.parts,
                                                                                    requests[0].args[0]))],
                             [visuals], "doc 0")
    parameters = sum(p.numel() for p in backend.model.parameters())
    left_out = {"one_pass_per_candidate": args.skip_one_pass, "prefix_shared": args.skip_prefix_shared,
                "batched_fused": not args.fused, "batched_processes": not args.prefetch_processes,
                "batched_in_prefill": not args.in_prefill}
    methods = [method for method in METHODS if not left_out.get(method)]
    one_pass_questions = min(args.one_pass_questions or args.questions, args.questions)
    width = f" ({args.width} width)" if realistic else ""
    print(f"model: {args.shape}{width} {pretrained} ({parameters / 1e9:.2f}B parameters), device {args.device}, "
          f"{args.dtype}, {torch.get_num_threads()} CPU threads")
    print(f"prompt: {prompt['input_ids'].shape[1]} tokens ({len(visuals.videos)} video of "
          f"{len(visuals.videos[0].frames)} frames, "
          f"{len(visuals.images)} image(s), {FRAME_SIDE[args.shape]} px); questions per round: {args.questions} "
          f"({one_pass_questions} one pass per candidate; 4 candidates each, scored span: {args.scored_span}), "
          f"rounds: {args.rounds} per method; batched: "
          f"{args.batch_size} questions per forward pass, visual_prefetch={args.visual_prefetch}")
    # Each method's counts on the questions it scores (also a warm-up), then the timed rounds, each method's peak
    # memory the largest.
    scored = {method: requests[:4 * one_pass_questions] if method == "one_pass_per_candidate" else requests
              for method in methods}
    counts = {}
    for method in methods:
        use_method(backend, method, args.batch_size, None)
        counts[method], _ = model_step_counts(backend, scored[method])
    fusion = fusion_started(backend, requests, args.batch_size, args.visual_prefetch) if args.fused else {}
    timings: dict[str, list[Timing]] = {method: [] for method in methods}
    for _ in range(args.rounds):
        for method in methods:
            timings[method].append(timed(backend, scored[method], method, args.batch_size, args.visual_prefetch,
                                         args.prefetch_processes))
    seconds = {method: [timing.seconds for timing in rounds] for method, rounds in timings.items()}
    if args.fused:
        fusion = fusion_measured(backend, requests[:4 * args.batch_size], args.batch_size, fusion)
    profiled = profile_fastest(backend, requests, args, Path(args.profile), seconds) if args.profile else {}
    contention = operator_speed_beside_preparation(backend, requests, args) if args.prefetch_processes else {}

    report(args, {"prompt_tokens": prompt["input_ids"].shape[1], "parameters": parameters,
                  "memory": "GPU memory allocated" if backend.device.type == "cuda" else "process resident memory",
                  **fusion, **contention, **profiled},
           timings, counts)


def operator_speed_beside_preparation(backend, requests, args) -> dict:
    """How fast the scoring thread issues operators (what, on a GPU, keeps it fed) while the batches are prepared in
    the background thread and in ``--prefetch-processes`` worker processes, each as a share of its speed alone: a
    loop of additions of two numbers in this thread (each a torch operator, which lets go of the interpreter lock
    and takes it again, as a kernel launch does) while the batches of ``requests`` are prepared once (the results
    taken by a thread that only waits, as the loader's are)."""
    import threading

    import torch

    use_method(backend, "batched", args.batch_size, args.visual_prefetch)
    batches = backend._question_batches(backend._questions(requests))
    ways = {"thread": "batched", "processes": "batched_processes"}  # egoplan_hf's own choice (_prepared_ahead)

    def counting(done: threading.Event) -> float:
        one, total = torch.ones(1), torch.zeros(1)
        count, started = 0, time.perf_counter()
        while not done.is_set():
            torch.add(total, one, out=total)
            count += 1
        return count / (time.perf_counter() - started)

    alone = threading.Event()
    threading.Timer(1.0, alone.set).start()
    speed_alone, shares, seconds = counting(alone), {}, {}
    for way, method in ways.items():
        use_method(backend, method, args.batch_size, args.visual_prefetch, args.prefetch_processes)
        done = threading.Event()
        started = time.perf_counter()
        threading.Thread(target=lambda: (list(backend._prepared_ahead(batches)), done.set())).start()
        shares[way] = counting(done) / speed_alone
        seconds[way] = time.perf_counter() - started
    print(f"scoring thread's operators while {len(batches)} batches are prepared: {shares['thread']:.0%} of its "
          f"speed alone beside the thread ({seconds['thread']:.2f} s), {shares['processes']:.0%} beside "
          f"{args.prefetch_processes} processes ({seconds['processes']:.2f} s)")
    return {"operator_speed_beside_preparation": shares, "preparation_seconds_beside_counting": seconds}


def fusion_started(backend, requests, batch_size: int, visual_prefetch: int) -> dict:
    """The fused method's first pass, where it compiles (outside the rounds): its seconds, the compile's share, and
    the graphs compiled."""
    from torch._dynamo.utils import compilation_time_metrics

    return {"first_pass_seconds": timed(backend, requests, "batched_fused", batch_size, visual_prefetch).seconds,
            "compile_seconds": sum(compilation_time_metrics.get("_compile.compile_inner", [])),
            "compiled_variants": backend.fused_elementwise.compiled_variants()}


def fusion_measured(backend, requests, batch_size: int, started: dict) -> dict:
    """After the rounds: the graphs compiled during them (a new length would add one; each later one would mean a
    recompile per batch), and the kernels per question of the batched method and the fused one on one batch
    (``kernels_per_question``)."""
    kernels = {method: kernels_per_question(backend, requests, method, batch_size)
               for method in ("batched", "batched_fused")}
    return {**started, "compiled_in_rounds": backend.fused_elementwise.compiled_variants() - started[
        "compiled_variants"], "kernels_per_question": kernels,
            "fewer_kernels_fused": kernels["batched"] / max(kernels["batched_fused"], 1e-9)}


PROFILED_OPERATORS = 15  # the leading operators of --profile that --json carries


def profile_fastest(backend, requests, args, path: Path, seconds: dict[str, list[float]]) -> dict:
    """Where the fastest batched method's time goes (the highest median rate of the rounds: what is left to gain):
    its operators under torch.profiler, most device (else CPU) time first, with the device's busy share of the wall
    time (``device_busy_seconds``; on a CPU the operators' own CPU time); on a GPU also its leading kernels. Written
    to ``path`` and printed, the leading ones returned for ``--json``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    method = min((m for m in seconds if m in BATCHED), key=lambda m: statistics.median(seconds[m]))
    cuda = backend.device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as profiler:
        elapsed = timed(backend, requests, method, args.batch_size, args.visual_prefetch,
                        args.prefetch_processes).seconds
    averages = profiler.key_averages()
    own = "self_device_time_total" if cuda else "self_cpu_time_total"
    # torch.profiler lists a kernel twice, under the operator that launched it and as a device event of its own
    operators = [event for event in averages if event.device_type == DeviceType.CPU]
    if cuda:
        busy, busy_is = device_busy_seconds(profiler.events()), "device busy (its kernels and copies)"
    else:
        busy, busy_is = sum(event.self_cpu_time_total for event in operators) / 1e6, "operators' own CPU time"
    summary = (f"{method} ({args.batch_size} a pass, visual_prefetch={args.visual_prefetch}): {len(requests) // 4} "
               f"questions in {elapsed:.3f} s under the profiler; {busy_is} {busy:.3f} s ({busy / elapsed:.0%} of the "
               "wall time)")
    path.write_text(summary + "\n" + averages.table(sort_by=own, row_limit=60, max_name_column_width=70) + "\n")
    print(summary + f"; operators: {path}")
    print(averages.table(sort_by=own, row_limit=25, max_name_column_width=60))

    def leading(events) -> list[dict]:
        return [{"name": event.key, "seconds": getattr(event, own) / 1e6, "calls": event.count}
                for event in sorted(events, key=lambda event: getattr(event, own), reverse=True)[:PROFILED_OPERATORS]]

    kernels = [event for event in averages if event.device_type != DeviceType.CPU and not event.is_user_annotation]
    return {"profile": {"method": method, "seconds": elapsed, "busy_seconds": busy, "busy_share": busy / elapsed,
                        "time": "device" if cuda else "CPU", "operators": leading(operators),
                        **({"kernels": leading(kernels)} if cuda else {})}}


def device_busy_seconds(events) -> float:
    """The seconds a device worked, from torch.profiler's events: the union of its kernels' and copies' intervals.
    Not the sum of its table's self device times, which counts each kernel twice (under the operator that launched
    it and as a device event) and a ``record_function`` region once more (a device event spanning its kernels); the
    union also counts once what two streams ran at the same time."""
    from torch.autograd import DeviceType

    busy, reached = 0.0, float("-inf")
    for start, end in sorted((event.time_range.start, event.time_range.end) for event in events
                             if event.device_type != DeviceType.CPU and not event.is_user_annotation):
        busy += max(0.0, end - max(start, reached))
        reached = max(reached, end)
    return busy / 1e6


# The largest loss difference between two ways of scoring the same candidates that rounding explains: float32 sums in
# another order (docs/backend.md, Prefix sharing); bfloat16 and float16 round the batched continuation differently.
LOSS_TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-1, "float16": 1e-2}
# The rule that sets egoplan_hf's GPU defaults from one run of the GPU command (issue 78 point 4): a method becomes the
# default where its steady rate is at least the factor times its reference's, its losses within LOSS_TOLERANCE of the
# reference's, its choices changed only where the reference's two lowest losses lie within it (near ties), and, a
# fused method, nothing compiled again during the rounds. Method -> (option it stands for, references: the first of
# them measured, factor): each option is judged beside the options before it that the run measured, so that
# candidates_in_prefill is judged on top of the defaults it would join.
DEFAULT_RULE = {"batched_fused": ("fused_elementwise=true", ("batched",), 1.10),
                "batched_processes": ("prefetch_processes=2", ("batched_fused", "batched"), 0.98),
                "batched_in_prefill": ("candidates_in_prefill=true", ("batched_processes", "batched_fused", "batched"),
                                       1.0)}


def default_verdicts(args, values: dict, steady: dict, facts: dict) -> dict:
    """``DEFAULT_RULE`` applied to the methods measured beside their reference: per method, its option, the rate ratio
    and the factor needed, the loss difference and the tolerance, the choices changed beyond near ties, whether it
    recompiled, and the verdict with the condition that failed."""
    tolerance = LOSS_TOLERANCE[args.dtype]
    verdicts = {}
    for method, (option, references, factor) in DEFAULT_RULE.items():
        reference = next((name for name in references if name in values), None)
        if method not in values or reference is None:
            continue
        ratio = (steady[method] / steady[reference] if steady[method] is not None and steady[reference] is not None
                 else None)
        count = min(len(values[method]), len(values[reference])) // 4
        found = np.array([v for v, _ in values[method][:4 * count]]).reshape(count, 4)
        expected = np.array([v for v, _ in values[reference][:4 * count]]).reshape(count, 4)
        lowest_two = np.sort(expected, axis=1)[:, :2]
        near_tie = lowest_two[:, 1] - lowest_two[:, 0] <= tolerance
        changed_beyond_ties = int(((found.argmin(1) != expected.argmin(1)) & ~near_tie).sum())
        difference = float(np.abs(found - expected).max())
        recompiled = facts.get("compiled_in_rounds", 0) if method in fused_methods(args) else 0
        failed = [why for why, holds in (
            (f"steady rate {ratio:.2f}x {reference}'s, needs {factor:.2f}x" if ratio is not None
             else "no steady rate (one batch a round)", ratio is not None and ratio >= factor),
            (f"losses differ by {difference:.2e}, beyond {tolerance:g}", difference <= tolerance),
            (f"{changed_beyond_ties} choices changed beyond near ties", changed_beyond_ties == 0),
            (f"{recompiled} graphs compiled during the rounds", recompiled == 0)) if not holds]
        verdicts[method] = {"option": option, "reference": reference, "ratio": ratio, "factor": factor,
                            "max_loss_difference": difference, "loss_tolerance": tolerance,
                            "choices_changed_beyond_near_ties": changed_beyond_ties, "compiled_in_rounds": recompiled,
                            "default": not failed, "why_not": failed}
    return verdicts


def choices(values: list) -> list[int]:
    return [int(np.argmin([v for v, _ in values[q:q + 4]])) for q in range(0, len(values), 4)]


def agreement(values: dict) -> tuple[dict, dict, dict]:
    """Each method against each before it in METHODS, on the questions both scored (one pass per candidate may
    have scored fewer, ``--one-pass-questions``): (the largest value difference, the same choice on every one of
    them, how many questions), each keyed by (method, reference)."""
    pairs = [(method, reference) for i, method in enumerate(values) for reference in list(values)[:i]]
    compared_on = {(method, reference): min(len(values[method]), len(values[reference])) // 4
                   for method, reference in pairs}
    differences = {(method, reference): max(abs(a[0] - b[0]) for a, b in zip(values[reference], values[method]))
                   for method, reference in pairs}
    same_choice = {(method, reference): choices(values[method][:4 * count]) == choices(values[reference][:4 * count])
                   for (method, reference), count in compared_on.items()}
    return differences, same_choice, compared_on


def full_run_estimates(args, facts: dict, timings: dict[str, list[Timing]]) -> tuple[dict, dict, dict, dict]:
    """Each method as a full run sees it: (its steady rate, the median of its rounds' rates after their first batch;
    its first batch's seconds, the median of its rounds'; its compile seconds, paid once by a fused method; the minutes
    of EgoPlan Val: first batch + compile + the 3,355 questions at the steady rate). A method whose rounds are one
    batch has no steady rate (None): its estimate takes its whole rounds' rate and says so."""
    fused = fused_methods(args)
    steady, first, compile_seconds, minutes = {}, {}, {}, {}
    for method, rounds in timings.items():
        rates = [timing.steady_questions_per_second for timing in rounds]
        steady[method] = statistics.median(rates) if None not in rates else None
        first[method] = statistics.median(timing.first_batch_seconds for timing in rounds)
        compile_seconds[method] = facts.get("compile_seconds", 0.0) if method in fused else 0.0
        rate = steady[method] or len(rounds[0].values) // 4 / statistics.median(t.seconds for t in rounds)
        minutes[method] = (first[method] + compile_seconds[method] + EGOPLAN_VAL_QUESTIONS / rate) / 60
    return steady, first, compile_seconds, minutes


def report(args, facts: dict, timings: dict[str, list[Timing]], counts: dict) -> None:
    """Prints the rates (whole rounds and steady), their ratios, the model step's counts, peak memory and agreement of
    the methods, and EgoPlan Val's time as a full run sees it; ``--json``: writes them too."""
    seconds = {method: [timing.seconds for timing in rounds] for method, rounds in timings.items()}
    host = {method: [timing.host_seconds for timing in rounds] for method, rounds in timings.items()}
    peaks = {method: max(timing.peak_gib for timing in rounds) for method, rounds in timings.items()}
    values = {method: rounds[-1].values for method, rounds in timings.items()}
    questions = {method: len(found) // 4 for method, found in values.items()}
    rates = {method: questions[method] / statistics.median(times) for method, times in seconds.items()}
    steady, first_batch, compile_seconds, minutes = full_run_estimates(args, facts, timings)
    differences, same_choice, compared_on = agreement(values)
    memory = facts["memory"]
    labels = {"one_pass_per_candidate": "one pass per candidate", "prefix_shared": "prefix-shared",
              "batched": f"batched ({args.batch_size})", "batched_fused": f"batched, fused ({args.batch_size})",
              "batched_processes": f"batched{', fused' if args.fused else ''}, {args.prefetch_processes} processes "
                                   f"({args.batch_size})",
              "batched_in_prefill": f"batched{', fused' if args.fused else ''}"
                                    f"{f', {args.prefetch_processes} processes' if args.prefetch_processes else ''}, "
                                    f"in prefill ({args.batch_size})"}
    for method in rates:
        step = counts[method]
        steady_rate = f"{steady[method]:.3f}" if steady[method] is not None else "- (one batch a round)"
        print(f"{labels[method]:23s}: {rates[method]:8.3f} questions/s, steady {steady_rate}, first batch "
              f"{first_batch[method]:.2f} s   peak {memory} {peaks[method]:6.2f} GiB   "
              f"per question: {step['attention_calls_per_question']:8.1f} attention calls, "
              f"{step['device_syncs_per_question']:6.1f} host reads, "
              f"{step['forward_passes_per_question']:5.2f} forward passes, "
              f"{step['host_to_device_bytes_per_question'] / 2 ** 20:6.2f} MiB to the device, padding "
              f"{step['padding_share']:.1%} of the tokens; host preparation "
              f"{statistics.median(host[method]) / questions[method] * 1000:.1f} ms a question "
              f"({questions[method]} questions)")
    ratio = (rates["prefix_shared"] / rates["one_pass_per_candidate"]
             if {"one_pass_per_candidate", "prefix_shared"} <= set(rates) else None)
    batched_ratio = rates["batched"] / rates["prefix_shared"] if "prefix_shared" in rates else None
    against_current = {name.removesuffix("_per_question"): counts["prefix_shared"][name] / max(counts["batched"][name],
                                                                                               1e-9)
                       for name in STEP_COUNTS} if "prefix_shared" in counts else {}
    if ratio is not None:
        print(f"ratio                  : {ratio:8.2f}x  (prefix-shared / one pass per candidate)")
    if batched_ratio is not None:
        print(f"batched / prefix-shared: {batched_ratio:8.2f}x  (the path before issue 63); fewer per question by: "
              + ", ".join(f"{name.replace('_', ' ')} {value:.1f}x" for name, value in against_current.items()))
    fused_ratio = rates["batched_fused"] / rates["batched"] if "batched_fused" in rates else None
    if fused_ratio is not None:
        kernels = facts["kernels_per_question"]
        counted = "device kernels" if args.device != "cpu" else "CPU: operators that compute + fused kernels"
        print(f"fused / batched        : {fused_ratio:8.2f}x  (fused_elementwise); kernels per question "
              f"{kernels['batched']:.0f} batched, {kernels['batched_fused']:.0f} fused: "
              f"{facts['fewer_kernels_fused']:.2f}x fewer ({counted}); "
              f"{facts['compiled_variants']} graphs compiled in {facts['compile_seconds']:.1f} s, "
              f"{facts['compiled_in_rounds']} more during the rounds")
    processes_ratio = None
    if "batched_processes" in rates:
        thread = "batched_fused" if args.fused else "batched"
        processes_ratio = rates["batched_processes"] / rates[thread]
        print(f"processes / thread     : {processes_ratio:8.2f}x  (prefetch_processes={args.prefetch_processes} "
              f"against {labels[thread]}'s preparing thread, visual_prefetch={args.visual_prefetch})")
    print("max |value difference|: " + ", ".join(
        f"{labels[method]} vs {labels[reference]} {difference:.2e} ({compared_on[method, reference]} questions)"
        for (method, reference), difference in differences.items())
          + "; same argmin choice on every question: "
          + ", ".join(f"{labels[method]} vs {labels[reference]} {same}"
                      for (method, reference), same in same_choice.items()))
    verdicts = default_verdicts(args, values, steady, facts)
    for method, verdict in verdicts.items():
        print(f"rule: {verdict['option']} becomes the GPU default where its steady rate is at least "
              f"{verdict['factor']:.2f}x {labels[verdict['reference']]}'s, its losses within "
              f"{verdict['loss_tolerance']:g} and its choices changed only on near ties, nothing recompiled: "
              + ("yes" if verdict["default"] else "no (" + "; ".join(verdict["why_not"]) + ")"))
    print(f"EgoPlan-Bench Val ({EGOPLAN_VAL_QUESTIONS:,} questions): first batch + compile + the questions at the "
          "steady rate: " + ", ".join(f"{minutes[method]:.1f} min {labels[method]}"
                                      + ("" if steady[method] is not None else " (no steady rate: whole rounds)")
                                      for method in rates) + " (model time, no decoding)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "shape": args.shape, "width": args.width, "layers": args.layers, "device": args.device, "dtype": args.dtype,
            "questions": args.questions, "questions_scored": questions, "rounds": args.rounds,
            "batch_size": args.batch_size,
            "visual_prefetch": args.visual_prefetch, **facts,
            "questions_per_second": rates, "ratio": ratio, "ratio_batched_to_prefix_shared": batched_ratio,
            "ratio_fused_to_batched": fused_ratio, "prefetch_processes": args.prefetch_processes,
            "ratio_processes_to_thread": processes_ratio,
            **{name: counts["batched"][name] for name in STEP_COUNTS}, "counts": counts,
            "fewer_per_question_than_prefix_shared": against_current,
            # per method: padded tokens over all tokens of the forward passes; bytes handed to the device a question
            "padding_share": {method: step["padding_share"] for method, step in counts.items()},
            "host_to_device_bytes_per_question": {method: step["host_to_device_bytes_per_question"]
                                                  for method, step in counts.items()},
            "host_preparation_seconds": {method: statistics.median(times) for method, times in host.items()},
            "peak_memory_gib": peaks,
            "steady_questions_per_second": steady, "first_batch_seconds": first_batch,
            "compile_seconds_by_method": compile_seconds, "egoplan_val_minutes": minutes,
            "max_value_difference": max(differences.values(), default=None),  # None: one method measured
            # the candidates inside the prefill against the prefill and its continuations (--in-prefill)
            "max_loss_difference": differences.get(("batched_in_prefill", "batched")),
            "defaults": verdicts,
            "max_value_differences": {f"{method} vs {reference}": difference
                                      for (method, reference), difference in differences.items()},
            "compared_on_questions": {f"{method} vs {reference}": count
                                      for (method, reference), count in compared_on.items()},
            "same_choice": all(same_choice.values()),
            "values": values}, indent=1))  # each method's (loss, greedy) per request: runs compare by them


if __name__ == "__main__":
    main()
