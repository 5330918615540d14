"""The tests follow the house: a folder per benchmark and per shared layer, the end-to-end tier in
tests/e2e/ (marked by the root conftest, nowhere else), the architecture tests together."""

import ast
from pathlib import Path

from lmms_egoplan.catalogue import CATALOGUE

TESTS = Path(__file__).resolve().parents[1]
LAYERS = {"core", "judge", "models", "harness", "report"}
# fixtures: test data; kit: test-only code (not in the wheel); gpu: the checks that need CUDA (speed/gpu_check.py)
OTHERS = {"e2e", "architecture", "fixtures", "kit", "gpu"}


def test_a_folder_per_benchmark_and_per_shared_layer_and_nothing_else():
    folders = {path.name for path in TESTS.iterdir() if path.is_dir() and not path.name.startswith((".", "__"))}
    assert folders == {*(b.name for b in CATALOGUE), *LAYERS, *OTHERS}


def test_only_the_e2e_folder_is_end_to_end_and_it_is_so_by_its_place():
    for path in TESTS.rglob("*.py"):
        marks = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(node, ast.Attribute) and node.attr == "e2e" and ast.unparse(node.value) == "pytest.mark"]
        assert marks == [] or path == TESTS / "conftest.py", f"{path.relative_to(TESTS)} marks e2e itself"


def test_every_test_module_says_what_it_tests():
    for path in TESTS.rglob("test_*.py"):
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path.relative_to(TESTS)
