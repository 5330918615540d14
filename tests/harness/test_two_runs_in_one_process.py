"""Two evaluations in one Python process keep their facts apart: each ``simple_evaluate`` call (made by
lmms-eval's own ``cli_evaluate_single``, which writes the results) has its run (``core.run.SuiteRun``), so the second
run's date-time (its results and side files), failed requests and exit status are its own, not the first's; two
lm-eval ``simple_evaluate`` calls each write their side files beside their own results."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path

from lm_eval.utils import sanitize_model_name
from lmms_eval import __main__ as lmms_eval_cli
from lmms_eval import utils as lmms_eval_utils

from lmms_egoplan.compat import durability, results, tasks
from lmms_egoplan.demo import egothink
from lmms_egoplan.demo.kit.judge_server import ChatServer
from lmms_egoplan.demo.kit.scripted import answering, failed_request
from lmms_egoplan.harness.failed_requests import FAILED_REQUESTS_EXIT_STATUS
from tests.harness.test_lm_eval_tasks import CHECKOUT
from tests.harness.test_lmms_eval_behaviours import SUITE_TASKS, index_only, lmms_eval_log  # noqa: F401 (a fixture)


def evaluate(monkeypatch, task: str, model_args: str, output: Path) -> int:
    """lmms-eval's CLI evaluation of ``task`` in this process (its ``simple_evaluate`` call, then its writing of the
    results and samples files); the exit status the suite asks for (0: the call returned)."""
    monkeypatch.setattr(sys, "argv", ["lmms-eval", "--model", "openai", "--model_args", model_args, "--tasks", task,
                                      "--output_path", str(output), "--log_samples"])
    monkeypatch.setattr(lmms_eval_cli, "TaskManager", index_only(SUITE_TASKS))
    try:
        lmms_eval_cli.cli_evaluate_single(lmms_eval_cli.parse_eval_args()[1])
    except SystemExit as stopped:
        return stopped.code
    return 0


def written(output: Path, kind: str, task: str | None = None) -> list[Path]:
    pattern = f"*_{kind}.json" if task is None else f"*_{kind}_{task}.jsonl"
    return sorted(output.rglob(pattern))


def test_a_second_evaluation_in_the_process_has_its_own_date_time_failed_requests_and_exit_status(
        tmp_path, monkeypatch, switch_on, lmms_eval_log):  # noqa: F811 (the fixture)
    switch_on(tasks.check_suite_tasks_before_the_model, durability.exit_when_results_are_written,
              durability.keep_responses_of_stopped_runs, results.record_in_results)
    stamps = iter(["20260101_000001", "20260101_000002", "20260101_000003"])
    monkeypatch.setattr(lmms_eval_utils, "get_datetime_str", lambda timezone=None: next(stamps))
    with ExitStack() as resources:
        suite = egothink.smoke_suite(tmp_path / "data", resources)
        for name, value in {**suite.env, **suite.scripted.env}.items():
            monkeypatch.setenv(name, value)
        answer, failures_left = answering([suite.scripted]), [1]

        def model(call):  # the first request of the process fails (lmms-eval's openai backend asks once)
            if failures_left[0]:
                failures_left[0] -= 1
                return failed_request(call)
            return answer(call)

        server = resources.enter_context(ChatServer(model, model_name="scripted-answers"))
        model_args = f"model_version=scripted-answers,base_url={server.base_url},api_key=unused,max_retries=1"
        first = evaluate(monkeypatch, "ego_think_counting", model_args, tmp_path / "first")
        second = evaluate(monkeypatch, "ego_think_existence", model_args, tmp_path / "second")

    assert first == FAILED_REQUESTS_EXIT_STATUS and second == 0  # the first run's failed request is not the second's
    for output, task, stamp, failed in ((tmp_path / "first", "ego_think_counting", "20260101_000001", 1),
                                        (tmp_path / "second", "ego_think_existence", "20260101_000002", 0)):
        [results_file] = written(output, "results")
        recorded = json.loads(results_file.read_text())
        assert results_file.name == f"{stamp}_results.json"
        assert recorded["results"][task]["failed_requests,none"] == failed
        # Its side files carry its own date-time, the one lmms-eval names its results file with.
        assert [path.name for path in written(output, "judgements", task)] == [f"{stamp}_judgements_{task}.jsonl"]
        assert len(written(output, "samples", task)) == 1


def test_two_lm_eval_evaluations_in_the_process_write_their_side_files_each_beside_its_own_results(tmp_path,
                                                                                                    tiny_model):
    """lm-eval's Python API, twice in one process, each call with its results writer (``EvaluationTracker``): each
    call's tasks write their side file (the leaderboard submission) beside that call's results, under that call's
    model folder and with a date-time of their own; the model arguments lm-eval merges into every task's metadata are
    not taken for settings."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    from lmms_egoplan.demo.egoplan import build_fixture

    data = build_fixture(tmp_path / "egoplan")
    models = {"first": tiny_model("llama"), "second": tiny_model("llama", seed=1)}
    for name, model in models.items():
        simple_evaluate(model="hf", model_args=f"pretrained={model},dtype=float32", tasks=["egoplan_test_blind"],
                        device="cpu", evaluation_tracker=EvaluationTracker(output_path=str(tmp_path / name)),
                        task_manager=TaskManager(include_path=str(CHECKOUT / "lm_eval_tasks"),
                                                 metadata={"annotation_dir": str(data.annotation_dir)}))
    stamps = set()
    for name, model in models.items():
        [submission] = (tmp_path / name).rglob("*_submission_egoplan_test_blind.json")
        assert submission.parent == tmp_path / name / sanitize_model_name(str(model))
        stamps.add(submission.name.split("_submission_")[0])
    assert len(stamps) == 2


def test_a_run_of_a_config_file_that_asks_for_an_exit_status_ends_the_command_with_it_after_the_others(
        tmp_path, monkeypatch, switch_on, lmms_eval_log, capfd):  # noqa: F811 (the fixture)
    """lmms-eval's CLI runs the runs of a ``--config`` file one after another: the first asks for status 3 once its
    files are written (``durability.ask_for_exit_status``: failed judgements), the second fails; both run after it,
    and the command ends with the highest status, each run's lines named by the run."""
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker

    from lmms_egoplan.core.run import SuiteRun, hand_over
    from tests.harness.test_lmms_eval_behaviours import cli, configs, failing_evaluation

    switch_on(durability.exit_when_results_are_written, durability.fail_runs_with_failed_tasks)
    evaluated = []

    def single(args):
        evaluated.append(args.tasks)
        lmms_eval_cli.TaskManager(args.verbosity)
        if args.tasks == "judged":
            writer = EvaluationTracker(output_path=str(tmp_path / "out"))
            writer.general_config_tracker.model_name_sanitized = "model"
            run = SuiteRun()
            durability.ask_for_exit_status(run, lambda run, files: (3, "2 judgements failed"))
            hand_over(run, writer)
            writer.save_results_aggregated(results={"results": {}}, samples=None, datetime_str="20260101_000000")
        elif args.tasks == "failing":
            failing_evaluation(args)
        return None, None

    status = cli(monkeypatch, ["--config", str(configs(tmp_path, "judged", "failing", "passing"))], single=single)
    assert (status, evaluated) == (3, ["judged", "failing", "passing"])
    last = capfd.readouterr().err.splitlines()[-5:]
    assert last[0] == "lmms-egoplan: run 1 of 3 of the --config file (--tasks judged):"
    assert last[1] == "lmms-egoplan: 2 judgements failed"
    assert last[2] == "lmms-egoplan: run 2 of 3 of the --config file (--tasks failing):"
    assert last[4].startswith("lmms-egoplan: error: RuntimeError: the evaluation failed")


def test_a_python_run_after_one_of_the_suite_is_lmms_evals_own(tmp_path, monkeypatch):
    """lmms-eval's Python API, twice in one process: a call on a suite task (found through its folder, the suite's
    workarounds switched on by it) writes their record; a later call on lmms-eval's own task, whose results writer
    writes its files after the call, writes what lmms-eval alone writes: nothing of the suite."""
    from lmms_eval import evaluator
    from lmms_eval.loggers.evaluation_tracker import EvaluationTracker
    from lmms_eval.tasks import TaskManager

    from lmms_egoplan.compat.replacements import RECORD_KEY
    from tests.fixtures import PROBE_TASKS
    from tests.harness.test_lmms_eval_behaviours import plain_task

    monkeypatch.delenv("LMMS_EVAL_PLUGINS", raising=False)
    (tmp_path / "probe.json").write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    monkeypatch.setenv("PROBE_DATA_FILE", str(tmp_path / "probe.json"))
    folders = [str(PROBE_TASKS), str(plain_task(tmp_path / "tasks"))]

    def evaluate(task: str) -> str:
        """The results and samples files of a ``simple_evaluate`` call of ``task``, as its caller writes them."""
        output = tmp_path / task
        writer = EvaluationTracker(output_path=str(output))
        results = evaluator.simple_evaluate(model="dummy", tasks=[task], log_samples=True, evaluation_tracker=writer,
                                            task_manager=TaskManager(include_path=folders, include_defaults=False))
        samples = results.pop("samples")
        writer.save_results_aggregated(results=results, samples=samples, datetime_str="20260101_000000")
        writer.save_results_samples(task_name=task, samples=samples[task])
        return "".join(path.read_text() for path in sorted(output.rglob("*.json*")))

    assert RECORD_KEY in evaluate("lmms_egoplan_probe")
    assert "lmms_egoplan" not in evaluate("plain_probe")
