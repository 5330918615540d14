"""Judge models that their provider has shut down or announced to shut down, and what to say when a
run meets one.

The table is package data (``retirements.json``: model, provider, shut-down date, announced date,
the provider's substitute, the provider's page), shown in docs/judges.md. A judge server's "model
not found" reply for a model of the table (OpenAI: HTTP 404, code ``model_not_found``) is explained
with the row: who shut it down, when, and what to use instead (``Retirement.explain``).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from datetime import date
from importlib import resources

from lmms_egoplan.judge.settings import DEFAULT_JUDGE_MODEL

PROVIDER_NAMES = {"openai": "OpenAI", "azure": "Azure OpenAI"}
# What servers answer for a model they do not serve (OpenAI: 404 with code model_not_found, "The model
# `x` does not exist or you do not have access to it"; some name the model "deprecated").
_GONE_CODES = ("model_not_found", "deployment_not_found", "DeploymentNotFound")
_GONE_WORDS = re.compile(r"does not exist|not found|deprecated|retired|shut down", re.IGNORECASE)


@dataclass(frozen=True)
class Retirement:
    model: str
    provider: str  # the judge_backend it concerns: "openai" or "azure"
    shut_down: date
    announced: date | None  # None: not recorded in the table
    replacement: str | None  # the substitute the provider's page names; None: not recorded in the table
    source: str  # the provider's page of record

    @property
    def provider_name(self) -> str:
        return PROVIDER_NAMES.get(self.provider, self.provider)

    def gone(self, today: date | None = None) -> bool:
        return (today or date.today()) >= self.shut_down

    def status(self, today: date | None = None) -> str:
        """"shut down by OpenAI on 2026-10-23", or "to be shut down by OpenAI on 2027-01-14" before the date."""
        return (f"{'shut down' if self.gone(today) else 'to be shut down'} by {self.provider_name} on "
                f"{self.shut_down.isoformat()}")

    def explain(self, setting: str, today: date | None = None) -> str:
        """Who shut the judge model down and when, and what to set ``setting`` to instead: one sentence."""
        announced = f" (announced {self.announced.isoformat()})" if self.announced else ""
        fate = f"{'shut down' if self.gone(today) else 'shuts down'} the judge model {self.model}"
        substitute = (f"{self.provider_name}'s substitute {self.replacement}, or another current model"
                      if self.replacement else f"a current model ({self.provider_name} names its substitutes on "
                                               f"{self.source})")
        return (f"{self.provider_name} {fate} on {self.shut_down.isoformat()}{announced}; set {setting} to "
                f"{substitute}, or serve the suite's default open-weights judge {DEFAULT_JUDGE_MODEL} locally "
                f"(docs/judges.md)")


@functools.cache
def retirements() -> tuple[Retirement, ...]:
    """Every row of the table, in its order."""
    rows = json.loads(resources.files(__package__).joinpath("retirements.json").read_text(encoding="utf-8"))
    return tuple(Retirement(row["model"], row["provider"], date.fromisoformat(row["shut_down"]),
                            date.fromisoformat(row["announced"]) if row["announced"] else None,
                            row["replacement"], row["source"]) for row in rows["retirements"])


def retirement(model: str, provider: str | None = None) -> Retirement | None:
    """The row of ``model`` (case-insensitive): that ``provider``'s (a judge_backend), else the first of any."""
    rows = [row for row in retirements() if row.model.lower() == model.strip().lower()]
    if provider in PROVIDER_NAMES:
        return next((row for row in rows if row.provider == provider), None)
    return rows[0] if rows else None


def says_model_is_gone(status: int | None, code: str | None, message: str) -> bool:
    """Whether a server's error reply says that the model it was asked for is not served (any more)."""
    return code in _GONE_CODES or (status in (400, 404, 410) and bool(_GONE_WORDS.search(message)))
