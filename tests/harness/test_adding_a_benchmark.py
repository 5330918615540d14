"""docs/development.md, "Adding a benchmark", followed with a throw-away sixth benchmark built in tmp_path (a few
lines of spec, one YAML per harness): its catalogue row and its line in the suite make it known wherever the suite
lists benchmarks (the tests' variables included), and lmms-eval and lm-eval index its YAMLs and build its tasks in
process, which score a document."""

import importlib
import json
import sys
import textwrap

import pytest

from lmms_egoplan import catalogue, suite
from tests.kit.benchmarks import benchmark_variables

# Step 2, its package: settings, a task spec and the Benchmark value (benchmark.py), and the classes the YAMLs name.
BENCHMARK_MODULE = '''
import json
from dataclasses import dataclass

from lmms_egoplan.catalogue import entry
from lmms_egoplan.harness.benchmark import Benchmark, LoadedDocs, Metric, TaskSpec
from lmms_egoplan.report.layout import ReportFace


@dataclass(frozen=True)
class SixthSettings:
    data_file: str = ""


def load_docs(context):
    return LoadedDocs(json.loads(open(context.settings.data_file).read()))


def process_results(doc, results, context):
    return {"exact": float(results[0].strip() == doc["answer"])}


SPEC = TaskSpec(load_docs=load_docs, doc_to_text=lambda doc, *args: doc["question"], doc_to_target="answer",
                process_results=process_results, metrics=(Metric("exact", "mean"),))
SIXTH = Benchmark(entry("sixth"), settings=SixthSettings, report_face=ReportFace(tables=()),
                  lmms_eval_tasks={"val": SPEC}, lm_eval_baselines={"blind": SPEC})
'''
HOLDERS = {
    "lmms_eval_tasks": "from lmms_egoplan.harness.lmms_eval_task import SuiteTask as Adapter",
    "text_baselines": "from lmms_egoplan.harness.lm_eval_task import SuiteBaseline as Adapter",
}
HOLDER = '''
{adapter}
from sixth.benchmark import SIXTH, SPEC


class Sixth(Adapter):
    BENCHMARK, SPEC = SIXTH, SPEC
'''
# Step 4, its YAMLs: one task for lmms-eval (tasks/sixth/), one baseline for lm-eval (lm_eval_tasks/sixth/).
YAMLS = {
    "tasks": ("sixth_val", "lmms_eval_tasks", "max_new_tokens"),
    "lm_eval_tasks": ("sixth_val_blind", "text_baselines", "max_gen_toks"),
}
YAML = '''
task: {task}
class: !function sixth.{module}.Sixth
test_split: test
output_type: generate_until
generation_kwargs:
  {limit}: 8
metadata:
  version: 1
'''


@pytest.fixture
def sixth(tmp_path, monkeypatch):
    """The sixth benchmark written as docs/development.md says, importable from tmp_path, with its catalogue row
    and its line in the suite (the two files a new benchmark adds to; here patched, not written)."""
    package = tmp_path / "sixth"
    package.mkdir()
    (package / "__init__.py").write_text('"""Sixth: a throw-away benchmark."""\n')
    (package / "benchmark.py").write_text(BENCHMARK_MODULE)
    for module, adapter in HOLDERS.items():
        (package / f"{module}.py").write_text(HOLDER.format(adapter=adapter))
    for checkout_folder, (task, module, limit) in YAMLS.items():
        folder = tmp_path / f"checkout_{checkout_folder}"
        (folder / "sixth").mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "sixth" / f"{task}.yaml").write_text(textwrap.dedent(YAML.format(task=task, module=module,
                                                                                    limit=limit)).lstrip())
    data = tmp_path / "sixth.json"
    data.write_text(json.dumps([{"question": "Which colour?", "answer": "red"}]))
    monkeypatch.syspath_prepend(str(tmp_path))
    # Step 1, its catalogue row; the YAML folders are the checkout's (here: tmp_path's, as packages).
    row = catalogue.Entry("sixth", "Sixth", "SIXTH", ("sixth_",))
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
    assert len(suite.report_faces()) == len(catalogue.CATALOGUE) == 6
    assert suite.rubrics().keys() == {name for row in catalogue.CATALOGUE for name in row.rubrics}  # it has none
    assert benchmark_variables(["SIXTH_DATA_FILE", "HOME"]) == ["SIXTH_DATA_FILE"]  # the tests clear its settings


def test_lmms_eval_indexes_its_yaml_and_builds_and_scores_its_task_in_process(sixth):
    from lmms_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(sixth / "checkout_tasks"), include_defaults=False, model_name="dummy")
    assert "sixth_val" in manager.task_index
    task = manager.load_task_or_group(["sixth_val"])["sixth_val"]
    assert task.BENCHMARK is suite.benchmark("sixth")
    [doc] = task.test_docs()
    assert task.doc_to_text(doc) == "Which colour?"
    assert task.process_results(doc, ["red"])["exact"] == 1.0 and task.process_results(doc, ["blue"])["exact"] == 0.0


def test_lm_eval_indexes_its_yaml_and_builds_and_scores_its_baseline_in_process(sixth):
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(sixth / "checkout_lm_eval_tasks"), include_defaults=False)
    assert "sixth_val_blind" in manager.task_index
    task = manager.load_task_or_group(["sixth_val_blind"])["sixth_val_blind"]
    assert task.BENCHMARK is suite.benchmark("sixth")
    [doc] = task.test_docs()
    assert task.doc_to_text(doc) == "Which colour?"
    assert task.process_results(doc, ["red"])["exact"] == 1.0 and task.process_results(doc, ["blue"])["exact"] == 0.0
