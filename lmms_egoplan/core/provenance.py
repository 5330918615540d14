"""What a results file records of what produced it, so that a number can be traced and repeated: the software and
the machine (``environment``: the suite's version and commit, lmms-eval, lm-eval, transformers, torch, CUDA, the
GPUs), and where each task's documents came from (``data_source``: the files read, each with its SHA-256, or the
Hub dataset and its revision)."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Iterable, Sequence

PROVENANCE_KEY = "lmms_egoplan_provenance"

# A folder's files that are not annotations (a release keeps its clips and images beside its labels): not hashed.
MEDIA_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".mp4", ".mkv", ".avi", ".webm",
                            ".mov", ".npy", ".npz", ".pt", ".safetensors", ".bin"})
HUB_PREFIX = "hub:"


def environment() -> dict:
    """The software and machine of this process: versions of the suite (and its git commit where it runs from a
    checkout), lmms-eval, lm-eval, transformers, torch, the CUDA torch was built with, and the GPUs torch sees."""
    import torch

    gpus = [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"lmms_egoplan": {"version": _version("lmms-egoplan"), **suite_commit()},
            "lmms_eval": _version("lmms-eval"), "lm_eval": _version("lm-eval"),
            "transformers": _version("transformers"), "torch": torch.__version__, "cuda": torch.version.cuda,
            "gpus": gpus, "python": platform.python_version()}


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def suite_commit() -> dict:
    """The suite's git commit: the one pip recorded for an install from a git URL, or, for an install from a
    checkout (editable), the checkout's HEAD and whether it had uncommitted changes; {} where neither is known."""
    try:
        direct_url = json.loads(metadata.distribution("lmms-egoplan").read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        direct_url = {}
    if "vcs_info" in direct_url:
        return {"commit": direct_url["vcs_info"].get("commit_id"), "installed_from": direct_url.get("url")}
    checkout = Path(__file__).resolve().parents[2]  # lmms_egoplan/core/provenance.py -> the checkout's top
    try:
        top = _git(checkout, "rev-parse", "--show-toplevel")
        if Path(top).resolve() != checkout:  # the package lies in another repository (a venv in a project)
            return {}
        return {"commit": _git(checkout, "rev-parse", "HEAD"),
                "uncommitted_changes": bool(_git(checkout, "status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.CalledProcessError):
        return {}


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout.strip()


def data_source(read_from: Sequence[str]) -> list[dict]:
    """Where a task's documents came from, one entry per source its loader names: a file with its SHA-256; a folder
    with the SHA-256 of its annotation files (every file but media, by relative path and content) and their count;
    a Hub dataset (``hub:<repo>@<revision>``) with its repository and revision."""
    entries = []
    for source in read_from:
        if source.startswith(HUB_PREFIX):
            repo, _, revision = source[len(HUB_PREFIX):].partition("@")
            entries.append({"hub": repo, "revision": revision or None})
            continue
        path = Path(source).expanduser()
        if path.is_file():
            entries.append({"file": str(path), "sha256": _file_digest(path)})
        elif path.is_dir():
            files = sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() not in MEDIA_SUFFIXES)
            entries.append({"folder": str(path), "annotation_files": len(files), "sha256": _folder_digest(path, files)})
        else:
            entries.append({"path": str(path), "sha256": None})
    return entries


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _folder_digest(root: Path, files: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + _file_digest(path).encode() + b"\n")
    return digest.hexdigest()
