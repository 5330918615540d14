"""EgoPlan-Bench's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: Val (3,355 questions)
and Test (1,584), whose annotation files the authors share on Google Drive (ChenYi99/EgoPlan, README, Data), their
media EPIC-KITCHENS-100 RGB frames (the EPIC download scripts) and Ego4D videos (a licence, the ego4d CLI). The
lists of videos are read from the annotation files with the task's own reader (``egoplan.data``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import (
    DataPart,
    DataPlan,
    DataSources,
    Needed,
    ego4d_full_scale,
    ego4d_videos,
    google_drive_files,
    list_argument,
)
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.egoplan.data import EgoPlanDataError, ego4d_video_path, epic_frame_folder, read_annotations

# The annotation files' Google Drive ids, as the authors link them (ChenYi99/EgoPlan README, Data): labelled or not.
ANNOTATION_FILES = {"EgoPlan_validation.json": "1Hy-mWrtuDjuq29iCQxCQzk0htTJs8SHg",
                    "EgoPlan_test.json": "1G3cH58qlXI11iRFc8R1oFXpHhEiOh4Bd"}
LABELLED = {"EgoPlan_validation.json": True, "EgoPlan_test.json": False}
EPIC_SCRIPTS = "https://github.com/epic-kitchens/epic-kitchens-download-scripts"


def videos(annotations: Path) -> tuple[dict[str, set[str]], list[str]]:
    """The videos the annotation files present in ``annotations`` name, by source (``EpicKitchens``, ``Ego4D``),
    read with the task's reader; and what kept a file from being read."""
    found: dict[str, set[str]] = {"EpicKitchens": set(), "Ego4D": set()}
    notes = []
    for name, labelled in LABELLED.items():
        if not (annotations / name).is_file():
            continue
        try:
            records = read_annotations(annotations / name, labelled=labelled,
                                       problems=DatasetProblems("the EgoPlan data", EgoPlanDataError))
        except InputError as error:
            notes.append(f"{name}: {error}")
            continue
        for record in records:
            found[record["video_source"]].add(record["video_id"])
    return found, notes


def epic_frames(video_ids: tuple[str, ...], folder: Path, present: int) -> Needed:
    """EPIC-KITCHENS-100 RGB frames of ``video_ids`` through the official download scripts, unpacked as the task
    reads them: ``<folder>/EPIC-KITCHENS/<participant>/rgb_frames/<video_id>/frame_%010d.jpg``."""
    scripts, list_file = folder / "epic-kitchens-download-scripts", "epic_kitchens_videos.txt"
    frames = shlex.quote(str(folder / "EPIC-KITCHENS"))
    return Needed(
        "EPIC-KITCHENS-100 RGB frames", "EPIC-KITCHENS' own download scripts (no licence step; data.bris.ac.uk)",
        (f"git clone {EPIC_SCRIPTS} {shlex.quote(str(scripts))}",
         f"(cd {shlex.quote(str(scripts))} && python epic_downloader.py --rgb-frames --specific-videos "
         f"{list_argument(folder / list_file)} --output-path {shlex.quote(str(folder))})",
         f'for tar in {frames}/P*/rgb_frames/*.tar; do mkdir -p "${{tar%.tar}}" && tar -xf "$tar" -C "${{tar%.tar}}" '
         f'&& rm "$tar"; done'),
        items=video_ids, unit="videos", list_file=list_file, present=present,
        size="not published per video by the download scripts")


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    annotations = folder / "annotations"
    epic_root, ego4d_root = folder / "EPIC-KITCHENS", ego4d_full_scale(folder)
    settings = {"annotation_dir": str(annotations), "visual_source": "raw", "epic_frames_root": str(epic_root),
                "ego4d_videos_root": str(ego4d_root)}
    absent = {name: file_id for name, file_id in ANNOTATION_FILES.items() if not (annotations / name).is_file()}
    needed = [google_drive_files("EgoPlan-Bench annotation files", absent, annotations,
                                 "run `lmms-egoplan prepare egoplan` again: it lists the videos they name")
              ] if absent else []
    found, notes = videos(annotations)
    epic, ego4d = tuple(sorted(found["EpicKitchens"])), tuple(sorted(found["Ego4D"]))
    if epic:
        needed.append(epic_frames(epic, folder, sum(epic_frame_folder(epic_root, video).is_dir() for video in epic)))
    if ego4d:
        needed.append(ego4d_videos(ego4d, folder, sum(ego4d_video_path(ego4d_root, uid).is_file() for uid in ego4d)))
    return DataPlan(settings, tuple(needed), (*notes, "Or, for Val only: the authors' Hub package "
                                              "TencentARC/SEED-Bench-R1 (tasks/egoplan/README.md, Data preparation, 5; "
                                              "not the release's frames)"))


DATA = DataSources(
    parts=(DataPart("val", ("egoplan_val",), "validation", 3355),
           DataPart("test", ("egoplan_test",), "test", 1584)),
    plan=plan,
)
