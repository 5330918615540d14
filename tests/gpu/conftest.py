"""The checks that need a GPU: skipped without CUDA; ``python speed/gpu_check.py run`` selects them (this folder) on
a GPU machine and prints what they record as one table (docs/development.md, "On a GPU").

Each check measures through the ``gpu_check`` fixture: its device (``LMMS_EGOPLAN_GPU_DEVICE``, default ``cuda``;
``cpu`` runs them anywhere, as the fast tier does at the smallest setting), its setting
(``LMMS_EGOPLAN_GPU_SETTING``: ``full``, the default, or ``smallest``) and ``record(check, case, **figures)``, which
appends a row to the results file (``LMMS_EGOPLAN_GPU_RESULTS``, JSON lines; unset: nothing is kept) before the
check asserts anything, so a failed check still shows its figures. The results file also gets the run's
environment, each test's outcome and seconds, and the distributions the checks imported, their speed scripts'
included (what must travel as wheels).

A new check is a module here that measures and records through ``gpu_check``: the command selects it with the others
and the table shows its rows, with nothing else to edit (it names its check in ``speed/gpu_check.py``'s ``--skip``
by a word of its test names).
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SMALLEST = os.environ.get("LMMS_EGOPLAN_GPU_SETTING", "full") == "smallest"
CHECKOUT = Path(__file__).resolve().parents[2]
SPEED = CHECKOUT / "speed"
# Runs a speed script as ``python SCRIPT ARGS`` does, and adds the top-level modules it imported to the file named by
# LMMS_EGOPLAN_GPU_IMPORTS (a JSON list per line): what the checks import in their subprocesses too.
SCRIPT_RUNNER = (
    "import atexit, json, os, runpy, sys\n"
    "atexit.register(lambda: open(os.environ['LMMS_EGOPLAN_GPU_IMPORTS'], 'a').write(\n"
    "    json.dumps(sorted({name.split('.')[0] for name in list(sys.modules)})) + '\\n'))\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@dataclass
class GpuCheck:
    device: str
    smallest: bool
    results: Path | None
    cache: Path
    imports: Path  # the top-level modules the speed scripts imported (SCRIPT_RUNNER)

    def pick(self, *, full, smallest):
        """The value of this setting."""
        return smallest if self.smallest else full

    def record(self, check: str, case: str, **figures) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        _append(self.results, {"check": check, "case": case, "test": test, "device": self.device, "figures": figures})

    def speed_script(self, script: str, arguments: list[str], folder: Path) -> dict:
        """Runs ``speed/<script>`` with ``arguments`` and ``--json``; its output goes to this test's output (the
        command's log); returns the figures it wrote. A failed run fails the check with the end of its output."""
        figures = folder / f"{Path(script).stem}.json"
        run = subprocess.run([sys.executable, "-c", SCRIPT_RUNNER, str(SPEED / script), *arguments, "--cache",
                              str(self.cache), "--json", str(figures)], capture_output=True, text=True, cwd=folder,
                             env={**os.environ, "LMMS_EGOPLAN_GPU_IMPORTS": str(self.imports)})
        print(run.stdout, run.stderr[-4000:], sep="\n")
        assert run.returncode == 0, f"speed/{script} {' '.join(arguments)} exited {run.returncode}:\n" \
                                    f"{(run.stdout + run.stderr)[-3000:]}"
        return json.loads(figures.read_text())


def _append(results: Path | None, row: dict) -> None:
    if results is not None:
        with results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


def _results() -> Path | None:
    named = os.environ.get("LMMS_EGOPLAN_GPU_RESULTS")
    return Path(named) if named else None


@pytest.fixture(scope="session")
def gpu_check(tmp_path_factory) -> GpuCheck:
    device = os.environ.get("LMMS_EGOPLAN_GPU_DEVICE", "cuda")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("a GPU check: no CUDA device here (speed/gpu_check.py runs it on a GPU machine)")
    setting = os.environ.get("LMMS_EGOPLAN_GPU_SETTING", "full")
    if setting not in ("full", "smallest"):
        raise ValueError(f"LMMS_EGOPLAN_GPU_SETTING={setting!r}: expected full or smallest")
    cache = os.environ.get("LMMS_EGOPLAN_GPU_CACHE")
    check = GpuCheck(device, setting == "smallest", _results(),
                     Path(cache) if cache else tmp_path_factory.mktemp("gpu-check-checkpoints"),
                     tmp_path_factory.mktemp("gpu-check-imports") / "modules.jsonl")
    _append(check.results, {"environment": environment(device, setting)})
    yield check
    modules = {name.split(".")[0] for name in list(sys.modules)}
    if check.imports.is_file():
        modules.update(*(json.loads(line) for line in check.imports.read_text().splitlines()))
    _append(check.results, {"imported": distributions_of(modules)})


def environment(device: str, setting: str) -> dict:
    """What the figures were measured on."""
    import torch

    gpu = torch.cuda.is_available() and device.startswith("cuda")
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip() if gpu else ""
    return {"device": torch.cuda.get_device_name(device) if gpu else f"CPU ({os.cpu_count()} cores)",
            "memory_gib": round(torch.cuda.get_device_properties(device).total_memory / 2 ** 30, 1) if gpu else None,
            "driver": driver, "cuda": torch.version.cuda if gpu else None, "python": platform.python_version(),
            **{name: _version(name) for name in ("torch", "transformers", "lmms-eval", "tokenizers", "av")},
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": os.environ.get("LMMS_EGOPLAN_GPU_COMMIT", ""), "setting": setting}


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def distributions_of(modules: set[str]) -> dict[str, str]:
    """The distributions these top-level modules came from, with their versions."""
    from importlib.metadata import packages_distributions, version

    return dict(sorted({name: version(name) for top, names in packages_distributions().items() if top in modules
                        for name in names}.items()))


def pytest_runtest_logreport(report):
    """Each GPU check's outcome and seconds (its set-up's too: a failed set-up is the check's failure)."""
    if report.when == "call" or report.outcome != "passed":
        _append(_results(), {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
                             "seconds": round(report.duration, 2),
                             "message": str(report.longrepr)[-1500:] if report.failed else ""})


def load_speed_module(name: str):
    """A speed script imported as a module (its helpers: EgoPlan questions as egoplan_val sends them)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SPEED / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
