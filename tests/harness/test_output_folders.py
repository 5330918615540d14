"""Output folders: a second run of the same second into the same folder is refused, an ended one is found by its
files, files are replaced whole or not at all."""

from __future__ import annotations

import os

import pytest

from lmms_egoplan.core.run import SuiteRun


def test_a_second_run_of_the_same_second_into_the_same_folder_is_refused(tmp_path, monkeypatch):
    from argparse import Namespace

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import output_folder as harness

    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    harness.claim_output_folder(SuiteRun(stamp="20261122_101010"), args)
    assert (tmp_path / "models__tiny" / "20261122_101010.lmms_egoplan.lock").is_file()
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(SuiteRun(stamp="20261122_101010"), args)  # another run, of the same second


def test_a_run_of_the_same_second_that_has_ended_is_found_by_its_files(tmp_path, monkeypatch):
    """The run that ended removed its lock, but its files are there: a slow start of a second run of the
    same second must not overwrite them."""
    from argparse import Namespace

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import output_folder as harness

    folder = tmp_path / "models__tiny"
    folder.mkdir()
    (folder / "20261122_101010_results.json").write_text("{}")
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(SuiteRun(stamp="20261122_101010"), args)
    assert not (folder / "20261122_101010.lmms_egoplan.lock").exists()


def test_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from lmms_egoplan.core.files import write_atomically

    path = write_atomically(tmp_path / "submission.json", "[1, 2, 3]\n")
    monkeypatch.setattr("os.replace", lambda *_: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, "[4, 5")
    assert path.read_text() == "[1, 2, 3]\n" and [p.name for p in tmp_path.iterdir()] == ["submission.json"]


def test_the_lock_of_a_run_that_ended_without_removing_it_is_removed_by_the_next_run(tmp_path, monkeypatch):
    """A run killed outright (or stopped by a second SIGTERM) leaves its lock: the next run into the folder removes
    it, as its process no longer runs; the lock of a run still running is kept."""
    import json
    import socket
    import subprocess
    import sys
    from argparse import Namespace

    from lmms_egoplan.harness import output_folder as harness

    folder = tmp_path / "models__tiny"
    folder.mkdir()
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    (folder / "20261122_090909.lmms_egoplan.lock").write_text(json.dumps({"host": host, "pid": int(ended.stdout)}))
    (folder / "20261122_080808.lmms_egoplan.lock").write_text(json.dumps({"host": host, "pid": os.getpid()}))
    (folder / "20261122_070707.lmms_egoplan.lock").write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    harness.claim_output_folder(SuiteRun(stamp="20261122_101010"), args)
    assert sorted(path.name for path in folder.iterdir()) == [
        "20261122_070707.lmms_egoplan.lock", "20261122_080808.lmms_egoplan.lock", "20261122_101010.lmms_egoplan.lock"]
