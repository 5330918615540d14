"""What a results file records of what produced it, so that a number can be traced and repeated: the software and
the machine (``environment``: the suite's version and commit, lmms-eval, lm-eval, transformers, torch, CUDA, the
GPUs), which model was evaluated (``model_identity``: its revision, the hash of its weights index and of its chat
template), and where each task's documents came from (``data_source``: the files read, each with its SHA-256, or the
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
    with the SHA-256 of its annotation files (every file but media and hidden ones, ``content_files``, by relative
    path and content) and their count;
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
            files = [f for f in content_files(path) if f.suffix.lower() not in MEDIA_SUFFIXES]
            entries.append({"folder": str(path), "annotation_files": len(files), "sha256": folder_digest(path, files)})
        else:
            entries.append({"path": str(path), "sha256": None})
    return entries


# A checkpoint's weights index (sharded checkpoints), else its one weights file.
WEIGHTS_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def model_identity(pretrained: str, revision: str | None = None) -> dict:
    """Which model was evaluated: ``pretrained`` as given, the Hub ``revision`` asked for and the commit its files
    are of (a Hub id read from this machine's Hub cache; None for a folder), the SHA-256 of its weights index (the
    weights file's own for a one-file checkpoint: its name in the Hub cache, else its content) and of its chat
    template (``chat_template.jinja`` / ``.json``, else the tokenizer config's ``chat_template``); None where a file
    is not found. Reads files only: nothing is asked of the Hub."""
    folder, commit = _checkpoint_folder(pretrained, revision)
    return {"pretrained": pretrained, "revision": revision, "commit": commit,
            "weights_index_sha256": _weights_digest(folder) if folder else None,
            "chat_template_sha256": _chat_template_digest(folder) if folder else None}


def _checkpoint_folder(pretrained: str, revision: str | None) -> tuple[Path | None, str | None]:
    local = Path(pretrained).expanduser()
    if local.is_dir():
        return local, None
    try:
        from huggingface_hub import snapshot_download

        snapshot = Path(snapshot_download(pretrained, revision=revision, local_files_only=True,
                                          allow_patterns=["*.json", "*.jinja"]))
    except Exception:  # noqa: BLE001 (not in the cache, or no Hub id: the record says None)
        return None, None
    return snapshot, snapshot.name


def _weights_digest(folder: Path) -> str | None:
    for name in (*WEIGHTS_INDEXES, *SINGLE_WEIGHTS):
        path = folder / name
        if path.is_file():
            blob = path.resolve()  # the Hub cache keeps a large file as blobs/<its SHA-256>
            return blob.name if blob.parent.name == "blobs" and len(blob.name) == 64 else _file_digest(path)
    return None


def _chat_template_digest(folder: Path) -> str | None:
    for name in CHAT_TEMPLATE_FILES:
        if (folder / name).is_file():
            return _file_digest(folder / name)
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    except (OSError, ValueError):
        return None
    if not template:
        return None
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode() if not isinstance(template, str)
                          else template.encode()).hexdigest()


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_files(root: Path) -> list[Path]:
    """The files of the folder ``root``, sorted, but those under a hidden name (``.cache/huggingface/``, which
    ``prepare`` and ``hf download --local-dir`` rewrite with new timestamps when they check a file again, ``.git/``,
    ``.DS_Store``): tools' bookkeeping, which no loader reads and which must not make the same content look changed
    (the response cache keys a task's answers by its data's digest)."""
    return sorted(path for path in root.rglob("*") if path.is_file()
                  and not any(part.startswith(".") for part in path.relative_to(root).parts))


def folder_digest(root: Path, files: Iterable[Path]) -> str:
    """SHA-256 of ``files`` (under ``root``): each one's relative path and content digest, in the order given."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + _file_digest(path).encode() + b"\n")
    return digest.hexdigest()
