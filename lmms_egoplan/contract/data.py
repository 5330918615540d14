"""What a benchmark declares of its data (``Benchmark.data``), for ``lmms-egoplan prepare`` and ``check-data``
(``harness.data_preparation``, ``harness.data_check``): the parts of its release and their record counts, the Hub
datasets its authors publish (fetched by prepare), and a plan that turns a folder into its settings and the list of
what it still needs that only a licence or an external tool gets (``Needed``: the items, how many, their size where
the source publishes it, the exact commands). Nothing here fetches or reads anything: values and command text."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class DataPart:
    """A part of a benchmark's release that ``check-data`` counts: the documents of its ``tasks`` (lmms-eval task
    names, read by the loader of the spec ``spec``, a key of ``Benchmark.lmms_eval_tasks``), ``release_count`` of
    them in the release (None: no source states it; ``check-data`` then counts without comparing)."""

    name: str
    tasks: tuple[str, ...]
    spec: str
    release_count: int | None
    unit: str = "questions"


@dataclass(frozen=True)
class HubDataset:
    """A dataset its authors publish on the Hugging Face Hub, fetched by ``prepare`` into ``folder`` (under the
    benchmark's folder of ``--root``); ``gated``: its conditions must be accepted on the Hub first."""

    repo_id: str
    folder: str
    gated: bool = False
    allow_patterns: tuple[str, ...] = ()  # none: every file
    revision: str | None = None  # none: the default branch (the commit it resolves to is recorded)


@dataclass(frozen=True)
class Needed:
    """Something a benchmark needs that ``prepare`` cannot fetch: ``title``, ``why`` it cannot (a licence, an
    external tool), the ``items`` (ids) written one a line to ``list_file`` (under the benchmark's folder),
    ``present`` of them already in place, their ``size`` where the source publishes it, the exact ``commands``, and
    what to do ``then`` (words, not a command)."""

    title: str
    why: str
    commands: tuple[str, ...]
    items: tuple[str, ...] = ()
    unit: str = ""
    list_file: str = ""
    present: int = 0
    size: str = ""
    then: str = ""


@dataclass(frozen=True)
class DataPlan:
    """What a benchmark's folder gives a run (``settings``, by field name) and what it still needs."""

    settings: Mapping[str, Any]
    needed: tuple[Needed, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSources:
    """A benchmark's data: its release's ``parts`` (``check-data``), its authors' ``hub`` datasets (``prepare``
    fetches them) and its ``plan``: (its folder under ``--root``, each Hub dataset's folder by repository id) ->
    its ``DataPlan``, reading what is there with the benchmark's own readers."""

    parts: tuple[DataPart, ...]
    plan: Callable[[Path, Mapping[str, Path]], DataPlan]
    hub: tuple[HubDataset, ...] = field(default_factory=tuple)


def list_argument(path: Path) -> str:
    """A shell word that expands to the lines of ``path``, comma-separated."""
    return f"$(paste -sd, {shlex.quote(str(path))})"


def ego4d_videos(uids: tuple[str, ...], folder: Path, present: int) -> Needed:
    """Ego4D videos by uid through the official ``ego4d`` CLI, into ``<folder>/ego4d/v2/full_scale/<uid>.mp4``
    (the canonical 30 fps videos; ``ego4d_full_scale``)."""
    uid_file = "ego4d_video_uids.txt"
    return Needed("Ego4D videos", "Ego4D's licence (https://ego4d-data.org/docs/start-here/: sign it, then "
                  "`aws configure --profile ego4d` with the keys it sends) and its CLI (pip install ego4d)",
                  (f"ego4d --output_directory {shlex.quote(str(folder / 'ego4d'))} --datasets full_scale --version v2 "
                   f"--aws_profile_name ego4d --video_uid_file {shlex.quote(str(folder / uid_file))}",),
                  items=uids, unit="videos", list_file=uid_file, present=present,
                  size="not published per video; the ego4d CLI prints the total and asks before it downloads")


def ego4d_full_scale(folder: Path) -> Path:
    """Where ``ego4d_videos`` puts the videos."""
    return folder / "ego4d" / "v2" / "full_scale"


def google_drive_files(title: str, files: Mapping[str, str], folder: Path, then: str) -> Needed:
    """Files the authors share on Google Drive, by the name each gets in ``folder`` ("": the name it has on the
    Drive) and its file id, fetched with ``gdown``; ``then``: what to do next."""
    def output(name: str) -> str:
        return shlex.quote(str(folder / name)) if name else shlex.quote(str(folder)) + "/"

    return Needed(title, "shared on Google Drive, which huggingface_hub cannot fetch: gdown (pip install gdown)",
                  (f"mkdir -p {shlex.quote(str(folder))}",
                   *(f"gdown --continue {file_id} -O {output(name)}" for name, file_id in files.items())),
                  items=tuple(name or "the archive" for name in files), unit="files", then=then)
