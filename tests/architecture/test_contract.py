"""The contract between a benchmark and the harness adapters is a floor of its own (``lmms_egoplan.contract``), and a
benchmark stands on it alone: its files import nothing of ``harness/``, its task module loads no harness, workaround,
report or judge engine, and an unjudged task loads no judge or report module (issue 59, point 1). Each import is
checked in a fresh interpreter, by what ``sys.modules`` holds."""

import subprocess
import sys

from tests.architecture.test_imports import BENCHMARKS, PACKAGE, import_graph, module_name

# The judge's values (its settings, the rubrics that read judged items, what a judgement is): no engine, no client.
JUDGE_VALUES = {"lmms_egoplan.judge", "lmms_egoplan.judge.protocol", "lmms_egoplan.judge.rubrics",
                "lmms_egoplan.judge.settings"}


def loaded_by(statement: str) -> set[str]:
    """The suite's modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(m for m in sys.modules if m.startswith('lmms_egoplan')))"
    return set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())


def under(modules: set[str], *folders: str) -> set[str]:
    return {m for m in modules if any(m == f"lmms_egoplan.{f}" or m.startswith(f"lmms_egoplan.{f}.") for f in folders)}


def judge_engine(modules: set[str]) -> set[str]:
    return under(modules, "judge") - JUDGE_VALUES


def test_the_contract_imports_no_harness_workaround_judge_engine_or_report():
    graph = import_graph()
    contract = {module for module in graph if module.startswith("lmms_egoplan.contract")}
    assert {f"lmms_egoplan.contract.{name}" for name in ("benchmark", "adapter", "judged")} <= contract
    imported = {target for module in contract for target in graph[module] if target in graph}
    assert under(imported, "harness", "compat", "report") | judge_engine(imported) == set()
    loaded = loaded_by("import " + ", ".join(sorted(contract)))
    assert under(loaded, "harness", "compat", "report") | judge_engine(loaded) == set()


def test_a_benchmarks_files_import_nothing_of_the_harness():
    graph = import_graph()
    files = [module_name(path) for name in BENCHMARKS for path in sorted((PACKAGE / name).rglob("*.py"))]
    assert "lmms_egoplan.egothink.task" in files and "lmms_egoplan.egointent.task" in files
    assert sorted((module, target) for module in files for target in under(graph[module], "harness")) == []


def test_a_task_module_loads_no_harness_workaround_report_or_judge_engine():
    for name in BENCHMARKS:
        loaded = loaded_by(f"import lmms_egoplan.{name}.task")
        assert under(loaded, "harness", "compat", "report") | judge_engine(loaded) == set(), name


def test_egoplans_task_module_loads_no_judge_module_at_all():
    assert under(loaded_by("import lmms_egoplan.egoplan.task"), "harness", "compat", "report", "judge") == set()


# The judge's engine: what sends requests to a judge and keeps its answers.
JUDGE_ENGINE = ("lmms_egoplan.judge.engine", "lmms_egoplan.judge.cache", "lmms_egoplan.judge.base",
                "lmms_egoplan.judge.factory", "lmms_egoplan.judge.providers")


def test_an_unjudged_task_loads_no_judge_and_no_report_module():
    """The lmms-eval adapter loads a judged task's judge (``harness.judged``) only for a judged spec, and a
    benchmark's report face is loaded when the report or the demo asks (``Benchmark.report_face``)."""
    loaded = loaded_by("from lmms_egoplan.harness.lmms_eval_task import SuiteTask\n"
                       "from lmms_egoplan.egoplan.benchmark import EGOPLAN\n"
                       "from lmms_egoplan.harness.compiled_task import named_task\n"
                       "named_task({'task': 'egoplan_val', 'benchmark': EGOPLAN, 'task_spec': 'validation'},"
                       " 'lmms_eval_tasks')")
    assert "lmms_egoplan.harness.lmms_eval_task" in loaded
    assert under(loaded, "judge", "report", "harness.judged", "harness.rejudge") == set()
    assert {m for m in loaded if m.startswith(JUDGE_ENGINE)} == set()


def test_the_workarounds_call_a_task_through_a_declared_interface():
    """``compat`` asks a task to check the run before the model loads through ``contract.adapter``'s Protocol,
    which lmms-eval's adapter declares, not by a method name looked up at run time."""
    from lmms_egoplan.contract.adapter import ChecksBeforeTheModel
    from lmms_egoplan.harness.lmms_eval_task import SuiteTask

    assert issubclass(SuiteTask, ChecksBeforeTheModel)
    source = (PACKAGE / "compat" / "tasks.py").read_text()
    assert "ChecksBeforeTheModel" in source and '"check_before_the_model"' not in source


# The lmms-eval adapter's jobs, one module each (issue 59, point 4).
ADAPTER_JOBS = {"lmms_eval_task": ("SuiteTask", "SuiteInstance"), "run_files": ("run_file", "run_stamp"),
                "backend_choice": ("resolve_backend", "refuse_what_cannot_serve"),
                "output_folder": ("claim_output_folder",)}


def test_the_lmms_eval_adapter_does_one_job_per_module():
    import ast

    defined = {job: {node.name for node in ast.parse((PACKAGE / "harness" / f"{job}.py").read_text()).body
                     if isinstance(node, (ast.FunctionDef, ast.ClassDef))} for job in ADAPTER_JOBS}
    for job, names in ADAPTER_JOBS.items():
        assert set(names) <= defined[job], job
        others = [name for other, other_names in ADAPTER_JOBS.items() if other != job for name in other_names]
        assert not set(others) & defined[job], job
