"""EgoPlan-Bench2's settings (``metadata:`` keys of its task YAMLs, overridden by ``EGOPLAN2_<SETTING>``),
free of any harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core import media, request_options
from lmms_egoplan.core.request_options import LOSS_MEAN
from lmms_egoplan.core.settings import setting
from lmms_egoplan.egoplan_bench2.data import (
    DATA_SOURCES,
    FRAME_SAMPLINGS,
)
from lmms_egoplan.egoplan_bench2.parsing import PARSERS

PAPER_QUESTIONS = 1321  # the paper's count (abstract, §3)


@dataclass(frozen=True)
class EgoPlanBench2Settings:
    """Where the data is, how the visual input is built and how answers are read
    (tasks/egoplan_bench2/README.md, Settings)."""

    # "official": EgoPlan-Bench2.json + the Ego4D v1_288p videos; "seed_bench_r1": Level 3 of the
    # TencentARC/SEED-Bench-R1 package (re-encoded progress clips and observation images, not the official frames).
    data_source: str = setting("official", choices=DATA_SOURCES)
    # an absolute path, or a file name inside annotation_dir
    annotation_file: str = setting("EgoPlan-Bench2.json", changes_answers=False)
    annotation_dir: str = setting("", changes_answers=False)
    ego4d_videos_root: str = ""  # <root>/<video uid>.mp4, the v1_288p folder
    annotation_fps: float = setting(30.0, above=0)  # the rate the release's frame numbers count in (its videos')
    seed_bench_r1_root: str = ""  # the package folder: annotations/, videos/, images/
    # "keyframes": separate images (the official input of image models); "clip": one video with its
    # frames' times (the official input of video models).
    frame_sampling: str = setting("keyframes", choices=FRAME_SAMPLINGS)
    num_frames: int | None = setting(None, minimum=2)  # none: the official count (keyframes 8, clip 32)
    max_side: int | None = setting(None, minimum=1)  # downscale frames so the longer side is at most this
    # Ego4D frames at most this many pixels on their shorter side: the official scripts read the downscaled v1_288p
    # copies, prepare fetches the full-scale ones; none: the file's resolution
    ego4d_short_side: int | None = setting(288, minimum=1)
    # the answer reading `accuracy` and the breakdowns use: eval.py's, as the paper's numbers were read, or "robust"
    parser: str = setting("official", choices=PARSERS, changes_answers=False)
    # Observation images (seed_bench_r1) decoded in full before the model loads, spread over the data
    # (every one's first and last bytes are checked): core.media.image_problems
    images_decoded_at_load: int = setting(media.IMAGES_DECODED_AT_LOAD, minimum=0, changes_answers=False)
    # skip questions whose media are missing (counted) instead of failing
    skip_missing: bool = setting(False, changes_answers=False)
    # Read media that a record places outside its root folder (absolute, "..", a symlink out).
    allow_paths_outside_root: bool = setting(False, changes_answers=False)
    # egoplan_bench2_likelihood: which tokens of a candidate its loss covers, and how they are averaged
    # (as egoplan_val: tasks/egoplan/README.md, Settings).
    scored_tokens: str = setting(request_options.ANSWER_AND_END_OF_TURN,
                                 choices=(request_options.ANSWER_AND_END_OF_TURN, request_options.ANSWER))
    loss_mean: str = setting(request_options.NONZERO_LOSS_TOKENS, choices=LOSS_MEAN.values)
