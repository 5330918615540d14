"""Output folders: a second run of the same second into the same folder is refused, an ended one is found by its
files, files are replaced whole or not at all."""

from __future__ import annotations

import pytest

from lmms_egoplan.core.run_state import RUN


def test_a_second_run_of_the_same_second_into_the_same_folder_is_refused(tmp_path, monkeypatch):
    from argparse import Namespace

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import output_folder as harness

    monkeypatch.setattr(RUN, "stamp", "20261122_101010")
    monkeypatch.setattr(RUN, "claimed_folders", set())
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    harness.claim_output_folder(args)
    assert (tmp_path / "models__tiny" / "20261122_101010.lmms_egoplan.lock").is_file()
    monkeypatch.setattr(RUN, "claimed_folders", set())  # as in another process
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(args)


def test_a_run_of_the_same_second_that_has_ended_is_found_by_its_files(tmp_path, monkeypatch):
    """The run that ended removed its lock, but its files are there: a slow start of a second run of the
    same second must not overwrite them."""
    from argparse import Namespace

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.harness import output_folder as harness

    monkeypatch.setattr(RUN, "stamp", "20261122_101010")
    monkeypatch.setattr(RUN, "claimed_folders", set())
    folder = tmp_path / "models__tiny"
    folder.mkdir()
    (folder / "20261122_101010_results.json").write_text("{}")
    args = Namespace(output_path=str(tmp_path), model_args="pretrained=/models/tiny", timezone=None)
    with pytest.raises(InputError, match=r"another run .* writes the files of the same date-time \(20261122_101010\)"):
        harness.claim_output_folder(args)
    assert not (folder / "20261122_101010.lmms_egoplan.lock").exists()


def test_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from lmms_egoplan.core.files import write_atomically

    path = write_atomically(tmp_path / "submission.json", "[1, 2, 3]\n")
    monkeypatch.setattr("os.replace", lambda *_: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, "[4, 5")
    assert path.read_text() == "[1, 2, 3]\n" and [p.name for p in tmp_path.iterdir()] == ["submission.json"]
