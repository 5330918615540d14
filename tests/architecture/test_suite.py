"""The catalogue (the benchmarks as data) and the suite (the benchmarks as values, by plain import) agree with
each other and with what they name: the tasks the YAML folders declare, rubrics, rejudge groups, report faces
and commands; importing the suite loads no harness, and importing any module of the package does nothing
(tests/architecture/test_imports.py: nothing shared names a benchmark)."""

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan import catalogue, suite
from lmms_egoplan.report.layout import ReportFace

CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGE = CHECKOUT / "lmms_egoplan"


def test_each_benchmark_has_the_tasks_its_yaml_folders_declare_that_no_group_includes():
    assert {entry.name: entry.tasks for entry in catalogue.CATALOGUE} == {
        "egoplan": ("egoplan_test", "egoplan_val", "egoplan_val_gen"), "egothink": ("ego_think",),
        "egointent": ("egointent",), "actplan": ("actplan1k", "actplan1k_text_only"),
        "egoplan_bench2": ("egoplan_bench2", "egoplan_bench2_likelihood"), "cosmos_reason1": ("cosmos_reason1",),
        "robovqa": ("robovqa",)}
    assert {entry.name: entry.lm_eval_tasks for entry in catalogue.CATALOGUE} == {
        "egoplan": ("egoplan_test_blind", "egoplan_val_blind", "egoplan_val_narrated"),
        "egothink": ("ego_think_blind",),
        "egointent": (), "actplan": ("actplan1k_text_only_lm",), "egoplan_bench2": (), "cosmos_reason1": (),
        "robovqa": ()}


def test_every_task_a_benchmark_declares_starts_with_one_of_its_task_prefixes():
    for entry in catalogue.CATALOGUE:
        for folder in (CHECKOUT / "tasks" / entry.name, CHECKOUT / "lm_eval_tasks" / entry.name):
            declared = [name for path in folder.glob("*.yaml") for name in catalogue.declared_tasks(folder)]
            assert all(name.startswith(entry.task_prefixes) for name in declared), (entry.name, declared)


def test_a_group_and_what_it_includes_are_read_from_a_folder(tmp_path):
    """A group's members (names, or inline configs) are not listed; templates are not tasks."""
    for name, text in {"group.yaml": "group: bench\ntask:\n  - bench_a\n  - task: bench_b\n",
                       "a.yaml": "task: bench_a\nclass: !function module.Class\n", "b.yaml": "task: bench_b\n",
                       "alone.yaml": "task: bench_alone\n", "_template_yaml": "task: not_a_task\n"}.items():
        (tmp_path / name).write_text(text)
    assert catalogue.declared_tasks(tmp_path) == ("bench", "bench_alone")
    assert catalogue.declared_tasks(tmp_path / "missing") == ()


def test_the_suite_holds_one_value_per_catalogue_row_in_its_order():
    assert [benchmark.entry for benchmark in suite.BENCHMARKS] == list(catalogue.CATALOGUE)
    for benchmark in suite.BENCHMARKS:
        assert dataclasses.is_dataclass(benchmark.settings), benchmark.name
        assert benchmark.settings.__module__.startswith(f"lmms_egoplan.{benchmark.name}."), benchmark.name


def test_rubrics_and_rejudge_groups_are_the_benchmarks_own():
    for benchmark in suite.BENCHMARKS:
        assert set(benchmark.rubrics) == set(benchmark.entry.rubrics), benchmark.name
        assert all(catalogue.rubric_name(name) == name for name in benchmark.rubrics), benchmark.name
        assert all(callable(scores) and prefix.startswith(benchmark.entry.task_prefixes)
                   for prefix, scores in benchmark.rejudge_groups.items()), benchmark.name
    assert catalogue.rubric_name("lmms_egoplan.egothink:RUBRIC") == "egothink"  # as logs written before names say
    assert catalogue.rubric_name("lmms_egoplan.egointent:RUBRIC") == "egointent"
    assert catalogue.rubric_name("not-ours") is None
    assert suite.rubrics().keys() == {name for row in catalogue.CATALOGUE for name in row.rubrics}


def test_a_benchmark_value_holds_the_rubrics_its_catalogue_row_names():
    egothink = suite.benchmark("egothink")
    with pytest.raises(ValueError, match="rubrics \\[\\] are not its catalogue row's \\['egothink'\\]"):
        dataclasses.replace(egothink, rubrics={})


def test_every_benchmark_has_a_face_with_a_row_for_each_task_it_declares_and_only_its_own():
    faces = suite.report_faces()
    assert len(faces) == len(suite.BENCHMARKS) and all(isinstance(face, ReportFace) for face in faces)
    for benchmark, face in zip(suite.BENCHMARKS, faces):
        assert face.tables and face.published, benchmark.name
        rows = {task for table in face.tables for task in table.tasks}
        assert rows == {*benchmark.entry.tasks, *benchmark.entry.lm_eval_tasks}, benchmark.name
    keys = [table.key for face in faces for table in face.tables]
    assert len(keys) == len(set(keys))  # one CSV per table


def test_the_benchmarks_commands_are_named_once_and_come_from_their_folders():
    commands = suite.commands()
    assert list(commands) == ["egointent-check", "actplan-score", "actplan-train-bleurt"]
    for benchmark in suite.BENCHMARKS:
        assert all(add.__module__ == f"lmms_egoplan.{benchmark.name}.commands"
                   for _, add in benchmark.commands.values()), benchmark.name
    assert len(commands) == sum(len(benchmark.commands) for benchmark in suite.BENCHMARKS)  # none hides another's


def test_an_unknown_benchmark_is_an_error_naming_the_known_ones():
    with pytest.raises(KeyError, match="known: egoplan, egothink, egointent, actplan"):
        suite.benchmark("egoschema")
    with pytest.raises(KeyError, match="known: egoplan, egothink, egointent, actplan"):
        catalogue.entry("egoschema")
    assert catalogue.entry("actplan").tasks == ("actplan1k", "actplan1k_text_only")


def test_importing_the_suite_loads_no_harness():
    script = ("import sys, lmms_egoplan.suite\n"
              "harnesses = {'lmms_eval', 'lm_eval', 'torch', 'transformers'}\n"
              "print(sorted(harnesses & set(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_the_rubrics_module_keeps_no_table_to_fill():
    """Rubrics are values handed to whoever reads judged items: ``judge/rubrics.py`` holds no module-level
    mutable state (no dict, list or set at its top level), and nothing there registers one."""
    from lmms_egoplan.judge import rubrics

    tree = ast.parse(Path(rubrics.__file__).read_text())
    mutable = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
    assigned = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))]
    tables = [ast.unparse(node) for node in assigned if isinstance(node.value, mutable) or (
        isinstance(node.value, ast.Call) and ast.unparse(node.value.func) in ("dict", "list", "set"))]
    assert tables == []
    assert not [name for name in vars(rubrics) if name.startswith("register")]


def test_each_benchmarks_report_face_reads_its_judged_items_with_its_rubrics():
    for benchmark in suite.BENCHMARKS:
        assert benchmark.report_face.rubrics == dict(benchmark.rubrics), benchmark.name
    assert [face.rubrics for face in suite.report_faces()] == [dict(b.rubrics) for b in suite.BENCHMARKS]


def module_level_calls(path: Path) -> list[str]:
    """The statements of a module's top level (and of its top-level ``if``/``try`` blocks) that are a bare call:
    ``f(...)`` run for its effect when the module is imported. ``if __name__ == "__main__":`` blocks are a
    script's, not an import's."""
    found, body = [], list(ast.parse(path.read_text()).body)
    while body:
        node = body.pop(0)
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            body.extend([*node.body, *node.orelse, *getattr(node, "finalbody", []),
                         *(s for h in getattr(node, "handlers", []) for s in h.body)])
        elif isinstance(node, ast.Expr) and isinstance(node.value, (ast.Call, ast.Await)):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_importing_does_nothing_no_module_makes_a_bare_call_at_its_top_level():
    calls = {str(path.relative_to(PACKAGE)): module_level_calls(path) for path in sorted(PACKAGE.rglob("*.py"))}
    assert {path: found for path, found in calls.items() if found} == {}


def test_the_scan_sees_bare_calls_in_blocks_but_not_values_or_scripts(tmp_path):
    source = tmp_path / "module.py"
    source.write_text('VALUE = build()\nregister(VALUE)\ntry:\n    import x\nexcept ImportError:\n    warn()\n'
                      'if __name__ == "__main__":\n    main()\n')
    assert [line.split(": ", 1)[1] for line in module_level_calls(source)] == ["register(VALUE)", "warn()"]


def yaml_keys(folder: Path, key: str) -> dict[Path, str]:
    """The value of a top-level ``key`` in each YAML of a task folder that sets it (templates included)."""
    found = {path: re.findall(rf"^{key}: (?:!function )?([\w.]+)$", path.read_text(), re.MULTILINE)
             for path in folder.iterdir() if path.is_file() and path.suffix not in (".md", ".py")}
    return {path: values[0] for path, values in found.items() if values}


def task_folders() -> list[Path]:
    return sorted(path for tree in ("tasks", "lm_eval_tasks") for path in (CHECKOUT / tree).iterdir() if path.is_dir())


def test_the_yamls_keep_only_configuration_the_spec_they_name_holds_the_hooks():
    """Hooks and metric lists come from the spec the YAML names: no ``!function`` but ``class:`` and group
    aggregations."""
    from lmms_egoplan.contract.benchmark import TaskSpec

    for folder in task_folders():
        assert yaml_keys(folder, "task_spec"), folder
        for path in (path for path in folder.iterdir() if path.is_file() and path.suffix not in (".md", ".py")):
            text = path.read_text()
            assert not re.findall(rf"^({'|'.join(TaskSpec.KEYS)}):", text, re.MULTILINE), path
            functions = re.findall(r"^\s*(?:- )?(\w+): !function", text, re.MULTILINE)
            assert set(functions) <= {"class", "benchmark", "aggregation"}, path
            assert "aggregation" not in functions or "aggregate_metric_list:" in text, path  # a group's only


def test_every_yaml_names_its_harness_one_adapter_and_no_benchmark_holds_a_class_of_its_own():
    """One class per harness (issue 75): every lmms-eval YAML's ``class:`` is ``SuiteTask``, every lm-eval YAML's
    ``SuiteBaseline``; a YAML names a benchmark and a spec beside it, in the same file."""
    adapters = {"tasks": "lmms_egoplan.harness.lmms_eval_task.SuiteTask",
                "lm_eval_tasks": "lmms_egoplan.harness.lm_eval_task.SuiteBaseline"}
    for folder in task_folders():
        classes, benchmarks, specs = (yaml_keys(folder, key) for key in ("class", "benchmark", "task_spec"))
        assert set(classes.values()) == {adapters[folder.parent.name]}, folder
        assert set(classes) == set(benchmarks) == set(specs), folder
    package = CHECKOUT / "lmms_egoplan"
    assert not [*package.glob("*/lmms_eval_tasks.py"), *package.glob("*/text_baselines.py")]


def test_each_benchmark_spec_is_named_by_a_yaml_and_each_yaml_names_one():
    import importlib

    from lmms_egoplan import suite
    from lmms_egoplan.harness.compiled_task import named_task

    named = set()
    for folder in task_folders():
        harness_specs = "lmms_eval_tasks" if folder.parent.name == "tasks" else "lm_eval_baselines"
        for path, spec in yaml_keys(folder, "task_spec").items():
            module, _, value = yaml_keys(folder, "benchmark")[path].rpartition(".")
            benchmark = getattr(importlib.import_module(module), value)
            config = {"task": path.name, "benchmark": benchmark, "task_spec": spec}
            benchmark, spec = named_task(config, harness_specs)
            named.add((benchmark.name, id(spec), harness_specs))
    specs = {(benchmark.name, id(spec), harness_specs) for benchmark in suite.BENCHMARKS
             for harness_specs in ("lmms_eval_tasks", "lm_eval_baselines")
             for spec in getattr(benchmark, harness_specs).values()}
    assert len(specs) == 16 and named == specs
