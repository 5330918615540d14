"""EgoIntent as its authors released it: the folder per event read as downloaded, the clip as the
observation window, every problem of a release (its clips included) in one error, the plausible next
steps as a setting, and the report's two published blocks (the CLI run: tests/e2e/test_egointent.py)."""

import csv
import json
import math
import re
import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from lmms_egoplan.core.media import frame_time
from lmms_egoplan.demo.egointent import EVENTS, STEP_FRAMES, VIDEOS, released_steps, write_dataset, write_release
from lmms_egoplan.demo.kit.media import read_index, write_video
from lmms_egoplan.egointent import report_face
from lmms_egoplan.egointent import task as egointent
from lmms_egoplan.egointent.data import RELEASE, EgoIntentDataError, layout_of, load_samples, read_flat
from lmms_egoplan.egointent.protocol import EgoIntentSettings
from lmms_egoplan.egointent.task import doc_to_visual
from tests.fixtures import LOGS_BEFORE_RUBRIC_NAMES


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("egointent") / "EgoIntent")


def docs_of(path: Path, **settings) -> list[dict]:
    return load_samples(EgoIntentSettings(annotations=path, **settings)).docs


def test_every_step_of_the_release_is_one_sample_under_the_releases_names(release):
    docs, steps = docs_of(release), released_steps()
    assert [d["step_id"] for d in docs] == [s.sample_id for s in steps] and len(docs) == 15
    for doc, step in zip(docs, steps):
        # indoor/outdoor from the folder, the scenario from the scene; the event is kept, never shown
        assert (doc["environment"], doc["scenario"], doc["event"]) == (step.event.environment, step.event.scene,
                                                                       step.event.event)
        assert doc["source_video"] == step.event.video_uid and doc["video"].endswith(f"step{step.step_id}.mp4")
        assert doc["local_intent"] == step.record["local_intent"]
        assert doc["procedural_intent"] == step.record["procedural_intent"]
        assert doc["next_step_plan"] == step.record["observed_next_step"]
        assert doc["plausible_next_steps"] == step.record["plausible_next_steps"]
        # the sample id the model sees carries no scene, event or task name
        assert not re.search(r"kitchen|yard|bedroom|noodles|leaves|bed", doc["step_id"])
        prompt = egointent.doc_to_text(doc)
        assert doc["step_id"] not in prompt and step.event.event not in prompt  # the id only with show_step_id
    assert {d["scenario"] for d in docs} == {"kitchen", "yard", "bedroom"}


def test_the_clip_is_the_window_sampled_at_6_fps_and_no_frame_at_or_after_obs_end_time_is_shown(release):
    for doc, step in zip(docs_of(release), released_steps()):
        frames = doc_to_visual(doc)
        shown = [read_index(frame) for frame in frames]  # each frame shows its number in the source video
        assert shown == [step.first_frame + i for i in doc["frame_indices"]]
        fps = step.event.fps
        assert all(Fraction(n) / fps < Fraction(step.record[RELEASE.end]) for n in shown), step.sample_id
        # from the clip's first frame to the last one before obs_end_time, whatever the clip holds after it (a
        # window shorter than a sampling interval: that last frame alone)
        last = step.event.first_frame + math.ceil(STEP_FRAMES[step.step_id - 1][1]) - 1
        assert shown[-1] == last < step.first_frame + step.clip_frames
        assert shown[0] == step.first_frame or shown == [last]
        at_6_fps = (last - step.first_frame) * 6 // fps + 1
        assert len(shown) == min(at_6_fps, 32) and doc["frames_capped"] == (at_6_fps > 32)
        times = [frame_time(frame).seconds for frame in frames]  # from the start of the window
        assert times[0] == 0 and times[-1] == pytest.approx((shown[-1] - shown[0]) / fps)
    assert sum(d["frames_capped"] for d in docs_of(release)) == 3


def test_both_layouts_plan_the_frames_of_the_same_steps_alike(release, tmp_path):
    """The flat format's videos hold the same steps at the same frame rates; frames are numbered from
    the clip's first frame in the release, from the video's in the flat format."""
    released = {(d["video_fps"], d["step_id"].rsplit("_", 1)[1]): d for d in docs_of(release)}
    for number, doc in enumerate(docs_of(write_dataset(tmp_path / "flat"))):
        video, step = divmod(number, len(STEP_FRAMES))
        ours = released[(float(VIDEOS[video].fps), str(step + 1))]
        assert [i + math.floor(STEP_FRAMES[step][0]) for i in ours["frame_indices"]] == doc["frame_indices"]


def damaged_copy(release: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "EgoIntent"
    shutil.copytree(release, copy)
    return copy


def edit_steps(label: Path, edit) -> None:
    data = json.loads(label.read_text())
    edit(data[RELEASE.steps])
    label.write_text(json.dumps(data))


def damage_media(root: Path) -> list[str]:
    """A missing clip, a clip shorter than its window, an empty clip; what the error says of each (at its start)."""
    kitchen, bedroom = root / "indoor" / "kitchen" / "boil_noodles", root / "indoor" / "bedroom" / "make_bed"
    (kitchen / "step2.mp4").unlink()
    write_video(bedroom / "step1.mp4", 3, fps=Fraction(25))  # its window lasts 1.32 s
    (bedroom / "step2.mp4").write_bytes(b"")
    where = "indoor/bedroom/make_bed/step_label.json: event make_bed"
    return [f"{where}, step 1: field obs_end_time: the clip is shorter than its window (obs_end_time - start_time = "
            f"1.320 s) ({bedroom / 'step1.mp4'}: 3 frames at 25 fps, 0.120 s)",
            f"{where}, step 2: video is empty (0 bytes): {bedroom / 'step2.mp4'}",
            f"indoor/kitchen/boil_noodles/step_label.json: event boil_noodles, step 2: video not found: "
            f"{kitchen / 'step2.mp4'} (the clip of step 2, named by field step_id)"]


def damage_annotations(root: Path) -> list[str]:
    """A step without obs_end_time, a step_id used twice in an event, a label file that is not JSON; what
    the error says of each (at its start)."""
    def damage(steps):
        del steps[2][RELEASE.end]  # step 3
        steps[4][RELEASE.step_id] = 4  # step 5 takes step 4's id
    edit_steps(root / "indoor" / "kitchen" / "boil_noodles" / RELEASE.label_file, damage)
    (root / "outdoor" / "yard" / "rake_leaves" / RELEASE.label_file).write_text('{"video_uid": "x", "steps": [')
    return ["indoor/kitchen/boil_noodles/step_label.json: event boil_noodles, step 3, field obs_end_time: missing",
            "indoor/kitchen/boil_noodles/step_label.json: event boil_noodles, step 4, field step_id: 4 is used by 2 "
            "steps of this event (their clips would share step4.mp4)",
            "outdoor/yard/rake_leaves/step_label.json: event rake_leaves: not valid JSON: Expecting value"]


def test_every_problem_of_a_release_its_clips_included_is_listed_in_one_error(release, tmp_path):
    root = damaged_copy(release, tmp_path)
    media, annotations = damage_media(root), damage_annotations(root)
    for skip in (False, True):  # annotation problems are never skipped
        with pytest.raises(EgoIntentDataError) as caught:
            load_samples(EgoIntentSettings(annotations=root, skip_missing=skip))
        message = str(caught.value)
        assert message.startswith(f"{6 if not skip else 3} problems in the EgoIntent release {root}"), message
        for line in annotations + ([] if skip else media):
            assert f"\n  {line}" in message, line
        assert ("EGOINTENT_SKIP_MISSING (metadata.skip_missing) to true to skip the 3 step(s)" in message) is not skip


def test_plausible_next_steps_null_reads_as_none_and_a_wrong_value_is_named(release, tmp_path):
    """The optional field: null is "none" (as an absent field), not an error; a string instead of a list is named."""
    root = damaged_copy(release, tmp_path)
    label = root / "indoor" / "kitchen" / "boil_noodles" / RELEASE.label_file
    edit_steps(label, lambda steps: steps[0].update({RELEASE.plausible_next_steps: None}))
    labels = json.loads(label.read_text())
    edited = f"{labels[RELEASE.video_uid]}_{labels[RELEASE.steps][0][RELEASE.step_id]}"
    docs = {doc["step_id"]: doc for doc in load_samples(EgoIntentSettings(annotations=root)).docs}
    assert docs[edited]["plausible_next_steps"] == [] and sum(bool(d["plausible_next_steps"]) for d in docs.values())
    edit_steps(label, lambda steps: steps[0].update({RELEASE.plausible_next_steps: "stir"}))
    with pytest.raises(EgoIntentDataError, match="event boil_noodles, step 1, field plausible_next_steps: must be a "
                                                 "list of non-empty strings, got 'stir'"):
        load_samples(EgoIntentSettings(annotations=root))


def test_events_cut_from_one_video_keep_every_step_with_ids_that_name_no_event(release, tmp_path):
    """Two events whose label files name the same video_uid (one Ego4D video, two events, step ids 1, 2, ...): every
    step is a sample, each id unique, ``<video_uid>_<n>_<step_id>`` with the event's ordinal, never its name; the
    other events' ids stay ``<video_uid>_<step_id>``."""
    root = damaged_copy(release, tmp_path)
    before = load_samples(EgoIntentSettings(annotations=root)).docs
    first, second = sorted(root.rglob(RELEASE.label_file))[:2]
    shared = json.loads(first.read_text())[RELEASE.video_uid]
    data = json.loads(second.read_text())
    moved, data[RELEASE.video_uid] = data[RELEASE.video_uid], shared
    second.write_text(json.dumps(data))
    after = load_samples(EgoIntentSettings(annotations=root)).docs
    ids = [doc["step_id"] for doc in after]
    assert len(ids) == len(set(ids)) == len(before)
    renamed = [i for i in ids if i.startswith(f"{shared}_")]
    steps = [len(json.loads(label.read_text())[RELEASE.steps]) for label in (first, second)]
    assert sorted(renamed) == sorted([f"{shared}_1_{n}" for n in range(1, steps[0] + 1)]
                                     + [f"{shared}_2_{n}" for n in range(1, steps[1] + 1)])
    assert {i for i in ids if not i.startswith(f"{shared}_")} == \
        {doc["step_id"] for doc in before if not doc["step_id"].startswith((f"{shared}_", f"{moved}_"))}
    assert not any(part in i for i in renamed for part in first.parent.relative_to(root).parts + ("step",))


def test_steps_whose_clips_cannot_be_used_are_skipped_and_counted_where_asked(release, tmp_path):
    from lmms_eval.tasks import TaskManager

    root = damaged_copy(release, tmp_path)
    expected = damage_media(root)
    loaded = load_samples(EgoIntentSettings(annotations=root, skip_missing=True))
    assert len(loaded.docs) == 12 and len(loaded.skipped) == 3
    assert all(media.message.startswith(line) for media, line in zip(loaded.skipped, expected))
    assert loaded.skipped[-1].sample_id == f"{EVENTS[0].video_uid}_2"
    # The task counts them in every sample's skipped_samples (lmms-eval reports the largest).
    tasks = TaskManager(include_path=str(Path(__file__).parents[2] / "tasks"), include_defaults=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EGOINTENT_ANNOTATIONS", str(root))
        patch.setenv("EGOINTENT_SKIP_MISSING", "true")
        task = tasks.load_task_or_group(["egointent"])["egointent"]
    doc = next(iter(task.test_docs()))
    assert len(list(task.test_docs())) == 12
    assert task.process_results(doc, ['{"local_intent": "x"}'])["skipped_samples"] == 3


def test_the_layout_is_read_from_the_path_or_chosen_and_a_mismatch_is_named(release, tmp_path):
    flat = write_dataset(tmp_path / "flat")
    assert (layout_of(release), layout_of(flat), layout_of(release, "release"), layout_of(flat, "flat")) == (
        "release", "flat", "release", "flat")
    with pytest.raises(EgoIntentDataError, match=r"is a folder, but EGOINTENT_DATA_LAYOUT \(metadata.data_layout\) "
                                                 r"is flat: the release is a folder, the flat format a .json / .jsonl "
                                                 r"file"):
        layout_of(release, "flat")
    with pytest.raises(EgoIntentDataError, match="is a file, but EGOINTENT_DATA_LAYOUT"):
        layout_of(flat, "release")
    with pytest.raises(EgoIntentDataError, match=rf"{tmp_path / 'flat'}: no step_label.json under this folder; the "
                                                 r"EgoIntent release holds <indoor\|outdoor>/<scene>/<event>/"
                                                 r"step_label.json"):
        load_samples(EgoIntentSettings(annotations=flat.parent))
    with pytest.raises(EgoIntentDataError, match="EGOINTENT_VIDEO_ROOT .* applies to the flat format only"):
        load_samples(EgoIntentSettings(annotations=release, video_root=tmp_path))
    # a label file that is not in an event folder under indoor/ or outdoor/
    stray = damaged_copy(release, tmp_path) / "indoor" / "kitchen" / RELEASE.label_file
    stray.write_text("{}")
    with pytest.raises(EgoIntentDataError, match=r"^indoor/kitchen/step_label.json: not at "
                                                 r"<indoor\|outdoor>/<scene>/<event>/step_label.json"):
        load_samples(EgoIntentSettings(annotations=stray.parents[2]))
    # the flat layout keeps working, and its references are those of the release's names
    assert [s.references for s in read_flat(flat)[0]][0].keys() == RELEASE.references.keys()


def test_a_clip_that_leads_out_of_the_release_is_named_unless_allowed(release, tmp_path):
    root = damaged_copy(release, tmp_path)
    clip = root / "outdoor" / "yard" / "rake_leaves" / "step1.mp4"
    outside = tmp_path / "elsewhere.mp4"
    clip.rename(outside)
    clip.symlink_to(outside)
    with pytest.raises(EgoIntentDataError, match=r"outdoor/yard/rake_leaves/step_label.json: event rake_leaves, "
                                                 r"step 1, field step_id: the clip of step 1 leads out of it through a "
                                                 r"symbolic link .*EGOINTENT_ALLOW_PATHS_OUTSIDE_ROOT"):
        load_samples(EgoIntentSettings(annotations=root))
    assert len(docs_of(root, allow_paths_outside_root=True)) == 15


def test_the_judge_sees_the_plausible_next_steps_only_where_next_step_references_says_so(release):
    answer = ['{"local_intent": "a", "procedural_intent": "b", "next_step_plan": "c"}']
    for setting, shown in (("observed", False), ("observed_and_plausible", True)):
        for doc in docs_of(release, next_step_references=setting):
            parts = egointent.process_results(doc, answer, None)["overall"]["judge_parts"]
            prompts = {field: part["judge_messages"][1]["content"] for field, part in parts.items()}
            assert all(f"Reference: {doc[field]}\n" in prompt for field, prompt in prompts.items())
            alternatives = shown and doc["plausible_next_steps"]
            line = f"Also acceptable: {'; '.join(doc['plausible_next_steps'])}\n"
            assert (line in prompts["next_step_plan"]) == bool(alternatives)
            assert ("(or with one of the answers also acceptable)" in prompts["next_step_plan"]) == bool(alternatives)
            assert not any("Also acceptable" in prompts[field] for field in ("local_intent", "procedural_intent"))


def test_the_check_command_reads_the_release_and_lists_the_steps_it_would_skip(release, tmp_path, capsys):
    from lmms_egoplan.cli import main

    assert main(["egointent-check", str(release)]) == 0
    printed = capsys.readouterr().out
    assert "15 steps in 3 videos" in printed
    assert "scenario_kitchen                     5 steps  (kitchen, indoor)" in printed
    root = damaged_copy(release, tmp_path)
    expected = damage_media(root)
    assert main(["egointent-check", str(root)]) == 2
    assert "3 problems in the EgoIntent release" in capsys.readouterr().err
    assert main(["egointent-check", str(root), "--skip_missing"]) == 0
    printed = capsys.readouterr().out
    assert "12 steps in 3 videos" in printed and f"3 steps skipped, their media unusable:\n  {expected[0]}" in printed
    assert main(["egointent-check", str(root), "--data_layout", "folder"]) == 2
    assert "--data_layout must be one of auto, release, flat, got 'folder'" in capsys.readouterr().err


def test_a_clip_longer_than_its_window_is_reported_and_shown_as_the_setting_longer_clips_says(release, tmp_path,
                                                                                              capsys):
    """A release-layout copy with one step's start_time moved 1 s later: its 8 s clip holds a 7 s window.
    egointent-check and the task's own loading (before any model) report it; by default the window that
    ends at the clip's end is shown, `start` keeps versions 1-3's reading, `error` stops."""
    from lmms_egoplan.cli import main

    root = damaged_copy(release, tmp_path)
    edit_steps(root / "indoor" / "kitchen" / "boil_noodles" / RELEASE.label_file,
               lambda steps: steps[3].update({RELEASE.start: steps[3][RELEASE.start] + 1.0}))
    step = next(s for s in released_steps() if s.event.event == "boil_noodles" and s.step_id == 4)
    assert step.event.fps == 30 and step.clip_frames == 240  # 8 s
    end, start, whole = ({d["step_id"]: d for d in docs_of(root, **settings)}
                         for settings in ({}, {"longer_clips": "start"}, {"longer_clips": "whole", "max_frames": None}))
    assert end[step.sample_id]["clip_excess"] == pytest.approx(1.0, abs=1e-6)
    # end: from 1 s into the clip to its last frame; start: from its first frame, the clip's last second never shown;
    # whole: all 8 s of the clip, 48 frames at 6 fps (no cap), the authors' input
    assert end[step.sample_id]["frame_indices"][0] == 30 and end[step.sample_id]["frame_indices"][-1] == 239
    assert start[step.sample_id]["frame_indices"][0] == 0 and start[step.sample_id]["frame_indices"][-1] == 209
    assert whole[step.sample_id]["frame_indices"][0] == 0 and whole[step.sample_id]["frame_indices"][-1] == 239
    assert len(whole[step.sample_id]["frame_indices"]) == 48
    assert (whole[step.sample_id]["clip_start"], whole[step.sample_id]["clip_end"]) == (0.0, 8.0)
    untouched = {d["step_id"]: d for d in docs_of(release)}
    for step_id, doc in end.items():  # every other step as before, in either reading
        assert doc["clip_excess"] == 0.0 or step_id == step.sample_id
        if step_id != step.sample_id:
            assert doc["frame_indices"] == start[step_id]["frame_indices"] == untouched[step_id]["frame_indices"]
    with pytest.raises(EgoIntentDataError, match=re.escape(
            f"event boil_noodles, step 4: the clip is 1.000 s longer than its window (obs_end_time - start_time = "
            f"7.000 s; {root / 'indoor/kitchen/boil_noodles/step4.mp4'}: 240 frames at 30 fps); "
            f"EGOINTENT_LONGER_CLIPS")):
        docs_of(root, longer_clips="error")
    summary = (f"1 clip(s) longer than their window (obs_end_time - start_time) by more than a frame, by up to "
               f"1.000 s ({step.sample_id}); first: {step.sample_id}; shown: the window that ends at each clip's end")
    assert main(["egointent-check", str(root)]) == 0 and summary in capsys.readouterr().out
    assert main(["egointent-check", str(root), "--longer_clips", "error"]) == 2
    assert "the clip is 1.000 s longer than its window" in capsys.readouterr().err
    assert main(["egointent-check", str(release)]) == 0 and "longer than" not in capsys.readouterr().out


def test_the_run_warns_of_longer_clips_when_it_loads_the_data_before_any_model(release, tmp_path, monkeypatch):
    from lmms_eval.tasks import TaskManager

    root = damaged_copy(release, tmp_path)
    edit_steps(root / "indoor" / "kitchen" / "boil_noodles" / RELEASE.label_file,
               lambda steps: steps[3].update({RELEASE.start: steps[3][RELEASE.start] + 1.0}))
    monkeypatch.setenv("EGOINTENT_ANNOTATIONS", str(root))
    monkeypatch.setenv("EGOINTENT_JUDGE_PREFLIGHT", "false")
    warnings = []  # lmms-eval replaces loguru's handlers: the task's warnings are recorded at the source
    monkeypatch.setattr(egointent.logger, "warning", warnings.append)
    TaskManager(include_path=str(Path(__file__).parents[2] / "tasks"),
                include_defaults=False).load_task_or_group(["egointent"])
    assert any("egointent: 1 clip(s) longer than their window (obs_end_time - start_time) by more than a frame, by up "
               "to 1.000 s" in warning for warning in warnings), warnings


# ---------------------------------------------------------------------------------------------
# The report: logs written before the rename, and the two published blocks
# ---------------------------------------------------------------------------------------------


def test_the_report_reads_procedural_intent_from_results_and_samples_written_as_global_intent(tmp_path):
    from lmms_egoplan.report import write_report
    from lmms_egoplan.suite import report_faces

    logs = tmp_path / "logs"
    shutil.copytree(LOGS_BEFORE_RUBRIC_NAMES / "intent", logs)
    # That run's audit trail carries a later second than its results (since fixed: the run's date-time on
    # core.run.SuiteRun); named as runs name it now, its ratings give the intervals.
    [trail], [results_file] = logs.glob("*_judgements_egointent.jsonl"), logs.glob("*_results.json")
    trail.rename(logs / trail.name.replace(trail.name[:15], results_file.name[:15]))
    report = write_report([logs], tmp_path / "report", report_faces())
    with open(tmp_path / "report" / "egointent.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    ours = next(row for row in rows if row["source"] == "this run")
    results = json.loads(results_file.read_text())["results"]
    assert float(ours["Procedural Intent (0-100)"]) == results["egointent"]["global_intent,none"]
    # its interval, from the logged samples' judged items (under the former name too)
    assert float(ours["Procedural Intent (0-100) 95% low"]) < float(ours["Procedural Intent (0-100)"]) < float(
        ours["Procedural Intent (0-100) 95% high"])
    published = [row for row in rows if row["source"].startswith("published")]
    assert {row["source"] for row in published} == {
        "published (EgoIntent leaderboard, e6cf8e9, results/leaderboard.md)",
        "published (EgoIntent, arXiv v1, Table 3)"}
    markdown = report.markdown.read_text()
    assert all(note in markdown for note in report_face.NOTES)
    assert all(note in report.html.read_text() for note in ("up to 19.4 points", "Only arXiv v1 reports Indoor"))


def test_the_published_blocks_are_what_the_notes_say_they_are():
    rows = report_face.FACE.published
    leaderboard = {r["model"]: r["values"] for r in rows if r["table"] == "results/leaderboard.md"}
    paper = {r["model"].lower(): r["values"] for r in rows if r["table"] == "Table 3"}
    assert len(leaderboard) == 15 and len(paper) == 15
    # three rows the issue quotes from the README's table
    assert leaderboard["Doubao-Seed-2.1-Turbo"] == {"local_intent": 57.98, "procedural_intent": 63.62,
                                                    "next_step_plan": 43.78, "overall": 55.13}
    qwen = leaderboard["Qwen3.5-Plus"]
    assert [qwen[k] for k in ("local_intent", "procedural_intent", "next_step_plan", "overall")] == [
        57.99, 57.76, 42.38, 52.71]
    assert leaderboard["Qwen2.5-VL-7B-Instruct"]["overall"] == 33.46
    for values in [*leaderboard.values(), *paper.values()]:  # Overall is the mean of the three (rounded)
        fields = [values["local_intent"], values["procedural_intent"], values["next_step_plan"]]
        assert values["overall"] == pytest.approx(sum(fields) / 3, abs=0.011)
    assert not any("indoor" in values for values in leaderboard.values())
    assert all({"indoor", "outdoor"} <= values.keys() for values in paper.values())
    # Kimi-VL-A3B-Thinking-2506 is "-16B" in v1: eleven models in both blocks (the README says so)
    both = [(values, paper.get(model.lower()) or paper[f"{model.lower()}-16b"]) for model, values in leaderboard.items()
            if model.lower() in paper or f"{model.lower()}-16b" in paper]
    assert len(both) == 11
    higher = [all(ours[name] > v1[name] for name in ("local_intent", "procedural_intent")) for ours, v1 in both]
    lower_next = [ours["next_step_plan"] < v1["next_step_plan"] for ours, v1 in both]
    assert (sum(higher), sum(lower_next)) == (10, 10)
    readme = (Path(__file__).parents[2] / "tasks" / "egointent" / "README.md").read_text()
    assert "for the eleven models in both" in readme and "higher on Local and Procedural for ten of them" in readme
    # arXiv v1 names its judge (a Qwen3 model, size not stated); the leaderboard names none
    assert {r["protocol"]["judge"] for r in rows if r["table"] == "Table 3"} == {
        "a Qwen3 model (size not stated; arXiv v1, section 4.1)"}
    assert {r["protocol"]["judge"] for r in rows if r["table"] == "results/leaderboard.md"} == {"not stated"}
    overall = max(abs(ours["overall"] - v1["overall"]) for ours, v1 in both)
    field = max(abs(ours[name] - v1[name]) for ours, v1 in both for name in ("local_intent", "procedural_intent",
                                                                                "next_step_plan"))
    assert (round(overall, 1), round(field, 1)) == (19.4, 25.9)
    assert f"up to {overall:.1f} points" in report_face.NOTES[0] and f"up to {field:.1f}." in report_face.NOTES[0]


def test_two_scenes_of_one_metric_name_and_an_event_without_steps_are_named(release, tmp_path):
    """Scenes "kitchen" and "Kitchen" would be scored as one scenario_kitchen; an event whose label file lists no step
    would lose its steps silently: both are named, with the rest of the release's problems."""
    root = damaged_copy(release, tmp_path)
    (root / "indoor" / "bedroom").rename(root / "indoor" / "Kitchen")
    label = root / "outdoor" / "yard" / "rake_leaves" / RELEASE.label_file
    label.write_text(json.dumps({**json.loads(label.read_text()), RELEASE.steps: []}))
    with pytest.raises(EgoIntentDataError) as caught:
        load_samples(EgoIntentSettings(annotations=root))
    assert str(caught.value).splitlines()[1:] == [
        "  outdoor/yard/rake_leaves/step_label.json: event rake_leaves: field steps is an empty list; fetch the "
        "release again;",
        "  scenarios 'Kitchen', 'kitchen' share the metric name label 'kitchen'; rename one"]
