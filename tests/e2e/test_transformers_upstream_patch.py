"""docs/upstream/transformers/: the transformers patch of the suite's packed vision attention applies to the installed
transformers 5.24.0 (a scratch copy in transformers' repository layout, ``src/transformers``) and its own test passes
there; unpatched, that test cannot import the helper it tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

ROOT = Path(__file__).resolve().parents[2]
PATCH = ROOT / "docs" / "upstream" / "transformers" / "qwen-vl-packed-vision-attention.patch"
PATCH_TEST = "tests/utils/test_packed_segment_attention.py"


def scratch_transformers(folder: Path) -> Path:
    """The installed transformers under ``folder/src/transformers``: hard links (the package is 130 MB), the files the
    patch changes copied, so that applying it leaves the installed ones as they are."""
    installed = Path(transformers.__file__).parent
    shutil.copytree(installed, folder / "src" / "transformers", copy_function=os.link,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for line in PATCH.read_text().splitlines():
        if line.startswith("--- a/src/"):
            changed = folder / line.removeprefix("--- a/")
            changed.unlink()
            shutil.copy2(installed / changed.relative_to(folder / "src" / "transformers"), changed)
    return folder


def run_patch_test(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", PATCH_TEST], cwd=folder,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(folder / "src"), "HF_HUB_OFFLINE": "1"})


@pytest.mark.skipif(transformers.__version__ != "5.24.0", reason="the patch is against transformers 5.24.0")
def test_the_transformers_patch_applies_and_its_test_passes_patched_only(tmp_path):
    folder = scratch_transformers(tmp_path)
    (folder / "tests" / "utils").mkdir(parents=True)
    (folder / PATCH_TEST).write_text(_added_test())
    unpatched = run_patch_test(folder)
    assert unpatched.returncode != 0 and "packed_segment_attention" in unpatched.stdout + unpatched.stderr
    (folder / PATCH_TEST).unlink()
    for check in (["--check"], []):
        applied = subprocess.run(["git", "apply", *check, str(PATCH)], cwd=folder, capture_output=True, text=True)
        assert applied.returncode == 0, applied.stderr
    patched = run_patch_test(folder)
    assert patched.returncode == 0, (patched.stdout + patched.stderr)[-3000:]
    assert "3 passed" in patched.stdout
    installed = Path(transformers.__file__).parent / "vision_utils.py"
    assert "packed_segment_attention" not in installed.read_text()  # the installed package is untouched


def _added_test() -> str:
    """The test file the patch adds, as its added lines."""
    text = PATCH.read_text().split(f"+++ b/{PATCH_TEST}\n", 1)[1]
    return "".join(line[1:] + "\n" for line in text.splitlines() if line.startswith("+"))
