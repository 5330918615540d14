"""speed/gpu_check.py, the command that measures the suite on a GPU machine in one call, cannot rot on CPUs: its
wheel listing works offline from the lock (what would travel, its size, within the carry limit), the lock fits the
GPU machine and this checkout's pins (a transformers floor above the machine's is carried), and the command itself
runs here on the CPU at the smallest setting: it prints its table, writes its results, fills the docs' table from
them, and every distribution its checks imported is on the GPU machine or in the lock."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .test_speed_scripts import SMOKE_RUNS

SPEED = Path(__file__).resolve().parents[1] / "speed"
CHECKS = ("likelihood, GPU vs CPU", "prefix sharing (bench_loglikelihood.py)",
          "visual decoding (bench_egoplan_visuals.py)", "transformers judge (bench_judge_hf.py)",
          "patched lmms-eval Qwen likelihood (bench_qwen_loglikelihood.py)")


@pytest.fixture(scope="module")
def speed_modules():
    """speed/gpu_check.py and speed/gpu_wheels.py as modules (the command imports its neighbour as a script does)."""
    sys.path.insert(0, str(SPEED))
    try:
        import gpu_check
        import gpu_wheels

        yield gpu_check, gpu_wheels
    finally:
        sys.path.remove(str(SPEED))


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, checkpoint_cache):
    """The command run here: the GPU checks on the CPU at the smallest setting, with this environment's packages."""
    out = tmp_path_factory.mktemp("gpu-check-out")
    run = subprocess.run([sys.executable, str(SPEED / "gpu_check.py"), "run", "--no-install", "--device", "cpu",
                          "--setting", "smallest", "--out", str(out)], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "LMMS_EGOPLAN_TEST_CACHE": str(checkpoint_cache)})
    return run, out


def test_the_listing_says_what_would_travel_offline_and_fits_the_carry_limit(speed_modules):
    _, gpu_wheels = speed_modules
    run = subprocess.run([sys.executable, str(SPEED / "gpu_check.py"), "list"], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "PIP_NO_INDEX": "1", "HOME": "/nonexistent"})
    assert run.returncode == 0, run.stdout + run.stderr
    locked = gpu_wheels.read_lock()
    for entry in locked["wheels"]:
        assert re.search(rf"^{re.escape(entry['file'])}\s+[\d.]+ MiB$", run.stdout, re.MULTILINE), run.stdout
    total = re.search(r"^what travels, of at most 64 MiB\s+([\d.]+) MiB$", run.stdout, re.MULTILINE)
    assert total and float(total.group(1)) <= 64, run.stdout
    assert "unfit" not in run.stdout


def test_the_lock_fits_the_gpu_machine_and_the_pins(speed_modules):
    _, gpu_wheels = speed_modules
    locked = gpu_wheels.read_lock()
    assert gpu_wheels.problems(locked) == []
    carried = {entry["name"] for entry in locked["wheels"]}
    assert {"lmms-eval", "av", "filelock"} <= carried  # absent there; filelock's version there unknown under "<4.3"
    machine, pins = gpu_wheels.machine_packages(), gpu_wheels.suite_pins()
    for name in ("torch", "transformers", "numpy"):  # the machine's own, unless the pins exclude them
        assert (name in carried) == gpu_wheels.outside(machine[name], pins[name]), name


def test_a_transformers_floor_above_the_machines_carries_transformers(speed_modules):
    """setup.cfg's floor, 5.20 (what vLLM 0.33.0 installs, issue 65), is above the machine's 5.17: the lock
    carries a transformers the pins admit, and a lock without it is reported."""
    _, gpu_wheels = speed_modules
    pins = gpu_wheels.suite_pins()
    assert gpu_wheels.outside(gpu_wheels.machine_packages()["transformers"], pins["transformers"])
    locked = gpu_wheels.read_lock()
    assert {entry["name"]: entry["version"] for entry in locked["wheels"]}["transformers"] in pins["transformers"]
    without = {**locked, "wheels": [entry for entry in locked["wheels"] if entry["name"] != "transformers"]}
    assert f"the GPU machine's transformers 5.17.0 may be outside setup.cfg's transformers{pins['transformers']}" \
        in gpu_wheels.problems(without)
    from importlib.metadata import version

    if version("transformers") in pins["transformers"]:
        assert gpu_wheels.to_carry({"transformers": version("transformers")})["transformers"] == version("transformers")


def test_the_command_runs_on_the_cpu_at_the_smallest_setting_and_prints_one_table(cpu_run):
    run, out = cpu_run
    assert run.returncode == 0, (run.stdout + run.stderr)[-5000:]
    table = run.stdout[run.stdout.rindex("GPU check: CPU"):]
    for check in CHECKS:
        assert re.search(rf"^{re.escape(check)}\s+\S.*\s+passed\s+\d+\s+\S", table, re.MULTILINE), table
    results = json.loads((out / "gpu_check.json").read_text())
    assert results["environment"]["setting"] == "smallest" and results["pytest_status"] == 0
    assert {row["check"] for row in results["rows"]} == set(CHECKS)
    log = (out / "gpu_check.log").read_text()
    for script in ("bench_loglikelihood.py", "bench_egoplan_visuals.py", "bench_judge_hf.py",
                   "bench_qwen_loglikelihood.py"):
        assert re.search(SMOKE_RUNS[script][1], log), f"{script}'s ratio line is not in the log"


def test_every_distribution_the_checks_import_is_on_the_gpu_machine_or_in_the_lock(cpu_run, speed_modules):
    _, gpu_wheels = speed_modules
    results = json.loads((cpu_run[1] / "gpu_check.json").read_text())
    there = set(gpu_wheels.machine_packages()) | {e["name"] for e in gpu_wheels.read_lock()["wheels"]} \
        | set(gpu_wheels.NOT_CARRIED)
    missing = sorted(set(map(gpu_wheels.normalized, results["imported"])) - there)
    assert not missing, f"the GPU checks import {missing}, which would not be on the GPU machine: run " \
                        f"`python speed/gpu_check.py lock`, then `wheels` (docs/development.md, On a GPU)"


def test_write_docs_fills_the_measured_table_from_the_results_and_refuses_a_cpu_run(cpu_run, speed_modules,
                                                                                     tmp_path):
    gpu_check, _ = speed_modules
    results = gpu_check.read_results(str(cpu_run[1] / "gpu_check.json"))
    docs = {}
    for path, kind in gpu_check.DOCS.items():
        docs[tmp_path / path.name] = kind
        (tmp_path / path.name).write_text(path.read_text())
    with pytest.raises(SystemExit, match="not of a full run on a GPU"):
        gpu_check.write_docs(results, False, docs)
    assert "Not yet measured" in (tmp_path / "development.md").read_text()
    gpu_check.write_docs(results, True, docs)
    development = (tmp_path / "development.md").read_text()
    assert "Not yet measured" not in development and "Measured on CPU" in development
    for check in CHECKS:
        assert f"| {check} |" in development
    assert "[the figures](docs/development.md#measured-on-a-gpu)" in (tmp_path / "README.md").read_text()


def test_a_run_past_its_budget_is_stopped_and_still_writes_its_results(tmp_path):
    run = subprocess.run([sys.executable, str(SPEED / "gpu_check.py"), "run", "--no-install", "--device", "cpu",
                          "--setting", "smallest", "--out", str(tmp_path), "--budget", "10", "--skip", "likelihoods",
                          "--skip", "visual_decoding", "--skip", "judge"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 124, (run.stdout + run.stderr)[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert results["stopped"] and results["skipped_checks"] == ["likelihoods", "visual_decoding", "judge"]
    assert "stopped after the --budget of 10.0 s" in run.stdout
