"""Judgements per second of the in-process transformers judge (``judge_backend=hf``): its queue vs the old lock.

EgoThink judge prompts (the paper's Table 7 prompt through ``egothink.protocol.judge_request``, with questions,
reference answers and answers of EgoThink's lengths) go through the judge engine (``Judge``), ``--concurrency`` in
flight, to the suite's ``TransformersBackend`` loaded from a random-weight checkpoint: its worker thread gathers the
prompts that arrive during a generation into the next batch. Then the first ``--naive-items`` of them go through
the naive batching it replaced (``OldLock``: callers queued on a generation lock, issue 63), on the same model with
the same batch size. Printed and written (``--json``): each one's judgements per second and ``generate`` calls,
their ratio, and on how many prompts the two wrote the same output (greedy decoding). Random weights never write
a rating, so every judgement fails to parse, and each answer runs to ``--new-tokens`` tokens: the engine, the
batching and the generation are timed, not the judge's verdicts. A progress line comes every
``--progress-seconds``.

Shapes (random weights, nothing downloaded), with the kit's byte-level tokenizer (it splits English into more
tokens than Qwen's; the prompt length in tokens is printed):

* ``tiny``: a 2-layer model of width 64 (smoke runs);
* ``qwen3-8b``: Qwen/Qwen3-8B's published hyper-parameters (config.json: hidden 4096, 36 layers, 32 query / 8
  key-value heads of 128, MLP 12288, vocabulary 151936, rope theta 1e6, untied embeddings), the dense model of
  the default judge's family; the default judge itself, Qwen3-30B-A3B, is 61 GB of weights: more than a random
  checkpoint can be written to disk and read back inside one GPU check's minutes.

    python speed/bench_judge_hf.py --shape tiny --items 700 --concurrency 32       # CPU
    python speed/bench_judge_hf.py --shape qwen3-8b --items 700 --concurrency 32   # on a GPU
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from lmms_egoplan.judge.base import JudgeBackend  # noqa: E402 (after the offline switches)
from lmms_egoplan.judge.protocol import Completion, Decoding  # noqa: E402

SHAPES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024, "max_position_embeddings": 8192},
    "qwen3-8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960},
}
# The checkpoint's dtype, in which the judge loads it: a GPU's for the published shape; float32 for the CPU's (its
# bfloat16 kernels are slow there), in which batches of any composition write the same greedy outputs.
DTYPES = {"tiny": "float32", "qwen3-8b": "bfloat16"}
# Model answers of EgoThink's length (a sentence or two); the questions and references are the demo's.
ANSWER_TAILS = ("It is right in front of me, on the counter next to the sink.",
                "I can see it near my left hand, partly hidden behind a bowl.",
                "Looking at the scene, that is what the person is about to do next.")


def judge_checkpoint(shape: str, cache: Path, device: str) -> Path:
    """A random-weight Qwen3 causal LM of ``shape`` (in its ``DTYPES``) with the kit's chat tokenizer, built once."""
    import torch
    import transformers

    from lmms_egoplan.demo.kit.checkpoints import build_tokenizer

    text = {**SHAPES[shape], "dtype": DTYPES[shape], "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0}}
    key = hashlib.sha256(json.dumps([text, transformers.__version__]).encode()).hexdigest()
    folder = cache / f"judge-{shape}-{key[:12]}"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = build_tokenizer("llama")  # Llama-3's chat turns; the architecture is Qwen3's
    config = transformers.Qwen3Config(**text, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                      pad_token_id=tokenizer.pad_token_id)
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM._from_config(config, dtype=getattr(torch, DTYPES[shape]))
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache))
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(folder)
    return folder


def egothink_requests(count: int) -> list:
    from lmms_egoplan.demo.egothink import ANSWERS, QUESTIONS
    from lmms_egoplan.egothink.protocol import judge_request

    return [judge_request({"id": f"item-{i}", "question": QUESTIONS[i % len(QUESTIONS)],
                           "answer": ANSWERS[i % len(ANSWERS)]},
                          f"{ANSWERS[(i + 1) % len(ANSWERS)]} {ANSWER_TAILS[i % len(ANSWER_TAILS)]} (answer {i})")
            for i in range(count)]


class OldLock(JudgeBackend):
    """The naive batching, as ``TransformersBackend.complete`` was until issue 63 (commit 429b301): each caller
    queues its prompt, then whoever holds the generation lock generates a batch of what is pending. A caller whose
    answer came back has to queue on the lock behind the next generation to leave, so batches collapse to a few
    prompts. Generates with the backend's own ``_generate``."""

    def __init__(self, backend):
        self.kind, self.model, self._backend = backend.kind, backend.model, backend
        self.generate_calls = 0
        self._pending: list[tuple[tuple, object, Future]] = []
        self._pending_lock = threading.Lock()
        self._generate_lock = threading.Lock()

    def complete(self, messages, decoding):
        mine: Future = Future()
        with self._pending_lock:
            self._pending.append((tuple(messages), decoding, mine))
        while not mine.done():
            with self._generate_lock:
                if mine.done():
                    break
                with self._pending_lock:
                    batch = [p for p in self._pending if p[1] == self._pending[0][1]][: self._backend._batch_size]
                    self._pending = [p for p in self._pending if p not in batch]
                self.generate_calls += 1
                texts = self._backend._generate([m for m, _, _ in batch], batch[0][1])
                for (_, _, future), text in zip(batch, texts):
                    future.set_result(Completion(text=text, model=self.model))
        return mine.result()


def timed_judging(backend, requests: list, concurrency: int, new_tokens: int, label: str,
                  progress_seconds: float = 0) -> tuple[float, object, int]:
    """Judges ``requests`` with ``concurrency`` calls in flight; returns the seconds, the results and the
    backend's generate calls. Every ``progress_seconds`` (0: never) a line says how far it is."""
    from lmms_egoplan.egothink.protocol import RUBRIC
    from lmms_egoplan.judge.engine import Judge

    judge = Judge(backend, decoding=Decoding(0.0, new_tokens), cache=None, concurrency=concurrency, retries=0)
    calls, finished = backend.generate_calls, threading.Event()
    started = time.perf_counter()

    def report() -> None:
        while not finished.wait(progress_seconds):
            print(f"  {label}: {time.perf_counter() - started:.0f} s, {backend.generate_calls - calls} generate "
                  f"calls so far", flush=True)

    if progress_seconds:
        threading.Thread(target=report, daemon=True).start()
    try:
        results = judge.run(requests, RUBRIC.parse_rating, progress=False)
    finally:
        finished.set()
    return time.perf_counter() - started, results, backend.generate_calls - calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--items", type=int, default=700, help="judge prompts through the backend's queue")
    parser.add_argument("--concurrency", type=int, default=16, help="calls in flight and generation batch "
                                                                    "(judge_concurrency)")
    parser.add_argument("--naive-items", type=int, default=128, help="judge prompts (the first of --items) "
                                                                     "through the old lock, for the ratio")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens each answer runs to (judge_max_tokens)")
    parser.add_argument("--progress-seconds", type=float, default=30, help="a progress line this often (0: none)")
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice); 1 on a loaded "
                                                    "machine, whose OpenMP teams otherwise wait on one another")
    parser.add_argument("--device", default="auto", help="where the checkpoint is built (the backend loads on "
                                                         "`auto`: the GPU where there is one)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from lmms_egoplan.core.devices import resolve_device
    from lmms_egoplan.judge.providers.transformers import TransformersBackend

    if args.threads:
        torch.set_num_threads(args.threads)
    Path(args.cache).mkdir(parents=True, exist_ok=True)
    folder = judge_checkpoint(args.shape, Path(args.cache), resolve_device(args.device))
    started = time.perf_counter()
    backend = TransformersBackend(str(folder), batch_size=args.concurrency)
    load_seconds = time.perf_counter() - started
    requests = egothink_requests(args.items)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokens = [len(tokenizer(tokenizer.apply_chat_template(list(r.messages), add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)["input_ids"]) for r in requests]
    timed_judging(backend, requests[:2], 2, 2, "warm-up")  # not timed
    wall, results, calls = timed_judging(backend, requests, args.concurrency, args.new_tokens, "queue",
                                         args.progress_seconds)
    naive = OldLock(backend)
    naive_wall, naive_results, naive_calls = timed_judging(naive, requests[:args.naive_items], args.concurrency,
                                                           args.new_tokens, "old lock", args.progress_seconds)
    answered = sum(j.raw_output is not None for j in results.judgements)
    same = sum(a.raw_output == b.raw_output for a, b in zip(results.judgements, naive_results.judgements))
    queued, locked = args.items / wall, args.naive_items / naive_wall
    device = resolve_device("auto")
    print(f"judge: {args.shape} ({SHAPES[args.shape]['num_hidden_layers']} layers of width "
          f"{SHAPES[args.shape]['hidden_size']}, random weights, {DTYPES[args.shape]}) on {device}, "
          f"{torch.get_num_threads()} CPU threads; loaded in {load_seconds:.1f} s")
    print(f"{args.items} EgoThink judge prompts of {min(tokens)}-{max(tokens)} tokens "
          f"(mean {sum(tokens) / len(tokens):.0f}), {args.new_tokens} new tokens each, {args.concurrency} in flight; "
          f"answered {answered} (no rating expected of random weights)")
    print(f"queue    ({args.items:4d} prompts): {queued:8.2f} judgements/s ({wall:.1f} s), {calls} generate calls of "
          f"{args.items / calls:.1f} prompts")
    print(f"old lock ({args.naive_items:4d} prompts): {locked:8.2f} judgements/s ({naive_wall:.1f} s), {naive_calls} "
          f"generate calls of {args.naive_items / naive_calls:.1f} prompts")
    print(f"the same judge output (greedy) on {same} of the {args.naive_items} prompts judged both ways")
    print(f"queue / old lock = {queued / locked:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "shape": args.shape, "device": device, "items": args.items, "naive_items": args.naive_items,
            "concurrency": args.concurrency, "new_tokens": args.new_tokens, "load_seconds": load_seconds,
            "prompt_tokens": {"min": min(tokens), "max": max(tokens), "mean": sum(tokens) / len(tokens)},
            "answered": answered, "call_errors": len(results.judgements) - answered
            + sum(j.raw_output is None for j in naive_results.judgements),
            "generate_calls": calls, "old_lock_generate_calls": naive_calls, "same_outputs": same,
            "judgements_per_second": {"queue": queued, "old_lock": locked},
            "seconds": {"queue": wall, "old_lock": naive_wall}, "ratio": queued / locked}, indent=1))


if __name__ == "__main__":
    main()
