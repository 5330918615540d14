"""What each benchmark's fixtures hand the offline demo (``lmms_egoplan.smoke``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from lmms_egoplan.testing.scripted import ScriptedAnswers


@dataclass(frozen=True)
class SmokeSuite:
    """One benchmark's share of the demo: its tasks and the settings pointing them at the fixtures."""

    name: str
    tasks: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cli_args: tuple[str, ...] = ()  # extra lmms-eval arguments, e.g. ("--gen_kwargs", "max_new_tokens=16")
    scripted: ScriptedAnswers | None = None  # its generative tasks answered once more, by script
