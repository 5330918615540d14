"""The patches of docs/upstream/ and a scratch lmms-eval to apply them to, for tests/e2e/test_upstream_patches.py,
tests/e2e/test_upstream_patch_lint.py and docs/upstream/equivalence.py: every ``NN-*.patch`` of the folder, in order;
docs/upstream/README.md's table rows (each fix's workarounds and the suite's tests of them; each pull request of the
benchmark series with its proof: its own test, or an equivalence run); a copy of the installed lmms-eval in
lmms-eval's repository layout and file modes; ``git apply``; a pytest run against a scratch copy."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import lmms_egoplan.compat
from lmms_egoplan.compat import OFF_SWITCH
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV
from lmms_egoplan.demo.kit.warm_python import run_python

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "docs" / "upstream"
PATCH_FILES = sorted(PATCHES.glob("[0-9][0-9]-*.patch"))
ROW = re.compile(r"^\|\s*\[[^\]]+\]\([^)]+\.md\)\s*\(\[diff\]\((?P<patch>[^)]+\.patch)\)\)\s*\|(?P<cells>.*)\|\s*$")
# Under Related in a patch's text: "- Needs 08" (it applies only on 08; "- Needs 08 and 20"), and "- Tested with 20
# and 21" (its suite tests need those too: the suite's workaround it retires does what they do as well).
NEEDS = re.compile(r"^- Needs (?P<numbers>\d\d(?:(?:, | and )\d\d)*)\b", re.M)
TESTED_WITH = re.compile(r"^- Tested with (?P<numbers>\d\d(?:(?:, | and )\d\d)*)\b", re.M)
NO_PATCH_ROW = re.compile(r"^\|\s*`(?P<workaround>\w+\.\w+)`\s*\|(?P<why>[^|]+)\|\s*$")
# A row of the benchmark series' table: | 27 | [name](name.md) ([diff](name.patch)) | files | ... | proof | ... |
SERIES_ROW = re.compile(r"^\|\s*(?P<number>\d\d)\s*\|\s*\[[^\]]+\]\([^)]+\.md\)\s*"
                        r"\(\[diff\]\((?P<patch>[^)]+\.patch)\)\)\s*\|(?P<cells>.*)\|\s*$")
# The proof cell of a pull request that carries no test of its own (lmms-eval's CI runs none): the equivalence run
# that shows its task scores as the suite's (docs/upstream/equivalence.py; tests/e2e/test_upstream_equivalence.py).
EQUIVALENCE_PROOF = re.compile(r"`docs/upstream/equivalence\.py (?P<benchmark>\w+)`")
# The files the patches touch that are executable (100755) in lmms-eval's git (main at 75571cfe0fa3, the snapshot
# the suite can read); the others are 100644 there, as in the installed wheel. A patch made with another mode gets
# a warning from `git apply` in a checkout of lmms-eval, and from the scratch copy here.
EXECUTABLE_IN_LMMS_EVAL = ("lmms_eval/__main__.py", "lmms_eval/evaluator.py", "lmms_eval/api/instance.py",
                           "lmms_eval/api/task.py", "lmms_eval/tasks/__init__.py",
                           "lmms_eval/models/simple/qwen2_vl.py", "lmms_eval/utils.py")


@dataclass(frozen=True)
class UpstreamPatch:
    """A patch of docs/upstream/ with its row of README.md's table."""

    patch: Path
    workarounds: tuple[str, ...]  # switched off while the tests run
    suite_tests: tuple[str, ...]  # files or file::test
    # A pull request of the benchmark series proven by an equivalence run instead of a test of its own: the
    # benchmark docs/upstream/equivalence.py compares (its series row's proof cell), else None.
    proven_by: str | None = None

    @property
    def name(self) -> str:
        return self.patch.stem

    @property
    def needs(self) -> tuple[Path, ...]:
        """The patches this one applies on (its text's ``- Needs NN`` line), in the folder's order."""
        return self._named_in_text(NEEDS)

    @property
    def tested_with(self) -> tuple[Path, ...]:
        """The patches it needs and those its suite tests need too (``- Tested with NN``), in the folder's order."""
        return tuple(sorted({*self.needs, *self._named_in_text(TESTED_WITH)}))

    def _named_in_text(self, line: re.Pattern) -> tuple[Path, ...]:
        text = self.patch.with_suffix(".md").read_text(encoding="utf-8")
        numbers = {number for match in line.finditer(text) for number in re.findall(r"\d\d", match["numbers"])}
        return tuple(patch for patch in PATCH_FILES if patch.name[:2] in numbers)

    def own_tests(self) -> list[str]:
        """The test files the patch adds to lmms-eval's test tree (``test/...py``)."""
        return re.findall(r"^\+\+\+ b/(test/\S+\.py)$", self.patch.read_text(), re.M)


def patched_paths(patch: Path) -> list[str]:
    """The files a patch changes or adds, as lmms-eval's repository names them."""
    return re.findall(r"^diff --git a/\S+ b/(\S+)$", patch.read_text(), re.M)


def added_file(patch: Path, path: str) -> str:
    """The text of the file ``path`` (as lmms-eval's repository names it) that ``patch`` adds."""
    diff = patch.read_text()
    start = diff.find(f"--- /dev/null\n+++ b/{path}\n")
    if start < 0:
        raise ValueError(f"{patch.name} adds no file {path}")
    hunk = diff[start:].split("\ndiff --git ", 1)[0].splitlines()[3:]  # after ---, +++ and @@
    return "".join(line[1:] + "\n" for line in hunk if line.startswith("+"))


def table_rows() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """docs/upstream/README.md's table of patches: {patch file name: (workarounds, the suite's tests)}."""
    rows = {}
    for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            _, workarounds, tests, *_ = [re.findall(r"`([^`]+)`", cell) for cell in match["cells"].split("|")]
            rows[match["patch"]] = (tuple(workarounds), tuple(tests))
    return rows


def series_rows() -> dict[str, str | None]:
    """docs/upstream/README.md's table of the benchmark series: {patch file name: the benchmark whose equivalence run
    proves it, or None (it carries its own test)}."""
    rows = {}
    for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines():
        match = SERIES_ROW.match(line)
        if match:
            proof = EQUIVALENCE_PROOF.search(match["cells"])
            rows[match["patch"]] = proof["benchmark"] if proof else None
    return rows


def upstream_patches() -> list[UpstreamPatch]:
    """Every ``NN-*.patch`` of docs/upstream/ with its table row (a fix's: its workarounds and the suite's tests of
    them; a pull request of the series: what proves it), in the order the series applies: by number, each after the
    patches its text says it needs (a later-numbered core fix a pull request of the series needs comes before it)."""
    rows, series = table_rows(), series_rows()
    patches = {patch: UpstreamPatch(patch, *rows.get(patch.name, ((), ())), proven_by=series.get(patch.name))
               for patch in PATCH_FILES}
    ordered: list[UpstreamPatch] = []

    def place(patch: UpstreamPatch, needed_by: tuple[str, ...] = ()) -> None:
        if patch.name in needed_by:
            raise ValueError(f"patches that need each other: {' -> '.join((*needed_by, patch.name))}")
        if patch not in ordered:
            for need in patch.needs:
                place(patches[need], (*needed_by, patch.name))
            ordered.append(patch)

    for patch in patches.values():
        place(patch)
    return ordered


def workarounds_without_a_patch() -> dict[str, str]:
    """docs/upstream/README.md's table of the workarounds that cannot become a patch: {workaround: why}."""
    rows = (NO_PATCH_ROW.match(line) for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines())
    return {row["workaround"]: row["why"].strip() for row in rows if row}


def switch_table() -> set[str]:
    """The workarounds of lmms_egoplan.compat's switch table."""
    return set(re.findall(r"^  ``(\w+\.\w+)``", lmms_egoplan.compat.__doc__, re.M))


def installed_lmms_eval() -> Path:
    """The installed lmms-eval package (the released 0.7.3 of the environment; never written to)."""
    return Path(importlib.util.find_spec("lmms_eval").submodule_search_locations[0])


def scratch_lmms_eval(folder: Path) -> Path:
    """A copy of the installed lmms-eval package in lmms-eval's repository layout and file modes:
    ``folder/lmms_eval``."""
    shutil.copytree(installed_lmms_eval(), folder / "lmms_eval")  # with __pycache__: imports as fast as the original
    for path in EXECUTABLE_IN_LMMS_EVAL:
        (folder / path).chmod(0o755)
    return folder


def git_apply(patch: Path, scratch: Path, *options: str) -> subprocess.CompletedProcess:
    """``git apply`` in the scratch copy (outside any repository, as in lmms-eval's checkout). The installed package
    carries no ``docs/``: a task's line in ``docs/advanced/current_tasks.md`` is left out here (its hunk is checked
    against lmms-eval's file by tests/e2e/test_upstream_patch_lint.py, whose ``--include`` of it comes first: git takes
    the first pattern that matches a path)."""
    return subprocess.run(["git", "apply", *options, "--exclude=docs/*", str(patch)], cwd=scratch,
                          capture_output=True, text=True,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(scratch.parent)})


# Runs pytest in a fresh process that imports lmms-eval from the scratch copy, and writes each test's outcome
# (passed, failed, skipped; a file that cannot be collected: failed).
# The scratch lmms-eval goes where a PYTHONPATH would put it (after the -c script's folder), and into the PYTHONPATH
# of the runs its tests start: the runner itself then forks from the tier's warm Python, which refuses any run with a
# PYTHONPATH of its own (what one holds can act when an interpreter starts; the scratch tree holds nothing such).
RUNNER = """
import json, os, sys
sys.path.insert(1, sys.argv[1])
os.environ["PYTHONPATH"] = sys.argv[1]
import lmms_eval, pytest
assert lmms_eval.__file__.startswith(sys.argv[1]), f"lmms-eval imported from {lmms_eval.__file__}"
outcomes = {}

class Outcomes:  # by file name and test: a file outside the rootdir (lmms-eval's tests) has no node id
    def pytest_runtest_logreport(self, report):
        test = report.location[0].rsplit("/", 1)[-1] + "::" + report.location[2]
        if (report.failed or report.skipped or report.when == "call") and outcomes.get(test) in (None, "passed"):
            outcomes[test] = report.outcome

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        report = (yield).get_result()
        if report.failed:
            outcomes[collector.path.name + "::"] = "failed"

status = pytest.main(sys.argv[3:], plugins=[Outcomes()])
with open(sys.argv[2], "w") as file:
    json.dump(outcomes, file)
sys.exit(status)
"""


# Worst last: a test parametrized over cases is as good as its worst case.
OUTCOME_ORDER = ("passed", "skipped", "failed")


def run_tests(scratch: Path, tests: list[str], workarounds: set[str], checkpoints: Path, report: Path) -> dict:
    """Run ``tests`` in one fresh pytest process importing lmms-eval from ``scratch``, the ``workarounds`` switched
    off: ``{(file stem, test): outcome}`` (a file that cannot be collected: ``(stem, "")``)."""
    env = {**os.environ, **OFFLINE_ENV, OFF_SWITCH: ",".join(sorted(workarounds)),
           "LMMS_EGOPLAN_TEST_CACHE": str(checkpoints)}
    for name in ("LMMS_EVAL_PLUGINS", "PYTHONPATH"):
        env.pop(name, None)
    completed = run_python([sys.executable, "-c", RUNNER, str(scratch), str(report), "-q", "-p", "no:cacheprovider",
                            "-c", str(ROOT / "setup.cfg"), "--rootdir", str(ROOT), "-m", "e2e or not e2e",
                            "--continue-on-collection-errors", *tests], cwd=ROOT, env=env, timeout=900)
    assert report.exists(), completed.stdout[-6000:]
    outcomes = {}
    for node, outcome in json.loads(report.read_text()).items():  # a parametrized test: its worst case's outcome
        file, _, test = node.partition("::")
        key = (Path(file).stem, re.sub(r"\[.*\]$", "", test))
        outcomes[key] = max(outcome, outcomes.get(key, outcome), key=OUTCOME_ORDER.index)
    assert outcomes, completed.stdout[-3000:]
    return outcomes


def outcomes_of(outcomes: dict, test: str) -> list[str]:
    """The outcomes of a test named as the table names it (``path/file.py`` or ``path/file.py::test``)."""
    path, _, name = test.partition("::")
    stem = Path(path).stem
    return [outcome for (file, case), outcome in outcomes.items() if file == stem and name in ("", case)]
