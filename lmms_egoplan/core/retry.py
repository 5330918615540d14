"""Retrying calls to a server that is busy or down (the judge's API, an inference server): how long to
wait before the next attempt, and the wait a server asks for."""

from __future__ import annotations

import random
from typing import Mapping


def backoff_delay(attempt: int, backoff: float, max_backoff: float, retry_after: float | None = None) -> float:
    """Seconds before retry ``attempt``: exponential backoff with jitter (so that throttled calls do
    not return in lockstep), at least the server's Retry-After, at most ``max_backoff``."""
    delay = min(backoff * 2 ** (attempt - 1), max_backoff) * random.uniform(0.5, 1.0)
    return min(max(delay, retry_after or 0.0), max_backoff)


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The seconds a response's ``Retry-After`` header asks for (None where it names none, or a date)."""
    try:
        return float((headers or {}).get("retry-after"))
    except (TypeError, ValueError):
        return None
