"""Judgements per second of the in-process transformers judge (``judge_backend=hf``): batched vs one at a time.

EgoThink judge prompts (the paper's Table 7 prompt through ``egothink.protocol.judge_request``, with questions,
reference answers and answers of EgoThink's lengths) go through the judge engine (``Judge``) to the suite's
``TransformersBackend`` loaded from a random-weight checkpoint, ``--concurrency`` at a time (the backend's
generation batch); then ``--naive-items`` of them one at a time (the naive way: one generation per answer).
Random weights never write a rating, so every judgement fails to parse, and each answer runs to
``--new-tokens`` tokens: the engine, the batching and the generation are timed, not the judge's verdicts.

Shapes (random weights, nothing downloaded), with the kit's byte-level tokenizer (it splits English into more
tokens than Qwen's; the prompt length in tokens is printed):

* ``tiny``: a 2-layer model of width 64 (smoke runs);
* ``qwen3-8b``: Qwen/Qwen3-8B's published hyper-parameters (config.json: hidden 4096, 36 layers, 32 query / 8
  key-value heads of 128, MLP 12288, vocabulary 151936, rope theta 1e6, untied embeddings), the dense model of
  the default judge's family; the default judge itself, Qwen3-30B-A3B, is 61 GB of weights: more than a random
  checkpoint can be written to disk and read back inside one GPU check's minutes.

    python speed/bench_judge_hf.py                                                 # tiny, CPU
    python speed/bench_judge_hf.py --shape qwen3-8b --items 700 --concurrency 16   # on a GPU
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHAPES = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024, "max_position_embeddings": 8192},
    "qwen3-8b": {"hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960},
}
# Model answers of EgoThink's length (a sentence or two); the questions and references are the demo's.
ANSWER_TAILS = ("It is right in front of me, on the counter next to the sink.",
                "I can see it near my left hand, partly hidden behind a bowl.",
                "Looking at the scene, that is what the person is about to do next.")


def judge_checkpoint(shape: str, cache: Path, device: str) -> Path:
    """A random-weight Qwen3 causal LM of ``shape`` (bfloat16) with the kit's chat tokenizer, built once."""
    import torch
    import transformers

    from lmms_egoplan.demo.kit.checkpoints import build_tokenizer

    text = {**SHAPES[shape], "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0}}
    key = hashlib.sha256(json.dumps([text, transformers.__version__]).encode()).hexdigest()
    folder = cache / f"judge-{shape}-{key[:12]}"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = build_tokenizer("llama")  # Llama-3's chat turns; the architecture is Qwen3's
    config = transformers.Qwen3Config(**text, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                      pad_token_id=tokenizer.pad_token_id)
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM._from_config(config, dtype=torch.bfloat16)
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


def timed_judging(backend, requests: list, concurrency: int, new_tokens: int) -> tuple[float, object]:
    from lmms_egoplan.egothink.protocol import RUBRIC
    from lmms_egoplan.judge.engine import Judge
    from lmms_egoplan.judge.protocol import Decoding

    # The backend batches what is pending, so the engine's calls in flight are its generation batch.
    judge = Judge(backend, decoding=Decoding(0.0, new_tokens), cache=None, concurrency=concurrency, retries=0)
    started = time.perf_counter()
    results = judge.run(requests, RUBRIC.parse_rating, progress=False)
    return time.perf_counter() - started, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--items", type=int, default=700, help="judge prompts, batched")
    parser.add_argument("--concurrency", type=int, default=16, help="generation batch (judge_concurrency)")
    parser.add_argument("--naive-items", type=int, default=8, help="judge prompts judged one at a time")
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens each answer runs to (judge_max_tokens)")
    parser.add_argument("--device", default="auto", help="where the checkpoint is built (the backend loads on "
                                                         "`auto`: the GPU where there is one)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    import torch
    from transformers import AutoTokenizer

    from lmms_egoplan.core.devices import resolve_device
    from lmms_egoplan.judge.providers.transformers import TransformersBackend

    Path(args.cache).mkdir(parents=True, exist_ok=True)
    folder = judge_checkpoint(args.shape, Path(args.cache), resolve_device(args.device))
    backend = TransformersBackend(str(folder), batch_size=args.concurrency)
    requests = egothink_requests(args.items)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokens = [len(tokenizer(tokenizer.apply_chat_template(list(r.messages), add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)["input_ids"]) for r in requests]
    timed_judging(backend, requests[:2], 2, 2)  # warm-up, not timed
    wall, results = timed_judging(backend, requests, args.concurrency, args.new_tokens)
    naive_wall, naive_results = timed_judging(backend, requests[:args.naive_items], 1, args.new_tokens)
    answered = sum(j.raw_output is not None for j in results.judgements)
    batched, one_at_a_time = args.items / wall, args.naive_items / naive_wall
    device = resolve_device("auto")
    print(f"judge: {args.shape} ({SHAPES[args.shape]['num_hidden_layers']} layers of width "
          f"{SHAPES[args.shape]['hidden_size']}, random weights, bfloat16) on {device}, {torch.get_num_threads()} CPU "
          f"threads")
    print(f"{args.items} EgoThink judge prompts of {min(tokens)}-{max(tokens)} tokens "
          f"(mean {sum(tokens) / len(tokens):.0f}), {args.new_tokens} new tokens each; answered {answered} "
          f"(no rating expected of random weights)")
    print(f"batched ({args.concurrency} at a time) : {batched:8.2f} judgements/s  ({wall:.1f} s)")
    print(f"one at a time             : {one_at_a_time:8.2f} judgements/s  ({args.naive_items} judged in "
          f"{naive_wall:.1f} s)")
    print(f"batched / one at a time = {batched / one_at_a_time:.1f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "shape": args.shape, "device": device, "items": args.items,
            "concurrency": args.concurrency, "new_tokens": args.new_tokens,
            "prompt_tokens": {"min": min(tokens), "max": max(tokens), "mean": sum(tokens) / len(tokens)},
            "answered": answered, "call_errors": len(results.judgements) - answered
            + sum(j.raw_output is None for j in naive_results.judgements),
            "judgements_per_second": {"batched": batched, "one_at_a_time": one_at_a_time},
            "seconds": {"batched": wall, "one_at_a_time": naive_wall}, "ratio": batched / one_at_a_time}, indent=1))


if __name__ == "__main__":
    main()
