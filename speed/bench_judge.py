"""Judge throughput: 700 judgements against a loopback server that answers after 200 ms.

The engine keeps ``--concurrency`` calls in flight, so the ideal wall time is
items x latency / concurrency (4.4 s for the defaults) against items x latency (140 s) for
one blocking call per sample, which is what lmms-eval's built-in EgoThink does. The script
prints both ratios and exits non-zero when the run is slower than 1.3x the ideal.

    python speed/bench_judge.py [--items 700] [--latency 0.2] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import sys
import time

from lmms_egoplan.demo.kit.judge_server import ChatServer, hash_rating, rating_responder
from lmms_egoplan.judge.engine import Judge
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.rubrics import bracket_rating

ALLOWED_OVERHEAD = 1.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=700)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()

    requests = [JudgeRequest.from_prompt(f"item-{i}", f"Question {i}? Reference {i}. Answer {i}.")
                for i in range(args.items)]
    parse = bracket_rating((0, 0.5, 1))
    with ChatServer(rating_responder(hash_rating, delay=args.latency)) as server:
        judge = Judge(OpenAIChatBackend("bench-judge", base_url=server.base_url, api_key_env=""),
                      cache=None, concurrency=args.concurrency)
        judge.run(requests[:1], parse, progress=False)  # client and import warm-up, not timed
        server.reset()
        started = time.perf_counter()
        results = judge.run(requests, parse, progress=False)
        wall = time.perf_counter() - started

    ideal = args.items * args.latency / args.concurrency
    serial = args.items * args.latency
    print(f"{args.items} judgements, {args.latency * 1000:.0f} ms per call, concurrency {args.concurrency}")
    print(f"judged {results.judged}, failed {results.failed}, calls seen by the server {len(server.calls)}, "
          f"peak in flight {server.max_in_flight}")
    print(f"wall time        {wall:8.2f} s")
    print(f"ideal            {ideal:8.2f} s  (items x latency / concurrency); wall / ideal = {wall / ideal:.3f} "
          f"(limit {ALLOWED_OVERHEAD})")
    print(f"serial (naive)   {serial:8.2f} s  (one blocking call per item); serial / wall = "
          f"{serial / wall:.1f}x faster")
    ok = wall <= ALLOWED_OVERHEAD * ideal and results.judged == args.items
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
