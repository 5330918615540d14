"""Cosmos-Reason1's data (``contract.data``), for ``lmms-egoplan prepare`` and ``check-data``: per source and
category its questions (100 each, RoboVQA 110; common sense 80 / 298 / 226), read with the task's own reader
(``cosmos_reason1.data``). The authors' Hub dataset ``nvidia/Cosmos-Reason1-Benchmark`` holds the six sources' QA
files and the AV and RoboVQA clips as archives; AgiBot World's, BridgeData V2's and HoloAssist's clips are rebuilt
from their own datasets by the official ``process_raw_data.py``, RoboFail's by nothing of the official code (it has
no RoboFail path), and the common-sense split is not in it. PAI-Bench-U
(``shi-labs/physical-ai-bench-understanding``, the copy lmms-eval's ``physical_ai_understanding`` reads) holds all
1,214 questions as parquet and their clips (``data_source: paibench_u``)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Mapping

from lmms_egoplan.contract.data import DataPart, DataPlan, DataSources, HubDataset, Needed
from lmms_egoplan.core.files import folder_holding
from lmms_egoplan.cosmos_reason1.data import ER_SOURCES, RELEASE_COUNTS, paibench_u_files, part_folder

HUB = HubDataset("nvidia/Cosmos-Reason1-Benchmark", "Cosmos-Reason1-Benchmark")
PAIBENCH_U = HubDataset("shi-labs/physical-ai-bench-understanding", "PAI-Bench-U")
OFFICIAL_CODE = "https://github.com/nvidia-cosmos/cosmos-reason1/tree/main/examples/benchmark"


def task_of(part: str) -> str:
    return f"cosmos_reason1_{part}" if part in ER_SOURCES else f"cosmos_reason1_cs_{part}"


def plan(folder: Path, hub: Mapping[str, Path]) -> DataPlan:
    """The root holding the fetched sources (where their QA files are) and PAI-Bench-U's folder, the layout a run
    reads (the official one where its QA files are there, else PAI-Bench-U's where its parquet files are), and for
    the official layout what it still needs."""
    fetched = hub.get(HUB.repo_id, folder / HUB.folder)
    paibench_u = hub.get(PAIBENCH_U.repo_id, folder / PAIBENCH_U.folder)
    root = folder_holding(fetched, "av/av_benchmark_qa_pairs.json") or fetched
    official = (root / "av" / "av_benchmark_qa_pairs.json").is_file()
    source = "official" if official or not paibench_u_files(paibench_u) else "paibench_u"
    settings = {"data_source": source, "root": str(root), "paibench_u_root": str(paibench_u)}
    if source == "paibench_u":
        return DataPlan(settings)
    return DataPlan(settings, _official_needs(root), notes=(
        "the common-sense categories are not in the official Hub dataset: with PAI-Bench-U fetched, run them with "
        "COSMOS_REASON1_DATA_SOURCE=paibench_u",))


def _official_needs(root: Path) -> tuple[Needed, ...]:
    """The clip archives still to unpack, and the parts whose clips are absent (not run until they are there)."""
    packed = sorted(str(path) for path in root.glob("*/*.tar.gz") if not (path.parent / "clips").is_dir())
    needed = []
    if packed:
        needed.append(Needed("the clip archives", "prepare fetches archives and unpacks none",
                             tuple(f"tar -xzf {shlex.quote(path)} -C {shlex.quote(str(Path(path).parent))}"
                                   for path in packed), items=tuple(packed), unit="archives"))
    absent = tuple(part for part in RELEASE_COUNTS if not (part_folder(root, part) / "clips").is_dir()
                   and not any(Path(path).parent.name == part for path in packed))
    if absent:
        needed.append(Needed("clips of the other sources and categories", "rebuilt from their own datasets "
                             "(AgiBot World: gated; BridgeData V2, HoloAssist: terabytes) by the official "
                             "process_raw_data.py; RoboFail's by nothing of the official code (PAI-Bench-U holds "
                             "them); the common-sense clips are published with PAI-Bench-U",
                             (f"# see {OFFICIAL_CODE} (tools/eval/process_raw_data.py --data_dir <dir> --task "
                              f"benchmark), then put <part>/clips/ under {root}",),
                             items=tuple(task_of(part) for part in absent), unit="tasks not run until then"))
    return tuple(needed)


DATA = DataSources(parts=tuple(DataPart(part, (task_of(part),), "generation", count)
                               for part, count in RELEASE_COUNTS.items()),
                   plan=plan, hub=(HUB, PAIBENCH_U))
