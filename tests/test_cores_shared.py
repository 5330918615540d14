"""Under xdist each test worker, and every run it starts, computes on its share of the cores (``share_the_cores`` of
tests/conftest.py, called when a worker configures): ``OMP_NUM_THREADS`` for the processes it starts and torch's thread
pool in the worker, whether torch loads after it or loaded before; a value the user set is kept; without xdist nothing
changes."""

import json
import os
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
INHERITED = {key: value for key, value in os.environ.items()
             if key not in ("OMP_NUM_THREADS", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_WORKER")}
# A test of its own run: what its worker and a process the worker starts see.
PROBE_TEST = '''
import json, os, subprocess, sys, torch

def test_probe():
    started = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump([os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), started], out)
'''


def test_under_xdist_a_worker_and_the_process_it_starts_take_the_workers_share(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE_TEST)
    completed = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
                                "--rootdir", str(tmp_path), "-p", "tests.conftest", "-n", "2", "test_probe.py"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=300,
                               env={**INHERITED, "PYTHONPATH": str(CHECKOUT), "PROBE_OUT": str(tmp_path / "seen")})
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    share = max(1, CORES // 2)
    assert json.loads((tmp_path / "seen").read_text()) == [str(share), share, str(share)]


def threads_after_share(environment: dict[str, str], torch_first: bool) -> tuple[str, int]:
    """(``OMP_NUM_THREADS``, torch's threads) in a fresh interpreter after ``share_the_cores``."""
    probe = (f"import os, sys; sys.path.insert(0, {str(CHECKOUT)!r}); {'import torch; ' if torch_first else ''}"
             "from tests.conftest import share_the_cores; share_the_cores(); import torch; "
             "print(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())")
    completed = subprocess.run([sys.executable, "-c", probe], env={**INHERITED, **environment}, capture_output=True,
                               text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    variable, threads = completed.stdout.split()
    return variable, int(threads)


def test_torch_loaded_before_gets_the_share_and_a_value_the_user_set_is_kept():
    share = max(1, CORES // 2)
    assert threads_after_share({"PYTEST_XDIST_WORKER_COUNT": "2"}, torch_first=True) == (str(share), share)
    variable, _ = threads_after_share({"PYTEST_XDIST_WORKER_COUNT": "2", "OMP_NUM_THREADS": "3"}, torch_first=False)
    assert variable == "3"  # torch caps its threads at the cores
    variable, _ = threads_after_share({}, torch_first=False)  # no workers
    assert variable == "None"
