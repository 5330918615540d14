"""ActPlan-1K (Su et al., EMNLP 2024): procedural plans for household activities.

Protocol (paper §3.1, §5.1): the model gets an activity's natural-language task description
(which states the allowed actions and the ``action(object)`` form) and the instance's 2-5 scene
images, in that order, ``P* = VLM([T, I1, I2, ...])`` (Eq. 4; ``input_order``), decoded greedily
(temperature 0), and writes a plan. The text-only variant (§5.5, Table 6) gives the description
alone.

Data (the release's layout): one instance per sample folder
``annotation/<scene>/<activity>/<problem>/sample_<k>/`` holding the scene images and one or more
gold plans ``plan_gold_<n>.txt`` (one step per line), with ``task_description_<problem>.txt``
beside the sample folders. Problem 0 is the Behavior-100 activity (the release's
``bddl/activity_definitions/<activity>/problem0.bddl`` is the Behavior-100 definition), higher
problem indices are its counterfactual variants (Table 2: 825 normal, 362 counterfactual
instances).

Metrics (§4.2): the LCS of the predicted and gold plans, two steps matching when the cosine
similarity of their all-MiniLM-L6-v2 embeddings is >= 0.8, and the LCS normalised by the longer
plan (``lmms_egoplan.actplan.lcs``); the accuracy of a fine-tuned BLEURT classifier
(``lmms_egoplan.actplan.classifier``); each overall and for normal / counterfactual instances. The model's
output is parsed into ``action(args)`` steps; lines in the plan that are not in that form are
counted as format errors.

Release loading and settings checks: ``lmms_egoplan.actplan.data``; plan parsing and scoring
(shared with ``lmms_egoplan.actplan.classifier``): ``lmms_egoplan.actplan.plans``. This module follows the task
YAMLs (``tasks/actplan/``): the instances and what the plan metrics share over a run, then what the harness calls
in order -- visuals, text, results, aggregation -- then the tasks' specs and the classes the YAMLs name.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Sequence

from loguru import logger

from lmms_egoplan.actplan.data import ENV_PREFIX, SPLITS, annotation_root, check_settings, load_instances
from lmms_egoplan.actplan.plans import PlanScore, aggregate_format_error_rate, bleurt_correct, parse_plan, score_lcs
from lmms_egoplan.actplan.settings import ActPlanSettings
from lmms_egoplan.contract.adapter import SAMPLE_SCORES
from lmms_egoplan.contract.benchmark import LoadedDocs, Metric, TaskContext, TaskSpec
from lmms_egoplan.core.embeddings import SentenceEncoder, run_encoder
from lmms_egoplan.core.files import valid_text, write_atomically
from lmms_egoplan.core.media import load_image
from lmms_egoplan.core.request_options import INPUT_ORDER
from lmms_egoplan.core.run import shared_scorer
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import mean_or_nan

# ---------------------------------------------------------------------------------------------
# The instances, and what the plan metrics share
# ---------------------------------------------------------------------------------------------


def load_docs(context: TaskContext) -> LoadedDocs:
    """The instances of the ``instances`` setting (all, or one split)."""
    settings = context.settings
    check_settings(settings, context.task_name)
    docs = load_instances(settings.data_root, allow_outside=settings.allow_paths_outside_root,
                          images_decoded=settings.images_decoded_at_load)
    return LoadedDocs([doc for doc in docs if settings.instances in ("all", doc["split"])],
                      read_from=[str(annotation_root(settings.data_root))])


class PlansOfTheRun:
    """What the plan metrics of a task share over a run (``TaskContext.state``): every plan metric (overall and per
    split) receives every plan of the run, keeps them in the run's plans file if no metric has yet, and reads the
    same LCS scores and BLEURT verdicts, whatever order the harness aggregates them in; each adds the plans' values it
    averaged to the run's per-plan scores (``contract.adapter.SAMPLE_SCORES``), which the report's intervals read."""

    def __init__(self, context: TaskContext):
        self.context = context
        self.plans_file: Path | None = None
        self._verdicts: RememberedVerdicts | None = None
        self._plan_scores: dict[str, dict] = {}  # instance id -> its values, in the run's order

    def keep_plans(self, items: Sequence[dict], args: Any) -> Path:
        """Write the run's plans, once, before any is scored, so that a failure while scoring loses
        none of the model's outputs: a pair file for ``lmms-egoplan actplan-score`` beside the
        results (``harness.run_files.run_file``: ``<date-time>_plans_<task>.jsonl``)."""
        if self.plans_file is None:
            run_files, task_name = self.context.run_files, self.context.task_name
            path = run_files.run_file(args, "plans")
            model = run_files.evaluated_model(args)
            label = f"{task_name}:{Path(model).name}" if model else task_name
            write_atomically(path, "".join(json.dumps({"model": label, "instance_id": item["instance_id"],
                                                       "split": item["split"], "candidate": item["output"],
                                                       "references": ["\n".join(g) for g in item["gold"]]}) + "\n"
                                           for item in items))
            logger.info(f"task {task_name}: plans kept in {path}")
            self.plans_file = path
        return self.plans_file

    def lcs_scores(self, items: Sequence[dict], args: Any) -> list[PlanScore]:
        """LCS of every plan of the run (cached by the shared matcher, so each pair is scored once)."""
        self.keep_plans(items, args)
        settings = self.context.settings
        return score_lcs([(item["prediction"], item["gold"]) for item in items], _matcher(self.context),
                         settings.gold_plan)

    def bleurt_verdicts(self, items: Sequence[dict], args: Any) -> list[int]:
        """The classifier's verdict on every plan of the run (each plan pair classified once per task)."""
        self.keep_plans(items, args)
        settings = self.context.settings
        if self._verdicts is None:
            self._verdicts = RememberedVerdicts(_classifier(self.context))
        return bleurt_correct([(item["prediction"], item["gold"]) for item in items], self._verdicts,
                              settings.gold_plan, settings.bleurt_batch_size)

    def mean_in_scope(self, family: str, items: Sequence[dict], values: Sequence[float], args: Any) -> float:
        """The mean of the values of the plans in the metric's scope (all plans, or one split's), after adding them
        to the run's per-plan scores under the metric's name (rewritten whole: a metric's values are all or none)."""
        in_scope = [(item, value) for item, value in zip(items, values) if item["scope"] in ("all", item["split"])]
        if items:
            metric = _metric_name(family, items[0]["scope"])
            for item in items:
                self._plan_scores.setdefault(item["instance_id"], {"instance_id": item["instance_id"],
                                                                   "split": item["split"]})
            for item, value in in_scope:
                self._plan_scores[item["instance_id"]][metric] = value
            write_atomically(self.context.run_files.run_file(args, SAMPLE_SCORES),
                             "".join(json.dumps(scores) + "\n" for scores in self._plan_scores.values()))
        return mean_or_nan(value for _, value in in_scope)


class RememberedVerdicts:
    """A plan classifier whose verdicts are remembered per (reference, candidate) pair, so that the
    BLEURT metrics of a task (overall and per split) classify each pair once; pairs repeated in
    one call (e.g. the same plan for two samples of a problem) are classified once too."""

    def __init__(self, classifier):
        self.classifier = classifier
        self._labels: dict[tuple[str, str], int] = {}

    def predict(self, references: Sequence[str], candidates: Sequence[str], batch_size: int = 16) -> list[int]:
        pairs = list(zip(references, candidates))
        new = list(dict.fromkeys(pair for pair in pairs if pair not in self._labels))
        if new:
            labels = self.classifier.predict([r for r, _ in new], [c for _, c in new], batch_size=batch_size)
            self._labels.update(zip(new, labels))
        return [self._labels[pair] for pair in pairs]


# ---------------------------------------------------------------------------------------------
# 1. Visuals
# ---------------------------------------------------------------------------------------------


def doc_to_visual(doc: dict) -> list:
    """The instance's 2-5 scene images, in frame-number order (paper §3.1)."""
    return [load_image(path) for path in doc["image_paths"]]


def doc_to_visual_text_only(doc: dict) -> list:
    """The text-only ablation (paper §5.5): no images."""
    return []


# ---------------------------------------------------------------------------------------------
# 2. Text
# ---------------------------------------------------------------------------------------------


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """The activity's natural-language task description (allowed actions, the ``action(object)`` form)."""
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{doc['description']}{kwargs.get('post_prompt', '')}"


def doc_to_target(doc: dict) -> str:
    """The first gold plan, one step per line (what ``gold_plan=first`` scores against)."""
    return "\n".join(doc["gold_plans"][0])


# ---------------------------------------------------------------------------------------------
# 3. Results
# ---------------------------------------------------------------------------------------------


def _metric_name(family: str, scope: str) -> str:
    return family if scope == "all" else f"{family}_{scope}"


def process_results(doc: dict, results: list[str], context: TaskContext) -> dict:
    """Per instance: the parsed plan for the run-level metrics (scored at aggregation, all at once).

    Every plan metric gets every instance's plan, its ``scope`` saying which instances the
    metric averages over (all, or one split), so that any of them can keep the run's plans.
    """
    settings = context.settings
    output = valid_text(results[0])  # no lone surrogate reaches the embedding model or the plans file
    plan = parse_plan(output)
    scored = {"instance_id": doc["instance_id"], "split": doc["split"], "output": output,
              "prediction": plan.steps, "gold": doc["gold_plans"]}
    families = ("lcs", "norm_lcs", *(("bleurt_accuracy",) if settings.bleurt_checkpoint else ()))
    scopes = ("all", *SPLITS) if settings.instances == "all" else ("all", settings.instances)
    values = {_metric_name(family, scope): {**scored, "scope": scope} for family in families for scope in scopes}
    values.update({"format_error_rate": plan.format_counts, "plan_length": len(plan.steps),
                   "no_plan_rate": float(not plan.steps)})
    return values


# ---------------------------------------------------------------------------------------------
# 4. Aggregation (format_error_rate: actplan_plans.aggregate_format_error_rate)
# ---------------------------------------------------------------------------------------------


def configured_matcher(settings: ActPlanSettings, encoder: SentenceEncoder | None = None):
    """A step matcher as ``settings`` configure it (its threshold and batch size; its embedding model and device:
    ``encoder``'s, default a new encoder of them)."""
    from lmms_egoplan.actplan.lcs import StepMatcher

    encoder = encoder or SentenceEncoder(settings.embedding_model or None, device=settings.scoring_device,
                                         runs="ActPlan-1K's step matcher")
    return StepMatcher(encoder, threshold=settings.match_threshold, batch_size=settings.embedding_batch_size)


def _matcher(context: TaskContext):
    """The run's step matcher of the task's settings (both tasks of a run share its LCS cache), with the run's
    sentence encoder of its model and device."""
    settings = context.settings
    key = ("step matcher", settings.embedding_model, settings.match_threshold, settings.scoring_device,
           settings.embedding_batch_size)
    return shared_scorer(context.run, key, lambda: configured_matcher(
        settings, run_encoder(context.run, settings.embedding_model or None, settings.scoring_device,
                              user=f"ActPlan-1K's step matcher ({setting_name(ENV_PREFIX, 'scoring_device')})")))


def _classifier(context: TaskContext):
    """The run's plan classifier of the task's settings, loaded once a run."""
    from lmms_egoplan.actplan.classifier import load_classifier

    settings = context.settings
    key = ("plan classifier", settings.bleurt_checkpoint, settings.bleurt_base, settings.scoring_device)
    return shared_scorer(context.run, key, lambda: load_classifier(
        settings.bleurt_checkpoint, base=settings.bleurt_base or None, device=settings.scoring_device))


def aggregate_lcs(items: list[dict], args=None, *, context: TaskContext) -> float:
    """Mean LCS over the metric's scope (``lcs``: all instances; ``lcs_<split>``: one split)."""
    state = context.state
    return state.mean_in_scope("lcs", items, [score.lcs for score in state.lcs_scores(items, args)], args)


def aggregate_norm_lcs(items: list[dict], args=None, *, context: TaskContext) -> float:
    """Mean normalised LCS over the metric's scope."""
    state = context.state
    return state.mean_in_scope("norm_lcs", items, [score.norm_lcs for score in state.lcs_scores(items, args)], args)


def aggregate_bleurt_accuracy(items: list[dict], args=None, *, context: TaskContext) -> float:
    """Fraction of the plans in the metric's scope that the BLEURT classifier judges correct."""
    state = context.state
    return state.mean_in_scope("bleurt_accuracy", items, state.bleurt_verdicts(items, args), args)


# ---------------------------------------------------------------------------------------------
# The tasks, as the harnesses build them
# ---------------------------------------------------------------------------------------------


def _plan_metrics(family: str, aggregation) -> tuple[Metric, ...]:
    """A plan metric overall and per split: each gets every plan and averages over its scope, so that any of them,
    whichever the harness aggregates first, can keep the run's plans before scoring them."""
    return tuple(Metric(_metric_name(family, scope), aggregation, with_context=True) for scope in ("all", *SPLITS))


PLAN_METRICS = (
    *(metric for pair in zip(_plan_metrics("lcs", aggregate_lcs), _plan_metrics("norm_lcs", aggregate_norm_lcs))
      for metric in pair),
    Metric("format_error_rate", aggregate_format_error_rate, higher_is_better=False),
    Metric("plan_length", "mean", higher_is_better=False),
    Metric("no_plan_rate", "mean", higher_is_better=False),
    *_plan_metrics("bleurt_accuracy", aggregate_bleurt_accuracy),  # scored only when bleurt_checkpoint is set
)


def unscored_metrics(context: TaskContext) -> dict[str, str]:
    """``bleurt_accuracy`` (and per split) without a classifier: why, and the setting that scores it."""
    if context.settings.bleurt_checkpoint:
        return {}
    return {"bleurt_accuracy": f"no BLEURT classifier is configured; set "
                               f"{setting_name(ENV_PREFIX, 'bleurt_checkpoint')} to one (lmms-egoplan "
                               f"actplan-train-bleurt, tasks/actplan/README.md)"}


WITH_IMAGES = TaskSpec(load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text,
                       doc_to_target=doc_to_target, process_results=process_results, metrics=PLAN_METRICS,
                       run_state=PlansOfTheRun, request_options={"input_order": INPUT_ORDER},
                       not_scored=unscored_metrics)
# The text-only ablation (§5.5): lmms-eval's task shows no image, so has no input order; lm-eval's has no visuals.
TEXT_ONLY = dataclasses.replace(WITH_IMAGES, doc_to_visual=doc_to_visual_text_only, request_options={})
TEXT_ONLY_LM_EVAL = dataclasses.replace(TEXT_ONLY, doc_to_visual=None)
