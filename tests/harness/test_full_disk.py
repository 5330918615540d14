"""A full disk under an lmms-eval run of the suite (a real small filesystem: tmpfs): a judged task whose judge
cache is on a full disk stops before the model, saying so; `--use_cache` on a full disk names the cache and keeps
what it holds; a response that cannot be stored stops the run before the model computes more, saying how many and
where, and the cache's audit log keeps whole lines; a results or samples file that lmms-eval cannot write whole
fails the run naming it, with no cut file left. Through the real CLI: tests/e2e/test_full_disk.py."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from lmms_eval.api.instance import Instance
from lmms_eval.caching.response_cache import ResponseCache
from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

from lmms_egoplan.compat import durability
from lmms_egoplan.compat import results as compat_results
from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.core.run import SuiteRun, hand_over


@pytest.fixture
def suite_workarounds(monkeypatch, runs_name_the_suite):
    """The response cache's and results writer's workarounds, as a run of the suite installs them, for the test's runs
    (``runs_name_the_suite``); the classes as they were after the test."""
    for name in ("execute", "finalize", "create"):
        monkeypatch.setattr(ResponseCache, name, ResponseCache.__dict__[name])
    for name in ("save_results_aggregated", "save_results_samples"):
        monkeypatch.setattr(EvaluationTracker, name, getattr(EvaluationTracker, name))
    assert durability.keep_responses_of_stopped_runs() and compat_results.fail_runs_whose_files_are_cut()


def questions(count: int) -> list[Instance]:
    return [Instance("generate_until", (f"question {doc}", {"max_new_tokens": 8}, None, doc, "task", "test"), 0,
                     {"task": "task", "doc_id": doc, "repeats": 1}) for doc in range(count)]


class Model:
    """A backend answering every question; ``on_call(n)`` runs before its n-th call (1, 2, ...)."""

    batch_size = 1

    def __init__(self, on_call=lambda calls: None):
        self.on_call, self.answered = on_call, []

    def generate_until(self, requests):
        self.on_call(len(self.answered) + 1)
        self.answered.append([request.doc_id for request in requests])
        return [f"answer {request.doc_id}" for request in requests]


def open_cache(root) -> ResponseCache:
    return ResponseCache.create(str(root), model="model", model_args="pretrained=tiny")


def test_use_cache_on_a_full_disk_names_the_cache_and_keeps_its_responses(suite_workarounds, small_disk):
    disk = small_disk()
    cache = open_cache(disk.path / "cache")
    cache.execute(Model(), "generate_until", questions(8))
    cache.finalize(success=True)
    disk.fill()
    with pytest.raises(StorageError) as full:  # lmms-eval alone: "OperationalError: database or disk is full"
        open_cache(disk.path / "cache")
    assert str(full.value).startswith(f"--use_cache {disk.path / 'cache'}: the response cache cannot store responses "
                                      f"there (the disk is full (")
    assert f"): {disk.path / 'cache' / 'runs'}/" in str(full.value) and "/rank_0.db); " in str(full.value)  # the file
    assert "the responses it holds are kept" in str(full.value)
    assert "Free space on its disk" in str(full.value)
    disk.free()
    model = Model()
    open_cache(disk.path / "cache").execute(model, "generate_until", questions(8))
    assert model.answered == []  # all 8 read back


def test_use_cache_on_a_read_only_disk_is_not_told_to_free_space(suite_workarounds, small_disk):
    import subprocess

    disk = small_disk()
    open_cache(disk.path / "cache").finalize(success=True)
    subprocess.run(["mount", "-o", "remount,ro", str(disk.path)], check=True)
    with pytest.raises(StorageError) as refused:
        open_cache(disk.path / "cache")
    assert "Read-only file system" in str(refused.value) and "the responses it holds are kept" in str(refused.value)
    assert str(refused.value).endswith(". Point --use_cache at a folder this run can write (a read-only one cannot "
                                       "take a response) and run again")


def test_a_response_that_cannot_be_stored_stops_the_run_before_the_model_computes_more(suite_workarounds, small_disk):
    """Chunks of 4 questions: the disk fills while the model computes the second; lmms-eval would call the
    model again for each of its questions, and every later chunk, storing nothing. The merge that then fails
    leaves the run's folder (and no stale lock) for the next run, which computes only what was neither stored nor
    kept whole in the run's audit log (``durability.replay_whole_audit_lines``)."""
    disk = small_disk("2m")
    cache = open_cache(disk.path / "cache")
    model = Model(on_call=lambda calls: disk.fill() if calls == 2 else None)
    with pytest.raises(StorageError) as stopped:
        cache.execute(model, "generate_until", questions(40))
    assert model.answered == [[0, 1, 2, 3], [4, 5, 6, 7]]  # nothing computed after the chunk that met the full disk
    assert str(stopped.value).startswith(f"--use_cache {disk.path / 'cache'}: 4 model responses just computed could "
                                         f"not be stored in {cache.db_path} (the disk is full (")
    assert "the 4 responses it stored are kept in" in str(stopped.value)
    audited = {json.loads(line)["cache_key"] for line in open(cache.audit_path, encoding="utf-8")}  # whole lines
    assert 4 <= len(audited) <= 8  # (cut back): lmms-eval writes a response's line before its row
    cache.finalize(success=False)  # lmms-eval's finally: the merge fails on the full disk, said, not raised
    assert not (disk.path / "cache" / "runs" / ".merge.lock").exists()  # lmms-eval leaves it: later merges time out
    assert sqlite3.connect(cache.db_path).execute("SELECT COUNT(*) FROM responses").fetchone() == (4,)
    disk.free()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    owner = Path(f"{cache.db_path}.owner.json")  # the next run is another process: this one has ended
    owner.write_text(json.dumps({**json.loads(owner.read_text()), "pid": int(ended.stdout)}))
    model = Model()
    open_cache(disk.path / "cache").execute(model, "generate_until", questions(40))  # merges the stopped run's folder
    assert sum(map(len, model.answered)) == 40 - len(audited)  # only what was neither stored nor logged whole


def test_a_backend_handing_over_each_response_stops_at_the_first_one_not_stored(suite_workarounds, small_disk):
    disk = small_disk()

    class Handing(Model):  # as egoplan_hf: each response handed to the cache the moment it is computed
        response_sink = None

        def generate_until(self, requests):
            for request in requests:
                if request.doc_id == 5:
                    disk.fill()
                self.answered.append(request.doc_id)
                self.response_sink(request, f"answer {request.doc_id}")
            return [f"answer {request.doc_id}" for request in requests]

    model = Handing()
    with pytest.raises(StorageError, match=r"1 model response just computed could not be stored .*the disk is full"):
        open_cache(disk.path / "cache").execute(model, "generate_until", questions(20))
    assert model.answered == [0, 1, 2, 3, 4, 5]


def tracker(folder) -> EvaluationTracker:
    tracker = EvaluationTracker(output_path=str(folder))
    tracker.general_config_tracker.model_name_sanitized = "model"
    return tracker


def logged(count: int) -> list[dict]:
    return [{"doc_id": doc, "doc": {}, "target": "A", "arguments": [("question", {})], "resps": [["A"]],
             "filtered_resps": ["A"], "doc_hash": "h", "note": "x" * 2000} for doc in range(count)]


def test_a_results_or_samples_file_that_cannot_be_written_whole_fails_the_run_naming_it(suite_workarounds, small_disk):
    """lmms-eval alone logs "Could not save ...", leaves the file cut and the run exits 0."""
    disk = small_disk()
    writer = tracker(disk.path)
    hand_over(SuiteRun(response_cache_root="/caches/responses"), writer)  # as the run's simple_evaluate call does
    disk.fill(leave=8192)
    results = {"results": {"task": {"accuracy,none": 0.5}}, "configs": {"task": {}}, "note": "x" * 20_000}
    with pytest.raises(StorageError) as cut:
        writer.save_results_aggregated(results=results, samples=None, datetime_str="20260101_000000")
    results_file = disk.path / "model" / "20260101_000000_results.json"
    assert str(cut.value).startswith(f"cannot write the results file {results_file}: the disk is full (")
    assert "no part of it is left" in str(cut.value) and not results_file.exists()
    assert "the model's responses are kept in the response cache /caches/responses" in str(cut.value)
    disk.free()
    writer.save_results_aggregated(results=results, samples=None, datetime_str="20260101_000000")
    disk.fill(leave=8192)
    samples_file = disk.path / "model" / "20260101_000000_samples_task.jsonl"
    with pytest.raises(StorageError, match=rf"cannot write the samples file {samples_file}: the disk is full \(.*\); "
                                           r"3 of its 10 samples are written, each whole"):
        writer.save_results_samples(task_name="task", samples=logged(10))
    assert [json.loads(line)["doc_id"] for line in samples_file.read_text().splitlines()] == [0, 1, 2]


def test_a_judged_task_whose_judge_cache_is_on_a_full_disk_stops_before_the_model_saying_so(small_disk, monkeypatch):
    """Not the judge server's settings to check, and not "move it away": the disk, and the setting to change."""
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.core.settings import SettingsError
    from lmms_egoplan.egothink.benchmark import EGOTHINK
    from lmms_egoplan.egothink.task import DIMENSION
    from lmms_egoplan.harness.judged import Judging
    from lmms_egoplan.judge.cache import JudgeCache

    disk = small_disk()
    JudgeCache(disk.path / "judge").close()
    disk.fill()
    settings = EGOTHINK.settings(judge_base_url="http://127.0.0.1:9/v1", judge_api_key_env="",
                                 judge_cache_dir=disk.path / "judge")
    with pytest.raises(SettingsError) as full:
        Judging(EGOTHINK, DIMENSION, TaskContext("ego_think_counting", settings, run=SuiteRun()),
                metadata={}).check_answers()
    assert str(full.value).startswith(f"task ego_think_counting: the judge cache {disk.path / 'judge'}/"
                                      f"{JudgeCache.FILE_NAME} cannot store answers: the disk is full (")
    assert str(full.value).endswith("; judge_cache_dir is set by EGOTHINK_JUDGE_CACHE_DIR (metadata.judge_cache_dir)")
    assert "BASE_URL" not in str(full.value) and "move it away" not in str(full.value)
