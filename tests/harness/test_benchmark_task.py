"""The harness adapters and settings: what every benchmark of the suite stands on."""

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from lmms_egoplan.compat.tasks import plugin_task_folders
from lmms_egoplan.core.settings import SettingsError, resolve_settings, setting


@dataclass(frozen=True)
class ExampleSettings:
    root: str = ""
    num_frames: int = setting(8, minimum=1)
    scale: float = setting(1.0, above=0, maximum=4)
    skip_missing: bool = False
    judge_model: Optional[str] = None
    max_side: Optional[int] = setting(None, minimum=1)
    mode: str = setting("fast", choices=("fast", "exact"))
    key_env: str = "EX_SECRET"


def resolve(metadata=None, environ=None):
    return resolve_settings(ExampleSettings, task="t", metadata=metadata, env_prefix="EX", environ=environ or {})


def test_settings_layer_defaults_yaml_then_environment():
    assert resolve() == ExampleSettings()
    assert resolve({"num_frames": 4, "version": 2}).num_frames == 4
    settings = resolve({"num_frames": 4, "root": "/yaml"},
                       {"EX_NUM_FRAMES": "16", "EX_SKIP_MISSING": "yes", "EX_SCALE": "0.5", "EX_JUDGE_MODEL": "none"})
    assert settings == ExampleSettings(root="/yaml", num_frames=16, scale=0.5, skip_missing=True, judge_model=None)


def test_unknown_metadata_key_names_the_task_and_the_known_settings():
    with pytest.raises(SettingsError, match=r"task t: unknown setting 'num_frame'.*num_frames"):
        resolve({"num_frame": 3})


@pytest.mark.parametrize("variable, value, expected", [
    ("EX_NUM_FRAMES", "eight", "an integer"),
    ("EX_SKIP_MISSING", "maybe", "true/false"),
    ("EX_SCALE", "big", "a number"),
])
def test_bad_environment_values_name_the_variable(variable, value, expected):
    with pytest.raises(SettingsError, match=f"environment variable {variable}: expected {expected}"):
        resolve(environ={variable: value})


def test_a_misspelt_environment_variable_is_an_error_naming_the_closest_setting():
    with pytest.raises(SettingsError, match=r"task t: environment variable EX_NUMFRAMES names no setting; did you "
                                            r"mean EX_NUM_FRAMES\?"):
        resolve(environ={"EX_NUMFRAMES": "16"})
    with pytest.raises(SettingsError, match=r"EX_ZZZ names no setting; the settings are EX_JUDGE_MODEL, EX_KEY_ENV"):
        resolve(environ={"EX_ZZZ": "1"})
    # A variable a setting names (where an API key is) is not a setting; other prefixes are not ours.
    assert resolve(environ={"EX_SECRET": "sk-1", "EXTRA_THING": "1", "OTHER_NUMFRAMES": "2"}) == ExampleSettings()


@pytest.mark.parametrize("variable, value, message", [
    ("EX_NUM_FRAMES", "0", "EX_NUM_FRAMES (metadata.num_frames) must be at least 1, got 0"),
    ("EX_MAX_SIDE", "-5", "EX_MAX_SIDE (metadata.max_side) must be at least 1, got -5"),
    ("EX_SCALE", "0", "EX_SCALE (metadata.scale) must be greater than 0, got 0.0"),
    ("EX_SCALE", "4.5", "EX_SCALE (metadata.scale) must be at most 4, got 4.5"),
    ("EX_MODE", "slow", "EX_MODE (metadata.mode) must be one of fast, exact, got 'slow'"),
])
def test_values_outside_a_settings_choices_or_range_are_errors_naming_it(variable, value, message):
    with pytest.raises(SettingsError) as caught:
        resolve(environ={variable: value})
    assert str(caught.value) == f"task t: {message}"
    assert resolve(environ={"EX_MAX_SIDE": "none"}).max_side is None  # an optional setting may be unset


def test_reserved_names_cannot_be_settings():
    @dataclass(frozen=True)
    class Clashing:
        split: str = "test"

    with pytest.raises(TypeError, match="reserved"):
        resolve_settings(Clashing, task="t", metadata={}, env_prefix="X", environ={})


def test_plugin_task_folders_point_at_the_installed_task_yamls():
    folders = plugin_task_folders({"LMMS_EVAL_PLUGINS": "lmms_egoplan"})
    assert len(folders) == 1 and (Path(folders[0]) / "__init__.py").is_file()
    assert plugin_task_folders({}) == []


def test_both_harness_adapters_provide_the_written_contract():
    from lmms_egoplan.contract.adapter import HarnessTask
    from lmms_egoplan.harness.lm_eval_task import SuiteBaseline
    from lmms_egoplan.harness.lmms_eval_task import SuiteTask

    members = {name for name in vars(HarnessTask) if not name.startswith("_")} | set(HarnessTask.__annotations__)
    assert {"settings", "config", "judging", "run_file", "evaluated_model", "predict_only"} <= members
    methods = {name for name in members if name not in HarnessTask.__annotations__}
    for adapter in (SuiteTask, SuiteBaseline):
        assert [name for name in methods if not hasattr(adapter, name)] == [], adapter
        assert {"settings", "judging"} <= set(adapter.__init__.__code__.co_names), adapter  # set when a task is built


def test_hooks_read_of_their_task_only_what_the_contract_names():
    """A benchmark's hooks reach their task through ``context.task`` (``contract.adapter.HarnessTask``): every
    attribute they read of it is one the contract names."""
    import ast

    from lmms_egoplan.contract.adapter import HarnessTask

    members = {name for name in vars(HarnessTask) if not name.startswith("_")} | set(HarnessTask.__annotations__)
    package = Path(__file__).resolve().parents[2] / "lmms_egoplan"
    modules = [*package.glob("*/task.py"), *package.glob("*/text_baselines.py"), package / "harness" / "judged.py",
               package / "harness" / "failed_requests.py"]
    read = set()
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "task"
                    and isinstance(node.value.value, ast.Name) and node.value.value.id == "context"):
                read.add(node.attr)
    assert read and read <= members, read - members


def test_no_benchmark_module_reads_a_private_attribute_it_does_not_set():
    """A benchmark's classes (what its metrics share over a run) and the judge read no private attribute of anything
    they do not set themselves: every ``self._name`` read, the module itself assigns."""
    import ast

    package = Path(__file__).resolve().parents[2] / "lmms_egoplan"
    modules = [*package.glob("*/task.py"), *package.glob("*/text_baselines.py"), package / "harness" / "judged.py"]
    for module in modules:
        tree = ast.parse(module.read_text())
        private = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                   and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr.startswith("_")
                   and not node.attr.startswith("__")}
        assigned = {node.attr for node in ast.walk(tree)
                    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"}
        methods = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert private - assigned - methods == set(), module.relative_to(package)
