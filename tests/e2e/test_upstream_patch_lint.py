"""Every patch of docs/upstream/ passes lmms-eval's own lint: lmms-eval 0.7.3 is formatted and linted with ruff, by the
``[tool.ruff]`` settings of its ``pyproject.toml`` (line length 240; lint E4, E7, E9, F and I, ``lmms_eval``
first-party), and depends on ruff, so the environment's ruff is lmms-eval's. Each patch is applied (on the patches it
needs) to the files it touches, copied from the installed release, beside a ``pyproject.toml`` holding those settings;
every Python file it adds or changes must pass ``ruff format --check`` and ``ruff check`` outright, as every file of the
release does. A patch that adds a task gives it its line in lmms-eval's task list, ``docs/advanced/current_tasks.md``,
in a hunk made against that file as lmms-eval's repository holds it, or as the patches before it in the series leave
it. And lmms-eval's layout: no task folder imports another (what two share goes in ``tasks/_task_utils/``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.upstream_patches import (
    added_file,
    git_apply,
    installed_lmms_eval,
    patched_paths,
    upstream_patches,
)

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


TASK_LIST = "docs/advanced/current_tasks.md"
# The blob of lmms-eval's task list at main 75571cfe0fa3 (2026-08-06), the newest copy of lmms-eval's repository the
# suite can read (`fetch`); the released 0.7.3 ships no docs/. The series' first task-list hunk is made against it,
# each later one against the file the one before leaves (their lines are neighbours: EgoPlan, EgoPlan-Bench2, EgoThink).
TASK_LIST_BLOB = "2052965"


class _TaggedYaml(yaml.SafeLoader):
    """lmms-eval's task YAMLs with their ``!function`` tags read as None: only the task and group names matter here."""


_TaggedYaml.add_multi_constructor("!", lambda loader, suffix, node: None)


def new_top_level_tasks(patch: Path) -> set[str]:
    """The tasks and groups a patch's new YAMLs define that no other new YAML of it groups: those a user names."""
    defined, grouped = set(), set()
    for path in patched_paths(patch):
        if not path.endswith(".yaml") or f"--- /dev/null\n+++ b/{path}\n" not in patch.read_text():
            continue
        config = yaml.load(added_file(patch, path), Loader=_TaggedYaml) or {}
        name = config.get("group") or config.get("task")
        defined.add(name)
        grouped.update(config.get("task") or [] if "group" in config else [])
    return defined - grouped


def task_list_hunks(patch: Path) -> list[str]:
    """The patch's diffs of lmms-eval's task list."""
    return [diff for diff in patch.read_text().split("diff --git ")[1:] if diff.startswith(f"a/{TASK_LIST} ")]


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_a_patch_that_adds_a_task_lists_it_in_lmms_evals_task_list(upstream):
    """Listed as the file lists them: ``- [Benchmark](url) (group)``, a sub-bullet ``- Name (task, task)`` or a bare
    ``- task`` sub-bullet."""
    tasks, hunks = new_top_level_tasks(upstream.patch), task_list_hunks(upstream.patch)
    listed = {
        name.strip()
        for diff in hunks
        for line in diff.splitlines()[4:]
        if line.startswith("+")
        for names in re.findall(r"\(([^)]*)\)\s*$|^\+\s+- (\w+)\s*$", line)
        for name in ",".join(names).split(",")
        if name
    }
    assert tasks <= listed, f"{upstream.name}: {sorted(tasks - listed)} not in {TASK_LIST}"


def test_the_task_list_hunks_are_made_against_lmms_evals_file_then_each_other():
    blobs = [re.search(r"^index (\w+)\.\.(\w+)", diff, re.M).groups()
             for patch in upstream_patches() for diff in task_list_hunks(patch.patch)]
    preimages = [before for before, _ in blobs]
    assert preimages == [TASK_LIST_BLOB, *(after for _, after in blobs[:-1])], blobs


STAND_IN = "\x00stand-in"


def read_by_hunks(patch: Path, lines: dict[int, str]) -> None:
    """Adds to ``lines`` (the file as known: line number -> text) the lines the patch's task-list hunks read (context
    and removed lines, at the lines each hunk names); a line known otherwise fails."""
    for diff in task_list_hunks(patch):
        for start, body in re.findall(r"^@@ -(\d+)(?:,\d+)? \+\S+ @@[^\n]*\n((?:[-+ \\][^\n]*\n?)*)", diff, re.M):
            old = [line[1:] for line in body.splitlines() if line[:1] in (" ", "-")]
            for number, line in enumerate(old, int(start)):
                assert lines.setdefault(number, line) == line, f"{patch.name} reads line {number} otherwise"


def test_the_task_list_hunks_apply_together_in_order(tmp_path):
    """The release ships no docs/, so the series' own application leaves them out (tests/e2e/upstream_patches.py):
    here they apply in order, without an offset or a warning, to the file as far as their hunks can tell (the lines
    each reads, stand-ins between them)."""
    task_list = tmp_path / TASK_LIST
    task_list.parent.mkdir(parents=True)
    lines: dict[int, str] = {}
    for patch in (patch for patch in upstream_patches() if task_list_hunks(patch.patch)):
        read_by_hunks(patch.patch, lines)
        task_list.write_text("".join(lines.get(n, f"{STAND_IN} {n}") + "\n" for n in range(1, max(lines) + 21)))
        applied = git_apply(patch.patch, tmp_path, "-v", f"--include={TASK_LIST}")
        said = "\n".join(line for line in applied.stderr.splitlines() if not line.startswith("Skipped patch"))
        assert applied.returncode == 0 and "offset" not in said, f"{patch.name}: {said}"
        lines = {n: line for n, line in enumerate(task_list.read_text().splitlines(), 1)
                 if not line.startswith(STAND_IN)}


# lmms-eval's .github/pull_request_template.md (main 75571cfe0fa3): its sections in order and the bullets it allows in
# each ("Max 3 bullets", "1-2 bullets"); a text may end with Related. The long reasoning goes to the linked issue text.
TEMPLATE_SECTIONS = ("Summary", "In scope", "Out of scope", "Validation", "Risk / Compatibility", "Type of Change")
MOST_BULLETS = {"Summary": 3, "Validation": 3, "Risk / Compatibility": 2}
SUITE_NAME = re.compile(r"lmms[-_ ]egoplan", re.I)


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_every_pull_request_text_follows_lmms_evals_template_and_cites_its_ruff(upstream):
    parts = re.split(r"^## ([^\n]+)\n", upstream.patch.with_suffix(".md").read_text(encoding="utf-8"), flags=re.M)
    sections = dict(zip(parts[1::2], parts[2::2]))
    assert tuple(parts[1::2]) in (TEMPLATE_SECTIONS, (*TEMPLATE_SECTIONS, "Related")), parts[1::2]
    for section, most in MOST_BULLETS.items():
        assert 1 <= len(re.findall(r"^- ", sections[section], re.M)) <= most, (section, sections[section])
    validation = sections["Validation"]
    assert "ruff format --check" in validation and "ruff check" in validation, validation
    assert not re.search(r"black|isort|pre-commit", validation), validation


@pytest.mark.parametrize("upstream", upstream_patches(), ids=lambda upstream: upstream.name)
def test_nothing_a_patch_ships_names_this_suite(upstream):
    added = [
        line for line in upstream.patch.read_text().splitlines() if line.startswith("+") and SUITE_NAME.search(line)
    ]
    assert not added, added
