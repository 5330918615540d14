"""What the up-front media check of EgoPlan-Bench costs against decoding the run's frames.

Before any model call, ``egoplan_data.find_missing_media`` proves every file a run will read usable
(EPIC frames: present, not empty, an image, not truncated, by a few bytes at each end, and a sample
of ``images_decoded_at_load`` of them, 64 by default, decoded in full and strictly; pre-cut clips: the
container opens and its packets, read without decoding, reach the last frame the sample shows). This
script builds a 1,000-sample run in both layouts (EPIC-sized JPEG frames, 456x256, photo-like; one
H.264 clip per sample) and prints the check's time (with and without the decoded sample), the time to
decode every frame the run shows (``egoplan.doc_to_visual`` per sample, as the backend calls it), and
their ratio. The target is a check under 5% of the decoding.

    python speed/bench_media_check.py [--samples 1000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from lmms_egoplan.core.media import EPIC_FRAME_TEMPLATE
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.egoplan import data as egoplan_data
from lmms_egoplan.egoplan import settings as egoplan_settings
from lmms_egoplan.egoplan import task as egoplan

FRAME_SIZE = (456, 256)  # EPIC-KITCHENS-100 rgb_frames
FRAMES_PER_VIDEO = 900
SAMPLES_PER_VIDEO = 50
ROUNDS = 3


def photo_like(number: int, rng: np.random.Generator) -> Image.Image:
    """A frame with photo-like content (smooth shading and sensor noise), which decodes as slowly as
    camera frames do; the suite's test frames are flat blocks and decode several times faster."""
    width, height = FRAME_SIZE
    shading = np.add.outer(np.linspace(0, 120, height), np.linspace(0, 100, width))
    noise = rng.normal(0, 18, (height, width, 3))
    return Image.fromarray(np.clip(shading[..., None] + 60 + 40 * np.sin(number / 30) + noise, 0, 255).astype(np.uint8))


def write_frames(folder: Path, count: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(1, count + 1):
        photo_like(number, rng).save(folder / EPIC_FRAME_TEMPLATE.format(number), quality=90)


def write_clip(path: Path, frames: list[Image.Image]) -> None:
    import av

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height = FRAME_SIZE
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": "30", "crf": "23"}
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_image(frame)))
        container.mux(stream.encode())


def write_data(root: Path, samples: int, frames_per_video: int = FRAMES_PER_VIDEO) -> None:
    """EPIC frame folders shared by ``SAMPLES_PER_VIDEO`` samples each, a clip per sample, the annotations."""
    records = []
    rng = np.random.default_rng(1)
    clip_frames = [[photo_like(number, rng) for number in range(60)] for _ in range(4)]  # 2 s clips
    for video in range(-(-samples // SAMPLES_PER_VIDEO)):
        write_frames(egoplan_data.epic_frame_folder(root / "epic", f"P{video + 1:02d}_01"), frames_per_video)
    for sample in range(samples):
        video_id = f"P{sample // SAMPLES_PER_VIDEO + 1:02d}_01"
        start = 1 + (sample * 37) % 300
        observation = start + 120 + (sample * 53) % 400
        records.append({"sample_id": sample, "video_source": "EpicKitchens", "video_id": video_id,
                        "task_goal": "make tea", "question": "What next?", "choice_a": "a", "choice_b": "b",
                        "choice_c": "c", "choice_d": "d", "golden_choice_idx": "A", "answer": "a",
                        "current_observation_frame": observation,
                        "task_progress_metadata": [{"narration_text": "x", "start_frame": start,
                                                    "stop_frame": observation - 10}]})
        clip = root / "clips" / f"{sample}.mp4"
        if sample < len(clip_frames):
            write_clip(clip, clip_frames[sample])
        else:  # a copy of one of the first clips: a file of its own, as on disk
            shutil.copyfile(root / "clips" / f"{sample % len(clip_frames)}.mp4", clip)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "EgoPlan_validation.json").write_text(json.dumps(records))


def measure(root: Path, visual_source: str) -> tuple[float, float, float, int]:
    environ = {"EGOPLAN_ANNOTATION_DIR": str(root / "annotations"), "EGOPLAN_EPIC_FRAMES_ROOT": str(root / "epic"),
               "EGOPLAN_EGO4D_VIDEOS_ROOT": str(root / "ego4d"), "EGOPLAN_CLIPS_DIR": str(root / "clips"),
               "EGOPLAN_VISUAL_SOURCE": visual_source}
    settings = resolve_settings(egoplan_settings.EgoPlanSettings, task="bench",
                                metadata={"annotation_file": "EgoPlan_validation.json"},
                                env_prefix="EGOPLAN", environ=environ)
    docs = egoplan_data.load_samples(settings, labelled=True).docs  # checked once here; timed below
    checks, headers, decodes = [], [], []
    for _ in range(ROUNDS):  # alternating, the median of each: a busy machine slows all alike
        started = time.perf_counter()
        problems = egoplan_data.find_missing_media(docs, settings.images_decoded_at_load)
        checks.append(time.perf_counter() - started)
        assert not problems, problems[:3]
        started = time.perf_counter()
        egoplan_data.find_missing_media(docs, 0)
        headers.append(time.perf_counter() - started)
        egoplan._visuals.cache_clear()
        started = time.perf_counter()
        frames = sum(len(egoplan.doc_to_visual(doc)) for doc in docs)
        decodes.append(time.perf_counter() - started)
    return statistics.median(checks), statistics.median(headers), statistics.median(decodes), frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--frames-per-video", type=int, default=FRAMES_PER_VIDEO,
                        help="EPIC frames written per video (the smoke test writes fewer)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        started = time.perf_counter()
        write_data(root, args.samples, args.frames_per_video)
        print(f"{args.samples} samples written in {time.perf_counter() - started:.0f} s")
        for source, what in (("raw", "EPIC frames (456x256 JPEG)"), ("clips", "pre-cut clips (H.264)")):
            check, headers, decode, frames = measure(root, source)
            print(f"{what:28s}: check {check:6.2f} s ({headers:.2f} s without decoding a sample), decoding the run's "
                  f"{frames} frames {decode:7.2f} s, check / decoding = {100 * check / decode:.1f}%")


if __name__ == "__main__":
    main()
