"""The wheels the GPU machine lacks, for ``speed/gpu_check.py``: their lock, the listing of what would travel, and
their download into ``.gpu-wheels/`` (git ignores it).

What travels is every distribution the GPU checks import (a run of them records it: ``imported`` in its results)
that the GPU machine (``speed/gpu_machine.txt``) lacks, or holds at a version outside the suite's pins or outside
what a carried wheel requires, less those ``NOT_CARRIED`` names with the reason: each at the version installed where
the lock was made, as its wheel for CPython 3.12 on manylinux x86-64. ``speed/gpu_wheels.lock.json`` records them
(file, size, SHA-256, requirements), so the listing and its checks work offline (the fast tier runs them); only
``lock`` and ``wheels`` reach the package index.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import textwrap
from importlib.metadata import requires, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

CHECKOUT = Path(__file__).resolve().parents[1]
LOCK = CHECKOUT / "speed" / "gpu_wheels.lock.json"
MACHINE = CHECKOUT / "speed" / "gpu_machine.txt"
RUN_READ = "# run: "  # gpu_machine.txt's lines naming the GPU run whose versions it holds (take_machine_versions)
WHEELS = CHECKOUT / ".gpu-wheels"
CARRY_LIMIT = 64 * 2 ** 20  # what travels to the GPU machine in one call: the working tree and the carried folders
PYTHON = "3.12"
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(17, 40)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
# Where requirement markers are evaluated: the GPU machine's Python.
MARKERS = {"python_version": PYTHON, "python_full_version": "3.12.3", "sys_platform": "linux", "os_name": "posix",
           "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
# Imported where the lock is made, yet not carried.
NOT_CARRIED = {
    "lmms-egoplan": "the checkout itself, on PYTHONPATH",
    "more-itertools": "setuptools' vendored copy (setuptools/_vendor joins sys.path when torch.compile's tooling "
                      "imports setuptools; the machine's setuptools 81.0.0 vendors it)",
    "wandb": "lmms_eval.logging_utils and accelerate import it only if present (W&B logging)",
    "chardet": "requests' optional detector (the machine has charset-normalizer)",
    "numexpr": "an optional accelerator of pandas",
    "zstandard": "an optional codec of fsspec",
    "wcwidth": "an optional width table of tabulate",
    "defusedxml": "torchvision imports it only if present (its VOC data set)",
    "httpx2": "huggingface_hub 2.x's HTTP client here; the machine's huggingface_hub 1.33.0 has its own",
    "httpcore2": "httpx2's (above)",
    "truststore": "httpx2's (above)",
    # The machine's huggingface_hub imports its own; the suite's pin (httpx<1) is egoplan_server's, which no check runs.
    "httpx": "the machine's own, which its huggingface_hub imports (no check sends an HTTP request)",
    "httpcore": "httpx's (above)",
    "sniffio": "httpcore's and httpx2's (above)",
}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages() -> dict[str, str | None]:
    """The GPU machine's distributions: name -> version, or None where only its presence is known."""
    found = {}
    for line in MACHINE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, known = line.strip().partition("==")
            found[normalized(name)] = known or None
    return found


def suite_pins() -> dict[str, SpecifierSet]:
    """setup.cfg's install_requires: name -> its version specifier."""
    config = configparser.ConfigParser()
    config.read(CHECKOUT / "setup.cfg")
    lines = [line.strip() for line in config["options"]["install_requires"].splitlines()]
    return {normalized(r.name): r.specifier for r in (Requirement(line) for line in lines
                                                      if line and not line.startswith("#"))}


def outside(installed: str | None, specifier: SpecifierSet | None) -> bool:
    """Whether a version may not meet ``specifier``: a known one outside it, or an unknown one under an upper bound."""
    if specifier is None or not str(specifier):
        return False
    if installed is None:
        return any(s.operator in ("<", "<=", "==", "~=", "===") for s in specifier)
    return not specifier.contains(installed, prereleases=True)


def requirements_of(name: str) -> list[str]:
    """``name``'s requirements (installed here) that apply on the GPU machine's Python, extras left out."""
    applying = []
    for line in requires(name) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(MARKERS):
            applying.append(f"{normalized(requirement.name)}{requirement.specifier}")
    return sorted(applying)


def to_carry(imported: dict[str, str]) -> dict[str, str]:
    """name -> version of what must travel, from the checks' imported distributions (name -> version here)."""
    machine, pins = machine_packages(), suite_pins()
    imported = {normalized(name): found for name, found in imported.items()}
    carry = {name: found for name, found in imported.items() if name not in NOT_CARRIED
             and (name not in machine or outside(machine[name], pins.get(name)))}
    for name, found in carry.items():
        if outside(found, pins.get(name)):
            raise SystemExit(f"{name} {found} is installed here, outside setup.cfg's {name}{pins[name]}: install a "
                             f"version it admits, then lock again")
    pending = list(carry)
    while pending:  # what a carried wheel requires, at a version the machine's does not (or may not) meet
        for line in requirements_of(pending.pop()):
            requirement = Requirement(line)
            name = normalized(requirement.name)
            if name in machine and name not in carry and outside(machine[name], requirement.specifier):
                carry[name] = version(name)
                pending.append(name)
    return dict(sorted(carry.items()))


def pip_download(requirement: str, folder: Path) -> Path:
    """The wheel of ``requirement`` (name==version) for the GPU machine's Python, downloaded into ``folder``."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               "--python-version", PYTHON, "--implementation", "cp", "--dest", str(folder),
               *(f"--platform={platform}" for platform in PLATFORMS), requirement]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"no CPython {PYTHON} manylinux x86-64 wheel of {requirement} could be downloaded:\n"
                         f"{run.stderr[-2000:]}")
    name, _, pinned = requirement.partition("==")
    return next(wheel for wheel in folder.glob("*.whl")
                if parse_wheel_filename(wheel.name)[:2] == (canonicalize_name(name), Version(pinned)))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def lock(imported: dict[str, str]) -> dict:
    """Resolves and downloads what must travel, and writes the lock."""
    carry = to_carry(imported)
    entries = []
    with tempfile.TemporaryDirectory() as folder:
        for name, found in carry.items():
            wheel = pip_download(f"{name}=={found}", Path(folder))
            entries.append({"name": name, "version": found, "file": wheel.name, "size": wheel.stat().st_size,
                            "sha256": sha256(wheel), "requires": requirements_of(name)})
    locked = {"python": PYTHON, "imported": dict(sorted(imported.items())), "wheels": entries}
    LOCK.write_text(json.dumps(locked, indent=1) + "\n")
    return locked


def read_lock() -> dict:
    return json.loads(LOCK.read_text())


def problems(locked: dict) -> list[str]:
    """What makes the lock unfit for the GPU machine and this checkout's pins (offline)."""
    machine, pins = machine_packages(), suite_pins()
    carried = {entry["name"]: entry for entry in locked["wheels"]}
    found = []
    for entry in locked["wheels"]:
        tags = parse_wheel_filename(entry["file"])[3]
        if not any(t.interpreter in ("cp312", "py3", "py312") and t.abi in ("cp312", "abi3", "none")
                   and (t.platform == "any" or t.platform in PLATFORMS) for t in tags):
            found.append(f"{entry['file']} is no wheel for CPython {PYTHON} on manylinux x86-64")
        if outside(entry["version"], pins.get(entry["name"])):
            found.append(f"{entry['name']} {entry['version']} is outside setup.cfg's {entry['name']}"
                         f"{pins[entry['name']]}")
        for line in entry["requires"]:
            requirement = Requirement(line)
            name = normalized(requirement.name)
            if name in machine and name not in carried and outside(machine[name], requirement.specifier):
                found.append(f"{entry['name']} requires {line}; the GPU machine has {name} "
                             f"{machine[name] or '(version unknown)'}")
    for name in locked["imported"]:
        name = normalized(name)
        if name in machine and name not in carried and name not in NOT_CARRIED \
                and outside(machine[name], pins.get(name)):
            found.append(f"the GPU machine's {name} {machine[name] or '(version unknown)'} may be outside setup.cfg's "
                         f"{name}{pins[name]}")
    return found


def tree_bytes() -> int:
    """The size of the working tree that travels: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=CHECKOUT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    shared = CHECKOUT / "shared"
    return sum(p.stat().st_size for p in (CHECKOUT / name for name in set(listed) if name) if p.is_file()) \
        + sum(p.stat().st_size for p in shared.rglob("*") if p.is_file() and not p.is_symlink())


def listing(locked: dict) -> tuple[str, int]:
    """What would travel, one wheel a line, and the total with the working tree (bytes)."""
    wheels = sum(entry["size"] for entry in locked["wheels"])
    tree = tree_bytes()
    lines = [f"{entry['file']:72s} {entry['size'] / 2 ** 20:7.2f} MiB" for entry in locked["wheels"]]
    lines += [f"{len(locked['wheels'])} wheels (.gpu-wheels/){'':42s} {wheels / 2 ** 20:7.2f} MiB",
              f"working tree (tracked and not ignored){'':33s} {tree / 2 ** 20:7.2f} MiB",
              f"what travels, of at most {CARRY_LIMIT / 2 ** 20:.0f} MiB{'':38s} {(wheels + tree) / 2 ** 20:7.2f} MiB"]
    return "\n".join(lines), wheels + tree


def gather(locked: dict) -> None:
    """Downloads the locked wheels into .gpu-wheels/ (those already there and intact stay), drops the others."""
    WHEELS.mkdir(exist_ok=True)
    wanted = {entry["file"] for entry in locked["wheels"]}
    for stray in WHEELS.glob("*.whl"):
        if stray.name not in wanted:
            stray.unlink()
    for entry in locked["wheels"]:
        wheel = WHEELS / entry["file"]
        if not wheel.is_file() or sha256(wheel) != entry["sha256"]:
            wheel.unlink(missing_ok=True)
            downloaded = pip_download(f"{entry['name']}=={entry['version']}", WHEELS)
            if downloaded.name != entry["file"] or sha256(downloaded) != entry["sha256"]:
                raise SystemExit(f"{downloaded.name}: not the locked {entry['file']} (SHA-256 {entry['sha256']})")
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=CHECKOUT, capture_output=True, text=True)
    (WHEELS / "COMMIT").write_text(commit.stdout.strip() + "\n")


def take_machine_versions(results: dict) -> list[str]:
    """Writes into speed/gpu_machine.txt the versions a GPU run read there (its environment's Python, torch and
    tokenizers, and every distribution it imported) of what the machine has itself, the carried wheels left out,
    with the run named in the header; returns the lines changed."""
    env = results["environment"]
    carried = {entry["name"] for entry in read_lock()["wheels"]} | set(NOT_CARRIED)
    read = {"python": env["python"], **{name: env[name] for name in ("torch", "tokenizers") if env.get(name)},
            **results.get("imported", {})}
    read = {normalized(name): found for name, found in read.items() if normalized(name) not in carried}
    header, lines, changed = [], [], []
    for line in MACHINE.read_text().splitlines():
        if line.startswith("#"):
            if not line.startswith(RUN_READ):
                header.append(line)
            continue
        name = normalized(line.partition("==")[0])
        if name in read and line != f"{name}=={read[name]}":
            changed.append(f"{line} -> {name}=={read[name]}")
            line = f"{name}=={read[name]}"
        lines.append(line)
    run = textwrap.wrap(f"Versions read there by `speed/gpu_check.py run` of {env['date']} on {env['device']} (driver "
                        f"{env.get('driver') or '?'}, CUDA {env.get('cuda') or '?'}; commit "
                        f"{env.get('commit') or 'unknown'}): Python, torch, tokenizers and "
                        f"{imported_count(results)}, less the carried wheels.",
                        118, initial_indent=RUN_READ, subsequent_indent=RUN_READ)
    MACHINE.write_text("\n".join([*header, *run, *lines]) + "\n")
    return changed


def imported_count(results: dict) -> str:
    found = len(results.get("imported", {}))
    return f"the {found} distributions it imported" if found else "no import (the run recorded none)"
