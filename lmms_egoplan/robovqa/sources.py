"""RoboVQA's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: per question type its
validation questions, read with the task's own reader (``robovqa.data``). No source read states the validation
split's count per type, so ``check-data`` counts what it reads (a settings file's ``expected_counts`` checks a copy
against known counts). ``prepare`` fetches the 16-frame copy (``VLyb/RoboVQA-16frames``: ``qa.jsonl`` and
``frames.tar``, unpacked by the command it prints); ``Tianli/robovqa`` (about 70 GB whole) and the official TFRecord
shards (``gsutil``) are named with their commands, not fetched."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, HubDataset, Needed
from lmms_egoplan.core.files import folder_holding
from lmms_egoplan.robovqa.data import QUESTION_TYPES

FRAMES16_HUB = HubDataset("VLyb/RoboVQA-16frames", "RoboVQA-16frames")
OFFICIAL_SHARDS = "gs://anon_robovqa/tfrecord/val"


def task_of(kind: str) -> str:
    return f"robovqa_{kind}"


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    """The fetched 16-frame copy's folder (where its qa.jsonl is) as the root; its frames archive to unpack, and the
    other layouts' commands as notes."""
    fetched = hub.get(FRAMES16_HUB.repo_id, folder / FRAMES16_HUB.folder)
    root = folder_holding(fetched, "qa.jsonl") or fetched
    needed = []
    if (root / "frames.tar").is_file() and not (root / "frames").is_dir():
        archive = str(root / "frames.tar")
        needed.append(Needed("the 16-frame copy's frames", "prepare fetches the archive and unpacks nothing",
                             (f"tar -xf {shlex.quote(archive)} -C {shlex.quote(str(root))}",), items=(archive,),
                             unit="archives"))
    shards = folder / "tfrecord"
    notes = (f"the official validation shards need gsutil: gsutil -m cp -r {OFFICIAL_SHARDS} "
             f"{shlex.quote(str(shards))}, then ROBOVQA_DATA_SOURCE=tfrecord ROBOVQA_ROOT={shlex.quote(str(shards))}",
             "the Tianli/robovqa copy (about 70 GB whole) is not fetched: download its validation files and videos "
             "into a folder, then ROBOVQA_DATA_SOURCE=tianli ROBOVQA_ROOT=<that folder>")
    return DataPlan({"data_source": "frames16", "root": str(root)}, tuple(needed), notes=notes)


DATA = DataSources(parts=tuple(DataPart(kind, (task_of(kind),), "generation", None) for kind in QUESTION_TYPES),
                   plan=plan, hub=(FRAMES16_HUB,))
