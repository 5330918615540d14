"""The lmms-eval compatibility layer through the real CLI: a run without the suite is lmms-eval's own; a run that
mixes lmms-eval's tasks with the suite's scores lmms-eval's as lmms-eval alone does; a failed run of a suite task
exits non-zero and a good one zero, its results file naming the workarounds in place."""
import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from lmms_egoplan.compat.replacements import RECORD_KEY
from lmms_egoplan.core.provenance import PROVENANCE_KEY
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV
from lmms_egoplan.demo.kit.warm_python import run_python
from tests.fixtures import PROBE_TASKS

ROOT = Path(__file__).resolve().parents[2]

# Runs lmms-eval's CLI in-process, then prints which of the suite's workarounds are active.
# "alone": the suite's entry point is hidden from lmms-eval, as if the suite were not installed.
CHILD = r"""
import importlib.metadata as metadata, json, sys
mode, argv = sys.argv[1], sys.argv[2:]
if mode == "alone":
    all_entry_points = metadata.entry_points
    class WithoutTheSuite:
        def select(self, **params):
            return metadata.EntryPoints(ep for ep in all_entry_points().select(**params)
                                        if not ep.value.startswith("lmms_egoplan"))
    metadata.entry_points = lambda **params: WithoutTheSuite().select(**params) if params else WithoutTheSuite()
sys.argv = ["lmms-eval", *argv]
status = 0
try:
    from lmms_eval.cli.dispatch import main
    main()
except SystemExit as stop:
    status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
finally:
    durability = sys.modules.get("lmms_egoplan.compat.durability")
    replacements = sys.modules.get("lmms_egoplan.compat.replacements")
    print("COMPAT-STATE " + json.dumps({
        "suite_loaded": "lmms_egoplan" in sys.modules,
        "workarounds": replacements.in_place() if replacements else [],
        "exit_guard": durability is not None and durability._exit_guard_sink is not None,
    }))
sys.exit(status)
"""


def run_cli(mode: str, tasks: str, output: Path, *, include_path: Path, env: dict | None = None):
    """``(exit status, workaround state, results or None, log)`` of one lmms-eval run (dummy model)."""
    output.mkdir(parents=True)
    argv = ["--model", "dummy", "--tasks", tasks, "--include_path", str(include_path),
            "--output_path", str(output), "--log_samples"]
    run_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
    run_env.pop("LMMS_EVAL_PLUGINS", None)
    completed = run_python([sys.executable, "-c", CHILD, mode, *argv], env=run_env, cwd=output, timeout=600,
                           stderr_apart=True)
    log = completed.stdout + completed.stderr
    state = json.loads(next(line for line in completed.stdout.splitlines() if line.startswith("COMPAT-STATE "))[13:])
    results_files = sorted(output.rglob("*_results.json"))
    results = json.loads(results_files[-1].read_text()) if results_files else None
    return completed.returncode, state, results, log


def plain_lmms_eval_task(folder: Path, data_file: Path) -> Path:
    """A task written only with lmms-eval's own mechanisms (no class, no function of the suite)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plain_probe.yaml").write_text(
        "task: plain_probe\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data_file))}\n"
        "test_split: test\n"
        "output_type: generate_until\n"
        "doc_to_visual: null\n"
        "doc_to_text: question\n"
        "doc_to_target: answer\n"
        "generation_kwargs:\n  max_new_tokens: 4\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1\n")
    return folder


def comparable(results: dict) -> dict:
    return {task: {k: v for k, v in metrics.items()} for task, metrics in results["results"].items()}


def test_a_run_without_the_suite_is_lmms_evals_own(tmp_path):
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 else "B"} for i in range(4)]))
    tasks = plain_lmms_eval_task(tmp_path / "tasks", data)
    installed = run_cli("installed", "plain_probe", tmp_path / "installed", include_path=tasks)
    alone = run_cli("alone", "plain_probe", tmp_path / "alone", include_path=tasks)
    assert installed[0] == alone[0] == 0, installed[3][-3000:]
    assert installed[2] is not None and comparable(installed[2]) == comparable(alone[2])
    # The suite's entry point was loaded (and only there), and switched nothing on; the results record none.
    assert installed[1] == {"suite_loaded": True, "workarounds": [], "exit_guard": False}
    assert alone[1] == {**installed[1], "suite_loaded": False}
    assert RECORD_KEY not in installed[2] and RECORD_KEY not in alone[2]
    assert PROVENANCE_KEY not in installed[2] and installed[2]["lmms_eval_version"] == alone[2]["lmms_eval_version"]

    # A failing run of lmms-eval's own task keeps lmms-eval's exit status (0) with the suite installed.
    data.unlink()
    failed_installed = run_cli("installed", "plain_probe", tmp_path / "failed_installed", include_path=tasks)
    failed_alone = run_cli("alone", "plain_probe", tmp_path / "failed_alone", include_path=tasks)
    assert failed_installed[0] == failed_alone[0] == 0
    assert "Error during evaluation" in failed_installed[3] and failed_installed[2] is None

    # A task name that exists nowhere, in a run that names nothing of the suite: lmms-eval's answer, exit 0.
    typo_installed = run_cli("installed", "plain_probe_typo", tmp_path / "typo_installed", include_path=tasks)
    typo_alone = run_cli("alone", "plain_probe_typo", tmp_path / "typo_alone", include_path=tasks)
    assert typo_installed[0] == typo_alone[0] == 0
    for log in (typo_installed[3], typo_alone[3]):
        assert "Tasks not found: plain_probe_typo" in log and "lmms-egoplan" not in log and "did you mean" not in log


def samples_of(output: Path, task: str) -> list[dict]:
    [samples] = output.rglob(f"*_samples_{task}.jsonl")
    return [json.loads(line) for line in samples.read_text().splitlines()]


def test_a_run_mixing_lmms_evals_tasks_with_the_suites_scores_lmms_evals_as_lmms_eval_alone(tmp_path):
    """lmms-eval's own task (its mechanisms only) run alone, and beside a suite task in one run: its scores and its
    samples are the same, though the suite task switched the suite's workarounds on."""
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 else "B"} for i in range(4)]))
    tasks = plain_lmms_eval_task(tmp_path / "tasks" / "plain", data)
    shutil.copytree(PROBE_TASKS, tmp_path / "tasks" / "suite")  # one --include_path for both
    probe_data = tmp_path / "probe.json"
    probe_data.write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    alone = run_cli("installed", "plain_probe", tmp_path / "alone", include_path=tasks)
    mixed = run_cli("installed", "plain_probe,lmms_egoplan_probe", tmp_path / "mixed", include_path=tmp_path / "tasks",
                    env={"PROBE_DATA_FILE": str(probe_data)})
    assert alone[0] == mixed[0] == 0, mixed[3][-3000:]
    assert alone[1]["workarounds"] == [] and "durability.fail_runs_with_failed_tasks" in mixed[1]["workarounds"]
    assert mixed[2]["results"]["plain_probe"] == alone[2]["results"]["plain_probe"]
    assert mixed[2]["configs"]["plain_probe"] == alone[2]["configs"]["plain_probe"]
    assert samples_of(tmp_path / "mixed", "plain_probe") == samples_of(tmp_path / "alone", "plain_probe")


def test_a_failed_run_of_a_suite_task_exits_non_zero_and_a_good_one_zero(tmp_path):
    data = tmp_path / "probe.json"
    data.write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    good = run_cli("installed", "lmms_egoplan_probe", tmp_path / "good", include_path=PROBE_TASKS,
                   env={"PROBE_DATA_FILE": str(data)})
    assert good[0] == 0 and good[2]["results"]["lmms_egoplan_probe"]["exact,none"] == 1.0, good[3][-3000:]
    assert good[1]["exit_guard"] and "results.keep_loglikelihood_results" in good[1]["workarounds"]
    # The results file names the workarounds in place as its task was scored, and lmms-eval's release.
    assert good[2][RECORD_KEY] == {"lmms_eval": version("lmms-eval"), "applied": good[1]["workarounds"]}
    assert {"durability.fail_runs_with_failed_tasks", "results.write_results_as_strict_json",
            "tasks.unretried_process_results", "tasks.bind_class_task_to_backend"} <= set(good[1]["workarounds"])
    # The software the run used (issue 65, point 6).
    suite_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    provenance = good[2][PROVENANCE_KEY]
    assert {name: provenance[name] for name in ("lmms_eval", "lm_eval", "transformers")} == \
        {"lmms_eval": version("lmms-eval"), "lm_eval": version("lm-eval"), "transformers": version("transformers")}
    assert provenance["lmms_egoplan"]["version"] == version("lmms-egoplan") and "torch" in provenance
    assert provenance["lmms_egoplan"].get("commit") == (suite_commit.stdout.strip() or None)

    bad = run_cli("installed", "lmms_egoplan_probe", tmp_path / "bad", include_path=PROBE_TASKS,
                  env={"PROBE_DATA_FILE": str(data), "PROBE_REPEAT": "not-a-number"})
    assert bad[0] == 1 and bad[2] is None
    assert "PROBE_REPEAT" in bad[3] and "lmms-egoplan: the evaluation failed" in bad[3]


def test_a_config_file_whose_first_run_fails_runs_the_others_then_exits_1(tmp_path):
    """lmms-eval's CLI runs the runs of a ``--config`` file one after another: a suite task's run that fails does not
    stop lmms-eval's task's run after it (docs/upstream/03: the command exits 1 once every run has run)."""
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 else "B"} for i in range(4)]))
    plain_lmms_eval_task(tmp_path / "tasks" / "plain", data)
    shutil.copytree(PROBE_TASKS, tmp_path / "tasks" / "suite")
    folders = {"include_path": str(tmp_path / "tasks")}
    runs = [{"model": "dummy", "tasks": task, **folders, "output_path": str(tmp_path / task), "log_samples": True}
            for task in ("lmms_egoplan_probe", "plain_probe")]
    runs[0]["env"] = {"PROBE_DATA_FILE": str(tmp_path / "no_such_file.json")}
    (tmp_path / "runs.yaml").write_text(json.dumps(runs))  # JSON is YAML
    env = {**os.environ, **OFFLINE_ENV, "LMMS_EVAL_PLUGINS": "lmms_egoplan"}
    completed = run_python([sys.executable, "-c", CHILD, "installed", "--config", str(tmp_path / "runs.yaml")], env=env,
                           cwd=tmp_path, timeout=600, stderr_apart=True)
    assert completed.returncode == 1, completed.stderr[-3000:]
    [results] = (tmp_path / "plain_probe").rglob("*_results.json")
    assert "exact_match,none" in json.loads(results.read_text())["results"]["plain_probe"]  # it ran to its score
    last = completed.stderr.splitlines()[-3:]
    assert last[0] == "lmms-egoplan: run 1 of 2 of the --config file (--tasks lmms_egoplan_probe):"
    assert last[-1].startswith("lmms-egoplan: error: ") and "no_such_file.json" in last[-1]


def test_a_run_after_a_run_of_the_suite_in_one_process_is_lmms_evals_own(tmp_path):
    """lmms-eval's CLI runs the runs of a ``--config`` file in one process: lmms-eval's own task run after a run of a
    suite task writes the results and samples files a run of it alone writes in a process without the suite (the
    suite's keys in neither), and the command exits as lmms-eval's does; a failing one after it exits 0, as lmms-eval
    alone does. A suite task's run after them (its folder of its own, as a user's adapter) is the suite's again."""
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 else "B"} for i in range(4)]))
    plain_lmms_eval_task(tmp_path / "tasks" / "plain", data)
    shutil.copytree(PROBE_TASKS, tmp_path / "tasks" / "suite")
    probe_data = tmp_path / "probe.json"
    probe_data.write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    include_path = tmp_path / "tasks"
    runs = [{"model": "dummy", "tasks": task, "include_path": str(include_path), "log_samples": True,
             "output_path": str(tmp_path / f"run{number}")}
            for number, task in enumerate(["plain_probe", "lmms_egoplan_probe"] * 2, 1)]
    runs[1]["env"] = {"PROBE_DATA_FILE": str(probe_data)}
    (tmp_path / "runs.yaml").write_text(json.dumps(runs))  # JSON is YAML
    env = {**os.environ, **OFFLINE_ENV}
    env.pop("LMMS_EVAL_PLUGINS", None)
    command = [sys.executable, "-c", CHILD, "installed", "--config", str(tmp_path / "runs.yaml")]
    completed = run_python(command, env=env, cwd=tmp_path, timeout=600, stderr_apart=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    for run in ("run2", "run4"):  # the suite's runs had their workarounds
        assert {RECORD_KEY, PROVENANCE_KEY} <= set(written_results(tmp_path / run))
    alone = run_cli("alone", "plain_probe", tmp_path / "alone", include_path=include_path)
    assert alone[0] == 0, alone[3][-3000:]
    for run in ("run1", "run3"):
        assert as_written(tmp_path / run) == as_written(tmp_path / "alone", tmp_path / run)
    assert "lmms_egoplan" not in (next((tmp_path / "run3").rglob("*_results.json")).read_text())

    # lmms-eval's own task failing after a run of the suite: lmms-eval's exit status (0), no file, no line of the suite.
    data.unlink()
    runs[2]["output_path"] = str(tmp_path / "failed")
    (tmp_path / "runs.yaml").write_text(json.dumps(runs[1:3]))
    failed = run_python(command, env=env, cwd=tmp_path, timeout=600, stderr_apart=True)
    assert failed.returncode == 0, failed.stderr[-3000:]
    assert "Error during evaluation" in failed.stdout + failed.stderr and "lmms-egoplan:" not in failed.stderr
    assert not list((tmp_path / "failed").rglob("lmms-egoplan-traceback-*"))


def written_results(output: Path) -> dict:
    [results] = output.rglob("*_results.json")
    return json.loads(results.read_text())


# What differs between two runs of the same task on the same model: when they ran, and how long they took.
RUN_TIMES = ("date", "start_time", "end_time", "total_evaluation_time_seconds")


def as_written(output: Path, named_as: Path | None = None) -> dict:
    """The results file (without its times) and the samples files of the run written in ``output``, as text, with
    the output folder named ``named_as`` (a run of the same task elsewhere)."""
    [results_file] = output.rglob("*_results.json")
    results = {key: value for key, value in json.loads(results_file.read_text()).items() if key not in RUN_TIMES}
    results["config"].get("resolved_cli_args", {}).pop("config", None)  # the --config file its run came from
    texts = {"results": json.dumps(results, sort_keys=True),
             **{path.name.split("_samples_")[1]: path.read_text() for path in output.rglob("*_samples_*.jsonl")}}
    return {name: text.replace(str(output), str(named_as or output)) for name, text in texts.items()}
