"""EgoIntent (Pan et al., 2026): step-level intent understanding in egocentric video.

The protocol of the paper (sections 3 and 4.1 of arXiv v1) and of the authors' release (2026-08-10:
code page YePan2/EgoIntent, data py2279105943/EgoIntent on the Hugging Face Hub), as this module
implements it:

1. **Samples.** Each step of an egocentric procedural video is one sample. Its clip runs from
   the step's start to the end of its observation, set just before the step's key outcome becomes
   visible: no frame at or after that time reaches the model (``clip_frame_indices``). The
   release ships the clip pre-cut (the window ``start_time`` to ``obs_end_time``); the flat
   format names a whole video and the two times in it.
2. **Visual input.** Frames are sampled from the clip at 6 FPS (``sample_fps``); a clip with
   more frames than ``max_frames`` (none: no cap, the paper's rule) is subsampled uniformly, at a
   lower rate, and counted (``capped_samples``). The frames go to the model as one video, with
   their times (the rate actually sampled), where the backend takes videos (open-source models in
   the paper) or as a sequence of images (``video_input: false``; the paper's protocol for API
   models).
3. **Prompt.** One prompt for all models: by default (``definitions: release``) the authors' published
   prediction prompts (YePan2/EgoIntent@3528dc9, ``prompts/``; withdrawn, public in the history), a system
   message as the system turn (at the head of the text for lmms-eval's plain models, which send none of a
   task's) and a user message with the clip, asking for ``local_intent``, ``procedural_intent`` and
   ``next_step`` by the release's definitions; ``definitions: v1``: this suite's prompt of versions 1-3. No
   task or event name, no annotation; the sample id only with ``show_step_id``. Answers cut by
   ``max_new_tokens`` before every field is written are counted (``cut_answers``).
   ``parse_answer`` reads JSON or labelled lines amid prose; a missing field scores 0 and is
   counted (``incomplete_answers``, ``missing_fields``), as the authors' leaderboard scores it.
4. **Judging.** An LLM judge (a Qwen3 model in the paper) rates each field's semantic
   consistency with its reference on 0-10 (``JUDGE_PROMPT``: this suite's reconstruction, told the
   definitions the setting ``definitions`` picks; the authors publish no judge prompt); the Next-Plan
   is compared with the observed next step, and with the release's plausible next steps too where
   ``next_step_references`` says so. Reported on
   0-100: each field, ``overall`` (the mean of the three field scores, as in Table 3 and the
   leaderboard), ``indoor`` / ``outdoor`` (Table 3) and ``scenario_<name>`` per scene (Figure 7).

Reading either layout and checking it, and planning each clip's frames, is
``lmms_egoplan.egointent.data``. This module follows the task YAML (``tasks/egointent/``):
settings, the task, then what the harness calls in order -- visuals, text, results (answers read,
then judged), aggregation.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from typing import Any

from loguru import logger

from lmms_egoplan.contract.benchmark import LoadedDocs, Metric, TaskContext, TaskSpec, chat_messages, warn_of_skipped
from lmms_egoplan.contract.judged import JUDGED_METRICS, judged
from lmms_egoplan.core.media import VideoFile, as_video_frames, frame_times
from lmms_egoplan.core.reasoning import reasoning_left_open, without_reasoning
from lmms_egoplan.core.request_options import SYSTEM_PROMPT as SYSTEM_PROMPT_OPTION
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.egointent.data import (
    DIMENSIONS,
    ENV_PREFIX,
    FIELDS,
    Dimension,
    load_samples,
    longer_clips_summary,
    scenario_metric,
)
from lmms_egoplan.egointent.protocol import (
    ALSO_ACCEPTABLE,
    JUDGE_SYSTEM,
    OR_ALSO_ACCEPTABLE,
    RELEASE_USER,
    RUBRIC_NAMES,
    SYSTEM_MESSAGES,
    EgoIntentSettings,
    judge_template,
)
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.rubrics import FixedRating, judge_parts_item

# =============================================================================================
# The steps and the judge
# =============================================================================================


def load_docs(context: TaskContext) -> LoadedDocs:
    """Every step of the release (or a flat annotation file); steps whose media cannot be used skipped if
    ``skip_missing``."""
    settings = context.settings
    if settings.annotations is None:
        raise SettingsError(f"task {context.task_name}: set {setting_name(ENV_PREFIX, 'annotations')} to the "
                            f"EgoIntent release folder (or a flat annotation file); tasks/egointent/README.md, "
                            f"Data preparation, says how to get it")
    loaded = load_samples(settings)
    warn_of_skipped(context.task_name, loaded.skipped, "step(s) whose media cannot be used", ENV_PREFIX)
    if longer := longer_clips_summary(loaded.docs, settings):
        logger.warning(f"{context.task_name}: {longer}")
    return LoadedDocs(loaded.docs, loaded.skipped, read_from=[str(settings.annotations)])


def scenario_metrics(context: TaskContext, docs: list[dict]) -> list[Metric]:
    """One judged breakdown per scenario of the data (Figure 7), which no list can name in advance."""
    return [judged(scenario_metric(scenario))
            for scenario in sorted({doc["scenario"] for doc in docs})]


def judge_rubric(settings: EgoIntentSettings) -> str:
    """The rubric of the judge prompt the setting ``definitions`` picks (RUBRIC_NAMES)."""
    return RUBRIC_NAMES[settings.definitions]


# =============================================================================================
# 1. Visuals
# =============================================================================================


def doc_to_visual(doc: dict) -> list:
    """The clip's frames: tagged as one video clip, each with its time from the step's start at the
    video's frame rate (the rate actually sampled reaches the model), or as separate images
    (``video_input``)."""
    indices = doc["frame_indices"]
    with VideoFile(doc["video"]) as video:
        frames = video.frames(indices, max_side=doc["frame_max_side"])
    if not doc["video_input"]:
        return frames
    return as_video_frames(frames, clip=f"egointent:{doc['step_id']}",
                           times=frame_times(indices, indices[0], doc["video_fps"]))


# =============================================================================================
# 2. Text
# =============================================================================================


# definitions: v1 -- the suite's own prompt up to version 3 (arXiv v1 published none), no system message.
V1_PROMPT = (
    "This egocentric (first-person) video clip shows one step of a person's activity. "
    "It ends before the outcome of the step becomes visible.\n"
    "{step_line}\n"
    "Infer the person's intent at this step and answer three questions:\n"
    + "".join(f"{n}. {d.label}: {d.v1_question}\n" for n, d in enumerate(DIMENSIONS, start=1))
    + "\nAnswer with one JSON object and nothing else: {{"
    + ", ".join(f'"{field}": "..."' for field in FIELDS) + "}}"
)
STEP_LINE = "Step id: {step_id}\n"  # shown only with show_step_id


def prompt_turns(doc: dict) -> tuple[str, str]:
    """(system message, user message) of the prediction prompt the setting ``definitions`` picks; the
    step id is in it only with ``show_step_id``."""
    step_line = STEP_LINE.format(step_id=doc["step_id"]) if doc["show_step_id"] else ""
    system = SYSTEM_MESSAGES[doc["definitions"]]
    if doc["definitions"] == "v1":
        return system, V1_PROMPT.format(step_line=step_line)
    return system, f"{step_line}\n{RELEASE_USER}" if step_line else RELEASE_USER


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """The user message; the system message leads it for backends that send no system turn of the task's
    (lmms-eval's plain models). The suite's backends send it as the system turn (the request option
    ``system_prompt``): the YAML's ``lmms_eval_specific_kwargs`` say ``system_turn: true`` for them."""
    system, user = prompt_turns(doc)
    return f"{system}\n\n{user}" if system and not (lmms_eval_specific_kwargs or {}).get("system_turn") else user


def doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    """Chat backends: the system message as a system turn, then the clip and the user message."""
    system, user = prompt_turns(doc)
    return chat_messages(system, doc_to_visual(doc), user)


def doc_to_target(doc: dict) -> str:
    """The three reference labels, as the JSON object the prompt asks for."""
    return json.dumps({field: doc[field] for field in FIELDS}, ensure_ascii=False)


# =============================================================================================
# 3. Results: reading answers
# =============================================================================================


def _label_pattern(words: str) -> str:
    return r"[\s_\-]*".join(map(re.escape, words.split()))


# Names a model may give each field (compared after lower-casing, with _ and - as spaces); Procedural
# Intent under its arXiv v1 name too.
FIELD_NAMES = {
    "local_intent": ("local intent", "local goal", "local"),
    "procedural_intent": ("procedural intent", "procedural goal", "procedural",
                          "global intent", "global goal", "global"),
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
# No answer: "string" is the placeholder of the authors' output format (an echo of it answers nothing), "..." v1's.
_EMPTY_VALUES = {"", "n/a", "na", "none", "null", "unknown", "-", "string"}


def parse_answer(text: str) -> dict[str, str]:
    """The three fields from a model's answer less its reasoning blocks (``core.reasoning``: a thinking model's
    drafts are not its answer): a JSON object (also in a code fence or amid prose) or labelled lines ("Local
    Intent: ...", "**Procedural intent** - ...", "1. Next-Plan: ..."). Fields found in neither are absent from the
    result."""
    text = without_reasoning(text if isinstance(text, str) else "")
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
    # Trailing "}": a labelled line read from a JSON object (an empty field's line runs on to the closing brace).
    value = re.sub(r"^[\s*_`\"']+|[\s*_`\"',}]+$", "", value)
    return "" if value.lower().rstrip(".") in _EMPTY_VALUES else value


# =============================================================================================
# 3. Results: judging (this suite's reconstruction; the authors publish no judge prompt)
# =============================================================================================

MISSING = FixedRating(0.0, "the answer has no such field")


def judge_request(doc: dict, dimension: Dimension, prediction: str) -> JudgeRequest:
    """One field judged against its reference; a Next-Plan also against the plausible next steps
    where the setting ``next_step_references`` shows them (``judge_sees_plausible_next_steps``)."""
    alternatives = doc["plausible_next_steps"] if (
        dimension.field == "next_step_plan" and doc["judge_sees_plausible_next_steps"]) else []
    also = ALSO_ACCEPTABLE.format(answers="; ".join(alternatives)) if alternatives else ""
    definitions = doc["definitions"]
    prompt = judge_template(definitions).format(
        label=dimension.label, definition=dimension.definitions[definitions], reference=doc[dimension.field],
        also_acceptable=also, or_also_acceptable=OR_ALSO_ACCEPTABLE if alternatives else "", prediction=prediction)
    return JudgeRequest.from_prompt(f"{doc['step_id']}/{dimension.field}", prompt, system=JUDGE_SYSTEM)


def process_results(doc: dict, results: list, context: TaskContext) -> dict:
    """Judge items for every metric this step counts in; the judge runs after generation."""
    answer = parse_answer(results[0])
    parts = {d.field: judge_request(doc, d, answer[d.field]) if d.field in answer else MISSING for d in DIMENSIONS}
    rubric = RUBRIC_NAMES[doc["definitions"]]
    step = judge_parts_item(parts, rubric)
    missing = len(FIELDS) - len(answer)
    return {
        "overall": step,
        **{field: judge_parts_item({field: part}, rubric) for field, part in parts.items()},
        doc["environment"]: step,
        scenario_metric(doc["scenario"]): step,
        "judged": step,
        "failed": step,
        "incomplete_answers": int(missing > 0),
        "missing_fields": missing,
        "cut_answers": int(missing > 0 and ends_unfinished(results[0])),
        "capped_samples": int(doc["frames_capped"]),
    }


# =============================================================================================
# 4. Aggregation (the judged metrics declared: lmms_egoplan.contract.judged)
# =============================================================================================


def incomplete_answers(items: list[int]) -> int:
    """Answers lacking at least one field (each missing field scores 0); warned about when any."""
    count = sum(items)
    if count:
        logger.warning(f"EgoIntent: {count} of {len(items)} answers lack at least one of the fields "
                       f"{', '.join(FIELDS)}; each missing field scores 0 (see the metric missing_fields)")
    return count


def ends_unfinished(text: str) -> bool:
    """Whether an answer stops inside what it opened -- a reasoning block (``core.reasoning``), a JSON object, a code
    fence -- as a generation cut by ``max_new_tokens`` does (lmms-eval gives the task the text, not why it stopped)."""
    text = text if isinstance(text, str) else ""
    return reasoning_left_open(text) or text.count("{") > text.count("}") or text.count("```") % 2 == 1


def cut_answers(items: list[int]) -> int:
    """Incomplete answers that end unfinished: most likely cut by the token limit; warned about when any."""
    count = sum(items)
    if count:
        logger.warning(f"EgoIntent: {count} of {len(items)} answers lack a field and end unfinished (a thinking "
                       f"block, JSON object or code fence left open): most likely cut by max_new_tokens; their "
                       f"missing fields score 0. For a thinking model raise it (--gen_kwargs max_new_tokens=...; "
                       f"tasks/egointent/README.md, Fidelity, Answer length)")
    return count


def missing_fields(items: list[int]) -> int:
    """Fields missing over all answers (each scored 0)."""
    return sum(items)


def capped_samples(items: list[int]) -> int:
    """Steps whose clip had more frames at ``sample_fps`` than ``max_frames`` allows, so was sampled at a
    lower rate than the paper's 6 FPS."""
    return sum(items)


# =============================================================================================
# The task, as lmms-eval builds it
# =============================================================================================


STEPS = TaskSpec(
    load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text, doc_to_messages=doc_to_messages,
    doc_to_target=doc_to_target, process_results=process_results, judge_rubric=judge_rubric,
    metrics_of_the_data=scenario_metrics, request_options={"system_prompt": SYSTEM_PROMPT_OPTION},
    metrics=(judged("overall"),  # mean of the three field scores (Table 3)
             # procedural_intent: "global_intent" up to version 2 (arXiv v1's name)
             *(judged(field) for field in ("local_intent", "procedural_intent", "next_step_plan")),
             judged("indoor"), judged("outdoor"),
             *JUDGED_METRICS[1:],  # field judgements with a valid rating, and those that failed
             Metric("incomplete_answers", incomplete_answers, higher_is_better=False),
             Metric("missing_fields", missing_fields, higher_is_better=False),
             Metric("cut_answers", cut_answers, higher_is_better=False),
             Metric("capped_samples", capped_samples, higher_is_better=False)))
