"""EgoPlan-Bench (Chen et al., "EgoPlan-Bench: Benchmarking Multimodal Large Language Models for
Human-Level Planning"), as its paper and official evaluation code define it.

Protocol (paper sections):

1. Data (paper §3, official release): ``EgoPlan_validation.json`` / ``EgoPlan_test.json``, one
   record per multiple-choice question: task goal, question, four candidate actions
   ``choice_a..choice_d`` (``golden_choice_idx`` names the right one on Val; Test has no labels),
   the completed actions (``task_progress_metadata``) and the ``current_observation_frame``.
   Videos: EPIC-KITCHENS-100 RGB frame folders (frame numbers are the file numbers) and Ego4D
   mp4s (frame numbers index the 30 fps canonical video), or pre-cut clips named by sample id.
2. Visual input (§3, §3.3; official ``src/video_llama_interface.py``): one video clip of 8 frames,
   7 sampled from the first action's start up to the current observation frame, the observation
   frame itself last. Settings offer the earlier layouts: the progress frames as one clip then the
   observation as a separate image, or per action segment (appendix C.1: the last N segments x K
   keyframes, one clip each) then the observation image.
3. Prompt: the record's own question (what the official evaluation feeds the model), or the
   EgoPlan-IT instruction; configurable through ``lmms_eval_specific_kwargs``.
4. Scoring (§3.5; official ``preprocess_for_llama_v2`` and ``modeling_llama.py``): each candidate's
   mean token loss given visual input and question, over the answer's tokens and the token that
   closes the assistant's turn (the official code's mean leaves out tokens whose loss is exactly 0:
   ``loss_mean``); the prediction is the candidate with the lowest loss. A generative letter-choice
   variant serves backends without likelihood.
5. Breakdowns (§4.2, Table 3, Figures 7-8): accuracy per video source (EpicKitchens = in-domain,
   Ego4D = out-of-domain), by task-progress length and by goal-answer similarity (three
   equal-size levels of the split), each with its sample count; every logged sample carries the
   values it was scored and binned by.
6. Leaderboard: submission files ``[{"sample_id": int, "label": "A".."D"}]`` for Val and Test.

Loading and validation of the release files (records, media paths, frame plans, missing media):
``lmms_egoplan.egoplan.data``. This module follows the task YAMLs (``tasks/egoplan/``): the samples, then what
the harness calls in order -- visuals, text, results, aggregation -- then the tasks' specs and the classes the
YAMLs name.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loguru import logger
from PIL import Image

from lmms_egoplan.contract.benchmark import (
    LoadedDocs,
    Metric,
    TaskContext,
    TaskSpec,
    accuracy_breakdowns,
    warn_of_skipped,
)
from lmms_egoplan.core import media, seed_bench_r1
from lmms_egoplan.core.candidate_ranking import lowest_loss
from lmms_egoplan.core.files import write_atomically
from lmms_egoplan.core.letter_choice import extract_choice
from lmms_egoplan.core.reasoning import without_reasoning
from lmms_egoplan.core.request_options import LOSS_MEAN, SCORED_SPAN
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import count, total
from lmms_egoplan.egoplan.data import (
    CHOICE_LETTERS,
    ENV_PREFIX,
    PACKAGE_KIND,
    SIMILARITY_LEVELS,
    VIDEO_SOURCES,
    EgoPlanDataError,
    annotation_path,
    completed_actions,
    doc_frame_numbers,
    load_samples,
    media_setting,
    package_positions,
    progress_bins,
    video_indices,
)

# =============================================================================================
# The samples
# =============================================================================================


def load_docs(context: TaskContext, *, labelled: bool, with_media: bool) -> LoadedDocs:
    """The split's samples (``labelled``: Val; Test has no labels); those with missing media skipped if
    ``skip_missing``. ``with_media``: False for the text-only baselines, which need no media setting."""
    settings = context.settings
    loaded = load_samples(settings, labelled=labelled, with_media=with_media)
    warn_of_skipped(context.task_name, loaded.skipped, "sample(s) with missing media", ENV_PREFIX)
    source = settings.seed_bench_r1_root if settings.data_source == "seed_bench_r1" else annotation_path(settings)
    return LoadedDocs(loaded.docs, loaded.skipped, read_from=[str(source)])


def breakdown_metrics(context: TaskContext, docs: Sequence[Mapping]) -> list[Metric]:
    """The paper's breakdowns, whose names come from the settings: accuracy per video source, progress-length bin
    and similarity level, each with its sample count."""
    names = [*VIDEO_SOURCES.values(), *(f"progress_{value_bin.label}" for value_bin in progress_bins(context.settings)),
             *(f"similarity_{level}" for level in SIMILARITY_LEVELS)]
    return accuracy_breakdowns(names)


# =============================================================================================
# 1. Visuals (doc_to_visual)
# =============================================================================================


def progress_clip_name(position: int) -> str:
    """The video-clip tag of a doc's clip at ``position`` (from 0)."""
    return f"task_progress_{position + 1}"


@dataclasses.dataclass(frozen=True)
class _KeyedDoc:
    """A doc, hashed and compared by the fields its visuals depend on (``_visuals`` keeps the last few)."""

    key: tuple
    doc: Mapping = dataclasses.field(compare=False, hash=False)


def doc_to_visual(doc: Mapping) -> list[Image.Image]:
    """The doc's video clips (each frame tagged with its clip), then the current observation frame
    (untagged: an image of its own) where the layout shows it apart (``egoplan.data.frame_plan``).

    By default one clip of 8 frames whose last frame is the observation, as the official
    evaluation shows it. A flat list of PIL images: lmms-eval's own backends take it as a
    sequence of images; the suite's backend regroups the tagged frames into videos
    (``media.group_visuals``) and gives the model each frame's time (``media.FrameTime``: seconds
    from the first action's start, from the frame numbers and the source's annotation frame rate,
    or from a pre-cut clip's container).
    """
    key = (doc["media_kind"], doc["media_path"], tuple(map(tuple, doc["clips"])), doc["observation_image"],
           doc["current_observation_frame"], doc["clip_first_frame"], doc["frame_rate"], doc["max_side"],
           doc["short_side"], doc.get("observation_path"), doc.get("frame_sampling"), doc.get("num_frames"))
    return list(_visuals(_KeyedDoc(key, doc)))


# Frames are read through one reader per doc; lmms-eval asks for a doc's visuals once per
# candidate (4 times per question), so the last few docs' frames are kept.
@functools.lru_cache(maxsize=8)
def _visuals(keyed: _KeyedDoc) -> tuple[Image.Image, ...]:
    doc = keyed.doc
    return _package_visuals(doc) if doc["media_kind"] == PACKAGE_KIND else _release_visuals(doc)


def _release_visuals(doc: Mapping) -> tuple[Image.Image, ...]:
    images, times = _read_frames(doc, doc_frame_numbers(doc))
    frames, times = iter(_distinct_images(images)), iter(times)
    visuals = []
    for position, clip in enumerate(doc["clips"]):
        visuals += media.as_video_frames([next(frames) for _ in clip], clip=progress_clip_name(position),
                                         times=[next(times) for _ in clip])
    return (*visuals, *frames)  # the observation image, if any


def _package_visuals(doc: Mapping) -> tuple[Image.Image, ...]:
    """A SEED-Bench-R1 package doc: its progress clip's frames (``package_positions``), timed by the
    clip's container, then its observation image."""
    try:
        progress = seed_bench_r1.read_progress(doc["media_path"], doc["observation_path"], package_positions(doc),
                                               doc["max_side"])
    except media.MediaError as error:
        raise _frames_error(doc, error) from error
    return (*media.as_video_frames(progress.frames, clip=progress_clip_name(0), times=progress.times),
            progress.observation)


def _frames_error(doc: Mapping, error: media.MediaError) -> EgoPlanDataError:
    return EgoPlanDataError(f"EgoPlan sample {doc['sample_id']}: {error}; check "
                            f"{setting_name(ENV_PREFIX, media_setting(doc['media_kind']))} (a run with --use_cache "
                            f"resumes from the requests already scored)")


def _distinct_images(images: Sequence[Image.Image]) -> list[Image.Image]:
    """``images`` with repeated objects copied: a frame number shown twice (in two clips, or also
    as the observation) is one decoded image, and each position must carry its own clip tag."""
    seen: set[int] = set()
    distinct = []
    for image in images:
        distinct.append(image.copy() if id(image) in seen else image)
        seen.add(id(image))
    return distinct


def _read_frames(doc: Mapping, numbers: Sequence[int]) -> tuple[list[Image.Image], list[media.FrameTime]]:
    """The frames numbered ``numbers`` and when each was shown, from the first action's start: by
    its number at the annotation frame rate, or (a pre-cut clip, which starts there) by its place
    in the clip's container."""
    start = doc["clip_first_frame"]
    try:
        if doc["media_kind"] == "epic_frames":
            frames = media.FrameFolder(doc["media_path"]).frames(numbers, max_side=doc["max_side"])
            return frames, media.frame_times(numbers, start, doc["frame_rate"])
        with media.VideoFile(doc["media_path"]) as video:
            indices = video_indices(doc, video, numbers)
            frames = video.frames(indices, max_side=media.short_side_limit(video.info.size, doc["short_side"],
                                                                           doc["max_side"]))
            if doc["media_kind"] == "clip":
                return frames, media.frame_times(indices, 0, video.info.fps)
            return frames, media.frame_times(numbers, start, doc["frame_rate"])
    except media.MediaError as error:
        raise _frames_error(doc, error) from error


# =============================================================================================
# 2. Text (doc_to_text, doc_to_choice, doc_to_target)
# =============================================================================================


# The instruction the official code evaluates its EgoPlan-IT-tuned model with (lmms-eval's
# built-in `egoplan` task uses it too); the vanilla evaluation feeds the record's question.
_EGOPLAN_IT_OPENINGS = {"gerund": "I am tasked with {goal}. ", "imperative": "My current task is to {goal}. "}
_EGOPLAN_IT_REST = ("The task's progress is demonstrated in the provided video. "
                    "My current field of view is shown in the provided image. "
                    "What should be my next action? "
                    "Please output the most reasonable action you think, expressed in a short phrase.")
QUESTION_FORMATS = ("dataset", "egoplan_it")


def question_text(doc: Mapping, question_format: str = "dataset") -> str:
    if question_format == "dataset":
        return doc["question"]
    if question_format == "egoplan_it":
        goal = doc["task_goal"].strip(string.punctuation + " ").lower()
        if "goal" in goal:  # "the goal is to X" -> "X", as the official prompt builder does
            goal = goal.split("to", 1)[-1].strip()
        if not goal:  # the official builder fails here too (an IndexError)
            raise EgoPlanDataError(f"EgoPlan sample {doc['sample_id']}: field task_goal {doc['task_goal']!r} "
                                   f"leaves no goal for the egoplan_it prompt")
        form = "gerund" if goal.split()[0].endswith("ing") else "imperative"
        return _EGOPLAN_IT_OPENINGS[form].format(goal=goal) + _EGOPLAN_IT_REST
    raise ValueError(f"EgoPlan: lmms_eval_specific_kwargs.question_format must be one of "
                     f"{', '.join(QUESTION_FORMATS)}, got {question_format!r}")


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The instruction for likelihood ranking: the question alone (candidates are continuations)."""
    kwargs = lmms_eval_specific_kwargs or {}
    question = question_text(doc, kwargs.get("question_format", "dataset"))
    return f"{kwargs.get('pre_prompt', '')}{question}{kwargs.get('post_prompt', '')}"


def doc_to_text_with_options(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The instruction for generative letter choice: the question, then ``A. ...`` to ``D. ...``."""
    kwargs = lmms_eval_specific_kwargs or {}
    options = "\n".join(f"{letter}. {choice}" for letter, choice in zip(CHOICE_LETTERS, doc_to_choice(doc)))
    question = question_text(doc, kwargs.get("question_format", "dataset"))
    return f"{kwargs.get('pre_prompt', '')}{question}\n{options}{kwargs.get('post_prompt', '')}"


def doc_to_text_blind(doc: Mapping) -> str:
    """The text-only baselines' prompt (lm-eval): the task goal and the record's question, nothing
    of the video; the candidates continue it."""
    return f"Task goal: {doc['task_goal']}\nQuestion: {doc['question']}\nNext action:"


def doc_to_text_narrated(doc: Mapping) -> str:
    """The blind prompt plus the completed actions' narrations from the record: what a perfect
    captioner of the task-progress video would write ("So far: open drawer, grab knife.")."""
    done = [action["narration_text"] for action in completed_actions(doc)]
    return (f"Task goal: {doc['task_goal']}\nSo far: {', '.join(done) if done else 'nothing'}.\n"
            f"Question: {doc['question']}\nNext action:")


def doc_to_choice(doc: Mapping) -> list[str]:
    """The four candidate actions in the release's order, A to D."""
    return [doc[f"choice_{letter.lower()}"] for letter in CHOICE_LETTERS]


def doc_to_target(doc: Mapping) -> int | None:
    """Index of the right candidate (``golden_choice_idx``); None on the unlabelled Test split."""
    golden = doc.get("golden_choice_idx")
    return CHOICE_LETTERS.index(golden) if golden else None


# =============================================================================================
# 3. Results (process_results)
# =============================================================================================


def sample_record(doc: Mapping, predicted: int | None, losses: Sequence[float] | None = None) -> dict[str, Any]:
    """What a logged sample shows of how it was scored and binned: the item of the ``predictions``
    metric (the submission file takes ``sample_id`` and ``label`` from it)."""
    return {
        "sample_id": doc["sample_id"],
        "label": CHOICE_LETTERS[predicted] if predicted is not None else None,
        "gold": doc["golden_choice_idx"],
        "candidate_losses": dict(zip(CHOICE_LETTERS, losses)) if losses is not None else None,
        "video_source": doc["video_source"],
        "progress_length": doc["progress_length"],
        "progress_bin": doc["progress_bucket"],
        "goal_answer_similarity": doc.get("goal_answer_similarity"),
        "similarity_level": doc.get("similarity_level"),
    }


def labelled_scores(doc: Mapping, record: Mapping) -> dict[str, Any]:
    """Accuracy overall and in every breakdown the doc belongs to, with a count per breakdown
    (an unparsed answer is wrong)."""
    correct = float(record["label"] is not None and record["label"] == record["gold"])
    breakdowns = (VIDEO_SOURCES[doc["video_source"]], f"progress_{doc['progress_bucket']}",
                  f"similarity_{doc['similarity_level']}")
    return {"accuracy": correct, **{f"accuracy_{name}": correct for name in breakdowns},
            **{f"n_{name}": 1 for name in breakdowns}, "predictions": dict(record)}


def candidate_losses(results: Sequence[Sequence]) -> list[float]:
    """The loss in each loglikelihood result ``(loss, is_greedy)`` (a list once logged as JSON).

    The pairs reach ``process_results`` intact because installing this suite patches lmms-eval
    0.7.3, which would otherwise turn them into strings (``compat.results.keep_loglikelihood_results``).
    """
    return [float(result[0]) for result in results]


def ranked_choice(losses: Sequence[float], sample_id: Any) -> int:
    """The candidate with the lowest mean token loss; ties go to the earlier candidate, as ``argmin``
    in the official evaluation. A NaN loss (the backend's scoring failed) stops the run naming the question
    (``core.candidate_ranking``)."""
    return lowest_loss(losses, f"EgoPlan question {sample_id}")


def process_ranking_results(doc: Mapping, results: Sequence[Sequence], context: TaskContext) -> dict[str, Any]:
    """``egoplan_val``: the likelihood-ranked candidate, scored overall and per breakdown."""
    losses = candidate_losses(results)
    return labelled_scores(doc, sample_record(doc, ranked_choice(losses, doc["sample_id"]), losses))


def lm_eval_losses(results: Sequence[Sequence]) -> list[float]:
    """The candidate losses of lm-eval's loglikelihood results ``(log-likelihood, is_greedy)``: the
    negated log-likelihood, summed over the candidate's tokens (lm-eval returns no token counts, so
    the text-only baselines rank by the total, not the official mean, loss)."""
    return [-float(log_likelihood) for log_likelihood, *_ in results]


def process_blind_ranking_results(doc: Mapping, results: Sequence[Sequence], context: TaskContext) -> dict[str, Any]:
    """``egoplan_val_blind`` / ``egoplan_val_narrated`` (lm-eval): scored as ``egoplan_val``."""
    losses = lm_eval_losses(results)
    return labelled_scores(doc, sample_record(doc, ranked_choice(losses, doc["sample_id"]), losses))


def process_blind_submission_results(doc: Mapping, results: Sequence[Sequence], context: TaskContext) -> dict[str, Any]:
    """``egoplan_test_blind`` (lm-eval): the predictions for the submission file, as ``egoplan_test``."""
    losses = lm_eval_losses(results)
    return {"predictions": sample_record(doc, ranked_choice(losses, doc["sample_id"]), losses)}


def process_generation_results(doc: Mapping, results: Sequence[str], context: TaskContext) -> dict[str, Any]:
    """``egoplan_val_gen``: the letter read from the answer less its reasoning blocks, scored as above; an unread one
    is counted."""
    predicted = extract_choice(without_reasoning(results[0]), doc_to_choice(doc))
    return {**labelled_scores(doc, sample_record(doc, predicted)), "unparseable": float(predicted is None)}


def process_submission_results(doc: Mapping, results: Sequence[Sequence], context: TaskContext) -> dict[str, Any]:
    """``egoplan_test``: the likelihood-ranked candidate's letter, for the submission file."""
    losses = candidate_losses(results)
    return {"predictions": sample_record(doc, ranked_choice(losses, doc["sample_id"]), losses)}


# =============================================================================================
# 4. Aggregation: the leaderboard submission files
# =============================================================================================


def validate_submission(records: Any, sample_ids: Iterable[int] | None = None) -> None:
    """Raise ValueError unless ``records`` is ``[{"sample_id": int, "label": "A".."D"}, ...]``
    with unique ids (and, if given, exactly ``sample_ids``)."""
    if not isinstance(records, list):
        raise ValueError("an EgoPlan submission is a JSON list")
    for record in records:
        if not (isinstance(record, dict) and set(record) == {"sample_id", "label"}
                and isinstance(record["sample_id"], int) and not isinstance(record["sample_id"], bool)
                and record["label"] in tuple(CHOICE_LETTERS)):
            raise ValueError(f"bad submission record {record!r}: expected {{'sample_id': int, 'label': 'A'..'D'}}")
    ids = [record["sample_id"] for record in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate sample ids in submission: "
                         f"{sorted(i for i, n in collections.Counter(ids).items() if n > 1)}")
    if sample_ids is not None and set(ids) != set(sample_ids):
        raise ValueError(f"submission covers {len(set(ids))} sample ids, expected {len(set(sample_ids))}")


def write_submission(items: Sequence[Mapping], args=None, *, context: TaskContext) -> int:
    """Aggregation of ``predictions``: write the leaderboard submission file beside the results
    file (``harness.run_files.run_file``: ``<output_path>/<model>/<date-time>_submission_<task>.json``);
    report its size.

    A run that did not predict every sample of the split (``--limit``, samples skipped for missing
    media) writes ``..._submission_partial_<task>.json`` instead, with a warning saying why: it is
    not a leaderboard submission. The file lies beside the harness's results (``context.run_files``).
    """
    task_name, run_files, loaded = context.task_name, context.run_files, context.loaded
    records = sorted(({"sample_id": int(item["sample_id"]), "label": item["label"]} for item in items),
                     key=lambda record: record["sample_id"])
    validate_submission(records)
    unpredicted = loaded.split_size - len(records)
    path = run_files.run_file(args, "submission_partial" if unpredicted else "submission", ".json")
    write_atomically(path, json.dumps(records, indent=1) + "\n")
    if unpredicted:
        skipped = len(loaded.skipped)
        reasons = [f"{skipped} skipped for missing media "
                   f"({setting_name(ENV_PREFIX, 'skip_missing')})"] if skipped else []
        if unpredicted > skipped:
            reasons.append(f"{unpredicted - skipped} not evaluated (--limit)")
        logger.warning(f"{task_name}: predictions for {len(records)} of the split's {loaded.split_size} samples "
                       f"({'; '.join(reasons)}): not a leaderboard submission, written as {path}")
    else:
        logger.info(f"{task_name}: leaderboard submission ({len(records)} predictions) written to {path}")
    return len(records)


# =============================================================================================
# The tasks, as the harnesses build them
# =============================================================================================

# The likelihood ranking's request options (the official loss): which tokens are scored, how their losses are averaged.
RANKING_OPTIONS = {"scored_tokens": SCORED_SPAN, "loss_mean": LOSS_MEAN}
# Metrics of every labelled task (the breakdowns join them once the samples are loaded).
ACCURACY = (Metric("accuracy", "mean"), Metric("accuracy_epic_kitchens", "mean"), Metric("accuracy_ego4d", "mean"))
SUBMISSION = Metric("predictions", write_submission, with_context=True)  # the leaderboard file; how many predictions
VALIDATION_SAMPLES = functools.partial(load_docs, labelled=True, with_media=True)
TEST_SAMPLES = functools.partial(load_docs, labelled=False, with_media=True)

VALIDATION = TaskSpec(load_docs=VALIDATION_SAMPLES, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text,
                      doc_to_choice=doc_to_choice, doc_to_target=doc_to_target, process_results=process_ranking_results,
                      metrics=(*ACCURACY, SUBMISSION), metrics_of_the_data=breakdown_metrics,
                      request_options=RANKING_OPTIONS, generative_variant="egoplan_val_gen")
TEST = TaskSpec(load_docs=TEST_SAMPLES, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text,
                doc_to_choice=doc_to_choice, doc_to_target=doc_to_target, process_results=process_submission_results,
                metrics=(SUBMISSION,), request_options=RANKING_OPTIONS)
VALIDATION_GENERATIVE = TaskSpec(
    load_docs=VALIDATION_SAMPLES, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text_with_options,
    doc_to_choice=doc_to_choice, doc_to_target=doc_to_target, process_results=process_generation_results,
    metrics=(*ACCURACY, Metric("predictions", count), Metric("unparseable", total, higher_is_better=False)),
    metrics_of_the_data=breakdown_metrics, request_options=RANKING_OPTIONS)
# The text-only baselines (lm-eval): no media read.
BLIND = TaskSpec(load_docs=functools.partial(load_docs, labelled=True, with_media=False),
                 doc_to_text=doc_to_text_blind, doc_to_choice=doc_to_choice, doc_to_target=doc_to_target,
                 process_results=process_blind_ranking_results, metrics=(*ACCURACY, SUBMISSION),
                 metrics_of_the_data=breakdown_metrics)
NARRATED = dataclasses.replace(BLIND, doc_to_text=doc_to_text_narrated)
BLIND_TEST = TaskSpec(load_docs=functools.partial(load_docs, labelled=False, with_media=False),
                      doc_to_text=doc_to_text_blind, doc_to_choice=doc_to_choice, doc_to_target=doc_to_target,
                      process_results=process_blind_submission_results, metrics=(SUBMISSION,))
