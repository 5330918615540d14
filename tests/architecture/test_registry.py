"""The benchmark registry agrees with what it names: the tasks it reads from the YAML folders,
rubrics, demo writers, rejudge groups, report faces and commands; a benchmark is its folder and its
entry (tests/architecture/test_imports.py: nothing shared names one)."""

import importlib
from pathlib import Path

import pytest

from lmms_egoplan import registry
from lmms_egoplan.report.layout import ReportFace

CHECKOUT = Path(__file__).resolve().parents[2]


def test_each_benchmark_has_the_tasks_its_yaml_folders_declare_that_no_group_includes():
    assert {entry.name: entry.tasks for entry in registry.BENCHMARKS} == {
        "egoplan": ("egoplan_test", "egoplan_val", "egoplan_val_gen"), "egothink": ("ego_think",),
        "egointent": ("egointent",), "actplan": ("actplan1k", "actplan1k_text_only"),
        "egoplan_bench2": ("egoplan_bench2", "egoplan_bench2_likelihood")}
    assert {entry.name: entry.lm_eval_tasks for entry in registry.BENCHMARKS} == {
        "egoplan": ("egoplan_test_blind", "egoplan_val_blind", "egoplan_val_narrated"), "egothink": ("ego_think_blind",),
        "egointent": (), "actplan": ("actplan1k_text_only_lm",), "egoplan_bench2": ()}


def test_a_group_and_what_it_includes_are_read_from_a_folder(tmp_path):
    """A group's members (names, or inline configs) are not listed; templates are not tasks."""
    for name, text in {"group.yaml": "group: bench\ntask:\n  - bench_a\n  - task: bench_b\n",
                       "a.yaml": "task: bench_a\nclass: !function module.Class\n", "b.yaml": "task: bench_b\n",
                       "alone.yaml": "task: bench_alone\n", "_template_yaml": "task: not_a_task\n"}.items():
        (tmp_path / name).write_text(text)
    assert registry.declared_tasks(tmp_path) == ("bench", "bench_alone")
    assert registry.declared_tasks(tmp_path / "missing") == ()


def test_rubrics_demo_writers_and_rejudge_groups_are_the_benchmarks_own():
    for entry in registry.BENCHMARKS:
        task_module = importlib.import_module(entry.task_module)
        # the rubrics its task module registers (a setting may pick one): those the registry finds
        registered = set(getattr(task_module, "RUBRIC_NAMES", {}).values()) or {getattr(task_module, "RUBRIC_NAME", None)}
        assert registered == ({entry.rubric, *entry.other_rubrics} if entry.rubric else {None}), entry.name
        assert all(registry.find_rubric(name) == name for name in registered if name), entry.name
        assert all(callable(registry.load(reference)) for reference in entry.rejudge_groups.values())


def test_every_benchmark_has_a_face_with_a_row_for_each_task_it_declares_and_only_its_own():
    faces = registry.report_faces()
    assert len(faces) == len(registry.BENCHMARKS) and all(isinstance(face, ReportFace) for face in faces)
    for entry, face in zip(registry.BENCHMARKS, faces):
        assert face.tables and face.published, entry.name
        rows = {task for table in face.tables for task in table.tasks}
        assert rows == {*entry.tasks, *entry.lm_eval_tasks}, entry.name
    keys = [table.key for face in faces for table in face.tables]
    assert len(keys) == len(set(keys))  # one CSV per table


def test_the_benchmarks_commands_are_named_once_and_come_from_their_folders():
    commands = registry.commands()
    assert list(commands) == ["egointent-check", "actplan-score", "actplan-train-bleurt"]
    own = [entry for entry in registry.BENCHMARKS if entry.commands]
    assert all(entry.commands.startswith(f"lmms_egoplan.{entry.name}.commands:") for entry in own)
    assert len(commands) == sum(len(registry.load(entry.commands)) for entry in own)  # none hides another's


def test_an_unknown_benchmark_is_an_error_naming_the_known_ones():
    with pytest.raises(KeyError, match="known: egoplan, egothink, egointent, actplan"):
        registry.benchmark("egoschema")
    assert registry.benchmark("actplan").tasks == ("actplan1k", "actplan1k_text_only")
