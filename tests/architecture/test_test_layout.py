"""The tests follow the house: a folder per benchmark and per shared layer, the end-to-end tier in
tests/e2e/ (marked by the root conftest, nowhere else), the architecture tests together."""

import ast
from pathlib import Path
from types import SimpleNamespace

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


def test_the_longest_end_to_end_modules_are_handed_out_first_each_modules_tests_together_in_their_order():
    from tests import conftest

    assert all((TESTS / "e2e" / name).is_file() for name in conftest.LONGEST_FIRST), conftest.LONGEST_FIRST

    class Item:
        def __init__(self, path):
            self.path, self.marks = path, []

        def add_marker(self, mark):
            self.marks.append(mark)

    longest, second = (TESTS / "e2e" / name for name in conftest.LONGEST_FIRST[:2])
    few, many = TESTS / "e2e" / "test_few.py", TESTS / "core" / "test_many.py"
    items = [Item(path) for path in (few, many, second, many, longest, many, second, longest)]
    numbered = {id(item): index for index, item in enumerate(items)}
    without_workers = items[:]
    conftest.pytest_collection_modifyitems(SimpleNamespace(), without_workers)
    assert without_workers == items  # the order as given
    conftest.pytest_collection_modifyitems(SimpleNamespace(workerinput={}), items)
    assert [item.path for item in items] == [longest, longest, second, second, many, many, many, few]
    assert all(numbered[id(a)] < numbered[id(b)] for a, b in zip(items, items[1:]) if a.path == b.path)
    assert [bool(item.marks) for item in items] == [True, True, True, True, False, False, False, True]
