"""Every patch of docs/upstream/ passes lmms-eval's own lint: its CI runs pre-commit with black 25.1.0
(``--line-length=240``) and isort 6.0.1 (``--profile black``) from the repository root (its .pre-commit-config.yaml),
and a reviewer reads unused imports (ruff's F401). The tools are installed at those versions into a folder of the
test cache, never into the environment; each patch is applied alone to the files it touches, copied from the
installed release, and may bring no failure the released files do not already have."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.upstream_patches import git_apply, installed_lmms_eval, patched_paths, upstream_patches

LINT_TOOLS = ("black==25.1.0", "isort==6.0.1")  # lmms-eval's .pre-commit-config.yaml


def lint_tools(cache: Path) -> Path:
    """A folder holding lmms-eval's lint tools at its pinned versions (installed once, kept in the test cache)."""
    folder = cache / ("lmms-eval-lint-" + "-".join(LINT_TOOLS).replace("==", ""))
    if not folder.exists():
        partial = cache / f"{folder.name}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                                    "--target", str(partial), *LINT_TOOLS], capture_output=True, text=True)
        assert installed.returncode == 0, f"cannot install {LINT_TOOLS}: {installed.stderr[-2000:]}"
        partial.rename(folder)
    return folder


def lint_failures(tree: Path, files: list[str], tools: Path) -> set[str]:
    """What lmms-eval's lint finds in ``files`` of ``tree``, run from ``tree`` as pre-commit runs from the repository
    root: each line black or isort would change (``black <file>: -<line>``, ``isort <file>: +<line>``) and each
    unused import (``F401 <file>: <name>``), without line numbers, so that a failure the release has is the same
    failure after a patch moved it."""
    present = [file for file in files if (tree / file).exists()]
    if not present:
        return set()
    env = {**os.environ, "PYTHONPATH": str(tools)}

    def run(*command: str) -> str:
        completed = subprocess.run([sys.executable, "-m", *command], cwd=tree, env=env, capture_output=True, text=True)
        assert completed.returncode in (0, 1), completed.stderr
        return completed.stdout

    failures = set()
    for tool, check in (("black", ("--diff", "--quiet", "--line-length=240")),
                        ("isort", ("--diff", "--profile", "black"))):
        for file in present:
            changed = re.findall(r"^([-+](?![-+]{2} ).*\S.*)$", run(tool, *check, file), re.M)
            failures |= {f"{tool} {file}: {line.rstrip()}" for line in changed}
    unused = run("ruff", "check", "--isolated", "--select", "F401", "--output-format", "concise", *present)
    failures |= {f"F401 {file}: {name}" for file, name in re.findall(r"^(\S+?):\d+:\d+: F401 (?:\[\*\] )?`([^`]+)`",
                                                                    unused, re.M)}
    return failures


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_a_patch_brings_no_failure_of_lmms_evals_lint(upstream, checkpoint_cache, tmp_path):
    """A patch that needs others (``- Needs NN``) is compared with the release with those applied."""
    tools = lint_tools(checkpoint_cache)
    patch, installed = upstream.patch, installed_lmms_eval()
    files = sorted({file for needed in (*upstream.needs, patch) for file in patched_paths(needed)})
    for tree in (tmp_path / "released", tmp_path / "patched"):
        for file in files:
            # lmms-eval's own, before the patch
            if file.startswith("lmms_eval/") and (installed.parent / file).exists():
                (tree / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(installed.parent / file, tree / file)
        (tree / "lmms_eval").mkdir(parents=True, exist_ok=True)  # isort places lmms_eval first-party, as at its root
        shutil.copyfile(installed / "__init__.py", tree / "lmms_eval" / "__init__.py")
        for needed in upstream.needs:
            assert git_apply(needed, tree).returncode == 0, needed.name
    applied = git_apply(patch, tmp_path / "patched")
    assert applied.returncode == 0, applied.stderr
    python_files = [file for file in patched_paths(patch) if file.endswith(".py")]
    released = lint_failures(tmp_path / "released", python_files, tools)
    patched = lint_failures(tmp_path / "patched", python_files, tools)
    assert not patched - released, f"{patch.name} brings lint failures lmms-eval's CI rejects: {patched - released}"
