"""Compile, don't patch (issue 59, point 2): each adapter compiles a benchmark, its task spec and the YAML's config
into the whole config the harness's constructor takes once, so lmms-eval's and lm-eval's metric tables come from that
config alone; no module of the package writes them or rebinds a built task's hooks, and the context a hook gets holds
no reference to the adapter."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmms_egoplan.core.provenance import data_source
from lmms_egoplan.demo.egointent import write_dataset
from lmms_egoplan.harness.lm_eval_task import SuiteBaseline
from lmms_egoplan.harness.lmms_eval_task import SuiteTask

PACKAGE = Path(__file__).resolve().parents[2] / "lmms_egoplan"
CHECKOUT = PACKAGE.parent
# The harnesses' private metric tables (lmms-eval 0.7 and lm-eval 0.4 fill them from the config's metric_list).
PRIVATE_TABLES = {"_metric_fn_list", "_aggregation_list", "_higher_is_better", "_metric_fn_kwargs"}
MUTATORS = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}


def writes_to_private_tables(tree: ast.AST) -> list[int]:
    """Lines that assign, subscript-assign, delete, mutate or ``setattr`` one of the tables."""
    def table(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr in PRIVATE_TABLES

    lines = []
    for node in ast.walk(tree):
        stored = isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del))
        if stored and (table(node) or isinstance(node, ast.Subscript) and table(node.value)):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS \
                and table(node.func.value):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and any(isinstance(a, ast.Constant) and a.value in PRIVATE_TABLES for a in node.args):
            lines.append(node.lineno)
    return lines


def test_no_module_of_the_package_writes_the_harnesses_private_metric_tables():
    assert writes_to_private_tables(ast.parse("task._aggregation_list['x'] = f\nt._metric_fn_list.update({})\n"
                                              "setattr(t, '_higher_is_better', {})")) == [1, 2, 3]
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := writes_to_private_tables(ast.parse(path.read_text())))}
    assert found == {}


def adapters_reachable_from(root: object, depth: int = 4) -> list[str]:
    """The paths from ``root`` through object attributes, containers and bound arguments to a harness adapter."""
    found, seen, frontier = [], {id(root)}, [(root, "context")]
    for _ in range(depth):
        following = []
        for value, path in frontier:
            if isinstance(value, (SuiteTask, SuiteBaseline)):
                found.append(path)
                continue
            children = vars(value).items() if hasattr(value, "__dict__") and not isinstance(value, type) else ()
            if isinstance(value, dict):
                children = value.items()
            elif isinstance(value, (list, tuple, set, frozenset)):
                children = enumerate(value)
            for key, child in children:
                if id(child) not in seen and not callable(child) or isinstance(child, (SuiteTask, SuiteBaseline)):
                    seen.add(id(child))
                    following.append((child, f"{path}.{key}"))
        frontier = following
    return found


def constructor_calls(monkeypatch, harness_class: type) -> list[dict]:
    """The configs the harness's task constructor is called with, from now on."""
    calls, constructor = [], harness_class.__init__

    def spy(self, *args, config=None, **kwargs):
        calls.append(config)
        constructor(self, *args, config=config, **kwargs)

    monkeypatch.setattr(harness_class, "__init__", spy)
    return calls


def assert_built_from_the_compiled_config(task, compiled_config: dict) -> None:
    """The task's metrics, aggregations and scoring are the compiled config's, to the object."""
    assert task.config.metric_list is compiled_config["metric_list"]
    names = [metric["metric"] for metric in compiled_config["metric_list"]]
    assert list(task.aggregation()) == names and list(task.higher_is_better()) == names
    for metric in compiled_config["metric_list"]:
        registered = isinstance(metric["aggregation"], str)
        assert registered or task.aggregation()[metric["metric"]] is metric["aggregation"], metric["metric"]
        assert task.higher_is_better()[metric["metric"]] == metric["higher_is_better"]
    assert task.config.process_results is task.compiled.scoring is compiled_config["process_results"]
    assert task.compiled.scoring.keywords["context"] is task.compiled.context
    assert adapters_reachable_from(task.compiled.context) == []
    assert adapters_reachable_from(SimpleNamespace(judging=SimpleNamespace(task=task))) == ["context.judging.task"]


def test_lmms_eval_builds_egointent_once_from_its_compiled_config_breakdowns_and_judge_included(monkeypatch, tmp_path):
    """EgoIntent: judged metrics and breakdowns the documents decide (scenarios), all in the config lmms-eval's
    constructor gets, once."""
    from lmms_eval.api.task import ConfigurableMessagesTask
    from lmms_eval.tasks import TaskManager

    annotations = write_dataset(tmp_path / "data")
    for name, value in {"EGOINTENT_ANNOTATIONS": str(annotations),
                        "EGOINTENT_JUDGE_BASE_URL": "http://127.0.0.1:9/v1", "EGOINTENT_JUDGE_MODEL": "judge",
                        "EGOINTENT_JUDGE_CACHE_DIR": "none", "EGOINTENT_JUDGE_PREFLIGHT": "false"}.items():
        monkeypatch.setenv(name, value)
    calls = constructor_calls(monkeypatch, ConfigurableMessagesTask)
    task = TaskManager(include_path=str(CHECKOUT / "tasks"),
                       include_defaults=False).load_task_or_group(["egointent"])["egointent"]
    assert len(calls) == 1
    names = [metric["metric"] for metric in calls[0]["metric_list"]]
    assert {"overall", "judged", "failed", "indoor", "outdoor", "failed_requests"} <= set(names)
    assert any(name.startswith("scenario_") for name in names)  # the documents' scenarios
    assert_built_from_the_compiled_config(task, calls[0])
    assert task.judging is task.compiled.context.judging and task.config.metadata["judge_model"] == "judge"
    recorded = task.config.metadata["data_read_from"]  # where the documents came from, hashed (issue 65)
    assert recorded == data_source([str(annotations)]) and len(recorded) == 1 and len(recorded[0]["sha256"]) == 64


@pytest.mark.parametrize("task_name", ["actplan1k_text_only_lm"])
def test_lm_eval_builds_a_baseline_once_from_its_compiled_config(monkeypatch, tmp_path, task_name):
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.tasks import TaskManager

    from lmms_egoplan.demo.actplan import write_release_dataset

    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(write_release_dataset(tmp_path / "data")))
    calls = constructor_calls(monkeypatch, ConfigurableTask)
    task = TaskManager(include_path=str(CHECKOUT / "lm_eval_tasks"),
                       include_defaults=False).load_task_or_group([task_name])[task_name]
    assert len(calls) == 1
    assert_built_from_the_compiled_config(task, calls[0])


YAML_NAMING = "task: my_task\nclass: !function {adapter}\n{naming}test_split: test\noutput_type: generate_until\n"


@pytest.mark.parametrize("naming, message", [
    ("", r"the YAML of task my_task{path} names no benchmark: set `benchmark: !function lmms_egoplan.<benchmark>"),
    ("benchmark: lmms_egoplan.actplan.benchmark.ACTPLAN\ntask_spec: text_only\n",
     r"the YAML of task my_task{path} `benchmark:` is 'lmms_egoplan.actplan.benchmark.ACTPLAN', not a Benchmark value "
     r"\(lmms_egoplan.contract.benchmark.Benchmark\): set `benchmark: !function lmms_egoplan.<benchmark>"),
    ("benchmark: !function lmms_egoplan.actplan.task.TEXT_ONLY\ntask_spec: text_only\n",
     r"`benchmark:` is TaskSpec\(.*\), not a Benchmark value"),
    ("benchmark: !function lmms_egoplan.actplan.benchmark.ACTPLAN\n",
     r"the YAML of task my_task{path}: names no task spec; set `task_spec:` to one of actplan's {specs}: {names}"),
    ("benchmark: !function lmms_egoplan.actplan.benchmark.ACTPLAN\ntask_spec: with_image\n",
     r"`task_spec: with_image` is not a task spec of it; set `task_spec:` to one of actplan's {specs}: {names}"),
], ids=["no benchmark", "a string", "not a Benchmark", "no spec", "unknown spec"])
@pytest.mark.parametrize("harness", ["lmms_eval", "lm_eval"])
def test_a_yaml_naming_no_spec_or_an_unknown_one_is_an_input_error_naming_the_yaml_and_the_key(
        tmp_path, harness, naming, message):
    """Through each harness's own task manager, before any document is read: lm-eval says where the YAML lies
    (lmms-eval hands a task no path, so the task's name says which YAML)."""
    import importlib

    from lmms_egoplan.core.errors import InputError

    yaml_path = tmp_path / "mine.yaml"
    if harness == "lmms_eval":
        adapter, specs, names, path = "lmms_egoplan.harness.lmms_eval_task.SuiteTask", "lmms_eval_tasks", \
            "text_only, with_images", ""
    else:
        adapter, specs, names, path = "lmms_egoplan.harness.lm_eval_task.SuiteBaseline", "lm_eval_baselines", \
            "text_only", rf" \({yaml_path}\)"
    yaml_path.write_text(YAML_NAMING.format(adapter=adapter, naming=naming))
    tasks = importlib.import_module(f"{harness}.tasks")
    manager = tasks.TaskManager(include_path=str(tmp_path), include_defaults=False)
    with pytest.raises(InputError, match=message.format(path=path, specs=specs, names=names)):
        tasks.get_task_dict(["my_task"], manager)
