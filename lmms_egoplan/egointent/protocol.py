"""EgoIntent's settings, the authors' prediction prompts and the judge (this suite's reconstruction; the authors
publish no judge prompt), free of any harness: what ``lmms_egoplan.egointent.benchmark`` holds and ``task`` uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from lmms_egoplan.core.settings import SettingsError, setting, value_problems
from lmms_egoplan.egointent.data import (
    DEFINITIONS,
    DIMENSIONS,
    LAYOUTS,
    LONGER_CLIPS,
    NEXT_STEP_REFERENCES,
)
from lmms_egoplan.judge.rubrics import Rubric, bracket_rating
from lmms_egoplan.judge.settings import JudgeSettings


@dataclass(frozen=True)
class EgoIntentSettings(JudgeSettings):
    """``metadata:`` keys of the task YAML; environment variables ``EGOINTENT_<NAME>`` override them."""

    # The release folder as downloaded (<indoor|outdoor>/<scene>/<event>/step_label.json), or a flat
    # annotation file (.json list or .jsonl); required.
    annotations: Optional[Path] = setting(None, changes_answers=False)
    data_layout: str = setting("auto", choices=LAYOUTS)  # auto: a folder is the release, a file the flat format
    # The flat format: where `video` paths and `video_uid`s resolve; default: the annotation file's folder.
    video_root: Optional[Path] = setting(None, changes_answers=False)
    sample_fps: float = setting(6.0, above=0)  # frames per second sampled from each clip (the paper: 6)
    # cap per clip, longer clips subsampled uniformly below sample_fps (counted: capped_samples); none: the paper's rule
    max_frames: Optional[int] = setting(32, minimum=1)
    video_input: bool = True  # frames as one video (video-capable backends) or as separate images
    # downscale frames so that their longer side is at most this
    frame_max_side: Optional[int] = setting(None, minimum=1)
    # Read videos that a record places outside video_root (an absolute `video`, "..", a symlink out).
    allow_paths_outside_root: bool = setting(False, changes_answers=False)
    # skip steps whose video is unusable (counted: skipped_samples) instead of failing
    skip_missing: bool = setting(False, changes_answers=False)
    # A release clip longer than its window (obs_end_time - start_time) by more than a frame: show the window that
    # ends at the clip's end, the one from its first frame (versions 1-3), or stop (error).
    longer_clips: str = setting("end", choices=LONGER_CLIPS)
    # What the judge compares a Next-Plan with: the observed next step, or it and the release's plausible next steps.
    next_step_references: str = setting("observed", choices=NEXT_STEP_REFERENCES)
    # What the model is asked and the judge told: the release's definitions, in the authors' prediction prompts
    # (default), or v1: the suite's prompt and judge up to task version 3 (arXiv v1's definitions).
    definitions: str = setting("release", choices=DEFINITIONS)
    # Show the model the sample id <video_uid>_<step_id> (whose step ordinal tells the position in the event);
    # the authors' prompt shows none. Version 3's prompt: definitions v1 with show_step_id true.
    show_step_id: bool = False

    @property
    def system_prompt(self) -> str:
        """The system turn every request carries (``core.request_options.SYSTEM_PROMPT``): the authors' system
        message under the release's definitions, none under v1."""
        return SYSTEM_MESSAGES[self.definitions]

    def check_sampling(self, name: Callable[[str], str]) -> None:
        """Fail early on a frame plan that cannot work (``lmms-egoplan egointent-steps``; inside
        lmms-eval, ``resolve_settings`` checks). ``name`` says how the user sets a field."""
        if problems := value_problems(self, name):
            raise SettingsError("; ".join(problems))


# definitions: release -- the authors' prediction prompts, verbatim: YePan2/EgoIntent@3528dc9,
# prompts/benchmark_prediction_system.txt (the system message) and prompts/benchmark_prediction_user.txt (the
# user message, with the whole clip), as prompts/README.md says to send them. Withdrawn at ef6dc0b, public in
# the history; the only prediction prompts the authors published.
RELEASE_SYSTEM = """You are evaluating egocentric procedural video understanding.

You will receive one video containing the complete observation window of a single benchmark step. Watch the entire \
video in chronological order and infer exactly three labels.

LABEL DEFINITIONS

1. local_intent
The actor's immediate goal within the observed video.
Describe what the actor is trying to accomplish through the current action, rather than only describing body motion.
An action-form phrase is acceptable when it clearly expresses the immediate goal.
Keep the description specific to the current step.

2. procedural_intent
The near-term procedural subgoal that the local intent supports.
It should be one level more abstract than local_intent, but it must remain visually and procedurally supported.
Do not infer a broad event-level goal merely from the scene or objects.

3. next_step
The single most likely action that will occur immediately after the observation window ends.
Predict only one action.
Do not repeat an action that has already been completed in the video.
If an action is clearly unfinished at the end of the video, its immediate continuation may be predicted.
Keep the prediction temporally close and at a similar level of granularity to the observed action.

EVIDENCE RULES

- Use motion and state changes across the entire video, not only the final frame.
- Treat the final frame as the temporal boundary between the observation and the predicted next step.
- Base all predictions only on visible evidence and ordinary procedural continuity.
- Do not invent specific objects, tools, directions, or goals that are not visually supported.
- When multiple interpretations are possible, choose the single most visually supported and temporally immediate \
interpretation.
- Describe the camera wearer or primary actor, not the camera movement.

OUTPUT REQUIREMENTS

- Write all labels in English.
- Use concise verb phrases.
- Return valid JSON only.
- Do not include explanations, reasoning, confidence scores, alternatives, or additional fields.

REQUIRED OUTPUT FORMAT

{
  "local_intent": "string",
  "procedural_intent": "string",
  "next_step": "string"
}"""
RELEASE_USER = ("Watch the attached step video in full and predict the three required labels.\n\n"
                "Return only the JSON object specified in the system prompt.")
# The system message of each setting of definitions (v1: the suite's prompt of versions 1-3 has none).
SYSTEM_MESSAGES = {"release": RELEASE_SYSTEM, "v1": ""}


JUDGE_SYSTEM = ("You are a careful evaluator of egocentric video understanding. You compare a model's prediction "
                "with a human-annotated reference for one dimension of a person's intent and rate how consistent "
                "their meanings are.")
JUDGE_PROMPT = """Dimension: {label}, {definition}.

Reference: {reference}
{also_acceptable}Prediction: {prediction}

Rate how consistent the prediction is in meaning with the reference{or_also_acceptable} for this dimension, on an integer scale from 0 to 10:
10: the same meaning (the wording may differ)
7-9: the same intent, with minor differences in detail or specificity
4-6: partly consistent: related, but the object, the purpose or the level of abstraction differs
1-3: mostly inconsistent: only a loose connection to the reference
0: unrelated or contradictory
Rate meaning, not wording. A prediction that answers another dimension ({other_dimension}) is not consistent.
Explain your judgement in one sentence, then give the rating as "Rating: [[x]]"."""  # noqa: E501 (its hash is recorded)
# What answering another dimension means, by the setting definitions: the release's Next-Plan allows the
# immediate continuation of an unfinished action (3528dc9 prompts/benchmark_prediction_system.txt), v1's did not.
OTHER_DIMENSION = {"release": "the visible motion instead of its goal",
                   "v1": "the visible motion instead of its goal, the current step instead of the next one"}
# Where the judge sees the release's plausible next steps (next_step_references: observed_and_plausible).
ALSO_ACCEPTABLE = "Also acceptable: {answers}\n"
OR_ALSO_ACCEPTABLE = " (or with one of the answers also acceptable)"
JUDGE_SCALE = tuple(range(11))
# The 0-10 rating of a judge answer (``Rating: [[x]]``), a thinking judge's reasoning blocks left out.
parse_judge_rating = bracket_rating(JUDGE_SCALE)


# Where a judge prompt holds the prediction (judge-agreement's excerpts)
ANSWER_PATTERN = r"\nPrediction: (?P<answer>.*?)\n\nRate how consistent"


def judge_template(definitions: str) -> str:
    """The judge prompt of the setting ``definitions``, its {placeholders} for one field left."""
    return JUDGE_PROMPT.replace("{other_dimension}", OTHER_DIMENSION[definitions])


def _rubric(definitions: str) -> Rubric:
    """0-10 ratings, reported on 0-100 like Table 3; identified by the judge prompt of ``definitions``
    (its hash changes with any change of the prompt or of a definition)."""
    prompt = "\n\n".join([JUDGE_SYSTEM, judge_template(definitions),
                           *(f"{d.label}: {d.definitions[definitions]}" for d in DIMENSIONS)])
    # version 2: a judge's reasoning blocks of every kind left out before the rating is read (1: <think> only)
    return Rubric(parse_judge_rating, scale=10.0, levels=JUDGE_SCALE, version="2", prompt=prompt,
                  answer_pattern=ANSWER_PATTERN)


# The names their judged items (and logs) carry: "egointent" stays the judge of versions 1-3 (v1's definitions),
# so that older logs keep their judge's identity.
RUBRICS = {definitions: _rubric(definitions) for definitions in DEFINITIONS}
RUBRIC_NAMES = {"release": "egointent_release", "v1": "egointent"}  # as lmms_egoplan.catalogue lists them
RUBRIC, RUBRIC_NAME = RUBRICS["release"], RUBRIC_NAMES["release"]  # the default's
