"""ActPlan-1K's plans: a model's output parsed into ``action(args)`` steps (format errors counted),
plans scored against gold plans (LCS, BLEURT verdicts), and plans scored outside the harness
(``lmms-egoplan actplan-score``). Shared by ``lmms_egoplan.actplan.task`` and ``lmms_egoplan.actplan.classifier``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from lmms_egoplan.actplan.data import (
    FORMAT_PLACEHOLDER,
    GOLD_CHOICES,
    SPLITS,
    ActPlanDataError,
    candidate_plan_files,
    gold_steps,
    load_instances,
    plan_lines,
    split_of_path,
)
from lmms_egoplan.core.files import read_jsonl, read_text
from lmms_egoplan.core.reasoning import without_reasoning
from lmms_egoplan.core.statistics import mean_or_nan
from lmms_egoplan.core.text_tables import format_table

# ---------------------------------------------------------------------------------------------
# Plan parsing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedPlan:
    """The ``action(args)`` steps found in a model's output and the format errors around them.

    ``plan_lines``: non-blank lines from the first to the last line holding a step (the whole
    output when there is none; code-fence lines never count). ``format_errors``: those of them
    that are not only steps named by one token (prose, malformed steps, steps with comments,
    ``walk to(kitchen)``).
    """

    steps: list[str]
    plan_lines: int
    format_errors: int

    @property
    def format_counts(self) -> dict[str, int]:
        """What ``aggregate_format_error_rate`` pools over plans."""
        return {"format_errors": self.format_errors, "plan_lines": self.plan_lines}


def parse_plan(text: str) -> ParsedPlan:
    """Extract the steps of a free-form plan (numbered lists, bullets, code fences, prose around it), its reasoning
    blocks left out (``core.reasoning``: a thinking model's drafts are not its plan).

    Lines are split into steps as gold plans are (``actplan.data.plan_lines``); what differs is
    other text: here it is a format error and scores nothing, in a gold plan it is a step."""
    lines = plan_lines(without_reasoning(text))
    steps = [[step for step in line.steps if not FORMAT_PLACEHOLDER.search(step)] for line in lines]
    with_steps = [i for i, found in enumerate(steps) if found]
    if with_steps:
        lines, steps = lines[with_steps[0]:with_steps[-1] + 1], steps[with_steps[0]:with_steps[-1] + 1]
    return ParsedPlan(steps=[step for found in steps for step in found], plan_lines=len(lines),
                      format_errors=sum(not line.in_form or len(found) < len(line.steps)
                                        for line, found in zip(lines, steps)))


def aggregate_format_error_rate(counts: Iterable[Mapping[str, int]]) -> float:
    """Format-error lines / plan lines, pooled over plans (``ParsedPlan.format_counts`` each);
    nan when no plan has a single line."""
    counts = list(counts)
    lines = sum(count["plan_lines"] for count in counts)
    return sum(count["format_errors"] for count in counts) / lines if lines else math.nan


# ---------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanScore:
    lcs: int
    norm_lcs: float
    gold_index: int  # which of the instance's gold plans the values refer to


def score_lcs(pairs: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]], matcher,
              gold: str = "first") -> list[PlanScore]:
    """LCS / normalised LCS of each (predicted steps, gold plans) pair.

    ``gold="first"``: against the first gold plan (the default); ``"best"``: against
    the gold plan giving the highest normalised LCS (ties: longer LCS, then the earlier plan).
    """
    from lmms_egoplan.actplan.lcs import normalized_lcs

    if gold not in GOLD_CHOICES:
        raise ValueError(f"gold must be one of {GOLD_CHOICES}, got {gold!r}")
    chosen = [golds[:1] if gold == "first" else golds for _, golds in pairs]
    lengths = iter(matcher.lcs_many([(prediction, g) for (prediction, _), golds in zip(pairs, chosen) for g in golds]))
    scores = []
    for (prediction, _), golds in zip(pairs, chosen):
        candidates = [PlanScore(lcs, normalized_lcs(lcs, len(prediction), len(g)), k)
                      for k, (g, lcs) in enumerate(zip(golds, lengths))]
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
# Scoring plans outside the harness (`lmms-egoplan actplan-score`)
# ---------------------------------------------------------------------------------------------

STEP_MODES = ("parsed", "lines")  # the first is the default
# ``gold`` of ``candidates_from_release``: each model's plans against the gold file the release pairs them with.
RELEASE_PAIRING = "release-pairing"


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
    """``steps="parsed"``: the plan's ``action(args)`` steps are scored, read as the run reads them (``parse_plan``);
    ``"lines"``: the release's ``text.split("\\n")`` verbatim (a trailing newline gives a final empty step, which
    matches the other plan's), less reasoning blocks where it has any (the release's plans have none). Format
    errors are counted on the parsed plan either way."""
    parsed = parse_plan(text)
    answer = without_reasoning(text)
    lines = (text if answer == text.strip() else answer).split("\n")
    return CandidatePlan(model, instance_id, split, parsed.steps if steps == "parsed" else lines, gold, parsed)


def _gold(text: str, steps: str) -> list[str]:
    return gold_steps(text) if steps == "parsed" else text.split("\n")


def release_gold_file(model: str) -> str:
    """The gold file the release's ``auto_lcs`` scripts score a model's plans against: its readme
    pairs Gemini (``plan_gemini*.txt``) with ``plan_gold_2.txt``, GPT-4V and Claude with ``plan_gold_1.txt``."""
    return "plan_gold_2.txt" if "gemini" in model.lower() else "plan_gold_1.txt"


def _release_gold(doc: dict, gold: str, steps: str) -> list[list[str]]:
    """An instance's gold plans to score against (``gold``: first / best: all of them, else the
    named file; none when it lacks that file). Parsed steps are those ``load_instances`` read;
    ``lines`` needs each file's text verbatim."""
    names = doc["gold_files"] if gold in GOLD_CHOICES else [gold] if gold in doc["gold_files"] else []
    if steps == "parsed":
        return [doc["gold_plans"][doc["gold_files"].index(name)] for name in names]
    return [_gold(read_text(Path(doc["folder"]) / name, ActPlanDataError), steps) for name in names]


def candidates_from_release(data_root: str | Path, models: Sequence[str] | None = None, *, gold: str = "first",
                            steps: str = STEP_MODES[0],
                            allow_outside: bool = False) -> tuple[list[CandidatePlan], list[str]]:
    """The VLM plans shipped in the release layout (``plan_<model>.txt``), with notes on what was left out.

    ``gold``: first / best, a gold file name (``plan_gold_2.txt``), or ``RELEASE_PAIRING``: the
    file ``release_gold_file`` names for the model.
    """
    plans = []
    left_out: dict[str, int] = {}
    instances = load_instances(data_root, allow_outside=allow_outside)
    wanted = list(models) if models else sorted({m for doc in instances
                                                 for m in candidate_plan_files(Path(doc["folder"]))})
    for model in wanted:
        model_gold = release_gold_file(model) if gold == RELEASE_PAIRING else gold
        for doc in instances:
            candidate = Path(doc["folder"]) / f"plan_{model}.txt"
            doc_golds = _release_gold(doc, model_gold, steps)
            if not candidate.is_file() or not doc_golds:
                reason = f"{model}: no {candidate.name}" if not candidate.is_file() else f"{model}: no {model_gold}"
                left_out[reason] = left_out.get(reason, 0) + 1
                continue
            plans.append(candidate_plan(model, doc["instance_id"], doc["split"], read_text(candidate, ActPlanDataError),
                                        doc_golds, steps))
    return plans, [f"{count} instance(s) left out ({reason})" for reason, count in sorted(left_out.items())]


def candidates_from_jsonl(path: str | Path, *, model: str | None = None,
                          steps: str = STEP_MODES[0]) -> list[CandidatePlan]:
    """Plan pairs from JSONL rows with ``candidate`` and ``reference`` (or ``references``) texts.

    Reads the release's ``auto_lcs/*_pairs.jsonl`` and the plans files (``<date-time>_plans_<task>.jsonl``)
    this suite writes beside lmms-eval results. The split comes from ``split`` or from the instance
    path in ``instance_id`` / ``dir`` / ``path``; the model from ``model``, else the file name.
    Gold texts are split into steps as the release's gold files are (``gold_steps``: one step per
    line, or steps joined by spaces as in ``finetuning_data.jsonl``); one without a step is an error.
    """
    path = Path(path)
    plans = []
    for number, row in read_jsonl(path, ActPlanDataError):
        references = row.get("references") or ([row["reference"]] if "reference" in row else [])
        texts = (isinstance(row.get("candidate"), str) and isinstance(references, list)
                 and all(isinstance(r, str) for r in references))
        if not texts or not references:
            raise ActPlanDataError(f"{path}:{number}: needs 'candidate' and 'reference' (or 'references') texts")
        field = "references" if row.get("references") else "reference"
        for index, reference in enumerate(references):
            if not gold_steps(reference):
                which = f"'{field}' item {index + 1}" if field == "references" else f"'{field}'"
                raise ActPlanDataError(f"{path}:{number}: the gold plan in {which} has no step: {reference!r}")
        instance = str(row.get("instance_id") or row.get("dir") or row.get("path") or f"{path.name}:{number}")
        plans.append(candidate_plan(row.get("model") or model or path.stem, instance,
                                    row.get("split") or split_of_path(instance),
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
    lcs_interval: tuple[float, float] | None  # 95%, the report's bootstrap; None where every plan scored alike
    norm_lcs_interval: tuple[float, float] | None


def summarize(plans: Sequence[CandidatePlan], scores: Sequence[PlanScore]) -> list[SummaryRow]:
    """Mean LCS / normalised LCS (with the 95% intervals ``lmms-egoplan report`` gives them: over the plans in their
    order, a run's plans file scoring as its report) and the format-error rate per model, overall and per split."""
    rows = []
    for model in dict.fromkeys(p.model for p in plans):
        for split in ("all", *SPLITS):
            chosen = [(p, s) for p, s in zip(plans, scores) if p.model == model and split in ("all", p.split)]
            if chosen:
                lcs, norm_lcs = [s.lcs for _, s in chosen], [s.norm_lcs for _, s in chosen]
                rows.append(SummaryRow(model, split, len(chosen), mean_or_nan(lcs), mean_or_nan(norm_lcs),
                                       aggregate_format_error_rate(p.parsed.format_counts for p, _ in chosen),
                                       _interval(lcs), _interval(norm_lcs)))
    return rows


def _interval(values: Sequence[float]) -> tuple[float, float] | None:
    from lmms_egoplan.report.intervals import bootstrap_interval, bootstrap_is_a_point

    return None if bootstrap_is_a_point([values]) else bootstrap_interval(values)


def format_summary(rows: Sequence[SummaryRow]) -> str:
    def interval(bounds: tuple[float, float] | None, digits: int) -> str:
        return "—" if bounds is None else f"[{bounds[0]:.{digits}f}, {bounds[1]:.{digits}f}]"

    return format_table(("model", "split", "n", "LCS", "Norm. LCS", "format errors", "LCS 95%", "Norm. LCS 95%"),
                        [(r.model, r.split, str(r.count), f"{r.lcs:.2f}", f"{r.norm_lcs:.3f}",
                          f"{r.format_error_rate * 100:.1f}%", interval(r.lcs_interval, 2),
                          interval(r.norm_lcs_interval, 3)) for r in rows], right=(2, 3, 4, 5, 6, 7))
