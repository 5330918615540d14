"""EgoThink's release: its twelve dimensions, and the questions of one dimension loaded from the
Hub dataset (``EgoThink/EgoThink``, one config per dimension, split ``test``) or from a local
copy of the release layout (``<data_root>/<Capability>/<dimension>/annotations.json`` +
``images/``), every image checked before a run. The protocol is in ``lmms_egoplan.egothink.task``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, make_folder, read_json_list, write_atomically
from lmms_egoplan.core.media import IMAGES_DECODED_AT_LOAD, image_problems
from lmms_egoplan.core.settings import setting_name

ENV_PREFIX = entry("egothink").env_prefix  # settings are overridden by environment variables EGOTHINK_<SETTING>


@dataclass(frozen=True)
class Dimension:
    name: str  # task ego_think_<name>
    capability: str
    hub_config: str  # config name in the Hub dataset; also the task YAML's dataset_name
    release_dirs: tuple[str, ...]  # folder under the release's data root (first that exists)
    paper_count: int = 50  # questions in the paper's Table 4


DIMENSIONS: dict[str, Dimension] = {d.hub_config: d for d in (
    Dimension("existence", "Object", "Object_existence", ("Object/existence",)),
    Dimension("attribute", "Object", "Object_attribute", ("Object/attribute",)),
    Dimension("affordance", "Object", "Object_affordance", ("Object/affordance",)),
    Dimension("activity", "Activity", "Activity", ("Activity",), paper_count=100),
    Dimension("location", "Localization", "Localization_location", ("Localization/location",)),
    Dimension("spatial", "Localization", "Localization_spatial", ("Localization/spatial",)),
    Dimension("counting", "Reasoning", "Reasoning_counting", ("Reasoning/counting",)),
    Dimension("comparing", "Reasoning", "Reasoning_comparing", ("Reasoning/comparing",)),
    Dimension("situated", "Reasoning", "Reasoning_situated", ("Reasoning/situated",)),
    # The official release names this folder "Forecast" (its Hub config is "Forecasting").
    Dimension("forecasting", "Forecasting", "Forecasting", ("Forecast", "Forecasting"), paper_count=100),
    Dimension("navigation", "Planning", "Planning_navigation", ("Planning/navigation",)),
    Dimension("assistance", "Planning", "Planning_assistance", ("Planning/assistance",)),
)}
# The paper's six capabilities (Table 4), each with its dimensions, in the paper's order: the task
# groups ego_think_capability_<capability> (tasks/egothink/), the report's columns, rejudge's groups.
CAPABILITIES: dict[str, tuple[str, ...]] = {
    capability.lower(): tuple(d.name for d in DIMENSIONS.values() if d.capability == capability)
    for capability in dict.fromkeys(d.capability for d in DIMENSIONS.values())}


class EgoThinkDataError(InputError):
    """An annotation file of the release cannot be used."""


def load_release_dimension(data_root: str | Path, dimension: Dimension, *, allow_outside: bool = False,
                           images_decoded: int = IMAGES_DECODED_AT_LOAD) -> list[dict]:
    """One dimension from the release layout: ``<data_root>/<dir>/annotations.json`` + ``images/``.

    As the official inference script does, a record's image is ``images/<file name of its
    first image_path>``. Everything is checked here, before anything runs, and every problem is listed
    in one EgoThinkDataError naming the file, the record and the field: a record's fields, an image
    that leads out of ``data_root`` (a symbolic link; ``allow_outside`` allows it), an image missing or
    unusable (every image's first and last bytes; ``images_decoded`` of them decoded in full).
    """
    candidates = [Path(data_root).expanduser() / d for d in dimension.release_dirs]
    folder = next((c for c in candidates if (c / "annotations.json").is_file()), None)
    if folder is None:
        raise EgoThinkDataError(f"EgoThink {dimension.name}: no annotations.json in "
                                + " or ".join(str(c) for c in candidates)
                                + f"; set {setting_name(ENV_PREFIX, 'data_root')} to the release's data folder")
    annotations = folder / "annotations.json"
    allow_setting = setting_name(ENV_PREFIX, "allow_paths_outside_root")
    inside_root(annotations, data_root, where=f"EgoThink {dimension.name}: {annotations}", setting=allow_setting,
                allow=allow_outside, error_class=EgoThinkDataError)
    records = read_json_list(annotations, EgoThinkDataError, what="EgoThink annotation file",
                             folder_setting=setting_name(ENV_PREFIX, "data_root"), file_setting=None)
    problems = DatasetProblems(f"EgoThink {dimension.name} ({annotations})", EgoThinkDataError)
    docs, images = [], {}
    for index, record in enumerate(records):
        with problems.collected():
            where = f"{annotations}, record {index}"
            if not isinstance(record, dict):
                raise EgoThinkDataError(f"{where}: expected a JSON object, got {type(record).__name__}")
            if found := _text_problems(record):
                raise EgoThinkDataError(f"{where}: {'; '.join(found)}")
            paths = record.get("image_path")
            if not isinstance(paths, list) or not paths or not isinstance(paths[0], str) or not paths[0].strip():
                raise EgoThinkDataError(f"{where}: field image_path must be a list whose first item is the image's "
                                        f"file name, got {paths!r}")
            where += f": field image_path {paths[0]!r}"
            image = inside_root(folder / "images" / Path(paths[0]).name, data_root, where=where, setting=allow_setting,
                                allow=allow_outside, error_class=EgoThinkDataError)
            docs.append(_doc(dimension, index, record["question"], record["answer"], image))
            images.setdefault(image, []).append(where)
    unusable = image_problems(images, images_decoded)
    for image, problem in unusable.items():
        for where in images[image]:
            problems.add(f"{where}: {problem}")
    problems.raise_if_any(f"Check {setting_name(ENV_PREFIX, 'data_root')}" if unusable else "")
    return docs


def _text_problems(record: Mapping) -> list[str]:
    """A record's question and reference answer must be text that is not blank (a blank reference would be judged
    against, a missing one reach the judge as "None")."""
    return [f"field {key!r} must be text that is not blank, got {record.get(key)!r}" for key in ("question", "answer")
            if not isinstance(record.get(key), str) or not record.get(key).strip()]


def load_hub_dimension(repo: str, dimension: Dimension, *, revision: str | None = None, image_cache: str | Path,
                       images_decoded: int = IMAGES_DECODED_AT_LOAD) -> list[dict]:
    """One dimension (config) of the Hub dataset, split ``test``; its images are written once
    to ``image_cache`` (content-addressed, original bytes) so that documents hold paths, and checked
    as the release's are (one EgoThinkDataError names the row of each unusable image)."""
    import datasets

    try:
        data = datasets.load_dataset(repo, dimension.hub_config, split="test", revision=revision)
    except Exception as error:  # noqa: BLE001 (datasets raises many kinds: each said with its cause and the way out)
        local = (f"use a local copy ({setting_name(ENV_PREFIX, 'source')} local, "
                 f"{setting_name(ENV_PREFIX, 'data_root')})")
        advice = (f"this datasets version refuses the repository's loading script: set "
                  f"{setting_name(ENV_PREFIX, 'hub_revision')} to refs/convert/parquet, or "
                  f"{setting_name(ENV_PREFIX, 'hub_repo')} to lmms-lab/Egothink (same configs), or {local}"
                  if _LOADING_SCRIPT_REFUSED in str(error) else f"check {setting_name(ENV_PREFIX, 'hub_repo')} and "
                  f"{setting_name(ENV_PREFIX, 'hub_revision')}, or {local}")
        raise EgoThinkDataError(f"EgoThink {dimension.name}: could not load config {dimension.hub_config!r} of {repo} "
                                f"(revision {revision or 'default'}): {type(error).__name__}: {error}. "
                                f"{advice[0].upper()}{advice[1:]}") from error
    data = data.cast_column("image", datasets.Image(decode=False))
    folder = make_folder(Path(image_cache).expanduser() / re.sub(r"[^\w.-]+", "_", repo) / dimension.hub_config,
                         setting_name(ENV_PREFIX, "image_cache"))
    docs = []
    problems = DatasetProblems(f"EgoThink {dimension.name} ({repo}, config {dimension.hub_config})", EgoThinkDataError)
    for index, row in enumerate(data):
        if found := _text_problems(row):
            problems.add(f"{repo}, config {dimension.hub_config}, row {index}: {'; '.join(found)}")
            continue
        if not isinstance(row["image"], dict) or not (row["image"].get("bytes") or row["image"].get("path")):
            problems.add(f"{repo}, config {dimension.hub_config}, row {index}: field image holds no image")
            continue
        image = _stored_image(row["image"], folder, index)
        docs.append(_doc(dimension, index, row["question"], row["answer"], image))
    rows = {Path(doc["image"]): number for number, doc in enumerate(docs)}
    for image, problem in image_problems(rows, images_decoded).items():
        problems.add(f"{repo}, config {dimension.hub_config}, row {rows[image]}: field image: {problem}")
    problems.raise_if_any()
    return docs


# What datasets 4 and later say of a repository that holds a loading script (datasets/load.py)
_LOADING_SCRIPT_REFUSED = "scripts are no longer supported"


def _stored_image(image: dict, folder: Path, index: int) -> Path:
    content = image.get("bytes")
    if content is None:  # the dataset points at a local file
        return Path(image["path"])
    # The file name is the suite's; only a plain extension of the dataset's path is kept.
    suffix = Path(image.get("path") or "").suffix
    suffix = suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ".jpg"
    path = folder / f"{index}-{hashlib.sha256(content).hexdigest()[:16]}{suffix}"
    if not path.is_file():
        # Ranks load at once and may store the same image together: each writes a file of its
        # own and renames it into place (the same bytes, whichever rename lands last).
        write_atomically(path, content)
    return path


def _doc(dimension: Dimension, index: int, question: str, answer: str, image: Path) -> dict:
    return {"id": f"{dimension.hub_config}/{index}", "dimension": dimension.name,
            "capability": dimension.capability, "question": question, "answer": answer, "image": str(image)}

