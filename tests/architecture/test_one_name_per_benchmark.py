"""One name per benchmark: its lmms-eval YAML folder, its code folder, its tests folder and its demo module carry the
catalogue's name of it (and its lm-eval YAML folder, where it has text-only baselines); no tree holds a benchmark
folder the catalogue does not name. The environment prefixes users set stay as they are (``EGOPLAN2_``)."""

from pathlib import Path

from lmms_egoplan.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
SHARED_CODE = {"core", "judge", "compat", "contract", "harness", "models", "report", "demo", "__pycache__"}
SHARED_TESTS = {"core", "judge", "models", "harness", "report", "e2e", "architecture", "fixtures", "kit", "gpu",
                "__pycache__"}


def benchmark_names() -> set[str]:
    return {entry.name for entry in CATALOGUE}


def folders(path: Path) -> set[str]:
    return {child.name for child in path.iterdir() if child.is_dir()}


def test_every_tree_names_each_benchmark_as_the_catalogue_does():
    names = benchmark_names()
    assert folders(ROOT / "tasks") == names
    assert folders(ROOT / "lmms_egoplan") - SHARED_CODE == names
    assert folders(ROOT / "tests") - SHARED_TESTS == names
    assert {path.stem for path in (ROOT / "lmms_egoplan" / "demo").glob("*.py")} - {"__init__", "smoke"} == names
    assert folders(ROOT / "lm_eval_tasks") - {"__pycache__"} <= names

