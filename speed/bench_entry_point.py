"""What the installed suite costs a run of lmms-eval that does not name it.

lmms-eval loads every ``lmms_eval.models`` entry point when its model registry is imported, in every run:
``import lmms_eval.models``, ``lmms-eval models``, the start of ``lmms-eval --model ... --tasks ...``. The
suite's entry point registers its two backends and, in a run that does not name the suite (no
``LMMS_EVAL_PLUGINS=lmms_egoplan``, no suite backend or task on the command line), imports nothing more.
This script times ``python -c "import lmms_eval.models"`` as a fresh process, with the command line of a run
that names only lmms-eval's own model and task, in turn with the suite's entry point (installed) and with it
hidden from lmms-eval (as if the suite were not installed), and prints each one's median and their ratio.
The target is a ratio near 1 (before issue 42: 7-9 s against 0.1-0.3 s, the entry point importing
lmms-eval's task machinery, torch and transformers).

    python speed/bench_entry_point.py [--runs 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

# The same child both ways; "alone" hides the suite's entry point from lmms-eval's registry.
CHILD = """
import importlib.metadata as metadata, sys
mode = sys.argv[1]
if mode == "alone":
    every = metadata.entry_points
    def entry_points(**params):
        found = every(**params) if params else every()
        if params:
            return metadata.EntryPoints(ep for ep in found if not ep.value.startswith("lmms_egoplan"))
        return metadata.SelectableGroups.load(ep for group in found.values() for ep in group
                                              if not ep.value.startswith("lmms_egoplan"))
    metadata.entry_points = entry_points
sys.argv = ["/venv/bin/lmms-eval", "--model", "dummy", "--tasks", "mme"]
import lmms_eval.models
assert ("lmms_egoplan.models" in sys.modules) == (mode == "installed"), "the suite's entry point: " + mode
"""


ENV = {name: value for name, value in os.environ.items() if name != "LMMS_EVAL_PLUGINS"}  # a run not naming the suite


def time_once(mode: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, mode], check=True, capture_output=True, env=ENV)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="runs of each, alternating (one warm-up each first)")
    runs = parser.parse_args().runs
    time_once("installed"), time_once("alone")  # warm the file cache
    installed, alone = [], []
    for _ in range(runs):  # in turn, so that a drift of the machine's speed reaches both alike
        installed.append(time_once("installed"))
        alone.append(time_once("alone"))
    with_suite, without = statistics.median(installed), statistics.median(alone)
    print(f"import lmms_eval.models, suite installed and not named : median {with_suite:.3f} s "
          f"(min {min(installed):.3f}, max {max(installed):.3f}, {runs} runs)")
    print(f"import lmms_eval.models, suite not installed           : median {without:.3f} s "
          f"(min {min(alone):.3f}, max {max(alone):.3f}, {runs} runs)")
    print(f"installed / not installed = {with_suite / without:.2f}x")


if __name__ == "__main__":
    main()
