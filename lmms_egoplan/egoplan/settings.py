"""EgoPlan-Bench's settings (``metadata:`` keys of its task YAMLs, overridden by ``EGOPLAN_<SETTING>``),
free of any harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core import media, request_options
from lmms_egoplan.core.request_options import LOSS_MEAN
from lmms_egoplan.core.settings import setting
from lmms_egoplan.egoplan.data import (
    DATA_SOURCES,
    FRAME_SAMPLINGS,
)


@dataclass(frozen=True)
class EgoPlanSettings:
    """Where the data is and how the visual input is built (tasks/egoplan/README.md, Settings)."""

    # "official": the release's annotation files and media (visual_source); "seed_bench_r1": Val as Levels 1-2 of
    # the TencentARC/SEED-Bench-R1 package (re-encoded progress clips and observation images, not the release's frames).
    data_source: str = setting("official", choices=DATA_SOURCES)
    seed_bench_r1_root: str = ""  # the package folder: annotations/, videos/, images/
    # Annotation JSON: an absolute path, or a file name inside annotation_dir (set per task).
    annotation_file: str = setting("", changes_answers=False)
    annotation_dir: str = setting("", changes_answers=False)
    # "raw": EPIC-KITCHENS frame folders + Ego4D videos; "clips": <clips_dir>/<sample_id>.mp4.
    visual_source: str = setting("raw", choices=("raw", "clips"))
    # <root>/<participant>/rgb_frames/<video_id>/frame_%010d.jpg
    epic_frames_root: str = setting("", changes_answers=False)
    ego4d_videos_root: str = ""  # <root>/<video_id>.mp4
    ego4d_annotation_fps: float = setting(30.0, above=0)  # frame rate EgoPlan's Ego4D frame numbers count in
    # frame rate EPIC-KITCHENS frame numbers count in; none: each video's own (egoplan.data.epic_frame_rate)
    epic_annotation_fps: float | None = setting(None, above=0)
    clips_dir: str = setting("", changes_answers=False)
    # "official": one clip of num_frames frames, the observation last; "uniform": num_frames over the
    # progress, then the observation as an image; "keyframes": appendix C.1, the last keyframe_segments
    # completed actions x keyframes_per_segment frames, then the observation as an image.
    frame_sampling: str = setting("official", choices=FRAME_SAMPLINGS)
    num_frames: int = setting(8, minimum=1)
    keyframe_segments: int = setting(4, minimum=1)
    keyframes_per_segment: int = setting(8, minimum=1)
    max_side: int | None = setting(None, minimum=1)  # downscale frames so the longer side is at most this
    # Ego4D frames at most this many pixels on their shorter side: the release's videos are the downscaled v1_288p
    # copies, prepare's the full-scale ones; none: the file's resolution
    ego4d_short_side: int | None = setting(288, minimum=1)
    # Frames and images decoded in full before the model loads, spread over the data (every one's first and
    # last bytes are checked): core.media.image_problems
    images_decoded_at_load: int = setting(media.IMAGES_DECODED_AT_LOAD, minimum=0, changes_answers=False)
    # skip samples whose media are missing (count reported) instead of failing
    skip_missing: bool = setting(False, changes_answers=False)
    # Read media that a record's video_id places outside its root folder (absolute, "..", a symlink out).
    allow_paths_outside_root: bool = setting(False, changes_answers=False)
    progress_length_bins: str = setting("0-4,5-9,10-14,15+", changes_answers=False)
    # sentence-transformers model for goal-answer similarity; "" = all-MiniLM-L6-v2
    similarity_model: str = setting("", changes_answers=False)
    # Likelihood tasks: "answer_and_end_of_turn" (the official loss) or "answer" (lmms-eval's convention).
    scored_tokens: str = setting(request_options.ANSWER_AND_END_OF_TURN,
                                 choices=(request_options.ANSWER_AND_END_OF_TURN, request_options.ANSWER))
    # Likelihood tasks: a candidate's loss is, as the official code computes it, the summed loss over the
    # "nonzero_loss_tokens" (default), or the mean over "every_scored_token" (lmms-eval's convention; README, Fidelity).
    loss_mean: str = setting(request_options.NONZERO_LOSS_TOKENS, choices=LOSS_MEAN.values)
