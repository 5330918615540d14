"""The benchmark registry agrees with what it lists: task YAMLs, settings prefixes, rubrics, demo
writers, rejudge groups and report tables."""

import importlib
from pathlib import Path

import yaml

from lmms_egoplan import registry
from lmms_egoplan.report.layout import BENCHMARKS as REPORT_TABLES

CHECKOUT = Path(__file__).resolve().parents[1]


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


def declared_names(folder: Path) -> set[str]:
    """The task and group names the YAMLs under ``folder`` declare."""
    names = set()
    for path in folder.rglob("*.yaml"):
        config = yaml.load(path.read_text(), Loader=_Loader) or {}
        names.update(str(config[key]) for key in ("task", "group") if isinstance(config.get(key), str))
    return names


def test_each_benchmark_lists_tasks_its_own_folders_declare():
    for entry in registry.BENCHMARKS:
        assert set(entry.tasks) <= declared_names(CHECKOUT / "tasks" / entry.name), entry.name
        assert set(entry.lm_eval_tasks) <= declared_names(CHECKOUT / "lm_eval_tasks" / entry.name), entry.name


def test_settings_prefixes_rubrics_and_references_are_the_benchmarks_own():
    for entry in registry.BENCHMARKS:
        assert importlib.import_module(f"lmms_egoplan.{entry.name}.data").ENV_PREFIX == entry.settings_prefix
        task_module = importlib.import_module(entry.task_module)
        assert getattr(task_module, "RUBRIC_NAME", None) == entry.rubric, entry.name
        assert callable(registry.load(entry.demo_suite))
        assert all(callable(registry.load(reference)) for reference in entry.rejudge_groups.values())


def test_the_report_has_a_table_for_each_registered_one_and_no_other():
    registered = [table for entry in registry.BENCHMARKS for table in entry.report_tables]
    assert sorted(registered) == sorted(table.key for table in REPORT_TABLES)


def test_an_unknown_benchmark_is_an_error_naming_the_known_ones():
    import pytest

    with pytest.raises(KeyError, match="known: egoplan, egothink, egointent, actplan"):
        registry.benchmark("egoschema")
    assert registry.benchmark("actplan").settings_prefix == "ACTPLAN"
