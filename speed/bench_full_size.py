"""The CPU's share at full size: RoboVQA's task build and the report's audit-trail look-ups, the suite's way against
the release's (before commit 1e7878b), on synthetic data in the benchmarks' real layouts.

* RoboVQA's task build: the seven question-type tasks' questions loaded and checked (``robovqa.data.load_type``, what
  each task's ``load_docs`` reads) from a 16-frame copy (``data_source: frames16``: ``qa.jsonl``, 16 frames a
  question under ``frames/<episode>/``, an episode's nine questions sharing its frames, as the demo writes it) of
  4,000 questions, 64,000 frame paths. The suite: ``core.files.inside_root`` compares the paths' text, and each
  type's task resolves and checks only its own questions' frames. The release: the same loader with its two older
  pieces put back: ``inside_root`` comparing ``Path`` objects (``Path(root) in Path(path).parents``: a ``Path``
  built a level), and every line's frames resolved by each of the seven tasks (the whole file's 64,000 paths seven
  times). The questions and frames each way gives are compared.
* ``lmms-egoplan report``'s tables (``report.runs.load_runs`` and ``report.tables.build_tables``: every interval
  from the logged samples; the figures and files it then writes are left out) over a results folder of 37,964
  logged samples (the CHANGELOG's figures were taken over 38,206, a folder whose make-up was not kept): one model's
  EgoThink run (700 questions, judged), its text-only EgoThink baseline (lm-eval, 700, judged), its EgoIntent run
  (3,014 steps, three judged fields each) and its EgoPlan-Bench Val run (3,355) in one folder, as lmms-eval and
  lm-eval write them beside each other, and nine other checkpoints' EgoPlan-Bench Val runs in theirs; each sample's
  metrics written by its task's own ``process_results``. The suite reads a judged task's audit trail
  (``Run.side_file``: a listing of the run's folder) once a task and metric; the release (its ``sample_values``,
  kept below) at every judged sample. The script counts the listings and their time, times the tables, and checks
  that both ways give the same intervals.

The target: a helper's throw-away scripts measured 52.0 s -> 4.2 s for the task build and 20,658 listings, 1.2 s ->
117, 0.03 s, over a folder not kept; this script measures both at its defaults (about three minutes on 2 cores), and
CHANGELOG.md quotes its figures.

    python speed/bench_full_size.py [--questions 4000] [--report-scale 1.0] [--rounds 3]
    python speed/bench_full_size.py --questions 63 --report-scale 0.02 --rounds 1   # smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from lmms_egoplan.core.errors import InputError

FRAMES_PER_QUESTION = 16


# =============================================================================================
# RoboVQA: the 16-frame copy, and the release's loader
# =============================================================================================


def write_frames16(root: Path, questions: int) -> int:
    """``qa.jsonl`` of ``questions`` questions in the demo's episodes' official form (nine a tagged text, every
    question type), each episode's 16 frames under ``frames/<episode>/``; returns the number of frame files."""
    from lmms_egoplan.demo.robovqa import episode_text, frame_jpeg, frames16_lines

    jpegs = [frame_jpeg(index) for index in range(FRAMES_PER_QUESTION)]
    lines, episode = [], 0
    while len(lines) < questions:
        name = f"episode_{episode:05d}"
        folder = root / "frames" / name
        folder.mkdir(parents=True)
        for index, data in enumerate(jpegs):
            (folder / f"{index:04d}.jpg").write_bytes(data)
        frames = [f"frames/{name}/{index:04d}.jpg" for index in range(FRAMES_PER_QUESTION)]
        text = episode_text(f"tidy shelf {episode}", f"put item {episode} in the box", episode % 2 == 0)
        lines += frames16_lines(name, text, frames)
        episode += 1
    (root / "qa.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines[:questions]))
    return episode * FRAMES_PER_QUESTION


def release_is_within(path, root) -> bool:
    """``core.files._is_within`` of the release: a ``Path`` built for each parent level of ``path``."""
    return Path(path) == Path(root) or Path(root) in Path(path).parents


def release_inside_root(path, root, *, where: str, setting: str, allow: bool = False,
                        error_class: type[InputError] = InputError) -> Path:
    """``core.files.inside_root`` of the release, its three checks on ``Path`` objects (a path outside raises
    without the suite's reasons: the data here has none)."""
    path, root = Path(path), Path(root).expanduser()
    if allow or (release_is_within(path, root) and release_is_within(os.path.normpath(path), os.path.normpath(root))
                 and release_is_within(os.path.realpath(path), os.path.realpath(root))):
        return path
    raise error_class(f"{where}: {path} is outside the data folder {root} (set {setting} to true to allow it)")


class EveryType(str):
    """A question type equal to every type: ``read_frames16`` then resolves every line's frames, as the release's
    did for each question type's task (it had no type to compare)."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True


@contextlib.contextmanager
def release_robovqa_loader():
    """``robovqa.data.load_type`` as the release ran it: its ``inside_root`` and every line's frames resolved."""
    from lmms_egoplan.robovqa import data

    suite_read = data.read_frames16
    with mock.patch.object(data, "inside_root", release_inside_root), \
            mock.patch.object(data, "read_frames16",
                              lambda root, problems, allow, kind: suite_read(root, problems, allow, EveryType(kind))):
        yield


def build_robovqa_tasks(root: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """Every question type's questions as its task loads them: (id, frames) each."""
    from lmms_egoplan.robovqa.data import FRAMES16, QUESTION_TYPES, load_type
    from lmms_egoplan.robovqa.settings import RoboVQASettings

    settings = RoboVQASettings(data_source=FRAMES16, root=str(root))
    return {kind: [(doc["item_id"], doc["media"]["frames"]) for doc in load_type(settings, kind).docs]
            for kind in QUESTION_TYPES}


# =============================================================================================
# The report: a results folder of the suite's runs, and the release's reading of judged samples
# =============================================================================================

JUDGE = {"judge_backend": "openai", "judge_model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "judge_rubric_version": "1",
         "judge_prompt_hash": "1a2b3c4d5e6f7a8b", "judge_served_model": "Qwen/Qwen3-30B-A3B-Instruct-2507"}
# each run's stamp: the date-time lmms-eval names its files with (EgoPlan-Bench, EgoThink, EgoIntent), the time an
# lm-eval run began (its audit trails) and ended (its results and samples)
EGOPLAN_STAMP, EGOTHINK_STAMP, EGOINTENT_STAMP = "20261122_170000", "20261122_180622", "20261122_184510"
LM_EVAL_BEGUN, LM_EVAL_STAMP = "2026-11-22T19-00-00.000000", "2026-11-22T19-20-31.123456"
EGOPLAN_VAL, EGOINTENT_STEPS, OTHER_CHECKPOINTS = 3355, 3014, 9


def _jsonl(path: Path, records) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


def _logged(doc_id: int, target: str, answer: str, metrics: dict) -> dict:
    """A logged sample as lmms-eval writes it (``--log_samples``): its bookkeeping, then the task's metrics."""
    return {"doc_id": doc_id, "doc_hash": f"{doc_id:064x}", "target": target, "filtered_resps": answer,
            "resps": [[answer]], "input": "question", "token_counts": [{"input_tokens": 700, "output_tokens": 40,
                                                                        "reasoning_tokens": 0}], **metrics}


def _audit(requests: list[tuple[dict, float]]) -> list[dict]:
    """A judge's audit trail: a record per judged part (its prompt, output and rating)."""
    return [{"id": part["judge_request_id"], "judge_model": JUDGE["judge_model"], "prompt": part["judge_messages"],
             "raw_output": f"Consistent in meaning. Rating: [[{rating:g}]]", "rating": rating, "attempts": 1,
             "cached": False, "error": None} for part, rating in requests]


def _task_results(task: str, values: dict[str, object]) -> dict:
    return {"alias": task, **{f"{metric},none": value for metric, value in values.items()},
            **{f"{metric}_stderr,none": "N/A" for metric in values}}


def _results(scores: dict[str, dict], groups: dict[str, list[str]], counts: dict[str, int], model: str,
             settings: dict[str, dict], harness: str = "lmms-eval") -> dict:
    return {"results": {task: _task_results(task, values) for task, values in scores.items() if task not in groups},
            "groups": {group: _task_results(group, scores[group]) for group in groups}, "group_subtasks": groups,
            "configs": {task: {"task": task, "metadata": {"version": 3, **settings.get(task, {})}}
                        for task in scores if task not in groups},
            "config": {"model": "egoplan_hf" if harness == "lmms-eval" else "hf", "limit": None,
                       "model_args": f"pretrained=/checkpoints/{model}"},
            "n-samples": {task: {"original": count, "effective": count} for task, count in counts.items()},
            "model_name": f"/checkpoints/{model}", "lmms_eval_version": "0.7.3", "date": 1795342831.0}


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def write_egothink(folder: Path, model: str, scale: float, rng: random.Random, blind: bool) -> int:
    """EgoThink's twelve dimensions judged (ratings 0, 0.5, 1; the task's own ``process_results``), their groups'
    scores as the run reports them (``group_scores``); ``blind``: the text-only baseline, as lm-eval writes it."""
    from lmms_egoplan.egothink.data import CAPABILITIES, DIMENSIONS
    from lmms_egoplan.egothink.protocol import RUBRIC_NAME, group_scores
    from lmms_egoplan.egothink.task import process_results

    prefix = "ego_think_blind" if blind else "ego_think"
    scores, counts, written = {}, {}, 0
    for dimension in DIMENSIONS.values():
        task, samples, requests = f"{prefix}_{dimension.name}", [], []
        for index in range(max(2, round(dimension.paper_count * scale))):
            doc = {"id": f"{dimension.name}/{index}", "question": f"How many cups are on table {index}?",
                   "answer": "Two."}
            metrics = process_results(doc, ["Two, on the table."], None)
            rating = rng.choice((0.0, 0.5, 1.0))
            samples.append(_logged(index, doc["answer"], "Two, on the table.", metrics))
            requests.append((metrics["score"]["judge_parts"][""], rating))
        ratings = [rating for _, rating in requests]
        scores[task] = {"score": 100 * _mean(ratings), "micro_score": 100 * _mean(ratings), "judged": len(ratings),
                        "failed": 0}
        counts[task], written = len(samples), written + len(samples)
        samples_name = f"samples_{task}_{LM_EVAL_STAMP}.jsonl" if blind else f"{EGOTHINK_STAMP}_samples_{task}.jsonl"
        _jsonl(folder / samples_name, samples)
        _jsonl(folder / f"{LM_EVAL_BEGUN if blind else EGOTHINK_STAMP}_judgements_{task}.jsonl", _audit(requests))
    groups = {group.replace("ego_think", prefix, 1): values for group, values in group_scores(
        {task.replace(prefix, "ego_think", 1): values for task, values in scores.items()}).items()}
    if blind:  # lm-eval's baseline has one group, of the twelve dimensions
        groups = {prefix: groups[prefix]}
    names = [dimension.name for dimension in DIMENSIONS.values()]
    members = {group: [f"{prefix}_{name}" for name in CAPABILITIES.get(group.rpartition("capability_")[2], names)]
               for group in groups}
    settings = {task: {**JUDGE, "judge_rubric": RUBRIC_NAME} for task in scores}
    data = _results({**scores, **groups}, members, counts, model, settings, "lm-eval" if blind else "lmms-eval")
    name = f"results_{LM_EVAL_STAMP}.json" if blind else f"{EGOTHINK_STAMP}_results.json"
    (folder / name).write_text(json.dumps(data))
    return written


def write_egointent(folder: Path, model: str, scale: float, rng: random.Random) -> int:
    """EgoIntent's steps, three fields each judged 0-10 (the task's own ``process_results``), its scores as the task
    aggregates them: a field's mean rating x 10, the overall and each environment's and scenario's mean of them."""
    from lmms_egoplan.egointent.data import FIELDS
    from lmms_egoplan.egointent.protocol import RUBRIC_NAME
    from lmms_egoplan.egointent.task import process_results

    steps = max(4, round(EGOINTENT_STEPS * scale))
    samples, requests, per_step = [], [], []
    for index in range(steps):
        doc = {"step_id": f"step_{index:04d}", "definitions": "release",
               "environment": ("indoor", "outdoor")[index % 2], "frames_capped": False,
               "scenario": ("kitchen", "yard", "bedroom", "workshop", "garden")[index % 5],
               "plausible_next_steps": [], "judge_sees_plausible_next_steps": False,
               "local_intent": "loosen the jar lid", "procedural_intent": "open the jar to add its contents",
               "next_step_plan": "spoon sauce into the pan"}
        answer = json.dumps({field: f"{field} guess {index}" for field in FIELDS})
        metrics = process_results(doc, [answer], None)
        ratings = {field: float(rng.randrange(11)) for field in FIELDS}
        samples.append(_logged(index, json.dumps({field: doc[field] for field in FIELDS}), answer, metrics))
        requests += [(metrics["overall"]["judge_parts"][field], ratings[field]) for field in FIELDS]
        per_step.append((doc, ratings))
    _jsonl(folder / f"{EGOINTENT_STAMP}_samples_egointent.jsonl", samples)
    _jsonl(folder / f"{EGOINTENT_STAMP}_judgements_egointent.jsonl", _audit(requests))
    overall = {"overall": 10 * _mean(_mean(ratings.values()) for _, ratings in per_step)}
    for key in ("environment", "scenario"):
        for value in sorted({doc[key] for doc, _ in per_step}):
            metric = value if key == "environment" else f"scenario_{value}"
            overall[metric] = 10 * _mean(_mean(ratings.values()) for doc, ratings in per_step if doc[key] == value)
    scores = {**{field: 10 * _mean(ratings[field] for _, ratings in per_step) for field in FIELDS}, **overall,
              "judged": 3 * steps, "failed": 0, "incomplete_answers": 0, "missing_fields": 0, "cut_answers": 0,
              "capped_samples": 0}
    settings = {"egointent": {**JUDGE, "judge_rubric": RUBRIC_NAME}}
    data = _results({"egointent": scores}, {}, {"egointent": steps}, model, settings)
    (folder / f"{EGOINTENT_STAMP}_results.json").write_text(json.dumps(data))
    return steps


def write_egoplan_val(folder: Path, model: str, scale: float, rng: random.Random) -> int:
    """EgoPlan-Bench Val ranked by likelihood (the task's own ``process_ranking_results``), its accuracy overall and
    per breakdown the mean of the samples that log it."""
    from lmms_egoplan.egoplan.task import process_ranking_results

    questions = max(4, round(EGOPLAN_VAL * scale))
    samples = []
    for index in range(questions):
        doc = {"sample_id": index, "golden_choice_idx": "ABCD"[index % 4],
               "video_source": ("EpicKitchens", "Ego4D")[index % 2], "progress_length": index % 20,
               "progress_bucket": ("0_4", "5_9", "10_14", "15_plus")[index % 20 // 5],
               "goal_answer_similarity": 0.5, "similarity_level": ("low", "medium", "high")[index % 3]}
        losses = [[rng.uniform(1.0, 3.0), False] for _ in range(4)]
        samples.append(_logged(index, doc["golden_choice_idx"], "", process_ranking_results(doc, losses, None)))
    metrics = sorted({key for sample in samples for key in sample if key.startswith(("accuracy", "n_"))})
    scores = {metric: (sum if metric.startswith("n_") else _mean)(sample[metric] for sample in samples
                                                                    if metric in sample) for metric in metrics}
    scores["predictions"] = questions
    _jsonl(folder / f"{EGOPLAN_STAMP}_samples_egoplan_val.jsonl", samples)
    data = _results({"egoplan_val": scores}, {}, {"egoplan_val": questions}, model, {})
    (folder / f"{EGOPLAN_STAMP}_results.json").write_text(json.dumps(data))
    return questions


def write_results_folder(root: Path, scale: float) -> tuple[int, int]:
    """The report's input (see the module's docstring); returns (logged samples, of them judged)."""
    rng = random.Random(0)
    folder = root / "judged-model"
    folder.mkdir(parents=True)
    judged = (write_egothink(folder, "judged-model", scale, rng, blind=False)
              + write_egothink(folder, "judged-model", scale, rng, blind=True)
              + write_egointent(folder, "judged-model", scale, rng))
    logged = judged + write_egoplan_val(folder, "judged-model", scale, rng)
    for number in range(OTHER_CHECKPOINTS):
        other = root / f"checkpoint-{number}"
        other.mkdir()
        logged += write_egoplan_val(other, f"checkpoint-{number}", scale, rng)
    return logged, judged


def release_sample_values(run, task: str, metric: str, *, rubrics):
    """``report.intervals.sample_values`` of the release, the branches this folder's logs reach (numbers and judged
    items; not its count check, ``--predict_only`` items or values scored at aggregation): the judged task's audit
    trail looked up, a listing of the run's folder, at every judged sample (its ratings read once a file)."""
    from lmms_egoplan.judge.rubrics import FixedRating, item_parts
    from lmms_egoplan.report import intervals

    if task not in run.samples:
        return None
    values, judged = [], False
    for sample in intervals._samples(run, run.samples[task]):
        value = sample.get(metric)
        if intervals.is_judge_parts_item(value):
            judged = True
            ratings = intervals._ratings(run, run.side_file("judgements", task))
            if any(not isinstance(part, FixedRating) and part.id not in ratings for part in item_parts(value).values()):
                return None
            value = intervals._judged_value(value, ratings, rubrics)
        if value is not None:
            values.append(float(value))
    return intervals.SampleValues(values, judged, f"its logged samples ({run.samples[task].name})") if values else None


@contextlib.contextmanager
def release_report():
    from lmms_egoplan.report import intervals

    with mock.patch.object(intervals, "sample_values", release_sample_values):
        yield


def report_tables(root: Path) -> tuple[list, dict[str, float]]:
    """The report's tables of ``root`` (``load_runs``, ``build_tables``: every interval), and the audit-trail
    look-ups made for them (count, seconds)."""
    from lmms_egoplan.report.intervals import exact_binomial_interval
    from lmms_egoplan.report.runs import Run, load_runs
    from lmms_egoplan.report.tables import build_tables
    from lmms_egoplan.suite import report_faces

    lookups = {"listings": 0, "seconds": 0.0}
    suite_side_file = Run.side_file

    def side_file(run, kind, task):
        started = time.perf_counter()
        found = suite_side_file(run, kind, task)
        if kind == "judgements":
            lookups["listings"] += 1
            lookups["seconds"] += time.perf_counter() - started
        return found

    exact_binomial_interval.cache_clear()  # a report is a process of its own
    with mock.patch.object(Run, "side_file", side_file):
        runs, unreadable = load_runs([root])
        tables, _ = build_tables(runs, report_faces())
    assert not unreadable, unreadable
    return tables, lookups


def interval_cells(tables) -> list:
    return [(table.name, row.model, row.task, row.intervals) for table in tables for row in table.user_rows]


# =============================================================================================
# Measuring
# =============================================================================================


def timed(function, *arguments):
    started = time.perf_counter()
    result = function(*arguments)
    return time.perf_counter() - started, result


def ratio_line(what: str, naive: float, suite: float) -> str:
    return f"{what}: naive {naive:.2f} s, suite {suite:.2f} s -> naive / suite = {naive / suite:.1f}x"


def measure_robovqa(root: Path, rounds: int) -> None:
    import lmms_egoplan.robovqa.settings  # noqa: F401  (imported before the first round times it)
    from lmms_egoplan.robovqa.data import load_type  # noqa: F401

    naive, suite = [], []
    for _ in range(rounds):  # alternating, the median of each: a busy machine slows both alike
        with release_robovqa_loader():
            seconds, release_docs = timed(build_robovqa_tasks, root)
        naive.append(seconds)
        seconds, suite_docs = timed(build_robovqa_tasks, root)
        suite.append(seconds)
        if release_docs != suite_docs:
            sys.exit("MISMATCH: the release's loader and the suite's give other questions or frames")
    questions = sum(map(len, suite_docs.values()))
    print(f"  {questions:,} questions in {len(suite_docs)} tasks; per round (s): naive "
          f"{', '.join(f'{s:.2f}' for s in naive)}; suite {', '.join(f'{s:.2f}' for s in suite)}")
    print(ratio_line(f"task build ({questions:,} questions, seven tasks)", statistics.median(naive),
                     statistics.median(suite)))


def measure_report(root: Path, rounds: int) -> None:
    naive, suite, listings = [], [], {}
    for _ in range(rounds):
        with release_report():
            seconds, (release_tables, listings["naive"]) = timed(report_tables, root)
        naive.append((seconds, listings["naive"]["seconds"]))
        seconds, (suite_tables, listings["suite"]) = timed(report_tables, root)
        suite.append((seconds, listings["suite"]["seconds"]))
        if interval_cells(release_tables) != interval_cells(suite_tables):
            sys.exit("MISMATCH: the release's reading of the samples and the suite's give other intervals")
    intervals = sum(cell is not None for *_, cells in interval_cells(suite_tables) for cell in cells)
    print(f"  {len(suite_tables)} tables, {intervals} intervals; per round (s): naive tables "
          f"{', '.join(f'{s:.2f}' for s, _ in naive)}; suite tables {', '.join(f'{s:.2f}' for s, _ in suite)}")
    naive_listing, suite_listing = (statistics.median(each for _, each in times) for times in (naive, suite))
    print(f"audit-trail look-ups: naive {listings['naive']['listings']:,} listings {naive_listing:.3f} s, suite "
          f"{listings['suite']['listings']:,} listings {suite_listing:.3f} s -> naive / suite = "
          f"{naive_listing / suite_listing:.1f}x")
    print(ratio_line("report tables", statistics.median(s for s, _ in naive), statistics.median(s for s, _ in suite)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=4000, help="RoboVQA questions in the 16-frame copy")
    parser.add_argument("--report-scale", type=float, default=1.0,
                        help="the results folder's sample counts as a share of the releases' (1: 37,964)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (medians printed)")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "robovqa" / "frames16"
        root.mkdir(parents=True)
        seconds, files = timed(write_frames16, root, args.questions)
        print(f"RoboVQA 16-frame copy: {args.questions:,} questions, {args.questions * FRAMES_PER_QUESTION:,} frame "
              f"paths, {files:,} frame files, written in {seconds:.0f} s")
        measure_robovqa(root, args.rounds)
        results = Path(folder) / "results"
        seconds, (logged, judged) = timed(write_results_folder, results, args.report_scale)
        print(f"results folder: {logged:,} logged samples ({judged:,} of judged tasks), written in {seconds:.0f} s")
        measure_report(results, args.rounds)
    if args.questions < 1000 or args.report_scale < 0.5:
        print("(a smoke run: measure with the defaults)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
