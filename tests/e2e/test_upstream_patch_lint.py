"""Every patch of docs/upstream/ passes lmms-eval's own lint: lmms-eval 0.7.3 is formatted and linted with ruff, by the
``[tool.ruff]`` settings of its ``pyproject.toml`` (line length 240; lint E4, E7, E9, F and I, ``lmms_eval``
first-party), and depends on ruff, so the environment's ruff is lmms-eval's. Each patch is applied (on the patches it
needs) to the files it touches, copied from the installed release, beside a ``pyproject.toml`` holding those settings;
every Python file it adds or changes must pass ``ruff format --check`` and ``ruff check`` outright, as every file of the
release does. And lmms-eval's layout: no task folder imports another (what two share goes in ``tasks/_task_utils/``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.upstream_patches import git_apply, installed_lmms_eval, patched_paths, upstream_patches

# lmms-eval 0.7.3's pyproject.toml (its sdist, `pip download --no-deps --no-binary :all: lmms-eval==0.7.3`): the
# Python it supports, which ruff's formatter reads as its target, and its [tool.ruff] tables as released.
LMMS_EVAL_RUFF_SETTINGS = """\
[project]
name = "lmms_eval"
requires-python = ">=3.10"

[tool.ruff]
line-length = 240
extend-exclude = ["*.ipynb", "*.md"]

[tool.ruff.lint]
select = ["E4", "E7", "E9", "F", "I"]

[tool.ruff.lint.isort]
known-first-party = ["lmms_eval"]
"""


def ruff_failures(tree: Path, files: list[str]) -> list[str]:
    """What ``ruff format --check`` and ``ruff check`` report on ``files`` of ``tree`` under lmms-eval's settings:
    the formatter's diff and each lint finding, empty when both pass."""
    settings = tree / "pyproject.toml"
    settings.write_text(LMMS_EVAL_RUFF_SETTINGS)
    failures = []
    for command in (("format", "--check", "--diff"), ("check", "--output-format", "concise")):
        completed = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--config", str(settings), *files],
            cwd=tree,
            capture_output=True,
            text=True,
        )
        assert completed.returncode in (0, 1), completed.stderr
        if completed.returncode:
            failures.append(f"ruff {command[0]}:\n{completed.stdout}{completed.stderr}")
    return failures


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_every_python_file_a_patch_adds_or_changes_passes_lmms_evals_ruff(upstream, tmp_path):
    """A patch that needs others (``- Needs NN``) is applied on them."""
    patch, installed, tree = upstream.patch, installed_lmms_eval(), tmp_path / "lmms-eval"
    for file in sorted({file for needed in (*upstream.needs, patch) for file in patched_paths(needed)}):
        if file.startswith("lmms_eval/") and (installed.parent / file).exists():  # lmms-eval's own, before the patch
            (tree / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(installed.parent / file, tree / file)
    tree.mkdir(exist_ok=True)
    for needed in (*upstream.needs, patch):
        applied = git_apply(needed, tree)
        assert applied.returncode == 0, f"{needed.name}: {applied.stderr}"
    python_files = [file for file in patched_paths(patch) if file.endswith(".py") and (tree / file).exists()]
    failures = ruff_failures(tree, python_files)
    assert not failures, f"{patch.name} fails lmms-eval's ruff settings:\n" + "\n".join(failures)


# A task folder's module, and an import of a task folder's module (``_task_utils`` is lmms-eval's shared code)
TASK_MODULE = re.compile(r"^lmms_eval/tasks/(?P<folder>[a-zA-Z0-9]\w*)/\S+\.py$")
TASK_IMPORT = re.compile(r"^\+\s*(?:from|import)\s+lmms_eval\.tasks\.(?P<folder>[a-zA-Z0-9]\w*)\b", re.M)


def added_lines(patch: Path) -> dict[str, str]:
    """The lines a patch adds, per file it adds or changes (``+`` kept): {path: lines}."""
    sections = re.split(r"^diff --git a/\S+ b/(\S+)$", patch.read_text(), flags=re.M)
    return {path: "\n".join(line for line in body.splitlines() if line.startswith("+") and not line.startswith("+++"))
            for path, body in zip(sections[1::2], sections[2::2])}


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_no_task_folder_a_patch_writes_imports_another(upstream):
    """A task loads alone: ``egoplan_val_mcppl`` needs no ``egoplan_bench2``, which needs no ``egoplan2``."""
    crossing = [f"{path} imports lmms_eval.tasks.{imported['folder']}"
                for path, lines in added_lines(upstream.patch).items() if (module := TASK_MODULE.match(path))
                for imported in TASK_IMPORT.finditer(lines) if imported["folder"] != module["folder"]]
    assert not crossing, f"{upstream.patch.name}: " + "; ".join(crossing)
