"""EgoPlan visual input: decoding cost per question against the naive ways.

A question's visual input is 8 task-progress frames plus the observation frame, read from a long
Ego4D-style video (default 3 minutes at 30 fps, 320x240, a keyframe every 2 s). lmms-eval asks for
a question's visuals once per candidate answer, i.e. 4 times. Three ways are timed:

* naive:   a fresh reader and one seek per frame, for each of the 4 requests (the official
           evaluation seeks per frame; lmms-eval's backends call doc_to_visual per request);
* batched: one reader per request serving all 9 frames (sorted targets, seeks only for far ones),
           still 4 requests without the per-doc memo;
* egoplan: ``egoplan.doc_to_visual`` as the tasks use it: batched, and decoded once per question.

With ``--model SHAPE`` (a shape of bench_loglikelihood.py: tiny, qwen2-vl-7b, qwen2.5-vl-7b;
random weights), the questions then go through egoplan_hf's loglikelihood as egoplan_val sends
them, with frames of ``--frame-size`` pixels in the "uniform" layout (8 progress frames, then
the observation image), twice: visuals decoded when each question is reached (visual_prefetch=0)
and in the background while the model scores the question before (visual_prefetch=2). It prints
the wall time against the sum of decoding (doc_to_visual and resizing) and model (processor and
forward passes) times: without prefetch the wall time is their sum; with it, decoding hides
behind the model.

    python speed/bench_egoplan_visuals.py [--questions 20] [--seconds 180]
    python speed/bench_egoplan_visuals.py --questions 8 --seconds 60 --model qwen2-vl-7b --layers 1 --frame-size 448

``--json FILE`` also writes the figures there.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from lmms_egoplan.core import media
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.demo.kit.media import read_index, write_video
from lmms_egoplan.egoplan import data as egoplan_data
from lmms_egoplan.egoplan import settings as egoplan_settings
from lmms_egoplan.egoplan import task as egoplan

FPS = 30
CANDIDATES = 4


def write_data(root: Path, questions: int, seconds: int, size: tuple[int, int] = (320, 240),
               frame_sampling: str = "official") -> list[dict]:
    """One long video and ``questions`` records whose progress spans 20 s to most of the video."""
    frames = seconds * FPS
    write_video(root / "videos" / "long-video.mp4", num_frames=frames, fps=FPS, size=size, keyframe_interval=2 * FPS)
    records = []
    for i in range(questions):
        start = (i * 97) % (frames // 3)
        observation = min(frames - 1, start + 20 * FPS + (i * 311) % (frames // 2))
        step = (observation - start) // 6
        actions = [{"narration_text": f"action {k}", "start_frame": start + k * step,
                    "stop_frame": start + k * step + step // 2}
                   for k in range(5)]
        records.append({"sample_id": i, "video_source": "Ego4D", "video_id": "long-video", "task_goal": "cook",
                        "question": "What next?", "choice_a": "a", "choice_b": "b", "choice_c": "c", "choice_d": "d",
                        "golden_choice_idx": "A", "current_observation_frame": observation,
                        "task_progress_metadata": actions})
    (root / "EgoPlan_validation.json").write_text(json.dumps(records))
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="bench", metadata={}, env_prefix="EGOPLAN",
                                environ={
        "EGOPLAN_ANNOTATION_FILE": str(root / "EgoPlan_validation.json"),
        "EGOPLAN_EGO4D_VIDEOS_ROOT": str(root / "videos"), "EGOPLAN_FRAME_SAMPLING": frame_sampling})
    # Unlabelled: the goal-answer similarity of labelled docs would load a sentence model (decoding is timed here).
    return egoplan_data.load_samples(settings, labelled=False).docs


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


def model_times(backend, docs: list[dict], prefetch: int) -> dict[str, float]:
    """Wall, decoding and model seconds of egoplan_hf scoring ``docs`` (4 candidates each)."""
    from bench_loglikelihood import SPLIT, TASK

    from lmms_egoplan.core.request_options import ANSWER_AND_END_OF_TURN, SCORED_SPAN
    from lmms_egoplan.harness.lmms_eval_task import SuiteInstance

    spent = {"decode": 0.0, "model": 0.0}

    def timing(step: str, work):
        def run(*args, **kwargs):
            started = time.perf_counter()
            try:
                return work(*args, **kwargs)
            finally:
                spent[step] += time.perf_counter() - started
        return run

    requests = [SuiteInstance(request_type="loglikelihood", idx=i,
                              metadata={"task": TASK, "doc_id": doc_id, "repeats": 1},
                              arguments=(egoplan.doc_to_text(doc), choice, egoplan.doc_to_visual, doc_id, TASK, SPLIT))
                for doc_id, doc in enumerate(docs) for i, choice in enumerate(egoplan.doc_to_choice(doc))]
    SCORED_SPAN.mark(requests, ANSWER_AND_END_OF_TURN)
    backend.task_dict = {TASK: {SPLIT: docs}}
    backend.visual_prefetch = prefetch
    egoplan._visuals.cache_clear()
    # Instance attributes shadow the methods for this measurement only.
    backend._doc_visuals = timing("decode", type(backend)._doc_visuals.__get__(backend))
    backend._score_questions = timing("model", type(backend)._score_questions.__get__(backend))
    started = time.perf_counter()
    try:
        backend.loglikelihood(requests)
    finally:
        del backend._doc_visuals, backend._score_questions
    return {"wall": time.perf_counter() - started, **spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=180)
    parser.add_argument("--model", choices=["tiny", "qwen2-vl-7b", "qwen2.5-vl-7b"],
                        help="also time egoplan_hf on the questions, visuals decoded in the background or not")
    parser.add_argument("--layers", type=int, help="--model: decoder layers (see bench_loglikelihood.py)")
    parser.add_argument("--frame-size", type=int, default=448, help="--model: the video's width and height")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--threads", type=int, help="--model: torch CPU threads (default: torch's choice); fewer than "
                                                     "the cores leaves one to decode, as a GPU run does")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "lmms_egoplan_bench_checkpoints"))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures = {"questions": args.questions, "video_seconds": args.seconds}
    with tempfile.TemporaryDirectory() as folder:
        docs = write_data(Path(folder), args.questions, args.seconds)
        egoplan._visuals.cache_clear()
        results = {"naive": timed(naive, docs), "batched": timed(batched, docs),
                   "egoplan": timed(egoplan.doc_to_visual, docs)}
        print(f"{len(docs)} questions x {CANDIDATES} candidate requests, 9 frames each, "
              f"from a {args.seconds} s {FPS} fps video")
        for name, seconds in results.items():
            print(f"{name:8s} {seconds:7.2f} s  {seconds / len(docs) * 1000:7.1f} ms/question  "
                  f"naive / {name} = {results['naive'] / seconds:5.1f}x")
        figures["decoding_seconds"] = results
        if args.model:
            figures["model"] = time_model(args, Path(folder) / "model")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


def time_model(args, folder: Path) -> dict:
    """Wall, decoding and model seconds with visual_prefetch 0 and 2, printed and returned."""
    import torch
    from bench_loglikelihood import realistic_checkpoint

    from lmms_egoplan.demo.kit.checkpoints import tiny_checkpoint
    from lmms_egoplan.models.egoplan_hf import EgoPlanHF

    if args.threads:
        torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    pretrained = (tiny_checkpoint("qwen2_vl", cache, hidden_size=512, num_layers=args.layers or 8)
                  if args.model == "tiny"
                  else realistic_checkpoint(args.model, args.layers, cache, args.device))
    # The preparing thread is what this bench times: no worker processes, no compiled regions (GPU defaults).
    backend = EgoPlanHF(pretrained=str(pretrained), device=args.device, dtype=args.dtype, prefetch_processes=0,
                        fused_elementwise=False)
    docs = write_data(folder, args.questions, args.seconds, size=(args.frame_size, args.frame_size),
                      frame_sampling="uniform")
    model_times(backend, docs[:1], prefetch=0)  # warm-up
    print(f"\negoplan_hf {args.model} ({pretrained.name}), {args.device} {args.dtype}, {torch.get_num_threads()} torch "
          f"threads: {len(docs)} questions, "
          f"8 frames + the observation at {args.frame_size} px, {CANDIDATES} candidates each, prefix-shared")
    figures = {"shape": args.model, "layers": args.layers, "device": args.device, "dtype": args.dtype,
               "frame_size": args.frame_size, "torch_threads": torch.get_num_threads()}
    for prefetch in (0, 2):
        times = figures[f"visual_prefetch={prefetch}"] = model_times(backend, docs, prefetch)
        hidden = times["decode"] + times["model"] - times["wall"]
        print(f"visual_prefetch={prefetch}: wall {times['wall']:7.2f} s | decode {times['decode']:6.2f} s + model "
              f"{times['model']:7.2f} s = {times['decode'] + times['model']:7.2f} s | decoding hidden "
              f"behind the model: "
              f"{hidden:6.2f} s ({hidden / times['decode']:4.0%} of it)")
    return figures


if __name__ == "__main__":
    main()
