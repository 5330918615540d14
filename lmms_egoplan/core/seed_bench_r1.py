"""The TencentARC/SEED-Bench-R1 package on disk, as its evaluation script reads it (``infer.py`` at
12e8fcc, ``make_conversation_egoplan``): ``annotations/validation_L<level>.jsonl``, one question per
line; ``videos/<video_source>/<video_basename>``, the task progress so far as one re-encoded clip
(none for a question whose ``task_progress_metadata`` is empty: nothing is done yet); and
``images/<video_source>/<current_observation_basename>``, the current observation as an image of its
own. A record without ``sample_id`` is named by its ``id`` (``infer.py`` lines 160-161).

Read here once for every benchmark whose questions the package carries: the level files, where each
record's media are, the media checked before a run, and the frames a benchmark asks for. Frames are
placed by their position in the clip (a benchmark's frame plan over the clip's own frames
``0..last``), never by the annotations' frame numbers: the clip is the task progress, cut out of its
source video and re-encoded, so its first frame is the task's start and its last the latest frame
before the observation. Each frame is timed by the clip's container. The benchmark checks the
fields of its own questions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_jsonl
from lmms_egoplan.core.media import (
    FrameTime,
    VideoFile,
    fit_within,
    frame_times,
    image_problems,
    load_image,
    video_problems,
)
from lmms_egoplan.core.settings import SettingsError, setting_name

ANNOTATIONS = "annotations"
VIDEOS = "videos"
IMAGES = "images"

# A frame plan over a clip: its last frame's index -> the indices to show, in order.
Positions = Callable[[int], Sequence[int]]


def level_file(root: str | os.PathLike, level: int) -> Path:
    return Path(root).expanduser() / ANNOTATIONS / f"validation_L{level}.jsonl"


@dataclass(frozen=True)
class PackageRecord:
    record: dict  # the annotation record as the package has it (``sample_id`` filled from ``id``)
    where: str  # "<level file>:<line>", for messages
    video: Path | None  # the task-progress clip; None when nothing is done yet
    image: Path  # the current observation


def read_levels(root: str | os.PathLike, levels: Sequence[int], *, problems: DatasetProblems, root_setting: str,
                allow_outside: bool = False, allow_setting: str = "") -> list[PackageRecord]:
    """The records of the package's level files, in file and line order, each with its media paths.

    A missing or empty level file or a line that is not a JSON object raises ``problems.error_class`` naming the
    file, the line and ``root_setting`` (the setting that points at the package); a record whose media
    fields are missing, of the wrong type or lead out of ``root`` (``inside_root``; ``allow_outside``
    allows it) is left out and its problem, naming file, line and field, joins ``problems``.
    """
    error_class = problems.error_class
    records = []
    for level in levels:
        path = level_file(root, level)
        if not path.is_file():
            raise error_class(f"SEED-Bench-R1 annotation file not found: {path}; set {root_setting} to the folder of "
                              f"the TencentARC/SEED-Bench-R1 package (it holds {ANNOTATIONS}/, {VIDEOS}/, {IMAGES}/)")
        inside_root(path, root, where=f"SEED-Bench-R1 annotation file {path}", setting=allow_setting,
                    allow=allow_outside, error_class=error_class)
        read = list(read_jsonl(path, error_class))
        if not read:  # a level read as no question would shrink the benchmark without a word
            raise error_class(f"SEED-Bench-R1 annotation file {path} holds no record (empty or blank); fetch it again "
                              f"into the package that {root_setting} names")
        for line, record in read:
            if "sample_id" not in record and "id" in record:
                record["sample_id"] = record["id"]
            with problems.collected():
                video, image = _media_paths(record, root, f"{path}:{line} (sample_id {record.get('sample_id')!r})",
                                            error_class, allow_outside, allow_setting)
                records.append(PackageRecord(record, f"{path}:{line}", video, image))
    return records


def checked_records(settings, levels: Sequence[int], *, label: str, env_prefix: str, problems: DatasetProblems,
                    check: Callable[[PackageRecord], None], why_unique: str) -> list[PackageRecord]:
    """A benchmark's records of ``levels`` in the package at its ``seed_bench_r1_root`` setting (``read_levels``),
    each checked by ``check`` (which raises ``problems.error_class``; the problem joins ``problems``), less those
    whose ``sample_id`` another has too: one problem names them and the level file (the package, for several levels)
    and ``why_unique``. ``label`` and ``env_prefix`` name the benchmark and its settings in messages."""
    root = settings.seed_bench_r1_root
    root_setting = setting_name(env_prefix, "seed_bench_r1_root")
    if not root:
        raise SettingsError(f"{label}: {setting_name(env_prefix, 'data_source')} is seed_bench_r1 but {root_setting} "
                            f"(the package's folder) is not set")
    items = read_levels(root, levels, problems=problems, root_setting=root_setting,
                        allow_outside=settings.allow_paths_outside_root,
                        allow_setting=setting_name(env_prefix, "allow_paths_outside_root"))
    checked = []
    for item in items:
        with problems.collected():
            check(item)
            checked.append(item)
    where = str(level_file(root, levels[0])) if len(levels) == 1 else f"the SEED-Bench-R1 package {root}"
    return problems.without_repeats(checked, lambda item: item.record["sample_id"], where=where, field="sample_id",
                                    why=why_unique)


def _media_paths(record: dict, root: str | os.PathLike, where: str, error_class: type[InputError],
                 allow_outside: bool, allow_setting: str) -> tuple[Path | None, Path]:
    progress = record.get("task_progress_metadata")
    if not isinstance(progress, list):
        raise error_class(f"{where}: task_progress_metadata must be a list, got {progress!r}")
    names = ["video_source", "current_observation_basename", *(["video_basename"] if progress else [])]
    for name in names:
        if not (isinstance(record.get(name), str) and record[name].strip()):
            raise error_class(f"{where}: {name} must be a non-empty string, got {record.get(name)!r}")

    def inside(folder: str, field: str) -> Path:
        return inside_root(Path(root).expanduser() / folder / record["video_source"] / record[field], root,
                           where=f"{where}: field {field} {record[field]!r}", setting=allow_setting,
                           allow=allow_outside, error_class=error_class)

    return (inside(VIDEOS, "video_basename") if progress else None), inside(IMAGES, "current_observation_basename")


def media_problems(items: Sequence[tuple[str | None, str]], positions: Sequence[Positions],
                   images_decoded: int) -> list[tuple[int, str, str]]:
    """``(position in items, path, what is wrong)`` for each ``(video or None, image)`` whose image is
    unusable (``image_problems``: every image's first and last bytes, ``images_decoded`` of them decoded
    in full), or whose clip is missing, does not open, or holds fewer frames than its frame plan
    (``positions[i]``) reads; one problem per item, in order. Each clip is opened once and its packets
    read up to the last frame shown, without decoding."""
    problems = []
    unusable = image_problems([image for _, image in items], images_decoded)
    for number, ((video, image), plan) in enumerate(zip(items, positions)):
        if problem := unusable.get(Path(image)):
            problems.append((number, image, problem))
        elif video is not None and not Path(video).is_file():
            problems.append((number, video, f"progress video not found: {video}"))
        elif video is not None:
            problems += [(number, video, message) for _, message in video_problems(video, [plan], _last_shown)]
    return problems


def _last_shown(clip: VideoFile, plan: Positions) -> tuple[int, str]:
    return max(plan(clip.info.num_frames - 1), default=0), "the plan's last frame"


@dataclass
class ProgressFrames:
    frames: list[Image.Image]  # the clip's frames at the plan's positions, in order
    times: list[FrameTime] | None  # when each was shown, from the clip's first frame (None: no clip)
    observation: Image.Image


def read_progress(video: str | os.PathLike | None, image: str | os.PathLike, positions: Positions,
                  max_side: int | None = None) -> ProgressFrames:
    """The frames of the clip that ``positions`` (called with the clip's last index) asks for, timed by
    the clip's container, and the observation image; each frame's longer side at most ``max_side``.
    Without a clip (nothing done yet) the observation stands for each frame of a one-frame clip,
    as copies (untimed)."""
    observation = fit_within(load_image(image), max_side)
    if video is None:
        return ProgressFrames([observation.copy() for _ in positions(0)], None, observation)
    with VideoFile(video) as clip:
        indices = list(positions(clip.info.num_frames - 1))
        return ProgressFrames(clip.frames(indices, max_side=max_side), frame_times(indices, 0, clip.info.fps),
                              observation)
