"""Nothing users see changes (issue 50, point 6): task and group names, backends and their model_args, the
environment variables, each task's settings (YAML metadata keys and defaults, the judge's prompt hashes), the
``lmms-egoplan`` commands and flags, the exit statuses, compared to the snapshots in ``user_surface/`` (taken at
5a0c717, before the refactor; ``LMMS_EGOPLAN_UPDATE_SNAPSHOTS=1`` rewrites them); each task's metrics and each
group's aggregations compared to its generated card (``tasks/<benchmark>/task_cards.md``, issue 75).
The results files of real runs: tests/e2e/test_user_surface.py."""

import json
import os
import re
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.architecture.user_surface import (
    command_parsers,
    compare_with_snapshot,
    demo_environment,
    documented_exit_statuses,
    environment_names_in_code,
    environment_reads,
    exit_status_constants,
    flags,
    index_kind,
    lm_eval_task_folder,
    lmms_eval_task_folder,
    recorded_settings,
    task_index,
)

CHECKOUT = Path(__file__).resolve().parents[2]


def test_task_and_group_names_of_both_harnesses():
    compare_with_snapshot("task_names", {"lmms-eval (LMMS_EVAL_PLUGINS=lmms_egoplan)": task_index("lmms_eval"),
                                         "lm-eval (--include_path lm_eval_tasks)": task_index("lm_eval")})


BACKENDS = """
import inspect, json, lmms_eval.models as models
suite = [name for name, path in models.AVAILABLE_SIMPLE_MODELS.items() if path.startswith("lmms_egoplan.")]
def model_args(backend):
    parameters = list(inspect.signature(models.get_model(backend)).parameters.values())[1:]  # after self
    return {p.name: "<required>" if p.default is p.empty else p.default for p in parameters
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
print(json.dumps({name: model_args(name) for name in suite}, default=str))
"""


def test_backends_and_their_model_args():
    """The backends lmms-eval registers for ``LMMS_EVAL_PLUGINS=lmms_egoplan`` (a process of their own: lmms-eval
    reads the variable when it first imports its models) and the model_args each takes, with its default."""
    completed = subprocess.run([sys.executable, "-W", "ignore", "-c", BACKENDS], capture_output=True, text=True,
                               env={**os.environ, "LMMS_EVAL_PLUGINS": "lmms_egoplan"}, check=True)
    compare_with_snapshot("backends", json.loads(completed.stdout.splitlines()[-1]))


@pytest.fixture(scope="module")
def built_tasks(tmp_path_factory):
    """Every task of both harnesses built as the harness builds it, on the demo's synthetic data and loopback
    judges, and the environment variables the package read meanwhile."""
    from lm_eval.tasks import TaskManager as LmEvalTaskManager
    from lm_eval.tasks import get_task_dict as lm_eval_task_dict
    from lmms_eval.tasks import TaskManager, get_task_dict

    with ExitStack() as resources, pytest.MonkeyPatch.context() as patch:
        env = demo_environment(tmp_path_factory.mktemp("demo"), resources)
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setenv("LMMS_EVAL_PLUGINS", "lmms_egoplan")
        with environment_reads() as read:
            tasks = {}
            for harness, manager, build in (
                    ("lmms-eval", TaskManager(include_path=lmms_eval_task_folder(), include_defaults=False),
                     get_task_dict),
                    ("lm-eval", LmEvalTaskManager(include_path=lm_eval_task_folder(), include_defaults=False),
                     lm_eval_task_dict)):
                names = sorted(name for name, entry in manager.task_index.items() if index_kind(entry) != "tag")
                tasks[harness] = flatten(build(names, manager))
        yield tasks, env, sorted(read)


def flatten(task_dict) -> dict:
    """name -> task, and name -> group (its key, a group object of the harness), groups opened."""
    found = {}
    for key, value in task_dict.items():
        if isinstance(value, dict):
            found[key.group_name] = key
            found.update(flatten(value))
        else:
            found[key] = value
    return found


def group_summary(group) -> dict:
    """A group's members and aggregated metrics (lmms-eval's group config is an object, lm-eval's a dict)."""
    config = group.config if isinstance(group.config, dict) else vars(group.config)
    members = config["task"] if isinstance(config["task"], list) else [config["task"]]
    return {"group of": sorted(member if isinstance(member, str) else member["task"] for member in members),
            "aggregated metrics": [getattr(metric, "metric", None) or metric["metric"]
                                   for metric in config.get("aggregate_metric_list") or ()]}


def card_sections() -> dict[str, str]:
    """Each task's and group's section of the generated cards (``harness.task_cards``), by its name."""
    sections = {}
    for path in (path for tree in ("tasks", "lm_eval_tasks") for path in (CHECKOUT / tree).glob("*/task_cards.md")):
        for section in path.read_text().split("\n## `")[1:]:
            sections[section.split("`", 1)[0]] = section
    return sections


def card_metrics(section: str) -> dict[str, bool]:
    """A card's metric table (a group's: its aggregated metrics, by whether they are weighted by size)."""
    return {name: flag == "yes" for name, flag in re.findall(r"^\| `(\w+)` \| .* \| (yes|no) \|$", section, re.M)}


def test_each_tasks_card_says_its_metrics_and_output_type_and_each_groups_its_members_and_aggregations(built_tasks):
    """The cards replace the snapshot of every task's metrics (issue 75): every metric a task reports as the harness
    builds it (on the demo's data) is on its card with whether higher is better, or is one the card names the
    function for (those the documents decide) or ``skipped_samples`` (a loader that left samples out)."""
    tasks, _, _ = built_tasks
    sections = card_sections()
    for built in tasks.values():
        for name, task in built.items():
            section = sections[name]
            if hasattr(task, "group_name"):
                summary = group_summary(task)
                assert list(card_metrics(section)) == summary["aggregated metrics"], name
                assert all(f"`{member}`" in section.split("\n")[2] for member in summary["group of"]), name
                continue
            context = task.compiled.context
            decided = {metric.name: metric.higher_is_better for metric in
                       (task.spec.metrics_of_the_data(context, context.loaded.docs)
                        if task.spec.metrics_of_the_data is not None else ())}
            skipped = {"skipped_samples": False} if context.loaded.skipped is not None else {}
            assert dict(task.higher_is_better()) == {**decided, **card_metrics(section), **skipped}, name
            assert f"- output type: `{task.config.output_type}`" in section, name


def test_each_tasks_recorded_settings_their_defaults_and_the_judges_prompt_hashes(built_tasks):
    """The settings a results file records per task (its config ``metadata``): every key, with the default
    value a user gets (values the test set, and the judge reply's served model and fingerprint, masked)."""
    tasks, env, _ = built_tasks
    compare_with_snapshot("task_settings", {
        harness: {name: recorded_settings(task.config.metadata, env) for name, task in built.items()
                  if not hasattr(task, "group_name")}
        for harness, built in tasks.items()})


def test_the_environment_variables_the_package_reads(built_tasks):
    """Each benchmark's ``<PREFIX>_<SETTING>``, read whenever a task is built, and the others, named in the code
    (read once a process: whether a build reads them depends on what ran before it in the same process)."""
    _, _, read_while_building = built_tasks
    named = environment_names_in_code()
    compare_with_snapshot("environment_variables", {
        "read while building every task (each benchmark's <PREFIX>_<SETTING>)": sorted(set(read_while_building)
                                                                                      - set(named)),
        "named where the code reads one": named})


def test_every_lmms_egoplan_command_and_flag_with_its_default():
    compare_with_snapshot("cli", {name or "lmms-egoplan": flags(parser) for name, parser in command_parsers().items()})


def test_the_exit_statuses_documented_and_the_constants_behind_them():
    compare_with_snapshot("exit_statuses", {"docs/running.md": documented_exit_statuses(),
                                            "constants": exit_status_constants()})
