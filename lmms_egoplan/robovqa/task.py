"""RoboVQA's tasks: one per question type (the YAML's ``dataset_name``), each run under one protocol (the setting
``protocol``): the suite's ``default`` or the preset of a lineage that publishes numbers, with that lineage's frames,
prompt, decoding and scorer (``PROTOCOLS``; the scorers in ``lmms_egoplan.robovqa.scoring``).

Protocol:

1. Data: every question of the type in the chosen layout (``lmms_egoplan.robovqa.data``), typed by its official tag.
2. Visual input: the protocol's frames of the video: ``n`` spread as MiMo's ``robovqa_doc_to_visual`` spreads them
   (``np.linspace(0, total - 1, n, dtype=int)``, all frames where there are fewer), as one video; or the last frame
   alone, as one image.
3. Prompt and decoding: the protocol's (its system turn through the request option ``system_prompt``).
4. Scores: the protocol's metrics per question; lmms-eval averages them per task, and the group ``robovqa`` over its
   tasks (``score``: macro over the types; every other mean: micro over the questions, as the lineages average).
   A failed request is never scored (the suite's adapter leaves it out and counts it).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

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
from lmms_egoplan.core.request_options import SYSTEM_PROMPT as SYSTEM_PROMPT_OPTION
from lmms_egoplan.core.settings import setting_name
from lmms_egoplan.core.statistics import count, total
from lmms_egoplan.robovqa import scoring
from lmms_egoplan.robovqa.data import (
    BINARY_TYPES,
    ENV_PREFIX,
    FRAMES16,
    TFRECORD,
    RoboVQADataError,
    load_type,
    tfrecord_frames,
)


@dataclass(frozen=True)
class Protocol:
    """A way to run RoboVQA: its source, frames (a count spread over the video, or None: the last frame alone),
    system turn, prompt, decoding, scorer and metrics (name -> aggregation)."""

    source: str
    frames: int | None
    system_prompt: str
    prompt: Callable[[Mapping], str]
    decoding: Mapping[str, Any]
    score: Callable[[str, Mapping], dict[str, float]]
    metrics: tuple[Metric, ...]


def _default_prompt(doc: Mapping) -> str:
    return doc["question"] + ("\nAnswer yes or no." if doc["question_type"] in BINARY_TYPES else "")


GREEDY = {"temperature": 0, "do_sample": False, "until": []}

PROTOCOLS: dict[str, Protocol] = {
    "default": Protocol(
        "the suite's", 16, "", _default_prompt, {"max_new_tokens": 128, **GREEDY}, scoring.default_scores,
        (Metric("score", "mean"), Metric("micro_score", "mean"), Metric("unextracted", total, higher_is_better=False),
         Metric("length_ratio", "mean", higher_is_better=False))),
    "mimo": Protocol(
        "XiaomiMiMo/MiMo-Embodied@0bee4b6 lmms_eval/tasks/robovqa/{robovqa.yaml,utils.py}", 8, "",
        lambda doc: scoring.mimo_prompt(doc["question"]), {"max_new_tokens": 32768, "top_p": 1.0, "num_beams": 1,
                                                           **GREEDY},
        scoring.mimo_scores, tuple(Metric(name, "mean") for name in (
            "mimo_score", "mimo_bleu1", "mimo_bleu2", "mimo_bleu3", "mimo_bleu4"))),
    # eval_robovqa.py: local data (qa.jsonl) runs train_explicit_style with its system prompt and 16 frames; its
    # sampling defaults: temperature 0, top-p 1, top-k -1, repetition penalty 1.05, 128 tokens
    "physbrain": Protocol(
        "DeepCybo-PhysAI/PhysBrainEvalKit@c95d9ee eval_robovqa.py, benchmark/robovqa.py (train_explicit_style)", 16,
        scoring.PHYSBRAIN_SYSTEM_PROMPT, lambda doc: scoring.physbrain_question(doc["question"], doc["tag"])[0],
        {"max_new_tokens": 128, "top_p": 1.0, "repetition_penalty": 1.05, **GREEDY}, scoring.physbrain_scores,
        (Metric("physbrain_bleu", "mean"),)),
    "robomamba": Protocol(
        "lmzpai/roboMamba@d383bbb src/test.py (load_dataset_robovqa, VQADataset, run_test, judge_robovqa)", None, "",
        lambda doc: f"Question:{doc['question']} Answer:",
        {"max_new_tokens": 128, "temperature": 0.4, "do_sample": True, "until": []}, scoring.robomamba_scores,
        tuple(Metric(f"robomamba_bleu{n}", "mean") for n in range(1, 5))),
    "multinet": Protocol(
        "ManifoldRG/MultiNet RoboVQAModule, definitions/robovqa_prompt.py@13a7cd9", None,
        scoring.MULTINET_SYSTEM_PROMPT, lambda doc: doc["question"], {"max_new_tokens": 128, **GREEDY},
        scoring.multinet_scores, (Metric("multinet_exact_match", "mean"), Metric("multinet_similarity", "mean"),
                                  Metric("multinet_invalid", total, higher_is_better=False))),
}


# =============================================================================================
# The questions
# =============================================================================================


def load_docs(context: TaskContext) -> LoadedDocs:
    """The questions of the task's type (its YAML's ``dataset_name``), their frames checked."""
    settings, kind = context.settings, context.dataset_name
    loaded = load_type(settings, kind)
    warn_of_skipped(context.task_name, loaded.skipped, "question(s) with unusable frames", ENV_PREFIX)
    protocol = PROTOCOLS[settings.protocol]
    docs = [{**doc, "protocol": settings.protocol, "max_side": settings.max_side} for doc in loaded.docs]
    logger.info(f"{context.task_name}: {len(docs)} questions, protocol {settings.protocol} ({protocol.source})")
    return LoadedDocs(docs, loaded.skipped, read_from=[settings.root])


def configure(context: TaskContext, config: Mapping[str, Any]) -> Configuration:
    """The decoding of the chosen protocol."""
    return Configuration(generation_kwargs=dict(PROTOCOLS[context.settings.protocol].decoding))


def protocol_metrics(context: TaskContext, docs: Sequence[Mapping]) -> list[Metric]:
    return list(PROTOCOLS[context.settings.protocol].metrics)


def on_backend(context: TaskContext, backend: str, chat: bool) -> None:
    """Say where a run departs from the preset it names: a system turn lmms-eval's plain backends do not send."""
    protocol = PROTOCOLS[context.settings.protocol]
    if protocol.system_prompt and not chat and backend not in ("egoplan_hf", "egoplan_server"):
        logger.warning(f"{context.task_name}: the {context.settings.protocol} protocol sends a system prompt; "
                       f"lmms-eval's {backend} backend sends none of the task's, so this run departs from it")


# =============================================================================================
# 1. Visuals (doc_to_visual)
# =============================================================================================


def shown_indices(total_frames: int, frames: int | None) -> list[int]:
    """The frames shown of ``total_frames``: MiMo's spread (``np.linspace(0, total - 1, n, dtype=int)``, every frame
    where there are fewer than ``n``), or the last frame alone (``frames`` None)."""
    import numpy as np

    if frames is None:
        return [total_frames - 1]
    if total_frames < frames:
        return list(range(total_frames))
    return np.linspace(0, total_frames - 1, num=frames, dtype=int).tolist()


def doc_to_visual(doc: Mapping) -> list[Image.Image]:
    """The protocol's frames of the question's video: a video's frames tagged as one clip, a single frame as an
    image."""
    frames = PROTOCOLS[doc["protocol"]].frames
    return list(_frames(doc["item_id"], _media_key(doc["media"]), frames, doc["max_side"]))


def _media_key(media_of: Mapping) -> tuple:
    return tuple((key, tuple(value) if isinstance(value, list) else value) for key, value in sorted(media_of.items()))


@functools.lru_cache(maxsize=8)
def _frames(item_id: str, media_key: tuple, frames: int | None, max_side: int | None) -> tuple:
    where = dict(media_key)
    try:
        if where["kind"] == FRAMES16:
            paths = where["frames"]
            images = [media.fit_within(media.load_image(paths[i]), max_side)
                      for i in shown_indices(len(paths), frames)]
        elif where["kind"] == TFRECORD:
            images = [media.fit_within(media.decode_strictly(data).convert("RGB"), max_side)
                      for data in tfrecord_frames(where, shown_indices(where["frames"], frames))]
        else:
            with media.VideoFile(where["video"]) as video:
                images = video.frames(shown_indices(video.info.num_frames, frames), max_side=max_side)
    except (media.MediaError, OSError, ValueError) as error:
        raise RoboVQADataError(f"RoboVQA question {item_id}: {error}; check {setting_name(ENV_PREFIX, 'root')} "
                               f"(a run with --use_cache resumes from the answers already given)") from error
    return tuple(images if frames is None else media.as_video_frames(images, clip=item_id))


# =============================================================================================
# 2. Text (doc_to_text, doc_to_messages)
# =============================================================================================


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    return PROTOCOLS[doc["protocol"]].prompt(doc)


def doc_to_messages(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> list[dict]:
    """Chat backends: the protocol's system turn (if any), then the frames and the text."""
    return chat_messages(PROTOCOLS[doc["protocol"]].system_prompt, doc_to_visual(doc), doc_to_text(doc))


# =============================================================================================
# 3. Results (process_results)
# =============================================================================================


def process_results(doc: Mapping, results: Sequence[str], context: TaskContext) -> dict[str, Any]:
    """The answer scored by the protocol's scorer; what it was scored against logged."""
    answer = results[0]
    scores: dict[str, Any] = dict(PROTOCOLS[doc["protocol"]].score(answer, doc))
    scores["predictions"] = {"item_id": doc["item_id"], "question_type": doc["question_type"], "tag": doc["tag"],
                             "reference": doc["answer"], "protocol": doc["protocol"]}
    return scores


# =============================================================================================
# The task, as lmms-eval builds it
# =============================================================================================

GENERATION = TaskSpec(
    load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text, doc_to_messages=doc_to_messages,
    doc_to_target="answer", process_results=process_results, metrics_of_the_data=protocol_metrics,
    configure=configure, on_backend=on_backend, metrics=(Metric("predictions", count),),
    request_options={"system_prompt": SYSTEM_PROMPT_OPTION},
)
