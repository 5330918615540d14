"""The patches of docs/upstream/ do their workarounds' jobs in lmms-eval alone: each, applied to a scratch copy of
the installed lmms-eval with the suite's workaround switched off, passes its own tests and the suite's tests of
the behaviour, which fail on an unpatched copy (docs/upstream/README.md's table names both)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import pytest

from lmms_egoplan.compat import OFF_SWITCH
from lmms_egoplan.fixtures.lmms_eval_run import OFFLINE_ENV

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "docs" / "upstream"
ROW = re.compile(r"^\|\s*\[[^\]]+\]\([^)]+\.md\)\s*\(\[diff\]\((?P<patch>[^)]+\.patch)\)\)\s*\|(?P<cells>.*)\|\s*$")


@dataclass(frozen=True)
class UpstreamPatch:
    """A row of docs/upstream/README.md's table."""

    patch: Path
    workarounds: tuple[str, ...]  # switched off while the patched copy runs
    suite_tests: tuple[str, ...]

    def own_tests(self, root: Path) -> list[str]:
        """The test files the patch adds to lmms-eval's test tree, under ``root``."""
        return [str(root / path) for path in re.findall(r"^\+\+\+ b/(test/\S+\.py)$", self.patch.read_text(), re.M)]


def upstream_patches() -> list[UpstreamPatch]:
    rows = []
    for line in (PATCHES / "README.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            _, workarounds, tests = [re.findall(r"`([^`]+)`", cell) for cell in match["cells"].split("|")]
            rows.append(UpstreamPatch(PATCHES / match["patch"], tuple(workarounds), tuple(tests)))
    return rows


def scratch_lmms_eval(folder: Path) -> Path:
    """A copy of the installed lmms-eval package in lmms-eval's repository layout: ``folder/lmms_eval``."""
    installed = Path(importlib.util.find_spec("lmms_eval").submodule_search_locations[0])
    shutil.copytree(installed, folder / "lmms_eval")  # with __pycache__: the copy imports as fast as the original
    return folder


def apply(patch: Path, scratch: Path, *only: str) -> None:
    """``git apply`` the patch (only the paths matching ``only``: ``--include=test/*``) in the scratch copy."""
    # Outside any repository (as lmms-eval's checkout would be the repository): git applies in the scratch folder.
    subprocess.run(["git", "apply", *only, str(patch)], cwd=scratch, check=True, capture_output=True, text=True,
                   env={**os.environ, "GIT_CEILING_DIRECTORIES": str(scratch.parent)})


def run_tests(scratch: Path, tests: list[str], workarounds: tuple[str, ...], checkpoints: Path,
              report: Path) -> dict[str, str]:
    """Run ``tests`` in a fresh process that imports lmms-eval from ``scratch``, the ``workarounds`` switched off:
    ``{test id: outcome}`` (passed, failed, skipped)."""
    runner = ("import sys, lmms_eval, pytest; "
              "assert lmms_eval.__file__.startswith(sys.argv[1]), f'lmms-eval imported from {lmms_eval.__file__}'; "
              "sys.exit(pytest.main(sys.argv[2:]))")
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(scratch), OFF_SWITCH: ",".join(workarounds),
           "LMMS_EGOPLAN_TEST_CACHE": str(checkpoints)}
    env.pop("LMMS_EVAL_PLUGINS", None)
    completed = subprocess.run([sys.executable, "-c", runner, str(scratch), "-q", "-p", "no:cacheprovider",
                                "-c", str(ROOT / "setup.cfg"), "--rootdir", str(ROOT), "-m", "e2e or not e2e",
                                f"--junitxml={report}", *tests], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=900)
    assert report.exists(), completed.stdout[-3000:] + completed.stderr[-3000:]
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = {"error": "failed", "failure": "failed"}.get(
            outcome, outcome)
    assert outcomes, completed.stdout[-3000:]
    return outcomes


ROWS = upstream_patches()


def test_the_table_names_a_patch_with_its_pull_request_text_a_workaround_and_tests():
    assert ROWS, "docs/upstream/README.md's table has no patch"
    for row in ROWS:
        assert row.patch.exists() and row.patch.with_suffix(".md").exists() and row.workarounds and row.suite_tests
        assert row.own_tests(Path(".")), f"{row.patch.name} adds no test to lmms-eval's test tree"
        assert all((ROOT / test.split("::")[0]).exists() for test in row.suite_tests), row.suite_tests


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.patch.stem)
def test_the_patched_lmms_eval_passes_the_tests_its_workaround_passed_and_the_released_one_fails_them(
        row, checkpoint_cache, tmp_path):
    scratch = scratch_lmms_eval(tmp_path / "lmms-eval")
    tests = [*row.own_tests(scratch), *(str(ROOT / test) for test in row.suite_tests)]
    apply(row.patch, scratch, "--include=test/*")  # the patch's tests, lmms-eval as released
    released = run_tests(scratch, tests, row.workarounds, checkpoint_cache, tmp_path / "released.xml")
    apply(row.patch, scratch, "--exclude=test/*")  # now the fix too
    patched = run_tests(scratch, tests, row.workarounds, checkpoint_cache, tmp_path / "patched.xml")
    suite = [test for test in patched if test.startswith("tests.")]
    assert suite and set(patched.values()) == {"passed"}, patched
    assert all(released[test] == "failed" for test in suite), released
    assert "failed" in {outcome for test, outcome in released.items() if test not in suite}, released
