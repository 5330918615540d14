"""Text files: every reader names a file that is not UTF-8 (file, line, column); lone surrogates become replacement
characters; on a full disk a file is written whole or not at all."""

from __future__ import annotations

import json

import pytest

from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.core.files import LineAppender, read_jsonl, read_text, valid_text, write_atomically


def test_text_that_is_not_utf8_is_an_error_naming_file_line_and_column(tmp_path):
    path = tmp_path / "annotations.jsonl"
    path.write_bytes(b'{"a": "fine"}\n{"b": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"annotations\.jsonl:2: not UTF-8 text \(byte 0xe9 at column 11\)"):
        read_text(path)
    with pytest.raises(ValueError, match=r"annotations\.jsonl:2: not UTF-8"):
        list(read_jsonl(path))


def test_every_reader_of_text_names_a_file_that_is_not_utf8(tmp_path):
    from lmms_egoplan.actplan.data import load_instances
    from lmms_egoplan.actplan.plans import candidates_from_jsonl
    from lmms_egoplan.demo.actplan import write_release_dataset
    from lmms_egoplan.demo.egointent import write_dataset
    from lmms_egoplan.egointent import data as egointent_data
    from lmms_egoplan.egointent.protocol import EgoIntentSettings

    annotations = write_dataset(tmp_path / "egointent")
    annotations.write_bytes(annotations.read_bytes().replace(b"loosen", b"l\xf6osen", 1))
    with pytest.raises(ValueError, match=rf"{annotations}:\d+: not UTF-8 text"):
        egointent_data.load_samples(EgoIntentSettings(annotations=annotations))
    release = write_release_dataset(tmp_path / "actplan" / "ActPlan-1K", scenes=1, activities=1, samples=1)
    description = next(release.rglob("task_description_0.txt"))
    description.write_bytes(b"Put the cups away.\nCaf\xe9 table.\n")
    with pytest.raises(ValueError, match=rf"{description}:2: not UTF-8 text \(byte 0xe9 at column 4\)"):
        load_instances(release)
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b'{"candidate": "walk_to(sink)", "reference": "walk_to(sink)"}\n{"candidate": "\xff"}\n')
    with pytest.raises(ValueError, match=rf"{pairs}:2: not UTF-8"):
        candidates_from_jsonl(pairs)


def test_lone_surrogates_become_replacement_characters():
    assert valid_text("Two plates \udcff.") == "Two plates \ufffd."
    assert valid_text("naïve 😀") == "naïve 😀"


def test_on_a_full_disk_a_file_is_written_whole_or_not_at_all_and_the_error_names_it(small_disk):
    """A real full filesystem (tmpfs): write_atomically keeps the file there before; LineAppender cuts
    a line it could not write whole back off, so every line left is whole and the next one starts clean."""
    disk = small_disk("256k")
    side_file = write_atomically(disk.path / "plans.jsonl", "old\n")
    lines = LineAppender(disk.path / "audit.jsonl")
    lines.write('{"id": 0}\n')
    disk.fill(leave=8192)  # two pages: a long line goes in part, then the disk is full
    with pytest.raises(StorageError, match=rf"cannot write {disk.path / 'plans.jsonl'}: the disk is full \(No space "
                                           r"left on device\); the file there before is kept"):
        write_atomically(side_file, "x" * 100_000)
    assert side_file.read_text() == "old\n" and [p.name for p in disk.path.iterdir() if p.suffix == ".tmp"] == []
    long_line = json.dumps({"id": 1, "text": "x" * 100_000}) + "\n"
    with pytest.raises(StorageError, match=rf"cannot write {disk.path / 'audit.jsonl'}: the disk is full .*its lines "
                                           r"before this one are whole"):
        lines.write(long_line)
    assert (disk.path / "audit.jsonl").read_text() == '{"id": 0}\n'  # the part that went in is cut back off
    disk.free()
    lines.write('{"id": 2}\n')
    lines.close()
    assert [record["id"] for _, record in read_jsonl(disk.path / "audit.jsonl")] == [0, 2]
