"""A Python file that a pull request of docs/upstream/ adds to lmms-eval, loaded from the diff as a module of its own
(the tests that hold an upstream task's code to the suite's, in process)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from tests.e2e.upstream_patches import added_file, git_apply, installed_lmms_eval


def added_module(patch: Path, path: str, folder: Path) -> ModuleType:
    """The file ``path`` (as lmms-eval's repository names it) that ``patch`` adds, written into ``folder`` and
    loaded."""
    file = folder / f"{patch.stem.replace('-', '_')}_{Path(path).stem}.py"
    file.write_text(added_file(patch, path))
    return loaded(file)


def changed_module(patch: Path, path: str, folder: Path) -> ModuleType:
    """The released file ``path`` (``lmms_eval/...``) as ``patch`` changes it, in a copy under ``folder``, loaded."""
    file = folder / path
    file.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(installed_lmms_eval().parent / path, file)
    applied = git_apply(patch, folder, f"--include={path}")
    if applied.returncode != 0:
        raise ValueError(f"{patch.name} does not apply to {path}: {applied.stderr.strip()}")
    return loaded(file)


def loaded(file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
