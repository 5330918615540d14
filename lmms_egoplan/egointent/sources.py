"""EgoIntent's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: its 3,014 steps, the
release with one pre-cut clip per step, on the Hub (``py2279105943/EgoIntent``, gated: accept its access conditions
with your account first), read as downloaded (``data_layout: release``)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, HubDataset

HUB = HubDataset("py2279105943/EgoIntent", "EgoIntent", gated=True)
RELEASE_STEPS = 3014  # the paper's steps (arXiv v1, abstract and §3.4)


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    return DataPlan({"annotations": str(hub.get(HUB.repo_id, folder / HUB.folder)), "data_layout": "release"})


DATA = DataSources(parts=(DataPart("steps", ("egointent",), "steps", RELEASE_STEPS, unit="steps"),),
                   plan=plan, hub=(HUB,))
