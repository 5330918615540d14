"""The built wheel, installed non-editable in a fresh environment: it holds every file of the source tree, registers
the tasks both ways, evaluates one task of each benchmark, runs every command."""
import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV, run_lmms_eval
from tests.architecture.test_registration import CHECKOUT, TASKS, installed_name, our_task_index


def source_files() -> list[str]:
    """The files a fresh clone of this checkout has (tracked, and new files git does not ignore)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=CHECKOUT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted(path for path in listed if path and (CHECKOUT / path).is_file())


@dataclasses.dataclass(frozen=True)
class WheelEnv:
    """A fresh virtual environment with the suite's wheel in its own site-packages; the test
    environment's packages (lmms-eval, torch, ...) are visible through a .pth line, so that nothing
    is downloaded or installed again, and the editable install of the checkout is not (its finder
    is a .pth of the test environment, which the fresh one does not process)."""

    root: Path
    wheel: Path
    python: Path
    site_packages: Path

    def run(self, *args: str, check: bool = True, env: dict | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess:
        """``args`` (a program of the environment's bin/ and its arguments) from a folder without sources."""
        run_env = {key: value for key, value in os.environ.items() if key not in ("LMMS_EVAL_PLUGINS", "PYTHONPATH")}
        run_env.update({**OFFLINE_ENV, **(env or {})})
        program = str(self.python.parent / args[0])
        completed = subprocess.run([program, *args[1:]], env=run_env, cwd=self.root, capture_output=True, text=True,
                                   timeout=timeout)
        if check and completed.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {completed.returncode}:\n{completed.stdout[-3000:]}\n"
                                 f"{completed.stderr[-5000:]}")
        return completed


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory) -> WheelEnv:
    import site
    import sysconfig

    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    for path in source_files():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CHECKOUT / path, source / path)
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(root / "dist"),
                    str(source)],
                   check=True, capture_output=True)
    [wheel] = (root / "dist").glob("lmms_egoplan-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    site_packages = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    assert site_packages != Path(sysconfig.get_paths()["purelib"])
    (site_packages / "test_environment.pth").write_text("".join(f"{path}\n" for path in site.getsitepackages()))
    # pip comes from the test environment and installs into the running (fresh) interpreter's site-packages.
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", str(wheel)], check=True,
                   capture_output=True, cwd=root)
    return WheelEnv(root, wheel, python, site_packages)


def test_the_wheel_holds_every_file_of_the_source_tree(wheel_env):
    import zipfile

    shipped = {name for name in zipfile.ZipFile(wheel_env.wheel).namelist() if ".dist-info/" not in name}
    expected = {installed_name(path) for path in source_files()} - {None}
    assert shipped == expected, (f"missing from the wheel: {sorted(expected - shipped)}; "
                                 f"not in the tree: {sorted(shipped - expected)}")
    assert {"lmms_egoplan/judge/engine.py", "lmms_egoplan/egothink/published_results.json",
            "lmms_egoplan/tasks/egothink/_default_template_yaml",
            "lmms_egoplan/lm_eval_tasks/egoplan/egoplan_val_blind.yaml"} <= shipped


def test_the_wheel_copy_is_what_gets_imported_and_what_the_entry_points_load(wheel_env):
    code = ("import importlib.metadata as m, importlib.util as u, inspect, shutil, lmms_egoplan, lmms_egoplan.judge, "
            "lmms_eval.models as models; "
            "print(lmms_egoplan.__file__, lmms_egoplan.judge.__file__, "
            "u.find_spec('lmms_egoplan.tasks').submodule_search_locations[0]); "
            "d = m.distribution('lmms-egoplan'); print(d.locate_file('lmms_egoplan/__init__.py')); "
            "print(inspect.getfile(models.get_model('egoplan_hf'))); "
            "print(shutil.which('lmms-egoplan'))")
    printed = wheel_env.run("python", "-c", code,
                            env={"PATH": f"{wheel_env.python.parent}:{os.environ['PATH']}"}).stdout.split()
    assert all(Path(p).is_relative_to(wheel_env.site_packages) for p in printed[:5]), printed
    assert Path(printed[5]) == wheel_env.python.parent / "lmms-egoplan"
    assert Path(printed[5]).read_text().splitlines()[0] == f"#!{wheel_env.python}"
    assert {p.name for p in Path(printed[2]).iterdir()} >= {p.name for p in TASKS.iterdir() if p.is_dir()
                                                            and p.name != "__pycache__"}


def listed_names(wheel_env: WheelEnv, *args: str, plugin: bool) -> set[str]:
    """Task, group and tag names as `lmms-eval --tasks list` prints them."""
    printed = wheel_env.run("python", "-m", "lmms_eval", "--tasks", "list", *args,
                            env={"LMMS_EVAL_PLUGINS": "lmms_egoplan"} if plugin else None).stdout
    return set(re.findall(r"^ - (\S+)$", printed, flags=re.MULTILINE))


def test_wheel_install_registers_tasks_through_lmms_eval_plugins(wheel_env):
    ours = set(our_task_index())
    assert ours <= listed_names(wheel_env, plugin=True)
    # Neither mechanism, none of ours: the listing really depends on the plugin variable.
    assert not ours & listed_names(wheel_env, plugin=False)


def test_wheel_install_registers_tasks_through_include_path(wheel_env):
    assert set(our_task_index()) <= listed_names(wheel_env, "--include_path", str(TASKS), plugin=False)


@pytest.fixture(scope="module")
def wheel_run(wheel_env, tiny_model, tmp_path_factory):
    """One task of each benchmark in one lmms-eval run of the fresh environment (EgoThink and EgoIntent
    judged by loopback judges), and the data it read."""

    from lmms_egoplan.demo import smoke

    root = tmp_path_factory.mktemp("wheel_run")
    one_task = {"egoplan": "egoplan_val", "egothink": "ego_think_counting", "egointent": "egointent",
                "actplan": "actplan1k", "egoplan_bench2": "egoplan_bench2", "cosmos_reason1": "cosmos_reason1_robovqa",
                "robovqa": "robovqa_success"}
    with contextlib.ExitStack() as resources:
        suites = {name: build(root / "data" / name, resources) for name, build in smoke.suites().items()}
        run = run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}",
                            tasks=[one_task[name] for name in suites], output_dir=root / "out",
                            env={key: value for suite in suites.values() for key, value in suite.env.items()},
                            launcher=[str(wheel_env.python)], extra_args=["--gen_kwargs", "max_new_tokens=8"])
        yield run, suites, resources


def test_wheel_install_evaluates_one_task_of_each_benchmark(wheel_run):
    run, _, _ = wheel_run
    assert set(run.results["results"]) == {"egoplan_val", "ego_think_counting", "egointent", "actplan1k",
                                           "egoplan_bench2", "cosmos_reason1_robovqa", "robovqa_success"}
    assert run.results["n-samples"]["egoplan_val"]["effective"] > 0
    assert 0.0 <= run.metric("egoplan_val", "accuracy") <= 1.0
    assert run.metric("ego_think_counting", "judged") > 0 and run.metric("ego_think_counting", "failed") == 0
    assert run.metric("actplan1k", "plan_length") >= 0


def test_every_lmms_egoplan_command_runs_from_the_wheel(wheel_env, wheel_run, tmp_path):
    """`lmms-egoplan` of the fresh environment (its console script): each subcommand on the files of
    the run above, or on the fixtures the demo builds."""
    from lmms_egoplan.demo.actplan import build_tiny_bert, write_finetuning_data
    from lmms_egoplan.demo.kit.judge_server import ChatServer, rating_responder

    run, suites, _ = wheel_run
    wheel_env.run("lmms-egoplan", "report", str(run.output_dir), "--output", str(tmp_path / "report"))
    assert (tmp_path / "report" / "report.md").is_file()
    with ChatServer(rating_responder(lambda call: "1")) as judge:
        wheel_env.run("lmms-egoplan", "rejudge", str(run.output_dir), "--output", str(tmp_path / "rejudged"),
                      "--judge_base_url", judge.base_url, "--judge_model", "loopback-judge", "--judge_api_key_env", "",
                      "--judge_cache_dir", "none")
    summary = json.loads(next((tmp_path / "rejudged").glob("*_rejudged.json")).read_text())
    assert summary["ego_think_counting"]["score"] == 100.0 and len(judge.calls) > 0
    wheel_env.run("lmms-egoplan", "egointent-check", suites["egointent"].env["EGOINTENT_ANNOTATIONS"])
    [plans] = run.output_dir.rglob("*_plans_actplan1k.jsonl")
    assert "norm" in wheel_env.run("lmms-egoplan", "actplan-score", "--pairs", str(plans)).stdout.lower()
    data, activities = write_finetuning_data(tmp_path / "finetuning", activities=4)
    wheel_env.run("lmms-egoplan", "actplan-train-bleurt", "--data", str(data), "--activities", str(activities),
                  "--base", str(build_tiny_bert(tmp_path / "bert")), "--output", str(tmp_path / "classifier"),
                  "--epochs", "1", "--device", "cpu")
    assert (tmp_path / "classifier" / "metrics.json").is_file()
    demo = wheel_env.run("lmms-egoplan", "smoke", "--workdir", str(tmp_path / "demo"), "--benchmark", "egointent")
    assert "egointent" in demo.stdout and "FAILED" not in demo.stdout
