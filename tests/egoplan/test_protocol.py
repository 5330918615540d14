"""EgoPlan-Bench: data loading, visual input, prompts, scoring, breakdowns and the submission file."""

import collections
import json
import random
import re
import shutil
from argparse import Namespace
from pathlib import Path
from unittest import mock

import pytest
from lmms_eval.utils import load_yaml_config
from loguru import logger
from PIL import Image

from lmms_egoplan.contract.benchmark import LoadedDocs, TaskContext
from lmms_egoplan.core import media
from lmms_egoplan.core.candidate_ranking import CandidateLossError
from lmms_egoplan.core.embeddings import SentenceEncoder
from lmms_egoplan.core.request_options import (
    ANSWER,
    ANSWER_AND_END_OF_TURN,
    EVERY_SCORED_TOKEN,
    LOSS_MEAN,
    NONZERO_LOSS_TOKENS,
    SCORED_SPAN,
)
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.core.statistics import ValueBin, equal_size_levels, parse_bins
from lmms_egoplan.demo.egoplan import EGO4D_VIDEOS, build_fixture
from lmms_egoplan.demo.kit.media import read_index, write_frame_folder, write_video
from lmms_egoplan.egoplan import data as egoplan_data
from lmms_egoplan.egoplan import settings as egoplan_settings
from lmms_egoplan.egoplan import task as egoplan
from lmms_egoplan.harness.run_files import LmmsEvalRunFiles
from lmms_egoplan.models.likelihood import mean_loss
from lmms_egoplan.models.visuals import VisualLimits, prepare_visuals

TASKS = Path(__file__).resolve().parents[2] / "tasks" / "egoplan"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("egoplan"))


def settings_for(fixture, split="validation", **overrides):
    annotation = "EgoPlan_validation.json" if split == "validation" else "EgoPlan_test.json"
    return resolve_settings(egoplan_settings.EgoPlanSettings, task="egoplan_test_case",
                            metadata={"annotation_file": annotation}, env_prefix="EGOPLAN",
                            environ=fixture.env(**overrides))


def load(fixture, split="validation", **overrides):
    return egoplan_data.load_samples(settings_for(fixture, split, **overrides), labelled=split == "validation")


def shown_frames(doc):
    """(clips, observation image or None): frame numbers decoded from the pixels the model gets,
    grouped as the suite's backend groups them (a video per clip, then the observation image if any)."""
    visuals = egoplan.doc_to_visual(doc)
    assert all(isinstance(v, Image.Image) for v in visuals)  # lmms-eval's backends: a flat list of images
    grouped = media.group_visuals(visuals)
    observation = grouped.pop() if isinstance(grouped[-1], Image.Image) else None
    assert observation is None or media.VIDEO_CLIP_KEY not in observation.info
    assert all(isinstance(clip, list) for clip in grouped)
    assert [clip[0].info[media.VIDEO_CLIP_KEY] for clip in grouped] == [
        egoplan.progress_clip_name(position) for position in range(len(grouped))]
    return [[read_index(frame) for frame in clip] for clip in grouped], observation and read_index(observation)


# --- Data -------------------------------------------------------------------------------------


def test_docs_keep_the_release_records_choice_order_and_golden_index(fixture):
    loaded = load(fixture)
    records = fixture.records()
    assert loaded.skipped == [] and [d["sample_id"] for d in loaded.docs] == [r["sample_id"] for r in records]
    for doc, record in zip(loaded.docs, records):
        assert egoplan.doc_to_choice(doc) == [record[f"choice_{x}"] for x in "abcd"]
        assert egoplan.doc_to_choice(doc)[egoplan.doc_to_target(doc)] == record["answer"]
        assert doc["progress_length"] == len(record["task_progress_metadata"])
    assert {d["media_kind"] for d in loaded.docs} == {"epic_frames", "ego4d_video"}


def test_test_split_loads_without_labels(fixture):
    docs = load(fixture, "test").docs
    assert [d["sample_id"] for d in docs] == [201, 202, 203]
    assert all(egoplan.doc_to_target(d) is None and d["answer"] is None for d in docs)


# --- Visual input -----------------------------------------------------------------------------


SAMPLE_115_OFFICIAL_FRAMES = [36, 139, 242, 346, 449, 553, 656, 760]


@pytest.mark.parametrize("source", ["raw", "clips"])
def test_by_default_one_clip_of_eight_frames_ends_at_the_observation_as_the_official_evaluation_shows_it(
        fixture, source, tmp_path, sample_115):
    records = fixture.records()
    records[0].update({field: sample_115[field] for field in ("sample_id", "video_id", "current_observation_frame",
                                                              "task_progress_metadata")})
    annotation = tmp_path / "EgoPlan_validation.json"
    annotation.write_text(json.dumps(records))
    epic_root, clips_dir = tmp_path / "epic", tmp_path / "clips"
    shutil.copytree(fixture.epic_root, epic_root)
    write_frame_folder(egoplan_data.epic_frame_folder(epic_root, "P01_13"), range(401, 761))  # the fixture's end at 400
    shutil.copytree(fixture.clips_dir, clips_dir)
    write_video(clips_dir / "115.mp4", first_index=36, num_frames=760 - 36 + 1, fps=30)
    docs = egoplan_data.load_samples(settings_for(fixture, annotation_file=annotation, visual_source=source,
                                                  epic_frames_root=epic_root, clips_dir=clips_dir), labelled=True).docs
    assert shown_frames(docs[0]) == ([SAMPLE_115_OFFICIAL_FRAMES], None)  # one video clip, no separate image
    for doc, record in zip(docs[1:], records[1:]):
        clips, observation = shown_frames(doc)
        actions, last = record["task_progress_metadata"], record["current_observation_frame"]
        assert observation is None and len(clips) == 1 and len(clips[0]) == 8 and clips[0][-1] == last
        if actions:
            assert clips[0] == egoplan_data.official_clip(record, 8) and clips[0][0] == actions[0]["start_frame"]
        else:
            assert clips[0] == [last] * 8
    # num_frames counts the whole clip, the observation included.
    assert egoplan_data.official_clip(records[0], 4) == [36, 277, 518, 760]
    assert egoplan_data.official_clip(records[0], 1) == [760]
    assert egoplan_data.official_clip({**records[0], "current_observation_frame": 36}, 3) == [36] * 3


def test_the_released_sample_115_shows_the_official_frames(sample_115):
    record = sample_115
    settings = egoplan_settings.EgoPlanSettings()
    assert egoplan_data.frame_plan(record, settings) == egoplan_data.FramePlan([SAMPLE_115_OFFICIAL_FRAMES], False)


def official_clip_frames(record, n_frms=8):
    """The frame numbers of the clip ``epic_kitchens_video_process`` builds (ChenYi99/EgoPlan
    ``src/video_llama_interface.py@67f506e``; ``ego4d_video_process`` computes the same indices), its statements
    transcribed with the frames replaced by their numbers: the oracle."""
    import numpy as np

    current_observation_frame_idx = record["current_observation_frame"]
    task_progress_metadata = record["task_progress_metadata"]
    if len(task_progress_metadata) > 0:
        start_frame_idx = task_progress_metadata[0]["start_frame"]
        end_frame_idx = current_observation_frame_idx
        frame_indices = np.arange(start_frame_idx, end_frame_idx,
                                  (end_frame_idx - start_frame_idx) / (n_frms - 1)).astype(int).tolist()
        clip = frame_indices[:n_frms - 1]
        clip.append(current_observation_frame_idx)
    else:
        clip = [current_observation_frame_idx] * n_frms
    return clip


def test_the_official_clip_is_the_official_codes_on_any_task_span():
    """Spans short and long, starts near 0 and deep into a video, 2 to 16 frames; among them spans where the
    official ``np.arange`` yields one index too many (span 17 of 8 frames: its 8th index is the observation itself,
    which the official code drops with ``[:n_frms - 1]``)."""
    rng = random.Random(0)
    cases = [(0, 17, 8), (36, 760, 8)] + [
        (rng.choice([0, 1, rng.randint(0, 600_000)]), rng.choice([rng.randint(1, 50), rng.randint(1, 50_000)]),
         rng.choice([2, 4, 8, 16])) for _ in range(3000)]
    for start, span, frames in cases:
        record = {"current_observation_frame": start + span,
                  "task_progress_metadata": [{"start_frame": start, "stop_frame": start + span}]}
        assert egoplan_data.official_clip(record, frames) == official_clip_frames(record, frames), (start, span)
    assert egoplan_data.official_clip({"current_observation_frame": 9, "task_progress_metadata": []}, 8) == \
        official_clip_frames({"current_observation_frame": 9, "task_progress_metadata": []})


@pytest.mark.parametrize("source", ["raw", "clips"])
def test_each_clip_frame_carries_its_real_time_from_the_first_action(fixture, source):
    """EPIC-KITCHENS frame numbers count at the video's rate (P01_13 and P02_03: 59.94 fps,
    EPIC_100_video_info.csv), Ego4D's at 30 fps; a pre-cut clip's frames are timed by its container
    (the fixture's clips: 30 fps, one frame per source frame from the first action's start)."""
    epic_rate = 60000 / 1001
    for doc in load(fixture, visual_source=source).docs:
        [clip] = [item for item in media.group_visuals(egoplan.doc_to_visual(doc)) if isinstance(item, list)]
        numbers = doc["clips"][0]
        rate = 30.0 if source == "clips" or doc["video_source"] == "Ego4D" else epic_rate
        times = [media.frame_time(frame) for frame in clip]
        assert ([time.seconds for time in times]
                == pytest.approx([(n - doc["clip_first_frame"]) / rate for n in numbers]))
        assert all(time.source_fps == pytest.approx(rate) for time in times)


def test_epic_frame_rates_follow_the_video_info_and_a_setting_overrides_them(fixture):
    assert egoplan_data.epic_frame_rate("P01_13") == pytest.approx(59.94, abs=0.01)
    assert egoplan_data.epic_frame_rate("P03_105") == 50.0  # the EPIC-KITCHENS-100 extension
    assert egoplan_data.epic_frame_rate("P09_07") == pytest.approx(29.97, abs=0.01)
    assert egoplan_data.epic_frame_rate("P17_02") == pytest.approx(47.95, abs=0.01)
    assert egoplan_data.epic_frame_rate("P18_09") == 90.0
    docs = load(fixture, epic_annotation_fps=25).docs
    assert {doc["frame_rate"] for doc in docs if doc["video_source"] == "EpicKitchens"} == {25.0}
    assert {doc["frame_rate"] for doc in docs if doc["video_source"] == "Ego4D"} == {30.0}
    assert {doc["frame_rate"] for doc in load(fixture, visual_source="clips").docs} == {None}


@pytest.mark.parametrize("source", ["raw", "clips"])
def test_uniform_progress_runs_from_the_first_action_to_the_observation_and_never_past_it(fixture, source):
    docs = load(fixture, visual_source=source, num_frames=6, frame_sampling="uniform").docs
    for doc, record in zip(docs, fixture.records()):
        clips, observation = shown_frames(doc)
        assert observation == record["current_observation_frame"]
        assert len(clips) == 1 and clips == doc["clips"]  # one video, then the observation image
        progress = clips[0]
        assert len(progress) == 6 and progress == sorted(progress)
        actions = record["task_progress_metadata"]
        if actions:
            assert progress[0] == actions[0]["start_frame"] and progress[-1] < observation
        else:  # nothing done yet: the observation stands in for the progress
            assert progress == [observation] * 6


@pytest.mark.parametrize("source", ["raw", "clips"])
def test_keyframes_come_from_the_last_completed_action_segments_one_video_each(fixture, source):
    docs = load(fixture, visual_source=source, frame_sampling="keyframes", keyframe_segments=2,
                keyframes_per_segment=3).docs
    for doc, record in zip(docs, fixture.records()):
        clips, observation = shown_frames(doc)
        assert clips == doc["clips"]
        assert observation == record["current_observation_frame"] and max(map(max, clips)) <= observation
        segments = [a for a in record["task_progress_metadata"] if a["stop_frame"] <= observation][-2:]
        if not segments:
            assert clips == [[observation] * 3]
            continue
        assert len(clips) == len(segments)
        for clip, segment in zip(clips, segments):
            assert len(clip) == 3 and clip[0] == segment["start_frame"] and max(clip) <= segment["stop_frame"]


def test_keyframe_clips_reach_video_models_as_one_video_each_even_where_they_share_frames(fixture, tmp_path):
    # Sample 102: three actions, each ending where the next starts, the last at the observation;
    # more keyframes than frames per segment, so every segment's last frame is also sampled.
    records = fixture.records()
    record = records[1]
    actions = record["task_progress_metadata"]
    for action, following in zip(actions, actions[1:]):
        action["stop_frame"] = following["start_frame"]
    actions[-1]["stop_frame"] = record["current_observation_frame"]
    annotation = tmp_path / "EgoPlan_validation.json"
    annotation.write_text(json.dumps(records))
    settings = settings_for(fixture, annotation_file=annotation, frame_sampling="keyframes",
                            keyframe_segments=3, keyframes_per_segment=24)
    doc = egoplan_data.load_samples(settings, labelled=True).docs[1]
    clips, observation = shown_frames(doc)
    assert clips == doc["clips"] and [len(clip) for clip in clips] == [24] * 3
    assert clips[0][-1] == clips[1][0] and clips[1][-1] == clips[2][0] and clips[2][-1] == observation
    # The suite's backend: 3 videos + the observation image for video models, 73 images otherwise.
    native = prepare_visuals(egoplan.doc_to_visual(doc), limits=VisualLimits(), video_native=True,
                             takes_images=True, model_name="m")
    assert native.parts == [{"type": "video"}] * 3 + [{"type": "image"}]
    assert [[read_index(frame) for frame in video.frames] for video in native.videos] == clips
    flat = prepare_visuals(egoplan.doc_to_visual(doc), limits=VisualLimits(), video_native=False,
                           takes_images=True, model_name="m")
    assert [read_index(image) for image in flat.images] == egoplan_data.doc_frame_numbers(doc)


def test_ego4d_frame_numbers_count_at_the_annotation_rate_whatever_the_file_rate(fixture, tmp_path):
    # The same Ego4D video re-encoded at 60 fps: annotation frame n (30 fps) is file frame 2n.
    for video_id, count in EGO4D_VIDEOS.items():
        write_video(tmp_path / f"{video_id}.mp4", num_frames=2 * count, fps=60)
    docs = [d for d in load(fixture, ego4d_videos_root=tmp_path).docs if d["media_kind"] == "ego4d_video"]
    for doc in docs:
        clips, _ = shown_frames(doc)
        assert clips[0][-1] == 2 * doc["current_observation_frame"]
        assert clips == [[2 * n for n in clip] for clip in doc["clips"]]


def test_frames_are_decoded_once_for_the_four_candidate_requests(fixture):
    doc = next(d for d in load(fixture).docs if d["media_kind"] == "ego4d_video")
    with mock.patch.object(egoplan, "_read_frames", wraps=egoplan._read_frames) as reader:
        egoplan._visuals.cache_clear()
        calls = [egoplan.doc_to_visual(doc) for _ in range(4)]
    assert reader.call_count == 1
    assert all(c == calls[0] and c is not calls[0] for c in calls[1:])


def test_max_side_bounds_the_frame_resolution(fixture):
    doc = load(fixture, max_side=32, frame_sampling="uniform").docs[0]
    assert all(max(image.size) == 32 for image in egoplan.doc_to_visual(doc))


def test_ego4d_frames_are_read_at_the_short_side_of_the_official_copies_epic_frames_as_they_are(fixture):
    """The official evaluation reads the Ego4D v1_288p copies; prepare fetches the full-scale videos, whose frames
    ego4d_short_side (288) brings to that size. The fixture's 64 px frames stand for full scale at a short side of
    48; EPIC-KITCHENS frames and pre-cut clips keep their size; none keeps the file's."""
    def sizes(**overrides):
        docs = load(fixture, frame_sampling="uniform", **overrides).docs
        return {kind: {image.size for doc in docs if doc["media_kind"] == kind for image in egoplan.doc_to_visual(doc)}
                for kind in ("ego4d_video", "epic_frames")}

    assert sizes() == {"ego4d_video": {(64, 64)}, "epic_frames": {(64, 64)}}  # 64 px: below 288 already
    assert sizes(ego4d_short_side=48) == {"ego4d_video": {(48, 48)}, "epic_frames": {(64, 64)}}
    assert sizes(ego4d_short_side=48, max_side=40)["ego4d_video"] == {(40, 40)}  # the smaller limit holds
    assert sizes(ego4d_short_side="none") == sizes()


# --- The SEED-Bench-R1 package (Levels 1-2) ----------------------------------------------------


@pytest.mark.parametrize("sampling", ["official", "uniform"])
def test_the_seed_bench_r1_package_shows_the_release_frames_its_observation_an_image_of_its_own(fixture, sampling):
    """The package's clip spans the task progress (the fixture's: its source frames from the first
    action's start to the observation), so the plan's frames, placed in it by position, are the
    release's; the observation is the package's image, after the clip; a question with nothing done
    yet has no clip and shows its observation image in every place. Its records carry no frame numbers."""
    release = load(fixture, frame_sampling=sampling).docs
    package = load(fixture, data_source="seed_bench_r1", frame_sampling=sampling).docs
    assert [d["sample_id"] for d in package] == [d["sample_id"] for d in release]
    for doc, twin in zip(package, release):
        clips, observation = shown_frames(doc)
        assert len(clips) == 1 and [*clips[0], observation] == egoplan_data.doc_frame_numbers(twin)
        assert (doc["similarity_level"], doc["progress_bucket"]) == (twin["similarity_level"], twin["progress_bucket"])
        assert (doc["current_observation_frame"] is None
                and (doc["media_path"] is None) == (twin["progress_length"] == 0))


def test_the_package_holds_val_only_gives_no_keyframes_and_names_what_is_missing(fixture, tmp_path):
    with pytest.raises(SettingsError, match=r"Val only \(Levels 1-2\).*EGOPLAN_DATA_SOURCE"):
        load(fixture, "test", data_source="seed_bench_r1")
    with pytest.raises(SettingsError, match=r"EGOPLAN_FRAME_SAMPLING .* keyframes needs each action's frames"):
        load(fixture, data_source="seed_bench_r1", frame_sampling="keyframes")
    root = tmp_path / "copy"
    shutil.copytree(fixture.root, root)
    clip = root / "SEED-Bench-R1" / "videos" / "Ego4D" / "106.mp4"
    clip.unlink()
    with pytest.raises(egoplan_data.EgoPlanDataError, match=rf"sample 106: progress video not found: {clip}; check "
                                                            r"EGOPLAN_SEED_BENCH_R1_ROOT"):
        load(build_fixture(root), data_source="seed_bench_r1")
    assert [d["sample_id"] for d in load(build_fixture(root), data_source="seed_bench_r1",
                                         skip_missing="true").docs] == [
        101, 102, 103, 104, 105, 107, 108]


def test_the_package_without_its_folder_or_with_a_sample_id_in_both_levels_says_so(fixture, tmp_path):
    with pytest.raises(SettingsError, match=r"^EgoPlan: EGOPLAN_DATA_SOURCE .* is seed_bench_r1 but "
                                            r"EGOPLAN_SEED_BENCH_R1_ROOT .* \(the package's folder\) is not set$"):
        load(fixture, data_source="seed_bench_r1", seed_bench_r1_root="")
    root = tmp_path / "copy"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    levels = Path(copy.package_root) / "annotations"
    first = (levels / "validation_L1.jsonl").read_text().splitlines()[0]
    with (levels / "validation_L2.jsonl").open("a") as level_2:
        level_2.write(first + "\n")
    repeated = json.loads(first)["sample_id"]
    with pytest.raises(egoplan_data.EgoPlanDataError) as error:
        load(copy, data_source="seed_bench_r1")
    assert str(error.value) == (f"the SEED-Bench-R1 package {copy.package_root}: sample_id(s) {repeated!r} appear more "
                                f"than once; each record needs its own (results and the submission are keyed by it)")


# --- Bad input --------------------------------------------------------------------------------


@pytest.fixture()
def broken(tmp_path, fixture):
    """A copy of the data with one EPIC frame, one Ego4D video and one clip missing."""
    root = tmp_path / "broken"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    doc_103 = next(d for d in load(copy).docs if d["sample_id"] == 103)
    (media.FrameFolder(doc_103["media_path"]).frame_path(doc_103["clips"][0][2])).unlink()
    (copy.ego4d_root / "4e5f6a7b-ego4d-video-two.mp4").unlink()  # samples 107 and 108
    (copy.clips_dir / "106.mp4").unlink()
    return copy


def test_every_problem_of_the_data_records_and_media_is_listed_in_one_error(broken):
    records = broken.records()
    records[1]["choice_c"] = 3
    records.append({**records[0], "sample_id": records[4]["sample_id"]})
    broken.validation_file.write_text(json.dumps(records))
    with pytest.raises(egoplan_data.EgoPlanDataError) as error:
        load(broken)
    message = str(error.value)
    assert message.startswith("5 problems in the EgoPlan data:\n")
    assert f"{broken.validation_file}, record #1 (sample_id 102): choice_c must be a non-empty string, got 3" in message
    assert f"{broken.validation_file}: sample_id(s) 105 appear more than once" in message
    assert "sample 103: 1 frame(s) unusable" in message and "frame_0000000" in message
    assert "sample 107: video not found" in message and "sample 108: video not found" in message
    assert "EGOPLAN_EPIC_FRAMES_ROOT" in message and "EGOPLAN_EGO4D_VIDEOS_ROOT" in message
    assert message.endswith("Set EGOPLAN_SKIP_MISSING (metadata.skip_missing) to true to skip the samples whose media "
                            "are unusable instead (they are counted in the skipped_samples metric)")
    broken.validation_file.write_text(json.dumps(records[:-1]))
    with pytest.raises(egoplan_data.EgoPlanDataError) as error:  # skipping leaves only the record's problem
        load(broken, skip_missing="true")
    assert str(error.value).startswith(f"EgoPlan annotation file {broken.validation_file}, record #1")
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=r"sample 106: clip not found: .*106\.mp4.*EGOPLAN_CLIPS_DIR"):
        load(broken, visual_source="clips")


@pytest.mark.parametrize("damage", ["empty frame", "truncated frame", "frame not an image", "empty clip",
                                    "clip not a video"])
def test_an_unusable_frame_or_clip_is_named_at_load_with_its_sample_and_setting(damage, fixture, tmp_path):
    """What each damage is called at load (tests/e2e/test_bad_input.py runs one of each kind through
    the CLI: the run stops before the model, naming it on its last line)."""
    root = tmp_path / "damaged"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    if damage.endswith("frame"):
        doc = next(d for d in load(copy).docs if d["media_kind"] == "epic_frames")
        damaged, setting, visual_source = media.FrameFolder(doc["media_path"]).frame_path(doc["clips"][0][-2]), \
            "EGOPLAN_EPIC_FRAMES_ROOT", "raw"
    else:
        doc = next(d for d in load(copy).docs if d["sample_id"] == 106)
        damaged, setting, visual_source = copy.clips_dir / "106.mp4", "EGOPLAN_CLIPS_DIR", "clips"
    if damage.startswith("empty"):
        damaged.write_bytes(b"")
    elif damage == "frame not an image":  # found by its first bytes (tests/e2e/test_failed_runs.py: before the model)
        damaged.write_text("<html>rate limit exceeded</html>\n")
    elif damage == "truncated frame":
        damaged.write_bytes(damaged.read_bytes()[:int(0.6 * damaged.stat().st_size)])
    else:
        damaged.write_bytes(b"\x00\x01garbage" * 999)
    with pytest.raises(egoplan_data.EgoPlanDataError) as error:
        load(copy, visual_source=visual_source)
    message = str(error.value)
    assert f"sample {doc['sample_id']}" in message and str(damaged) in message and setting in message, message


def test_skip_missing_drops_and_counts_the_samples(broken):
    loaded = load(broken, skip_missing="true")
    assert [d["sample_id"] for d in loaded.docs] == [101, 102, 104, 105, 106]
    assert [problem.sample_id for problem in loaded.skipped] == [103, 107, 108]
    assert loaded.skipped[1].path == str(broken.ego4d_root / "4e5f6a7b-ego4d-video-two.mp4")
    assert "video not found" in str(loaded.skipped[1]) and "EGOPLAN_EGO4D_VIDEOS_ROOT" in str(loaded.skipped[1])


def test_observation_past_the_end_of_a_video_is_reported(fixture, tmp_path):
    records = fixture.records()
    records[4]["current_observation_frame"] = 10_000  # sample 105, Ego4D video of 330 frames
    bad = tmp_path / "EgoPlan_validation.json"
    bad.write_text(json.dumps(records))
    with pytest.raises(egoplan_data.EgoPlanDataError, match=r"sample 105: frame 10000 .*past the end of .*330 frames"):
        egoplan_data.load_samples(settings_for(fixture, annotation_file=bad), labelled=True)


def test_bad_records_and_settings_are_named(fixture, tmp_path):
    records = fixture.records()
    del records[1]["choice_c"]
    bad = tmp_path / "EgoPlan_validation.json"
    bad.write_text(json.dumps(records))
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=r"record #1 \(sample_id 102\): missing field\(s\) choice_c"):
        egoplan_data.load_samples(settings_for(fixture, annotation_file=bad), labelled=True)
    records = fixture.records()
    records[3]["sample_id"] = records[6]["sample_id"] = records[0]["sample_id"]
    records[5]["sample_id"] = records[1]["sample_id"]
    bad.write_text(json.dumps(records))
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=r"EgoPlan_validation\.json: sample_id\(s\) 101, 102 appear more "):
        egoplan_data.load_samples(settings_for(fixture, annotation_file=bad), labelled=True)
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=r"annotation file EgoPlan_validation.json not found: .*EGOPLAN_ANNOTATION_DIR"):
        load(fixture, annotation_dir=tmp_path / "nowhere")
    # No annotation folder: the error names Val's other source too (a user who set up only EgoPlan-Bench2's package).
    with pytest.raises(SettingsError, match=r"set EGOPLAN_ANNOTATION_DIR .* or, for Val, set EGOPLAN_DATA_SOURCE .* "
                                            r"to seed_bench_r1 and EGOPLAN_SEED_BENCH_R1_ROOT .* to the "):
        load(fixture, annotation_dir="")
    with pytest.raises(SettingsError, match="EGOPLAN_EGO4D_VIDEOS_ROOT .* is not set"):
        load(fixture, ego4d_videos_root="")
    with pytest.raises(SettingsError, match="EGOPLAN_FRAME_SAMPLING .*official, uniform, keyframes"):
        load(fixture, frame_sampling="dense")
    with pytest.raises(SettingsError, match="EGOPLAN_PROGRESS_LENGTH_BINS .*contiguous from 0"):
        load(fixture, progress_length_bins="1-4,5+")


def test_a_similarity_model_that_does_not_load_stops_the_labelled_tasks_at_load(fixture, tmp_path, monkeypatch):
    """Found when the task loads, not at aggregation after the whole (paid) model run."""
    for name, value in fixture.env(similarity_model=tmp_path / "no-such-model").items():
        monkeypatch.setenv(name, value)
    for yaml in ("egoplan_val.yaml", "egoplan_val_gen.yaml"):
        config = load_yaml_config(str(TASKS / yaml))
        with pytest.raises(SettingsError, match=r"EGOPLAN_SIMILARITY_MODEL .*cannot load .*no-such-model"):
            config["class"](config=config)
    config = load_yaml_config(str(TASKS / "egoplan_test.yaml"))  # no similarity breakdown on Test
    assert len(config["class"](config=config).eval_docs) == len(fixture.records("test"))


def test_likelihood_tasks_score_the_official_loss_and_refuse_backends_that_cannot(fixture, monkeypatch):
    """egoplan_val / egoplan_test ask on every request for the answer and end-of-turn tokens, averaged over those
    whose loss is not 0 (the official code's division); a backend that declares neither is refused before any model
    call, naming at once both settings that change them."""
    for name, value in fixture.env().items():
        monkeypatch.setenv(name, value)
    for yaml in ("egoplan_val.yaml", "egoplan_test.yaml"):
        config = load_yaml_config(str(TASKS / yaml))
        task = config["class"](config=config)
        with pytest.raises(SettingsError, match=r"scored_span 'answer_and_end_of_turn' and loss_mean "
                                                 r"'nonzero_loss_tokens' .*backend 'dummy' cannot honour.*set "
                                                 r"EGOPLAN_SCORED_TOKENS \(metadata.scored_tokens\) to 'answer' and "
                                                 r"EGOPLAN_LOSS_MEAN \(metadata.loss_mean\) to 'every_scored_token' "
                                                 r"\(lmms-eval's conventions\)"):
            task._bind_to_backend(Namespace(model="dummy"))
        task._bind_to_backend(Namespace(model="egoplan_hf"))
        requests = task.construct_requests(doc_id=0, ctx="Next?", metadata={
            "task": config["task"], "doc_id": 0, "repeats": 1, "split": task.config.test_split})
        assert len(requests) == 4
        assert {SCORED_SPAN.of(request) for request in requests} == {ANSWER_AND_END_OF_TURN}
        assert {LOSS_MEAN.of(request) for request in requests} == {NONZERO_LOSS_TOKENS}
    monkeypatch.setenv("EGOPLAN_LOSS_MEAN", EVERY_SCORED_TOKEN)  # the mean over every scored token
    config = load_yaml_config(str(TASKS / "egoplan_val.yaml"))
    task = config["class"](config=config)
    task._bind_to_backend(Namespace(model="egoplan_hf"))
    requests = task.construct_requests(doc_id=0, ctx="Next?", metadata={
        "task": "egoplan_val", "doc_id": 0, "repeats": 1, "split": "validation"})
    assert {LOSS_MEAN.of(request) for request in requests} == {EVERY_SCORED_TOKEN}
    monkeypatch.setenv("EGOPLAN_SCORED_TOKENS", "answer")
    monkeypatch.delenv("EGOPLAN_LOSS_MEAN")
    with pytest.raises(SettingsError, match=r"asks for loss_mean 'nonzero_loss_tokens' \(.*backend 'dummy'.*set "
                                             r"EGOPLAN_LOSS_MEAN .* 'every_scored_token' \(lmms-eval's convention\)"):
        config["class"](config=config)._bind_to_backend(Namespace(model="dummy"))
    monkeypatch.setenv("EGOPLAN_LOSS_MEAN", EVERY_SCORED_TOKEN)
    task = config["class"](config=config)
    task._bind_to_backend(Namespace(model="dummy"))  # lmms-eval's conventions: any backend
    requests = task.construct_requests(doc_id=0, ctx="Next?", metadata={
        "task": "egoplan_val", "doc_id": 0, "repeats": 1, "split": "validation"})
    assert {SCORED_SPAN.of(request) for request in requests} == {ANSWER}
    assert not any(hasattr(request, option.name) for request in requests for option in (SCORED_SPAN, LOSS_MEAN))
    config = load_yaml_config(str(TASKS / "egoplan_val_gen.yaml"))
    config["class"](config=config)._bind_to_backend(Namespace(model="dummy"))  # generation: no span
    monkeypatch.setenv("EGOPLAN_SCORED_TOKENS", "answer_and_eot")
    with pytest.raises(SettingsError, match=r"EGOPLAN_SCORED_TOKENS .*answer_and_end_of_turn, answer"):
        config["class"](config=config)


# --- Prompt -----------------------------------------------------------------------------------


def test_prompts(fixture):
    doc = load(fixture).docs[0]  # goal "chop vegetables"
    assert egoplan.doc_to_text(doc) == doc["question"]
    assert egoplan.doc_to_text(doc, {"pre_prompt": "<", "post_prompt": ">"}) == f"<{doc['question']}>"
    assert egoplan.doc_to_text(doc, {"question_format": "egoplan_it"}).startswith(
        "My current task is to chop vegetables. The task's progress is demonstrated in the provided video.")
    gerund = {**doc, "task_goal": "Making coffee."}
    assert egoplan.question_text(gerund, "egoplan_it").startswith("I am tasked with making coffee. ")
    choices = egoplan.doc_to_choice(doc)
    assert egoplan.doc_to_text_with_options(doc, {"post_prompt": "\nLetter?"}) == (
        doc["question"] + "".join(f"\n{x}. {c}" for x, c in zip("ABCD", choices)) + "\nLetter?")
    with pytest.raises(ValueError, match="question_format"):
        egoplan.doc_to_text(doc, {"question_format": "free"})
    for goal in ("...", "The goal is to"):  # nothing left of the goal: named, not an IndexError
        with pytest.raises(egoplan_data.EgoPlanDataError, match=rf"EgoPlan sample {doc['sample_id']}: field task_goal "
                                                   rf"{re.escape(repr(goal))} leaves no goal"):
            egoplan.question_text({**doc, "task_goal": goal}, "egoplan_it")


# --- Scoring ----------------------------------------------------------------------------------


def test_ranking_picks_the_lowest_mean_loss():
    assert egoplan.ranked_choice(egoplan.candidate_losses([(2.0, False), (0.5, True), (0.7, False), (3.0, False)]),
                                 "q") == 1
    assert egoplan.ranked_choice(egoplan.candidate_losses([[2.0, False], [1.5, False], [0.25, False],
                                                           [0.3, True]]), "q") == 2
    assert egoplan.ranked_choice([1.0] * 4, "q") == 0  # ties: the first, as argmin


def test_the_text_only_baselines_rank_by_the_highest_log_likelihood():
    """lm-eval's loglikelihood results are (log-likelihood, is_greedy): the loss is its negation, so the candidate
    with the highest log-likelihood wins (B: -0.5 > -0.7 > -2.0 > -3.0)."""
    results = [(-2.0, False), (-0.5, True), (-0.7, False), (-3.0, False)]
    assert egoplan.lm_eval_losses(results) == [2.0, 0.5, 0.7, 3.0]
    doc = {"sample_id": 7, "golden_choice_idx": "B", "video_source": "EpicKitchens", "progress_length": 3,
           "progress_bucket": "0_4", "similarity_level": "low"}
    scores = egoplan.process_blind_ranking_results(doc, results, context=None)
    assert scores["predictions"]["label"] == "B" and scores["accuracy"] == 1.0
    assert egoplan.process_blind_submission_results(doc, results, context=None)["predictions"]["label"] == "B"


@pytest.mark.parametrize("position", range(4))
def test_a_nan_loss_stops_the_question_named_wherever_it_stands(position):
    """min() over [nan, 1, 2, 3] picks A, over [1, nan, ...] skips B: a NaN would be scored by where it stands."""
    losses = [1.0, 2.0, 3.0, 4.0]
    losses[position] = float("nan")
    with pytest.raises(CandidateLossError, match=r"EgoPlan question 1234: .*nan"):
        egoplan.ranked_choice(egoplan.candidate_losses([(loss, False) for loss in losses]), 1234)


def test_the_two_loss_means_rank_a_constructed_question_differently():
    """Per-token losses of four candidates; A's second token is one the model is certain of (loss
    exactly 0, as a near-certain token's under the official fp16 autocast). Averaged over every scored
    token, A wins (0.45 < 0.7); over the tokens whose loss is not 0, as the official code averages, B
    does (0.9 > 0.7). A candidate whose every token has loss 0 gets 0 there and wins, as the official
    argmin picks its 0/0 = NaN."""
    tokens = [[0.9, 0.0], [0.7, 0.7], [1.2, 0.8, 1.0], [2.0]]
    every = [mean_loss(losses) for losses in tokens]
    official = [mean_loss(losses, NONZERO_LOSS_TOKENS) for losses in tokens]
    assert every == pytest.approx([0.45, 0.7, 1.0, 2.0]) and official == pytest.approx([0.9, 0.7, 1.0, 2.0])
    assert egoplan.ranked_choice(every, "q") == 0 and egoplan.ranked_choice(official, "q") == 1
    certain = [*tokens, [0.0, 0.0]]
    assert mean_loss(certain[-1], NONZERO_LOSS_TOKENS) == 0.0
    assert egoplan.ranked_choice([mean_loss(losses, NONZERO_LOSS_TOKENS) for losses in certain], "q") == 4
    torch = pytest.importorskip("torch")  # the official expression, for the all-zero row: NaN, picked by argmin
    padded = torch.tensor([[0.9, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert (torch.isnan((padded.sum(1) / (padded != 0).sum(1))[1])
            and int(torch.argmin(padded.sum(1) / (padded != 0).sum(1))) == 1)
    with pytest.raises(ValueError, match="loss_mean 'median'"):
        mean_loss([1.0], "median")


CHOICES = ["put cereal box into cupboard", "take cereal bag", "open cupboard", "put cereal bag into cereal box"]


@pytest.mark.parametrize("response, expected", [
    ("B", 1), ("(c)", 2), ("d.", 3), ("The answer is (B)", 1), ("Answer: C", 2), ("the answer is d", 3),
    ("B. take cereal bag", 1), ("(A) put cereal box into cupboard", 0), ("b) take cereal bag", 1),
    ("open cupboard", 2), ("Open Cupboard.", 2), ("I would put cereal bag into cereal box next.", 3),
    ("Looking at the video, the person has folded the bag, so option C is best.", 2),
    ("It is not A. The correct answer is D because the box is closed.", 3),
    ("A good next step is D.", 3),
    ("The answer is a knife", None), ("I cannot tell from the video.", None), ("", None), ("A or B", None),
    ("take cereal bag or open cupboard", None),  # two candidates named: neither is read
    # a letter ruled out is not chosen
    ("The answer is not C.", None), ("The correct answer is D; the wrong answer is A", 3), ("not (C)", None),
    ("B is right, not option D", 1), ("Not C, but B", 1),
])
def test_answer_extraction(response, expected):
    assert egoplan.extract_choice(response, CHOICES) == expected


def test_generative_scores_count_unparseable_answers_as_wrong(fixture):
    doc = load(fixture).docs[0]
    golden = "ABCD"[egoplan.doc_to_target(doc)]
    right = egoplan.process_generation_results(doc, [f"The answer is {golden}."], context=None)
    assert right["accuracy"] == 1.0 and right["unparseable"] == 0.0
    unclear = egoplan.process_generation_results(doc, ["I am not sure."], context=None)
    assert unclear["accuracy"] == 0.0 and unclear["unparseable"] == 1.0


# --- Breakdowns -------------------------------------------------------------------------------


def test_each_sample_is_in_one_bin_per_breakdown_counted_beside_it_and_logged_with_its_values(fixture):
    bins = parse_bins(egoplan_settings.EgoPlanSettings.progress_length_bins)
    seen = []
    for doc in load(fixture).docs:
        losses = [1.5, 0.25, 0.5, 2.0]
        scores = egoplan.process_ranking_results(doc, [(loss, False) for loss in losses], context=None)
        groups = {"source": ("epic_kitchens", "ego4d"), "progress": tuple(f"progress_{b.label}" for b in bins),
                  "similarity": ("similarity_low", "similarity_medium", "similarity_high")}
        for names in groups.values():
            [member] = [name for name in names if f"accuracy_{name}" in scores]
            assert scores[f"n_{member}"] == 1 and not any(f"n_{other}" in scores for other in names if other != member)
        record = scores["predictions"]
        assert record == {
            "sample_id": doc["sample_id"], "label": "B", "gold": doc["golden_choice_idx"],
            "candidate_losses": dict(zip("ABCD", losses)), "video_source": doc["video_source"],
            "progress_length": doc["progress_length"], "progress_bin": doc["progress_bucket"],
            "goal_answer_similarity": doc["goal_answer_similarity"], "similarity_level": doc["similarity_level"]}
        assert scores["accuracy"] == float(doc["golden_choice_idx"] == "B")
        assert doc["progress_length"] in next(b for b in bins if f"accuracy_progress_{b.label}" in scores)
        seen.append(doc["progress_bucket"])
    assert len(set(seen)) == len(bins)  # the fixture covers every default bin


def test_progress_bins():
    assert parse_bins("0-4,5-9,10+") == (ValueBin(0, 4), ValueBin(5, 9), ValueBin(10, None))
    assert [b.label for b in parse_bins("0,1-2,3+")] == ["0_0", "1_2", "3_plus"]
    for bad in ("0-4,6+", "0-4,5-9", "0+,1+", "0-x"):
        with pytest.raises(ValueError):
            parse_bins(bad)


def test_similarity_levels_are_equal_size_tertiles_of_the_split_fixed_at_load(fixture):
    levels = equal_size_levels(list(range(10)), key=lambda x: -x, n_levels=3)
    assert levels == [[9, 8, 7, 6], [5, 4, 3], [2, 1, 0]]

    def similarity(encoder, pairs):  # decreasing with the sample's position
        return [-position / 10 for position, _ in enumerate(pairs)]

    with mock.patch.object(egoplan_data.SentenceEncoder, "cosine_similarities", similarity):
        docs = load(fixture).docs
    assert [doc["similarity_level"] for doc in docs] == ["high"] * 2 + ["medium"] * 3 + ["low"] * 3
    assert [doc["goal_answer_similarity"] for doc in docs] == [-i / 10 for i in range(len(docs))]
    real = load(fixture).docs  # all-MiniLM-L6-v2
    assert [d["goal_answer_similarity"] for d in real] == pytest.approx(
        SentenceEncoder(device="cpu").cosine_similarities([(d["task_goal"], d["answer"]) for d in real]), abs=1e-6)
    assert sorted(collections.Counter(d["similarity_level"] for d in real).values()) == [2, 3, 3]


# --- Submission -------------------------------------------------------------------------------


def submission_context(name: str, docs: int, skipped: list) -> TaskContext:
    """What write_submission gets of an lmms-eval EgoPlan task: its name, its run files, what its loader read."""
    return TaskContext(task_name=name, settings=None, run_files=LmmsEvalRunFiles(name, SuiteRun()),
                       loaded=LoadedDocs([{}] * docs, skipped))


def test_submission_file_is_written_sorted_and_valid(tmp_path):
    items = [{"sample_id": 7, "label": "C", "gold": None}, {"sample_id": 3, "label": "A", "gold": None}]
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny-qwen2-vl", timezone="UTC")
    assert egoplan.write_submission(items, args, context=submission_context("egoplan_test", 2, [])) == 2
    [path] = tmp_path.rglob("*.json")  # beside lmms-eval's results file, named as lmms-eval names its files
    assert path.parent == tmp_path / "models__tiny-qwen2-vl"
    assert re.fullmatch(r"\d{8}_\d{6}_submission_egoplan_test\.json", path.name)
    written = json.loads(path.read_text())
    assert written == [{"sample_id": 3, "label": "A"}, {"sample_id": 7, "label": "C"}]
    egoplan.validate_submission(written, sample_ids=[3, 7])
    for bad in ([{"sample_id": 1, "label": "E"}], [{"sample_id": "1", "label": "A"}],
                [{"sample_id": 1, "label": "A"}] * 2, {"sample_id": 1}):
        with pytest.raises(ValueError):
            egoplan.validate_submission(bad)
    with pytest.raises(ValueError, match="expected 3"):
        egoplan.validate_submission(written, sample_ids=[1, 3, 7])


def test_a_run_that_did_not_predict_the_whole_split_writes_no_complete_looking_submission(tmp_path):
    items = [{"sample_id": 7, "label": "C"}, {"sample_id": 3, "label": "A"}]
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=m", timezone="UTC")
    skipped = [egoplan_data.MissingMedia(9, "/x/9.mp4", "clip not found")]
    messages = []
    handler = logger.add(messages.append, level="WARNING", format="{message}")
    try:
        egoplan.write_submission(items, args, context=submission_context("egoplan_val", 4, skipped))
    finally:
        logger.remove(handler)
    [path] = tmp_path.rglob("*.json")
    assert re.fullmatch(r"\d{8}_\d{6}_submission_partial_egoplan_val\.json", path.name)
    [message] = messages
    assert "2 of the split's 5 samples" in message and "1 skipped for missing media" in message
    assert "2 not evaluated (--limit)" in message and "not a leaderboard submission" in message


@pytest.mark.parametrize("field, value, message", [
    ("current_observation_frame", "abc",
     "current_observation_frame must be a frame number (an integer >= 0), got 'abc'"),
    ("sample_id", [1], "sample_id must be an integer, got [1]"),
    ("choice_a", 3, "choice_a must be a non-empty string, got 3"),
    ("question", None, "question must be a non-empty string, got None"),
    ("video_source", ["EpicKitchens"], "video_source must be one of ['Ego4D', 'EpicKitchens'], got ['EpicKitchens']"),
])
def test_egoplan_record_fields_of_the_wrong_type_are_named_at_load(field, value, message, tmp_path):
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.demo.egoplan import build_fixture
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import settings as egoplan_settings

    data = build_fixture(tmp_path / "egoplan")
    records = data.records()
    records[2][field] = value
    annotation = tmp_path / "EgoPlan_validation.json"
    annotation.write_text(json.dumps(records))
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="t",
                                metadata={"annotation_file": str(annotation)}, env_prefix="EGOPLAN", environ=data.env())
    with pytest.raises(egoplan_data.EgoPlanDataError, match=rf"{annotation}, record #2 .*: {re.escape(message)}"):
        egoplan_data.load_samples(settings, labelled=True)


@pytest.mark.parametrize("value", ["E", 5, "b"])
def test_a_test_split_record_whose_label_is_no_letter_is_named_not_crashed_on(value, tmp_path):
    """The test split needs no label; one it holds must be a letter (else its 'answer' would be read from a
    choice_e field that does not exist)."""
    from lmms_egoplan.core.settings import resolve_settings
    from lmms_egoplan.demo.egoplan import build_fixture
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan import settings as egoplan_settings

    data = build_fixture(tmp_path / "egoplan")
    records = data.records("test")
    annotation = tmp_path / "EgoPlan_test.json"
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="t",
                                metadata={"annotation_file": str(annotation)}, env_prefix="EGOPLAN", environ=data.env())
    annotation.write_text(json.dumps([{k: v for k, v in record.items() if k != "golden_choice_idx"}
                                      for record in records]))
    assert len(egoplan_data.load_samples(settings, labelled=False).docs) == len(records)  # no label: read as none
    records[1]["golden_choice_idx"] = value
    annotation.write_text(json.dumps(records))
    with pytest.raises(egoplan_data.EgoPlanDataError,
                       match=rf"{annotation}, record #1 .*: golden_choice_idx must be one of A-D, got {value!r}"):
        egoplan_data.load_samples(settings, labelled=False)
