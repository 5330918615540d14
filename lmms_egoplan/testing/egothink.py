"""Synthetic EgoThink data in the release's layouts, and EgoThink's share of the offline demo.

* ``write_release(root)``: ``<root>/<Capability>/<dimension>/annotations.json`` + ``images/``
  for all twelve dimensions (``Activity/``, ``Forecast/`` without a dimension folder, as the
  official release), records in the release's format.
* ``write_hub_copy(root)``: a local Hugging Face dataset folder with the Hub dataset's shape
  (one config per dimension, split ``test``, columns image / question / answer), loadable with
  ``datasets.load_dataset(root, config)`` like ``EgoThink/EgoThink``.
* ``smoke_suite``: the release layout plus a loopback judge, for ``lmms-egoplan smoke``.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

from lmms_egoplan.egothink_data import DIMENSIONS, Dimension
from lmms_egoplan.testing.judge_server import hash_rating, loopback_judge_settings
from lmms_egoplan.testing.media import write_image
from lmms_egoplan.testing.suite import SmokeSuite

QUESTIONS = ("What am I holding in my left hand?", "Is there a cup on my right?", "What will I do next?",
             "How many plates are in front of me?", "How do I get to the door?")
ANSWERS = ("A knife.", "Yes.", "Open the fridge.", "Two.", "Turn left and walk forward to the end.")


def synthetic_records(dimension: Dimension, count: int) -> list[dict]:
    """``count`` records of one dimension in the release's annotation format."""
    return [{"source_dataset": "ego4d", "image_path": [f"{i + 1}.jpg"],
             "question": f"[{dimension.name} {i}] {QUESTIONS[i % len(QUESTIONS)]}",
             "answer": ANSWERS[(i + len(dimension.name)) % len(ANSWERS)]} for i in range(count)]


def write_release(root: str | Path, per_dimension: int = 2) -> Path:
    """The release's data folder with ``per_dimension`` questions (and images) per dimension."""
    root = Path(root)
    for number, dimension in enumerate(DIMENSIONS.values()):
        folder = root / dimension.release_dirs[0]
        records = synthetic_records(dimension, per_dimension)
        for index, record in enumerate(records):
            write_image(folder / "images" / record["image_path"][0], seed=100 * number + index)
        (folder / "annotations.json").write_text(json.dumps(records, indent=2))
    return root


def write_hub_copy(root: str | Path, per_dimension: int = 2) -> Path:
    """A local dataset folder shaped like the Hub dataset (image bytes embedded in parquet)."""
    import tempfile

    import datasets

    root = Path(root)
    features = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"),
                                  "answer": datasets.Value("string")})
    configs = []
    with tempfile.TemporaryDirectory() as scratch:
        for number, dimension in enumerate(DIMENSIONS.values()):
            records = synthetic_records(dimension, per_dimension)
            images = [{"bytes": write_image(Path(scratch) / f"{number}-{i}.png", seed=100 * number + i).read_bytes(),
                       "path": f"{i}.png"} for i in range(len(records))]
            table = datasets.Dataset.from_dict(
                {"image": images, "question": [r["question"] for r in records],
                 "answer": [r["answer"] for r in records]}, features=features)
            table.to_parquet(str(root / dimension.hub_config / "test-00000-of-00001.parquet"))
            configs.append(f"- config_name: {dimension.hub_config}\n  data_files:\n"
                           f"  - split: test\n    path: {dimension.hub_config}/*.parquet")
    (root / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n")
    return root


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """All EgoThink tasks on synthetic release data, judged by a loopback judge."""
    data_root = write_release(Path(workdir) / "data")
    return SmokeSuite(
        name="egothink",
        tasks=("ego_think",),
        env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data_root),
             **loopback_judge_settings("EGOTHINK", hash_rating, workdir, resources)},
    )
