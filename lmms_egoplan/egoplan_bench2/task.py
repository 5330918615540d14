"""EgoPlan-Bench2 (Qiu et al., "EgoPlan-Bench2: A Benchmark for Multimodal Large Language Model
Planning in Real-World Scenarios", arXiv 2412.04447), as its official evaluation ``eval.py``
(``qiulu66/EgoPlan-Bench2``) defines it.

Protocol:

1. Data: 1,321 four-option questions on Ego4D videos, each with its ``domain`` (4) and ``scenario``
   (24), the ``task_goal``, candidates ``choice_a..choice_d``, the right one's letter
   ``golden_choice_idx``, and the frames ``task_start_frame`` .. ``current_observation_frame`` of the
   task's progress (``lmms_egoplan.egoplan_bench2.data``; or the SEED-Bench-R1 package's Level 3).
2. Visual input (``eval.py``): image models get 8 keyframes as separate images,
   ``np.linspace(task_start_frame, current_observation_frame, 8, dtype=int)`` (``cut_keyframes``,
   line 63): the last is the current observation; video models get the clip [start, observation]
   (``cut_video_clip``, lines 75-86), of which LongVA samples 32 frames. The ``frame_sampling``
   setting chooses: ``keyframes`` (separate images) or ``clip`` (one video, each frame with its
   time from the task's start).
3. Prompt: ``QA_template`` (lines 24-33), the task goal and the four candidates filled in.
4. Answers: greedy generation, read by the official parser and by a robust one
   (``lmms_egoplan.egoplan_bench2.parsing``); accuracy over all questions, an unread answer wrong
   (lines 129-134). Both parsers' accuracies and unparseable counts are reported, and per sample the
   letter each read; ``parser`` chooses which one ``accuracy`` and the breakdowns use (the official one
   by default, as the paper's numbers were read).
5. Breakdowns (paper, per domain and scenario): accuracy with its sample count ``n_`` beside it;
   each logged sample carries its 0 / 1 per breakdown, from which the report computes intervals.
6. A diagnostic no paper reports, ``egoplan_bench2_likelihood``: the candidates ranked by their mean
   token loss given the same visuals and the question, as ``egoplan_val`` ranks EgoPlan-Bench's; no
   letters, so no parser and no option-letter effects.

This module follows the task YAMLs (``tasks/egoplan_bench2/``): settings, tasks, then what the
harness calls in order -- visuals, text, results.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
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
from lmms_egoplan.core.request_options import LOSS_MEAN, SCORED_SPAN
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import breakdown_label, count, total
from lmms_egoplan.egoplan_bench2.data import (
    CHOICE_LETTERS,
    DOMAINS,
    ENV_PREFIX,
    EgoPlanBench2DataError,
    annotation_path,
    file_index,
    load_samples,
    package_positions,
)
from lmms_egoplan.egoplan_bench2.parsing import read_letters
from lmms_egoplan.egoplan_bench2.settings import PAPER_QUESTIONS

# =============================================================================================
# The questions
# =============================================================================================


def load_docs(context: TaskContext) -> LoadedDocs:
    """The questions of the chosen source (``data_source``); those with missing media skipped if ``skip_missing``."""
    settings = context.settings
    loaded = load_samples(settings)
    warn_of_skipped(context.task_name, loaded.skipped, "question(s) with missing media", ENV_PREFIX)
    logger.info(f"{context.task_name}: {len(loaded.docs)} questions ({settings.data_source} data; the paper "
                f"has {PAPER_QUESTIONS})")
    if unnamed := Counter(doc["domain"] for doc in loaded.docs if doc["domain"] not in DOMAINS):
        logger.warning(f"{context.task_name}: questions of domains the paper does not name "
                       f"({', '.join(f'{name!r}: {n}' for name, n in unnamed.items())}; the paper's: "
                       f"{', '.join(DOMAINS)}): each gets its own accuracy_domain_* metric, and no column in the "
                       f"report's domain table")
    source = settings.seed_bench_r1_root if settings.data_source == "seed_bench_r1" else annotation_path(settings)
    return LoadedDocs(loaded.docs, loaded.skipped, read_from=[str(source)])


def breakdown_metrics(context: TaskContext, docs: Sequence[Mapping]) -> list[Metric]:
    """Metrics whose names come from the data: one accuracy per domain and scenario of the loaded questions, its
    sample count beside it."""
    return accuracy_breakdowns(sorted({name for doc in docs for name in breakdowns(doc)}))


# =============================================================================================
# 1. Visuals (doc_to_visual)
# =============================================================================================

PROGRESS_CLIP = "task_progress"


def doc_to_visual(doc: Mapping) -> list[Image.Image]:
    """The question's frames, in time order, the current observation last.

    ``keyframes``: separate images (``eval.py`` gives image models the keyframes as images). ``clip``:
    the frames tagged as one video clip, each with its time from the task's start (the frame number at
    the annotation rate; the package's clip: its container), which the suite's backends give video
    models as a video with its real timing (lmms-eval's own backends: a list of images). The package
    source shows its observation image last, as an image of its own. A flat list of PIL images.
    """
    return list(_visuals(doc["media_kind"], doc["video"], doc["observation_image"],
                         tuple(doc["frame_numbers"] or ()), doc["task_start_frame"], doc["frame_rate"],
                         doc["frame_sampling"], doc["num_frames"], doc["max_side"], doc["short_side"],
                         str(doc["sample_id"])))


# lmms-eval asks for a doc's visuals once per request: 4 times per question in the likelihood variant.
@functools.lru_cache(maxsize=8)
def _visuals(kind: str, video: str | None, observation: str | None, numbers: tuple[int, ...], start: int | None,
             fps: float | None, sampling: str, frames: int, max_side: int | None, short_side: int | None,
             sample_id: str) -> tuple:
    try:
        if kind == "ego4d_video":
            with media.VideoFile(video) as source:
                images = source.frames([file_index(source, n, fps) for n in numbers],
                                       max_side=media.short_side_limit(source.info.size, short_side, max_side))
            progress, times, shown_apart = images, media.frame_times(numbers, start, fps), []
        else:
            package = seed_bench_r1.read_progress(video, observation, package_positions(frames), max_side)
            progress, times, shown_apart = package.frames, package.times, [package.observation]
    except media.MediaError as error:
        setting = "ego4d_videos_root" if kind == "ego4d_video" else "seed_bench_r1_root"
        raise EgoPlanBench2DataError(f"EgoPlan-Bench2 sample {sample_id}: {error}; check "
                                     f"{setting_name(ENV_PREFIX, setting)} (a run with --use_cache resumes from the "
                                     f"answers already given)") from error
    if sampling == "clip":
        progress = media.as_video_frames(progress, clip=PROGRESS_CLIP, times=times)
    return (*progress, *shown_apart)


# =============================================================================================
# 2. Text (doc_to_text, doc_to_choice, doc_to_target)
# =============================================================================================

# eval.py lines 24-33, verbatim (its opening and closing newlines included).
QA_TEMPLATE = """
Select the best answer to the following multiple-choice question based on the video. Respond with only the letter (A, B, C, or D) of the correct option.

Considering the progress shown in the video and my current observation in the last frame, what action should I take next in order to {}?

A. {}
B. {}
C. {}
D. {}
"""  # noqa: E501 (verbatim)
# The template's question line: what the likelihood variant asks, its candidates the continuations.
QUESTION = ("Considering the progress shown in the video and my current observation in the last frame, what action "
            "should I take next in order to {}?")


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The official question: ``QA_template`` with the goal and the four candidates (eval.py lines 109-115)."""
    kwargs = lmms_eval_specific_kwargs or {}
    question = QA_TEMPLATE.format(doc["task_goal"], *doc_to_choice(doc))
    return f"{kwargs.get('pre_prompt', '')}{question}{kwargs.get('post_prompt', '')}"


def doc_to_text_likelihood(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """The likelihood variant's question: the template's question line, no options (the candidates continue it)."""
    kwargs = lmms_eval_specific_kwargs or {}
    return f"{kwargs.get('pre_prompt', '')}{QUESTION.format(doc['task_goal'])}{kwargs.get('post_prompt', '')}"


def doc_to_choice(doc: Mapping) -> list[str]:
    """The four candidates in the release's order, A to D."""
    return [doc[f"choice_{letter.lower()}"] for letter in CHOICE_LETTERS]


def doc_to_target(doc: Mapping) -> int:
    return CHOICE_LETTERS.index(doc["golden_choice_idx"])


# =============================================================================================
# 3. Results (process_results)
# =============================================================================================


def breakdowns(doc: Mapping) -> tuple[str, str]:
    """The domain and the scenario a question is scored in: ``domain_<label>``, ``scenario_<label>``."""
    return f"domain_{breakdown_label(doc['domain'])}", f"scenario_{breakdown_label(doc['scenario'])}"


def scored(doc: Mapping, letter: str | None, logged: Mapping[str, Any]) -> dict[str, Any]:
    """Accuracy overall and in the question's domain and scenario (an unread answer is wrong), each
    breakdown's count, and what the sample log shows of the question (``predictions``)."""
    correct = float(letter is not None and letter == doc["golden_choice_idx"])
    return {"accuracy": correct, **{f"accuracy_{name}": correct for name in breakdowns(doc)},
            **{f"n_{name}": 1 for name in breakdowns(doc)},
            "predictions": {"sample_id": doc["sample_id"], "gold": doc["golden_choice_idx"], "label": letter,
                            **logged, "domain": doc["domain"], "scenario": doc["scenario"]}}


def process_generation_results(doc: Mapping, results: Sequence[str], context: TaskContext) -> dict[str, Any]:
    """``egoplan_bench2``: the answer read by both parsers; ``accuracy``, ``unparseable`` and the
    breakdowns by the ``parser`` setting's, both parsers' accuracy and unparseable count beside them."""
    settings = context.settings
    letters = read_letters(results[0], doc_to_choice(doc))
    scores = scored(doc, letters[settings.parser], {"parser": settings.parser, "letters": letters})
    scores["unparseable"] = float(letters[settings.parser] is None)
    for parser, letter in letters.items():
        scores[f"accuracy_{parser}"] = float(letter is not None and letter == doc["golden_choice_idx"])
        scores[f"unparseable_{parser}"] = float(letter is None)
    return scores


def process_likelihood_results(doc: Mapping, results: Sequence[Sequence], context: TaskContext) -> dict[str, Any]:
    """``egoplan_bench2_likelihood``: the candidate with the lowest mean token loss (ties: the first,
    as ``argmin``; a NaN loss stops the run naming the question, ``core.candidate_ranking``); each result is
    ``(loss, is_greedy)`` (a list once logged as JSON)."""
    losses = [float(result[0]) for result in results]
    ranked = lowest_loss(losses, f"EgoPlan-Bench2 question {doc['sample_id']}")
    return scored(doc, CHOICE_LETTERS[ranked], {"candidate_losses": dict(zip(CHOICE_LETTERS, losses))})


# =============================================================================================
# The tasks, as lmms-eval builds them
# =============================================================================================

GENERATION = TaskSpec(
    load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text, doc_to_choice=doc_to_choice,
    doc_to_target=doc_to_target, process_results=process_generation_results, metrics_of_the_data=breakdown_metrics,
    metrics=(Metric("accuracy", "mean"), Metric("accuracy_official", "mean"), Metric("accuracy_robust", "mean"),
             Metric("unparseable", total, higher_is_better=False),
             Metric("unparseable_official", total, higher_is_better=False),
             Metric("unparseable_robust", total, higher_is_better=False), Metric("predictions", count)))
LIKELIHOOD = TaskSpec(
    load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text_likelihood, doc_to_choice=doc_to_choice,
    doc_to_target=doc_to_target, process_results=process_likelihood_results, metrics_of_the_data=breakdown_metrics,
    metrics=(Metric("accuracy", "mean"), Metric("predictions", count)),
    request_options={"scored_tokens": SCORED_SPAN, "loss_mean": LOSS_MEAN}, generative_variant="egoplan_bench2")
