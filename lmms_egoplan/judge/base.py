"""What a judge backend (a provider) implements: its identity and one chat completion."""

from __future__ import annotations

import abc
from typing import Mapping, Sequence

from lmms_egoplan.judge.protocol import Completion, Decoding


class JudgeBackend(abc.ABC):
    """A judge model the engine can call from many threads at once.

    ``complete`` answers one conversation. It raises ``TransientJudgeError`` for failures worth
    retrying (the engine retries them with backoff) and ``JudgeCallError`` for the others; any
    other exception also fails only that judgement.
    """

    kind: str  # the backend name in settings: "openai", "azure", "hf"
    model: str  # what the settings asked for (API model, Azure deployment, HF model path or id)

    @property
    def identity(self) -> str:
        """The judge in audit trails, results and the cache key: ``<kind>:<model>``."""
        return f"{self.kind}:{self.model}"

    @abc.abstractmethod
    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        """The judge's answer to ``messages``."""
