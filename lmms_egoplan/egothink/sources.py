"""EgoThink's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: its 700 questions in twelve
dimensions, the release as its authors publish it on the Hub (``EgoThink/EgoThink``: ``<Capability>/<dimension>/
annotations.json`` and ``images/``, which its loading script reads), fetched and read as a local release
(``source: local``), so that a run needs neither the loading script nor the network."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, HubDataset
from lmms_egoplan.core.files import folder_holding
from lmms_egoplan.egothink.data import DIMENSIONS

HUB = HubDataset("EgoThink/EgoThink", "EgoThink")


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    fetched = hub.get(HUB.repo_id, folder / HUB.folder)
    data_root = folder_holding(fetched, "Activity") or fetched
    return DataPlan({"source": "local", "data_root": str(data_root)})


DATA = DataSources(
    parts=(DataPart("questions", tuple(f"ego_think_{dimension.name}" for dimension in DIMENSIONS.values()),
                    "dimension", sum(dimension.paper_count for dimension in DIMENSIONS.values())),),
    plan=plan,
    hub=(HUB,),
)
