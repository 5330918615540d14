"""A throw-away sixth benchmark, written as docs/development.md's "Adding a benchmark" says (a few lines of spec, one
YAML per harness), into a folder of its own: what ``tests/harness/test_adding_a_benchmark.py`` (in process) and
``tests/e2e/test_adding_a_benchmark.py`` (the real lmms-eval and lm_eval CLIs) run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

NAME, TITLE, ENV_PREFIX, TASK_PREFIXES = "sixth", "Sixth", "SIXTH", ("sixth_",)
DOCS = [{"question": "Which colour?", "answer": "A"}, {"question": "Which shape?", "answer": "B"}]

# Step 2, its package: settings, a task spec and the Benchmark value (benchmark.py).
BENCHMARK_MODULE = '''
import json
from dataclasses import dataclass

from lmms_egoplan.catalogue import entry
from lmms_egoplan.contract.benchmark import Benchmark, LoadedDocs, Metric, TaskSpec
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
SIXTH = Benchmark(entry("sixth"), settings=SixthSettings, load_report_face=lambda: ReportFace(tables=()),
                  lmms_eval_tasks={"val": SPEC}, lm_eval_baselines={"blind": SPEC})
'''
# Step 4, its YAMLs, each naming its harness's adapter, the Benchmark value and a spec of it: one task for lmms-eval
# (tasks/sixth/), one baseline for lm-eval (lm_eval_tasks/sixth/).
YAMLS = {
    "tasks": ("sixth_val", "lmms_egoplan.harness.lmms_eval_task.SuiteTask", "val", "max_new_tokens"),
    "lm_eval_tasks": ("sixth_val_blind", "lmms_egoplan.harness.lm_eval_task.SuiteBaseline", "blind", "max_gen_toks"),
}
YAML = '''
task: {task}
class: !function {adapter}
benchmark: !function sixth.benchmark.SIXTH
task_spec: {spec}
test_split: test
output_type: generate_until
generation_kwargs:
  {limit}: 8
metadata:
  version: 1
'''


# Step 1, its catalogue row, for a process started with the folder on PYTHONPATH (the in-process tests patch it).
SITECUSTOMIZE = f'''
from lmms_egoplan import catalogue

catalogue.CATALOGUE = (*catalogue.CATALOGUE, catalogue.Entry({NAME!r}, {TITLE!r}, {ENV_PREFIX!r}, {TASK_PREFIXES!r}))
'''


def write_sixth_benchmark(root: Path) -> Path:
    """Write the sixth benchmark under ``root``: its package ``sixth/``, its YAML folders as the checkout's packages
    (``checkout_tasks/sixth/``, ``checkout_lm_eval_tasks/sixth/``), its data ``sixth.json`` (its setting
    ``data_file``) and a ``sitecustomize.py`` adding its catalogue row; returns the data file."""
    package = root / NAME
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""Sixth: a throw-away benchmark."""\n')
    (package / "benchmark.py").write_text(BENCHMARK_MODULE)
    for checkout_folder, (task, adapter, spec, limit) in YAMLS.items():
        folder = root / f"checkout_{checkout_folder}"
        (folder / NAME).mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / NAME / f"{task}.yaml").write_text(textwrap.dedent(YAML.format(task=task, adapter=adapter,
                                                                                 spec=spec, limit=limit)).lstrip())
    (root / "sitecustomize.py").write_text(SITECUSTOMIZE)
    data = root / "sixth.json"
    data.write_text(json.dumps(DOCS))
    return data
