"""docs/development.md, "Adding a benchmark", followed with a throw-away sixth benchmark built in tmp_path (a few
lines of spec, one YAML per harness: ``tests/kit/sixth_benchmark.py``): its catalogue row and its line in the suite
make it known wherever the suite lists benchmarks (the tests' variables included), and lmms-eval and lm-eval index
its YAMLs and build its tasks in process, which score a document. tests/e2e/test_adding_a_benchmark.py runs it
through both harnesses' CLIs."""

import importlib
import sys

import pytest

from lmms_egoplan import catalogue, suite
from tests.kit.benchmarks import benchmark_variables
from tests.kit.sixth_benchmark import ENV_PREFIX, NAME, TASK_PREFIXES, TITLE, write_sixth_benchmark


@pytest.fixture
def sixth(tmp_path, monkeypatch):
    """The sixth benchmark, importable from tmp_path, with its catalogue row and its line in the suite (the two
    files a new benchmark adds to; here patched, not written)."""
    data = write_sixth_benchmark(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # Step 1, its catalogue row; the YAML folders are the checkout's (here: tmp_path's, as packages).
    row = catalogue.Entry(NAME, TITLE, ENV_PREFIX, TASK_PREFIXES)
    monkeypatch.setattr(catalogue, "CATALOGUE", (*catalogue.CATALOGUE, row))
    monkeypatch.setattr(catalogue, "LMMS_EVAL_TASKS", "checkout_tasks")
    monkeypatch.setattr(catalogue, "LM_EVAL_TASKS", "checkout_lm_eval_tasks")
    value = importlib.import_module("sixth.benchmark").SIXTH
    # Step 3, its line in the suite.
    monkeypatch.setattr(suite, "BENCHMARKS", (*suite.BENCHMARKS, value))
    monkeypatch.setenv("SIXTH_DATA_FILE", str(data))
    yield tmp_path
    for name in [name for name in sys.modules if name == "sixth" or name.startswith(("sixth.", "checkout_"))]:
        del sys.modules[name]


def test_its_row_and_its_line_make_it_known_wherever_the_suite_lists_benchmarks(sixth):
    value = suite.benchmark("sixth")
    assert value.entry is catalogue.entry("sixth") and value.name == "sixth"
    assert value.entry.tasks == ("sixth_val",) and value.entry.lm_eval_tasks == ("sixth_val_blind",)
    assert len(suite.report_faces()) == len(catalogue.CATALOGUE) == 8  # the suite's seven and the throw-away one
    assert suite.rubrics().keys() == {name for row in catalogue.CATALOGUE for name in row.rubrics}  # it has none
    assert benchmark_variables(["SIXTH_DATA_FILE", "HOME"]) == ["SIXTH_DATA_FILE"]  # the tests clear its settings


@pytest.mark.parametrize("harness, folder, task_name", [
    ("lmms_eval", "checkout_tasks", "sixth_val"), ("lm_eval", "checkout_lm_eval_tasks", "sixth_val_blind")])
def test_each_harness_indexes_its_yaml_and_builds_and_scores_its_task_in_process(sixth, harness, folder, task_name):
    """lmms-eval's task (its YAML under tasks/) and lm-eval's text baseline (under lm_eval_tasks/)."""
    if harness == "lmms_eval":
        from lmms_eval.tasks import TaskManager

        manager = TaskManager(include_path=str(sixth / folder), include_defaults=False, model_name="dummy")
    else:
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_path=str(sixth / folder), include_defaults=False)
    assert task_name in manager.task_index
    task = manager.load_task_or_group([task_name])[task_name]
    assert task.benchmark is suite.benchmark("sixth")
    doc, _ = task.test_docs()
    assert task.doc_to_text(doc) == "Which colour?"
    assert task.process_results(doc, ["A"])["exact"] == 1.0 and task.process_results(doc, ["B"])["exact"] == 0.0
