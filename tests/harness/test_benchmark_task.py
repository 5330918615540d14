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


def test_both_harness_adapters_hand_the_hooks_run_files_of_the_written_contract():
    from lmms_egoplan.contract.adapter import RunFiles
    from lmms_egoplan.core.run import SuiteRun
    from lmms_egoplan.harness.lm_eval_task import LmEvalRun, LmEvalRunFiles
    from lmms_egoplan.harness.run_files import LmmsEvalRunFiles

    lm_eval_run = LmEvalRun(frozenset(), "m", None, "m", SuiteRun(stamp="2026-01-01T00-00-00"))
    for run_files in (LmmsEvalRunFiles("t", SuiteRun()), LmEvalRunFiles(lm_eval_run, "t")):
        assert isinstance(run_files, RunFiles)
    assert LmEvalRunFiles(lm_eval_run, "t").run_file(None, "plans") == Path.cwd() / "plans" / \
        "2026-01-01T00-00-00_plans_t.jsonl"


def test_hooks_read_of_their_context_only_its_fields_and_of_its_run_files_only_the_contract():
    """A benchmark's hooks get a ``TaskContext`` of values (no adapter): every attribute they read of it is one of its
    fields, and of its ``run_files`` one ``contract.adapter.RunFiles`` names."""
    import ast
    import dataclasses

    from lmms_egoplan.contract.adapter import RunFiles
    from lmms_egoplan.contract.benchmark import TaskContext

    fields = {field.name for field in dataclasses.fields(TaskContext)}
    assert "task" not in fields
    run_files = {name for name in vars(RunFiles) if not name.startswith("_")}
    package = Path(__file__).resolve().parents[2] / "lmms_egoplan"
    modules = [*package.glob("*/task.py"), package / "harness" / "judged.py",
               package / "harness" / "failed_requests.py"]
    read_of_context, read_of_run_files = set(), set()
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            if isinstance(node.value, ast.Name) and node.value.id == "context":
                read_of_context.add(node.attr)
            if isinstance(node.value, ast.Attribute) and node.value.attr == "run_files" or \
                    isinstance(node.value, ast.Name) and node.value.id == "run_files":
                read_of_run_files.add(node.attr)
    assert read_of_context and read_of_context <= fields, read_of_context - fields
    assert read_of_run_files and read_of_run_files <= run_files, read_of_run_files - run_files


def test_no_benchmark_module_reads_a_private_attribute_it_does_not_set():
    """A benchmark's classes (what its metrics share over a run) and the judge read no private attribute of anything
    they do not set themselves: every ``self._name`` read, the module itself assigns."""
    import ast

    package = Path(__file__).resolve().parents[2] / "lmms_egoplan"
    modules = [*package.glob("*/task.py"), package / "harness" / "judged.py"]
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
