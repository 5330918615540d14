"""The list of the benchmarks is in one place, the catalogue (``lmms_egoplan.catalogue``): the tests' lists derive
from it, and a benchmark's environment variables are all ones the tests clear (``tests/conftest.py``), so that a
new benchmark's cannot leak into the tests unnoticed."""

import ast
import dataclasses
from pathlib import Path

from lmms_egoplan import catalogue, suite
from lmms_egoplan.core.settings import env_var
from tests.kit.benchmarks import benchmark_variables

PACKAGE = Path(suite.__file__).parent


def test_every_setting_of_every_benchmark_is_a_variable_the_tests_clear():
    for benchmark in suite.BENCHMARKS:
        prefix = benchmark.entry.env_prefix
        variables = [env_var(prefix, field.name) for field in dataclasses.fields(benchmark.settings)]
        assert variables and benchmark_variables(variables) == variables, benchmark.name


def test_the_variables_the_tests_clear_are_the_catalogues_prefixes_and_no_others(monkeypatch):
    names = ["EGOPLAN_ANNOTATION_DIR", "EGOTHINK_JUDGE_MODEL", "HOME", "LMMS_EGOPLAN_TEST_CACHE", "EGOPLANNER"]
    assert benchmark_variables(names) == ["EGOPLAN_ANNOTATION_DIR", "EGOTHINK_JUDGE_MODEL"]
    sixth = catalogue.Entry("sixth", "Sixth", "SIXTH", ("sixth",))
    assert benchmark_variables(["SIXTH_DATA_FILE"]) == []
    monkeypatch.setattr(catalogue, "CATALOGUE", (*catalogue.CATALOGUE, sixth))  # its row: its variables with it
    assert benchmark_variables(["SIXTH_DATA_FILE", "HOME"]) == ["SIXTH_DATA_FILE"]


def test_no_benchmark_reads_the_environment_but_through_its_settings():
    """A benchmark's only variables are its settings' (``<env_prefix>_<SETTING>``, resolved by the core): none of
    its modules reads ``os.environ`` or ``os.getenv`` itself."""
    for row in catalogue.CATALOGUE:
        for path in sorted((PACKAGE / row.name).rglob("*.py")):
            tree = ast.parse(path.read_text())
            read = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Attribute, ast.Name))
                    and (node.attr if isinstance(node, ast.Attribute) else node.id) in ("environ", "getenv")]
            assert read == [], path.relative_to(PACKAGE.parent)


def test_each_benchmark_of_the_catalogue_has_its_demo_in_the_catalogues_order():
    from lmms_egoplan.demo.smoke import suites

    assert list(suites()) == [row.name for row in catalogue.CATALOGUE]
