"""What ``prepare`` makes of a Cosmos-Reason1 folder (the plan) and what ``check-data`` counts per part."""

import tarfile

from lmms_egoplan.cosmos_reason1.sources import DATA, HUB, PAIBENCH_U, plan
from lmms_egoplan.demo.cosmos_reason1 import build_fixture


def test_each_part_is_counted_against_the_releases_count_by_its_task():
    counts = {part.name: (part.tasks, part.release_count) for part in DATA.parts}
    assert counts["robovqa"] == (("cosmos_reason1_robovqa",), 110)
    assert counts["other_physics"] == (("cosmos_reason1_cs_other_physics",), 226)
    assert sum(count for _, count in counts.values()) == 1214 and DATA.hub == (HUB, PAIBENCH_U)


def test_the_plan_points_at_the_fetched_sources_and_names_what_is_missing(tmp_path):
    fixture = build_fixture(tmp_path / "fetched" / "benchmark")
    clips = fixture.root / "robovqa" / "clips"
    with tarfile.open(fixture.root / "robovqa" / "clips.tar.gz", "w:gz") as archive:
        archive.add(clips, arcname="clips")
    for clip in clips.iterdir():
        clip.unlink()
    clips.rmdir()
    for path in (fixture.root / "time" / "clips").iterdir():
        path.unlink()
    (fixture.root / "time" / "clips").rmdir()
    made = plan(tmp_path, {HUB.repo_id: tmp_path / "fetched", PAIBENCH_U.repo_id: tmp_path / "none"})
    assert made.settings == {"data_source": "official", "root": str(fixture.root),
                             "paibench_u_root": str(tmp_path / "none")}
    archives, absent = made.needed
    assert archives.items == (str(fixture.root / "robovqa" / "clips.tar.gz"),)
    assert archives.commands == (f"tar -xzf {fixture.root}/robovqa/clips.tar.gz -C {fixture.root}/robovqa",)
    assert absent.items == ("cosmos_reason1_cs_time",)


def test_the_plan_reads_paibench_u_where_the_official_files_are_absent(tmp_path):
    fixture = build_fixture(tmp_path / "data")
    made = plan(tmp_path, {HUB.repo_id: tmp_path / "none", PAIBENCH_U.repo_id: fixture.paibench_u_root})
    assert made.settings["data_source"] == "paibench_u" and not made.notes and not made.needed


def test_check_data_counts_each_part_names_the_shortfall_and_a_part_without_clips_is_not_run(tmp_path,
                                                                                           monkeypatch):
    import shutil

    from lmms_egoplan import suite
    from lmms_egoplan.core.settings_file import SettingsFile
    from lmms_egoplan.harness.data_check import check_benchmark

    monkeypatch.delenv("COSMOS_REASON1_ROOT", raising=False)
    fixture = build_fixture(tmp_path / "data")
    shutil.rmtree(fixture.root / "holoassist" / "clips")
    check = check_benchmark(suite.benchmark("cosmos_reason1"),
                            SettingsFile(None, {"cosmos_reason1": {"root": str(fixture.root)}}))
    counts = {count.part.name: (count.found, count.expected) for count in check.counts}
    assert counts["robovqa"] == (4, 110) and counts["space"] == (4, 80) and counts["holoassist"] == (None, 100)
    assert not check.complete and "robovqa: 4 of 110 questions (the release's count)" in check.summary()
    assert any("cosmos_reason1_holoassist: Cosmos-Reason1 holoassist: not run" in problem for problem in check.problems)
