"""The code follows the project's lint rules (ruff.toml): pyflakes, pycodestyle, import order."""

import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]


def test_code_passes_the_lint_rules():
    completed = subprocess.run([sys.executable, "-m", "ruff", "check", "lmms_egoplan", "tests", "speed", "docs"],
                               cwd=CHECKOUT, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
