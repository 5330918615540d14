"""How benchmarks read their judge (rubrics, by name) and the judged items they log.

A benchmark holds its ``Rubric`` (rating parser and score scale) under a stable name, the one its catalogue
row lists (``lmms_egoplan.catalogue``), in its ``Benchmark`` value (``rubrics``). Nothing here keeps them: whoever
reads judged items is handed the rubrics they name (a judged task its benchmark's; a process that re-judges logs or
reports on them the whole suite's, ``lmms_egoplan.suite.rubrics``)::

    RUBRIC = Rubric(bracket_rating(allowed=(0, 0.5, 1)), scale=100.0, levels=(0, 0.5, 1),
                    prompt=JUDGE_SYSTEM + JUDGE_PROMPT, version="1")
    RUBRIC_NAME = "my_benchmark"

Its ``process_results`` returns ``judge_parts_item(parts, RUBRIC_NAME)`` per sample: the judge
requests (or ``FixedRating``s) and the rubric's name, self-contained, so that lmms-eval's sample
logs can be re-judged later without the model (``lmms-egoplan rejudge``). A metric over such items
is ``score_judged``: each part scored over all items, then the mean of the part scores.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from lmms_egoplan.catalogue import rubric_name
from lmms_egoplan.core.reasoning import reasoning_left_open, without_reasoning
from lmms_egoplan.core.statistics import mean_or_nan
from lmms_egoplan.judge.protocol import Judgement, JudgeRequest, JudgeResults, RatingParser


@dataclass(frozen=True)
class Rubric:
    """How a benchmark reads its judge: the rating parser and the scale of the reported score
    (score = mean rating x scale, over successful judgements), the ratings a judge may give
    (``levels``, in order), and what identifies it in a run's records: the judge prompt's text (its
    template(s) and system turn; ``prompt_hash``) and a ``version`` raised when the parser or scale
    changes what a judge answer scores."""

    parse_rating: RatingParser
    scale: float = 1.0
    levels: tuple[float, ...] = ()
    prompt: str = ""
    version: str = "1"
    # Where a judge prompt's user turn holds the answer judged: a regular expression (dot matches newlines)
    # whose group "answer" it is, for excerpts (``judge-agreement``); empty: unknown.
    answer_pattern: str = ""

    def answer_in(self, prompt: str) -> str:
        """The answer a judge prompt holds (``answer_pattern``), or "" where unknown or not found."""
        found = re.search(self.answer_pattern, prompt, re.DOTALL) if self.answer_pattern else None
        return found.group("answer") if found else ""

    @property
    def prompt_hash(self) -> str:
        """The first 16 hex digits of the SHA-256 of the judge prompt's text."""
        return hashlib.sha256(self.prompt.encode()).hexdigest()[:16]


def bracket_rating(allowed: Sequence[float]) -> RatingParser:
    """Parser for FastChat-style single-answer grading: ``Rating: [[0.5]]``.

    Like FastChat (and the MT-Bench-style judges built on it) it takes the first
    ``[[x]]`` and falls back to the first ``[x]``. The rating must then be one of ``allowed``;
    anything else is no valid rating (a judge answering on another scale is a failed
    judgement, not a score). A thinking judge's reasoning blocks (``core.reasoning``) are left out first: a rating
    it drafted there is not its verdict, and an answer whose reasoning never ended has no rating.
    """
    double = re.compile(r"\[\[(\d+\.?\d*)\]\]")
    single = re.compile(r"\[(\d+\.?\d*)\]")

    def parse(text: str) -> float:
        if reasoning_left_open(text):
            raise ValueError("the judge's reasoning never ended (raise judge_max_tokens)")
        text = without_reasoning(text)
        match = double.search(text) or single.search(text)
        if match is None:
            raise ValueError("no [[rating]] in the judge output")
        rating = float(match.group(1))
        if rating not in allowed:
            raise ValueError(f"rating {match.group(1)} is not one of {', '.join(f'{a:g}' for a in allowed)}")
        return rating

    return parse


# --- Rubrics by name ------------------------------------------------------------------------------
# No table of them here: whoever reads judged items is handed the rubrics they name (a benchmark's,
# ``Benchmark.rubrics``, or the whole suite's, ``lmms_egoplan.suite.rubrics``), by the names they carry.

def load_rubric(reference: str, rubrics: Mapping[str, Rubric]) -> Rubric:
    """The rubric of ``rubrics`` a judged item names: its name, or what logs written before rubrics had names
    carry, as the suite's catalogue maps it (``lmms_egoplan.catalogue.rubric_name``)."""
    name = reference if reference in rubrics else (rubric_name(reference) or reference)
    if name not in rubrics:
        # The words users have seen (``rejudge`` names a broken item so): "registered" is the rubrics handed here.
        raise ValueError(f"no rubric is registered as {reference!r} (registered: {', '.join(sorted(rubrics))})")
    return rubrics[name]


# --- Judged items --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FixedRating:
    """A part of a judged item settled without the judge (e.g. an answer field the model left
    out scores 0): it counts in the score like a rating, and is neither judged nor failed."""

    rating: float
    reason: str


def judge_parts_item(parts: Mapping[str, JudgeRequest | FixedRating], rubric: str) -> dict:
    """The per-sample value a judged task's ``process_results`` returns for each judged metric:
    the sample's parts by name, each a judge request or a ``FixedRating`` (e.g. three answer
    fields; a sample judged as a whole is one part named ``""``).

    It is self-contained (lmms-eval logs it with ``--log_samples``), so the outputs can be
    re-judged later without the model: ``rubric`` is the name of its ``Rubric`` in its benchmark's
    ``rubrics``. A metric over such items scores each part over all
    items (mean rating x scale, failed judgements excluded) and reports the mean of the part
    scores; an item holding one part of a sample is how a metric reports that part alone.
    """
    if not parts:
        raise ValueError("a judged item needs at least one part")
    return {"judge_parts": {name: _part_value(part) for name, part in parts.items()}, "judge_rubric": rubric}


def _part_value(part: JudgeRequest | FixedRating) -> dict:
    if isinstance(part, FixedRating):
        return {"fixed_rating": float(part.rating), "fixed_reason": part.reason}
    return {"judge_request_id": part.id, "judge_messages": [dict(m) for m in part.messages]}


def is_judge_parts_item(value: Any) -> bool:
    return isinstance(value, dict) and {"judge_parts", "judge_rubric"} <= value.keys()


def item_parts(item: Mapping[str, Any]) -> dict[str, JudgeRequest | FixedRating]:
    """The parts of a logged judged item (``judge_parts_item``), by name."""
    if not is_judge_parts_item(item):
        raise ValueError(f"not a judged item (judge_parts_item): {str(item)[:120]}")
    return {name: FixedRating(part["fixed_rating"], part.get("fixed_reason", "")) if "fixed_rating" in part
            else JudgeRequest(part["judge_request_id"], tuple(part["judge_messages"]))
            for name, part in item["judge_parts"].items()}


def item_requests(items: Sequence[Mapping[str, Any]]) -> list[JudgeRequest]:
    """The distinct judge requests of ``items`` in order: a request that several items carry (a
    sample counted both overall and in a breakdown) appears once. One id with two different
    prompts raises."""
    requests: dict[str, JudgeRequest] = {}
    for item in items:
        for part in item_parts(item).values():
            if isinstance(part, FixedRating):
                continue
            known = requests.setdefault(part.id, part)
            if known.messages != part.messages:
                raise ValueError(f"judge request id {part.id!r} is used for two different prompts")
    return list(requests.values())


def items_rubric(items: Sequence[Mapping[str, Any]], rubrics: Mapping[str, Rubric]) -> Rubric:
    """The one rubric of ``rubrics`` that ``items`` name (a judged metric reads one rubric)."""
    named = {load_rubric(item["judge_rubric"], rubrics) for item in items}
    if len(named) != 1:
        names = sorted({item["judge_rubric"] for item in items})
        raise ValueError(f"a judged metric needs items of one rubric, got {names or 'no items'}")
    return named.pop()


# --- Scoring -------------------------------------------------------------------------------------


@dataclass
class ItemScore:
    """A judged metric: ``score`` (the mean of the part scores; for one-request items the mean
    rating x scale; NaN when a part has no rating), the score of each part, and the judgements."""

    score: float
    results: JudgeResults = field(repr=False)
    part_scores: dict[str, float] = field(default_factory=dict)


def score_judged(items: Sequence[Mapping[str, Any]], judgements: Mapping[str, Judgement],
                 rubrics: Mapping[str, Rubric], *, judge_model: str,
                 audit_path: str | os.PathLike | None = None) -> ItemScore:
    """The score of ``items`` (read with the rubric of ``rubrics`` they name) from judgements already made (by
    request id), so that metrics over different subsets of one task's samples all read the same judgements."""
    scale = items_rubric(items, rubrics).scale
    ratings: dict[str, list[float]] = {}
    for item in items:
        for name, part in item_parts(item).items():
            rating = part.rating if isinstance(part, FixedRating) else judgements[part.id].rating
            bucket = ratings.setdefault(name, [])
            if rating is not None:  # a failed judgement: counted, never averaged in
                bucket.append(rating)
    part_scores = {name: mean_or_nan(part_ratings) * scale for name, part_ratings in ratings.items()}
    score = mean_or_nan(part_scores.values())
    results = JudgeResults([judgements[r.id] for r in item_requests(items)], judge_model,
                           Path(audit_path) if audit_path else None)
    return ItemScore(score, results, part_scores)


def unjudged(items: Sequence[Mapping[str, Any]], judge_model: str, reason: str) -> ItemScore:
    """The outcome when no judge could be asked: every judge request of ``items`` failed, for ``reason``."""
    failed = [Judgement(request.id, judge_model, request.messages, None, None, reason, False, 0)
              for request in item_requests(items)]
    return ItemScore(math.nan, JudgeResults(failed, judge_model))
