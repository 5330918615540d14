"""EgoIntent's data: the three annotated dimensions of step-level intent, the local annotation
format (tasks/egointent/README.md) read and checked record by record, and each step's pre-outcome
clip planned as frame indices (docs hold paths and indices, never decoded frames).

The protocol is in ``lmms_egoplan.egointent.task``. Functions taking ``settings`` receive an
``egointent.EgoIntentSettings``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_jsonl, read_text
from lmms_egoplan.core.media import MediaError, VideoFile, VideoInfo, frame_at, last_frame_before, uniform_indices
from lmms_egoplan.core.settings import setting_name

ENV_PREFIX = "EGOINTENT"  # settings are overridden by environment variables EGOINTENT_<SETTING>


# =============================================================================================
# The three dimensions of step-level intent (section 3.2)
# =============================================================================================


@dataclass(frozen=True)
class Dimension:
    field: str  # annotation field, answer key and metric name
    label: str  # as the prompts name it
    question: str  # what the model is asked
    definition: str  # what the judge is told the dimension means


DIMENSIONS = (
    Dimension("local_intent", "Local intent",
              "What is the person trying to accomplish in this step? Give the immediate goal, "
              "not a description of the visible motion.",
              "the person's immediate goal within the current step: what they are trying to accomplish now "
              "(a goal, not a restatement of the visible action)"),
    Dimension("global_intent", "Global intent",
              "Why is this step needed? Give the role this step plays in the person's overall activity.",
              "the role of the current step in the overall activity: why this step is needed at this point "
              "of the procedure"),
    Dimension("next_step_plan", "Next-step plan",
              "What will the person most likely do right after this step?",
              "the action most likely to begin right after the current step is completed"),
)
FIELDS = tuple(d.field for d in DIMENSIONS)
ENVIRONMENTS = ("indoor", "outdoor")
SCENARIO = "scenario"  # a scenario's breakdown is the metric scenario_<name> (scenario_metric)


# =============================================================================================
# Annotations: the local format (tasks/egointent/README.md)
# =============================================================================================


class EgoIntentDataError(InputError):
    """The annotation file, or a video it names, cannot be used; the message lists every problem."""


REQUIRED_TEXT_FIELDS = ("step_id", "scenario", "environment", *FIELDS)
VIDEO_SUFFIX = ".mp4"  # `video_uid` resolves to <video_root>/<video_uid>.mp4, Ego4D's layout


@dataclass(frozen=True)
class Step:
    """One validated annotation record."""

    step_id: str
    video: Path
    step_start: float
    truncation_time: float
    scenario: str
    environment: str
    references: dict[str, str]  # field -> reference label
    event: str  # never shown to the model


def read_records(path: Path) -> list[dict]:
    """The records of a ``.json`` file (a list) or a ``.jsonl`` file (one object per line)."""
    if not path.is_file():
        raise EgoIntentDataError(f"EgoIntent annotation file not found: {path}; check {setting_name(ENV_PREFIX, 'annotations')}")
    if path.suffix.lower() == ".jsonl":
        return [record for _, record in read_jsonl(path, EgoIntentDataError)]
    try:
        records = json.loads(read_text(path, EgoIntentDataError))
    except json.JSONDecodeError as error:
        raise EgoIntentDataError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise EgoIntentDataError(f"{path}: expected a list of step records (objects), one per step")
    return records


def load_steps(path: str | Path, video_root: str | Path | None = None, *, allow_outside: bool = False,
               dataset_problems: DatasetProblems | None = None) -> list[Step]:
    """Read and validate every record of an annotation file: the valid steps. Every problem (missing
    or empty field, wrong type, truncation not after the step start, unknown environment, duplicate
    step id, a scenario filed as both indoor and outdoor, missing video, a video outside
    ``video_root`` unless ``allow_outside``) joins ``dataset_problems``, which the caller raises once
    the videos are checked too (``step_docs``); without it, they are raised here."""
    path = Path(path)
    root = Path(video_root) if video_root else path.parent
    problems: list[str] = []
    steps: list[Step] = []
    seen_ids: set[str] = set()
    for number, record in enumerate(read_records(path), start=1):
        step_id = record.get("step_id")
        where = f"record {number}" + (f" (step_id {step_id!r})" if isinstance(step_id, str) else "")
        found = _record_problems(record)
        if not found:
            if record["step_id"] in seen_ids:
                found.append(f"step_id {record['step_id']!r} is used by an earlier record")
            video = _video_path(record, root)
            field = "video" if "video" in record else "video_uid"
            try:
                inside_root(video, root, where=f"field {field} {record[field]!r}", allow=allow_outside,
                            setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"))
            except InputError as error:
                found.append(str(error))
            else:
                if not video.is_file():
                    found.append(f"video not found: {video} ({_video_source(record, root)})")
        if found:
            problems += [f"{where}: {problem}" for problem in found]
            continue
        seen_ids.add(record["step_id"])
        steps.append(Step(step_id=record["step_id"], video=video, step_start=float(record["step_start"]),
                          truncation_time=float(record["truncation_time"]), scenario=record["scenario"].strip(),
                          environment=record["environment"].strip().lower(),
                          references={field: record[field].strip() for field in FIELDS},
                          event=str(record.get("event") or "")))
    problems += _scenario_problems(steps)
    if not problems and not steps:
        problems.append("no step records")
    collector = annotation_problems(path) if dataset_problems is None else dataset_problems
    for problem in problems:
        collector.add(f"{path}, {problem}")
    if dataset_problems is None:
        collector.raise_if_any()
    return steps


def annotation_problems(path: str | Path) -> DatasetProblems:
    """Where every problem of an EgoIntent annotation file and its videos is collected (``load_steps``,
    ``step_docs``), to be raised as one EgoIntentDataError."""
    return DatasetProblems(f"the EgoIntent annotations {path} (format: tasks/egointent/README.md)", EgoIntentDataError)


def _record_problems(record: dict) -> list[str]:
    problems = []
    for name in REQUIRED_TEXT_FIELDS:
        value = record.get(name)
        if name not in record:
            problems.append(f"missing field {name!r}")
        elif not isinstance(value, str) or not value.strip():
            problems.append(f"field {name!r} must be a non-empty string, got {value!r}")
    if isinstance(record.get("environment"), str) and record["environment"].strip().lower() not in ENVIRONMENTS:
        problems.append(f"field 'environment' must be one of {', '.join(ENVIRONMENTS)}, got {record['environment']!r}")
    video_keys = [key for key in ("video", "video_uid") if key in record]
    if len(video_keys) != 1:
        problems.append("exactly one of the fields 'video' (a path) and 'video_uid' is required"
                        + (", got both" if len(video_keys) == 2 else ""))
    elif not isinstance(record[video_keys[0]], str) or not record[video_keys[0]].strip():
        problems.append(f"field {video_keys[0]!r} must be a non-empty string, got {record[video_keys[0]]!r}")
    times = {}
    for name in ("step_start", "truncation_time"):
        value = record.get(name)
        if name not in record:
            problems.append(f"missing field {name!r} (seconds from the start of the video)")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            problems.append(f"field {name!r} must be a number of seconds >= 0, got {value!r}")
        else:
            times[name] = float(value)
    if len(times) == 2 and times["truncation_time"] <= times["step_start"]:
        problems.append(f"truncation_time ({times['truncation_time']:g} s) must be after step_start "
                        f"({times['step_start']:g} s): the clip would be empty")
    return problems


def _video_path(record: dict, root: Path) -> Path:
    if "video" in record:
        video = Path(record["video"])
        return video if video.is_absolute() else root / video
    return root / f"{record['video_uid']}{VIDEO_SUFFIX}"


def _video_source(record: dict, root: Path) -> str:
    """How a record's video path came about, for the error that it is missing."""
    if "video" in record and Path(record["video"]).is_absolute():
        return "field video"
    field = "video" if "video" in record else "video_uid"
    return f"field {field} under video_root {root}; setting {setting_name(ENV_PREFIX, 'video_root')}"


def _scenario_problems(steps: list[Step]) -> list[str]:
    """Each scenario is indoor or outdoor, and each gets a metric name of its own."""
    problems = []
    environments: dict[str, set[str]] = {}
    names: dict[str, set[str]] = {}
    for step in steps:
        environments.setdefault(step.scenario, set()).add(step.environment)
        names.setdefault(scenario_metric(step.scenario), set()).add(step.scenario)
    problems += [f"scenario {scenario!r} is filed as both indoor and outdoor"
                 for scenario, found in environments.items() if len(found) > 1]
    problems += [f"scenarios {sorted(found)} share the metric name {metric!r}; rename one"
                 for metric, found in names.items() if len(found) > 1]
    return problems


def scenario_metric(scenario: str) -> str:
    """The metric name of a scenario's breakdown: ``scenario_<lower-case name, _ for the rest>``."""
    return f"{SCENARIO}_" + (re.sub(r"[^0-9a-z]+", "_", scenario.lower()).strip("_") or "unnamed")


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


# =============================================================================================
# Steps -> docs
# =============================================================================================


def step_docs(steps: list[Step], settings, dataset_problems: DatasetProblems | None = None) -> list[dict]:
    """The evaluation documents: each step with its video's frame plan (read from each video once).
    A video that does not open or a step it cannot show joins ``dataset_problems`` (without it, the
    problems are raised here)."""
    videos: dict[Path, VideoInfo] = {}
    problems = []
    for video in dict.fromkeys(step.video for step in steps):
        try:
            with VideoFile(video) as reader:
                videos[video] = reader.info
        except MediaError as error:
            problems.append(str(error))
    docs = []
    for step in steps:
        info = videos.get(step.video)
        if info is None:
            continue
        # A truncation time past the last frame's end means the annotation and the video disagree.
        if step.truncation_time > info.num_frames / info.fps + 1 / info.fps:
            problems.append(f"step {step.step_id!r}: truncation_time {step.truncation_time:g} s is past the end of "
                            f"{step.video} ({info.num_frames / info.fps:.3f} s)")
            continue
        try:
            indices = clip_frame_indices(step.step_start, step.truncation_time, info.fps, info.num_frames,
                                         sample_fps=settings.sample_fps, max_frames=settings.max_frames)
            at_sample_fps = clip_frame_indices(step.step_start, step.truncation_time, info.fps, info.num_frames,
                                               sample_fps=settings.sample_fps, max_frames=None)
        except ValueError as error:
            problems.append(f"step {step.step_id!r}: {error}")
            continue
        docs.append({"step_id": step.step_id, "video": str(step.video), "step_start": step.step_start,
                     "truncation_time": step.truncation_time, "scenario": step.scenario,
                     "environment": step.environment, "event": step.event, **step.references,
                     "video_fps": info.fps, "frame_indices": indices, "frames_capped": len(indices) < len(at_sample_fps),
                     "video_input": settings.video_input, "frame_max_side": settings.frame_max_side})
    collector = DatasetProblems("the EgoIntent videos", EgoIntentDataError) if dataset_problems is None \
        else dataset_problems
    for problem in problems:
        collector.add(problem)
    if dataset_problems is None:
        collector.raise_if_any()
    return docs


def describe_steps(docs: list[dict], settings) -> str:
    """A summary of loaded steps: counts by environment and scenario, frames per clip."""
    frames = sorted(len(d["frame_indices"]) for d in docs)
    capped = sum(d["frames_capped"] for d in docs)
    cap = "no frame cap" if settings.max_frames is None else f"{capped} clips capped at {settings.max_frames} frames"
    lines = [(f"{len(docs)} steps in {len({d['video'] for d in docs})} videos; frames per clip at "
              f"{settings.sample_fps:g} FPS: min {frames[0]}, median {frames[len(frames) // 2]}, max {frames[-1]} "
              f"({cap})")]
    environments = Counter(d["environment"] for d in docs)
    lines.append("environment: " + ", ".join(f"{name} {environments[name]}" for name in ENVIRONMENTS))
    scenarios = Counter((d["scenario"], d["environment"]) for d in docs)
    lines.append(f"{len(scenarios)} scenarios (the paper has 15):")
    lines += [f"  {scenario_metric(name):<32} {count:>5} steps  ({name}, {environment})"
              for (name, environment), count in sorted(scenarios.items())]
    return "\n".join(lines)
