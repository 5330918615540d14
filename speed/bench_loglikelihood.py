"""Questions per second of egoplan_hf's multiple-choice scoring: one pass per candidate vs prefix-shared.

EgoPlan-Bench questions as egoplan_val sends them (the release's question through the task's
prompt builder, 4 candidate actions appended with no delimiter, scored over the answer and the
end-of-turn token) are scored by the same backend instance twice: once with a full forward pass
per candidate (vision encoder included, as lmms-eval's own backends do; only the logits of the
scored tokens are computed) and once with prefix sharing (one prefill per question, candidates
batched on its KV cache). Rounds alternate between the two methods so that a busy machine slows
both alike; the median round counts. Visuals are decoded once per question in both methods, so
the ratio is model work only. Peak memory is taken over one question per method, untimed.

Shapes (random weights, nothing downloaded):

* ``tiny``: the suite's tiny checkpoints (``--arch``, ``--hidden-size``, ``--layers``), 8 frames of
  224 px, no separate observation image;
* ``qwen2-vl-7b``, ``qwen2.5-vl-7b``: the published hyper-parameters written out below, 8 frames
  of 448 px plus the observation image at 448 px (1,280 visual tokens); ``--layers N`` keeps N of
  the 28 decoder layers and the same share of the 32 vision blocks where memory or time needs it.

    python speed/bench_loglikelihood.py                                    # tiny qwen2_vl, CPU
    python speed/bench_loglikelihood.py --shape qwen2-vl-7b --layers 1 --questions 2 --rounds 3
    python speed/bench_loglikelihood.py --shape qwen2.5-vl-7b --device cuda --dtype bfloat16

It ends with the time the full EgoPlan-Bench Val (3,355 questions) would take at each rate (model time:
these visuals are made in memory, nothing is decoded); ``--json FILE`` also writes the figures there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
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
PIXELS = {"shortest_edge": 3136, "longest_edge": 12845056}
FRAME_SIDE = {"tiny": 224, "qwen2-vl-7b": 448, "qwen2.5-vl-7b": 448}


def realistic_checkpoint(shape: str, layers: int | None, cache: Path, device: str) -> Path:
    """A random-weight checkpoint of ``shape`` (bfloat16 on disk), built once per (shape, depth)."""
    import torch
    import transformers

    from lmms_egoplan.demo.kit.checkpoints import CHAT_TEMPLATES, build_tokenizer

    text, vision = dict(SHAPES[shape]["text"]), dict(SHAPES[shape]["vision"])
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


def timed(backend, requests, prefix_sharing: bool) -> tuple[float, list]:
    backend.prefix_sharing = prefix_sharing
    started = time.perf_counter()
    values = backend.loglikelihood(requests)
    if backend.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - started, values


def peak_memory(backend, requests, prefix_sharing: bool) -> float:
    """Peak memory in GiB while scoring ``requests``: CUDA allocated memory on a GPU, else the
    process's peak resident set (weights included): freed heap memory is handed back to the system
    first (glibc's malloc_trim) and the peak reset (/proc/self/clear_refs), so each method counts its own."""
    import ctypes

    import torch

    if backend.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(backend.device)
        timed(backend, requests, prefix_sharing)
        return torch.cuda.max_memory_allocated(backend.device) / GiB
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    timed(backend, requests, prefix_sharing)
    peak_kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:"))
    return peak_kib / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=["tiny", *SHAPES])
    parser.add_argument("--arch", default="qwen2_vl", help="tiny shape: checkpoint architecture (one of "
                                                            "lmms_egoplan.demo.kit.checkpoints.ARCHITECTURES)")
    parser.add_argument("--pretrained", help="score with this checkpoint instead of a random one")
    parser.add_argument("--hidden-size", type=int, default=512, help="tiny shape: text hidden size")
    parser.add_argument("--layers", type=int, help="decoder layers (tiny: default 8; realistic shapes: default "
                                                   "the published 28, vision blocks in proportion)")
    parser.add_argument("--questions", type=int, default=8, help="questions per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per method (alternating)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--scored-span", default="answer_and_end_of_turn", choices=["answer_and_end_of_turn", "answer"])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write the figures to this file")
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
        pretrained = str(realistic_checkpoint(args.shape, args.layers, Path(args.cache), args.device))
    else:
        pretrained = str(tiny_checkpoint(args.arch, args.cache, hidden_size=args.hidden_size,
                                         num_layers=args.layers or 8))
    backend = EgoPlanHF(pretrained=pretrained, device=args.device, dtype=args.dtype)
    docs = egoplan_docs(args.questions, FRAME_SIDE[args.shape], observation=realistic)
    backend.task_dict = {TASK: {SPLIT: docs}}
    requests = requests_for(docs, args.scored_span)
    visuals = backend._doc_visuals((TASK, SPLIT, 0, egoplan_visuals))
    prompt = backend._encode([backend.chat.generation_prompt(backend.chat.user_turn(visuals.parts,
                                                                                    requests[0].args[0]))],
                             [visuals], "doc 0")
    parameters = sum(p.numel() for p in backend.model.parameters())
    print(f"model: {args.shape} {pretrained} ({parameters / 1e9:.2f}B parameters), device {args.device}, {args.dtype}, "
          f"{torch.get_num_threads()} CPU threads")
    print(f"prompt: {prompt['input_ids'].shape[1]} tokens ({len(visuals.videos)} video of "
          f"{len(visuals.videos[0].frames)} frames, "
          f"{len(visuals.images)} image(s), {FRAME_SIDE[args.shape]} px); questions per round: {args.questions} "
          f"(4 candidates each, scored span: {args.scored_span}), rounds: {args.rounds} per method")

    peaks = {sharing: peak_memory(backend, requests[:4], sharing) for sharing in (False, True)}  # also warms up
    seconds = {False: [], True: []}
    values = {}
    for _ in range(args.rounds):
        for prefix_sharing in (False, True):
            elapsed, values[prefix_sharing] = timed(backend, requests, prefix_sharing)
            seconds[prefix_sharing].append(elapsed)

    report(args, {"prompt_tokens": prompt["input_ids"].shape[1], "parameters": parameters,
                  "memory": "GPU memory allocated" if backend.device.type == "cuda" else "process resident memory"},
           seconds, peaks, values)


def report(args, facts: dict, seconds: dict[bool, list[float]], peaks: dict[bool, float], values: dict) -> None:
    """Prints the rates, their ratio, peak memory and agreement of the two methods; ``--json``: writes them too."""
    difference = max(abs(a[0] - b[0]) for a, b in zip(values[False], values[True]))
    same_choice = all(
        int(np.argmin([v for v, _ in values[False][q:q + 4]])) == int(np.argmin([v for v, _ in values[True][q:q + 4]]))
        for q in range(0, len(values[False]), 4))
    naive = args.questions / statistics.median(seconds[False])
    shared = args.questions / statistics.median(seconds[True])
    memory = facts["memory"]
    print(f"one pass per candidate : {naive:8.3f} questions/s   peak {memory} {peaks[False]:6.2f} GiB")
    print(f"prefix-shared          : {shared:8.3f} questions/s   peak {memory} {peaks[True]:6.2f} GiB")
    print(f"ratio                  : {shared / naive:8.2f}x")
    print(f"max |value difference| {difference:.2e}; same argmin choice on every question: {same_choice}")
    print(f"EgoPlan-Bench Val ({EGOPLAN_VAL_QUESTIONS:,} questions) at these rates: "
          f"{EGOPLAN_VAL_QUESTIONS / shared / 60:.1f} min prefix-shared, "
          f"{EGOPLAN_VAL_QUESTIONS / naive / 60:.1f} min one pass per candidate (model time, no decoding)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "shape": args.shape, "layers": args.layers, "device": args.device, "dtype": args.dtype,
            "questions": args.questions, "rounds": args.rounds, **facts,
            "questions_per_second": {"prefix_shared": shared, "one_pass_per_candidate": naive},
            "ratio": shared / naive, "peak_memory_gib": {"prefix_shared": peaks[True], "one_pass_per_candidate":
                                                         peaks[False]},
            "egoplan_val_minutes": {"prefix_shared": EGOPLAN_VAL_QUESTIONS / shared / 60,
                                    "one_pass_per_candidate": EGOPLAN_VAL_QUESTIONS / naive / 60},
            "max_value_difference": difference, "same_choice": same_choice}, indent=1))


if __name__ == "__main__":
    main()
