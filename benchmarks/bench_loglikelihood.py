"""Questions per second of egoplan_hf's multiple-choice scoring: naive per-candidate vs prefix-shared.

EgoPlan-shaped questions (one clip of 8 frames, the observation last, a ~100-token prompt,
4 candidates of 3-8 tokens, scored over the answer and the end-of-turn token as egoplan_val
asks by default) are scored by the same backend instance twice: once with a
full forward pass per candidate (vision encoder included, as lmms-eval's own backends do) and
once with prefix sharing (one prefill per question, candidates batched on its KV cache). Rounds
alternate between the two methods so that a busy machine slows both alike; the median round
counts. Visuals are decoded once per question in both methods, so the ratio is model work only.

    python benchmarks/bench_loglikelihood.py                      # CPU, float32, tiny-random qwen2_vl
    python benchmarks/bench_loglikelihood.py --device cuda --dtype bfloat16
    python benchmarks/bench_loglikelihood.py --scored-span answer   # lmms-eval's convention
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

TASK, SPLIT = "bench", "test"
# ~100 tokens with the suite's tiny tokenizer; EgoPlan-Bench prompts are of this length.
PROMPT = ("Considering the progress shown in the video and my current observation in the last frame, what action "
          "should I take next in order to {goal}? The person is in the kitchen and picks up the knife to cut the "
          "tomato on the board. Task goal: {goal}. Progress: took eggs, cracked eggs, mixed eggs. Answer with the "
          "action that comes next, in a few words.")
GOALS = ["make a cup of coffee", "cook the rice", "clean the table", "prepare breakfast"]
ACTIONS = ["open the fridge", "wash the hands", "put the pan on the stove", "take the cup", "heat the pan",
           "pour the water into the cup", "cut the tomato on the board", "close the door", "stir the eggs in the bowl",
           "pick up the knife", "turn on the light", "remove the lid from the pot"]


def egoplan_docs(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [{"question": PROMPT.format(goal=rng.choice(GOALS)), "choices": rng.sample(ACTIONS, 4), "seed": seed + i}
            for i in range(count)]


def egoplan_visuals(doc: dict) -> list[Image.Image]:
    from lmms_egoplan.media import as_video_frames

    rng = np.random.default_rng(doc["seed"])
    frames = [Image.fromarray(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)) for _ in range(8)]
    return as_video_frames(frames, clip="task_progress_1")


def requests_for(docs: list[dict], span: str) -> list:
    from lmms_eval.api.instance import Instance

    from lmms_egoplan import scored_span

    requests = [Instance(request_type="loglikelihood", idx=i,
                         arguments=(doc["question"], " " + choice, egoplan_visuals, doc_id, TASK, SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, doc in enumerate(docs) for i, choice in enumerate(doc["choices"])]
    scored_span.mark_requests(requests, span)
    return requests


def timed(backend, requests, prefix_sharing: bool) -> tuple[float, list]:
    backend.prefix_sharing = prefix_sharing
    started = time.perf_counter()
    values = backend.loglikelihood(requests)
    if backend.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    return time.perf_counter() - started, values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="qwen2_vl", help="tiny checkpoint architecture (llava, llava_onevision, "
                                                            "qwen2_vl, idefics3)")
    parser.add_argument("--pretrained", help="score with this checkpoint instead of a random one")
    parser.add_argument("--hidden-size", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--questions", type=int, default=8, help="questions per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per method (alternating)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--scored-span", default="answer_and_end_of_turn", choices=["answer_and_end_of_turn", "answer"])
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    args = parser.parse_args()

    import torch

    from lmms_egoplan.models.egoplan_hf import EgoPlanHF
    from lmms_egoplan.testing.checkpoints import tiny_checkpoint

    if args.threads:
        torch.set_num_threads(args.threads)
    pretrained = args.pretrained or str(tiny_checkpoint(args.arch, args.cache, hidden_size=args.hidden_size,
                                                        num_layers=args.layers))
    backend = EgoPlanHF(pretrained=pretrained, device=args.device, dtype=args.dtype)
    docs = egoplan_docs(args.questions)
    backend.task_dict = {TASK: {SPLIT: docs}}
    requests = requests_for(docs, args.scored_span)
    parameters = sum(p.numel() for p in backend.model.parameters())
    print(f"model: {pretrained} ({parameters / 1e6:.1f}M parameters), device {args.device}, {args.dtype}, "
          f"{torch.get_num_threads()} CPU threads")
    print(f"questions per round: {args.questions} (4 candidates each, scored span: {args.scored_span}), "
          f"rounds: {args.rounds} per method")

    timed(backend, requests[:4], prefix_sharing=False)  # warm-up (allocators, kernels)
    timed(backend, requests[:4], prefix_sharing=True)
    seconds = {False: [], True: []}
    values = {}
    for _ in range(args.rounds):
        for prefix_sharing in (False, True):
            elapsed, values[prefix_sharing] = timed(backend, requests, prefix_sharing)
            seconds[prefix_sharing].append(elapsed)

    difference = max(abs(a[0] - b[0]) for a, b in zip(values[False], values[True]))
    same_choice = all(
        int(np.argmin([v for v, _ in values[False][q:q + 4]])) == int(np.argmin([v for v, _ in values[True][q:q + 4]]))
        for q in range(0, len(requests), 4))
    naive = args.questions / statistics.median(seconds[False])
    shared = args.questions / statistics.median(seconds[True])
    print(f"naive per-candidate : {naive:8.2f} questions/s")
    print(f"prefix-shared       : {shared:8.2f} questions/s")
    print(f"ratio               : {shared / naive:8.2f}x")
    print(f"max |value difference| {difference:.2e}; same argmin choice on every question: {same_choice}")


if __name__ == "__main__":
    main()
