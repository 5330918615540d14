"""A Hub dataset fetched into a folder through ``huggingface_hub`` (the user's token where the dataset is gated:
``HF_TOKEN`` or ``hf auth login``; ``HF_ENDPOINT`` where a mirror serves it): its revision resolved to a commit
first, so that what is fetched and what is recorded are the same, its size said before, and the download
resumable (``snapshot_download`` keeps the files it fetched whole, and fetches only the others, when run again)."""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from loguru import logger

from lmms_egoplan.core.errors import InputError


class HubFetchError(InputError):
    """A Hub dataset could not be fetched; the message says why and what to do."""


@dataclass(frozen=True)
class FetchedDataset:
    repo_id: str
    revision: str  # the commit the files are of
    folder: Path
    files: int
    size: int  # bytes, as the Hub lists the files
    replaced: tuple[str, ...] = ()  # files found changed (their hash not the Hub's) and fetched again


def hub_size(size: int) -> str:
    """``size`` bytes as a person reads it (decimal units, as the Hub shows sizes)."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"


def dataset_revision(repo_id: str, *, revision: str | None = None,
                     allow_patterns: Sequence[str] = ()) -> tuple[str, int, int]:
    """The commit ``revision`` (None: the default branch) of a Hub dataset resolves to, and how many of its files
    ``allow_patterns`` select (none: all) and their size in bytes."""
    commit, siblings = _listing(repo_id, revision, allow_patterns)
    return commit, len(siblings), sum(sibling.size or 0 for sibling in siblings)


def _listing(repo_id: str, revision: str | None, allow_patterns: Sequence[str]) -> tuple[str, list]:
    """The commit ``revision`` resolves to and the files ``allow_patterns`` select, each with its size and hashes."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import filter_repo_objects

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT"))
    with _explained(repo_id, revision):
        info = api.dataset_info(repo_id, revision=revision, files_metadata=True)
    return info.sha, list(filter_repo_objects(info.siblings or [], allow_patterns=list(allow_patterns) or None,
                                              key=lambda sibling: sibling.rfilename))


# Seconds a run waits for the Hub to answer whether it is there (huggingface_hub's own loads retry for minutes).
HUB_PROBE_SECONDS = 10


def hub_checked(repo_id: str, revision: str | None = None, *, repo_type: str = "model") -> str | None:
    """The commit ``revision`` of Hub repository ``repo_id`` names now; None where nothing is asked of the Hub
    (``repo_id`` a local folder, ``HF_HUB_OFFLINE`` set) or the Hub said something else is wrong (gated, not there:
    the load that follows says it). A Hub that cannot be reached fails here, in seconds, saying what to do."""
    from huggingface_hub import HfApi, constants

    if Path(repo_id).expanduser().exists():
        return None
    if problem := missing_folder(repo_id, repo_type):
        raise InputError(problem)
    if constants.HF_HUB_OFFLINE:
        return None
    try:
        return HfApi(endpoint=os.environ.get("HF_ENDPOINT")).repo_info(
            repo_id, revision=revision, repo_type=repo_type, timeout=HUB_PROBE_SECONDS).sha
    except Exception as error:  # noqa: BLE001 (only an unreachable Hub is this check's to say)
        if not _unreachable(error):
            return None
        fetch = "lmms-egoplan prepare" if repo_type == "dataset" else f"hf download {repo_id}"
        raise HubFetchError(f"{repo_id}: the Hugging Face Hub cannot be reached ({type(error).__name__}: {error}). "
                            f"Where its files are in this machine's Hub cache already, set HF_HUB_OFFLINE=1 to use "
                            f"them without the Hub; otherwise fetch them where the Hub can be reached (`{fetch}`), "
                            f"or name a local folder") from None


def missing_folder(name: str, repo_type: str = "model") -> str | None:
    """Why ``name``, written as a path (``/``, ``./``, ``../``, ``~``) of nothing, loads nothing: a Hub id is never
    written so, and huggingface_hub's own words for it ("Repo id must be in the form 'repo_name'") name no folder."""
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        return f"{name}: no such folder (a path names no Hub {repo_type})"
    return None


def _unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the Hub did not answer (huggingface_hub's HTTP client, httpx or its fork httpx2 by
    version, raises its own transport errors; a refused connection is an OSError). Its HTTP errors are OSErrors
    too: one carrying an answer below 500 (not there, gated, no such revision) came from a Hub that answered."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(status, int) and status < 500:
        return False
    return type(error).__module__.partition(".")[0] in ("httpx", "httpx2") or isinstance(error, (OSError,
                                                                                                  TimeoutError))


def resolved_commit(repo_id: str, revision: str | None = None) -> str | None:
    """The commit ``revision`` (None: the default branch) of Hub dataset ``repo_id`` names now, for a run that loads
    the dataset from the Hub to load and record that commit; None where the Hub cannot say (offline, ``repo_id`` a
    local folder, the Hub refusing: the load then reads what its own cache or the Hub gives, unpinned). A Hub that
    cannot be reached fails in seconds (``hub_checked``)."""
    if revision and re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    try:
        return _answered_commit(repo_id, revision)
    except _NoCommit:
        if not _offline_or_local(repo_id):
            logger.warning(f"{repo_id}: the Hub did not say which commit {revision or 'its default branch'} is; the "
                           f"run records the revision unresolved")
        return None


class _NoCommit(Exception):
    """The Hub named no commit: not kept by ``_answered_commit``'s cache, so the next task asks again."""


# One commit for every task of a run that reads the dataset (EgoThink's twelve dimensions load the same one, even
# where the branch moves during the run); only commits the Hub named are kept (functools caches no exception).
@functools.lru_cache(maxsize=None)
def _answered_commit(repo_id: str, revision: str | None) -> str:
    commit = hub_checked(repo_id, revision, repo_type="dataset")
    if commit is None:
        raise _NoCommit
    return commit


def _offline_or_local(repo_id: str) -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or Path(repo_id).expanduser().exists()


def fetch_dataset(repo_id: str, folder: str | Path, *, revision: str | None = None,
                  allow_patterns: Sequence[str] = ()) -> FetchedDataset:
    """The files of a Hub dataset at ``revision`` that ``allow_patterns`` select, in ``folder`` (kept where they are
    whole already: a second call fetches what the first did not). Each file is then checked against the hash the Hub
    lists for it (huggingface_hub keeps a file of the same commit unread), and one that differs is fetched again."""
    from huggingface_hub import hf_hub_download, snapshot_download

    commit, siblings = _listing(repo_id, revision, allow_patterns)
    folder = Path(folder)
    with _explained(repo_id, revision):
        snapshot_download(repo_id, repo_type="dataset", revision=commit, local_dir=str(folder),
                          allow_patterns=list(allow_patterns) or None, endpoint=os.environ.get("HF_ENDPOINT"))
        changed = tuple(sibling.rfilename for sibling in siblings if not _as_listed(folder, sibling))
        for name in changed:
            hf_hub_download(repo_id, name, repo_type="dataset", revision=commit, local_dir=str(folder),
                            force_download=True, endpoint=os.environ.get("HF_ENDPOINT"))
    if still := [sibling.rfilename for sibling in siblings if sibling.rfilename in changed
                 and not _as_listed(folder, sibling)]:
        raise HubFetchError(f"{repo_id}: {', '.join(still)} in {folder} still differ from the Hub's files after "
                            f"fetching them again (their hash is not the one the Hub lists)")
    return FetchedDataset(repo_id, commit, folder, len(siblings), sum(sibling.size or 0 for sibling in siblings),
                          changed)


def _as_listed(folder: Path, sibling) -> bool:
    """Whether the file ``sibling`` names in ``folder`` has the hash the Hub lists: an LFS file's SHA-256, else the
    git blob id (SHA-1 of ``blob <size>\\0`` and the content); a file the Hub lists no hash of passes."""
    import hashlib

    path = folder / sibling.rfilename
    if not path.is_file():
        return False
    lfs_sha256 = getattr(sibling.lfs, "sha256", None) if sibling.lfs is not None else None
    if lfs_sha256:
        digest, expected = hashlib.sha256(), lfs_sha256
    elif sibling.blob_id:
        digest, expected = hashlib.sha1(b"blob %d\0" % path.stat().st_size), sibling.blob_id
    else:
        return True
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest() == expected


class _explained:
    """The Hub's errors as what to do: a gated dataset whose conditions were not accepted, a token missing or
    refused, a revision or a dataset that does not exist, a Hub that cannot be reached."""

    def __init__(self, repo_id: str, revision: str | None):
        self.repo_id, self.revision = repo_id, revision

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        if error is None:
            return False
        page = f"https://huggingface.co/datasets/{self.repo_id}"
        if isinstance(error, GatedRepoError):
            raise HubFetchError(f"{self.repo_id} is gated: accept its access conditions at {page} with your account, "
                                f"then log in here (`hf auth login`, or set HF_TOKEN)") from None
        if isinstance(error, RevisionNotFoundError):
            raise HubFetchError(f"{self.repo_id} has no revision {self.revision!r}") from None
        if isinstance(error, RepositoryNotFoundError):
            raise HubFetchError(f"{self.repo_id}: no such dataset, or it is private and the token (HF_TOKEN, "
                                f"`hf auth login`) has no access to it ({page})") from None
        # huggingface_hub's HTTP client (httpx, or its fork httpx2 by version) raises its own errors for a Hub that
        # does not answer.
        if _unreachable(error) or isinstance(error, (HfHubHTTPError, LocalEntryNotFoundError)):
            raise HubFetchError(f"{self.repo_id}: the Hub could not be reached or refused: {error} (what was fetched "
                                f"is kept; run the same command again to fetch the rest)") from None
        return False
