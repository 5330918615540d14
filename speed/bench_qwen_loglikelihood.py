"""lmms-eval's Qwen backends with the loglikelihood of pull request 25 (docs/upstream/25-qwen-vl-loglikelihood.md),
which shares a question's prompt and images across its candidates (one forward pass over them, then every candidate
on its KV cache), against the naive method, one forward pass over the whole conversation per candidate (the same
rendering and scored tokens, the patch's helpers; its path before prefix sharing), and against the suite's
egoplan_hf, on the same EgoPlan questions: each candidate's loss within the dtype's tolerance of lmms-eval's, the same
choice on at least 99 % of the questions that are not near ties, and each method's questions per second, with the
ratios. A near tie is a question whose two lowest losses, lmms-eval's, lie within the loss tolerance: random weights
give candidates close losses, and rounding (bfloat16's 2^-8 relative, in kernels that differ) may reorder them; the
near ties and the disagreements on them are counted and recorded.

A scratch copy of the installed lmms-eval gets patches 01 and 25 (never the environment's own); this script then runs
itself again importing it. Both backends load the same checkpoint as lmms-eval's backend loads it (its dtype: bfloat16
for Qwen2.5-VL and Qwen3-VL), lmms-eval's with the checkpoint's own pixel bounds, egoplan_hf with lmms-eval's system
prompt; both score the questions egoplan_val sends (the release's question, 4 candidate actions, 8 frames as images,
plus the observation image at the realistic shapes), egoplan_hf over the answer and the end-of-turn token as
lmms-eval's Qwen backends score it, with its prefix sharing (the suite's default). Rounds alternate between the three
methods; the median round counts. Exit status 1 when a loss differs by more than the tolerance or fewer than 99 % of
the questions beyond the near ties get the same choice.

Shapes are bench_loglikelihood.py's (random weights, nothing downloaded). The 7B shape needs a GPU; without CUDA it
is skipped (exit status 0, a line saying so):

    python speed/bench_qwen_loglikelihood.py                                          # tiny qwen2_5_vl, CPU
    python speed/bench_qwen_loglikelihood.py --arch all        # tiny Qwen2-VL, Qwen2.5-VL and Qwen3-VL, one by one
    python speed/bench_qwen_loglikelihood.py --shape qwen2.5-vl-7b --device cuda --questions 100

``--json FILE`` also writes each architecture's figures there (the GPU check, tests/gpu/test_qwen_likelihood_on_gpu.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH_VARIABLE = "LMMS_EGOPLAN_BENCH_PATCHED_LMMS_EVAL"  # set in the second run: the patched copy it imports
PATCHES = ("01-loglikelihood-results.patch", "25-qwen-vl-loglikelihood.patch")
BACKENDS = {"qwen2_vl": ("lmms_eval.models.simple.qwen2_vl", "Qwen2_VL", "auto"),
            "qwen2_5_vl": ("lmms_eval.models.simple.qwen2_5_vl", "Qwen2_5_VL", "bfloat16"),
            "qwen3_vl": ("lmms_eval.models.simple.qwen3_vl", "Qwen3_VL", "bfloat16")}
SHAPE_ARCH = {"qwen2-vl-7b": "qwen2_vl", "qwen2.5-vl-7b": "qwen2_5_vl"}
SAME_CHOICE_NEEDED = 0.99
# The largest difference of a candidate's loss (the scored tokens' mean) allowed between the methods: float32 agrees
# to rounding; bfloat16 rounds to 2^-8 relative in every layer of kernels that differ (tests/gpu's 0.1). With every
# loss within it, a choice can flip only where the two lowest losses lie within twice it; a near tie is the narrower
# band of the tolerance once, fixed before the run (a band from the observed differences would move with the noise it
# forgives), so that a flip needing both candidates to move apart by more than half of it still counts against the
# 99 %.
LOSS_TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-1}
NAIVE = "one pass per candidate"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=["tiny", *SHAPE_ARCH])
    parser.add_argument("--arch", default="qwen2_5_vl", choices=[*sorted(BACKENDS), "all"],
                        help="tiny shape: the architecture, or all three in turn")
    parser.add_argument("--layers", type=int, help="decoder layers (bench_loglikelihood.py's meaning)")
    parser.add_argument("--questions", type=int, default=8, help="questions per round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per method (alternating)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write each architecture's figures to this file")
    return parser.parse_args()


def rerun_on_a_patched_copy() -> int:
    """Build the scratch copy with PATCHES and run this script again importing it; its exit status."""
    sys.path.insert(0, str(ROOT))
    from docs.upstream.equivalence import patched_lmms_eval

    with tempfile.TemporaryDirectory(prefix="bench-qwen-") as folder:
        scratch = patched_lmms_eval(PATCHES, Path(folder) / "lmms-eval")
        env = {**os.environ, SCRATCH_VARIABLE: str(scratch),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(scratch), str(ROOT), os.environ.get("PYTHONPATH")]))}
        return subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env).returncode


def lmms_eval_backend(arch: str, pretrained: str, device: str):
    """lmms-eval's backend for ``arch`` (its simple class, which the chat one inherits), with the checkpoint's own
    pixel bounds; a stand-in decord where none is installed (the backends import it for videos only)."""
    import importlib
    import importlib.util
    import types

    from transformers import AutoImageProcessor

    if "decord" not in sys.modules and importlib.util.find_spec("decord") is None:
        sys.modules["decord"] = types.SimpleNamespace(VideoReader=None, cpu=None)
    module, name, _ = BACKENDS[arch]
    size = AutoImageProcessor.from_pretrained(pretrained).size
    return getattr(importlib.import_module(module), name)(pretrained=pretrained, device=device, device_map=device,
                                                          min_pixels=size["shortest_edge"],
                                                          max_pixels=size["longest_edge"])


def compare(args: argparse.Namespace) -> int:
    import lmms_eval
    import torch

    assert lmms_eval.__file__.startswith(os.environ[SCRATCH_VARIABLE]), lmms_eval.__file__
    if args.shape != "tiny" and not torch.cuda.is_available():
        print(f"skipped: the {args.shape} comparison needs a CUDA device, and none is available")
        return 0
    if args.shape != "tiny":
        archs = [SHAPE_ARCH[args.shape]]
    else:
        archs = sorted(BACKENDS) if args.arch == "all" else [args.arch]
    figures = [compare_arch(args, arch) for arch in archs]
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": args.shape, "device": args.device, "architectures": figures}))
    return 0 if all(found["agrees"] for found in figures) else 1


def compare_arch(args: argparse.Namespace, arch: str) -> dict:
    """One architecture's comparison (the module docstring): its figures."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "speed"))
    from bench_loglikelihood import FRAME_SIDE, SPLIT, TASK, egoplan_docs, realistic_checkpoint, requests_for

    from lmms_egoplan.core.request_options import ANSWER_AND_END_OF_TURN
    from lmms_egoplan.demo.kit.checkpoints import tiny_checkpoint
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    realistic = args.shape != "tiny"
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    pretrained = str(realistic_checkpoint(args.shape, args.layers, Path(args.cache), args.device) if realistic
                     else tiny_checkpoint(arch, args.cache))
    theirs = lmms_eval_backend(arch, pretrained, args.device)
    ours = EgoPlanHF(pretrained=pretrained, device=args.device, dtype=BACKENDS[arch][2],
                     system_prompt=theirs.system_prompt)
    docs = egoplan_docs(args.questions, FRAME_SIDE[args.shape], observation=realistic)
    requests = requests_for(docs, ANSWER_AND_END_OF_TURN)
    for request in requests:  # the frames as images: lmms-eval's backends take a frame list so
        request.arguments = (*request.arguments[:2], untagged_visuals, *request.arguments[3:])
    for backend in (theirs, ours):
        backend.task_dict = {TASK: {SPLIT: docs}}
    print(f"model: {args.shape} {arch} {pretrained}, device {args.device}, {theirs.model.dtype}; "
          f"{args.questions} questions x 4 candidates per round, {args.rounds} rounds per method")
    methods = {"lmms-eval": theirs.loglikelihood, NAIVE: lambda found: one_pass_per_candidate(theirs, found),
               "egoplan_hf": ours.loglikelihood}
    seconds, values = {name: [] for name in methods}, {}
    for _ in range(args.rounds):
        for name, score in methods.items():
            started = time.perf_counter()
            values[name] = score(requests)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[name].append(time.perf_counter() - started)
    rates = {name: args.questions / statistics.median(times) for name, times in seconds.items()}
    for name, rate in rates.items():
        print(f"{name:<24} questions/s {rate:8.3f}")
    print(f"lmms-eval prefix sharing / {NAIVE} = {rates['lmms-eval'] / rates[NAIVE]:.2f}x")
    print(f"egoplan_hf / lmms-eval = {rates['egoplan_hf'] / rates['lmms-eval']:.2f}x")
    agreed = agreement({name: np.array([loss for loss, _ in found]).reshape(-1, 4) for name, found in values.items()},
                       LOSS_TOLERANCE[str(theirs.model.dtype).removeprefix("torch.")])
    print(f"same choice on {agreed['same_choice']:.1%} of {agreed['questions']} questions, all three methods; "
          f"near ties (lmms-eval's two lowest losses within {agreed['loss_tolerance']:g}): {agreed['near_ties']}, "
          f"{agreed['near_tie_disagreements']} of them chosen differently; beyond them the same choice on "
          f"{agreed['same_choice_beyond_near_ties']:.1%} (needed: {SAME_CHOICE_NEEDED:.0%}); max |loss difference| "
          f"{agreed['max_loss_difference']:.2e} (allowed: {agreed['loss_tolerance']:g}): "
          f"{'agrees' if agreed['agrees'] else 'DISAGREES'}")
    return {"arch": arch, "dtype": str(theirs.model.dtype).removeprefix("torch."), **agreed,
            "questions_per_second": rates, "ratio": rates["egoplan_hf"] / rates["lmms-eval"],
            "prefix_sharing_ratio": rates["lmms-eval"] / rates[NAIVE]}


def agreement(losses: dict, tolerance: float) -> dict:
    """The methods' agreement with lmms-eval's (``losses``: method -> questions x 4 candidate losses): the largest
    loss difference, the share of questions all choose alike, the near ties (lmms-eval's two lowest losses within
    ``tolerance``) and the disagreements on them, the share chosen alike beyond them, and whether the difference is
    within ``tolerance`` and the share enough."""
    import numpy as np

    reference = losses["lmms-eval"]
    difference = max(float(np.abs(found - reference).max()) for found in losses.values())
    alike = np.all([found.argmin(axis=1) == reference.argmin(axis=1) for found in losses.values()], axis=0)
    lowest_two = np.sort(reference, axis=1)[:, :2]
    near_tie = lowest_two[:, 1] - lowest_two[:, 0] <= tolerance
    beyond = float(alike[~near_tie].mean()) if (~near_tie).any() else 1.0
    return {"questions": len(reference), "same_choice": float(alike.mean()), "max_loss_difference": difference,
            "loss_tolerance": tolerance, "near_ties": int(near_tie.sum()),
            "near_tie_disagreements": int((near_tie & ~alike).sum()), "same_choice_beyond_near_ties": beyond,
            "agrees": difference <= tolerance and beyond >= SAME_CHOICE_NEEDED}


def one_pass_per_candidate(lm, requests: list) -> list[tuple[float, bool]]:
    """The naive method: each request's whole conversation (prompt, images, answer, end-of-turn token) in one forward
    pass, the tokens and conversation the patch's chat_loglikelihood scores, rendered by its own helpers."""
    import torch
    from lmms_eval.models.model_utils.chat_loglikelihood import answer_ids, render_answer_turn

    results = []
    with torch.inference_mode():
        for context, continuation, doc_to_visual, doc_id, task, split in (request.args for request in requests):
            images = list(doc_to_visual(lm.task_dict[task][split][doc_id]) or [])
            content = [{"type": "image", "image": image} for image in images] + [{"type": "text", "text": context}]
            messages = lm._apply_system_prompt([{"role": "user", "content": content}], lm.system_prompt)
            answer = continuation.lstrip()
            prompt, end_of_turn = render_answer_turn(lm.processor, messages, answer)
            scored = answer_ids(lm.processor.tokenizer, prompt, answer, end_of_turn)
            inputs = lm.processor(text=[prompt + answer + end_of_turn], images=images or None,
                                  return_tensors="pt").to(lm.device)
            logits = lm.model(**inputs, logits_to_keep=len(scored) + 1).logits[0, :-1].float()
            targets = inputs["input_ids"][0, -len(scored):]
            nll = -torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]
            results.append((float(nll.mean()), bool((logits.argmax(-1) == targets).all())))
    return results


def untagged_visuals(doc: dict) -> list:
    """The bench's frames with no clip tag: images, as lmms-eval's backends show a task's frame list."""
    from bench_loglikelihood import egoplan_visuals

    frames = [frame.copy() for frame in egoplan_visuals(doc)]
    for frame in frames:
        frame.info.clear()
    return frames


if __name__ == "__main__":
    sys.exit(compare(arguments()) if os.environ.get(SCRATCH_VARIABLE) else rerun_on_a_patched_copy())
