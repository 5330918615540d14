"""The tier's memo of the harnesses' parsed task YAMLs (``task_index_memo.py``, the prelude of each forked run) changes
nothing a run's task index holds: a run that parses every installed YAML and a later run served from the memo the
first one left build equal indexes, lmms-eval's and lm-eval's; a YAML changed in the folder is parsed again, and
files outside it always are."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.e2e import task_index_memo

BOTH_INDEXES = r"""
import enum, json, runpy, sys
runpy.run_path(sys.argv[1], run_name="__warm_python_prelude__")
import lmms_eval.tasks, lmms_eval.utils
import lm_eval.tasks, lm_eval.tasks._index

def plain(value):
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (set, frozenset)):
        return sorted(plain(item) for item in value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "__dict__"):
        return plain(vars(value))
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)

indexes = {"lmms_eval": plain(lmms_eval.tasks.TaskManager().task_index),
           "lm_eval": plain(lm_eval.tasks.TaskManager()._index)}
memos = {"lmms_eval": lmms_eval.utils.load_yaml_config.memo, "lm_eval": lm_eval.tasks._index.load_yaml.memo}
counts = {name: {"parsed": memo.parsed, "served": memo.served} for name, memo in memos.items()}
print(json.dumps({"indexes": indexes, "counts": counts}))
"""


def test_a_run_served_from_the_memo_builds_the_task_indexes_a_run_that_parsed_every_file_built(tmp_path):
    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", BOTH_INDEXES, task_index_memo.__file__], cwd=tmp_path,
                              env={**os.environ, task_index_memo.MEMO_FOLDER_VARIABLE: str(tmp_path)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    parsing, served = run(), run()
    assert parsing["counts"]["lmms_eval"]["parsed"] > 1_500 and parsing["counts"]["lm_eval"]["parsed"] > 10_000
    assert parsing["counts"]["lm_eval"]["served"] == 0  # lmms-eval's includes are served from what it parsed
    assert served["counts"]["lmms_eval"]["parsed"] == served["counts"]["lm_eval"]["parsed"] == 0
    assert served["counts"]["lmms_eval"]["served"] > 1_500 and served["counts"]["lm_eval"]["served"] > 10_000
    assert len(parsing["indexes"]["lmms_eval"]) > 1_500 and len(parsing["indexes"]["lm_eval"]) > 10_000
    assert served["indexes"] == parsing["indexes"]


def test_a_changed_file_is_parsed_again_and_a_file_outside_the_folder_always(tmp_path):
    folder, outside = tmp_path / "tasks", tmp_path / "mine.yaml"
    folder.mkdir()
    (folder / "a.yaml").write_text("task: a\n")
    outside.write_text("task: mine\n")
    parsed = []

    def load(path):
        parsed.append(Path(path).name)
        return yaml.safe_load(Path(path).read_text())

    def by_path(args, kwargs):
        return (str(Path(args[0]).resolve()),)

    def a_run():
        memo = task_index_memo.ParsedYamlMemo(folder, tmp_path / "memo.pickle")
        memoised = memo.wrap(load, by_path)
        configs = [memoised(folder / "a.yaml"), memoised(outside)]
        memo.save()
        return configs

    assert a_run() == [{"task": "a"}, {"task": "mine"}] and parsed == ["a.yaml", "mine.yaml"]
    assert a_run() == [{"task": "a"}, {"task": "mine"}] and parsed[2:] == ["mine.yaml"]
    (folder / "a.yaml").write_text("task: a_changed\n")
    assert a_run() == [{"task": "a_changed"}, {"task": "mine"}] and parsed[3:] == ["a.yaml", "mine.yaml"]
