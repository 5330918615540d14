"""The suite's tasks and backends register with lmms-eval as users install it, without clashes."""

import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan.testing.lmms_eval_run import OFFLINE_ENV, run_lmms_eval

CHECKOUT = Path(__file__).resolve().parents[1]
TASKS = CHECKOUT / "tasks"
LM_EVAL_TASKS = CHECKOUT / "lm_eval_tasks"


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
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("lmms_egoplan", "tasks", "lm_eval_tasks"):
        shutil.copytree(CHECKOUT / folder, source / folder, ignore=ignore)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "dist"), str(source)],
                   check=True, capture_output=True)
    wheel = next((root / "dist").glob("lmms_egoplan-*.whl"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    return site


def run_python(site: Path, *args: str, plugin: bool) -> str:
    """stdout of ``python <args>`` seeing the wheel copy first (run from a folder without sources)."""
    env = {**os.environ, **OFFLINE_ENV, "PYTHONPATH": str(site)}
    env.pop("LMMS_EVAL_PLUGINS", None)
    if plugin:
        env["LMMS_EVAL_PLUGINS"] = "lmms_egoplan"
    return subprocess.run([sys.executable, *args], env=env, cwd=site.parent, capture_output=True, text=True,
                          timeout=600, check=True).stdout


def listed_names(site: Path, *args: str, plugin: bool) -> set[str]:
    """Task, group and tag names as `lmms-eval --tasks list` prints them."""
    printed = run_python(site, "-m", "lmms_eval", "--tasks", "list", *args, plugin=plugin)
    return set(re.findall(r"^ - (\S+)$", printed, flags=re.MULTILINE))


@pytest.mark.e2e
def test_the_wheel_copy_is_what_gets_imported(wheel_site):
    printed = run_python(wheel_site, "-c", "import importlib.util as u, lmms_egoplan; "
                         "print(lmms_egoplan.__file__); print(u.find_spec('lmms_egoplan.tasks').submodule_search_locations[0])",
                         plugin=False).split()
    assert [Path(p).is_relative_to(wheel_site) for p in printed] == [True, True]
    assert {p.name for p in (Path(printed[1])).iterdir()} >= {path.name for path in TASKS.iterdir() if path.is_dir() and path.name != "__pycache__"}


@pytest.mark.e2e
def test_the_wheel_ships_the_lm_eval_baselines(wheel_site):
    [installed] = run_python(wheel_site, "-c", "import lmms_egoplan.lm_eval_tasks as t; print(t.__path__[0])",
                             plugin=False).split()
    assert Path(installed).is_relative_to(wheel_site)
    shipped = {path.relative_to(installed) for path in Path(installed).rglob("*") if "yaml" in path.name}
    assert shipped == {path.relative_to(LM_EVAL_TASKS) for path in LM_EVAL_TASKS.rglob("*") if "yaml" in path.name}


@pytest.mark.e2e
def test_wheel_install_registers_tasks_through_lmms_eval_plugins(wheel_site):
    ours = set(our_task_index())
    assert ours <= listed_names(wheel_site, plugin=True)
    # Neither mechanism, none of ours: the listing really depends on the plugin variable.
    assert not ours & listed_names(wheel_site, plugin=False)


@pytest.mark.e2e
def test_wheel_install_registers_tasks_through_include_path(wheel_site):
    assert set(our_task_index()) <= listed_names(wheel_site, "--include_path", str(TASKS), plugin=False)


@pytest.mark.e2e
def test_wheel_install_evaluates_a_task_through_the_plugin(wheel_site, tiny_model, tmp_path):
    from lmms_egoplan.testing.egoplan import smoke_suite

    with contextlib.ExitStack() as resources:
        suite = smoke_suite(tmp_path / "data", resources)
        run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}", tasks=["egoplan_val"],
                            output_dir=tmp_path / "out", env={**suite.env, "PYTHONPATH": str(wheel_site)},
                            extra_args=["--limit", "2"])
    assert run.results["n-samples"]["egoplan_val"]["effective"] == 2
    assert 0.0 <= run.metric("egoplan_val", "accuracy") <= 1.0


@pytest.mark.e2e
def test_wheel_install_registers_the_backend_entry_point(wheel_site):
    code = ("import inspect, lmms_egoplan, lmms_eval.models as m; "
            "print(lmms_egoplan.__file__); print(m.get_model_manifest('egoplan_hf').simple_class_path); "
            "backend = m.get_model('egoplan_hf'); print(inspect.getfile(backend)); print(backend.is_simple)")
    printed = run_python(wheel_site, "-c", code, plugin=False).split()
    assert Path(printed[0]).is_relative_to(wheel_site)
    assert printed[1] == "lmms_egoplan.models.egoplan_hf.EgoPlanHF"
    # The class itself loads, from the wheel's copy of the module.
    assert Path(printed[2]) == wheel_site / "lmms_egoplan" / "models" / "egoplan_hf.py"
    assert printed[3] == "True"
