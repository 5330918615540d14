"""EgoPlan visual input: decoding cost per question against the naive ways.

A question's visual input is 8 task-progress frames plus the observation frame, read from a long
Ego4D-style video (default 3 minutes at 30 fps, 320x240, a keyframe every 2 s). lmms-eval asks for
a question's visuals once per candidate answer, i.e. 4 times. Three ways are timed:

* naive:   a fresh reader and one seek per frame, for each of the 4 requests (the official
           evaluation seeks per frame; lmms-eval's backends call doc_to_visual per request);
* batched: one reader per request serving all 9 frames (sorted targets, seeks only for far ones),
           still 4 requests without the per-doc memo;
* egoplan: ``egoplan.doc_to_visual`` as the tasks use it: batched, and decoded once per question.

    python benchmarks/bench_egoplan_visuals.py [--questions 20] [--seconds 180]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from lmms_egoplan import egoplan, egoplan_data, media
from lmms_egoplan.settings import resolve_settings
from lmms_egoplan.testing.media import read_index, write_video

FPS = 30
CANDIDATES = 4


def write_data(root: Path, questions: int, seconds: int) -> list[dict]:
    """One long video and ``questions`` records whose progress spans 20 s to most of the video."""
    frames = seconds * FPS
    write_video(root / "videos" / "long-video.mp4", num_frames=frames, fps=FPS, size=(320, 240), keyframe_interval=2 * FPS)
    records = []
    for i in range(questions):
        start = (i * 97) % (frames // 3)
        observation = min(frames - 1, start + 20 * FPS + (i * 311) % (frames // 2))
        step = (observation - start) // 6
        actions = [{"narration_text": f"action {k}", "start_frame": start + k * step, "stop_frame": start + k * step + step // 2}
                   for k in range(5)]
        records.append({"sample_id": i, "video_source": "Ego4D", "video_id": "long-video", "task_goal": "cook",
                        "question": "What next?", "choice_a": "a", "choice_b": "b", "choice_c": "c", "choice_d": "d",
                        "golden_choice_idx": "A", "current_observation_frame": observation,
                        "task_progress_metadata": actions})
    (root / "EgoPlan_validation.json").write_text(json.dumps(records))
    settings = resolve_settings(egoplan.EgoPlanSettings, task="bench", metadata={}, env_prefix="EGOPLAN", environ={
        "EGOPLAN_ANNOTATION_FILE": str(root / "EgoPlan_validation.json"),
        "EGOPLAN_EGO4D_VIDEOS_ROOT": str(root / "videos")})
    return egoplan_data.load_samples(settings, labelled=True).docs


def naive(doc: dict) -> list:
    frames = []
    for number in egoplan_data.doc_frame_numbers(doc):
        with media.VideoFile(doc["media_path"]) as video:
            frames += video.frames([number])
    return frames


def batched(doc: dict) -> list:
    with media.VideoFile(doc["media_path"]) as video:
        return video.frames(egoplan_data.doc_frame_numbers(doc))


def timed(read, docs: list[dict]) -> float:
    started = time.perf_counter()
    for doc in docs:
        for _ in range(CANDIDATES):
            frames = read(doc)
        assert [read_index(f) for f in frames] == egoplan_data.doc_frame_numbers(doc)  # the right frames, every way
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=180)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        docs = write_data(Path(folder), args.questions, args.seconds)
        egoplan._visual_memo.clear()
        results = {"naive": timed(naive, docs), "batched": timed(batched, docs), "egoplan": timed(egoplan.doc_to_visual, docs)}
    print(f"{len(docs)} questions x {CANDIDATES} candidate requests, 9 frames each, "
          f"from a {args.seconds} s {FPS} fps video")
    for name, seconds in results.items():
        print(f"{name:8s} {seconds:7.2f} s  {seconds / len(docs) * 1000:7.1f} ms/question  "
              f"naive / {name} = {results['naive'] / seconds:5.1f}x")


if __name__ == "__main__":
    main()
