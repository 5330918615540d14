"""Synthetic EgoIntent data in both layouts, and EgoIntent's share of the offline demo.

* ``write_release(root)``: the authors' layout, ``<indoor|outdoor>/<scene>/<event>/step_label.json``
  and a pre-cut clip per step (``step<step_id>.mp4``), three events (two indoor scenes, one
  outdoor) at 30, 29.97 (30000/1001) and 25 FPS, five steps each; each clip's frames show their
  frame number in the source video (``demo.kit.media``), windows end on frame boundaries and
  between frames, one clip holds frames after its window (never shown), one is shorter than a
  sampling interval, three longer than the frame cap; steps have zero to two plausible next steps.
* ``write_dataset(root)``: the same kind of steps in the flat format, whole videos named by
  path and by ``video_uid`` and ``annotations.jsonl``.
* ``judge_rating``: a deterministic 0-10 rating per judge prompt, for loopback judges.
* ``smoke_suite``: the release plus a loopback judge, for ``lmms-egoplan smoke``.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from lmms_egoplan.demo.kit.judge_server import hashed_rating, loopback_judge_settings
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import write_video
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.egointent.data import RELEASE, scenario_metric

FIELDS = ("local_intent", "procedural_intent", "next_step_plan")  # answer keys and metrics, as the prompt names them
# (step start, truncation time) as multiples of the frame duration: whole numbers put the
# truncation on a frame boundary, halves between two frames.
STEP_FRAMES = ((12, 45), (45.5, 96.5), (100, 104), (30, 270), (150.25, 151))

REFERENCES = (
    ("loosen the jar lid", "open the jar to add its contents to the dish", "spoon sauce into the pan"),
    ("line up the plank with the saw", "cut the plank to length for the shelf", "start sawing the plank"),
    ("free both hands", "finish one task before moving to the next", "pick up the watering can"),
    ("steady the ladder", "reach the high branch safely", "climb the ladder"),
    ("smooth the sheet", "make the bed tidy for the night", "put the pillow in place"),
)
PLAUSIBLE_NEXT_STEPS = ((), ("wipe the counter",), ("put the tool down", "check the result"))


def references(number: int) -> dict[str, str]:
    """The three references of the ``number``-th step of a dataset (references cycle)."""
    return dict(zip(FIELDS, REFERENCES[number % len(REFERENCES)]))


# =============================================================================================
# The release
# =============================================================================================


@dataclass(frozen=True)
class SyntheticEvent:
    environment: str
    scene: str
    event: str
    fps: Fraction
    first_frame: int  # where the event starts in its (Ego4D) source video

    @property
    def video_uid(self) -> str:
        """A uid like Ego4D's, that says nothing of the event (it reaches the model as part of the step id)."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"egointent-synthetic/{self.scene}/{self.event}"))


EVENTS = (
    SyntheticEvent("indoor", "kitchen", "boil_noodles", Fraction(30), 24_000),
    SyntheticEvent("outdoor", "yard", "rake_leaves", Fraction(30000, 1001), 9_000),
    SyntheticEvent("indoor", "bedroom", "make_bed", Fraction(25), 15_000),
)


@dataclass(frozen=True)
class ReleasedStep:
    """A step as written into the release, and what a reader must make of it."""

    event: SyntheticEvent
    step_id: int
    first_frame: int  # the clip's first frame, numbered in the source video (the frames show these numbers)
    clip_frames: int
    record: dict  # as in step_label.json

    @property
    def sample_id(self) -> str:
        return f"{self.event.video_uid}_{self.step_id}"

    @property
    def window(self) -> float:
        return self.record[RELEASE.end] - self.record[RELEASE.start]


def released_steps(events: tuple[SyntheticEvent, ...] = EVENTS) -> list[ReleasedStep]:
    """Five steps per event, in the order the task reads them (events by folder, steps as listed).
    A clip starts on a frame of the source video: its first frame is shown at ``start_time``."""
    steps = []
    for event in sorted(events, key=lambda e: (e.environment, e.scene, e.event)):
        for s, (start, end) in enumerate(STEP_FRAMES):
            first = event.first_frame + math.floor(start)
            last = event.first_frame + math.ceil(end) - 1  # the last frame before the end of the window
            number = EVENTS.index(event) + s
            record = {RELEASE.step_id: s + 1, RELEASE.start: float(first / event.fps),
                      RELEASE.end: float((event.first_frame + end) / event.fps),
                      **{RELEASE.references[name]: text for name, text in references(number).items()},
                      RELEASE.plausible_next_steps: list(PLAUSIBLE_NEXT_STEPS[number % len(PLAUSIBLE_NEXT_STEPS)])}
            steps.append(ReleasedStep(event, s + 1, first, last - first + 1, record))
    return steps


def write_release(root: str | Path, events: tuple[SyntheticEvent, ...] = EVENTS) -> Path:
    """The release under ``root`` (returned): a folder per event with its label file and clips."""
    root = Path(root)
    steps = released_steps(events)
    for event in events:
        folder = root / event.environment / event.scene / event.event
        own = [step for step in steps if step.event == event]
        for step in own:
            clip = folder / RELEASE.clip_file.format(step_id=step.step_id)
            if not clip.is_file():
                write_video(clip, step.clip_frames, fps=event.fps, first_index=step.first_frame)
        label = {RELEASE.video_uid: event.video_uid, "scene": event.scene, "event": event.event,
                 RELEASE.steps: [step.record for step in own]}
        (folder / RELEASE.label_file).write_text(json.dumps(label, indent=1))
    return root


# =============================================================================================
# The flat format
# =============================================================================================


@dataclass(frozen=True)
class SyntheticVideo:
    name: str
    fps: Fraction
    num_frames: int
    scenario: str
    environment: str
    by_uid: bool  # named by `video_uid` (else by a `video` path)


VIDEOS = (
    SyntheticVideo("kitchen_0001", Fraction(30), 300, "Kitchen", "indoor", by_uid=True),
    SyntheticVideo("yard_0002", Fraction(30000, 1001), 300, "Yard", "outdoor", by_uid=False),
    SyntheticVideo("bedroom_0003", Fraction(25), 300, "Bedroom", "indoor", by_uid=True),
)


def step_records(videos: tuple[SyntheticVideo, ...] = VIDEOS) -> list[dict]:
    """The annotation records (flat format) for ``videos``, five steps per video."""
    records = []
    for v, video in enumerate(videos):
        for s, (start, end) in enumerate(STEP_FRAMES):
            records.append({
                "step_id": f"step_{len(records):04d}",
                **({"video_uid": video.name} if video.by_uid else {"video": f"videos/{video.name}.mp4"}),
                "step_start": float(start / video.fps),
                "truncation_time": float(end / video.fps),
                "scenario": video.scenario,
                "environment": video.environment,
                **references(v + s),
                "event": f"synthetic event {v}",
            })
    return records


def write_dataset(root: str | Path, videos: tuple[SyntheticVideo, ...] = VIDEOS) -> Path:
    """Videos under ``root`` (``<uid>.mp4`` and ``videos/<name>.mp4``) and ``root/annotations.jsonl``."""
    root = Path(root)
    for video in videos:
        path = root / f"{video.name}.mp4" if video.by_uid else root / "videos" / f"{video.name}.mp4"
        if not path.is_file():
            write_video(path, video.num_frames, fps=video.fps)
    annotations = root / "annotations.jsonl"
    annotations.write_text("".join(json.dumps(r) + "\n" for r in step_records(videos)))
    return annotations


# A deterministic 0-10 rating per judge prompt (EgoIntent's scale).
judge_rating = hashed_rating(tuple(str(rating) for rating in range(11)))


# What the scripted judge rates each kind of field answer (0-10), and how each is written.
SCRIPTED_RATINGS = {"reference": 10, "partly right": 6, "wrong": 1}
WRONG_ANSWER = "wave to a neighbour"
# The scripted answers, one per step in turn: the answer's form, then each field's kind (None: left out).
SCRIPTED_STEPS = (
    ("json", ("reference", "reference", "reference")),
    ("lines", ("partly right", "reference", "wrong")),
    ("json", ("reference", "partly right", None)),  # incomplete: no next-step plan
    ("fenced json", ("partly right", "partly right", "partly right")),
    ("thinking, then lines", ("wrong", "wrong", "reference")),  # a draft of other fields first: not the answer
    ("json", ("reference", "reference", "partly right")),
)  # six, against five steps per video: each video (scenario) gets its own mix
_LABELS = {"local_intent": "Local Intent", "procedural_intent": "Procedural intent", "next_step_plan": "Next-Plan"}
# Where EgoIntent's judge prompt holds the reference and the prediction.
_JUDGED_PAIR = re.compile(r"^Reference: (.*)\nPrediction: (.*)$", re.MULTILINE)


def field_answer(reference: str, kind: str) -> str:
    return {"reference": reference, "partly right": f"probably {reference}", "wrong": WRONG_ANSWER}[kind]


def scripted_text(form: str, fields: dict[str, str]) -> str:
    """An answer in one of the forms models write: a JSON object, one in a fenced block amid prose,
    labelled lines, or those after a thinking model's draft of other fields (Kimi-VL-Thinking's markers, which
    lmms-eval does not strip)."""
    if form == "thinking, then lines":
        draft = "\n".join(f"{_LABELS[name]}: perhaps not {value}" for name, value in fields.items())
        return f"◁think▷The clip is short.\n{draft}\n◁/think▷\n" + scripted_text("lines", fields)
    if form == "lines":
        return "\n".join(f"{_LABELS[name]}: {value}" for name, value in fields.items())
    text = json.dumps(fields)
    return f"Here is my reading of the clip.\n```json\n{text}\n```" if form == "fenced json" else text


# The task's defaults: frames sampled at 6 FPS, at most 32 per clip. A clip of d seconds holds about
# d x 6 + 1 frames at that rate, so one of 32 / 6 s or more is capped.
DEMO_SAMPLE_FPS, DEMO_FRAME_CAP = 6, 32


def scripted_answers(release: Path) -> ScriptedAnswers:
    """Every step of the release answered in the forms and kinds of ``SCRIPTED_STEPS``, in turn. A
    field's score is its mean rating over the steps (a missing field counts 0) x 10, overall the mean of
    the three, and indoor / outdoor / each scenario the same over their steps."""
    steps = released_steps()
    answers, ratings, step_ratings = {}, {}, []
    keys = [f"Step id: {step.sample_id}\n" for step in steps]
    for number, step in enumerate(steps):
        form, kinds = SCRIPTED_STEPS[number % len(SCRIPTED_STEPS)]
        wanted = {name: step.record[RELEASE.references[name]] for name in FIELDS}
        fields = {name: field_answer(wanted[name], kind) for name, kind in zip(FIELDS, kinds) if kind}
        answers[keys[number]] = scripted_text(form, fields)
        ratings.update({(wanted[name], fields[name]): str(SCRIPTED_RATINGS[kind])
                        for name, kind in zip(FIELDS, kinds) if kind})
        step_ratings.append([SCRIPTED_RATINGS[kind] if kind else 0 for kind in kinds])

    def rating(prompt: str) -> str | None:
        pair = _JUDGED_PAIR.search(prompt)
        return ratings.get((pair.group(1), pair.group(2))) if pair else None

    def score(chosen: list[int]) -> dict[str, float]:
        fields = {name: 10 * mean([step_ratings[i][f] for i in chosen]) for f, name in enumerate(FIELDS)}
        return {**fields, "overall": mean(list(fields.values()))}

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        everything = [i for i in range(len(steps)) if keys[i] not in failed]  # the answered steps
        missing = [sum(kind is None for kind in SCRIPTED_STEPS[i % len(SCRIPTED_STEPS)][1]) for i in everything]
        metrics = {**score(everything), "judged": 3 * len(everything) - sum(missing), "failed": 0,
                   "incomplete_answers": sum(m > 0 for m in missing), "missing_fields": sum(missing), "cut_answers": 0,
                   "capped_samples": sum(steps[i].window * DEMO_SAMPLE_FPS >= DEMO_FRAME_CAP for i in everything),
                   "skipped_samples": 0, "failed_requests": len(steps) - len(everything)}
        for environment in {step.event.environment for step in steps}:  # the metrics indoor, outdoor
            chosen = [i for i in everything if steps[i].event.environment == environment]
            metrics[environment] = score(chosen)["overall"]
        for scene in {step.event.scene for step in steps}:
            metrics[scenario_metric(scene)] = score([i for i in everything if steps[i].event.scene == scene])["overall"]
        return {"egointent": metrics}

    return ScriptedAnswers(tasks=("egointent",), answers=answers, expected=expected, ratings=rating,
                           judge_prefix="EGOINTENT",
                           # the step id in the prompt tells the scripted model which step it answers
                           env={"EGOINTENT_ANNOTATIONS": str(release), "EGOINTENT_SHOW_STEP_ID": "true"})


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """EgoIntent on a synthetic release (the authors' layout, as downloaded), judged by a loopback judge;
    answered by script too."""
    release = write_release(Path(workdir) / "data" / "EgoIntent")
    return SmokeSuite(
        env={"EGOINTENT_ANNOTATIONS": str(release),
             **loopback_judge_settings("EGOINTENT", judge_rating, workdir, resources)},
        # A random model rarely ends its answer: 512 new tokens per step would only slow the demo down.
        cli_args=("--gen_kwargs", "max_new_tokens=16"),
        scripted=scripted_answers(release),
    )
