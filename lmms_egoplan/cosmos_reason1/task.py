"""Cosmos-Reason1's benchmark as the official evaluation (``nvidia-cosmos/cosmos-reason1`` @3e7f1cb
``examples/benchmark``: ``tools/eval/utils/input.py``, ``tools/eval/evaluate.py``, ``configs/evaluate.yaml``)
runs it.

Protocol:

1. Data: one task per source or category (the YAML's ``dataset_name``), every QA pair of its file
   (``lmms_egoplan.cosmos_reason1.data``); RoboVQA's 110 by default, the official reader's 101 with
   ``robovqa_items: official_101``.
2. Visual input: the clip sampled as ``qwen_vl_utils.process_vision_info`` samples it at ``fps: 4`` (input.py
   ``prepare_model_inputs_parallel``): ``smart_nframes`` frames (duration x 4, even, 4 to 768), spread by
   ``linspace(0, total - 1, n).round()``, each with its time, as one video; each frame resized as its
   ``fetch_video`` resizes it (``frame_pixels``: sides multiples of 28, 128 to 768 x 28 x 28 pixels).
   The frames' times as the benchmark script gives them (``frame_timing: assumed_2fps``): none, so the Qwen2.5-VL
   processor assumes 2 fps; their true times with ``sampled_rate`` (scripts/inference.py).
3. Prompt (input.py ``get_prompt``): the system prompt "Answer the questions." (carried by every request,
   ``core.request_options.SYSTEM_PROMPT``; chat backends get it as the messages' system turn), the question, one
   ``(A) text`` line per option in the release's order, the letter instruction, and for ``official_reasoning`` the
   reasoning format. Decoding (evaluate.py ``run_model``): reasoning, temperature 0.6, top-p 0.95, 1,024 new tokens;
   letter, greedy, 10 new tokens; what vLLM's ``SamplingParams`` leave unset is off (top_k, min_p, penalties:
   ``core.request_options.SAMPLING_DEFAULTS``), nothing taken from the checkpoint's generation_config.
4. Answers: the official parser of the prompt and its case-insensitive comparison (``accuracy_official``), a robust
   reading beside it (``accuracy_robust``), the answers they read differently counted (``disagreements``), the
   answers the official parser reads nothing of counted (``unparseable_official``). Under either prompt the suite's
   backends generate such an answer again as the official run does (evaluate.py ``run_model``: up to 10 times, 256
   more new tokens per retry over 1,024, the letter prompt's retries greedy, ``models.empty_answer_retry``), the
   answers retried and those still empty after the last retry counted (``empty_answer_retried``,
   ``empty_after_retries``); lmms-eval's backends ask once, which the run says.
   A failed request is never scored (the suite's adapter leaves it out and counts it).
5. Means: each task's accuracy; the groups' ``accuracy_*`` are macro means over their tasks (the paper's),
   ``micro_*`` micro means (the PAI-Bench leaderboard's), ``no_av_*`` the macro mean over the five sources other
   than AV (one model report's).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger
from PIL import Image

from lmms_egoplan.contract.benchmark import (
    Configuration,
    LoadedDocs,
    Metric,
    TaskContext,
    TaskSpec,
    chat_messages,
    warn_of_skipped,
)
from lmms_egoplan.core import media
from lmms_egoplan.core.request_facts import answer_retries
from lmms_egoplan.core.request_options import (
    EMPTY_ANSWER_MAX_RETRIES,
    EMPTY_ANSWER_RETRIES,
    EMPTY_ANSWER_RETRY,
    SAMPLING_DEFAULTS,
)
from lmms_egoplan.core.request_options import (
    SYSTEM_PROMPT as SYSTEM_PROMPT_OPTION,
)
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import count, total
from lmms_egoplan.cosmos_reason1.data import (
    ENV_PREFIX,
    ER_SOURCES,
    CosmosReason1DataError,
    files_read,
    load_part,
    shortfall,
)
from lmms_egoplan.cosmos_reason1.parsing import LETTER, REASONING, official_answer, official_correct, robust_answer
from lmms_egoplan.cosmos_reason1.settings import PROCESSOR_DEFAULT_FPS, QWEN_VL_UTILS, SAMPLED_RATE, SYSTEM_PROMPT

# input.py get_prompt, verbatim.
LETTER_INSTRUCTION = "Answer with the option's letter from the given choices directly."
REASONING_INSTRUCTION = ("Please answer the question in the following format: <think> your reasoning </think> "
                         "<answer> your single letter answer </answer>.")
# evaluate.py run_model (configs/evaluate.yaml: max_tokens 1024, temperature 0.6; top_p 0.95 in the code): each
# prompt's decoding, stated here alone (the task YAMLs set no generation_kwargs; ``configure`` hands it over).
DECODING = {REASONING: {"max_new_tokens": 1024, "temperature": 0.6, "top_p": 0.95, "do_sample": True, "until": []},
            LETTER: {"max_new_tokens": 10, "temperature": 0, "do_sample": False, "until": []}}
# nvidia-cosmos/cosmos-reason1 issue 26 (closed): BridgeData V2's clips rebuilt by process_raw_data.py before f8ec02d
# (pull request 56, "Fix bridge clips using wrong frame range", in 3e7f1cb) do not match their questions (35 %
# reproduced against 58.8 % published).
BRIDGEV2_WARNING = ("cosmos_reason1_bridgev2: BridgeData V2 clips rebuilt by the official process_raw_data.py before "
                    "its fix f8ec02d (upstream pull request 56, in 3e7f1cb; issue 26) cut the wrong frame range and do "
                    "not match their questions (about 35 % reproduced against the published 58.8 %): rebuild them "
                    "with a checkout at or after it (tasks/cosmos_reason1/README.md)")


# =============================================================================================
# The questions
# =============================================================================================


def load_docs(context: TaskContext) -> LoadedDocs:
    """The questions of the task's source or category (its YAML's ``dataset_name``), their clips checked."""
    settings, part = context.settings, context.dataset_name
    loaded = load_part(settings, part)
    warn_of_skipped(context.task_name, loaded.skipped, "question(s) with missing clips", ENV_PREFIX)
    if short := shortfall(part, len(loaded.docs) + len(loaded.skipped), settings):
        logger.warning(f"{context.task_name}: {short}")
    if part == "robovqa" and settings.robovqa_items == "official_101":
        logger.warning(f"{context.task_name}: the official script's 101 RoboVQA questions, a reproduction setting "
                       f"({setting_name(ENV_PREFIX, 'robovqa_items')}): the 9 sharing a clip are left out")
    if part == "bridgev2":
        logger.warning(BRIDGEV2_WARNING)
    docs = [{**doc, "prompt": settings.prompt} for doc in loaded.docs]
    logger.info(f"{context.task_name}: {len(docs)} questions, prompt {settings.prompt}, clips at {settings.fps:g} fps")
    return LoadedDocs(docs, loaded.skipped, read_from=files_read(settings, part))


def configure(context: TaskContext, config: Mapping[str, Any]) -> Configuration:
    """The decoding of the chosen prompt."""
    return Configuration(generation_kwargs=DECODING[context.settings.prompt])


# The suite's backends send the system turn, top-p, the unset sampling settings off and the frames with their times
# (models/).
SUITE_BACKENDS = ("egoplan_hf", "egoplan_server")


@dataclass
class DeliveredProtocol:
    """What of the protocol the run's backend delivers, logged with every sample: the system turn the model is
    given (None: the backend's own, not the task's)."""

    system_turn: str | None = None


def delivered_protocol(context: TaskContext) -> DeliveredProtocol:
    return DeliveredProtocol()


def on_backend(context: TaskContext, backend: str, chat: bool) -> None:
    """Say what of the protocol the run's backend cannot deliver, and record the system turn it sends: lmms-eval's
    chat backends get the system turn in the task's messages, its other backends none; of lmms-eval's backends the
    suite cannot tell whether they leave unset sampling settings off; none of them retries an empty answer (the
    suite's backends do, ``core.request_options.EMPTY_ANSWER_RETRY``)."""
    settings, name = context.settings, context.task_name
    context.state.system_turn = SYSTEM_PROMPT if backend in SUITE_BACKENDS or chat else None
    timing = "their true times" if settings.frame_timing == SAMPLED_RATE else \
        f"times as at {PROCESSOR_DEFAULT_FPS:g} fps (the benchmark script's)"
    wanted = (f"the system prompt {SYSTEM_PROMPT!r} as a system turn, the clip at {settings.fps:g} fps with {timing}"
              + (", top-p 0.95" if settings.prompt == REASONING else "")
              + ", top_k, min_p and the penalties off (vLLM's SamplingParams)")
    if backend in SUITE_BACKENDS:
        logger.info(f"{name}: {backend} sends {wanted}; pass max_frames={settings.max_frames} in --model_args (its "
                    f"default, 32, thins a clip longer than 8 s)")
    elif chat:
        logger.warning(f"{name}: the official protocol sends {wanted}; lmms-eval's {backend} backend gets the system "
                       f"turn in the task's messages, but whether it times the frames so and leaves the sampling "
                       f"settings the task does not set off (not from the checkpoint's generation_config) is not "
                       f"known to the suite, so this run may not be the authors' protocol (egoplan_hf and "
                       f"egoplan_server deliver it)")
    else:
        logger.warning(f"{name}: the official protocol sends {wanted}; lmms-eval's {backend} backend sends no system "
                       f"turn of the task's, and whether it delivers the rest is not known to the suite, so this run "
                       f"is not the authors' protocol (egoplan_hf and egoplan_server deliver it)")
    empty = ("an answer with no capital letter in its <answer> tag" if settings.prompt == REASONING
             else "an answer with no capital letter (greedy, with 1,024 + 256 k new tokens at retry k)")
    if settings.max_retries < EMPTY_ANSWER_MAX_RETRIES:
        logger.warning(f"{name}: {setting_name(ENV_PREFIX, 'max_retries')} is {settings.max_retries}: {empty} is "
                       f"generated again at most that often, not the official {EMPTY_ANSWER_MAX_RETRIES} times (not "
                       f"the authors' protocol)")
    if backend in SUITE_BACKENDS and settings.max_retries:
        logger.info(f"{name}: {backend} generates {empty} again, up to {settings.max_retries} times, as the "
                    f"official run does (counted: empty_answer_retried, empty_after_retries)")
    elif backend not in SUITE_BACKENDS:
        logger.warning(f"{name}: the official run generates {empty} again, up to {EMPTY_ANSWER_MAX_RETRIES} times; "
                       f"lmms-eval's {backend} backend asks once, so such answers are only counted "
                       f"(unparseable_official; egoplan_hf and egoplan_server retry them)")
        if settings.max_retries:  # recorded in the results, noted in the report: the run's max_retries did not apply
            context.run.protocol_changes.setdefault(name, {})["max_retries"] = (
                f"lmms-eval's {backend} backend asks once: {empty} is not generated again (max_retries "
                f"{settings.max_retries} not applied)")


def no_av_metrics(context: TaskContext, docs: Sequence[Mapping]) -> list[Metric]:
    """The five-source means' shares, reported by the embodied-reasoning sources other than AV."""
    if not any(doc["source"] in ER_SOURCES and doc["source"] != "av" for doc in docs):
        return []
    return [Metric("no_av_official", "mean"), Metric("no_av_robust", "mean")]


# =============================================================================================
# 1. Visuals (doc_to_visual)
# =============================================================================================


def sampled_indices(total_frames: int, video_fps: float, fps: float, max_frames: int) -> list[int]:
    """qwen_vl_utils ``smart_nframes`` (0.0.11, the official lock's; 0.0.14's is the same; fps given; FRAME_FACTOR 2,
    FPS_MIN_FRAMES 4) and
    ``_read_video_decord``'s ``torch.linspace(0, total - 1, nframes).round()``: the frames the official reader
    samples of a clip at ``fps``."""
    import numpy as np

    least = math.ceil(4 / 2) * 2
    most = math.floor(min(max_frames, total_frames) / 2) * 2
    wanted = min(min(max(total_frames / video_fps * fps, least), most), total_frames)
    frames = max(2, math.floor(wanted / 2) * 2)
    return np.linspace(0, total_frames - 1, frames).round().astype(int).tolist()


# qwen_vl_utils 0.0.11 (the official lock's) vision_process.py lines 26-41: the frames' side factor and pixel bounds.
SIDE_FACTOR = 28
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 768 * 28 * 28
VIDEO_TOTAL_PIXELS = 128000 * 28 * 28 * 0.9


def official_frame_size(width: int, height: int, frames: int) -> tuple[int, int]:
    """The (width, height) qwen_vl_utils ``fetch_video`` (lines 400-430) resizes each of a clip's ``frames`` sampled
    frames of ``width`` x ``height`` to: ``smart_resize`` (lines 60-86) into the frame's share of the total budget,
    ``max(min(VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS / frames * 2), VIDEO_MIN_PIXELS * 1.05)`` pixels at most,
    ``VIDEO_MIN_PIXELS`` at least, both sides multiples of 28."""
    most = max(min(VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS / frames * 2), int(VIDEO_MIN_PIXELS * 1.05))
    side_height = max(SIDE_FACTOR, round(height / SIDE_FACTOR) * SIDE_FACTOR)
    side_width = max(SIDE_FACTOR, round(width / SIDE_FACTOR) * SIDE_FACTOR)
    if side_height * side_width > most:
        beta = math.sqrt(height * width / most)
        side_height = math.floor(height / beta / SIDE_FACTOR) * SIDE_FACTOR
        side_width = math.floor(width / beta / SIDE_FACTOR) * SIDE_FACTOR
    elif side_height * side_width < VIDEO_MIN_PIXELS:
        beta = math.sqrt(VIDEO_MIN_PIXELS / (height * width))
        side_height = math.ceil(height * beta / SIDE_FACTOR) * SIDE_FACTOR
        side_width = math.ceil(width * beta / SIDE_FACTOR) * SIDE_FACTOR
    return side_width, side_height


def shown_frame_size(decoded: tuple[int, int], frames: int, frame_pixels: str,
                     max_side: int | None) -> tuple[int, int]:
    """The size the frames reach the backend in: ``official_frame_size`` of their decoded size (``frame_pixels:
    decoded``: that size), its longer side bounded by ``max_side``."""
    size = official_frame_size(*decoded, frames) if frame_pixels == QWEN_VL_UTILS else tuple(decoded)
    return media.fitted_size(size, max_side)


def doc_to_visual(doc: Mapping) -> list[Image.Image]:
    """The clip's frames at the protocol's rate, resized as the official reader resizes them (``frame_pixels``),
    tagged as one video, each with its time: as the benchmark script's processor assumes them (frame k at k / 2 s)
    or, with ``frame_timing: sampled_rate``, the true one."""
    return list(_clip(doc["video"], doc["fps"], doc["max_frames"], doc["max_side"], doc["item_id"],
                      doc["frame_timing"], doc["frame_pixels"]))


@functools.lru_cache(maxsize=4)
def _clip(path: str, fps: float, max_frames: int, max_side: int | None, item_id: str, frame_timing: str,
          frame_pixels: str) -> tuple:
    try:
        with media.VideoFile(path) as video:
            indices = sampled_indices(video.info.num_frames, video.info.fps, fps, max_frames)
            frames = video.frames(indices, max_side=None if frame_pixels == QWEN_VL_UTILS else max_side)
            size = shown_frame_size(frames[0].size, len(frames), frame_pixels, max_side)
            # fetch_video resizes with torchvision's antialiased bicubic; PIL's bicubic gives the same size, its
            # pixel values a few levels of 255 apart at most (about 0.2 on average)
            frames = [frame if frame.size == size else frame.resize(size, Image.Resampling.BICUBIC)
                      for frame in frames]
            times = media.frame_times(indices, 0, video.info.fps) if frame_timing == SAMPLED_RATE else \
                media.frame_times(range(len(indices)), 0, PROCESSOR_DEFAULT_FPS)
    except media.MediaError as error:
        raise CosmosReason1DataError(
            f"Cosmos-Reason1 question {item_id}: {error}; check {setting_name(ENV_PREFIX, 'root')} "
            f"({setting_name(ENV_PREFIX, 'paibench_u_root')} under data_source paibench_u; a run with --use_cache "
            f"resumes from the answers already given)") from error
    return tuple(media.as_video_frames(frames, clip="clip", times=times))


def frames_shown(path: str, fps: float, max_frames: int, max_side: int | None, frame_pixels: str) -> dict[str, Any]:
    """How many frames of a clip the model is shown and their size in pixels (before the backend's own resizing),
    read from the clip's header (nothing decoded), for the sample log: once a question, as it is scored."""
    with media.VideoFile(path) as video:
        count = len(sampled_indices(video.info.num_frames, video.info.fps, fps, max_frames))
        size = shown_frame_size(video.info.size, count, frame_pixels, max_side)
        return {"frames": count, "frame_size": list(size)}


# =============================================================================================
# 2. Text (doc_to_text, doc_to_messages)
# =============================================================================================


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    """input.py ``get_prompt``'s user text: the question, ``(A) text`` per option, the instruction(s)."""
    lines = [doc["question"], *(f"({letter}) {text}" for letter, text in zip(doc["letters"], doc["options"])),
             LETTER_INSTRUCTION, *([REASONING_INSTRUCTION] if doc["prompt"] == REASONING else [])]
    return "\n".join(lines)


def doc_to_messages(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> list[dict]:
    """Chat backends: the official system turn, then the clip and the text."""
    return chat_messages(SYSTEM_PROMPT, doc_to_visual(doc), doc_to_text(doc))


# =============================================================================================
# 3. Results (process_results)
# =============================================================================================


def process_results(doc: Mapping, results: Sequence[str], context: TaskContext) -> dict[str, Any]:
    """The answer read by the official parser of the prompt and by the robust one; each one's correctness as the
    task's accuracy and its share of the group means, what each read and whether they differ logged."""
    text, gold = results[0], doc["answer"]
    official = official_answer(text, doc["prompt"])
    robust = robust_answer(text, doc["letters"], doc["options"])
    right = {"official": float(official_correct(official, gold)),
             "robust": float(bool(robust) and official_correct(robust, gold))}
    scores: dict[str, Any] = {}
    for parser, value in right.items():
        scores[f"accuracy_{parser}"] = scores[f"micro_{parser}"] = value
        if doc["source"] in ER_SOURCES and doc["source"] != "av":
            scores[f"no_av_{parser}"] = value
    retries, still_empty = answer_retries(text)  # the suite's backends' (core.request_facts)
    scores.update(unparseable_official=float(not official), unparseable_robust=float(not robust),
                  disagreements=float(official.upper() != robust.upper()),
                  empty_answer_retried=float(retries > 0), empty_after_retries=float(still_empty),
                  predictions={"item_id": doc["item_id"], "source": doc["source"], "gold": gold,
                               "official": official, "robust": robust, "prompt": doc["prompt"], "retries": retries,
                               "system_turn": context.state.system_turn, "frame_timing": doc["frame_timing"],
                               **frames_shown(doc["video"], doc["fps"], doc["max_frames"], doc["max_side"],
                                              doc["frame_pixels"])})
    return scores


# =============================================================================================
# The task, as lmms-eval builds it
# =============================================================================================

GENERATION = TaskSpec(
    load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text, doc_to_messages=doc_to_messages,
    doc_to_target="answer", process_results=process_results, metrics_of_the_data=no_av_metrics, configure=configure,
    on_backend=on_backend, run_state=delivered_protocol,
    metrics=(Metric("accuracy_official", "mean"), Metric("accuracy_robust", "mean"),
             Metric("micro_official", "mean"), Metric("micro_robust", "mean"),
             Metric("unparseable_official", total, higher_is_better=False),
             Metric("unparseable_robust", total, higher_is_better=False),
             Metric("disagreements", total, higher_is_better=False),
             Metric("empty_answer_retried", total, higher_is_better=False),
             Metric("empty_after_retries", total, higher_is_better=False), Metric("predictions", count)),
    request_options={"empty_answer_retry": EMPTY_ANSWER_RETRY, "empty_answer_retries": EMPTY_ANSWER_RETRIES,
                     "system_prompt": SYSTEM_PROMPT_OPTION, "sampling_defaults": SAMPLING_DEFAULTS},
)
