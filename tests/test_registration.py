"""The suite's tasks and backends register with lmms-eval as users install it, without clashes."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan.testing.lmms_eval_run import OFFLINE_ENV

CHECKOUT = Path(__file__).resolve().parents[1]
TASKS = CHECKOUT / "tasks"


def our_task_index():
    from lmms_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS), include_defaults=False).task_index


def test_no_task_group_or_tag_of_ours_shadows_or_is_shadowed_by_a_builtin():
    from lmms_eval.tasks import TaskManager

    ours = our_task_index()
    assert ours, f"no tasks found under {TASKS}"
    builtin = TaskManager(include_defaults=True).task_index
    clashes = sorted(name for name in ours if name in builtin and builtin[name]["yaml_path"] != ours[name]["yaml_path"])
    assert not clashes, f"names also registered by lmms-eval itself (lmms-eval would silently use its own): {clashes}"


@pytest.fixture(scope="module")
def wheel_site(tmp_path_factory):
    """The suite built as a wheel and installed (not editable) into a folder of its own."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    for folder in ("lmms_egoplan", "tasks"):
        shutil.copytree(CHECKOUT / folder, source / folder, ignore=ignore)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "dist"), str(source)],
                   check=True, capture_output=True)
    wheel = next((root / "dist").glob("lmms_egoplan-*.whl"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    return site


def listed_subtasks(site: Path, *args: str, plugin: bool) -> dict[str, str]:
    """Task name -> YAML path, as `lmms-eval --tasks list_subtasks` prints them from the wheel copy."""
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(site)}
    env.pop("LMMS_EVAL_PLUGINS", None)
    if plugin:
        env["LMMS_EVAL_PLUGINS"] = "lmms_egoplan"
    # cwd: not the checkout, whose lmms_egoplan/ would shadow the wheel's copy (sys.path[0] is the cwd).
    printed = subprocess.run([sys.executable, "-m", "lmms_eval", "--tasks", "list_subtasks", *args],
                             env=env, capture_output=True, text=True, timeout=600, cwd=site).stdout
    rows = re.findall(r"^\|([^|\s]+)\s*\|([^|]+?)\s*\|", printed, flags=re.MULTILINE)
    return {name: path for name, path in rows}


def test_wheel_install_registers_tasks_through_lmms_eval_plugins(wheel_site):
    ours = {name for name, entry in our_task_index().items() if entry["type"] in ("task", "python_task")}
    listed = listed_subtasks(wheel_site, plugin=True)
    assert ours and ours <= listed.keys()
    # The YAMLs come from the installed wheel, not from this checkout.
    assert all(Path(listed[name]).is_relative_to(wheel_site / "lmms_egoplan" / "tasks") for name in ours)


def test_wheel_install_registers_tasks_through_include_path(wheel_site):
    ours = {name for name, entry in our_task_index().items() if entry["type"] in ("task", "python_task")}
    listed = listed_subtasks(wheel_site, "--include_path", str(TASKS), plugin=False)
    assert ours and ours <= listed.keys()
    assert all(Path(listed[name]).is_relative_to(TASKS) for name in ours)


def test_wheel_install_registers_the_backend_entry_point(wheel_site):
    code = ("import inspect, lmms_egoplan, lmms_eval.models as m; "
            "print(lmms_egoplan.__file__); print(m.get_model_manifest('egoplan_hf').simple_class_path); "
            "backend = m.get_model('egoplan_hf'); print(inspect.getfile(backend)); print(backend.is_simple)")
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(wheel_site)}
    printed = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                             cwd=wheel_site).stdout.split()
    assert Path(printed[0]).is_relative_to(wheel_site)
    assert printed[1] == "lmms_egoplan.models.egoplan_hf.EgoPlanHF"
    # The class itself loads, from the wheel's copy of the module.
    assert Path(printed[2]) == wheel_site / "lmms_egoplan" / "models" / "egoplan_hf.py"
    assert printed[3] == "True"
