"""EgoPlan-Bench's release files: annotation records, where their media live, and the docs built
from them (paths and annotation frame numbers, never decoded media), all checked before a run. Or,
with ``data_source: seed_bench_r1``, EgoPlan-Bench Val as Levels 1-2 of the authors' Hub package
TencentARC/SEED-Bench-R1 (``lmms_egoplan.core.seed_bench_r1``): a re-encoded progress clip and the
observation image per question, not the release's frames.

``lmms_egoplan.egoplan.task`` holds the protocol (task, prompt, scoring), ``egoplan.settings`` its settings; this
module holds what it loads. Functions taking ``settings`` receive an ``egoplan.settings.EgoPlanSettings``.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core import media, seed_bench_r1
from lmms_egoplan.core.embeddings import SentenceEncoder
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_json_list
from lmms_egoplan.core.media import LoadedSamples, MissingMedia
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.core.statistics import ValueBin, bin_of, equal_size_levels, parse_bins

ENV_PREFIX = entry("egoplan").env_prefix  # settings are overridden by environment variables EGOPLAN_<SETTING>
CHOICE_LETTERS = "ABCD"
VIDEO_SOURCES = {"EpicKitchens": "epic_kitchens", "Ego4D": "ego4d"}  # record value -> metric suffix
CLIP_EXTENSIONS = (".mp4", ".MP4", ".mkv", ".webm")
SIMILARITY_LEVELS = ("low", "medium", "high")  # goal-answer similarity levels, lowest first
DATA_SOURCES = ("official", "seed_bench_r1")
SEED_BENCH_R1_LEVELS = (1, 2)  # the package's Levels 1 and 2 are EgoPlan-Bench Val (its README, "Data")


class EgoPlanDataError(InputError):
    """An annotation record or its media cannot be used; the message names the sample, path and setting."""


# =============================================================================================
# Annotation records and where their media live
# =============================================================================================

_RECORD_FIELDS = ("sample_id", "video_source", "video_id", "task_goal", "question", "current_observation_frame",
                  "task_progress_metadata", *(f"choice_{letter.lower()}" for letter in CHOICE_LETTERS))
_ACTION_FIELDS = ("narration_text", "start_frame", "stop_frame")


def annotation_path(settings) -> Path:
    if not settings.annotation_file:
        raise SettingsError(f"EgoPlan: no annotation file; set {setting_name(ENV_PREFIX, 'annotation_dir')} to "
                            f"the folder holding EgoPlan_validation.json / EgoPlan_test.json{_OR_THE_PACKAGE}")
    path = Path(settings.annotation_file).expanduser()
    if not path.is_absolute():
        if not settings.annotation_dir:
            raise SettingsError(f"EgoPlan: annotation file {settings.annotation_file!r} is relative; set "
                                f"{setting_name(ENV_PREFIX, 'annotation_dir')} to the folder that holds it"
                                f"{_OR_THE_PACKAGE}")
        path = Path(settings.annotation_dir).expanduser() / path
    return path


# The other source of Val, which a user who set up EgoPlan-Bench2's (its own variables) may have meant.
_OR_THE_PACKAGE = (f", or, for Val, set {setting_name(ENV_PREFIX, 'data_source')} to seed_bench_r1 and "
                   f"{setting_name(ENV_PREFIX, 'seed_bench_r1_root')} to the TencentARC/SEED-Bench-R1 package "
                   f"(each benchmark reads its own variables)")


# Why a record's sample id must be its own.
_UNIQUE_IDS = "results and the submission are keyed by it"


def read_annotations(path: Path, *, labelled: bool, problems: DatasetProblems) -> list[dict]:
    """The records of an official annotation file that pass the checks, field by field, with unique
    sample ids; each other record's problem joins ``problems``."""
    records = read_json_list(path, EgoPlanDataError, what="EgoPlan annotation file",
                             folder_setting=setting_name(ENV_PREFIX, "annotation_dir"),
                             file_setting=setting_name(ENV_PREFIX, "annotation_file"))
    checked = []
    for position, record in enumerate(records):
        with problems.collected():
            _check_record(record, f"EgoPlan annotation file {path}, record #{position}", labelled=labelled)
            checked.append(record)
    return problems.without_repeats(checked, lambda record: record["sample_id"],
                                    where=f"EgoPlan annotation file {path}", field="sample_id", why=_UNIQUE_IDS)


def package_records(settings, problems: DatasetProblems) -> list[seed_bench_r1.PackageRecord]:
    """EgoPlan-Bench Val as the SEED-Bench-R1 package's Levels 1 and 2, each record checked as the
    release's are, less the frame numbers (the package's clip and image replace them); each other
    record's problem joins ``problems``."""
    return seed_bench_r1.checked_records(
        settings, SEED_BENCH_R1_LEVELS, label="EgoPlan", env_prefix=ENV_PREFIX, problems=problems,
        why_unique=_UNIQUE_IDS,
        check=lambda item: _check_record(item.record, item.where, labelled=True, frame_numbers=False))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


# What each field of a record must be (the release's types), and how to say it.
_FIELD_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sample_id": (_is_int, "an integer"),
    "video_id": (_is_text, "a non-empty string"),
    "task_goal": (_is_text, "a non-empty string"),
    "question": (_is_text, "a non-empty string"),
    **{f"choice_{letter.lower()}": (_is_text, "a non-empty string") for letter in CHOICE_LETTERS},
    "current_observation_frame": (lambda value: _is_int(value) and value >= 0, "a frame number (an integer >= 0)"),
}
_ACTION_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "narration_text": (lambda value: isinstance(value, str), "a string"),
    "start_frame": (lambda value: _is_int(value) and value >= 0, "a frame number (an integer >= 0)"),
    "stop_frame": (lambda value: _is_int(value) and value >= 0, "a frame number (an integer >= 0)"),
}


def _check_record(record: Any, where: str, *, labelled: bool, frame_numbers: bool = True) -> None:
    """Raise EgoPlanDataError naming ``where`` and the field unless ``record`` is a question of the
    release's format; ``frame_numbers`` False: without the frames of the observation and the actions."""
    if not isinstance(record, dict):
        raise EgoPlanDataError(f"{where}: expected a JSON object")
    where += f" (sample_id {record.get('sample_id')!r})"
    frame_fields = () if frame_numbers else ("current_observation_frame",)
    required = [name for name in _RECORD_FIELDS + (("golden_choice_idx",) if labelled else ())
                if name not in frame_fields]
    missing = [name for name in required if name not in record]
    if missing:
        raise EgoPlanDataError(f"{where}: missing field(s) {', '.join(missing)}")
    for field, (valid, expected) in _FIELD_TYPES.items():
        if field not in frame_fields and not valid(record[field]):
            raise EgoPlanDataError(f"{where}: {field} must be {expected}, got {record[field]!r}")
    if not isinstance(record["video_source"], str) or record["video_source"] not in VIDEO_SOURCES:
        raise EgoPlanDataError(f"{where}: video_source must be one of {sorted(VIDEO_SOURCES)}, "
                               f"got {record['video_source']!r}")
    golden = record.get("golden_choice_idx")
    # labelled: always a letter; the test split's may be absent or empty, and is not read if so
    if (labelled or golden not in (None, "")) and golden not in tuple(CHOICE_LETTERS):
        raise EgoPlanDataError(f"{where}: golden_choice_idx must be one of A-D, got {golden!r}")
    actions = record["task_progress_metadata"]
    action_fields = _ACTION_FIELDS if frame_numbers else ("narration_text",)
    if not isinstance(actions, list) or any(not isinstance(a, dict) or any(f not in a for f in action_fields)
                                            for a in actions):
        raise EgoPlanDataError(f"{where}: task_progress_metadata must be a list of objects with "
                               f"{', '.join(action_fields)}")
    if not frame_numbers:
        return
    for number, action in enumerate(actions):
        for field, (valid, expected) in _ACTION_TYPES.items():
            if not valid(action[field]):
                raise EgoPlanDataError(f"{where}: task_progress_metadata[{number}].{field} must be {expected}, "
                                       f"got {action[field]!r}")
    if actions and actions[0]["start_frame"] > record["current_observation_frame"]:
        raise EgoPlanDataError(f"{where}: the first action starts (frame {actions[0]['start_frame']}) after the "
                               f"current observation frame {record['current_observation_frame']}")


def epic_frame_folder(root: str | Path, video_id: str) -> Path:
    """EPIC-KITCHENS-100 RGB frames: ``<root>/<participant>/rgb_frames/<video_id>`` (P01_13 -> P01)."""
    return Path(root) / video_id.split("_")[0] / "rgb_frames" / video_id


def ego4d_video_path(root: str | Path, video_id: str) -> Path:
    return Path(root) / f"{video_id}.mp4"


def clip_path(clips_dir: str | Path, sample_id: int) -> Path:
    """``<clips_dir>/<sample_id>.mp4`` (or .mkv / .webm); the .mp4 name when none exists."""
    candidates = [Path(clips_dir) / f"{sample_id}{ext}" for ext in CLIP_EXTENSIONS]
    return next((p for p in candidates if p.is_file()), candidates[0])


@dataclass(frozen=True)
class MediaKind:
    """Where one kind of media lives: the setting naming its root folder, and a record's path under it."""

    setting: str  # the setting that holds the root folder
    layout: str  # what that folder must hold (for error messages)
    record_field: str  # the record's field that names its media under that folder
    path: Callable[[str, Mapping], Path]  # (root, record) -> the record's media


MEDIA_KINDS = {
    "epic_frames": MediaKind("epic_frames_root", "the EPIC-KITCHENS-100 root "
                             "(<root>/<participant>/rgb_frames/<video_id>/frame_%010d.jpg)", "video_id",
                             lambda root, record: epic_frame_folder(root, record["video_id"])),
    "ego4d_video": MediaKind("ego4d_videos_root", "the Ego4D video folder (<root>/<video_id>.mp4)", "video_id",
                             lambda root, record: ego4d_video_path(root, record["video_id"])),
    "clip": MediaKind("clips_dir", "the folder of pre-cut clips (<clips_dir>/<sample_id>.mp4)", "sample_id",
                      lambda root, record: clip_path(root, record["sample_id"])),
}


# EPIC-KITCHENS-100 frame numbers (its rgb_frames files, EgoPlan's EPIC frame numbers) count frames at
# the video's own rate: EPIC_100_video_info.csv (epic-kitchens/epic-kitchens-100-annotations, commit
# 6c92b84) lists 50 fps for the extension's videos (PXX_1YY), 59.94 for EPIC-KITCHENS-55's (PXX_YY),
# except these.
EPIC_55_FPS = 60000 / 1001
EPIC_EXTENSION_FPS = 50.0
EPIC_OTHER_RATES = {**dict.fromkeys(("P09_07", "P09_08", "P10_04", "P18_02"), 30000 / 1001),
                    **dict.fromkeys(("P17_01", "P17_02", "P17_03", "P17_04"), 48000 / 1001), "P18_09": 90.0}


def epic_frame_rate(video_id: str) -> float:
    """The rate an EPIC-KITCHENS-100 video's frame numbers count in (EPIC_100_video_info.csv)."""
    if video_id in EPIC_OTHER_RATES:
        return EPIC_OTHER_RATES[video_id]
    return EPIC_EXTENSION_FPS if len(video_id.split("_")[-1]) == 3 else EPIC_55_FPS


def annotation_frame_rate(kind: str, record: Mapping, settings) -> float | None:
    """The rate a record's frame numbers count in (seconds = number / rate); None for pre-cut clips,
    whose frames are timed by their container."""
    if kind == "epic_frames":
        return settings.epic_annotation_fps or epic_frame_rate(record["video_id"])
    return settings.ego4d_annotation_fps if kind == "ego4d_video" else None


def record_media(record: Mapping, settings) -> tuple[str, Path]:
    """The kind of a record's media (a key of ``MEDIA_KINDS``) and its path, which must stay inside
    the media's root folder (``core.files.inside_root``; ``allow_paths_outside_root`` allows it)."""
    if settings.visual_source == "clips":
        kind = "clip"
    else:
        kind = "epic_frames" if record["video_source"] == "EpicKitchens" else "ego4d_video"
    media_kind = MEDIA_KINDS[kind]
    root = getattr(settings, media_kind.setting)
    if not root:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, media_kind.setting)} is not set; it must point at "
                            f"{media_kind.layout} (visual_source={settings.visual_source!r})")
    field = media_kind.record_field
    return kind, inside_root(media_kind.path(root, record), root, error_class=EgoPlanDataError,
                             where=f"EgoPlan sample {record['sample_id']}: field {field} {record[field]!r}",
                             setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"),
                             allow=settings.allow_paths_outside_root)


# =============================================================================================
# Which frames a doc shows (annotation frame numbers; paper §3.3, appendix C.1, official code)
# =============================================================================================

FRAME_SAMPLINGS = ("official", "uniform", "keyframes")


def completed_actions(record: Mapping) -> list[dict]:
    """The actions of the task progress that end by the current observation frame, in order."""
    return [a for a in record["task_progress_metadata"] if a["stop_frame"] <= record["current_observation_frame"]]


def official_clip(record: Mapping, num_frames: int) -> list[int]:
    """The one clip the official evaluation shows (``src/video_llama_interface.py``,
    ``epic_kitchens_video_process`` / ``ego4d_video_process``): the first ``num_frames - 1`` of
    ``np.arange(start, observation, (observation - start) / (num_frames - 1)).astype(int)`` from the
    first action's start, then the current observation frame as the clip's last frame; with no
    completed action, the observation ``num_frames`` times.

    Where the official code divides by zero (one frame; a first action starting at the observation)
    the observation stands for the whole clip, as with no completed action.
    """
    return official_clip_frames(task_start_frame(record), record["current_observation_frame"], num_frames)


def official_clip_frames(start: int, observation: int, num_frames: int) -> list[int]:
    """``official_clip`` of a task progress from frame ``start`` to the ``observation``."""
    import numpy as np

    if num_frames == 1 or start >= observation:
        return [observation] * num_frames
    progress = np.arange(start, observation, (observation - start) / (num_frames - 1)).astype(int).tolist()
    return [*progress[:num_frames - 1], observation]


def bin_starts(first: int, end: int, count: int) -> list[int]:
    """The first frame of each of ``count`` equal bins of ``[first, end)``; all lie before ``end``
    unless the range is empty (then ``first``)."""
    if end <= first:
        return [first] * count
    return [first + (i * (end - first)) // count for i in range(count)]


def task_start_frame(record: Mapping) -> int:
    """Where the task progress starts: the first action's start (the observation when none is done)."""
    actions = record["task_progress_metadata"]
    return actions[0]["start_frame"] if actions else record["current_observation_frame"]


@dataclass(frozen=True)
class FramePlan:
    """The frames a doc shows: video clips (annotation frame numbers, time order), then the
    current observation frame as an image of its own when ``observation_image``."""

    clips: list[list[int]]
    observation_image: bool


def frame_plan(record: Mapping, settings) -> FramePlan:
    """Which frames the model sees, per ``frame_sampling``; none lies past the observation frame.

    ``official`` (default): one clip of ``num_frames`` frames ending at the observation (``official_clip``).
    ``uniform``: one clip of ``num_frames`` frames over [first action start, observation), then the
    observation as a separate image.
    ``keyframes`` (appendix C.1): one clip per action segment -- the last ``keyframe_segments``
    actions completed by the observation frame, each cut at the next action's start (the last at
    the observation), ``keyframes_per_segment`` frames each -- then the observation image. With
    nothing completed yet, the observation frame stands in for the progress (one clip).
    """
    observation = record["current_observation_frame"]
    if settings.frame_sampling == "official":
        return FramePlan([official_clip(record, settings.num_frames)], observation_image=False)
    if settings.frame_sampling == "uniform":
        return FramePlan([bin_starts(task_start_frame(record), observation, settings.num_frames)],
                         observation_image=True)
    completed = completed_actions(record)
    segments = completed[-settings.keyframe_segments:]
    if not segments:
        return FramePlan([[observation] * settings.keyframes_per_segment], observation_image=True)
    clips = []
    for position, action in enumerate(segments):
        stop = segments[position + 1]["start_frame"] if position + 1 < len(segments) else observation
        stop = max(action["start_frame"], min(action["stop_frame"], stop))
        clips.append(bin_starts(action["start_frame"], stop + 1, settings.keyframes_per_segment))
    return FramePlan(clips, observation_image=True)


def doc_frame_numbers(doc: Mapping) -> list[int]:
    """Every frame a doc shows (annotation frame numbers), in order: its clips, then the observation
    image if it has one."""
    observation = [doc["current_observation_frame"]] if doc["observation_image"] else []
    return [*itertools.chain.from_iterable(doc["clips"]), *observation]


def video_indices(doc: Mapping, video: media.VideoFile, numbers: Sequence[int]) -> list[int]:
    """Indices into the doc's video file of annotation frame ``numbers``.

    Ego4D: numbers count frames at ``frame_rate`` (30 fps, the canonical videos'), so they are
    mapped through time and stay right for a re-encoded video. Pre-cut clips span the task
    progress (first frame: task start, last frame: current observation), so numbers map
    proportionally onto the clip's frames.
    """
    if doc["media_kind"] == "ego4d_video":
        return [video.index_at(n / doc["frame_rate"]) for n in numbers]
    last = video.info.num_frames - 1
    first, observation = doc["clip_first_frame"], doc["current_observation_frame"]
    if observation <= first:
        return [last] * len(numbers)
    return [min(last, max(0, round((n - first) * last / (observation - first)))) for n in numbers]


# =============================================================================================
# Loading: records -> docs, media checked up front
# =============================================================================================


def load_samples(settings, *, labelled: bool, with_media: bool = True) -> LoadedSamples:
    """Docs for every record of the annotation file, with their media checked.

    Every problem of the data -- a record's field, a path out of its root, a missing or unusable frame
    folder, frame, video or clip -- is listed in one EgoPlanDataError naming the file, record and field
    or the sample, path and setting to change; with ``skip_missing``, samples whose media are unusable
    are dropped instead and recorded in ``skipped``. ``with_media=False`` (the text-only baselines):
    docs without media fields, and no media setting is needed.
    """
    bins = progress_bins(settings)
    problems = DatasetProblems("the EgoPlan data", EgoPlanDataError)
    if settings.data_source == "seed_bench_r1":
        if not labelled:
            raise SettingsError(f"EgoPlan: the SEED-Bench-R1 package holds EgoPlan-Bench Val only (Levels 1-2); the "
                                f"test split is read from EgoPlan_test.json ({setting_name(ENV_PREFIX, 'data_source')} "
                                f"official)")
        if with_media and settings.frame_sampling == "keyframes":
            raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'frame_sampling')} keyframes needs each action's "
                                f"frames in the source video; the SEED-Bench-R1 package gives the progress "
                                f"as one clip: "
                                f"use official or uniform, or {setting_name(ENV_PREFIX, 'data_source')} official")
        sources = [(item.record, functools.partial(_package_media_fields, item, settings))
                   for item in package_records(settings, problems)]
    else:
        sources = [(record, functools.partial(_record_media_fields, record, settings))
                   for record in read_annotations(annotation_path(settings), labelled=labelled, problems=problems)]
    docs = []
    for record, media_fields in sources:
        with problems.collected():
            docs.append({**_record_text(record, bins), **(media_fields() if with_media else {})})
    missing = find_missing_media(docs, settings.images_decoded_at_load) if with_media else []
    missing_ids = problems.unusable_media(missing, skip=settings.skip_missing, label="EgoPlan", samples="samples",
                                          skip_setting=setting_name(ENV_PREFIX, "skip_missing"))
    docs = [doc for doc in docs if doc["sample_id"] not in missing_ids]
    if labelled:
        add_similarity_levels(docs, settings)
    return LoadedSamples(docs=docs, skipped=missing)


def progress_bins(settings) -> tuple[ValueBin, ...]:
    try:
        return parse_bins(settings.progress_length_bins)
    except ValueError as error:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'progress_length_bins')}: {error}") from None


def _record_text(record: Mapping, bins: Sequence[ValueBin]) -> dict:
    golden = record.get("golden_choice_idx")
    progress_length = len(record["task_progress_metadata"])
    return {
        "sample_id": record["sample_id"],
        "video_source": record["video_source"],
        "video_id": record["video_id"],
        "task_goal": record["task_goal"],
        "question": record["question"],
        **{f"choice_{letter.lower()}": record[f"choice_{letter.lower()}"] for letter in CHOICE_LETTERS},
        "golden_choice_idx": golden,
        "answer": record[f"choice_{golden.lower()}"] if golden else None,
        "current_observation_frame": record.get("current_observation_frame"),  # none in the SEED-Bench-R1 package
        "task_progress_metadata": record["task_progress_metadata"],
        "progress_length": progress_length,
        "progress_bucket": bin_of(progress_length, bins).label,
    }


def _record_media_fields(record: Mapping, settings) -> dict:
    kind, path = record_media(record, settings)
    fields = {
        "media_kind": kind,
        "media_path": str(path),
        **dataclasses.asdict(frame_plan(record, settings)),
        "clip_first_frame": task_start_frame(record),
        "frame_rate": annotation_frame_rate(kind, record, settings),
        "max_side": settings.max_side,
        "short_side": settings.ego4d_short_side if kind == "ego4d_video" else None,
    }
    if kind == "epic_frames":
        frame_files_inside_root({**record, **fields}, settings)
    return fields


def frame_files_inside_root(doc: Mapping, settings) -> None:
    """Each frame file the doc shows must stay inside ``epic_frames_root`` as its folder does: a frame
    symlinked out of it is refused (``allow_paths_outside_root`` allows it). Only the files a doc shows
    are resolved, not whole folders of tens of thousands of frames."""
    folder = Path(doc["media_path"])
    for number in dict.fromkeys(doc_frame_numbers(doc)):
        inside_root(folder / media.EPIC_FRAME_TEMPLATE.format(number), settings.epic_frames_root,
                    where=f"EgoPlan sample {doc['sample_id']}: frame {number} of field video_id {doc['video_id']!r}",
                    setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"),
                    allow=settings.allow_paths_outside_root, error_class=EgoPlanDataError)


PACKAGE_KIND = "seed_bench_r1"


def _package_media_fields(item: seed_bench_r1.PackageRecord, settings) -> dict:
    """A package question's media: its progress clip (none when nothing is done yet) and observation
    image, and the frame plan that places frames in the clip (``package_positions``)."""
    return {
        "media_kind": PACKAGE_KIND,
        "media_path": None if item.video is None else str(item.video),
        "observation_path": str(item.image),
        "clips": [],
        "observation_image": True,
        "clip_first_frame": 0,
        "frame_rate": None,
        "max_side": settings.max_side,
        "short_side": None,
        "frame_sampling": settings.frame_sampling,
        "num_frames": settings.num_frames,
    }


def package_positions(doc: Mapping) -> seed_bench_r1.Positions:
    """The frames a package doc shows of its progress clip ``0..last``, placed in it as the frame plan
    places them between the task's start and the observation: ``official``, all but the last frame of
    ``official_clip_frames`` (the last, the observation, is the package's image); ``uniform``, the
    progress frames of ``bin_starts``; the observation image follows either."""
    count = doc["num_frames"]
    if doc["frame_sampling"] == "official":
        return lambda last: official_clip_frames(0, last, count)[:-1]
    return lambda last: bin_starts(0, last, count)


def media_setting(kind: str) -> str:
    """The setting that points at a kind of media."""
    return "seed_bench_r1_root" if kind == PACKAGE_KIND else MEDIA_KINDS[kind].setting


def find_missing_media(docs: Sequence[Mapping], images_decoded: int) -> list[MissingMedia]:
    """The docs whose frame folder, frames, video, clip or image is missing or unusable, in doc order.

    Frames and images are checked file by file by their first and last bytes (missing, empty, not an
    image, truncated), and ``images_decoded`` of them, spread over the run, are decoded in full
    (``media.image_problems``); each Ego4D video and each clip is opened once (an empty or damaged one
    does not open) and its packets are read, without decoding, up to the last frame its samples show
    (one cut short after its index opens fine). What only decoding can find in a file outside the
    decoded sample stops the run at that sample, naming it, its file and the setting.
    """
    package = [doc for doc in docs if doc["media_kind"] == PACKAGE_KIND]
    problems = [(package[number], path, message) for number, path, message in seed_bench_r1.media_problems(
        [(doc["media_path"], doc["observation_path"]) for doc in package], [package_positions(doc) for doc in package],
        images_decoded)]
    frames = {id(doc): [media.FrameFolder(doc["media_path"]).frame_path(number) for number in doc_frame_numbers(doc)]
              for doc in docs if doc["media_kind"] == "epic_frames" and Path(doc["media_path"]).is_dir()}
    unusable = media.image_problems(itertools.chain.from_iterable(frames.values()), images_decoded)
    by_video: dict[str, list[Mapping]] = collections.defaultdict(list)
    for doc in docs:
        path = Path(doc["media_path"] or "")
        if doc["media_kind"] == PACKAGE_KIND:
            continue
        if doc["media_kind"] == "ego4d_video":
            by_video[doc["media_path"]].append(doc)
        elif doc["media_kind"] == "epic_frames":
            if not path.is_dir():
                problems.append((doc, path, f"frame folder not found: {path}"))
            elif broken := [frame for frame in dict.fromkeys(frames[id(doc)]) if frame in unusable]:
                problems.append((doc, broken[0], f"{len(broken)} frame(s) unusable, e.g. {unusable[broken[0]]}"))
        elif not path.is_file():
            problems.append((doc, path, f"clip not found: {path}"))
        else:
            by_video[doc["media_path"]].append(doc)
    for path, video_docs in by_video.items():
        problems += [(doc, path, message) for doc, message in media.video_problems(path, video_docs, _last_frame)]
    order = {id(doc): position for position, doc in enumerate(docs)}
    problems.sort(key=lambda problem: order[id(problem[0])])
    return [MissingMedia(doc["sample_id"], str(path),
                         f"{message}; check {setting_name(ENV_PREFIX, media_setting(doc['media_kind']))}")
            for doc, path, message in problems]


def _last_frame(video: media.VideoFile, doc: Mapping) -> tuple[int, str]:
    """The last index a doc reads from its video file, and the annotation frame it shows there."""
    return max(video_indices(doc, video, doc_frame_numbers(doc))), f"frame {doc['current_observation_frame']}"


def add_similarity_levels(docs: Sequence[dict], settings) -> None:
    """Each labelled doc's goal-answer similarity and its level (paper §4.2, Figure 7): the cosine of
    the sentence embeddings of task goal and right answer, and which of three equal-size levels of the
    loaded split it falls in (ties broken by sample id), lowest first.

    Computed when the task loads, before the paid model run, so that a similarity model that does not
    load stops the run at once and every logged sample carries its level. On the CPU: every rank
    loads the docs, and this should not take GPU memory there.
    """
    try:
        encoder = SentenceEncoder(settings.similarity_model or None, device="cpu")
        similarities = encoder.cosine_similarities([(doc["task_goal"], doc["answer"]) for doc in docs])
    except (ImportError, OSError, ValueError) as error:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'similarity_model')}: cannot load the goal-answer "
                            f"similarity model {settings.similarity_model or 'all-MiniLM-L6-v2'!r}: {error}") from error
    for doc, similarity in zip(docs, similarities):
        doc["goal_answer_similarity"] = similarity
    levels = equal_size_levels(docs, key=lambda doc: (doc["goal_answer_similarity"], doc["sample_id"]),
                               n_levels=len(SIMILARITY_LEVELS))
    for name, level in zip(SIMILARITY_LEVELS, levels):
        for doc in level:
            doc["similarity_level"] = name
