"""``lmms-egoplan judge-agreement``: a finished run's answers rated again by a second judge, beside the
run's own judgements, without touching them.

The run's ratings come from its audit trails (``<date>_judgements_<task>.jsonl`` beside its samples
files: the last record of a request wins, as retries append); the second judge rates the same judge
requests (the logged items hold them whole) into its own audit trails and cache. Each request rated by
both is a ``RatingPair`` of its group: the task, or the task's field where a sample is judged on named
parts (one request per field); ``lmms_egoplan.judge.agreement`` summarises them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.files import read_jsonl
from lmms_egoplan.harness.rejudge import LoggedItems
from lmms_egoplan.judge.agreement import Agreement, RatingPair, agreement
from lmms_egoplan.judge.engine import Judge
from lmms_egoplan.judge.rubrics import FixedRating, Rubric, item_parts, item_requests, items_rubric


@dataclass
class SecondOpinions:
    """Every request both judges rated, by task, with what kept the others out."""

    pairs: list[RatingPair] = field(default_factory=list)
    rubrics: dict[str, str] = field(default_factory=dict)  # task -> the rubric its items name
    rubric_values: dict[str, Rubric] = field(default_factory=dict)  # what each such name stands for
    group_tasks: dict[str, str] = field(default_factory=dict)  # group -> its task
    first_failed: int = 0  # requests without a rating in the run's audit trail
    second_failed: int = 0  # requests the second judge gave no rating
    audit_trails: dict[str, Path] = field(default_factory=dict)  # task -> the second judge's


def group_name(task: str, part: str) -> str:
    return f"{task} · {part}" if part else task


def second_opinions(logged: LoggedItems, judge: Judge, output_dir: str | Path, *,
                    progress: bool = True) -> SecondOpinions:
    """The second ``judge``'s ratings of the judged requests of ``logged``, paired with the run's."""
    output_dir = Path(output_dir)
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    found = SecondOpinions()
    for task, columns in logged.columns.items():
        items = [item for column in columns.values() for item in column]
        parts = {part.id: name for item in items for name, part in item_parts(item).items()
                 if not isinstance(part, FixedRating)}
        # A task whose every answer was scored without a judge (EgoIntent's answers missing every field) asked the
        # run's judge nothing and wrote no audit trail: nothing of it to compare, nothing to ask the second judge.
        first = run_ratings(logged.files[task], task) if parts else {}
        rubric = items_rubric(items, logged.rubrics)
        found.rubrics[task] = items[0]["judge_rubric"]
        found.rubric_values[found.rubrics[task]] = rubric
        audit = found.audit_trails[task] = output_dir / f"{stamp}_judgements_{task}.jsonl"
        results = judge.run(item_requests(items), rubric.parse_rating, audit_path=audit, progress=progress,
                            description=f"Second judge, {task}")
        for judgement in results.judgements:
            rated = first.get(judgement.id)
            if rated is None or rated["rating"] is None:
                found.first_failed += 1
            elif not judgement.ok:
                found.second_failed += 1
            else:
                group = group_name(task, parts[judgement.id])
                found.group_tasks[group] = task
                prompt = judgement.messages[-1]["content"]
                found.pairs.append(RatingPair(group, judgement.id, float(rated["rating"]), judgement.rating,
                                              prompt, rated.get("raw_output") or "", judgement.raw_output or "",
                                              answer=rubric.answer_in(prompt)))
        fixed = fixed_pairs(task, columns)
        found.group_tasks.update({pair.group: task for pair in fixed})
        found.pairs += fixed
    return found


def fixed_pairs(task: str, columns: dict[str, list[dict]]) -> list[RatingPair]:
    """The parts the run scored without a judge (a ``FixedRating``: e.g. a field missing from the answer, 0),
    each once, as both judges' "rating", so that the scores are on the task's scale. Read from the column
    whose items hold the most parts (each sample once, whole: a task's overall score)."""
    items = max(columns.values(), key=lambda column: max(len(item_parts(item)) for item in column))
    return [RatingPair(group_name(task, name), f"{task}#{number}/{name}", part.rating, part.rating,
                       f"({part.reason})", "", "", fixed=True)
            for number, item in enumerate(items) for name, part in item_parts(item).items()
            if isinstance(part, FixedRating)]


def agreements(found: SecondOpinions) -> list[Agreement]:
    """The agreement of each group (in the logs' order), then over all answers of each rubric."""
    groups: dict[str, list[RatingPair]] = {}
    for pair in found.pairs:
        groups.setdefault(pair.group, []).append(pair)
    rows = []
    for group, pairs in groups.items():
        if all(pair.fixed for pair in pairs):
            continue  # nothing of it was judged
        rubric = found.rubric_values[found.rubrics[found.group_tasks[group]]]
        rows.append(agreement(group, pairs, rubric.levels, rubric.scale))
    for name in dict.fromkeys(found.rubrics.values()):
        pairs = [pair for pair in found.pairs if found.rubrics[found.group_tasks[pair.group]] == name]
        if any(not pair.fixed for pair in pairs) and len(groups) > 1:
            rubric = found.rubric_values[name]
            rows.append(agreement(f"all ({name})", pairs, rubric.levels, rubric.scale))
    return rows


def run_ratings(samples_file: Path, task: str) -> dict[str, dict]:
    """Request id -> the run's last audit record of it (rating, raw_output), from the audit trail
    written beside the task's samples file. Raises InputError when the run wrote none."""
    audit = samples_file.with_name(samples_file.name.split("_samples_")[0] + f"_judgements_{task}.jsonl")
    if not audit.is_file():
        raise InputError(f"no audit trail {audit.name} beside {samples_file}: the run's judgements of {task} are "
                         f"needed to compare a second judge with them (a --predict_only run judged nothing)")
    return {record["id"]: record for _, record in read_jsonl(audit) if "id" in record}
