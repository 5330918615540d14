"""A group's metrics as lmms-eval computes them from its YAML (``aggregate_metric_list``): the suite's group file read
by lmms-eval's own loader and aggregated by its own ``consolidate_group_results`` over member results given here, so
that a test pins what a group reports (macro or micro, which metric is which) without running a task."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Mapping

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


def _leaf_class():
    from lmms_eval.api.task import Task

    class Leaf(Task):
        """A finished task: only its name is read."""

        def __init__(self, name: str):  # noqa: D107 (no task set-up: its results are given)
            self._name = name

        @property
        def task_name(self) -> str:
            return self._name

    Leaf.__abstractmethods__ = frozenset()
    return Leaf


def _task_dict(folder: Path, name: str, leaf) -> dict:
    from lmms_eval.api.group import ConfigurableGroup
    from lmms_eval.utils import load_yaml_config

    config = load_yaml_config(str(folder / f"{name}.yaml"))
    members = {}
    for member in config["task"]:
        is_group = (folder / f"{member}.yaml").is_file() and "group" in load_yaml_config(str(folder / f"{member}.yaml"))
        members.update(_task_dict(folder, member, leaf) if is_group else {member: leaf(member)})
    return {ConfigurableGroup(config=config): members}


def group_metrics(benchmark: str, group: str, members: Mapping[str, Mapping[str, float]],
                  samples: Mapping[str, int]) -> dict[str, dict]:
    """Every group's results under ``group`` (``tasks/<benchmark>/<group>.yaml``), nested ones included, from its
    leaf tasks' ``members`` (task -> metric -> value, lmms-eval's ``<metric>,none`` keys added here) of ``samples``
    questions each."""
    from lmms_eval.evaluator_utils import consolidate_group_results

    results = collections.defaultdict(dict)  # the groups' entries filled in by lmms-eval
    results.update({task: {**{f"{metric},none": value for metric, value in values.items()},
                      **{f"{metric}_stderr,none": "N/A" for metric in values}, "samples": samples[task]}
                    for task, values in members.items()})
    task_dict = _task_dict(TASKS_DIR / benchmark, group, _leaf_class())
    results, *_ = consolidate_group_results(results, {}, task_dict)
    return {name: {key.removesuffix(",none"): value for key, value in values.items() if key.endswith(",none")}
            for name, values in results.items() if name not in members}
