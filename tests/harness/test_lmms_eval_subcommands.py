"""lmms-eval 0.7.3's `tasks` and `power` subcommands build their task index from `--include-path` only
(LMMS_EVAL_PLUGINS does not reach them): given the installed suite's task folder, they list and size the
suite's tasks. Run in process through `lmms_eval.cli.dispatch.main`, the function the `lmms-eval` command calls."""

import re
import sys

from lmms_eval.cli import dispatch

from lmms_egoplan import tasks as suite_task_package
from lmms_egoplan.catalogue import CATALOGUE
from lmms_egoplan.demo.egoplan import build_fixture


def lmms_eval(monkeypatch, capsys, *arguments: str) -> str:
    monkeypatch.setattr(sys, "argv", ["lmms-eval", *arguments])
    dispatch.main()
    return capsys.readouterr().out


def test_tasks_and_power_reach_the_suite_through_its_task_folder(monkeypatch, capsys, tmp_path):
    suite_tasks = suite_task_package.__path__[0]  # what the docs' $(python -c ...) prints

    printed = lmms_eval(monkeypatch, capsys, "tasks", "list", "--include-path", suite_tasks)
    listed = set(re.findall(r"^  (\S+)$", printed, re.M))
    assert {task for benchmark in CATALOGUE for task in benchmark.tasks} <= listed
    assert "egoplan_val" in listed and "seedbench_ppl" in listed  # the suite's beside lmms-eval's own

    data = build_fixture(tmp_path / "egoplan")
    for name, value in data.env().items():
        monkeypatch.setenv(name, value)
    report = lmms_eval(monkeypatch, capsys, "power", "--tasks", "egoplan_val", "--include-path", suite_tasks)
    assert re.search(r"egoplan_val:\n\s+Sample size:\s+n = (\d+)", report)[1] == str(len(data.records()))
