"""Paths from records stay inside their data folders, in all five benchmarks: a path that leaves its root (an
absolute path, "..", a symbolic link, a file as well as a folder) is an error naming the record and field (or
allowed by the setting that says so). Only the files a sample shows are resolved."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


def escape_path(escape: str, root: Path, name: str, outside_file: Path) -> str:
    """A record's value for ``name`` under ``root`` that leads to ``outside_file`` (outside ``root``):
    with ``..``, as an absolute path, or through a symbolic link inside ``root``."""
    import os
    import shutil

    if escape == "dotdot":
        shutil.copy(outside_file, root.parent / f"{name}{outside_file.suffix}")
        return f"../{name}"
    if escape == "absolute":
        return str(outside_file.with_suffix(""))
    (root / f"{name}{outside_file.suffix}").symlink_to(outside_file)
    os.utime(root, None)
    return name


@pytest.mark.parametrize("escape, why", [("dotdot", "climbs out of it with '..'"), ("absolute", "is an absolute path"),
                                         ("symlink", "leads out of it through a symbolic link")])
def test_an_egoplan_video_id_that_leaves_its_root_is_an_error_naming_the_sample_and_field(escape, why, tmp_path):
    import shutil

    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.demo.egoplan import build_fixture
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import settings as egoplan_settings

    data = build_fixture(tmp_path / "egoplan")
    records = data.records()
    record = next(r for r in records if r["video_source"] != "EpicKitchens")  # <ego4d root>/<video_id>.mp4
    outside = tmp_path / "elsewhere" / "video.mp4"
    outside.parent.mkdir()
    shutil.copy(data.ego4d_root / f"{record['video_id']}.mp4", outside)
    record["video_id"] = escape_path(escape, data.ego4d_root, "escaped", outside)
    data.validation_file.write_text(json.dumps(records))

    def load(**settings):
        resolved = resolve_settings(egoplan_settings.EgoPlanSettings, task="t",
                                    metadata={"annotation_file": "EgoPlan_validation.json"},
                                    env_prefix="EGOPLAN", environ=data.env(**settings))
        return egoplan_data.load_samples(resolved, labelled=True).docs

    message = (rf"EgoPlan sample {record['sample_id']}: field video_id {re.escape(repr(record['video_id']))} {why}.*"
               rf"set EGOPLAN_ALLOW_PATHS_OUTSIDE_ROOT \(metadata.allow_paths_outside_root\) to true")
    with pytest.raises(egoplan_data.EgoPlanDataError, match=message):
        load()
    with pytest.raises(egoplan_data.EgoPlanDataError, match=message):
        load(skip_missing="true")  # not a missing file: never skipped in silence
    assert len(load(allow_paths_outside_root="true")) == len(records)


def moved_out(path: Path, outside: Path) -> Path:
    """Move ``path`` to ``outside`` and leave a symbolic link to it in its place; the outside file."""
    outside.parent.mkdir(parents=True, exist_ok=True)
    path.rename(outside)
    path.symlink_to(outside)
    return outside


def test_an_epic_frame_file_symlinked_out_of_its_root_is_an_error_naming_sample_frame_and_field(tmp_path):
    """Its folder is inside the EPIC-KITCHENS root; the frame file itself leads out (its pixels would come
    from the outside file)."""
    from lmms_egoplan.core import media
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.demo.egoplan import build_fixture
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import settings as egoplan_settings

    data = build_fixture(tmp_path / "egoplan")

    def load(**settings):
        resolved = resolve_settings(egoplan_settings.EgoPlanSettings, task="t",
                                    metadata={"annotation_file": "EgoPlan_validation.json"},
                                    env_prefix="EGOPLAN", environ=data.env(**settings))
        return egoplan_data.load_samples(resolved, labelled=True).docs

    doc = next(doc for doc in load() if doc["media_kind"] == "epic_frames")
    number = doc["clips"][0][3]
    outside = moved_out(media.FrameFolder(doc["media_path"]).frame_path(number), tmp_path / "elsewhere" / "frame.jpg")
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=rf"EgoPlan sample {doc['sample_id']}: frame {number} of field video_id "
                             rf"'{doc['video_id']}' "
                             rf"leads out of it through a symbolic link \(to {re.escape(str(outside))}\).*"
                             rf"EGOPLAN_ALLOW_PATHS_OUTSIDE_ROOT"):
        load()
    assert len(load(allow_paths_outside_root="true")) == len(data.records())


@pytest.mark.parametrize("source", ["official", "seed_bench_r1"])
def test_an_egoplan_bench2_video_or_image_symlinked_out_of_its_root_is_an_error_naming_the_record(source, tmp_path):
    import shutil

    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.demo.egoplan_bench2 import build_fixture
    from lmms_egoplan.egoplan_bench2 import data as egoplan2_data
    from lmms_egoplan.egoplan_bench2 import settings as egoplan2_settings

    data = build_fixture(tmp_path / "built")
    shutil.copytree(data.root, tmp_path / "copy", symlinks=True)
    data = build_fixture(tmp_path / "copy")

    def load(**settings):
        resolved = resolve_settings(egoplan2_settings.EgoPlanBench2Settings, task="t", metadata={},
                                    env_prefix="EGOPLAN2", environ=data.env(data_source=source, **settings))
        return egoplan2_data.load_samples(resolved).docs

    if source == "official":
        record = data.records()[2]
        moved_out(data.ego4d_root / f"{egoplan2_data.video_uid(record['sample_id'])}.mp4", tmp_path / "out" / "v.mp4")
        message = rf"annotation file .*, record #2 \(sample_id '{record['sample_id']}'\): field sample_id leads out"
    else:
        record = data.package_records()[2]
        moved_out(data.package_root / "images" / record["video_source"] / record["current_observation_basename"],
                  tmp_path / "out" / "observation.png")
        message = (rf"validation_L3.jsonl:3 \(sample_id '{record['sample_id']}'\): field current_observation_basename "
                   rf"'{record['current_observation_basename']}' leads out")
    with pytest.raises(egoplan2_data.EgoPlanBench2DataError, match=rf"{message}.*EGOPLAN2_ALLOW_PATHS_OUTSIDE_ROOT"):
        load()
    assert len(load(allow_paths_outside_root="true")) == 8


def test_an_egothink_annotation_file_symlinked_out_of_the_data_root_is_an_error(tmp_path):
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.egothink.data import DIMENSIONS, EgoThinkDataError, load_release_dimension

    root = write_release(tmp_path / "data", per_dimension=2)
    dimension = DIMENSIONS["Reasoning_counting"]
    annotations = root / dimension.release_dirs[0] / "annotations.json"
    outside = moved_out(annotations, tmp_path / "elsewhere.json")
    with pytest.raises(EgoThinkDataError, match=rf"EgoThink counting: {re.escape(str(annotations))} leads out of it "
                                                rf"through a symbolic link \(to {re.escape(str(outside))}\)"):
        load_release_dimension(root, dimension)
    assert len(load_release_dimension(root, dimension, allow_outside=True)) == 2


def test_an_egothink_image_that_leads_out_of_the_data_root_is_an_error_naming_the_record(tmp_path):
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.egothink.data import DIMENSIONS, EgoThinkDataError, load_release_dimension

    root = write_release(tmp_path / "data", per_dimension=2)
    dimension = DIMENSIONS["Object_existence"]
    image = root / dimension.release_dirs[0] / "images" / "2.jpg"
    outside = tmp_path / "elsewhere.jpg"
    image.rename(outside)
    image.symlink_to(outside)
    annotations = root / dimension.release_dirs[0] / "annotations.json"
    with pytest.raises(EgoThinkDataError,
                       match=rf"{re.escape(str(annotations))}, record 1: field image_path '2.jpg' leads "
                                                rf"out of it through a symbolic link \(to {re.escape(str(outside))}\).*"
                                                rf"EGOTHINK_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_release_dimension(root, dimension)
    assert len(load_release_dimension(root, dimension, allow_outside=True)) == 2


@pytest.mark.parametrize("escape, why", [("dotdot", "climbs out of it with '..'"), ("absolute", "is an absolute path"),
                                         ("symlink", "leads out of it through a symbolic link")])
def test_an_egointent_video_that_leaves_the_video_root_is_named_with_its_record_and_field(escape, why, tmp_path):
    from lmms_egoplan.demo.egointent import write_dataset
    from lmms_egoplan.egointent.data import read_flat

    annotations = write_dataset(tmp_path / "data")
    records = [json.loads(line) for line in annotations.read_text().splitlines()]
    record = next(r for r in records if "video" in r)
    outside = tmp_path / "elsewhere" / "video.mp4"
    outside.parent.mkdir()
    outside.write_bytes((annotations.parent / record["video"]).read_bytes())
    record["video"] = escape_path(escape, annotations.parent, "escaped", outside) + ".mp4"
    annotations.write_text("".join(json.dumps(r) + "\n" for r in records))
    number = records.index(record) + 1
    [problem] = read_flat(annotations)[1]
    assert re.match(rf"record {number} \(step_id '{record['step_id']}'\): field video "
                    rf"{re.escape(repr(record['video']))} {why}.*EGOINTENT_ALLOW_PATHS_OUTSIDE_ROOT", problem)
    assert len(read_flat(annotations, allow_outside=True)[0]) == len(records)


def test_an_actplan_instance_file_that_leads_out_of_the_release_is_an_error_naming_the_instance(tmp_path):
    from lmms_egoplan.actplan.data import ActPlanDataError, load_instances
    from lmms_egoplan.demo.actplan import write_release_dataset

    release = write_release_dataset(tmp_path / "ActPlan-1K", scenes=1, activities=1, samples=1)
    image = sorted(release.rglob("*.png"))[0]
    outside = tmp_path / "elsewhere.png"
    image.rename(outside)
    image.symlink_to(outside)
    instance = image.parent.relative_to(release / "annotation").as_posix()
    with pytest.raises(ActPlanDataError,
                       match=rf"ActPlan-1K instance {re.escape(instance)}: {image.parent.name}/{image.name} "
                                               rf"leads out of it through a symbolic "
                                               rf"link.*ACTPLAN_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_instances(release)
    assert len(load_instances(release, allow_outside=True)) == 2


def test_a_dataset_path_in_a_stored_image_name_is_reduced_to_a_plain_extension(tmp_path):
    from lmms_egoplan.egothink.data import _stored_image

    for given, suffix in (("photo.png", ".png"), ("a/../../../etc/x.j pg", ".jpg"), ("x.jpg\n", ".jpg"), ("", ".jpg")):
        stored = _stored_image({"bytes": given.encode() + b"content", "path": given}, tmp_path, 0)
        assert stored.parent == tmp_path and stored.suffix == suffix and stored.is_file()
