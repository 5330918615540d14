"""Judged tasks in lmms-eval: metrics an LLM judge scores after generation, all items at once.

lmms-eval calls ``process_results`` once per document (in threads), so a judge call there
blocks and cannot batch. A judged task instead has
``process_results`` return a self-contained judge item per sample (``judge_parts_item``);
the aggregation functions below then run on rank 0, after gathering, and send every item of
the task through the judge engine in one concurrent, cached batch. The audit trail is written
next to the results file (``<output_path>/<model>/<date>_judgements_<task>.jsonl``).

A judged benchmark needs:

* settings inheriting ``lmms_egoplan.judge.settings.JudgeSettings`` (so its judge is configured by
  ``<ENV_PREFIX>_JUDGE_MODEL`` etc.; the settings are checked before anything is generated);
* its ``Rubric``s by name (``Benchmark.rubrics``, what its task's judge reads its items with), and a task spec whose
  ``judge_rubric`` names the one its items carry, whose ``process_results`` returns
  ``{metric: judge_parts_item({"": request}, "<rubric name>") ...}`` for the judged metric and
  for ``judged`` / ``failed``, and whose metrics are ``contract.judged.JUDGED_METRICS`` (and any judged breakdown
  declared with ``contract.judged.judged``); the adapter then holds a ``Judging`` and aggregates each declaration
  with its function here (``JUDGED_AGGREGATIONS``);
* in a group YAML, ``aggregation: !function lmms_egoplan.core.statistics.sum_over_subtasks``
  for ``judged`` / ``failed`` (the group's totals).

A sample judged on several named parts (e.g. three answer fields, one request each)
reports the mean of its part scores under ``judged_score``; one part alone is reported by
returning an item holding only that part under the part's metric. Breakdowns (a metric only
some samples return, e.g. per scenario) use ``judged_score`` too. Every metric of a task reads
the same judgements: each request is judged once, whichever metric lmms-eval aggregates first.

What judged the task is recorded whole (``lmms_egoplan.judge.identity.JudgeIdentity``: backend, model,
revision, the served model and fingerprint the preflight's answer names, the judge prompt's hash and
the rubric's version): in the config's ``metadata`` (so in the results file), in each judged item
(so in the samples file) and in each line of the audit trail.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from loguru import logger

from lmms_egoplan.compat.durability import ask_for_exit_status, note_kept_on_stop
from lmms_egoplan.contract.benchmark import Benchmark, Judged, TaskContext, TaskSpec
from lmms_egoplan.contract.judged import PREDICT_ONLY_ITEMS
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.harness.failed_requests import FAILED_REQUEST_MARK, is_failed_request_item
from lmms_egoplan.harness.rejudge import rejudge_command
from lmms_egoplan.judge.cache import JudgeCacheError
from lmms_egoplan.judge.engine import Judge, RetiredJudgeError, preflight
from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.judge.protocol import Judgement, JudgeResults
from lmms_egoplan.judge.rubrics import (
    ItemScore,
    is_judge_parts_item,
    item_requests,
    items_rubric,
    load_rubric,
    score_judged,
    unjudged,
)
from lmms_egoplan.judge.settings import JudgeSettings, JudgeSetupError


class Judging:
    """The judge of a judged task, which its adapter's compiled task holds (``harness.compiled_task``, for lmms-eval's
    ``SuiteTask`` and lm-eval's ``SuiteBaseline``) and hands the task's hooks (``TaskContext.judging``): it checks the
    judge's settings before the data is read and that the judge answers before any model call, marks each judged
    item with the judge, and scores the task's judged metrics with the judge engine (one engine per judge
    configuration, shared by the run's tasks). ``metadata``: the task config's, where the judge is recorded for the
    results file. ``record_outcome``: what the harness does with a metric's judgements once made (lmms-eval:
    ``record_task_judgements``, the run's exit status)."""

    def __init__(self, benchmark: Benchmark, spec: TaskSpec, context: TaskContext, metadata: dict, *,
                 record_outcome: Callable[[SuiteRun, str, JudgeResults, JudgeSettings], None] | None = None):
        if not issubclass(benchmark.settings, JudgeSettings):
            raise TypeError(f"{benchmark.name}: its settings must inherit lmms_egoplan.judge.settings.JudgeSettings")
        self.task_name = context.task_name
        self.context = context  # its run (``context.run``) is set once the adapter joins one
        self.run_files = context.run_files
        self.metadata = metadata
        self.settings = JudgeSettings.of(context.settings)
        self.rubrics = benchmark.rubrics  # what reads its judged items, by the names they carry
        self.rubric = spec.judge_rubric(context.settings)  # the name its judged items carry
        self._setting_name = functools.partial(setting_name, benchmark.entry.env_prefix)
        self._record_outcome = record_outcome
        self._judgements: dict[str, Judgement] = {}  # by request id, over all metrics of the task
        self._judgements_lock = threading.Lock()

    def record_judge(self) -> None:
        """The task's judge (with what its server said answered the preflight, once it has), as the
        results' metadata and each judged item record it."""
        run = self.context.run  # None while the task is compiled, before its adapter gives it one: no preflight yet
        self.identity = JudgeIdentity.of(self.settings, self.rubric, load_rubric(self.rubric, self.rubrics),
                                         run.answering_judges.get(self.settings) if run is not None else None)
        self.metadata.update(self.identity.metadata())

    def with_judge(self, values: dict) -> dict:
        """``values`` (a sample's metric values), each judged item carrying the task's judge."""
        for value in values.values():
            if is_judge_parts_item(value):
                value["judge"] = self.identity.record()
        return values

    def check_settings(self) -> None:
        """The judge is configured so that it can work: checked before the data is read, let alone generated."""
        try:
            self.settings.check(name=self._setting_name)
        except JudgeSetupError as error:
            raise SettingsError(f"task {self.task_name}: {error}") from None

    def check_answers(self) -> None:
        """Before any model call, the judge answers one short request (``judge.engine.preflight``; once per
        judge configuration and run), unless ``judge_preflight`` is off."""
        settings, name, run = self.settings, self._setting_name, self.context.run
        if not settings.judge_preflight:
            return
        if settings not in run.answering_judges:
            try:
                run.answering_judges[settings] = preflight(settings)
            except RetiredJudgeError as error:
                raise SettingsError(f"task {self.task_name}: {error}; "
                                    f"{error.retirement.explain(name('judge_model'))}") from None
            except JudgeCacheError as error:  # the cache's folder or disk, not the judge: nothing to say of the server
                raise SettingsError(f"task {self.task_name}: {error}; judge_cache_dir is set by "
                                    f"{name('judge_cache_dir')}") from None
            except JudgeSetupError as error:
                raise SettingsError(
                    f"task {self.task_name}: {error}; check {name('judge_base_url')}, {name('judge_model')} and "
                    f"{name('judge_api_key_env')}, or set {name('judge_preflight')} to false to generate now and "
                    f"judge later with `lmms-egoplan rejudge`") from None
        self.record_judge()

    def failed_request_scores(self, failure: str, judged_metrics: Sequence[str]) -> dict:
        """A sample whose model request failed goes to every judged metric marked so (never to the
        judge): a metric over failed samples alone is then NaN, as one whose judgements all failed,
        and a group's mean over its subtasks NaN with it, not a mean over fewer subtasks."""
        return {metric: {FAILED_REQUEST_MARK: failure} for metric in judged_metrics}

    def logged_items(self, doc: dict, results: Sequence, scoring: Callable) -> dict:
        """What a ``--predict_only`` run logs per sample: the judge items (``{"judge_items": {metric: item}}``), so
        that ``lmms-egoplan rejudge`` can judge its log (lmms-eval logs neither docs nor prompts); building them
        with the task's ``scoring`` (its ``process_results``) calls no judge."""
        answers = [answer.strip() if isinstance(answer, str) else answer for answer in results]
        scores = scoring(doc, answers)
        return {PREDICT_ONLY_ITEMS: self.with_judge({metric: value for metric, value in scores.items()
                                                     if is_judge_parts_item(value)})}

    def score(self, items: Sequence[dict], args: Any) -> ItemScore:
        """Score ``items``, judging in one concurrent batch only the requests no metric of this
        task has had judged yet: every metric (overall, per part, breakdowns over subsets of the
        samples) reads the same judgements, whatever order the harness aggregates them in. The samples
        whose model request failed (``failed_request_scores``) are left out, as failed judgements
        are: a metric none of whose samples was answered is NaN."""
        settings = self.settings
        items = [item for item in items if not is_failed_request_item(item)]
        if not items:  # every sample's request failed: nothing to judge, no judge to load
            nothing = JudgeResults([], f"{settings.judge_backend}:{settings.judge_model}")
            return self._outcome(ItemScore(math.nan, nothing))
        trail = self.run_files.run_file(args, "judgements")
        with self._judgements_lock:
            judge = _shared_judge(self.context.run, settings)
            if isinstance(judge, JudgeUnavailable):
                return self._outcome(unjudged(items, judge.model, f"judge unavailable: {judge.error}"))
            pending = [request for request in item_requests(items)
                       if getattr(self._judgements.get(request.id), "messages", None) != request.messages]
            if pending and judge.cache is not None:
                note_kept_on_stop(self.context.run,
                                  f"judgements already made are in the judge cache {judge.cache.path}")
            # With nothing pending no call is made and no audit file is written.
            results = judge.run(pending, items_rubric(items, self.rubrics).parse_rating, audit_path=trail,
                                append_audit=True, description=f"Judging {self.task_name}",
                                identity=self.identity.record())
            self._judgements.update((j.id, j) for j in results.judgements)
            return self._outcome(score_judged(items, self._judgements, self.rubrics, judge_model=judge.model,
                                              audit_path=trail))

    def _outcome(self, scored: ItemScore) -> ItemScore:
        if self._record_outcome is not None:
            self._record_outcome(self.context.run, self.task_name, scored.results, self.settings)
        return scored


def record_task_judgements(run: SuiteRun, task_name: str, results: JudgeResults, settings: JudgeSettings) -> None:
    """Remember a task's judgements (every metric reads the same ones, so the largest set is
    the task's), so that the run ends with a distinct status if some failed, once its results
    and samples files are written (``failed_judgements_verdict``)."""
    known = run.task_judgements.get(task_name)
    if known is None or len(results.judgements) >= known.total:
        run.task_judgements[task_name] = TaskJudgements(results.failed, len(results.judgements), settings)
    ask_for_exit_status(run, failed_judgements_verdict)


@dataclass(frozen=True)
class TaskJudgements:
    failed: int
    total: int
    settings: JudgeSettings


def failed_judgements_verdict(run: SuiteRun, files: Sequence[Path]) -> tuple[int, str] | None:
    """(exit status, what to do) when judgements of ``run`` failed: how many, of which tasks, and
    the ``lmms-egoplan rejudge`` command that asks the judge for them (and takes the others from the
    judge cache); None when none failed. ``files``: the results and samples files of the run."""
    failed = {task: outcome for task, outcome in run.task_judgements.items() if outcome.failed}
    if not failed:
        return None
    total = sum(outcome.total for outcome in run.task_judgements.values())
    counts = ", ".join(f"{task} {outcome.failed}" for task, outcome in failed.items())
    line = (f"{sum(o.failed for o in failed.values())} of {total} judgements failed ({counts}) and are left out of "
            f"the scores; the results and the judge cache are written")
    silent = [judge.stopped_answering for judge in run.judges.values()
              if isinstance(judge, Judge) and judge.stopped_answering]
    if silent:  # said once, whatever the number of tasks it would have judged
        line += "; " + "; ".join(silent) + " (start it again first)"
    by_judge: dict[JudgeSettings, list[str]] = {}
    for task, outcome in failed.items():
        by_judge.setdefault(outcome.settings, []).append(task)
    commands = []
    for settings, tasks in by_judge.items():
        samples = [str(f) for task in tasks for f in files if f.name.endswith(f"_samples_{task}.jsonl")]
        if len(samples) == len(tasks):
            commands.append(rejudge_command(samples, files[0].parent, settings))
    if commands:
        line += "; judge the failed ones with: " + " ; ".join(commands)
    else:
        answers = (f", the model's answers from the response cache {run.response_cache_root}"
                   if run.response_cache_root else "")
        line += (f"; re-run the same command to judge them (judgements already made come from the judge cache"
                 f"{answers}), or add --log_samples to judge them later with lmms-egoplan rejudge")
    return max(o.settings.judge_failed_exit_status for o in failed.values()), line


@dataclass(frozen=True)
class JudgeUnavailable:
    """A judge configuration that failed to load (remembered: loading is not retried per metric)."""

    model: str
    error: str


_JUDGES_LOCK = threading.Lock()  # a run's judges are filled from the aggregation threads of several tasks


def _shared_judge(run: SuiteRun, settings: JudgeSettings) -> Judge | JudgeUnavailable:
    """One engine per judge configuration and run: the tasks of ``run`` share its client, cache and (hf)
    model. One that fails to load (e.g. an hf judge that does not exist) is reported once and
    fails every judgement of every metric that asks for it, instead of reloading each time."""
    with _JUDGES_LOCK:
        if settings not in run.judges:
            try:
                run.judges[settings] = Judge.from_settings(settings)
            except Exception as error:  # report, and keep the run: the generations are logged
                model = f"{settings.judge_backend}:{settings.judge_model}"
                logger.error(f"the judge {model} is unavailable ({error}); every answer it should judge counts as "
                             f"failed; re-score the logged samples with lmms-egoplan rejudge")
                run.judges[settings] = JudgeUnavailable(model, str(error))
        return run.judges[settings]


def _judging(context: TaskContext) -> Judging:
    if context.judging is None:
        raise TypeError(f"task {context.task_name}: judged metrics aggregate only in a task whose spec is judged "
                        f"(TaskSpec.judge_rubric)")
    return context.judging


def judged_score(items: Sequence[dict], args: Any = None, *, context: TaskContext) -> float:
    """The judged metric: mean rating x the rubric's scale over successful judgements (NaN if none)."""
    return _judging(context).score(items, args).score


def judged_count(items: Sequence[dict], args: Any = None, *, context: TaskContext) -> int:
    """Judgements with a valid rating."""
    return _judging(context).score(items, args).results.judged


def failed_count(items: Sequence[dict], args: Any = None, *, context: TaskContext) -> int:
    """Failed judgements (no answer, or no valid rating)."""
    return _judging(context).score(items, args).results.failed


# What each judged declaration of a spec (``contract.judged``) aggregates with.
JUDGED_AGGREGATIONS: dict[Judged, Callable] = {
    Judged.SCORE: judged_score, Judged.COUNT: judged_count, Judged.FAILED: failed_count}
