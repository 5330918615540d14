"""ActPlan-1K LCS scoring speed: the release's per-cell recursion vs embed-once + iterative DP.

Builds synthetic plan pairs shaped like the benchmark (by default its 1,187 instances, 825 normal
and 362 counterfactual, gold plans of about 24 / 32 steps, model plans with renamed, missing,
swapped and invented steps), scores all of them with ``lmms_egoplan.actplan.lcs.StepMatcher`` and a
few of them with the release's algorithm (``auto_lcs/lcs.py``: both steps encoded, one sentence
at a time, at every cell the memoised recursion visits), checks that the values agree and prints
the per-pair times, their ratio and the projected time for the whole benchmark.

    python speed/bench_lcs.py [--pairs 1187] [--reference-pairs 3] [--threads 2]
    python speed/bench_lcs.py --pairs 20 --reference-pairs 1 --reference-sample shortest   # smoke run
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BENCHMARK_INSTANCES = 1187
NORMAL_SHARE = 825 / 1187


def synthetic_pairs(count: int, seed: int = 0) -> list[tuple[list[str], list[str], bool]]:
    """(model plan, gold plan, counterfactual?) pairs: 100 activities, 53 with a counterfactual variant."""
    from lmms_egoplan.demo.actplan import make_activities, vlm_plan

    rng = random.Random(seed)
    activities = make_activities(100, seed)
    pairs = []
    for index in range(count):
        counterfactual = index >= round(count * NORMAL_SHARE)
        activity = (activities[index % 53] if counterfactual else activities[index % 100]).in_scene(rng)
        gold = activity.gold_plan(1 if counterfactual else 0, rng.randrange(2))
        pairs.append((vlm_plan(gold, rng, rng.choice((0.2, 0.5, 0.8))), gold, counterfactual))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=BENCHMARK_INSTANCES, help="plan pairs scored the fast way")
    parser.add_argument("--reference-pairs", type=int, default=3, help="of those, how many the release's way")
    parser.add_argument("--reference-sample", choices=["spread", "shortest"], default="spread",
                        help="which pairs the release's way: spread over all pairs, or the shortest (a smoke run)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (the target machine has 2 cores)")
    args = parser.parse_args(argv)

    import torch

    from lmms_egoplan.actplan.lcs import StepMatcher
    from lmms_egoplan.demo.actplan import release_lcs

    torch.set_num_threads(args.threads)
    pairs = synthetic_pairs(args.pairs)
    normal = [p for p in pairs if not p[2]]
    counterfactual = [p for p in pairs if p[2]]
    distinct = len({step for prediction, gold, _ in pairs for step in (*prediction, *gold)})
    print(f"{len(pairs)} pairs ({len(normal)} normal, {len(counterfactual)} counterfactual); mean gold length "
          f"{sum(len(g) for _, g, _ in normal) / len(normal):.1f} normal / "
          f"{sum(len(g) for _, g, _ in counterfactual) / max(1, len(counterfactual)):.1f} counterfactual, "
          f"mean model-plan length {sum(len(p) for p, _, _ in pairs) / len(pairs):.1f}; {distinct} distinct steps; "
          f"{args.threads} torch threads, load average {os.getloadavg()[0]:.1f}")

    started = time.perf_counter()
    matcher = StepMatcher()
    matcher.model.encode(["warm up"])
    print(f"model load: {time.perf_counter() - started:.1f} s")

    started, cpu_started = time.perf_counter(), time.process_time()
    matcher.embeddings(step for prediction, gold, _ in pairs for step in (*prediction, *gold))
    embedded = time.perf_counter()
    fast = matcher.lcs_many([(prediction, gold) for prediction, gold, _ in pairs])
    fast_seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"embed once + iterative DP: {fast_seconds:.2f} s for {len(pairs)} pairs "
          f"(embedding {embedded - started:.2f} s, DP {fast_seconds - (embedded - started):.2f} s; "
          f"{cpu_seconds:.1f} s of CPU time), {fast_seconds / len(pairs) * 1000:.1f} ms/pair; "
          f"{matcher.rechecked_pairs} borderline step pairs rechecked the release's way")

    if args.reference_sample == "shortest":
        sample = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) * len(pairs[i][1]))[:args.reference_pairs]
    else:
        sample = [round(i * (len(pairs) - 1) / max(1, args.reference_pairs - 1)) for i in range(args.reference_pairs)]
    encode = lambda step: matcher.model.encode(step, convert_to_tensor=True, show_progress_bar=False)  # noqa: E731
    reference_seconds = 0.0
    for index in sample:
        prediction, gold, _ = pairs[index]
        started = time.perf_counter()
        value = release_lcs(prediction, gold, encode)
        elapsed = time.perf_counter() - started
        reference_seconds += elapsed
        print(f"release recursion, pair {index} ({len(prediction)} x {len(gold)} steps): LCS {value} in {elapsed:.1f} s"
              f" (fast: {fast[index]})")
        if value != fast[index]:
            print(f"MISMATCH on pair {index}: release {value}, fast {fast[index]}", file=sys.stderr)
            return 1
    reference_per_pair = reference_seconds / len(sample)
    fast_per_pair = fast_seconds / len(pairs)
    print(f"per pair: release {reference_per_pair:.2f} s, fast {fast_per_pair * 1000:.1f} ms -> "
          f"speed-up x{reference_per_pair / fast_per_pair:,.0f}")
    if args.pairs < 400 or args.reference_sample == "shortest":
        print("(a smoke run: under 400 pairs the model's batching is not amortised, and the shortest pairs are the "
              "release's fastest; measure with the defaults)")
    print(f"projected for all {BENCHMARK_INSTANCES} instances (after the model is loaded): fast "
          f"{fast_per_pair * BENCHMARK_INSTANCES:.1f} s, release "
          f"{reference_per_pair * BENCHMARK_INSTANCES / 3600:.1f} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
