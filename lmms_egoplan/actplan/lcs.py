"""ActPlan-1K's plan LCS: the longest common subsequence of two plans whose steps match by meaning.

Two steps match when the cosine similarity of their sentence embeddings reaches a threshold
(ActPlan-1K: all-MiniLM-L6-v2, >= 0.8). ActPlan-1K's release computes it with a memoised
recursion that encodes both steps, one sentence at a time, at every cell it visits (seconds to
minutes per plan pair on two CPU cores). ``StepMatcher`` gives the same values fast: each
distinct step of a run is embedded once, in batches, and the LCS is an iterative DP over the
pair's match matrix.

Exactness: batching changes the float32 arithmetic (padding, batch shapes), so a batched cosine
can differ from the release's one-sentence cosine (by at most 9.5e-7 over 62,500 step pairs
measured on CPU). A match decided from batched cosines is kept only when the cosine lies at
least the recheck margin away from the threshold; the rare pairs closer than that are recomputed
the release's way (each step encoded alone, ``util.cos_sim``). Match decisions, and so LCS
values, are identical to the release's run on the same device.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from lmms_egoplan.core.embeddings import SentenceEncoder, sentence_model_problem
from lmms_egoplan.core.errors import InputError

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

    ``encoder``: the sentence encoder (default: the bundled all-MiniLM-L6-v2 on the CPU; a run's tasks share the
    run's, ``core.embeddings.run_encoder``). Embeddings (the encoder's) and LCS values are cached, so scoring the
    same plans again (e.g. once per reported metric) costs nothing.
    """

    def __init__(self, encoder: SentenceEncoder | None = None, *, threshold: float = DEFAULT_MATCH_THRESHOLD,
                 batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE):
        self.encoder = encoder or SentenceEncoder(device="cpu")
        if problem := sentence_model_problem(self.encoder.model_path):
            raise InputError(f"ActPlan-1K's sentence-embedding model: {problem}")
        self.threshold = float(threshold)
        self.device = self.encoder.device
        self.batch_size = batch_size
        self.recheck_margin = RECHECK_MARGIN["cpu" if self.device == "cpu" else "cuda"]
        self._single_embeddings: dict[str, Any] = {}
        self._lcs_cache: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
        self._lock = threading.Lock()
        self.rechecked_pairs = 0

    @property
    def model(self):
        return self.encoder.model

    def embeddings(self, steps: Iterable[str]) -> list:
        """Unit-norm embeddings of ``steps`` (batched; each distinct step encoded once by the encoder)."""
        return self.encoder.embeddings(steps, batch_size=self.batch_size)

    def reference_cosine(self, step_a: str, step_b: str):
        """The cosine exactly as the release computes it: each step encoded alone, ``util.cos_sim``.

        Returns the float32 numpy scalar the release compares with the threshold.
        """
        from sentence_transformers import util

        def encoded(step):
            if step not in self._single_embeddings:
                self._single_embeddings[step] = self.encoder.encoded_alone(step)
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

