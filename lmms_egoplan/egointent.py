"""EgoIntent (Pan et al., 2026): step-level intent understanding in egocentric video.

The protocol of the paper (sections 3 and 4.1), as this module implements it:

1. **Samples.** Each step of an egocentric procedural video is one sample. Its clip runs from
   the step's start to the *truncation time*, set just before the step's key outcome becomes
   visible: no frame at or after the truncation time reaches the model (``clip_frame_indices``).
2. **Visual input.** Frames are sampled from the clip at 6 FPS (``sample_fps``); a clip with
   more frames than ``max_frames`` is subsampled uniformly. The frames go to the model as one
   video where the backend takes videos (open-source models in the paper) or as a sequence of
   images (``video_input: false``; the paper's protocol for API models).
3. **Prompt.** One prompt for all models; it gives the clip and the step id only (no task or
   event name, no annotation) and asks for three fields: local intent (what the person is
   trying to accomplish now), global intent (why the step is needed) and next-step plan (what
   comes next). ``parse_answer`` reads JSON or labelled lines amid prose; a missing field
   scores 0 and is counted (``incomplete_answers``, ``missing_fields``).
4. **Judging.** An LLM judge (a Qwen3 model in the paper) rates each field's semantic
   consistency with its reference on 0-10 (``JUDGE_PROMPT``: this suite's reconstruction; the
   paper does not publish its prompt). Reported on 0-100: each field, ``overall`` (the mean of
   the three field scores, as in Table 3), ``indoor`` / ``outdoor`` (Table 3) and
   ``scenario_<name>`` per environment category (Figure 7).

The annotations are not public yet: the suite reads a local format (``load_steps``; README,
section EgoIntent) into which the release can be converted.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from loguru import logger

from lmms_egoplan.errors import InputError
from lmms_egoplan.judge import (
    FixedRating,
    JudgeRequest,
    JudgeSettings,
    Rubric,
    bracket_rating,
    judge_parts_item,
    register_rubric,
)
from lmms_egoplan.judged_task import JudgedTask, judged_score
from lmms_egoplan.media import (
    MediaError,
    VideoFile,
    VideoInfo,
    as_video_frames,
    frame_at,
    last_frame_before,
    uniform_indices,
)
from lmms_egoplan.records import read_jsonl
from lmms_egoplan.settings import SettingsError, setting_name

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


# =============================================================================================
# Settings
# =============================================================================================


ENV_PREFIX = "EGOINTENT"  # settings are overridden by environment variables EGOINTENT_<SETTING>


def _setting(field: str) -> str:
    return setting_name(ENV_PREFIX, field)


@dataclass(frozen=True)
class EgoIntentSettings(JudgeSettings):
    """``metadata:`` keys of the task YAML; environment variables ``EGOINTENT_<NAME>`` override them."""

    annotations: Optional[Path] = None  # the local annotation file (.json list or .jsonl), required
    video_root: Optional[Path] = None  # where `video` paths and `video_uid`s resolve; default: the file's folder
    sample_fps: float = 6.0  # frames per second sampled from each clip (the paper: 6)
    max_frames: int = 32  # cap per clip; longer clips are subsampled uniformly
    video_input: bool = True  # frames as one video (video-capable backends) or as separate images
    frame_max_side: Optional[int] = None  # downscale frames so that their longer side is at most this
    # The paper's judge is Qwen3, served here by any OpenAI-compatible server (e.g. `vllm serve`).
    judge_model: str = "Qwen/Qwen3-30B-A3B-Instruct-2507"
    judge_base_url: Optional[str] = "http://localhost:8000/v1"
    judge_api_key_env: str = ""  # a local server needs no key; name the variable holding one if yours does

    def check_sampling(self, where: str | None = None, *, name: Callable[[str], str] = _setting) -> None:
        """Fail early on a frame plan that cannot work. ``name`` says how the user sets a field
        (default: its environment variable and metadata key; a command line names its flags)."""
        problems = [f"{name('sample_fps')} must be > 0, got {self.sample_fps:g}"] if not self.sample_fps > 0 else []
        if self.max_frames < 1:
            problems.append(f"{name('max_frames')} must be at least 1, got {self.max_frames}")
        if problems:
            raise SettingsError((f"{where}: " if where else "") + "; ".join(problems))


# =============================================================================================
# Annotations: the local format (README, section EgoIntent)
# =============================================================================================


class EgoIntentDataError(InputError):
    """The annotation file, or a video it names, cannot be used; the message lists every problem."""


REQUIRED_TEXT_FIELDS = ("step_id", "scenario", "environment", *FIELDS)
VIDEO_SUFFIX = ".mp4"  # `video_uid` resolves to <video_root>/<video_uid>.mp4, Ego4D's layout
_MAX_LISTED_PROBLEMS = 20


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
        raise EgoIntentDataError(f"EgoIntent annotation file not found: {path}; check {_setting('annotations')}")
    if path.suffix.lower() == ".jsonl":
        return [record for _, record in read_jsonl(path, EgoIntentDataError)]
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise EgoIntentDataError(f"{path}: not valid JSON: {error}") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise EgoIntentDataError(f"{path}: expected a list of step records (objects), one per step")
    return records


def load_steps(path: str | Path, video_root: str | Path | None = None) -> list[Step]:
    """Read and validate every record of an annotation file; raise one EgoIntentDataError listing
    all problems (missing or empty field, wrong type, truncation not after the step start,
    unknown environment, duplicate step id, a scenario filed as both indoor and outdoor,
    missing video)."""
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
    if problems:
        listed = "\n  ".join(problems[:_MAX_LISTED_PROBLEMS])
        unlisted = len(problems) - _MAX_LISTED_PROBLEMS
        more = f"\n  ... and {unlisted} more" if unlisted > 0 else ""
        raise EgoIntentDataError(f"{path}: {len(problems)} problem(s) in the EgoIntent annotations "
                                 f"(format: README, section EgoIntent):\n  {listed}{more}")
    return steps


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
    return f"field {field} under video_root {root}; setting {_setting('video_root')}"


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
    return "scenario_" + (re.sub(r"[^0-9a-z]+", "_", scenario.lower()).strip("_") or "unnamed")


# =============================================================================================
# The pre-outcome clip
# =============================================================================================


def clip_frame_indices(step_start: float, truncation_time: float, fps: float, num_frames: int, *,
                       sample_fps: float, max_frames: int) -> list[int]:
    """The frames given to the model for one step, in time order.

    They span the clip from the frame on screen at ``step_start`` to the last frame that starts
    strictly before ``truncation_time`` (both included), evenly spaced at no more than
    ``sample_fps``; a clip that would give more than ``max_frames`` gets ``max_frames`` frames
    spread uniformly over it.
    """
    last = min(last_frame_before(truncation_time, fps), num_frames - 1)
    if last < 0:
        raise ValueError(f"no frame starts before the truncation time {truncation_time:g} s")
    first = min(frame_at(step_start, fps), last)
    sampled = math.floor((last - first) / fps * sample_fps + 1e-9) + 1
    return uniform_indices(first, last, min(sampled, last - first + 1, max_frames))


# =============================================================================================
# The task
# =============================================================================================


class EgoIntentTask(JudgedTask):
    Settings = EgoIntentSettings
    ENV_PREFIX = ENV_PREFIX

    def load_docs(self) -> list[dict]:
        settings = self.settings
        if settings.annotations is None:
            raise SettingsError(f"task {self.config.task}: set {_setting('annotations')} to the local annotation "
                                f"file; README, section EgoIntent, describes its format")
        settings.check_sampling(f"task {self.config.task}")
        steps = load_steps(settings.annotations, settings.video_root)
        return step_docs(steps, settings)

    def download(self, dataset_kwargs=None) -> None:
        super().download(dataset_kwargs)
        # One breakdown metric per scenario of the data (Figure 7); the YAML cannot list them.
        for scenario in sorted(set(self.eval_docs["scenario"])):
            self.add_metric(scenario_metric(scenario), judged_score)


def step_docs(steps: list[Step], settings: EgoIntentSettings) -> list[dict]:
    """The evaluation documents: each step with its video's frame plan (read from each video once)."""
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
        except ValueError as error:
            problems.append(f"step {step.step_id!r}: {error}")
            continue
        docs.append({"step_id": step.step_id, "video": str(step.video), "step_start": step.step_start,
                     "truncation_time": step.truncation_time, "scenario": step.scenario,
                     "environment": step.environment, "event": step.event, **step.references,
                     "video_fps": info.fps, "frame_indices": indices,
                     "video_input": settings.video_input, "frame_max_side": settings.frame_max_side})
    if problems:
        raise EgoIntentDataError("EgoIntent videos:\n  " + "\n  ".join(problems[:_MAX_LISTED_PROBLEMS]))
    return docs


def describe_steps(docs: list[dict], settings: EgoIntentSettings) -> str:
    """A summary of loaded steps: counts by environment and scenario, frames per clip."""
    from collections import Counter

    frames = sorted(len(d["frame_indices"]) for d in docs)
    at_cap = sum(n == settings.max_frames for n in frames)
    lines = [(f"{len(docs)} steps in {len({d['video'] for d in docs})} videos; frames per clip at "
              f"{settings.sample_fps:g} FPS: min {frames[0]}, median {frames[len(frames) // 2]}, max {frames[-1]} "
              f"({at_cap} clips at the cap of {settings.max_frames})")]
    environments = Counter(d["environment"] for d in docs)
    lines.append("environment: " + ", ".join(f"{name} {environments[name]}" for name in ENVIRONMENTS))
    scenarios = Counter((d["scenario"], d["environment"]) for d in docs)
    lines.append(f"{len(scenarios)} scenarios (the paper has 15):")
    lines += [f"  {scenario_metric(name):<32} {count:>5} steps  ({name}, {environment})"
              for (name, environment), count in sorted(scenarios.items())]
    return "\n".join(lines)


def doc_to_visual(doc: dict) -> list:
    """The clip's frames: tagged as one video clip, or as separate images (``video_input``)."""
    with VideoFile(doc["video"]) as video:
        frames = video.frames(doc["frame_indices"], max_side=doc["frame_max_side"])
    return as_video_frames(frames, clip=f"egointent:{doc['step_id']}") if doc["video_input"] else frames


PROMPT = (
    "This egocentric (first-person) video clip shows one step of a person's activity. "
    "It ends before the outcome of the step becomes visible.\n"
    "Step id: {step_id}\n\n"
    "Infer the person's intent at this step and answer three questions:\n"
    + "".join(f"{n}. {d.label}: {d.question}\n" for n, d in enumerate(DIMENSIONS, start=1))
    + "\nAnswer with one JSON object and nothing else: {{"
    + ", ".join(f'"{field}": "..."' for field in FIELDS) + "}}"
)


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """The unified prompt (the same for every model): the step id and the three questions."""
    return PROMPT.format(step_id=doc["step_id"])


def doc_to_target(doc: dict) -> str:
    return json.dumps({field: doc[field] for field in FIELDS}, ensure_ascii=False)


# =============================================================================================
# Reading answers
# =============================================================================================


def _label_pattern(words: str) -> str:
    return r"[\s_\-]*".join(map(re.escape, words.split()))


# Names a model may give each field (compared after lower-casing, with _ and - as spaces).
FIELD_NAMES = {
    "local_intent": ("local intent", "local goal", "local"),
    "global_intent": ("global intent", "global goal", "global"),
    "next_step_plan": ("next step plan", "next plan", "next step", "next action"),
}
_FIELD_OF_NAME = {name: field for field, names in FIELD_NAMES.items() for name in names}
_LABEL = "|".join(_label_pattern(name) for name in sorted(_FIELD_OF_NAME, key=len, reverse=True))
# A labelled line: optional bullet / number / markdown, the label, an optional "(What)", then ":" or a
# dash, or nothing more on the line (a heading; the value follows on the next lines).
_LABELLED_LINE = re.compile(
    rf"^[ \t>#*\-•\d.)(\[\]]*[\"'*_`]*(?P<label>{_LABEL})[\"'*_`]*[ \t]*(?:\([^)\n]*\))?[\"'*_`]*[ \t]*"
    rf"(?:[:：=\-–—]+|(?=\r?\n)|\Z)(?P<value>.*)$",
    re.IGNORECASE | re.MULTILINE)
_EMPTY_VALUES = {"", "n/a", "na", "none", "null", "unknown", "-"}


def parse_answer(text: str) -> dict[str, str]:
    """The three fields from a model's answer: a JSON object (also in a code fence or amid
    prose) or labelled lines ("Local intent: ...", "**Global intent** - ...", "1. Next-step
    plan: ..."). Fields found in neither are absent from the result."""
    text = text if isinstance(text, str) else ""
    fields = _fields_from_json(text)
    for field, value in _fields_from_lines(text).items():
        fields.setdefault(field, value)
    return {field: fields[field] for field in FIELDS if field in fields}


def _field_of(name: str) -> str | None:
    return _FIELD_OF_NAME.get(re.sub(r"[\s_\-]+", " ", str(name).strip().lower()))


def _fields_from_json(text: str) -> dict[str, str]:
    """Fields of the first object in ``text`` that has any: JSON, or a Python dict literal.

    JSON is tried at every ``{`` outside an object already decoded (what is nested in one was
    searched with it). A Python literal is read from a ``{`` to the ``}`` that closes it (braces
    counted, quotes not: a brace inside a quoted string must be balanced), never from inside a
    span already tried, so ``literal_eval`` sees each character once at most and a degenerate
    answer ("{{{{...}}}}") is read in linear time. A model may write anything: whatever a parser
    raises (an unhashable key, nesting too deep) means "no object here".
    """
    decoder = json.JSONDecoder()
    closing = _closing_braces(text)
    json_end = literal_end = 0  # where the last object decoded as JSON / given to literal_eval ends
    for start in (m.start() for m in re.finditer(r"\{", text)):
        value = None
        if start >= json_end:
            try:
                value, json_end = decoder.raw_decode(text, start)
            except Exception:  # not JSON here, or nested deeper than Python recurses
                pass
        if value is None and start >= literal_end and start in closing:
            literal_end = closing[start] + 1
            value = _python_literal(text[start:literal_end])
        fields = _fields_of_object(value)
        if fields:
            return fields
    return {}


def _closing_braces(text: str) -> dict[int, int]:
    """The position of the ``}`` closing each ``{`` of ``text`` (a ``{`` never closed has none)."""
    closing, opened = {}, []
    for brace in re.finditer(r"[{}]", text):
        if brace.group() == "{":
            opened.append(brace.start())
        elif opened:
            closing[opened.pop()] = brace.start()
    return closing


def _python_literal(span: str) -> Any:
    """The value of the Python literal ``span`` ({'local_intent': '...'}), or None."""
    try:
        return ast.literal_eval(span)
    except Exception:  # whatever literal_eval raises means: not a literal
        return None


def _fields_of_object(value: Any) -> dict[str, str]:
    """Fields of a decoded object: its own, else those of the first object nested in it (in its
    values or in lists, in order, at any depth: {"answer": {...}})."""
    pending = [value]
    while pending:  # depth first, without recursion (a model may nest deeper than Python recurses)
        value = pending.pop()
        if isinstance(value, dict):
            fields = _own_fields(value)
            if fields:
                return fields
            pending.extend(reversed(value.values()))
        elif isinstance(value, list):
            pending.extend(reversed(value))
    return {}


def _own_fields(value: dict) -> dict[str, str]:
    fields = {}
    for key, item in value.items():
        field = _field_of(key)
        text = _clean(item if isinstance(item, str) else "; ".join(map(str, item)) if isinstance(item, list) else "")
        if field and text:
            fields.setdefault(field, text)
    return fields


def _fields_from_lines(text: str) -> dict[str, str]:
    fields = {}
    for match, following in itertools.pairwise([*_LABELLED_LINE.finditer(text), None]):
        # A value runs on to the next label, or to the first blank line after its own text.
        value = text[match.start("value"):following.start() if following else len(text)]
        value = re.split(r"\n[ \t]*\n", value.strip(), maxsplit=1)[0]
        value = _clean(" ".join(line.strip() for line in value.splitlines()))
        field = _field_of(match.group("label"))
        if value:
            fields.setdefault(field, value)
    return fields


def _clean(value: str) -> str:
    value = re.sub(r"^[\s*_`\"']+|[\s*_`\"',]+$", "", value)
    return "" if value.lower().rstrip(".") in _EMPTY_VALUES else value



# =============================================================================================
# Judging (this suite's reconstruction; the paper does not publish its judge prompt)
# =============================================================================================

JUDGE_SYSTEM = ("You are a careful evaluator of egocentric video understanding. You compare a model's prediction "
                "with a human-annotated reference for one dimension of a person's intent and rate how consistent "
                "their meanings are.")
JUDGE_PROMPT = """Dimension: {label}, {definition}.

Reference: {reference}
Prediction: {prediction}

Rate how consistent the prediction is in meaning with the reference for this dimension, on an integer scale from 0 to 10:
10: the same meaning (the wording may differ)
7-9: the same intent, with minor differences in detail or specificity
4-6: partly consistent: related, but the object, the purpose or the level of abstraction differs
1-3: mostly inconsistent: only a loose connection to the reference
0: unrelated or contradictory
Rate meaning, not wording. A prediction that answers another dimension (the visible motion instead of its goal, the current step instead of the next one) is not consistent.
Explain your judgement in one sentence, then give the rating as "Rating: [[x]]"."""
JUDGE_SCALE = tuple(range(11))
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)
_RATING = bracket_rating(JUDGE_SCALE)


def parse_judge_rating(text: str) -> float:
    """The 0-10 rating of a judge answer (``Rating: [[x]]``); a Qwen3 ``<think>`` block is skipped."""
    if "<think>" in text and "</think>" not in text:
        raise ValueError("the judge's reasoning never ended (raise judge_max_tokens)")
    return _RATING(_THINKING.sub("", text))


RUBRIC = Rubric(parse_judge_rating, scale=10.0)  # 0-10 ratings, reported on 0-100 like Table 3
RUBRIC_REFERENCE = register_rubric("egointent", RUBRIC)  # the name its judged items (and logs) carry
MISSING = FixedRating(0.0, "the answer has no such field")


def judge_request(doc: dict, dimension: Dimension, prediction: str) -> JudgeRequest:
    prompt = JUDGE_PROMPT.format(label=dimension.label, definition=dimension.definition,
                                 reference=doc[dimension.field], prediction=prediction)
    return JudgeRequest.from_prompt(f"{doc['step_id']}/{dimension.field}", prompt, system=JUDGE_SYSTEM)


def process_results(doc: dict, results: list) -> dict:
    """Judge items for every metric this step counts in; the judge runs after generation."""
    answer = parse_answer(results[0])
    parts = {d.field: judge_request(doc, d, answer[d.field]) if d.field in answer else MISSING for d in DIMENSIONS}
    step = judge_parts_item(parts, RUBRIC_REFERENCE)
    missing = len(FIELDS) - len(answer)
    return {
        "overall": step,
        **{field: judge_parts_item({field: part}, RUBRIC_REFERENCE) for field, part in parts.items()},
        doc["environment"]: step,
        scenario_metric(doc["scenario"]): step,
        "judged": step,
        "failed": step,
        "incomplete_answers": int(missing > 0),
        "missing_fields": missing,
    }


def incomplete_answers(items: list[int]) -> int:
    """Answers lacking at least one field (each missing field scores 0); warned about when any."""
    count = sum(items)
    if count:
        logger.warning(f"EgoIntent: {count} of {len(items)} answers lack at least one of the fields "
                       f"{', '.join(FIELDS)}; each missing field scores 0 (see the metric missing_fields)")
    return count


def missing_fields(items: list[int]) -> int:
    return sum(items)

