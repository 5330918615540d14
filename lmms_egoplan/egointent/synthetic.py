"""Synthetic EgoIntent data in the suite's local format, and EgoIntent's share of the offline demo.

* ``write_dataset(root)``: videos whose frames show their own index (``fixtures.media``), at
  30, 29.97 (30000/1001) and 25 FPS, and ``annotations.jsonl`` with steps whose truncation
  times fall on frame boundaries and between frames, clips shorter than one sampling interval
  and clips longer than the frame cap, in indoor and outdoor scenarios; videos are named by
  path and by ``video_uid``.
* ``judge_rating``: a deterministic 0-10 rating per judge prompt, for loopback judges.
* ``smoke_suite``: that data plus a loopback judge, for ``lmms-egoplan smoke``.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from lmms_egoplan.egointent.data import scenario_metric
from lmms_egoplan.fixtures.judge_server import hashed_rating, loopback_judge_settings
from lmms_egoplan.fixtures.lmms_eval_run import EvalRun
from lmms_egoplan.fixtures.media import write_video
from lmms_egoplan.fixtures.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.fixtures.suite import SmokeSuite


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


def step_records(videos: tuple[SyntheticVideo, ...] = VIDEOS) -> list[dict]:
    """The annotation records (local format) for ``videos``, five steps per video."""
    records = []
    for v, video in enumerate(videos):
        for s, (start, end) in enumerate(STEP_FRAMES):
            local, global_, next_ = REFERENCES[(v + s) % len(REFERENCES)]
            records.append({
                "step_id": f"step_{len(records):04d}",
                **({"video_uid": video.name} if video.by_uid else {"video": f"videos/{video.name}.mp4"}),
                "step_start": float(start / video.fps),
                "truncation_time": float(end / video.fps),
                "scenario": video.scenario,
                "environment": video.environment,
                "local_intent": local,
                "global_intent": global_,
                "next_step_plan": next_,
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


FIELDS = ("local_intent", "global_intent", "next_step_plan")
# What the scripted judge rates each kind of field answer (0-10), and how each is written.
SCRIPTED_RATINGS = {"reference": 10, "partly right": 6, "wrong": 1}
WRONG_ANSWER = "wave to a neighbour"
# The scripted answers, one per step in turn: the answer's form, then each field's kind (None: left out).
SCRIPTED_STEPS = (
    ("json", ("reference", "reference", "reference")),
    ("lines", ("partly right", "reference", "wrong")),
    ("json", ("reference", "partly right", None)),  # incomplete: no next-step plan
    ("fenced json", ("partly right", "partly right", "partly right")),
    ("lines", ("wrong", "wrong", "reference")),
    ("json", ("reference", "reference", "partly right")),
)  # six, against five steps per video: each video (scenario) gets its own mix
_LABELS = {"local_intent": "Local intent", "global_intent": "Global intent", "next_step_plan": "Next-step plan"}
# Where EgoIntent's judge prompt holds the reference and the prediction.
_JUDGED_PAIR = re.compile(r"^Reference: (.*)\nPrediction: (.*)$", re.MULTILINE)


def field_answer(reference: str, kind: str) -> str:
    return {"reference": reference, "partly right": f"probably {reference}", "wrong": WRONG_ANSWER}[kind]


def scripted_text(form: str, fields: dict[str, str]) -> str:
    """An answer in one of the forms models write: a JSON object, one in a fenced block amid prose,
    or labelled lines."""
    if form == "lines":
        return "\n".join(f"{_LABELS[name]}: {value}" for name, value in fields.items())
    text = json.dumps(fields)
    return f"Here is my reading of the clip.\n```json\n{text}\n```" if form == "fenced json" else text


# The task's defaults: frames sampled at 6 FPS, at most 32 per clip. A clip of d seconds holds about
# d x 6 + 1 frames at that rate, so one of 32 / 6 s or more is capped.
DEMO_SAMPLE_FPS, DEMO_FRAME_CAP = 6, 32


def clip_seconds(step: dict) -> float:
    return step["truncation_time"] - step["step_start"]


def scripted_answers(annotations: Path) -> ScriptedAnswers:
    """Every step answered in the forms and kinds of ``SCRIPTED_STEPS``, in turn. A field's score is
    its mean rating over the steps (a missing field counts 0) x 10, overall the mean of the three, and
    indoor / outdoor / each scenario the same over their steps."""
    steps = step_records()
    answers, ratings, step_ratings = {}, {}, []
    keys = [f"Step id: {step['step_id']}\n" for step in steps]
    for number, step in enumerate(steps):
        form, kinds = SCRIPTED_STEPS[number % len(SCRIPTED_STEPS)]
        fields = {name: field_answer(step[name], kind) for name, kind in zip(FIELDS, kinds) if kind}
        answers[keys[number]] = scripted_text(form, fields)
        ratings.update({(step[name], fields[name]): str(SCRIPTED_RATINGS[kind]) for name, kind in zip(FIELDS, kinds) if kind})
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
                   "incomplete_answers": sum(m > 0 for m in missing), "missing_fields": sum(missing),
                   "capped_samples": sum(clip_seconds(steps[i]) * DEMO_SAMPLE_FPS >= DEMO_FRAME_CAP for i in everything),
                   "failed_requests": len(steps) - len(everything)}
        for environment in {step["environment"] for step in steps}:  # the metrics indoor, outdoor
            metrics[environment] = score([i for i in everything if steps[i]["environment"] == environment])["overall"]
        for scenario in {step["scenario"] for step in steps}:
            metrics[scenario_metric(scenario)] = score([i for i in everything if steps[i]["scenario"] == scenario])["overall"]
        return {"egointent": metrics}

    return ScriptedAnswers(tasks=("egointent",), answers=answers, expected=expected, ratings=rating,
                           judge_prefix="EGOINTENT", env={"EGOINTENT_ANNOTATIONS": str(annotations)})


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """EgoIntent on synthetic videos and annotations, judged by a loopback judge; answered by script too."""
    annotations = write_dataset(Path(workdir) / "data")
    return SmokeSuite(
        env={"EGOINTENT_ANNOTATIONS": str(annotations),
             **loopback_judge_settings("EGOINTENT", judge_rating, workdir, resources)},
        # A random model rarely ends its answer: 512 new tokens per step would only slow the demo down.
        cli_args=("--gen_kwargs", "max_new_tokens=16"),
        scripted=scripted_answers(annotations),
    )
