"""Cosmos-Reason1's settings (``metadata:`` keys of its task YAMLs, overridden by ``COSMOS_REASON1_<SETTING>``),
free of any harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core.request_options import (
    EMPTY_ANSWER_MAX_RETRIES,
    NEVER,
    NO_CAPITAL_LETTER,
    NO_LETTER_IN_ANSWER_TAG,
    UNSET_IS_OFF,
)
from lmms_egoplan.core.settings import setting
from lmms_egoplan.cosmos_reason1.data import DATA_SOURCES, ROBOVQA_ITEMS
from lmms_egoplan.cosmos_reason1.parsing import PROMPTS, REASONING

# input.py get_prompt, verbatim: the system turn of every question.
SYSTEM_PROMPT = "Answer the questions."
# How the model is told the sampled frames' times. assumed_2fps: as the benchmark script (evaluate.py) runs, which
# calls process_vision_info without return_video_kwargs and passes vLLM no mm_processor_kwargs, so the Qwen2.5-VL
# processor assumes its default 2 fps (1.0 s per two-frame temporal patch, whatever the sampling rate); sampled_rate:
# the frames' true times, as the model card's scripts/inference.py passes them (return_video_kwargs=True).
ASSUMED_2FPS, SAMPLED_RATE = "assumed_2fps", "sampled_rate"
FRAME_TIMINGS = (ASSUMED_2FPS, SAMPLED_RATE)
PROCESSOR_DEFAULT_FPS = 2.0  # transformers' Qwen2.5-VL processor: fps when none is given

# qwen_vl_utils' FPS_MAX_FRAMES: the most frames the official reader (process_vision_info) samples of a clip.
OFFICIAL_MAX_FRAMES = 768

# How large the frames reach the backend. qwen_vl_utils: resized as the official reader resizes them
# (process_vision_info's fetch_video: sides multiples of 28, 128 x 28 x 28 to 768 x 28 x 28 pixels a frame, less past
# 300 frames), which the Qwen2.5-VL processor then leaves as they are; decoded: as decoded (max_side aside), the
# backend's processor resizing them by its checkpoint's configuration (version 4).
QWEN_VL_UTILS, DECODED = "qwen_vl_utils", "decoded"
FRAME_PIXELS = (QWEN_VL_UTILS, DECODED)


@dataclass(frozen=True)
class CosmosReason1Settings:
    """Where the data is, which prompt the authors' protocol uses, and how the clips are sampled
    (tasks/cosmos_reason1/README.md, Settings)."""

    # official: the official layout under root; paibench_u: the PAI-Bench-U Hub layout under paibench_u_root.
    data_source: str = setting("official", choices=DATA_SOURCES)
    # <root>/<source>/<source>_benchmark_qa_pairs.json and <root>/<source>/clips/
    root: str = setting("", changes_answers=False)
    # <root>/data/*.parquet and the clips their video_path names
    paibench_u_root: str = setting("", changes_answers=False)
    # official_reasoning: the reasoning instruction, sampling (0.6, top-p 0.95), 1,024 new tokens, the answer tag
    # read; official_letter: no reasoning line, greedy, 10 new tokens, the first capital letter read.
    prompt: str = setting(REASONING, choices=PROMPTS)
    # all: every RoboVQA question (110); official_101: the 101 the official reader keeps (a reproduction setting).
    robovqa_items: str = setting("all", choices=ROBOVQA_ITEMS)
    fps: float = setting(4.0, above=0)  # evaluate.yaml: fps 4, as qwen_vl_utils samples a clip
    max_frames: int = setting(OFFICIAL_MAX_FRAMES, minimum=4)
    # assumed_2fps: the frames timed as if sampled at 2 fps (the benchmark script's run, the published numbers');
    # sampled_rate: their true times (scripts/inference.py)
    frame_timing: str = setting(ASSUMED_2FPS, choices=FRAME_TIMINGS)
    max_side: int | None = setting(None, minimum=1)  # downscale frames so the longer side is at most this
    # qwen_vl_utils: each frame's size as the official reader's (a frame max_side downscaled, from its new size);
    # decoded: as decoded, for the backend's processor to resize
    frame_pixels: str = setting(QWEN_VL_UTILS, choices=FRAME_PIXELS)
    # skip questions whose clips are missing (counted) instead of failing
    skip_missing: bool = setting(False, changes_answers=False)
    # read clips a record names outside root / paibench_u_root (an absolute path, '..', a symbolic link out of it)
    allow_paths_outside_root: bool = setting(False, changes_answers=False)
    # configs/evaluate.yaml's max_retries: how often at most an answer the official parser reads nothing of is generated
    # again (the official 10; fewer: a cheaper run that departs from the protocol, e.g. a smoke test; 0: never)
    max_retries: int = setting(EMPTY_ANSWER_MAX_RETRIES, minimum=0, maximum=EMPTY_ANSWER_MAX_RETRIES)

    @property
    def empty_answer_retry(self) -> str:
        """Which answers the backend generates again (``core.request_options.EMPTY_ANSWER_RETRY``), from the prompt
        (no setting of its own): those its official parser reads nothing of, i.e. ``official_reasoning``, those
        without a capital letter in the answer tag; ``official_letter``, those without one anywhere; none with
        ``max_retries`` 0."""
        if self.max_retries == 0:
            return NEVER
        return NO_LETTER_IN_ANSWER_TAG if self.prompt == REASONING else NO_CAPITAL_LETTER

    @property
    def system_prompt(self) -> str:
        """The system turn every request carries (``core.request_options.SYSTEM_PROMPT``): the official one."""
        return SYSTEM_PROMPT

    @property
    def sampling_defaults(self) -> str:
        """What the backend does with the sampling settings the decoding leaves unset
        (``core.request_options.SAMPLING_DEFAULTS``): switched off, as the official vLLM ``SamplingParams`` leave
        them (top_k off, top_p 1, min_p 0, repetition_penalty 1), never filled from the checkpoint's
        generation_config."""
        return UNSET_IS_OFF

    @property
    def empty_answer_retries(self) -> str:
        """How often at most (``core.request_options.EMPTY_ANSWER_RETRIES``): ``max_retries``."""
        return str(self.max_retries)
