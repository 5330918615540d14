"""Sentence embeddings kept on disk for later runs (``core.embeddings.EmbeddingStore``): read back exactly, in a
process that never imports sentence-transformers; a different model file or an unusable store computes anew."""

import shutil
import subprocess
import sys

import numpy as np

from lmms_egoplan.core import embeddings
from lmms_egoplan.core.embeddings import EMBEDDING_CACHE_VARIABLE, default_sentence_model

TEXTS = ["open the fridge", "take the milk", "open the fridge"]

# A fresh process: its embeddings, whether sentence_transformers was imported, and the store files.
_PROBE = """
import json, sys
from lmms_egoplan.core.embeddings import sentence_embeddings
vectors = sentence_embeddings(json.loads(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None, device="cpu")
print(json.dumps({"vectors": [v.tolist() for v in vectors], "imported": "sentence_transformers" in sys.modules}))
"""


def probe(store, *model):
    import json
    import os

    completed = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(TEXTS), *map(str, model)], check=True,
                               capture_output=True, text=True, timeout=600,
                               env={**os.environ, EMBEDDING_CACHE_VARIABLE: str(store)})
    return json.loads(completed.stdout.strip().splitlines()[-1]), completed.stderr


def test_a_later_run_reads_the_embeddings_back_bit_for_bit_without_importing_sentence_transformers(tmp_path):
    first, _ = probe(tmp_path / "store")
    again, _ = probe(tmp_path / "store")
    assert first["imported"] and not again["imported"]
    assert np.array_equal(np.float32(first["vectors"]), np.float32(again["vectors"]))
    assert len(list((tmp_path / "store").glob("*.sqlite"))) == 1
    # the same vectors sentence-transformers gives, unit norm
    assert np.allclose(np.linalg.norm(first["vectors"], axis=1), 1, atol=1e-6)


def test_other_model_files_are_another_store(tmp_path):
    model = shutil.copytree(default_sentence_model(), tmp_path / "model")
    first, _ = probe(tmp_path / "store", model)
    (model / "README.md").write_text("edited\n")
    again, _ = probe(tmp_path / "store", model)
    assert first["imported"] and again["imported"]
    assert len(list((tmp_path / "store").glob("*.sqlite"))) == 2


def test_a_store_that_cannot_be_written_is_said_and_the_run_computes_its_embeddings(tmp_path):
    blocked = tmp_path / "a file"
    blocked.write_text("not a folder\n")
    result, stderr = probe(blocked)
    assert result["imported"] and len(result["vectors"]) == 3
    assert f"the sentence-embedding store {blocked}/" in stderr and "set LMMS_EGOPLAN_EMBEDDING_CACHE=off" in stderr


def test_off_keeps_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv(EMBEDDING_CACHE_VARIABLE, "off")
    assert embeddings.EmbeddingStore.for_model(default_sentence_model(), "cpu") is None
