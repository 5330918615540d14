"""EgoPlan-Bench2's questions and their media, from either source, every record and every video
checked before a run (docs hold paths and frame numbers, never decoded media).

* ``data_source: official``: the release's ``EgoPlan-Bench2.json`` (one JSON list of records, the
  format of the ``qiulu66/EgoPlan-Bench2`` README) and the Ego4D ``v1_288p`` videos,
  ``<ego4d_videos_root>/<video uid>.mp4``, the uid being the sample id up to its first "_", as
  ``eval.py`` opens them (lines 69 and 79).
* ``data_source: seed_bench_r1``: Level 3 of the authors' Hub package ``TencentARC/SEED-Bench-R1``
  (``lmms_egoplan.core.seed_bench_r1``): per question a re-encoded task-progress clip and the current
  observation as an image. Not the official frames (tasks/egoplan_bench2/README.md, Fidelity).

``lmms_egoplan.egoplan_bench2.task`` holds the protocol; this module holds what it loads. Functions
taking ``settings`` receive an ``EgoPlanBench2Settings``.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core import seed_bench_r1
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_json_list
from lmms_egoplan.core.media import LoadedSamples, MissingMedia, video_problems
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.core.statistics import shared_labels

ENV_PREFIX = entry("egoplan_bench2").env_prefix  # settings are overridden by environment variables EGOPLAN2_<SETTING>
CHOICE_LETTERS = "ABCD"
# The paper's four domains (§3.1), in the order its tables and later papers' print them; each record names one.
DOMAINS = ("Daily life", "Hobbies", "Recreation", "Work")
DATA_SOURCES = ("official", "seed_bench_r1")
SEED_BENCH_R1_LEVEL = 3  # the package's Level 3 is EgoPlan-Bench2 (its README, "Data")
# keyframes: separate images, as eval.py gives image models (--frame_number, default 8: line 157);
# clip: one video of the [task start, observation] clip, sampled as LongVA, eval.py's video model, samples
# the cut clip (models/LongVA/inference.py: num_sampled_frames = 32, line 572).
OFFICIAL_FRAME_COUNTS = {"keyframes": 8, "clip": 32}
FRAME_SAMPLINGS = tuple(OFFICIAL_FRAME_COUNTS)


class EgoPlanBench2DataError(InputError):
    """A record or its media cannot be used; the message names the file, the record and the field or setting."""


# =============================================================================================
# Records
# =============================================================================================


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_frame(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# What each field of a question must be, from either source, and how to say it.
_QUESTION_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sample_id": (lambda value: _is_text(value) or (isinstance(value, int) and not isinstance(value, bool)),
                  "a non-empty string or an integer"),
    "domain": (_is_text, "a non-empty string"),
    "scenario": (_is_text, "a non-empty string"),
    "task_goal": (_is_text, "a non-empty string"),
    **{f"choice_{letter.lower()}": (_is_text, "a non-empty string") for letter in CHOICE_LETTERS},
    "golden_choice_idx": (lambda value: value in tuple(CHOICE_LETTERS), "one of A, B, C, D"),
}
# The official release's frame numbers (the package replaces them by its clip and image).
_FRAME_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sample_id": (_is_text, "a string '<video uid>_<n>' (eval.py opens <video uid>.mp4)"),
    "task_start_frame": (_is_frame, "a frame number (an integer >= 0)"),
    "current_observation_frame": (_is_frame, "a frame number (an integer >= 0)"),
}


def check_record(record: Any, where: str, *, with_frames: bool) -> None:
    """Raise EgoPlanBench2DataError naming ``where`` (file and record) and the field unless ``record``
    is a question of the release's format (``with_frames``: with its frame numbers)."""
    if not isinstance(record, dict):
        raise EgoPlanBench2DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    where += f" (sample_id {record.get('sample_id')!r})"
    fields = {**_QUESTION_FIELDS, **(_FRAME_FIELDS if with_frames else {})}
    if missing := [name for name in fields if name not in record]:
        raise EgoPlanBench2DataError(f"{where}: missing field(s) {', '.join(missing)}")
    for name, (valid, expected) in fields.items():
        if not valid(record[name]):
            raise EgoPlanBench2DataError(f"{where}: {name} must be {expected}, got {record[name]!r}")
    if with_frames and record["current_observation_frame"] < record["task_start_frame"]:
        raise EgoPlanBench2DataError(f"{where}: current_observation_frame {record['current_observation_frame']} comes "
                                     f"before task_start_frame {record['task_start_frame']}")


# Why a question's sample id must be its own.
_UNIQUE_IDS = "results and sample logs are keyed by it"


def annotation_path(settings) -> Path:
    path = Path(settings.annotation_file).expanduser()
    if path.is_absolute():
        return path
    if not settings.annotation_dir:
        raise SettingsError(f"EgoPlan-Bench2: set {setting_name(ENV_PREFIX, 'annotation_dir')} to the folder holding "
                            f"{settings.annotation_file} (or {setting_name(ENV_PREFIX, 'annotation_file')} "
                            f"to its path)")
    return Path(settings.annotation_dir).expanduser() / path


def read_annotations(path: Path, problems: DatasetProblems) -> list[tuple[str, dict]]:
    """``(where, record)`` for each record of the release's annotation file that passes the checks,
    field by field, with a sample id of its own; each other record's problem joins ``problems``."""
    records = read_json_list(path, EgoPlanBench2DataError, what="EgoPlan-Bench2 annotation file",
                             folder_setting=setting_name(ENV_PREFIX, "annotation_dir"),
                             file_setting=setting_name(ENV_PREFIX, "annotation_file"))
    located = []
    for position, record in enumerate(records):
        where = f"EgoPlan-Bench2 annotation file {path}, record #{position}"
        with problems.collected():
            check_record(record, where, with_frames=True)
            located.append((f"{where} (sample_id {record['sample_id']!r})", record))
    return problems.without_repeats(located, lambda pair: pair[1]["sample_id"], where=str(path), field="sample_id",
                                    why=_UNIQUE_IDS)


def video_uid(sample_id: str) -> str:
    """The Ego4D video of a question: its sample id up to the first "_" (eval.py lines 69 and 79)."""
    return sample_id.split("_")[0]


# =============================================================================================
# Which frames a question shows (eval.py: cut_keyframes, cut_video_clip; LongVA's load_video)
# =============================================================================================


def frame_count(settings) -> int:
    """Frames shown per question: ``num_frames``, or the official count of the frame sampling."""
    return settings.num_frames or OFFICIAL_FRAME_COUNTS[settings.frame_sampling]


def shown_frames(first: int, last: int, count: int) -> list[int]:
    """``np.linspace(first, last, count, endpoint=True, dtype=int)``: the keyframes of ``cut_keyframes``
    (eval.py line 63), from the task's start to the current observation, both included. It is also how
    LongVA samples the cut clip [start, observation] (``np.linspace(0, total - 1, count, dtype=int)``,
    models/LongVA/inference.py lines 300-302), shifted by the clip's first frame: a whole number plus a
    truncated fraction is the truncated sum, so both give the same frames."""
    import numpy as np

    return np.linspace(first, last, count, endpoint=True, dtype=int).tolist()


def package_positions(count: int) -> seed_bench_r1.Positions:
    """A package question's frame plan over its progress clip ``0..last``: the same ``count`` frames
    over the clip, the last of which, the observation, is the package's image instead (so the clip
    gives all but the last)."""
    return lambda last: shown_frames(0, last, count)[:-1]


# =============================================================================================
# Loading: records -> docs, media checked up front
# =============================================================================================


def load_samples(settings) -> LoadedSamples:
    """A doc per question of the chosen source, in the source's order, with its media checked.

    Every problem of the data -- a record's field, a path out of its root, a missing or unusable video
    or image, a frame past the end of a video, a damaged or cut-short file -- is listed in one
    EgoPlanBench2DataError naming the file, record and field or the sample, path and setting; with
    ``skip_missing``, questions whose media are unusable are dropped instead and listed in ``skipped``.
    """
    problems = DatasetProblems("the EgoPlan-Bench2 data", EgoPlanBench2DataError)
    if settings.data_source == "seed_bench_r1":
        docs, unusable = _package_docs(settings, problems)
    else:
        docs, unusable = _official_docs(settings, problems)
    for field in ("domain", "scenario"):  # two names of one label would be scored as one breakdown
        for problem in shared_labels((doc[field] for doc in docs), f"{field}s"):
            problems.add(problem)
    skipped = [MissingMedia(docs[number]["sample_id"], str(path), problem) for number, path, problem in unusable]
    problems.unusable_media(skipped, skip=settings.skip_missing, label="EgoPlan-Bench2",
                            skip_setting=setting_name(ENV_PREFIX, "skip_missing"))
    left_out = {number for number, _, _ in unusable}
    return LoadedSamples([doc for number, doc in enumerate(docs) if number not in left_out], skipped)


def _question(record: Mapping) -> dict:
    return {name: record[name] for name in _QUESTION_FIELDS}


def _media_settings(settings) -> dict:
    return {"frame_sampling": settings.frame_sampling, "num_frames": frame_count(settings),
            "max_side": settings.max_side, "short_side": settings.ego4d_short_side}


def _official_docs(settings, problems: DatasetProblems) -> tuple[list[dict], list[tuple[int, Path, str]]]:
    root = settings.ego4d_videos_root
    if not root:
        raise SettingsError(f"EgoPlan-Bench2: {setting_name(ENV_PREFIX, 'ego4d_videos_root')} is not set; "
                            f"it must point "
                            f"at the Ego4D v1_288p folder (<root>/<video uid>.mp4)")
    count = frame_count(settings)
    docs = []
    for where, record in read_annotations(annotation_path(settings), problems):
        with problems.collected():
            video = inside_root(Path(root).expanduser() / f"{video_uid(record['sample_id'])}.mp4", root,
                                where=f"{where}: field sample_id", error_class=EgoPlanBench2DataError,
                                setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"),
                                allow=settings.allow_paths_outside_root)
            start, observation = record["task_start_frame"], record["current_observation_frame"]
            docs.append({**_question(record), "media_kind": "ego4d_video", "video": str(video),
                         "observation_image": None, "task_start_frame": start, "current_observation_frame": observation,
                         "frame_numbers": shown_frames(start, observation, count),
                         "frame_rate": settings.annotation_fps, **_media_settings(settings)})
    return docs, _video_problems(docs)


def _video_problems(docs: Sequence[Mapping]) -> list[tuple[int, Path, str]]:
    """Each doc whose Ego4D video is missing or unreadable up to its observation frame, in doc order;
    each video opened once."""
    by_video: dict[str, list[int]] = collections.defaultdict(list)
    for number, doc in enumerate(docs):
        by_video[doc["video"]].append(number)
    setting = setting_name(ENV_PREFIX, "ego4d_videos_root")

    def last_frame(video, number: int) -> tuple[int, str]:
        return file_index(video, docs[number]["current_observation_frame"], docs[number]["frame_rate"]), \
            f"observation frame {docs[number]['current_observation_frame']}"

    problems = [(number, Path(path), f"{message}; check {setting}") for path, numbers in by_video.items()
                for number, message in video_problems(path, numbers, last_frame)]
    return sorted(problems, key=lambda problem: problem[0])


def file_index(video, number: int, annotation_fps: float) -> int:
    """The index in ``video`` of annotation frame ``number``: the frame on screen at ``number /
    annotation_fps`` seconds (the same index in the release's 30 fps videos; the right frame in a
    copy re-encoded at another rate)."""
    return video.index_at(number / annotation_fps)


def _package_docs(settings, problems: DatasetProblems) -> tuple[list[dict], list[tuple[int, Path, str]]]:
    checked = seed_bench_r1.checked_records(
        settings, [SEED_BENCH_R1_LEVEL], label="EgoPlan-Bench2", env_prefix=ENV_PREFIX, problems=problems,
        why_unique=_UNIQUE_IDS, check=lambda item: check_record(item.record, item.where, with_frames=False))
    docs = [{**_question(item.record), "media_kind": "seed_bench_r1",
             "video": None if item.video is None else str(item.video), "observation_image": str(item.image),
             "task_start_frame": None, "current_observation_frame": None, "frame_numbers": None, "frame_rate": None,
             **_media_settings(settings)} for item in checked]
    plan = package_positions(frame_count(settings))
    unusable = seed_bench_r1.media_problems([(doc["video"], doc["observation_image"]) for doc in docs],
                                            [plan] * len(docs), settings.images_decoded_at_load)
    setting = setting_name(ENV_PREFIX, "seed_bench_r1_root")
    return docs, [(number, Path(path), f"{problem}; check {setting}") for number, path, problem in unusable]

