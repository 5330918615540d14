"""EgoIntent's data: the three annotated dimensions of step-level intent; the two layouts it is read
from -- the authors' release (``RELEASE``: a folder per event, a pre-cut clip per step) and the
suite's flat file (a record per step, times into whole videos) -- each checked step by step, with
every problem of a dataset, its media included, in one error; and each step's pre-outcome clip
planned as frame indices (docs hold paths and indices, never decoded frames).

The protocol is in ``lmms_egoplan.egointent.task``. Functions taking ``settings`` receive an
``egointent.protocol.EgoIntentSettings``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from lmms_egoplan.catalogue import entry
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_jsonl, read_text
from lmms_egoplan.core.media import (
    LoadedSamples,
    MissingMedia,
    VideoFile,
    VideoInfo,
    frame_at,
    last_frame_before,
    uniform_indices,
    video_problems,
)
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import breakdown_label, shared_labels

ENV_PREFIX = entry("egointent").env_prefix  # settings are overridden by environment variables EGOINTENT_<SETTING>


# =============================================================================================
# The three dimensions of step-level intent (the authors' README; section 3.2 of arXiv v1)
# =============================================================================================


@dataclass(frozen=True)
class Dimension:
    field: str  # answer key, metric name and the flat file's reference field
    label: str  # as the authors name it, in the prompts and the tables
    # What the judge is told the dimension means, by the setting ``definitions`` (DEFINITIONS): the release's
    # (its README, e6cf8e9, made precise by the authors' prediction prompt, 3528dc9 prompts/) or arXiv v1's.
    definitions: Mapping[str, str]
    v1_question: str  # what the v1 prompt (definitions: v1) asks
    former_fields: tuple[str, ...] = ()  # its names before the release (arXiv v1), still read in flat files and logs


# The setting ``definitions``: what the model is asked and the judge told. release: the authors' prediction
# prompts (YePan2/EgoIntent@3528dc9, prompts/) and the release README's definitions (@e6cf8e9); v1: the
# suite's prompt and judge up to task version 3 (arXiv v1's definitions), for comparisons with v1's Table 3.
DEFINITIONS = ("release", "v1")
DIMENSIONS = (
    Dimension("local_intent", "Local Intent", {
        "release": "the actor's immediate goal in the current micro-step: what the actor is trying to accomplish "
                   "through the current action, rather than only the body motion",
        "v1": "the person's immediate goal within the current step: what they are trying to accomplish now "
              "(a goal, not a restatement of the visible action)"},
        "What is the person trying to accomplish in this step? Give the immediate goal, "
        "not a description of the visible motion."),
    Dimension("procedural_intent", "Procedural Intent", {
        "release": "the functional role of the current step in the broader procedure: the near-term procedural "
                   "subgoal that the local intent supports, one level more abstract than it, not a broad "
                   "event-level goal",
        "v1": "the role of the current step in the overall activity: why this step is needed at this point "
              "of the procedure"},
        "Why is this step needed? Give the role this step plays in the person's overall activity.",
        former_fields=("global_intent",)),
    Dimension("next_step_plan", "Next-Plan", {
        "release": "the action most likely to occur immediately after the observation boundary; where an action "
                   "is clearly unfinished at the boundary, its immediate continuation is such an action",
        "v1": "the action most likely to begin right after the current step is completed"},
        "What will the person most likely do right after this step?"),
)
FIELDS = tuple(d.field for d in DIMENSIONS)
# A dimension's former field name -> its field (global_intent -> procedural_intent)
FORMER_FIELDS = {former: d.field for d in DIMENSIONS for former in d.former_fields}
ENVIRONMENTS = ("indoor", "outdoor")
SCENARIO = "scenario"  # a scenario's breakdown is the metric scenario_<name> (scenario_metric)
NEXT_STEP_REFERENCES = ("observed", "observed_and_plausible")  # what the judge compares a Next-Plan with
LAYOUTS = ("auto", "release", "flat")  # the setting data_layout: auto reads a folder as the release, a file as flat
# The setting longer_clips: what of a release clip longer than its window is shown. end: the window that ends at
# the clip's end (whose end is the observation boundary); start: the window from the clip's first frame (versions
# 1-3: the seconds before the boundary are lost); whole: the whole clip, as the authors' prompt README sends it;
# error: a problem.
LONGER_CLIPS = ("end", "start", "whole", "error")


class EgoIntentDataError(InputError):
    """The annotations, or a video they name, cannot be used; the message lists every problem."""


_OUTSIDE = setting_name(ENV_PREFIX, "allow_paths_outside_root")  # the switch that allows data outside its folder


@dataclass(frozen=True)
class Step:
    """One validated step, of either layout."""

    step_id: str  # the sample id, shown to the model: it carries no meaning (no scene, event or task name)
    video: Path  # the file holding the step's observation
    clip_start: float  # seconds into ``video`` where the observation starts
    clip_end: float  # seconds into ``video`` before which it ends: no frame at or after it is shown
    scenario: str
    environment: str
    references: dict[str, str]  # dimension field -> reference label
    plausible_next_steps: tuple[str, ...]  # further plausible next steps (the release's), beside the reference
    event: str  # never shown to the model
    source_video: str  # the video the step comes from (an Ego4D video_uid, or the flat file's video)
    where: str  # how a problem names the step: its file, event and step
    media_source: str  # how the step's video was found, for the error that it is missing
    short_video: str  # what it means that ``video`` ends before ``clip_end``
    pre_cut: bool = False  # the video is the step's clip (the release): its length should be its window's


# =============================================================================================
# The release: <indoor|outdoor>/<scene>/<event>/step_label.json and one clip per step
# =============================================================================================


@dataclass(frozen=True)
class ReleaseLayout:
    """The authors' release as this task reads it: every file and field name it expects, in one place,
    so that a difference found on the real download is a one-line change here. Read from code that
    downloads the release (tasks/egointent/README.md, Fidelity); the dataset card is the authority."""

    label_file: str  # an event's annotations, in <indoor|outdoor>/<scene>/<event>/
    clip_file: str  # a step's pre-cut clip, beside label_file ({step_id}: the step's id)
    steps: str  # the label file's list of steps
    video_uid: str  # the Ego4D video the event was cut from
    step_id: str  # a step's id, unique within its event
    start: str  # where the step's observation starts (seconds)
    end: str  # where it ends, before the step's key outcome: the clip is the window start..end
    references: Mapping[str, str]  # dimension field -> the release's name for its reference
    plausible_next_steps: str  # further plausible next steps (a list), beside the observed one


RELEASE = ReleaseLayout(
    label_file="step_label.json", clip_file="step{step_id}.mp4", steps="steps", video_uid="video_uid",
    step_id="step_id", start="start_time", end="obs_end_time",
    references={"local_intent": "local_intent", "procedural_intent": "procedural_intent",
                "next_step_plan": "observed_next_step"},
    plausible_next_steps="plausible_next_steps",
)


def read_release(root: Path, *, allow_outside: bool = False) -> tuple[list[Step], list[str]]:
    """Every step of the release under ``root``, and what is wrong with the others (each problem
    naming the file, the event, the step and the field). Steps are in folder order."""
    labels = sorted(root.rglob(RELEASE.label_file))
    if not labels:
        raise EgoIntentDataError(
            f"{root}: no {RELEASE.label_file} under this folder; the EgoIntent release holds "
            f"<indoor|outdoor>/<scene>/<event>/{RELEASE.label_file} (tasks/egointent/README.md, Data preparation); "
            f"point {setting_name(ENV_PREFIX, 'annotations')} at the folder you downloaded, or at a flat annotation "
            f"file")
    events: list[list[Step]] = []
    problems: list[str] = []
    for label in labels:
        relative = label.relative_to(root)
        if len(relative.parts) != 4 or relative.parts[0] not in ENVIRONMENTS:
            problems.append(f"{relative}: not at <indoor|outdoor>/<scene>/<event>/{RELEASE.label_file}: its event has "
                            f"no environment and scene")
            continue
        event_steps, event_problems = _event_steps(root, relative, allow_outside=allow_outside)
        problems += event_problems
        events.append(event_steps)
    return _with_unique_sample_ids(events), problems


def _with_unique_sample_ids(events: list[list[Step]]) -> list[Step]:
    """The events' steps, in order. A sample id is ``<video_uid>_<step_id>``; where one Ego4D video was cut into
    several events, whose step ids may repeat, each of them gets its ordinal among them in folder order
    (``<video_uid>_<n>_<step_id>``): still no scene, event or task name for the model to read."""
    events_of_video = Counter(event[0].source_video for event in events if event)
    ordinal: Counter = Counter()
    steps = []
    for event in events:
        video = event[0].source_video if event else None
        if events_of_video[video] > 1:
            ordinal[video] += 1
            # each step's id is <video_uid>_<step_id> (_event_steps): the ordinal goes between the two
            event = [replace(step, step_id=f"{video}_{ordinal[video]}_{step.step_id[len(video) + 1:]}")
                     for step in event]
        steps += event
    return steps


def _event_steps(root: Path, relative: Path, *, allow_outside: bool) -> tuple[list[Step], list[str]]:
    """The valid steps of one event's label file, and its problems."""
    environment, scene, event = relative.parts[:3]
    label = root / relative
    try:
        inside_root(label, root, where=str(relative), allow=allow_outside, setting=_OUTSIDE,
                    error_class=EgoIntentDataError)
        data = json.loads(read_text(label, EgoIntentDataError))
    except EgoIntentDataError as error:
        return [], [f"{relative}: event {event}: {error}"]
    except json.JSONDecodeError as error:
        return [], [f"{relative}: event {event}: not valid JSON: {error}"]
    if not isinstance(data, dict) or not isinstance(data.get(RELEASE.steps), list):
        return [], [f"{relative}: event {event}: expected a JSON object whose field {RELEASE.steps} is a list of "
                    f"steps"]
    if not data[RELEASE.steps]:  # an event the release lists has steps: a file cut short, or not the release's
        return [], [f"{relative}: event {event}: field {RELEASE.steps} is an empty list; fetch the release again"]
    problems = []
    video_uid = data.get(RELEASE.video_uid)
    if not isinstance(video_uid, str) or not video_uid.strip():
        problems.append(f"{relative}: event {event}, field {RELEASE.video_uid}: must be a non-empty string, "
                        f"got {video_uid!r}")
    ids = Counter(str(record.get(RELEASE.step_id)) for record in data[RELEASE.steps] if isinstance(record, dict))
    duplicates = set()
    steps = []
    for number, record in enumerate(data[RELEASE.steps], start=1):
        step_id = record.get(RELEASE.step_id) if isinstance(record, dict) else None
        named = f"step {step_id!r}" if _is_step_id(step_id) else f"step #{number} of the list"
        where = f"{relative}: event {event}, {named}"
        if not isinstance(record, dict):
            problems.append(f"{where}: expected a JSON object, got {type(record).__name__}")
            continue
        found = _release_step_problems(record)
        duplicated = _is_step_id(step_id) and ids[str(step_id)] > 1
        if duplicated and str(step_id) not in duplicates:  # said once, of the first step holding the id
            found.append(f"field {RELEASE.step_id}: {step_id!r} is used by {ids[str(step_id)]} steps of this event "
                         f"(their clips would share {RELEASE.clip_file.format(step_id=step_id)})")
            duplicates.add(str(step_id))
        clip = label.parent / RELEASE.clip_file.format(step_id=step_id)
        if _is_step_id(step_id) and not duplicated:
            try:
                inside_root(clip, root, where=f"the clip of {named}", allow=allow_outside, setting=_OUTSIDE,
                            error_class=EgoIntentDataError)
            except EgoIntentDataError as error:
                found.append(f"field {RELEASE.step_id}: {error}")
        problems += [f"{where}, {problem}" if problem.startswith("field ") else f"{where}: {problem}"
                     for problem in found]
        if found or duplicated or not isinstance(video_uid, str) or not video_uid.strip():
            continue
        start, end = float(record[RELEASE.start]), float(record[RELEASE.end])
        steps.append(Step(
            step_id=f"{video_uid.strip()}_{step_id}", video=clip, clip_start=0.0, clip_end=end - start,
            scenario=scene, environment=environment,
            references={name: record[released].strip() for name, released in RELEASE.references.items()},
            plausible_next_steps=tuple(text.strip() for text in record.get(RELEASE.plausible_next_steps) or ()),
            event=event, source_video=video_uid.strip(), where=where,
            media_source=f"the clip of {named}, named by field {RELEASE.step_id}", pre_cut=True,
            short_video=(f"field {RELEASE.end}: the clip is shorter than its window ({RELEASE.end} - {RELEASE.start} "
                         f"= {end - start:.3f} s)")))
    return steps, problems


def _is_step_id(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, str) and bool(value.strip()) and "/" not in value)


def _release_step_problems(record: dict) -> list[str]:
    """What is wrong with one step of a label file, each problem naming its field."""
    problems = []
    if RELEASE.step_id not in record:
        problems.append(f"field {RELEASE.step_id}: missing")
    elif not _is_step_id(record[RELEASE.step_id]):
        problems.append(f"field {RELEASE.step_id}: must be a whole number >= 0 or a name without '/', "
                        f"got {record[RELEASE.step_id]!r}")
    problems += _time_problems(record, (RELEASE.start, RELEASE.end), "seconds")
    problems += _text_problems(record, RELEASE.references.values())
    return problems + _plausible_problems(record, RELEASE.plausible_next_steps)


def _plausible_problems(record: dict, name: str) -> list[str]:
    """Further plausible next steps: optional (absent or null: none), a list of non-empty strings."""
    plausible = record.get(name) or []
    if isinstance(plausible, list) and all(isinstance(text, str) and text.strip() for text in plausible):
        return []
    return [f"field {name}: must be a list of non-empty strings, got {plausible!r}"]


def _time_problems(record: dict, names: tuple[str, str], meaning: str) -> list[str]:
    """Two times (start, end) in seconds: present, numbers >= 0, the end after the start."""
    problems, times = [], {}
    for name in names:
        value = record.get(name)
        if name not in record:
            problems.append(f"field {name}: missing ({meaning})")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            problems.append(f"field {name}: must be a number of seconds >= 0, got {value!r}")
        else:
            times[name] = float(value)
    start, end = names
    if len(times) == 2 and times[end] <= times[start]:
        problems.append(f"field {end}: {times[end]:g} s must be after {start} ({times[start]:g} s): the clip would be "
                        f"empty")
    return problems


def _text_problems(record: dict, names) -> list[str]:
    problems = []
    for name in names:
        value = record.get(name)
        if name not in record:
            problems.append(f"field {name}: missing")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"field {name}: must be a non-empty string, got {value!r}")
    return problems


# =============================================================================================
# The flat file (the suite's format before the release; tasks/egointent/README.md)
# =============================================================================================


FLAT_TEXT_FIELDS = ("step_id", "scenario", "environment")
VIDEO_SUFFIX = ".mp4"  # `video_uid` resolves to <video_root>/<video_uid>.mp4, Ego4D's layout


def read_records(path: Path) -> list[dict]:
    """The records of a ``.json`` file (a list) or a ``.jsonl`` file (one object per line)."""
    if path.suffix.lower() == ".jsonl":
        return [record for _, record in read_jsonl(path, EgoIntentDataError)]
    try:
        records = json.loads(read_text(path, EgoIntentDataError))
    except json.JSONDecodeError as error:
        raise EgoIntentDataError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise EgoIntentDataError(f"{path}: expected a list of step records (objects), one per step")
    return records


def read_flat(path: Path, video_root: Path | None = None, *,
              allow_outside: bool = False) -> tuple[list[Step], list[str]]:
    """Every valid record of a flat annotation file, and what is wrong with the others (missing or
    empty field, wrong type, truncation not after the step start, unknown environment, duplicate step
    id, a video outside ``video_root`` unless ``allow_outside``)."""
    root = Path(video_root) if video_root else path.parent
    problems: list[str] = []
    steps: list[Step] = []
    seen_ids: set[str] = set()
    for number, record in enumerate(read_records(path), start=1):
        step_id = record.get("step_id")
        where = f"record {number}" + (f" (step_id {step_id!r})" if isinstance(step_id, str) else "")
        found = _flat_record_problems(record)
        if not found:
            if record["step_id"] in seen_ids:
                found.append(f"step_id {record['step_id']!r} is used by an earlier record")
            video = _video_path(record, root)
            name = "video" if "video" in record else "video_uid"
            try:
                inside_root(video, root, where=f"field {name} {record[name]!r}", allow=allow_outside, setting=_OUTSIDE)
            except InputError as error:
                found.append(str(error))
        if found:
            problems += [f"{where}: {problem}" for problem in found]
            continue
        seen_ids.add(record["step_id"])
        start, end = float(record["step_start"]), float(record["truncation_time"])
        references = {d.field: next(record[name] for name in (d.field, *d.former_fields) if name in record).strip()
                      for d in DIMENSIONS}
        steps.append(Step(
            step_id=record["step_id"], video=video, clip_start=start, clip_end=end, scenario=record["scenario"].strip(),
            environment=record["environment"].strip().lower(), references=references,
            plausible_next_steps=tuple(text.strip() for text in record.get("plausible_next_steps") or ()),
            event=str(record.get("event") or ""), source_video=record.get("video_uid") or record["video"], where=where,
            media_source=_video_source(record, root),
            short_video=f"truncation_time {end:g} s is past the end of the video"))
    return steps, problems


def _flat_record_problems(record: dict) -> list[str]:
    problems = _text_problems(record, FLAT_TEXT_FIELDS)
    for dimension in DIMENSIONS:
        names = [name for name in (dimension.field, *dimension.former_fields) if name in record]
        if len(names) > 1:
            problems.append(f"fields {' and '.join(names)}: one reference under its name and its former name; "
                            f"keep {dimension.field}")
        else:
            problems += _text_problems(record, names or [dimension.field])
    if isinstance(record.get("environment"), str) and record["environment"].strip().lower() not in ENVIRONMENTS:
        problems.append(f"field environment: must be one of {', '.join(ENVIRONMENTS)}, got {record['environment']!r}")
    video_keys = [key for key in ("video", "video_uid") if key in record]
    if len(video_keys) != 1:
        problems.append("exactly one of the fields video (a path) and video_uid is required"
                        + (", got both" if len(video_keys) == 2 else ""))
    elif not isinstance(record[video_keys[0]], str) or not record[video_keys[0]].strip():
        problems.append(f"field {video_keys[0]}: must be a non-empty string, got {record[video_keys[0]]!r}")
    problems += _plausible_problems(record, "plausible_next_steps")
    return problems + _time_problems(record, ("step_start", "truncation_time"), "seconds from the start of the video")


def _video_path(record: dict, root: Path) -> Path:
    if "video" in record:
        video = Path(record["video"])
        return video if video.is_absolute() else root / video
    return root / f"{record['video_uid']}{VIDEO_SUFFIX}"


def _video_source(record: dict, root: Path) -> str:
    """How a record's video path came about, for the error that it is missing."""
    if "video" in record and Path(record["video"]).is_absolute():
        return "field video"
    name = "video" if "video" in record else "video_uid"
    return f"field {name} under video_root {root}; setting {setting_name(ENV_PREFIX, 'video_root')}"


# =============================================================================================
# Either layout: the steps, checked together with their media
# =============================================================================================


def layout_of(path: Path, data_layout: str = "auto") -> str:
    """``release`` or ``flat``: the layout ``path`` is read in (``data_layout``: auto reads a folder as
    the release and a file as the flat format). A path that does not fit the layout asked for, or
    does not exist, raises EgoIntentDataError naming the setting."""
    annotations, layout = setting_name(ENV_PREFIX, "annotations"), setting_name(ENV_PREFIX, "data_layout")
    if not path.exists():
        raise EgoIntentDataError(f"EgoIntent data not found: {path}; point {annotations} at the release folder "
                                 f"(<indoor|outdoor>/<scene>/<event>/{RELEASE.label_file}) or at a flat annotation "
                                 f"file")
    found = "release" if path.is_dir() else "flat"
    if data_layout not in ("auto", found):
        raise EgoIntentDataError(f"{path} is a {'folder' if path.is_dir() else 'file'}, but {layout} is {data_layout}: "
                                 f"the release is a folder, the flat format a .json / .jsonl file")
    return found


def load_samples(settings) -> LoadedSamples:
    """The evaluation documents of the data ``settings.annotations`` names, in either layout, each
    step with its clip's frame plan (every video opened once).

    Annotation problems and media problems (a missing, unreadable or empty video; a clip shorter
    than its window; data that stops early) are raised together in one EgoIntentDataError listing
    each with its file, event, step and field -- or, with ``skip_missing``, the steps whose media
    cannot be used are left out and returned as ``skipped`` (annotation problems are always raised).
    """
    path = Path(settings.annotations)
    layout = layout_of(path, settings.data_layout)
    if layout == "release":
        if settings.video_root is not None:
            raise EgoIntentDataError(f"{setting_name(ENV_PREFIX, 'video_root')} applies to the flat format only: the "
                                     f"release keeps each step's clip beside its {RELEASE.label_file}; unset it")
        steps, problems = read_release(path, allow_outside=settings.allow_paths_outside_root)
    else:
        steps, problems = read_flat(path, settings.video_root, allow_outside=settings.allow_paths_outside_root)
        problems = [f"{path.name}, {problem}" for problem in problems]  # each names its file, listed alone too
    problems += _scenario_problems(steps)
    docs, unusable = step_docs(steps, settings)
    skipped = [MissingMedia(step.step_id, str(step.video), f"{step.where}: {message}") for step, message in unusable]
    if not settings.skip_missing:
        problems += [media.message for media in skipped]
    if not problems and not docs:
        problems.append(f"{path}: " + ("no steps" if not skipped else "every step's media is unusable"))
        problems += [media.message for media in skipped]  # which, and why, even where they would be skipped
    found = DatasetProblems(f"the EgoIntent {'release' if layout == 'release' else 'annotations'} {path} "
                            f"(format: tasks/egointent/README.md)", EgoIntentDataError)
    for problem in problems:
        found.add(problem)
    found.raise_if_any("" if settings.skip_missing or not skipped else (
        f"Set {setting_name(ENV_PREFIX, 'skip_missing')} to true to skip the {len(skipped)} step(s) whose media "
        f"cannot be used; they are counted in skipped_samples"))
    return LoadedSamples(docs, skipped)


def _scenario_problems(steps: list[Step]) -> list[str]:
    """Each scenario is indoor or outdoor, and each gets a metric name of its own."""
    environments: dict[str, set[str]] = {}
    for step in steps:
        environments.setdefault(step.scenario, set()).add(step.environment)
    return [f"scenario {scenario!r} is filed as both indoor and outdoor"
            for scenario, found in environments.items() if len(found) > 1] + shared_labels(
        (step.scenario for step in steps), "scenarios")


def scenario_metric(scenario: str) -> str:
    """The metric name of a scenario's breakdown: ``scenario_<lower-case name, _ for the rest>``."""
    return f"{SCENARIO}_{breakdown_label(scenario)}"


# =============================================================================================
# The pre-outcome clip
# =============================================================================================


def clip_frame_indices(step_start: float, truncation_time: float, fps: float, num_frames: int, *,
                       sample_fps: float, max_frames: int | None) -> list[int]:
    """The frames given to the model for one step, in time order.

    They span the clip from the frame on screen at ``step_start`` to the last frame that starts
    strictly before ``truncation_time`` (both included), evenly spaced at no more than
    ``sample_fps`` (the paper's rule); a clip that would give more than ``max_frames`` (None: no
    cap) gets ``max_frames`` frames spread uniformly over it, i.e. a lower rate.
    """
    last = min(last_frame_before(truncation_time, fps), num_frames - 1)
    if last < 0:
        raise ValueError(f"no frame starts before the truncation time {truncation_time:g} s")
    first = min(frame_at(step_start, fps), last)
    sampled = min(math.floor((last - first) / fps * sample_fps + 1e-9) + 1, last - first + 1)
    return uniform_indices(first, last, sampled if max_frames is None else min(sampled, max_frames))


def _past_the_end(step: Step, info: VideoInfo) -> bool:
    """Whether the step's observation ends more than one frame after its video (container durations
    round to a frame; within one, the video's last frame is the clip's)."""
    return step.clip_end > info.num_frames / info.fps + 1 / info.fps


# =============================================================================================
# Steps -> docs
# =============================================================================================


def step_docs(steps: list[Step], settings) -> tuple[list[dict], list[tuple[Step, str]]]:
    """The evaluation documents: each step with its video's frame plan (each video opened once, its
    packets read up to the last frame a step needs: a copy cut short is found here), and the steps
    whose media cannot be used, with why."""
    by_video: dict[Path, list[Step]] = {}
    for step in steps:
        by_video.setdefault(step.video, []).append(step)
    infos: dict[Path, VideoInfo] = {}
    unusable: list[tuple[Step, str]] = []
    short: set[int] = set()

    def last_frame(video: VideoFile, step: Step) -> tuple[int, str]:
        info = infos[step.video] = video.info
        needed = last_frame_before(step.clip_end, info.fps)
        if _past_the_end(step, info):
            short.add(id(step))
            return needed, "the last frame before the step's end"
        return min(needed, info.num_frames - 1), "the last frame before the step's end"

    for video, group in by_video.items():
        for step, message in video_problems(video, group, last_frame):
            if id(step) in short:
                info = infos[video]
                message = f"{step.short_video} ({video}: {info.num_frames} frames at {info.fps:g} fps, " \
                          f"{info.num_frames / info.fps:.3f} s)"
            elif not video.is_file():
                message = f"{message} ({step.media_source})"
            unusable.append((step, message))
    order = {id(step): number for number, step in enumerate(steps)}
    unusable.sort(key=lambda found: order[id(found[0])])  # in the data's order, as the annotation problems
    failed = {id(step) for step, _ in unusable}
    docs = []
    for step in steps:
        if id(step) in failed:
            continue
        info = infos[step.video]
        excess = clip_excess(step, info)
        if excess and settings.longer_clips == "error":
            unusable.append((step, f"{longer_clip_text(step, info, excess)}; "
                                   f"{setting_name(ENV_PREFIX, 'longer_clips')} is error"))
            continue
        # What is shown: where the clip holds more than its window, what the setting longer_clips picks.
        start, end = step.clip_start, step.clip_end
        if excess and settings.longer_clips != "start":
            start, end = (start if settings.longer_clips == "whole" else excess), excess + end
        try:
            indices = clip_frame_indices(start, end, info.fps, info.num_frames,
                                         sample_fps=settings.sample_fps, max_frames=settings.max_frames)
            at_sample_fps = clip_frame_indices(start, end, info.fps, info.num_frames,
                                               sample_fps=settings.sample_fps, max_frames=None)
        except ValueError as error:
            unusable.append((step, str(error)))
            continue
        docs.append({"step_id": step.step_id, "video": str(step.video), "clip_start": start, "clip_end": end,
                     "clip_excess": excess, "scenario": step.scenario, "environment": step.environment,
                     "event": step.event, "source_video": step.source_video, **step.references,
                     "plausible_next_steps": list(step.plausible_next_steps),
                     "judge_sees_plausible_next_steps": settings.next_step_references == "observed_and_plausible",
                     "definitions": settings.definitions, "show_step_id": settings.show_step_id,
                     "video_fps": info.fps, "frame_indices": indices,
                     "frames_capped": len(indices) < len(at_sample_fps),
                     "video_input": settings.video_input, "frame_max_side": settings.frame_max_side})
    return docs, unusable


def clip_excess(step: Step, info: VideoInfo) -> float:
    """Seconds by which a release clip is longer than its window (``obs_end_time - start_time``), where
    more than one frame (container durations round to a frame); 0 otherwise, and for the flat format."""
    excess = info.num_frames / info.fps - (step.clip_end - step.clip_start)
    return excess if step.pre_cut and excess > 1 / info.fps else 0.0


def longer_clip_text(step: Step, info: VideoInfo, excess: float) -> str:
    return (f"the clip is {excess:.3f} s longer than its window ({RELEASE.end} - {RELEASE.start} = "
            f"{step.clip_end - step.clip_start:.3f} s; {step.video}: {info.num_frames} frames at {info.fps:g} fps)")


def longer_clips_summary(docs: list[dict], settings) -> str:
    """What the steps whose clip is longer than its window show (empty when none): how many, the largest
    difference, the first few steps named, and the setting that chose."""
    longer = [doc for doc in docs if doc["clip_excess"]]
    if not longer:
        return ""
    largest = max(longer, key=lambda doc: doc["clip_excess"])
    shown = {"end": "the window that ends at each clip's end", "start": "the window from each clip's first frame "
             "(the seconds before the clip's end are not shown)", "whole": "each whole clip"}[settings.longer_clips]
    return (f"{len(longer)} clip(s) longer than their window ({RELEASE.end} - {RELEASE.start}) by more than a frame, "
            f"by up to {largest['clip_excess']:.3f} s ({largest['step_id']}); first: "
            f"{', '.join(doc['step_id'] for doc in longer[:5])}; shown: {shown} "
            f"({setting_name(ENV_PREFIX, 'longer_clips')}: {settings.longer_clips}; tasks/egointent/README.md, "
            f"Fidelity, Clip length)")


def describe_steps(loaded: LoadedSamples, settings) -> str:
    """A summary of loaded steps: counts by environment and scenario, frames per clip, skipped steps."""
    docs = loaded.docs
    frames = sorted(len(d["frame_indices"]) for d in docs)
    capped = sum(d["frames_capped"] for d in docs)
    cap = "no frame cap" if settings.max_frames is None else f"{capped} clips capped at {settings.max_frames} frames"
    lines = [(f"{len(docs)} steps in {len({d['source_video'] for d in docs})} videos; frames per clip at "
              f"{settings.sample_fps:g} FPS: min {frames[0]}, median {frames[len(frames) // 2]}, max {frames[-1]} "
              f"({cap})")]
    if longer := longer_clips_summary(docs, settings):
        lines.append(longer)
    if loaded.skipped:
        lines.append(f"{len(loaded.skipped)} steps skipped, their media unusable:")
        lines += [f"  {media.message}" for media in loaded.skipped]
    environments = Counter(d["environment"] for d in docs)
    lines.append("environment: " + ", ".join(f"{name} {environments[name]}" for name in ENVIRONMENTS))
    scenarios = Counter((d["scenario"], d["environment"]) for d in docs)
    lines.append(f"{len(scenarios)} scenarios (the release has 15):")
    lines += [f"  {scenario_metric(name):<32} {count:>5} steps  ({name}, {environment})"
              for (name, environment), count in sorted(scenarios.items())]
    return "\n".join(lines)
