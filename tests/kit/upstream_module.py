"""A Python file that a pull request of docs/upstream/ adds to lmms-eval, loaded from the diff as a module of its own
(the tests that hold an upstream task's code to the suite's, in process)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from tests.e2e.upstream_patches import added_file


def added_module(patch: Path, path: str, folder: Path) -> ModuleType:
    """The file ``path`` (as lmms-eval's repository names it) that ``patch`` adds, written into ``folder`` and
    loaded."""
    file = folder / f"{patch.stem.replace('-', '_')}_{Path(path).stem}.py"
    file.write_text(added_file(patch, path))
    spec = importlib.util.spec_from_file_location(file.stem, file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
