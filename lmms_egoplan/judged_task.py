"""Judged tasks in lmms-eval: metrics an LLM judge scores after generation, all items at once.

lmms-eval calls ``process_results`` once per document (in threads, under a retry wrapper), so
a judge call there blocks, repeats and cannot batch. A ``JudgedTask`` instead has
``process_results`` return a self-contained judge item per sample (``judge.judge_item``);
the aggregation functions below then run on rank 0, after gathering, and send every item of
the task through the judge engine in one concurrent, cached batch. The audit trail is written
next to the results file (``<output_path>/<model>/<date>_judgements_<task>.jsonl``).

A judged benchmark needs:

* ``Settings`` inheriting ``lmms_egoplan.judge.JudgeSettings`` (so its judge is configured by
  ``<ENV_PREFIX>_JUDGE_MODEL`` etc.; the settings are checked before anything is generated);
* ``process_results`` returning ``{metric: judge_item(request, "<module>:<RUBRIC>") ...}`` for
  the judged metric and for ``judged`` / ``failed``;
* this ``metric_list`` in its YAML (and ``class:`` a ``JudgedTask`` subclass)::

      metric_list:
        - metric: score      # mean rating x the rubric's scale; failed judgements excluded
          aggregation: !function lmms_egoplan.judged_task.judged_score
          higher_is_better: true
        - metric: judged     # judgements with a valid rating
          aggregation: !function lmms_egoplan.judged_task.judged_count
          higher_is_better: true
        - metric: failed     # failed calls and answers without a valid rating
          aggregation: !function lmms_egoplan.judged_task.failed_count
          higher_is_better: false

  and, in a group YAML, ``aggregation: !function lmms_egoplan.judged_task.sum_over_subtasks``
  for ``judged`` / ``failed`` (the group's totals).
"""

from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any, Sequence

from lmms_egoplan.harness import BenchmarkTask, SettingsError
from lmms_egoplan.judge import ItemScore, Judge, JudgeSettings, JudgeSetupError, score_items


class JudgedTask(BenchmarkTask):
    """A BenchmarkTask whose metrics are rated by an LLM judge (see the module docstring)."""

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        if not issubclass(self.Settings, JudgeSettings):
            raise TypeError(f"{type(self).__name__}.Settings must inherit lmms_egoplan.judge.JudgeSettings")
        try:
            JudgeSettings.of(self.settings).check()
        except JudgeSetupError as error:
            raise SettingsError(f"task {self.config.task}: {error}") from None
        self._scores: dict[tuple[str, ...], ItemScore] = {}
        self._scores_lock = threading.Lock()

    def aggregation(self):
        return {metric: functools.partial(function, task=self) if function in _JUDGE_AGGREGATIONS else function
                for metric, function in super().aggregation().items()}

    def judge_score(self, items: Sequence[dict], args: Any) -> ItemScore:
        """Judge the task's items once; every judged metric of the task reads the same outcome."""
        key = tuple(item["judge_request_id"] for item in items)
        with self._scores_lock:
            if key not in self._scores:
                judge = _shared_judge(JudgeSettings.of(self.settings))
                self._scores[key] = score_items(items, judge, audit_path=audit_path(args, self.config.task),
                                                description=f"Judging {self.config.task}")
            return self._scores[key]


@functools.cache
def _shared_judge(settings: JudgeSettings) -> Judge:
    # One engine per judge configuration: the tasks of a run share its client, cache and (hf) model.
    return Judge.from_settings(settings)


@functools.cache
def _run_stamp(timezone: str | None) -> str:
    """One date-time per run, formatted (and in the time zone) as lmms-eval names its files."""
    from lmms_eval.utils import get_datetime_str

    return get_datetime_str(timezone=timezone) if timezone else get_datetime_str()


def audit_path(args: Any, task: str) -> Path:
    """Where a task's judgements go: beside lmms-eval's results file (``./judgements`` without --output_path)."""
    file_name = f"{_run_stamp(getattr(args, 'timezone', None))}_judgements_{task}.jsonl"
    output_path = getattr(args, "output_path", None)
    if not output_path:
        return Path.cwd() / "judgements" / file_name
    from lmms_eval.loggers.evaluation_tracker import GeneralConfigTracker
    from lmms_eval.utils import sanitize_model_name

    model_args = getattr(args, "model_args", "")
    model = GeneralConfigTracker._get_model_name(model_args if isinstance(model_args, str) else "")
    return Path(output_path) / sanitize_model_name(model) / file_name


def _task_of(task: JudgedTask | None) -> JudgedTask:
    if task is None:
        raise TypeError("judged metrics aggregate only in a task whose YAML class: is a lmms_egoplan JudgedTask")
    return task


def judged_score(items: Sequence[dict], args: Any = None, *, task: JudgedTask | None = None) -> float:
    """The judged metric: mean rating x the rubric's scale over successful judgements (NaN if none)."""
    return _task_of(task).judge_score(items, args).score


def judged_count(items: Sequence[dict], args: Any = None, *, task: JudgedTask | None = None) -> int:
    return _task_of(task).judge_score(items, args).results.judged


def failed_count(items: Sequence[dict], args: Any = None, *, task: JudgedTask | None = None) -> int:
    return _task_of(task).judge_score(items, args).results.failed


_JUDGE_AGGREGATIONS = (judged_score, judged_count, failed_count)


def sum_over_subtasks(metrics: Sequence[float], sizes: Sequence[int], weight_by_size: bool = False) -> float:
    """Group aggregation for counts (``judged``, ``failed``): the subtasks' total."""
    return sum(metrics)
