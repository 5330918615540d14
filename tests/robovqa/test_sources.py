"""RoboVQA's data for `prepare` and `check-data`: a part per question type, counted without a release count (no
source states one) or against a settings file's declared counts; the 16-frame copy's archive to unpack named with
its command, the other layouts' commands noted."""

import shutil
import tarfile

import pytest

from lmms_egoplan.core.settings_file import SettingsFile
from lmms_egoplan.demo.robovqa import build_fixture
from lmms_egoplan.harness.data_check import check_benchmark
from lmms_egoplan.robovqa.data import QUESTION_TYPES
from lmms_egoplan.robovqa.sources import DATA, FRAMES16_HUB, plan, task_of
from lmms_egoplan.suite import benchmark


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("robovqa"))


def test_a_part_per_question_type_with_no_release_count():
    assert [(part.name, part.tasks, part.release_count) for part in DATA.parts] == \
        [(kind, (task_of(kind),), None) for kind in QUESTION_TYPES]


def settings_file(root, source, **counts):
    return SettingsFile(None, {"robovqa": {"data_source": source, "root": str(root)}},
                        expected_counts={"robovqa": counts} if counts else {})


def test_check_data_counts_each_layout_and_compares_declared_counts(fixture):
    for source in ("frames16", "tianli", "tfrecord"):
        check = check_benchmark(benchmark("robovqa"), settings_file(fixture.layout(source), source))
        assert check.complete, (source, check.problems, check.missing)
        assert {count.part.name: count.found for count in check.counts}["next_step"] == 4
        assert "success: 2 questions (the release states no count)" in check.summary()
    declared = check_benchmark(benchmark("robovqa"), settings_file(fixture.layout("tfrecord"), "tfrecord", success=3))
    assert not declared.complete
    assert "success: 2 of 3 questions (a declared subset; the release states none)" in declared.summary()


def test_a_frame_cut_short_is_found_before_the_model(fixture, tmp_path):
    copy = tmp_path / "frames16"
    shutil.copytree(fixture.layout("frames16"), copy)
    frame = next((copy / "frames" / "episode_b").glob("*.jpg"))
    frame.write_bytes(frame.read_bytes()[:200])
    check = check_benchmark(benchmark("robovqa"), settings_file(copy, "frames16"))
    assert not check.complete and any("truncated" in item and frame.name in item for item in check.missing)


def test_prepare_names_the_frames_archive_to_unpack_and_the_other_layouts(fixture, tmp_path):
    fetched = tmp_path / "data" / FRAMES16_HUB.folder
    fetched.mkdir(parents=True)
    shutil.copy(fixture.layout("frames16") / "qa.jsonl", fetched)
    with tarfile.open(fetched / "frames.tar", "w") as archive:
        archive.add(fixture.layout("frames16") / "frames", arcname="frames")
    found = plan(tmp_path / "data", {FRAMES16_HUB.repo_id: fetched})
    assert found.settings == {"data_source": "frames16", "root": str(fetched)}
    assert found.needed[0].commands == (f"tar -xf {fetched / 'frames.tar'} -C {fetched}",)
    assert any("gsutil -m cp -r gs://anon_robovqa/tfrecord/val" in note for note in found.notes)
    with tarfile.open(fetched / "frames.tar") as archive:
        archive.extractall(fetched, filter="data")
    assert plan(tmp_path / "data", {FRAMES16_HUB.repo_id: fetched}).needed == ()
    assert check_benchmark(benchmark("robovqa"), settings_file(fetched, "frames16")).complete
