"""Synthetic EgoIntent data in the suite's local format, and EgoIntent's share of the offline demo.

* ``write_dataset(root)``: videos whose frames show their own index (``testing.media``), at
  30, 29.97 (30000/1001) and 25 FPS, and ``annotations.jsonl`` with steps whose truncation
  times fall on frame boundaries and between frames, clips shorter than one sampling interval
  and clips longer than the frame cap, in indoor and outdoor scenarios; videos are named by
  path and by ``video_uid``.
* ``judge_rating``: a deterministic 0-10 rating per judge prompt, for loopback judges.
* ``smoke_suite``: that data plus a loopback judge, for ``lmms-egoplan smoke``.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from lmms_egoplan.testing.judge_server import hashed_rating, loopback_judge_settings
from lmms_egoplan.testing.media import write_video
from lmms_egoplan.testing.suite import SmokeSuite


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


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """EgoIntent on synthetic videos and annotations, judged by a loopback judge."""
    annotations = write_dataset(Path(workdir) / "data")
    return SmokeSuite(
        name="egointent",
        tasks=("egointent",),
        env={"EGOINTENT_ANNOTATIONS": str(annotations),
             **loopback_judge_settings("EGOINTENT", judge_rating, workdir, resources)},
        # A random model rarely ends its answer: 512 new tokens per step would only slow the demo down.
        cli_args=("--gen_kwargs", "max_new_tokens=16"),
    )
