"""Cosmos-Reason1's settings (``metadata:`` keys of its task YAMLs, overridden by ``COSMOS_REASON1_<SETTING>``),
free of any harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core.request_options import NO_CAPITAL_LETTER, NO_LETTER_IN_ANSWER_TAG
from lmms_egoplan.core.settings import setting
from lmms_egoplan.cosmos_reason1.data import DATA_SOURCES, ROBOVQA_ITEMS
from lmms_egoplan.cosmos_reason1.parsing import PROMPTS, REASONING

# qwen_vl_utils' FPS_MAX_FRAMES: the most frames the official reader (process_vision_info) samples of a clip.
OFFICIAL_MAX_FRAMES = 768


@dataclass(frozen=True)
class CosmosReason1Settings:
    """Where the data is, which prompt the authors' protocol uses, and how the clips are sampled
    (tasks/cosmos_reason1/README.md, Settings)."""

    # official: the official layout under root; paibench_u: the PAI-Bench-U Hub layout under paibench_u_root.
    data_source: str = setting("official", choices=DATA_SOURCES)
    root: str = ""  # <root>/<source>/<source>_benchmark_qa_pairs.json and <root>/<source>/clips/
    paibench_u_root: str = ""  # <root>/data/*.parquet and the clips their video_path names
    # official_reasoning: the reasoning instruction, sampling (0.6, top-p 0.95), 1,024 new tokens, the answer tag
    # read; official_letter: no reasoning line, greedy, 10 new tokens, the first capital letter read.
    prompt: str = setting(REASONING, choices=PROMPTS)
    # all: every RoboVQA question (110); official_101: the 101 the official reader keeps (a reproduction setting).
    robovqa_items: str = setting("all", choices=ROBOVQA_ITEMS)
    fps: float = setting(4.0, above=0)  # evaluate.yaml: fps 4, as qwen_vl_utils samples a clip
    max_frames: int = setting(OFFICIAL_MAX_FRAMES, minimum=4)
    max_side: int | None = setting(None, minimum=1)  # downscale frames so the longer side is at most this
    skip_missing: bool = False  # skip questions whose clips are missing (counted) instead of failing

    @property
    def empty_answer_retry(self) -> str:
        """Which answers the backend generates again (``core.request_options.EMPTY_ANSWER_RETRY``), from the prompt
        (no setting of its own): those its official parser reads nothing of, i.e. ``official_reasoning``, those
        without a capital letter in the answer tag; ``official_letter``, those without one anywhere."""
        return NO_LETTER_IN_ANSWER_TAG if self.prompt == REASONING else NO_CAPITAL_LETTER
