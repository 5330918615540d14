"""The patches of docs/upstream/ do their workarounds' jobs in lmms-eval alone. One scratch copy of the installed
lmms-eval (never the environment's own) takes every patch: each applies alone to the release, and all apply in order.
Every row's tests (the patch's own, in lmms-eval's test tree, and the suite's tests of the behaviour) run in two
pytest processes, every workaround of the table switched off: against the released copy, where each row's suite
tests and some of its own fail, then against the patched copy, where every test passes: each behaviour then comes
from lmms-eval alone. docs/upstream/README.md's tables name the patches, their workarounds and tests, and the
workarounds that cannot become a patch, with why; every workaround of lmms_egoplan.compat's switch table is in one."""

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
from lmms_egoplan.fixtures.lmms_eval_run import OFFLINE_ENV

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "docs" / "upstream"
ROW = re.compile(r"^\|\s*\[[^\]]+\]\([^)]+\.md\)\s*\(\[diff\]\((?P<patch>[^)]+\.patch)\)\)\s*\|(?P<cells>.*)\|\s*$")
NO_PATCH_ROW = re.compile(r"^\|\s*`(?P<workaround>\w+\.\w+)`\s*\|(?P<why>[^|]+)\|\s*$")


@dataclass(frozen=True)
class UpstreamPatch:
    """A row of docs/upstream/README.md's table of patches."""

    patch: Path
    workarounds: tuple[str, ...]  # switched off while the tests run
    suite_tests: tuple[str, ...]  # files or file::test

    def own_tests(self) -> list[str]:
        """The test files the patch adds to lmms-eval's test tree (``test/...py``)."""
        return re.findall(r"^\+\+\+ b/(test/\S+\.py)$", self.patch.read_text(), re.M)


def upstream_patches() -> list[UpstreamPatch]:
    rows = []
    for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            _, workarounds, tests, _ = [re.findall(r"`([^`]+)`", cell) for cell in match["cells"].split("|")]
            rows.append(UpstreamPatch(PATCHES / match["patch"], tuple(workarounds), tuple(tests)))
    return rows


def workarounds_without_a_patch() -> dict[str, str]:
    """docs/upstream/README.md's table of the workarounds that cannot become a patch: {workaround: why}."""
    rows = (NO_PATCH_ROW.match(line) for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines())
    return {row["workaround"]: row["why"].strip() for row in rows if row}


def switch_table() -> set[str]:
    """The workarounds of lmms_egoplan.compat's switch table."""
    return set(re.findall(r"^  ``(\w+\.\w+)``", lmms_egoplan.compat.__doc__, re.M))


def scratch_lmms_eval(folder: Path) -> Path:
    """A copy of the installed lmms-eval package in lmms-eval's repository layout: ``folder/lmms_eval``."""
    installed = Path(importlib.util.find_spec("lmms_eval").submodule_search_locations[0])
    shutil.copytree(installed, folder / "lmms_eval")  # with __pycache__: the copy imports as fast as the original
    return folder


def git_apply(patch: Path, scratch: Path, *options: str) -> subprocess.CompletedProcess:
    """``git apply`` in the scratch copy (outside any repository, as in lmms-eval's checkout)."""
    return subprocess.run(["git", "apply", *options, str(patch)], cwd=scratch, capture_output=True, text=True,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(scratch.parent)})


# Runs pytest in a fresh process that imports lmms-eval from the scratch copy, and writes each test's outcome
# (passed, failed, skipped; a file that cannot be collected: failed).
RUNNER = """
import json, sys, lmms_eval, pytest
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


def run_tests(scratch: Path, tests: list[str], workarounds: set[str], checkpoints: Path, report: Path) -> dict:
    """Run ``tests`` in one fresh pytest process importing lmms-eval from ``scratch``, the ``workarounds`` switched
    off: ``{(file stem, test): outcome}`` (a file that cannot be collected: ``(stem, "")``)."""
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(scratch), OFF_SWITCH: ",".join(sorted(workarounds)),
           "LMMS_EGOPLAN_TEST_CACHE": str(checkpoints)}
    env.pop("LMMS_EVAL_PLUGINS", None)
    completed = subprocess.run([sys.executable, "-c", RUNNER, str(scratch), str(report), "-q", "-p", "no:cacheprovider",
                                "-c", str(ROOT / "setup.cfg"), "--rootdir", str(ROOT), "-m", "e2e or not e2e",
                                "--continue-on-collection-errors", *tests],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert report.exists(), completed.stdout[-3000:] + completed.stderr[-3000:]
    outcomes = {}
    for node, outcome in json.loads(report.read_text()).items():
        file, _, test = node.partition("::")
        outcomes[(Path(file).stem, re.sub(r"\[.*\]$", "", test))] = outcome
    assert outcomes, completed.stdout[-3000:]
    return outcomes


def outcomes_of(outcomes: dict, test: str) -> list[str]:
    """The outcomes of a test named as the table names it (``path/file.py`` or ``path/file.py::test``)."""
    path, _, name = test.partition("::")
    stem = Path(path).stem
    return [outcome for (file, case), outcome in outcomes.items() if file == stem and name in ("", case)]


ROWS = upstream_patches()


def test_every_workaround_has_a_patch_or_a_reason_and_every_patch_its_text_and_tests():
    patched = [workaround for row in ROWS for workaround in row.workarounds]
    without = workarounds_without_a_patch()
    assert ROWS and len(patched) == len(set(patched)), patched
    assert switch_table() == set(patched) | set(without), switch_table() ^ (set(patched) | set(without))
    assert not set(patched) & set(without) and all(without.values())
    for row in ROWS:
        assert row.patch.exists() and row.patch.with_suffix(".md").exists(), row.patch
        assert row.own_tests(), f"{row.patch.name} adds no test to lmms-eval's test tree"
        assert bool(row.workarounds) == bool(row.suite_tests), row
        assert all((ROOT / test.split("::")[0]).exists() for test in row.suite_tests), row.suite_tests


def test_the_patched_lmms_eval_passes_the_tests_its_workarounds_passed_and_the_released_one_fails_them(
        checkpoint_cache, tmp_path):
    scratch = scratch_lmms_eval(tmp_path / "lmms-eval")
    for row in ROWS:  # each alone against the release
        checked = git_apply(row.patch, scratch, "--check")
        assert checked.returncode == 0, f"{row.patch.name} does not apply to lmms-eval as released: {checked.stderr}"
    for row in ROWS:  # the patches' tests, lmms-eval as released
        assert git_apply(row.patch, scratch, "--include=test/*").returncode == 0, row.patch.name
    workarounds = {workaround for row in ROWS for workaround in row.workarounds}
    tests = [*(str(scratch / test) for row in ROWS for test in row.own_tests()),
             *(str(ROOT / test) for row in ROWS for test in row.suite_tests)]
    released = run_tests(scratch, tests, workarounds, checkpoint_cache, tmp_path / "released.json")
    for row in ROWS:  # then every fix, in order
        applied = git_apply(row.patch, scratch, "--exclude=test/*")
        assert applied.returncode == 0, f"{row.patch.name} does not apply after the ones before it: {applied.stderr}"
    patched = run_tests(scratch, tests, workarounds, checkpoint_cache, tmp_path / "patched.json")

    assert set(patched.values()) <= {"passed", "skipped"}, {test: o for test, o in patched.items() if o == "failed"}
    for row in ROWS:
        suite = [outcome for test in row.suite_tests for outcome in outcomes_of(released, test) if outcome != "skipped"]
        assert not row.suite_tests or (suite and set(suite) == {"failed"}), (row.patch.name, suite)
        own = [outcome for test in row.own_tests() for outcome in outcomes_of(released, test)]
        assert "failed" in own, f"none of {row.patch.name}'s own tests fails on lmms-eval as released: {own}"
        assert all(outcomes_of(patched, test) for test in [*row.suite_tests, *row.own_tests()]), row.patch.name
