"""RoboVQA's settings (``metadata:`` keys of its task YAMLs, overridden by ``ROBOVQA_<SETTING>``), free of any
harness."""

from __future__ import annotations

from dataclasses import dataclass

from lmms_egoplan.core.settings import setting
from lmms_egoplan.robovqa.data import DATA_SOURCES, FRAMES16
from lmms_egoplan.robovqa.scoring import MULTINET_SCORERS, MULTINET_SCRIPT, SYSTEM_PROMPTS

# The suite's scorer and each publishing lineage's preset (lmms_egoplan.robovqa.task.PROTOCOLS).
PROTOCOLS = ("default", "mimo", "physbrain", "robomamba", "multinet")


@dataclass(frozen=True)
class RoboVQASettings:
    """Where the data is, in which layout, and whose protocol a run follows (tasks/robovqa/README.md, Settings)."""

    # frames16: <root>/qa.jsonl and its frames; tianli: the Tianli/robovqa copy; tfrecord: the official val shards
    data_source: str = setting(FRAMES16, choices=DATA_SOURCES)
    root: str = setting("", changes_answers=False)
    # the frames, prompt, decoding and scorer of the suite (default) or of one lineage that publishes numbers
    protocol: str = setting("default", choices=PROTOCOLS)
    # the multinet protocol's scorer: its open-weight script's (behind its published results) or its API module's
    multinet_scorer: str = setting(MULTINET_SCRIPT, choices=MULTINET_SCORERS, changes_answers=False)
    max_side: int | None = setting(None, minimum=1)  # downscale frames so the longer side is at most this
    # skip questions whose frames are missing or unusable (counted) instead of failing
    skip_missing: bool = setting(False, changes_answers=False)
    # read frames a record names outside root (an absolute path, '..', a symbolic link out of it)
    allow_paths_outside_root: bool = setting(False, changes_answers=False)

    @property
    def system_prompt(self) -> str:
        """The system turn every request carries (``core.request_options.SYSTEM_PROMPT``): the protocol's
        (``scoring.SYSTEM_PROMPTS``), none for one without."""
        return SYSTEM_PROMPTS.get(self.protocol, "")
