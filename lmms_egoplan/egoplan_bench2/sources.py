"""EgoPlan-Bench2's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: its 1,321 questions,
whose annotation file ``EgoPlan-Bench2.json`` the authors publish on the Hub (``qiulu66/EgoPlan-Bench2``), and the
Ego4D videos it names (a licence, the ego4d CLI), listed with the task's own reader (``egoplan_bench2.data``)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, HubDataset, ego4d_full_scale, ego4d_videos
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import folder_holding
from lmms_egoplan.egoplan_bench2.data import EgoPlanBench2DataError, read_annotations, video_uid
from lmms_egoplan.egoplan_bench2.settings import PAPER_QUESTIONS, EgoPlanBench2Settings

HUB = HubDataset("qiulu66/EgoPlan-Bench2", "EgoPlan-Bench2", allow_patterns=("*.json", "*.md"))
ANNOTATION_FILE = EgoPlanBench2Settings.annotation_file


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    fetched = hub.get(HUB.repo_id, folder / HUB.folder)
    annotations = folder_holding(fetched, ANNOTATION_FILE) or fetched
    videos = ego4d_full_scale(folder)
    settings = {"data_source": "official", "annotation_dir": str(annotations), "ego4d_videos_root": str(videos)}
    if not (annotations / ANNOTATION_FILE).is_file():
        return DataPlan(settings, notes=(f"{ANNOTATION_FILE} is not in {fetched}: the Ego4D videos it names are "
                                         f"listed once it is",))
    try:
        records = read_annotations(annotations / ANNOTATION_FILE,
                                   DatasetProblems("the EgoPlan-Bench2 data", EgoPlanBench2DataError))
    except InputError as error:
        return DataPlan(settings, notes=(str(error),))
    uids = tuple(sorted({video_uid(record["sample_id"]) for _, record in records}))
    present = sum((videos / f"{uid}.mp4").is_file() for uid in uids)
    return DataPlan(settings, (ego4d_videos(uids, folder, present),))


DATA = DataSources(parts=(DataPart("questions", ("egoplan_bench2",), "generation", PAPER_QUESTIONS),),
                   plan=plan, hub=(HUB,))
