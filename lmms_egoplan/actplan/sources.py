"""ActPlan-1K's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: its 1,187 instances, in
the release archive the authors share on Google Drive (HKUST-KnowComp/ActPlan-1K README, "downloaded"), read
where it unpacks its ``annotation/`` folder. The BLEURT metrics need a classifier the user trains
(tasks/actplan/README.md, BLEURT classifier): no download gives it."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from lmms_egoplan.actplan.data import ANNOTATION_FOLDER
from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, google_drive_files
from lmms_egoplan.core.files import folder_holding

RELEASE_ARCHIVE = "1jw6I7NnAbcD7zgHKg5-w-fpXaBrkpB7h"  # its Google Drive file id (the release README's link)
RELEASE_INSTANCES = 1187  # the paper's count (abstract, §3)


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    found = folder_holding(folder, ANNOTATION_FOLDER) if folder.is_dir() else None
    needed = () if found else (google_drive_files(
        "ActPlan-1K release archive", {"": RELEASE_ARCHIVE}, folder,
        f"unpack the archive in {folder} (its annotation/ folder is what the task reads) and run "
        f"`lmms-egoplan prepare actplan` again"),)
    notes = ("BLEURT metrics: set bleurt_checkpoint to a classifier trained from the release's bleu-cls data "
             "(tasks/actplan/README.md, BLEURT classifier); without it they are not scored",)
    return DataPlan({"data_root": str(found or folder)}, needed, notes)


DATA = DataSources(parts=(DataPart("instances", ("actplan1k",), "with_images", RELEASE_INSTANCES, unit="instances"),),
                   plan=plan)
