"""`lmms-egoplan check-data` (issue 65 point 2) on the demo's data in the releases' layouts: each benchmark read by
its tasks' own loaders with the settings a run resolves, its records counted against the counts the settings file
declares (a subset) or the release's, every missing or unusable media file and every problem listed in full."""

import json

from lmms_egoplan.core.settings_file import SettingsFile
from lmms_egoplan.demo import egoplan_bench2, egothink
from lmms_egoplan.harness.data_check import check_benchmark, write_check_report
from lmms_egoplan.suite import benchmark


def bench2_file(fixture, **counts) -> SettingsFile:
    return SettingsFile(None, {"egoplan_bench2": {"annotation_dir": str(fixture.annotation_dir),
                                                  "ego4d_videos_root": str(fixture.ego4d_root)}},
                        expected_counts={"egoplan_bench2": counts} if counts else {})


def test_a_complete_subset_is_complete_by_its_declared_count_with_the_releases_beside_it(tmp_path):
    fixture = egoplan_bench2.build_fixture(tmp_path / "bench2")
    records = len(fixture.records())
    check = check_benchmark(benchmark("egoplan_bench2"), bench2_file(fixture, questions=records))
    assert check.complete and not check.missing and not check.problems
    assert check.summary() == (f"egoplan_bench2: complete: questions: {records} of {records} questions (a declared "
                               f"subset; the release has 1,321)")
    # Without the declaration, the release's count decides.
    undeclared = check_benchmark(benchmark("egoplan_bench2"), bench2_file(fixture))
    assert not undeclared.complete and undeclared.counts[0].expected == 1321 and undeclared.counts[0].found == records


def test_a_missing_video_is_named_with_every_question_that_needs_it_and_a_short_one_too(tmp_path):
    fixture = egoplan_bench2.build_fixture(tmp_path / "bench2")
    records = fixture.records()
    removed = fixture.ego4d_root / f"{records[0]['sample_id'].split('_')[0]}.mp4"
    removed.unlink()
    check = check_benchmark(benchmark("egoplan_bench2"), bench2_file(fixture, questions=len(records)))
    needing = [record["sample_id"] for record in records if record["sample_id"].startswith(removed.stem)]
    assert not check.complete and check.counts[0].found == len(records)  # the skipped ones counted
    assert check.missing == [f"egoplan_bench2: sample {sample}: video not found: {removed}; check "
                             f"EGOPLAN2_EGO4D_VIDEOS_ROOT (metadata.ego4d_videos_root)" for sample in needing]
    assert check.summary().endswith(f"; {len(needing)} samples with missing or unusable media")
    report = write_check_report(tmp_path / "report.txt", [check], SettingsFile())
    assert sum(str(removed) in line for line in report.read_text().splitlines()) == len(needing)


def test_a_clip_too_short_for_its_question_is_missing_media(tmp_path):
    fixture = egoplan_bench2.build_fixture(tmp_path / "bench2")
    records = fixture.records()
    last = max(records, key=lambda record: record["current_observation_frame"])
    last["current_observation_frame"] = 10_000  # past the end of its video
    fixture.annotation_file.write_text(json.dumps(records))
    check = check_benchmark(benchmark("egoplan_bench2"), bench2_file(fixture, questions=len(records)))
    assert len(check.missing) == 1 and f"sample {last['sample_id']}" in check.missing[0]
    assert "past the end of" in check.missing[0]


def test_a_loader_that_stops_at_missing_images_lists_every_one_and_the_part_is_not_counted(tmp_path):
    data_root = egothink.write_release(tmp_path / "egothink")
    images = sorted((data_root / "Activity" / "images").iterdir())
    for image in images:
        image.unlink()
    file = SettingsFile(None, {"egothink": {"source": "local", "data_root": str(data_root)}})
    check = check_benchmark(benchmark("egothink"), file)
    assert check.counts[0].found is None and not check.complete
    assert len(check.problems) == len(images) and all(p.startswith("ego_think_activity: ") for p in check.problems)
    assert all(any(image.name in problem for problem in check.problems) for image in images)
    assert check.summary() == (f"egothink: INCOMPLETE: questions: not counted, a loader stopped (700 questions "
                               f"expected: the release's count); {len(images)} problems, the first: "
                               f"{check.problems[0]}")


def test_one_cause_that_stops_every_task_is_said_once_with_its_tasks_and_on_the_summary_line(tmp_path, monkeypatch):
    """No settings file and the Hub's copy not on this machine stop the loaders of all twelve EgoThink tasks alike:
    one problem naming them (not twelve copies), and the summary line, which is what the console shows, says it."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hub-cache"))
    check = check_benchmark(benchmark("egothink"), SettingsFile())
    tasks = benchmark("egothink").data.parts[0].tasks
    assert len(tasks) == 12 and len(check.problems) == 1 and not check.complete
    assert check.problems[0].startswith(f"{', '.join(tasks)}: ") and "EgoThink/EgoThink" in check.problems[0]
    cause = check.problems[0].removeprefix(f"{', '.join(tasks)}: ")
    assert check.summary().endswith(f"; 1 problem: {tasks[0]} and 11 other tasks: {cause}")


def test_without_a_settings_file_the_console_says_so_before_any_data_are_read(tmp_path, capsys, monkeypatch):
    from lmms_egoplan.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("LMMS_EGOPLAN_SETTINGS", raising=False)
    monkeypatch.setenv("EGOINTENT_ANNOTATIONS", str(tmp_path / "not-here"))
    assert main(["check-data", "egointent", "--output", str(tmp_path / "report.txt")]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"Reading the data as a run would, with no settings file (none at {tmp_path}/config/lmms-egoplan/"
                     f"settings.yaml, and LMMS_EGOPLAN_SETTINGS is not set): each benchmark reads its default source "
                     f"and its variables; `lmms-egoplan prepare` writes one")
    assert (tmp_path / "report.txt").read_text().splitlines()[0] == first.replace(
        "Reading the data as a run would, with", "# lmms-egoplan check-data,")


def test_an_output_folder_that_cannot_be_made_is_named_before_any_data_are_read(tmp_path, capsys, monkeypatch):
    from lmms_egoplan.cli import main

    def not_before_the_output_is_checked(*args):
        raise AssertionError("the data were read before --output was checked")

    monkeypatch.setattr("lmms_egoplan.harness.data_check.check_benchmark", not_before_the_output_is_checked)
    settings, blocking = tmp_path / "settings.yaml", tmp_path / "notes.txt"
    settings.write_text(f"egothink:\n  data_root: {tmp_path}\n")
    blocking.write_text("a file where the report's folder was to go")
    assert main(["check-data", "egothink", "--settings", str(settings), "--output", str(blocking / "x.txt")]) == 1
    assert capsys.readouterr().err == (f"lmms-egoplan check-data: the folder of --output {blocking}: cannot make this "
                                       f"folder ({blocking} is a file, where a folder goes)\n")


def test_a_setting_not_set_is_a_problem_naming_it():
    check = check_benchmark(benchmark("egointent"), SettingsFile())
    assert check.problems == ["egointent: task egointent: set EGOINTENT_ANNOTATIONS (metadata.annotations) to the "
                              "EgoIntent release folder (or a flat annotation file); tasks/egointent/README.md, Data "
                              "preparation, says how to get it"]


def test_a_clip_damaged_in_its_middle_is_found_by_decoding_every_frame_its_question_reads(tmp_path):
    """Cosmos-Reason1's clip with bytes zeroed in its middle: it opens and its packets read (the probe passes); the
    frames its question shows do not decode. check-data decodes them as the run does (the spec's doc_to_visual, in the
    shared check) and names the clip; the other questions are complete."""
    from lmms_egoplan.demo import cosmos_reason1

    fixture = cosmos_reason1.build_fixture(tmp_path / "cosmos")
    settings = SettingsFile(None, {"cosmos_reason1": {"root": str(fixture.root),
                                                      "paibench_u_root": str(fixture.paibench_u_root)}})
    assert not check_benchmark(benchmark("cosmos_reason1"), settings).missing
    clip = sorted((fixture.root / "av" / "clips").glob("*.mp4"))[0]
    data = bytearray(clip.read_bytes())
    start, end = len(data) // 5, 2 * len(data) // 5  # the header and the packets' framing left whole
    data[start:end] = bytes(end - start)
    clip.write_bytes(bytes(data))
    check = check_benchmark(benchmark("cosmos_reason1"), settings)
    assert check.missing and all(line.startswith("cosmos_reason1_av: document ") and str(clip) in line
                                 for line in check.missing), check.missing
    assert not check.complete and "samples with missing or unusable media" in check.summary()
