"""Sentence embeddings kept on disk for later runs (``core.embeddings.EmbeddingStore``): read back exactly, in a
process that never imports sentence-transformers; a different model file or an unusable store computes anew."""

import shutil
import subprocess
import sys

import numpy as np
import pytest

from lmms_egoplan.core import embeddings
from lmms_egoplan.core.embeddings import EMBEDDING_CACHE_VARIABLE, default_sentence_model

TEXTS = ["open the fridge", "take the milk", "open the fridge"]

# A fresh process: its embeddings and whether it imported sentence_transformers.
_PROBE = """
import json, sys
from lmms_egoplan.core.embeddings import SentenceEncoder
vectors = SentenceEncoder(device="cpu").embeddings(json.loads(sys.argv[1]))
print(json.dumps({"vectors": [v.tolist() for v in vectors], "imported": "sentence_transformers" in sys.modules}))
"""


def probe(store):
    import json
    import os

    completed = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(TEXTS)], check=True,
                               capture_output=True, text=True, timeout=600,
                               env={**os.environ, EMBEDDING_CACHE_VARIABLE: str(store)})
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_a_later_run_reads_the_embeddings_back_bit_for_bit_without_importing_sentence_transformers(tmp_path):
    first, again = probe(tmp_path / "store"), probe(tmp_path / "store")
    assert first["imported"] and not again["imported"]
    assert np.array_equal(np.float32(first["vectors"]), np.float32(again["vectors"]))
    assert len(list((tmp_path / "store").glob("*.sqlite"))) == 1
    # unit norm, as sentence-transformers normalises them
    assert np.allclose(np.linalg.norm(first["vectors"], axis=1), 1, atol=1e-6)


def test_other_model_files_or_another_device_are_another_store(tmp_path, monkeypatch):
    model = shutil.copytree(default_sentence_model(), tmp_path / "model")
    monkeypatch.setenv(EMBEDDING_CACHE_VARIABLE, str(tmp_path / "store"))
    first = embeddings.EmbeddingStore.for_model(str(model), "cpu").path
    (model / "README.md").write_text("edited\n")
    edited = embeddings.EmbeddingStore.for_model(str(model), "cpu").path
    monkeypatch.setattr(embeddings, "describe_device", lambda device: "cuda:0 (NVIDIA H100 80GB HBM3)")
    on_a_gpu = embeddings.EmbeddingStore.for_model(str(model), "cuda:0").path
    assert len({first, edited, on_a_gpu}) == 3 and first.parent == tmp_path / "store"
    assert embeddings.EmbeddingStore.for_model("sentence-transformers/all-MiniLM-L6-v2", "cpu") is None  # a Hub name


def test_a_store_that_cannot_be_written_is_said_and_the_run_computes_its_embeddings(tmp_path, monkeypatch):
    from loguru import logger

    blocked = tmp_path / "a file"
    blocked.write_text("not a folder\n")
    monkeypatch.setenv(EMBEDDING_CACHE_VARIABLE, str(blocked))
    said = []
    sink = logger.add(lambda message: said.append(str(message)), level="WARNING")
    try:
        vectors = embeddings.SentenceEncoder(device="cpu").embeddings([f"a text no other test encodes {tmp_path}"])
    finally:
        logger.remove(sink)
    assert len(vectors) == 1 and np.isclose(np.linalg.norm(vectors[0]), 1, atol=1e-6)
    assert any(f"the sentence-embedding store {blocked}/" in line and "LMMS_EGOPLAN_EMBEDDING_CACHE=off" in line
               for line in said)


def test_off_keeps_no_store(tmp_path, monkeypatch):
    monkeypatch.setenv(EMBEDDING_CACHE_VARIABLE, "off")
    assert embeddings.EmbeddingStore.for_model(default_sentence_model(), "cpu") is None


def test_the_tasks_of_a_run_share_one_encoder_per_model_and_device_and_the_next_run_has_its_own():
    """The loaded model and the texts encoded were kept for the whole process: a later evaluation in the process used
    them, whatever the model's files had become since."""
    from lmms_egoplan.actplan import task as actplan
    from lmms_egoplan.actplan.settings import ActPlanSettings
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.core.run import SuiteRun
    from lmms_egoplan.robovqa import task as robovqa

    first, second = SuiteRun(), SuiteRun()
    matcher = actplan._matcher(TaskContext("actplan1k", ActPlanSettings(scoring_device="auto"), run=first))
    # RoboVQA's multinet scorer asks for the default model on the default device; "auto" is this machine's CPU too
    encoder = embeddings.run_encoder(first, None, None, user="RoboVQA")
    assert matcher.encoder is encoder is embeddings.run_encoder(first, default_sentence_model(), "cpu", user="RoboVQA")
    assert embeddings.run_encoder(second, None, None, user="RoboVQA") is not encoder
    answer = f"the gripper opens the drawer {id(first)}"
    doc = {"protocol": "multinet", "multinet_scorer": "script", "answer": "open the drawer", "item_id": "q1",
           "question_type": "planning", "tag": "planning"}
    scores = robovqa.process_results(doc, [answer], TaskContext("robovqa_planning", None, run=first))
    assert scores["multinet_similarity"] == pytest.approx(float(np.dot(*encoder.embeddings([answer, doc["answer"]]))))
    assert matcher.embeddings([answer])[0] is encoder.embeddings([answer])[0]  # encoded once, for both benchmarks
    assert embeddings.run_encoder(second, None, None, user="RoboVQA")._model is None  # the next run loads its own
    # scored outside a run (a caller of its own): an encoder of its own, the same value
    alone = robovqa.process_results(doc, [answer], TaskContext("robovqa_planning", None))
    assert alone["multinet_similarity"] == pytest.approx(scores["multinet_similarity"], abs=1e-6)


def test_auto_on_a_machine_without_a_gpu_warns_naming_who_asked_and_its_setting(monkeypatch):
    """The encoder a run shares was made with its device resolved already, and ``auto`` finding no GPU went unsaid."""
    from loguru import logger

    from lmms_egoplan.actplan import task as actplan
    from lmms_egoplan.actplan.settings import ActPlanSettings
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.core import devices
    from lmms_egoplan.core.run import SuiteRun

    monkeypatch.setattr(devices, "_auto", lambda: "cpu")  # no GPU, whatever this machine has
    said = []
    sink = logger.add(lambda message: said.append(str(message)), level="INFO")
    try:
        actplan._matcher(TaskContext("actplan1k", ActPlanSettings(scoring_device="auto"), run=SuiteRun()))
        actplan._matcher(TaskContext("actplan1k", ActPlanSettings(scoring_device="cpu"), run=SuiteRun()))
    finally:
        logger.remove(sink)
    warned = [line for line in said if "found no CUDA GPU" in line]
    assert len(warned) == 1 and "ActPlan-1K's step matcher (ACTPLAN_SCORING_DEVICE" in warned[0], said
    assert "sentence-embedding model all-MiniLM-L6-v2 runs on the CPU" in warned[0]
    assert any("ActPlan-1K's step matcher" in line and "runs on cpu" in line for line in said if line not in warned)
