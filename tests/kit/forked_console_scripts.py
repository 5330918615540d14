"""Stand-ins for installed console scripts (``lmms-eval``, ``lmms-egoplan``), put first on a command's PATH: each
runs its script's own code, forked from the end-to-end tier's warm Python (``lmms_egoplan/demo/kit/warm_python.py``)
where that one can run it, so that a page's commands run as printed without importing torch and transformers again
each (``tests/e2e/test_run_all.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from lmms_egoplan.demo.kit import warm_python


def forked_console_scripts(folder: Path, scripts: list[Path]) -> Path:
    """``folder`` holding a stand-in of each installed console script of ``scripts``, by its name; a stand-in loads
    only the warm Python's client (standard library) by its file, not the package."""
    folder.mkdir(parents=True, exist_ok=True)
    for script in scripts:
        code = script.read_text()
        stand_in = folder / script.name
        stand_in.write_text(
            f"#!{sys.executable}\n"
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('warm_python', {warm_python.__file__!r})\n"
            "client = sys.modules['warm_python'] = importlib.util.module_from_spec(spec)  # for its dataclasses\n"
            "spec.loader.exec_module(client)\n"
            f"sys.exit(client.run_in_place_of_this_process([sys.executable, '-c', {code!r}, *sys.argv[1:]]))\n")
        stand_in.chmod(0o755)
    return folder
