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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SMALLEST = os.environ.get("LMMS_EGOPLAN_GPU_SETTING", "full") == "smallest"
QUICK = os.environ.get("LMMS_EGOPLAN_GPU_QUICK") == "1"  # speed/gpu_check.py run --quick
CHECKOUT = Path(__file__).resolve().parents[2]
SPEED = CHECKOUT / "speed"
IMPORTS = os.environ.get("LMMS_EGOPLAN_GPU_IMPORTS")  # where every process of the checks adds its top-level modules
# Runs a speed script as ``python SCRIPT ARGS`` does, and adds the top-level modules it imported to the file named by
# LMMS_EGOPLAN_GPU_IMPORTS (a JSON list per line) when it ends, also when its check's budget stops it (SIGTERM).
SCRIPT_RUNNER = (
    "import atexit, json, os, runpy, signal, sys\n"
    "def imported():\n"
    "    with open(os.environ['LMMS_EGOPLAN_GPU_IMPORTS'], 'a') as out:\n"
    "        out.write(json.dumps(sorted({name.split('.')[0] for name in list(sys.modules)})) + '\\n')\n"
    "atexit.register(imported)\n"
    "signal.signal(signal.SIGTERM, lambda *_: (imported(), os._exit(143)))\n"
    "sys.argv = sys.argv[1:]\n"
    "sys.path.insert(0, os.path.dirname(sys.argv[0]))\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n")
PROGRESS_SECONDS = 30  # a speed script quiet for this long gets a line saying it still runs


def pytest_configure(config):
    if IMPORTS:  # from the start, every 2 s: what was imported is on file when the command's --budget kills us
        threading.Thread(target=_write_imports_now_and_then, args=(Path(IMPORTS),), daemon=True).start()
    config.addinivalue_line("markers", "gpu_budget(full, quick=None): a GPU check's seconds at the full setting and "
                                       "in speed/gpu_check.py run --quick (None: not in --quick)")


def pytest_collection_modifyitems(config, items):
    """Every check (a test of this folder; the hook sees the whole session's) names its budget; --quick keeps
    those with a quick one."""
    checks = [item for item in items if Path(item.path).is_relative_to(Path(__file__).parent)]
    unbudgeted = [item.nodeid for item in checks if item.get_closest_marker("gpu_budget") is None]
    if unbudgeted:
        raise pytest.UsageError(f"GPU checks without @pytest.mark.gpu_budget(full=SECONDS, quick=SECONDS or None): "
                                f"{unbudgeted}")
    if QUICK:
        dropped = [item for item in checks if not item.get_closest_marker("gpu_budget").kwargs.get("quick")]
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


@dataclass
class GpuCheck:
    device: str
    smallest: bool
    quick: bool
    results: Path | None
    cache: Path
    imports: Path  # the top-level modules the checks imported, this process's and their speed scripts'
    check_seconds: float | None  # at most this long for every check (LMMS_EGOPLAN_GPU_CHECK_SECONDS)
    deadlines: dict[str, float] = field(default_factory=dict)  # check (its test function) -> when its budget ends
    check: str = ""  # the check running now, and its budget
    budget: float = 0.0

    def pick(self, *, full, smallest, quick=None):
        """The value of this setting: --quick's where one is given, else the full setting's."""
        return smallest if self.smallest else quick if self.quick and quick is not None else full

    def record(self, check: str, case: str, **figures) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
        _append(self.results, {"check": check, "case": case, "test": test, "device": self.device, "figures": figures})

    def start(self, item) -> None:
        """The budget of ``item``'s check starts with its first test; a test of a check whose budget is spent is
        not run."""
        marker = item.get_closest_marker("gpu_budget").kwargs
        self.check = item.originalname
        own = float("inf") if self.smallest else marker["quick"] if self.quick else marker["full"]  # CPU: unbounded
        self.budget = min(own, self.check_seconds or float("inf"))
        self.deadlines.setdefault(self.check, time.monotonic() + self.budget)
        if self.seconds_left() <= 0:
            self.stop(f"not run: the check's budget of {self.budget:.0f} s was spent")

    def seconds_left(self) -> float:
        return self.deadlines[self.check] - time.monotonic()

    def stop(self, why: str):
        """Skips the test as stopped at its check's budget (speed/gpu_check.py then exits 124)."""
        _append(self.results, {"stopped": self.check, "budget": self.budget, "why": why})
        pytest.skip(f"stopped: {why}")

    def speed_script(self, script: str, arguments: list[str], folder: Path, verdicts: tuple[int, ...] = (0,)) -> dict:
        """Runs ``speed/<script>`` with ``arguments`` and ``--json``, its output printed as it comes (the command's
        log), stopped at the check's budget; returns the figures it wrote. A failed run fails the check with the
        end of its output; ``verdicts``: the exit statuses that are the script's verdict (its figures written), so
        that the check records them before it asserts."""
        figures = folder / f"{Path(script).stem}.json"
        command = [sys.executable, "-c", SCRIPT_RUNNER, str(SPEED / script), *arguments, "--cache", str(self.cache),
                   "--json", str(figures)]
        status, output = _streamed(command, folder, {**os.environ, "LMMS_EGOPLAN_GPU_IMPORTS": str(self.imports)},
                                   self.seconds_left(), f"speed/{script}")
        if status is None:
            self.stop(f"speed/{script} ran past its check's budget of {self.budget:.0f} s")
        assert status in verdicts and figures.is_file(), \
            f"speed/{script} {' '.join(arguments)} exited {status}:\n{output[-3000:]}"
        return json.loads(figures.read_text())


def _streamed(command: list[str], folder: Path, environ: dict, seconds: float, name: str) -> tuple[int | None, str]:
    """Runs ``command``, printing its output as it comes and a line whenever it is quiet for PROGRESS_SECONDS;
    past ``seconds``, SIGTERM (its imports are written), then SIGKILL. Returns its exit status (None: stopped)
    and its output."""
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=folder, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines, heard = [], [started]  # its output, and when it last printed

    def relay() -> None:
        for line in process.stdout:
            lines.append(line)
            heard[0] = time.monotonic()
            print(line, end="", flush=True)

    reader = threading.Thread(target=relay)
    reader.start()
    stopped = False
    while process.poll() is None and not stopped:
        time.sleep(0.5)
        now = time.monotonic()
        if now - started > seconds:
            stopped = True
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        elif now - heard[0] >= PROGRESS_SECONDS:
            heard[0] = now
            budget = f" of its check's {seconds:.0f} s left" if seconds < float("inf") else ""
            print(f"{name}: still running, {now - started:.0f} s{budget}", flush=True)
    reader.join()
    return (None if stopped else process.wait()), "".join(lines)


def _append(results: Path | None, row: dict) -> None:
    if results is not None:
        with results.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


def _results() -> Path | None:
    named = os.environ.get("LMMS_EGOPLAN_GPU_RESULTS")
    return Path(named) if named else None


_WRITTEN: set[str] = set()  # the modules of this process already on file


def _write_imports(imports: Path) -> None:
    """Adds this process's top-level modules to ``imports`` when there are new ones."""
    modules = {name.split(".")[0] for name in list(sys.modules)}
    if not modules <= _WRITTEN:
        _WRITTEN.update(modules)
        with imports.open("a", encoding="utf-8") as out:
            out.write(json.dumps(sorted(modules)) + "\n")


def _write_imports_now_and_then(imports: Path) -> None:
    while True:
        _write_imports(imports)
        time.sleep(2)


@pytest.fixture(scope="session")
def gpu_check(tmp_path_factory) -> GpuCheck:
    device = os.environ.get("LMMS_EGOPLAN_GPU_DEVICE", "cuda")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("a GPU check: no CUDA device here (speed/gpu_check.py runs it on a GPU machine)")
    setting = os.environ.get("LMMS_EGOPLAN_GPU_SETTING", "full")
    if setting not in ("full", "smallest"):
        raise ValueError(f"LMMS_EGOPLAN_GPU_SETTING={setting!r}: expected full or smallest")
    cache, seconds = os.environ.get("LMMS_EGOPLAN_GPU_CACHE"), os.environ.get("LMMS_EGOPLAN_GPU_CHECK_SECONDS")
    imports = Path(IMPORTS) if IMPORTS else tmp_path_factory.mktemp("gpu-check-imports") / "modules.jsonl"
    check = GpuCheck(device, setting == "smallest", QUICK, _results(),
                     Path(cache) if cache else tmp_path_factory.mktemp("gpu-check-checkpoints"), imports,
                     float(seconds) if seconds else None)
    _append(check.results, {"environment": environment(device, setting, QUICK)})
    yield check
    _write_imports(imports)


@pytest.fixture(autouse=True)
def check_budget(request):
    """Each check's budget (its test function's gpu_budget marker) runs from its first test on."""
    if "gpu_check" in request.fixturenames:
        request.getfixturevalue("gpu_check").start(request.node)


def environment(device: str, setting: str, quick: bool) -> dict:
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
            "commit": os.environ.get("LMMS_EGOPLAN_GPU_COMMIT", ""), "setting": setting, "quick": quick}


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def pytest_runtest_logreport(report):
    """Each GPU check's outcome and seconds (its set-up's too: a failed set-up is the check's failure)."""
    if report.when == "call" or report.outcome != "passed":
        skipped = report.skipped and isinstance(report.longrepr, tuple)  # (file, line, "Skipped: why")
        message = report.longrepr[2].removeprefix("Skipped: ") if skipped else \
            str(report.longrepr)[-1500:] if report.failed else ""
        _append(_results(), {"test": report.nodeid, "when": report.when, "outcome": report.outcome,
                             "seconds": round(report.duration, 2), "message": message})


def load_speed_module(name: str):
    """A speed script imported as a module (its helpers: EgoPlan questions as egoplan_val sends them)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SPEED / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]
