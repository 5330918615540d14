"""Measures the suite on a GPU machine in one call, and writes what it measured into the docs.

Here, where the project is checked out (reaches the package index):

    python speed/gpu_check.py wheels               # the wheels the GPU machine lacks -> .gpu-wheels/ (git ignores it)

There, on the GPU machine (no network; its python3 holds torch), with .gpu-wheels carried along:

    python3 speed/gpu_check.py run --out "$OUT"    # installs them beside its torch, runs tests/gpu/, prints the table,
                                                   # writes gpu_check.json, gpu_check.log, gpu_check_rows.jsonl there

Here again, with the results file it wrote:

    python speed/gpu_check.py write-docs gpu_check.json   # fills "Measured on a GPU" (docs/development.md, README)

Also: ``list`` (offline: what would travel, its size, and what in the lock no longer fits), ``lock`` (after a
dependency change: resolve the wheels again from a run's imports; reaches the package index), ``table FILE``
(a results file's table). Each check stops at its own budget (``gpu_budget`` in tests/gpu/), the whole run at
``--budget``. ``run --quick`` runs correctness on every architecture (bfloat16, the GPU defaults) and the GPU
defaults' selection in 7 minutes; ``--skip WORD`` leaves out the checks with WORD in their
test's name (likelihoods, prefix_sharing, visual_decoding, judge, defaults, or an added check's); ``--device cpu
--setting smallest`` runs them here.
docs/development.md, "On a GPU", says which checks there are and how to add one.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import gpu_wheels

CHECKOUT = Path(__file__).resolve().parents[1]
DOCS = {CHECKOUT / "docs" / "development.md": "table", CHECKOUT / "README.md": "sentence"}
BEGIN, END = "<!-- gpu-check:begin (speed/gpu_check.py write-docs fills this) -->", "<!-- gpu-check:end -->"


def install(wheels: Path, site: Path) -> None:
    """The carried wheels, installed beside the machine's own packages (--target, put before them on PYTHONPATH)."""
    files = sorted(wheels.glob("*.whl"))
    if not files:
        raise SystemExit(f"no wheels in {wheels}: run `python speed/gpu_check.py wheels` where the project is checked "
                         f"out, and carry {wheels.name} to this machine")
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(wheels),
                          "--no-deps", "--no-compile", "--no-cache-dir", "--target", str(site), *map(str, files)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"installing the wheels of {wheels} failed:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")


def checks_environment(args, rows: Path, imports: Path, site: Path | None) -> dict[str, str]:
    commit = Path(args.wheels) / "COMMIT"
    paths = [str(CHECKOUT), *([str(site)] if site else []), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "PYTHONUNBUFFERED": "1",
            "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "LMMS_EGOPLAN_GPU_RESULTS": str(rows), "LMMS_EGOPLAN_GPU_IMPORTS": str(imports),
            "LMMS_EGOPLAN_GPU_DEVICE": args.device, "LMMS_EGOPLAN_GPU_SETTING": args.setting,
            "LMMS_EGOPLAN_GPU_QUICK": "1" if args.quick else "",
            "LMMS_EGOPLAN_GPU_CHECK_SECONDS": str(args.check_seconds or ""),
            "LMMS_EGOPLAN_GPU_COMMIT": commit.read_text().strip() if commit.is_file() else ""}


def run_checks(args, environment: dict[str, str], log: Path, seconds_left: float) -> tuple[int, bool]:
    """pytest on tests/gpu/ (less the skipped), its output both printed and logged; stopped when the time is up.
    Returns its exit status and whether it was stopped."""
    command = [sys.executable, "-m", "pytest", "tests/gpu", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-s",
               "-rfEs", *(["-k", " and ".join(f"not {word}" for word in args.skip)] if args.skip else [])]
    print("$", " ".join(command), flush=True)
    checks = subprocess.Popen(command, cwd=CHECKOUT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    stopped = threading.Event()

    def stop() -> None:
        if checks.poll() is None:
            stopped.set()
            os.killpg(checks.pid, signal.SIGKILL)  # pytest and the speed scripts it started

    timer = threading.Timer(max(seconds_left, 1), stop)
    timer.start()
    with log.open("w", encoding="utf-8") as logged:
        for line in checks.stdout:
            print(line, end="", flush=True)
            logged.write(line)
    status = checks.wait()
    timer.cancel()
    if stopped.is_set():
        print(f"gpu_check: stopped after the --budget of {budget(args)} s; the table holds what was measured by then")
    return status, stopped.is_set()


def budget(args) -> float:
    """Seconds for the whole run, the install included: --budget, else 570 (420 with --quick: 7 minutes, the GPU
    defaults' selection included)."""
    return args.budget or (420 if args.quick else 570)


def imported_distributions(imports: Path, environment: dict[str, str]) -> dict[str, str]:
    """The distributions (name -> version) whose top-level modules the checks imported (``imports``: JSON lists
    of module names, written by each of their processes as it goes), as the checks' own Python finds them."""
    if not imports.is_file():
        return {}
    modules = sorted(set().union(*(json.loads(line) for line in imports.read_text().splitlines() if line)))
    found = subprocess.run([sys.executable, "-c", DISTRIBUTIONS], input=json.dumps(modules), capture_output=True,
                           text=True, env=environment)
    if found.returncode != 0:  # the results are written all the same, without the versions
        print(f"gpu_check: the imported distributions could not be read:\n{found.stderr[-2000:]}")
        return {}
    return json.loads(found.stdout)


DISTRIBUTIONS = """
import json, sys
from importlib.metadata import packages_distributions, version
modules = set(json.load(sys.stdin))
print(json.dumps(dict(sorted({name: version(name) for top, names in packages_distributions().items()
                              if top in modules for name in names}.items()))))
"""


def run(args) -> int:
    started = time.monotonic()
    out = Path(args.out or os.environ.get("OUT") or "gpu-check-out")
    out.mkdir(parents=True, exist_ok=True)
    rows = out / "gpu_check_rows.jsonl"
    rows.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        site = None if args.no_install else Path(work) / "site"
        if site:
            install(Path(args.wheels), site)
        installed = time.monotonic() - started
        imports = Path(work) / "modules.jsonl"
        environment = checks_environment(args, rows, imports, site)
        status, stopped = run_checks(args, environment, out / "gpu_check.log",
                                     budget(args) - (time.monotonic() - started))
        imported = imported_distributions(imports, environment)  # also when a budget stopped a check
    results = {**results_of(rows), "imported": imported, "install_seconds": round(installed, 1),
               "wall_seconds": round(time.monotonic() - started, 1), "pytest_status": status, "stopped": stopped,
               "skipped_checks": args.skip, "quick": args.quick}
    (out / "gpu_check.json").write_text(json.dumps(results, indent=1) + "\n")
    print(text_table(results))
    return 124 if stopped or results["stopped_checks"] else status


def results_of(rows: Path) -> dict:
    """The rows file of a run (JSON lines, tests/gpu/conftest.py) as one results object."""
    found = {"environment": {}, "rows": [], "tests": {}, "stopped_checks": {}}
    for line in rows.read_text().splitlines() if rows.is_file() else []:
        record = json.loads(line)
        if "environment" in record:
            found.update(record)
        elif "stopped" in record:  # a check stopped at its own budget
            found["stopped_checks"][record["stopped"]] = record["budget"]
        elif "check" in record:
            found["rows"].append(record)
        elif record["outcome"] != "passed" or record["test"] not in found["tests"]:
            found["tests"][record["test"]] = record  # a failed set-up or teardown is the test's outcome
    recorded = {row["test"] for row in found["rows"]}
    for test, outcome in found["tests"].items():  # a check that failed before recording anything still shows
        if test not in recorded:
            found["rows"].append({"check": test.split("::")[0].removeprefix("tests/gpu/"), "test": test,
                                  "case": test.split("::")[-1], "figures": {
                                      "result": (outcome["message"].strip().splitlines() or [""])[-1][:200]}})
    return found


def suite_checks(quick: bool) -> dict[str, str]:
    """The checks of tests/gpu/ (test function -> its module), those with a quick budget for --quick: read from
    the source, as the results of a stopped run cannot name the checks it never reached."""
    found = {}
    for module in sorted((CHECKOUT / "tests" / "gpu").glob("test_*.py")):
        for function in ast.parse(module.read_text(encoding="utf-8")).body:
            if not isinstance(function, ast.FunctionDef) or not function.name.startswith("test_"):
                continue
            budgets = [{k.arg: ast.literal_eval(k.value) for k in d.keywords} for d in function.decorator_list
                       if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "gpu_budget"]
            if not quick or any(b.get("quick") for b in budgets):
                found[function.name] = module.name
    return found


def unfinished(results: dict) -> list[tuple[str, str, str]]:
    """(module, check, why) of each check of the run that has no outcome."""
    reached = {test.split("::")[-1].split("[")[0] for test in results["tests"]}
    why = "the run was stopped at its --budget" if results["stopped"] else "not run"
    return [(module, check, why) for check, module in suite_checks(results.get("quick", False)).items()
            if check not in reached and not any(word in check for word in results["skipped_checks"])]


def table_rows(results: dict) -> list[tuple[str, str, str, str, str]]:
    """(check, case, result, outcome, seconds) per row."""
    tests = results["tests"]
    return [(row["check"], row["case"], row["figures"].get("result", ""),
             tests.get(row["test"], {}).get("outcome", "not finished"),
             f"{tests[row['test']]['seconds']:.0f}" if row["test"] in tests else "")
            for row in results["rows"]] + [(module, check, why, "not finished", "")
                                           for module, check, why in unfinished(results)]


def measured_on(results: dict) -> str:
    env = results["environment"]
    if not env:
        return "no check started"
    counts = {}
    for test in results["tests"].values():
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    device = env["device"] + (f" ({env['memory_gib']} GiB, driver {env['driver']}, CUDA {env['cuda']})"
                              if env.get("cuda") else "")
    stopped = " (stopped at the budget)" if results["stopped"] else ""
    stopped += "".join(f"; {check} stopped at its budget of {seconds:.0f} s"
                       for check, seconds in results.get("stopped_checks", {}).items())
    return (f"{device}; Python {env['python']}, torch {env['torch']}, transformers {env['transformers']}, "
            f"lmms-eval {env['lmms-eval']}; {env['date']}, commit {env['commit'] or 'unknown'}; setting "
            f"{env['setting']}{' (--quick)' if results.get('quick') else ''}; {outcomes or 'no check finished'}"
            f"{stopped}, {results['wall_seconds']:.0f} s in all")


def text_table(results: dict) -> str:
    rows = [("check", "case", "result", "outcome", "s"), *table_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in (0, 1, 3, 4)]
    lines = [f"GPU check: {measured_on(results)}"]
    lines += [f"{check:{widths[0]}}  {case:{widths[1]}}  {outcome:{widths[2]}}  {seconds:>{widths[3]}}  {result}"
              for check, case, result, outcome, seconds in rows]
    return "\n".join(lines)


def markdown(results: dict, kind: str, note: str = "") -> str:
    """The docs' section: the README's sentence or development.md's table, each with what did not finish and
    ``note`` (why, where the results cannot say)."""
    missing = "".join(f" Not finished there: `{check}` ({why})." for _, check, why in unfinished(results))
    note = f" {note}" if note else ""
    if kind == "sentence":
        return (f"Measured on a GPU ({results['environment']['device']}, {results['environment']['date'][:10]}): "
                f"[the figures](docs/development.md#measured-on-a-gpu); every other figure on this page is from CPUs."
                f"{missing}{note}")
    cell = lambda text: text.replace("|", "\\|")  # noqa: E731
    lines = [f"Measured on {cell(measured_on(results))} (`python3 speed/gpu_check.py run`).{missing}{note}", "",
             "| check | case | result | outcome | seconds |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {' | '.join(cell(value) for value in row[:3])} | {row[3]} | {row[4]} |"
              for row in table_rows(results)]
    return "\n".join(lines)


def write_docs(results: dict, allow_cpu: bool, docs: dict[Path, str], note: str = "") -> None:
    env = results["environment"]
    if not env or (env["device"].startswith("CPU") or env["setting"] != "full" or results.get("quick")) \
            and not allow_cpu:
        raise SystemExit(f"these results are not of a full run on a GPU ({env.get('device')}, setting "
                         f"{env.get('setting')}{', --quick' if results.get('quick') else ''}): nothing written")
    for path, kind in docs.items():
        text = path.read_text(encoding="utf-8")
        if text.count(BEGIN) != 1 or text.count(END) != 1:
            raise SystemExit(f"{path}: expected one {BEGIN} ... {END} section to fill")
        before, rest = text.split(BEGIN)
        filled = f"{before}{BEGIN}\n{markdown(results, kind, note)}\n{END}{rest.split(END, 1)[1]}"
        path.write_text(filled, encoding="utf-8")
        print(f"filled {path}")
    if not env["device"].startswith("CPU"):
        changed = gpu_wheels.take_machine_versions(results)
        print(f"{gpu_wheels.MACHINE.name}: the run's versions; changed: {', '.join(changed) or 'none'}")


def read_results(path: str) -> dict:
    """A run's gpu_check.json, or its rows file (gpu_check_rows.jsonl) when the run was stopped before writing it."""
    if path.endswith(".jsonl"):
        return {**results_of(Path(path)), "imported": {}, "wall_seconds": 0, "stopped": True, "skipped_checks": []}
    return {"stopped_checks": {}, **json.loads(Path(path).read_text())}  # older runs' files lack stopped_checks


def wheels_command(args) -> int:
    locked = gpu_wheels.read_lock()
    if args.command == "lock":
        locked = gpu_wheels.lock(imported_by_the_checks(args.imported))
    unfit = gpu_wheels.problems(locked)
    if args.command == "wheels" and not unfit:
        gpu_wheels.gather(locked)
    text, total = gpu_wheels.listing(locked)
    print(text)
    for problem in unfit:
        print(f"unfit: {problem} (update speed/gpu_machine.txt or run `python speed/gpu_check.py lock`)")
    if total > gpu_wheels.CARRY_LIMIT:
        print(f"over the limit by {(total - gpu_wheels.CARRY_LIMIT) / 2 ** 20:.2f} MiB: what travels to the GPU "
              f"machine in one call is at most {gpu_wheels.CARRY_LIMIT / 2 ** 20:.0f} MiB")
    return 1 if unfit or total > gpu_wheels.CARRY_LIMIT else 0


def imported_by_the_checks(results_files: list[str]) -> dict[str, str]:
    """The distributions the checks import: those of runs' results (each file's ``imported``; the first file's
    version of a distribution that several name), or from running them here at the smallest setting, which covers
    every architecture."""
    if results_files:
        found = {}
        for results_file in reversed(results_files):
            found.update(read_results(results_file)["imported"])
        return found
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([sys.executable, __file__, "run", "--no-install", "--device", "cpu", "--setting", "smallest",
                        "--out", out], check=True)
        return json.loads((Path(out) / "gpu_check.json").read_text())["imported"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    checks = commands.add_parser("run", help="there: install the wheels, run the GPU checks, print the table")
    checks.add_argument("--out", help="where the results go (default: $OUT, else ./gpu-check-out)")
    checks.add_argument("--skip", action="append", default=[], help="leave out the checks with this word in their name")
    checks.add_argument("--device", default="cuda")
    checks.add_argument("--setting", default="full", choices=["full", "smallest"])
    checks.add_argument("--quick", action="store_true", help="correctness on every architecture and the GPU "
                                                             "defaults' selection: 7 minutes, install included")
    checks.add_argument("--budget", type=float, help="seconds for it all, install included (default: 570; 420 with "
                                                     "--quick); each check also stops at its own budget")
    checks.add_argument("--check-seconds", type=float, help="at most this long for each check (its own budget "
                                                            "otherwise; none at the smallest setting)")
    checks.add_argument("--wheels", default=str(gpu_wheels.WHEELS), help="the carried wheels")
    checks.add_argument("--no-install", action="store_true", help="use the packages this Python has")
    for name, what in (("wheels", "here: download the locked wheels, list what travels"),
                       ("list", "offline: list what would travel and check the lock"),
                       ("lock", "here: resolve the wheels again (package index), then list")):
        command = commands.add_parser(name, help=what)
        if name == "lock":
            command.add_argument("--imported", action="append", default=[],
                                 help="a run's results file (or a lock) whose imports to carry, repeated for several "
                                      "(default: run the checks here at the smallest setting)")
    for name in ("table", "write-docs"):
        command = commands.add_parser(name, help=f"{name} from a results file (gpu_check.json or its rows file)")
        command.add_argument("results")
        if name == "write-docs":
            command.add_argument("--allow-cpu", action="store_true", help="write a CPU, smallest or --quick run's "
                                                                          "table too")
            command.add_argument("--note", default="", help="a sentence after the figures: what the results cannot "
                                                            "say (why a check did not finish, say)")
    args = parser.parse_args()
    if args.command == "run":
        return run(args)
    if args.command == "table":
        print(text_table(read_results(args.results)))
        return 0
    if args.command == "write-docs":
        write_docs(read_results(args.results), args.allow_cpu, DOCS, args.note)
        return 0
    return wheels_command(args)


if __name__ == "__main__":
    sys.exit(main())
