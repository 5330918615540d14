"""EgoPlan-Bench (Chen et al., "EgoPlan-Bench: Benchmarking Multimodal Large Language Models for
Human-Level Planning"), as its paper and official evaluation code define it.

Protocol, in the order of this module:

1. Data (paper §3, official release): ``EgoPlan_validation.json`` / ``EgoPlan_test.json``, one
   record per multiple-choice question: task goal, question, four candidate actions
   ``choice_a..choice_d`` (``golden_choice_idx`` names the right one on Val; Test has no labels),
   the completed actions (``task_progress_metadata``) and the ``current_observation_frame``.
   Videos: EPIC-KITCHENS-100 RGB frame folders (frame numbers are the file numbers) and Ego4D
   mp4s (frame numbers index the 30 fps canonical video), or pre-cut clips named by sample id.
2. Visual input (§3.3, appendix C.1): task-progress frames sampled from the first action's start
   up to (never past) the current observation frame -- uniformly as one video clip, or per action
   segment (the last N segments x K keyframes, one clip each) -- then the current observation
   frame as a separate, final image.
3. Prompt: the record's own question (what the official evaluation feeds the model), or the
   EgoPlan-IT instruction; configurable through ``lmms_eval_specific_kwargs``.
4. Scoring (§3.5): each candidate's likelihood given visual input and question; the prediction
   is the candidate with the lowest mean token loss. A generative letter-choice variant serves
   backends without likelihood.
5. Breakdowns (§4.2, Table 3, Figures 7-8): accuracy per video source (EpicKitchens = in-domain,
   Ego4D = out-of-domain), by task-progress length and by goal-answer similarity (three
   equal-size levels over the evaluated samples).
6. Test split: the leaderboard submission file ``[{"sample_id": int, "label": "A".."D"}]``.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import re
import string
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from loguru import logger as eval_logger
from PIL import Image

from lmms_egoplan import media
from lmms_egoplan.errors import InputError
from lmms_egoplan.harness import BenchmarkTask, run_file
from lmms_egoplan.metrics import (
    ValueBin,
    bin_of,
    cosine_similarities,
    equal_size_levels,
    largest,
    mean_or_nan,
    parse_bins,
    sentence_embeddings,
)
from lmms_egoplan.settings import SettingsError, setting_name

ENV_PREFIX = "EGOPLAN"
CHOICE_LETTERS = "ABCD"
VIDEO_SOURCES = {"EpicKitchens": "epic_kitchens", "Ego4D": "ego4d"}  # record value -> metric suffix
SIMILARITY_LEVELS = ("low", "medium", "high")
CLIP_EXTENSIONS = (".mp4", ".MP4", ".mkv", ".webm")


@dataclass(frozen=True)
class EgoPlanSettings:
    """Where the data is and how the visual input is built (see the README's settings table)."""

    # Annotation JSON: an absolute path, or a file name inside annotation_dir (set per task).
    annotation_file: str = ""
    annotation_dir: str = ""
    # "raw": EPIC-KITCHENS frame folders + Ego4D videos; "clips": <clips_dir>/<sample_id>.mp4.
    visual_source: str = "raw"
    epic_frames_root: str = ""  # <root>/<participant>/rgb_frames/<video_id>/frame_%010d.jpg
    ego4d_videos_root: str = ""  # <root>/<video_id>.mp4
    ego4d_annotation_fps: float = 30.0  # frame rate EgoPlan's Ego4D frame numbers count in
    clips_dir: str = ""
    # "uniform": num_frames over the whole progress; "keyframes": appendix C.1, the last
    # keyframe_segments completed actions x keyframes_per_segment frames.
    frame_sampling: str = "uniform"
    num_frames: int = 8
    keyframe_segments: int = 4
    keyframes_per_segment: int = 8
    max_side: int | None = None  # downscale frames so the longer side is at most this
    skip_missing: bool = False  # skip samples whose media are missing (count reported) instead of failing
    progress_length_bins: str = "0-4,5-9,10-14,15+"
    similarity_model: str = ""  # sentence-transformers model for goal-answer similarity; "" = all-MiniLM-L6-v2


class EgoPlanDataError(InputError):
    """An annotation record or its media cannot be used; the message names the sample, path and setting."""


# =============================================================================================
# 1. Data: annotation records and where their media live
# =============================================================================================

_RECORD_FIELDS = ("sample_id", "video_source", "video_id", "task_goal", "question", "current_observation_frame",
                  "task_progress_metadata", *(f"choice_{letter.lower()}" for letter in CHOICE_LETTERS))
_ACTION_FIELDS = ("narration_text", "start_frame", "stop_frame")


def annotation_path(settings: EgoPlanSettings) -> Path:
    if not settings.annotation_file:
        raise SettingsError(f"EgoPlan: no annotation file; set {setting_name(ENV_PREFIX, 'annotation_dir')} to "
                            f"the folder holding EgoPlan_validation.json / EgoPlan_test.json")
    path = Path(settings.annotation_file).expanduser()
    if not path.is_absolute():
        if not settings.annotation_dir:
            raise SettingsError(f"EgoPlan: annotation file {settings.annotation_file!r} is relative; set "
                                f"{setting_name(ENV_PREFIX, 'annotation_dir')} to the folder that holds it")
        path = Path(settings.annotation_dir).expanduser() / path
    return path


def read_annotations(path: Path, *, labelled: bool) -> list[dict]:
    """The records of an official annotation file, checked field by field; sample ids are unique."""
    if not path.is_file():
        raise EgoPlanDataError(f"EgoPlan annotation file not found: {path}; set "
                               f"{setting_name(ENV_PREFIX, 'annotation_dir')} "
                               f"(or {setting_name(ENV_PREFIX, 'annotation_file')})")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EgoPlanDataError(f"cannot read EgoPlan annotation file {path}: {error}") from error
    if not isinstance(records, list) or not records:
        raise EgoPlanDataError(f"EgoPlan annotation file {path} must hold a non-empty JSON list of records")
    for position, record in enumerate(records):
        _check_record(record, position, path, labelled=labelled)
    counts = collections.Counter(record["sample_id"] for record in records)
    if duplicates := [sample_id for sample_id, count in counts.items() if count > 1]:
        raise EgoPlanDataError(f"EgoPlan annotation file {path}: sample_id(s) {', '.join(map(repr, duplicates))} "
                               f"appear more than once; each record needs its own (results and the submission "
                               f"are keyed by it)")
    return records


def _check_record(record: Any, position: int, path: Path, *, labelled: bool) -> None:
    where = f"EgoPlan annotation file {path}, record #{position}"
    if not isinstance(record, dict):
        raise EgoPlanDataError(f"{where}: expected a JSON object")
    where += f" (sample_id {record.get('sample_id')!r})"
    required = _RECORD_FIELDS + (("golden_choice_idx",) if labelled else ())
    missing = [name for name in required if name not in record]
    if missing:
        raise EgoPlanDataError(f"{where}: missing field(s) {', '.join(missing)}")
    if record["video_source"] not in VIDEO_SOURCES:
        raise EgoPlanDataError(f"{where}: video_source must be one of {sorted(VIDEO_SOURCES)}, "
                               f"got {record['video_source']!r}")
    if labelled and record["golden_choice_idx"] not in tuple(CHOICE_LETTERS):
        raise EgoPlanDataError(f"{where}: golden_choice_idx must be one of A-D, got {record['golden_choice_idx']!r}")
    actions = record["task_progress_metadata"]
    if not isinstance(actions, list) or any(not isinstance(a, dict) or any(f not in a for f in _ACTION_FIELDS)
                                            for a in actions):
        raise EgoPlanDataError(f"{where}: task_progress_metadata must be a list of objects with "
                               f"{', '.join(_ACTION_FIELDS)}")
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
    path: Callable[[str, Mapping], Path]  # (root, record) -> the record's media


MEDIA_KINDS = {
    "epic_frames": MediaKind("epic_frames_root", "the EPIC-KITCHENS-100 root "
                             "(<root>/<participant>/rgb_frames/<video_id>/frame_%010d.jpg)",
                             lambda root, record: epic_frame_folder(root, record["video_id"])),
    "ego4d_video": MediaKind("ego4d_videos_root", "the Ego4D video folder (<root>/<video_id>.mp4)",
                             lambda root, record: ego4d_video_path(root, record["video_id"])),
    "clip": MediaKind("clips_dir", "the folder of pre-cut clips (<clips_dir>/<sample_id>.mp4)",
                      lambda root, record: clip_path(root, record["sample_id"])),
}


def record_media(record: Mapping, settings: EgoPlanSettings) -> tuple[str, Path]:
    """The kind of a record's media (a key of ``MEDIA_KINDS``) and its path."""
    if settings.visual_source == "clips":
        kind = "clip"
    else:
        kind = "epic_frames" if record["video_source"] == "EpicKitchens" else "ego4d_video"
    media_kind = MEDIA_KINDS[kind]
    root = getattr(settings, media_kind.setting)
    if not root:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, media_kind.setting)} is not set; it must point at "
                            f"{media_kind.layout} (visual_source={settings.visual_source!r})")
    return kind, media_kind.path(root, record)


# =============================================================================================
# 2. Visual input: which frames (annotation frame numbers), then decoding
# =============================================================================================


def bin_starts(first: int, end: int, count: int) -> list[int]:
    """The first frame of each of ``count`` equal bins of ``[first, end)``, as the official
    EgoPlan evaluation samples; all lie before ``end`` unless the range is empty (then ``first``)."""
    if end <= first:
        return [first] * count
    return [first + (i * (end - first)) // count for i in range(count)]


def task_start_frame(record: Mapping) -> int:
    """Where the task progress starts: the first action's start (the observation when none is done)."""
    actions = record["task_progress_metadata"]
    return actions[0]["start_frame"] if actions else record["current_observation_frame"]


def progress_clips(record: Mapping, settings: EgoPlanSettings) -> list[list[int]]:
    """Task-progress frames as video clips (annotation frame numbers, time order), none past the
    observation frame.

    ``uniform``: one clip of ``num_frames`` frames over [first action start, observation).
    ``keyframes`` (appendix C.1): one clip per action segment -- the last ``keyframe_segments``
    actions completed by the observation frame, each cut at the next action's start (the last at
    the observation), ``keyframes_per_segment`` frames each. With nothing completed yet, the
    observation frame stands in for the progress (one clip).
    """
    observation = record["current_observation_frame"]
    if settings.frame_sampling == "uniform":
        return [bin_starts(task_start_frame(record), observation, settings.num_frames)]
    completed = [a for a in record["task_progress_metadata"] if a["stop_frame"] <= observation]
    segments = completed[-settings.keyframe_segments:]
    if not segments:
        return [[observation] * settings.keyframes_per_segment]
    clips = []
    for position, action in enumerate(segments):
        stop = segments[position + 1]["start_frame"] if position + 1 < len(segments) else observation
        stop = max(action["start_frame"], min(action["stop_frame"], stop))
        clips.append(bin_starts(action["start_frame"], stop + 1, settings.keyframes_per_segment))
    return clips


def progress_clip_name(position: int) -> str:
    """The video-clip tag of a doc's progress clip at ``position`` (from 0)."""
    return f"task_progress_{position + 1}"


def doc_frame_numbers(doc: Mapping) -> list[int]:
    """Every frame a doc shows (annotation frame numbers): the task-progress clips, then the observation."""
    return [*itertools.chain.from_iterable(doc["progress_clips"]), doc["current_observation_frame"]]


# Frames are read through one reader per doc; lmms-eval asks for a doc's visuals once per
# candidate (4 times per question), so the last few docs' frames are kept.
_VISUAL_MEMO_SIZE = 8
_visual_memo: collections.OrderedDict[tuple, tuple[Image.Image, ...]] = collections.OrderedDict()
_visual_memo_lock = threading.Lock()


def doc_to_visual(doc: Mapping) -> list[Image.Image]:
    """Task-progress frames (each progress clip tagged as a video clip), then the current
    observation frame (untagged: an image of its own).

    A flat list of PIL images: lmms-eval's own backends take it as a sequence of images; the
    suite's backend regroups the tagged frames into videos (``media.group_visuals``): one in
    ``uniform`` mode, one per action segment in ``keyframes`` mode.
    """
    key = (doc["media_kind"], doc["media_path"], tuple(map(tuple, doc["progress_clips"])),
           doc["current_observation_frame"], doc["clip_first_frame"], doc["frame_rate"], doc["max_side"])
    with _visual_memo_lock:
        if key in _visual_memo:
            _visual_memo.move_to_end(key)
            return list(_visual_memo[key])
    frames = iter(_distinct_images(_read_frames(doc, doc_frame_numbers(doc))))
    visuals = []
    for position, clip in enumerate(doc["progress_clips"]):
        visuals += media.as_video_frames([next(frames) for _ in clip], clip=progress_clip_name(position))
    visuals = (*visuals, next(frames))
    with _visual_memo_lock:
        _visual_memo[key] = visuals
        while len(_visual_memo) > _VISUAL_MEMO_SIZE:
            _visual_memo.popitem(last=False)
    return list(visuals)


def _distinct_images(images: Sequence[Image.Image]) -> list[Image.Image]:
    """``images`` with repeated objects copied: a frame number shown twice (in two clips, or also
    as the observation) is one decoded image, and each position must carry its own clip tag."""
    seen: set[int] = set()
    distinct = []
    for image in images:
        distinct.append(image.copy() if id(image) in seen else image)
        seen.add(id(image))
    return distinct


def _read_frames(doc: Mapping, numbers: Sequence[int]) -> list[Image.Image]:
    try:
        if doc["media_kind"] == "epic_frames":
            return media.FrameFolder(doc["media_path"]).frames(numbers, max_side=doc["max_side"])
        with media.VideoFile(doc["media_path"]) as video:
            return video.frames(video_indices(doc, video, numbers), max_side=doc["max_side"])
    except media.MediaError as error:
        raise EgoPlanDataError(f"EgoPlan sample {doc['sample_id']}: {error}") from error


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
# Loading: records -> docs (paths and frame numbers, never decoded media), media checked up front
# =============================================================================================


@dataclass(frozen=True)
class MissingMedia:
    sample_id: int
    path: str
    message: str  # what is missing, and the setting that points at it

    def __str__(self) -> str:
        return f"sample {self.sample_id}: {self.message}"


@dataclass
class LoadedSamples:
    docs: list[dict]
    skipped: list[MissingMedia]


def load_samples(settings: EgoPlanSettings, *, labelled: bool) -> LoadedSamples:
    """Docs for every record of the annotation file, with their media checked.

    A missing frame folder, frame, video or clip raises one EgoPlanDataError naming the sample,
    the path and the setting to change -- or, with ``skip_missing``, drops the sample and
    records it in ``skipped``.
    """
    check_visual_settings(settings)
    bins = progress_bins(settings)
    records = read_annotations(annotation_path(settings), labelled=labelled)
    docs = [_record_to_doc(record, settings, bins) for record in records]
    problems = find_missing_media(docs)
    if problems and not settings.skip_missing:
        others = f" ({len(problems) - 1} more sample(s) have missing media)" if len(problems) > 1 else ""
        raise EgoPlanDataError(f"EgoPlan {problems[0]}{others}. Set {setting_name(ENV_PREFIX, 'skip_missing')} to "
                               f"true to skip such samples instead (they are counted in the skipped_samples metric)")
    missing_ids = {problem.sample_id for problem in problems}
    return LoadedSamples(docs=[d for d in docs if d["sample_id"] not in missing_ids], skipped=problems)


def check_visual_settings(settings: EgoPlanSettings) -> None:
    choices = {"visual_source": ("raw", "clips"), "frame_sampling": ("uniform", "keyframes")}
    for field, allowed in choices.items():
        if getattr(settings, field) not in allowed:
            raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, field)} must be one of {', '.join(allowed)}, "
                                f"got {getattr(settings, field)!r}")
    for field in ("num_frames", "keyframe_segments", "keyframes_per_segment"):
        if getattr(settings, field) < 1:
            raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, field)} must be at least 1, "
                                f"got {getattr(settings, field)}")
    if settings.ego4d_annotation_fps <= 0:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'ego4d_annotation_fps')} must be positive")


def progress_bins(settings: EgoPlanSettings) -> tuple[ValueBin, ...]:
    try:
        return parse_bins(settings.progress_length_bins)
    except ValueError as error:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'progress_length_bins')}: {error}") from None


def _record_to_doc(record: Mapping, settings: EgoPlanSettings, bins: Sequence[ValueBin]) -> dict:
    kind, path = record_media(record, settings)
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
        "current_observation_frame": record["current_observation_frame"],
        "task_progress_metadata": record["task_progress_metadata"],
        "progress_length": progress_length,
        "progress_bucket": bin_of(progress_length, bins).label,
        "media_kind": kind,
        "media_path": str(path),
        "progress_clips": progress_clips(record, settings),
        "clip_first_frame": task_start_frame(record),
        "frame_rate": settings.ego4d_annotation_fps if kind == "ego4d_video" else None,
        "max_side": settings.max_side,
    }


def find_missing_media(docs: Sequence[Mapping]) -> list[MissingMedia]:
    """The docs whose frame folder, frames, video or clip is missing, in doc order.

    Frame folders are checked frame by frame; each Ego4D video is opened once to check its
    length; clips are checked for existence (their length is read when decoding).
    """
    problems = []
    by_video: dict[str, list[Mapping]] = collections.defaultdict(list)
    for doc in docs:
        path = Path(doc["media_path"])
        if doc["media_kind"] == "ego4d_video":
            by_video[doc["media_path"]].append(doc)
        elif doc["media_kind"] == "epic_frames":
            if not path.is_dir():
                problems.append((doc, path, f"frame folder not found: {path}"))
            elif missing := media.FrameFolder(path).missing(doc_frame_numbers(doc)):
                problems.append((doc, missing[0], f"{len(missing)} frame(s) missing, e.g. {missing[0]}"))
        elif not path.is_file():
            problems.append((doc, path, f"clip not found: {path}"))
    for path, video_docs in by_video.items():
        try:
            with media.VideoFile(path) as video:
                for doc in video_docs:
                    last = max(video_indices(doc, video, doc_frame_numbers(doc)))
                    if last >= video.info.num_frames:
                        message = (f"frame {doc['current_observation_frame']} (file index {last}) is past the end "
                                   f"of {path} ({video.info.num_frames} frames at {video.info.fps:g} fps)")
                        problems.append((doc, path, message))
        except media.MediaError as error:
            problems += [(doc, path, str(error)) for doc in video_docs]
    order = {id(doc): position for position, doc in enumerate(docs)}
    problems.sort(key=lambda problem: order[id(problem[0])])
    return [MissingMedia(doc["sample_id"], str(path),
                         f"{message}; check {setting_name(ENV_PREFIX, MEDIA_KINDS[doc['media_kind']].setting)}")
            for doc, path, message in problems]


# =============================================================================================
# 3. Prompt
# =============================================================================================

# The instruction the official code evaluates its EgoPlan-IT-tuned model with (lmms-eval's
# built-in `egoplan` task uses it too); the vanilla evaluation feeds the record's question.
_EGOPLAN_IT_OPENINGS = {"gerund": "I am tasked with {goal}. ", "imperative": "My current task is to {goal}. "}
_EGOPLAN_IT_REST = ("The task's progress is demonstrated in the provided video. "
                    "My current field of view is shown in the provided image. "
                    "What should be my next action? "
                    "Please output the most reasonable action you think, expressed in a short phrase.")
QUESTION_FORMATS = ("dataset", "egoplan_it")


def question_text(doc: Mapping, question_format: str = "dataset") -> str:
    if question_format == "dataset":
        return doc["question"]
    if question_format == "egoplan_it":
        goal = doc["task_goal"].strip(string.punctuation + " ").lower()
        if "goal" in goal:  # "the goal is to X" -> "X", as the official prompt builder does
            goal = goal.split("to", 1)[-1].strip()
        form = "gerund" if goal.split()[0].endswith("ing") else "imperative"
        return _EGOPLAN_IT_OPENINGS[form].format(goal=goal) + _EGOPLAN_IT_REST
    raise ValueError(f"EgoPlan: lmms_eval_specific_kwargs.question_format must be one of "
                     f"{', '.join(QUESTION_FORMATS)}, got {question_format!r}")


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The instruction for likelihood ranking: the question alone (candidates are continuations)."""
    kwargs = lmms_eval_specific_kwargs or {}
    question = question_text(doc, kwargs.get("question_format", "dataset"))
    return f"{kwargs.get('pre_prompt', '')}{question}{kwargs.get('post_prompt', '')}"


def doc_to_text_with_options(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The instruction for generative letter choice: the question, then ``A. ...`` to ``D. ...``."""
    kwargs = lmms_eval_specific_kwargs or {}
    options = "\n".join(f"{letter}. {choice}" for letter, choice in zip(CHOICE_LETTERS, doc_to_choice(doc)))
    question = question_text(doc, kwargs.get("question_format", "dataset"))
    return f"{kwargs.get('pre_prompt', '')}{question}\n{options}{kwargs.get('post_prompt', '')}"


# =============================================================================================
# 4. Candidates and scoring
# =============================================================================================


def doc_to_choice(doc: Mapping) -> list[str]:
    """The four candidate actions in the release's order, A to D."""
    return [doc[f"choice_{letter.lower()}"] for letter in CHOICE_LETTERS]


def doc_to_target(doc: Mapping) -> int | None:
    """Index of the right candidate (``golden_choice_idx``); None on the unlabelled Test split."""
    golden = doc.get("golden_choice_idx")
    return CHOICE_LETTERS.index(golden) if golden else None


def candidate_loss(result: Sequence) -> float:
    """The loss in one loglikelihood result ``(loss, is_greedy)`` (a list once logged as JSON).

    The pairs reach ``process_results`` intact because installing this suite patches lmms-eval
    0.7.3, which would otherwise turn them into strings (``lmms_eval_compat.keep_loglikelihood_results``).
    """
    return float(result[0])


def ranked_choice(results: Sequence[Sequence]) -> int:
    """The candidate with the lowest mean token loss (lmms-eval's backends return losses).

    Ties go to the earlier candidate, as ``argmin`` in the official evaluation.
    """
    losses = [candidate_loss(result) for result in results]
    return min(range(len(losses)), key=losses.__getitem__)


def labelled_scores(doc: Mapping, predicted: int | None) -> dict[str, Any]:
    """Accuracy overall and in every breakdown the doc belongs to (an unparsed answer is wrong)."""
    correct = float(predicted is not None and predicted == doc_to_target(doc))
    # The similarity levels are fixed only once all samples are in; this record (also what the
    # logged samples show of the prediction) is what their aggregation needs.
    record = {"sample_id": doc["sample_id"], "task_goal": doc["task_goal"], "answer": doc["answer"],
              "prediction": CHOICE_LETTERS[predicted] if predicted is not None else None, "correct": correct}
    return {
        "accuracy": correct,
        f"accuracy_{VIDEO_SOURCES[doc['video_source']]}": correct,
        f"accuracy_progress_{doc['progress_bucket']}": correct,
        **{f"accuracy_similarity_{level}": record for level in SIMILARITY_LEVELS},
    }


def process_ranking_results(doc: Mapping, results: Sequence[Sequence]) -> dict[str, Any]:
    return labelled_scores(doc, ranked_choice(results))


def process_generation_results(doc: Mapping, results: Sequence[str]) -> dict[str, Any]:
    predicted = extract_choice(results[0], doc_to_choice(doc))
    return {**labelled_scores(doc, predicted), "unparseable": float(predicted is None)}


_BARE_LETTER = re.compile(r"[(\[]?\s*([A-Da-d])\s*[)\]]?[.:]?")
_STATED_LETTER = re.compile(
    r"\b(?:answer|option|choice|choose|chose|select|pick)\b"
    r"(?:\s+(?:is|would\s+be|should\s+be|will\s+be))?\s*[:\-]?\s*(?:(?:option|choice)\s+)?"
    r"(?P<open>[(\[])?(?P<letter>[A-Da-d])(?P<close>[)\]])?(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_LEADING_LETTER = re.compile(r"^(?:[(\[]([A-Da-d])[)\]]|([A-D])\s*[.:)\-]|([a-d])[.)])")
_LONE_CAPITAL = re.compile(r"(?<![A-Za-z0-9'])([A-D])(?![A-Za-z0-9'])")
# "A good step ..." is the article; "A or B", "A is right" name option A.
_ARTICLE_FOLLOWER = re.compile(r"\s+(?!(?:or|and|is|was|seems|would|should|because|since)\b)[a-z]")


def extract_choice(response: str, choices: Sequence[str]) -> int | None:
    """The candidate a free-form answer picks, or None when it cannot be told.

    In order: a bare letter ("B", "(b)"); a stated letter ("The answer is (B)", "option C";
    the last one counts); a leading letter ("B. open cupboard"); the text of exactly one
    candidate; exactly one distinct stand-alone capital A-D. An "a" / "A" followed by a word
    ("the answer is a knife", "A good step") is the article, not option A.
    """
    text = (response or "").strip()
    if not text:
        return None
    if match := _BARE_LETTER.fullmatch(text):
        return CHOICE_LETTERS.index(match.group(1).upper())
    stated = [m for m in _STATED_LETTER.finditer(text) if not _is_article(text, m)]
    if stated:
        return CHOICE_LETTERS.index(stated[-1].group("letter").upper())
    if match := _LEADING_LETTER.match(text):
        return CHOICE_LETTERS.index(next(g for g in match.groups() if g).upper())
    named = _named_choices(text, choices)
    if len(named) == 1:
        return named[0]
    letters = {m.group(1) for m in _LONE_CAPITAL.finditer(text)
               if not (m.group(1) == "A" and _ARTICLE_FOLLOWER.match(text, m.end()))}
    return CHOICE_LETTERS.index(letters.pop()) if len(letters) == 1 else None


def _is_article(text: str, match: re.Match) -> bool:
    bracketed = match.group("open") or match.group("close")
    return match.group("letter") == "a" and not bracketed and bool(re.match(r"\s+[A-Za-z]", text[match.end():]))


def _normalized(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _named_choices(text: str, choices: Sequence[str]) -> list[int]:
    """Candidates whose text appears in ``text``, leaving out those inside a longer named one."""
    padded = f" {_normalized(text)} "
    named = {i: _normalized(c) for i, c in enumerate(choices) if _normalized(c) and f" {_normalized(c)} " in padded}
    return [i for i, c in named.items() if not any(j != i and c != other and c in other for j, other in named.items())]


# =============================================================================================
# 5. Breakdowns computed over the evaluated set
# =============================================================================================


def check_similarity_model(settings: EgoPlanSettings) -> None:
    """Load the goal-answer similarity model now rather than at aggregation, after the paid model run.

    On the CPU: only rank 0 aggregates, and the check should not take GPU memory on every rank.
    """
    try:
        sentence_embeddings(["store cereal"], settings.similarity_model or None, device="cpu")
    except (ImportError, OSError, ValueError) as error:
        raise SettingsError(f"EgoPlan: {setting_name(ENV_PREFIX, 'similarity_model')}: cannot load the goal-answer "
                            f"similarity model {settings.similarity_model or 'all-MiniLM-L6-v2'!r}: {error}") from error


def similarity_level_accuracy(items: Sequence[Mapping], *, level: int, model: str = "") -> float:
    """Accuracy within one of three equal-size goal-answer similarity levels (paper Figure 7).

    The paper ranks EgoPlan-Val by BERTScore between task goal and right answer; here the
    similarity is the cosine of sentence embeddings (all-MiniLM-L6-v2 by default, offline).
    Levels are tertiles of the evaluated samples (ties broken by sample id), lowest first.
    """
    similarities = cosine_similarities([(item["task_goal"], item["answer"]) for item in items], model or None)
    ranked = [(similarity, item["sample_id"], item["correct"]) for similarity, item in zip(similarities, items)]
    levels = equal_size_levels(ranked, key=lambda entry: entry[:2], n_levels=len(SIMILARITY_LEVELS))
    return mean_or_nan([correct for _, _, correct in levels[level]])


# =============================================================================================
# 6. Test split: the leaderboard submission file
# =============================================================================================


def process_submission_results(doc: Mapping, results: Sequence[Sequence]) -> dict[str, Any]:
    return {"predictions": {"sample_id": doc["sample_id"], "label": CHOICE_LETTERS[ranked_choice(results)]}}


def validate_submission(records: Any, sample_ids: Iterable[int] | None = None) -> None:
    """Raise ValueError unless ``records`` is ``[{"sample_id": int, "label": "A".."D"}, ...]``
    with unique ids (and, if given, exactly ``sample_ids``)."""
    if not isinstance(records, list):
        raise ValueError("an EgoPlan submission is a JSON list")
    for record in records:
        if not (isinstance(record, dict) and set(record) == {"sample_id", "label"}
                and isinstance(record["sample_id"], int) and not isinstance(record["sample_id"], bool)
                and record["label"] in tuple(CHOICE_LETTERS)):
            raise ValueError(f"bad submission record {record!r}: expected {{'sample_id': int, 'label': 'A'..'D'}}")
    ids = [record["sample_id"] for record in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate sample ids in submission: {sorted(i for i, n in collections.Counter(ids).items() if n > 1)}")
    if sample_ids is not None and set(ids) != set(sample_ids):
        raise ValueError(f"submission covers {len(set(ids))} sample ids, expected {len(set(sample_ids))}")


def write_submission(items: Sequence[Mapping], args=None, *, task_name: str) -> int:
    """Aggregation of ``egoplan_test``: write the submission file beside the results file
    (``harness.run_file``: ``<output_path>/<model>/<date-time>_submission_<task>.json``); report its size."""
    records = sorted(({"sample_id": int(item["sample_id"]), "label": item["label"]} for item in items),
                     key=lambda record: record["sample_id"])
    validate_submission(records)
    path = run_file(args, task_name, "submission", ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    eval_logger.info(f"EgoPlan-Test submission ({len(records)} predictions) written to {path}")
    return len(records)


# =============================================================================================
# Tasks
# =============================================================================================


class EgoPlanValidation(BenchmarkTask):
    """EgoPlan-Val (labelled): accuracy and the paper's breakdowns."""

    Settings = EgoPlanSettings
    ENV_PREFIX = ENV_PREFIX
    LABELLED: ClassVar[bool] = True

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        # Metrics whose names or parameters come from settings join those the YAML lists.
        self.add_metric("skipped_samples", largest, higher_is_better=False)
        if self.LABELLED:
            for value_bin in progress_bins(self.settings):
                self.add_metric(f"accuracy_progress_{value_bin.label}", "mean")
            for level, name in enumerate(SIMILARITY_LEVELS):
                self.add_metric(f"accuracy_similarity_{name}", functools.partial(
                    similarity_level_accuracy, level=level, model=self.settings.similarity_model))

    def load_docs(self) -> list[dict]:
        loaded = load_samples(self.settings, labelled=self.LABELLED)
        if self.LABELLED:
            check_similarity_model(self.settings)
        self.skipped_samples = loaded.skipped
        if loaded.skipped:
            eval_logger.warning(f"{self.config.task}: skipped {len(loaded.skipped)} sample(s) with missing media "
                                f"({setting_name(ENV_PREFIX, 'skip_missing')}):\n  "
                                + "\n  ".join(map(str, loaded.skipped)))
        return loaded.docs

    def process_results(self, doc, results, full_docs=None):
        return {**super().process_results(doc, results, full_docs), "skipped_samples": float(len(self.skipped_samples))}


class EgoPlanTest(EgoPlanValidation):
    """EgoPlan-Test (no labels): predictions for the leaderboard, never an accuracy."""

    LABELLED: ClassVar[bool] = False
