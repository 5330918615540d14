"""RoboVQA's tasks: one per question type (the YAML's ``dataset_name``), each run under one protocol (the setting
``protocol``): the suite's ``default`` or the preset of a lineage that publishes numbers, with that lineage's frames,
prompt, decoding and scorer (``PROTOCOLS``; the scorers in ``lmms_egoplan.robovqa.scoring``).

Protocol:

1. Data: every question of the type in the chosen layout (``lmms_egoplan.robovqa.data``), typed by its official tag.
2. Visual input: the protocol's frames of the video: ``n`` spread as MiMo's ``robovqa_doc_to_visual`` spreads them
   (``np.linspace(0, total - 1, n, dtype=int)``, all frames where there are fewer), as one video (``default``) or as
   separate images, one image item each, as the lineage's code sends them (``mimo``, ``physbrain``); or the last
   frame alone, as one image. A preset whose lineage read another data layout says so once a run (``on_backend``).
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
from lmms_egoplan.core.embeddings import SentenceEncoder, run_encoder
from lmms_egoplan.core.request_options import SYSTEM_PROMPT as SYSTEM_PROMPT_OPTION
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.core.statistics import count, total
from lmms_egoplan.robovqa import scoring
from lmms_egoplan.robovqa.data import (
    BINARY_TYPES,
    ENV_PREFIX,
    FRAMES16,
    TFRECORD,
    TIANLI,
    RoboVQADataError,
    load_type,
    tfrecord_frames,
)


@dataclass(frozen=True)
class Protocol:
    """A way to run RoboVQA: its source, frames (a count spread over the video, or None: the last frame alone),
    prompt, decoding, scorer and metrics (name -> aggregation; its system turn: ``scoring.SYSTEM_PROMPTS``, by the
    protocol's name); whether the frames go as one video (``as_video``) or as separate images; the data layout its
    lineage read (``layout``; None: not stated or any); whether its scorer compares sentence embeddings
    (``embeds``: it is given the run's encoder of all-MiniLM-L6-v2, ``core.embeddings.run_encoder``)."""

    source: str
    frames: int | None
    prompt: Callable[[Mapping], str]
    decoding: Mapping[str, Any]
    score: Callable[..., dict[str, float]]  # (answer, doc), and the run's encoder where ``embeds``
    metrics: tuple[Metric, ...]
    as_video: bool = False
    layout: str | None = None
    embeds: bool = False

    def scored(self, answer: str, doc: Mapping, encoder: Callable[[], SentenceEncoder]) -> dict[str, float]:
        """The answer's metrics; ``encoder`` gives the sentence encoder a scorer that ``embeds`` compares with."""
        return self.score(answer, doc, encoder()) if self.embeds else self.score(answer, doc)


def _default_prompt(doc: Mapping) -> str:
    return doc["question"] + ("\nAnswer yes or no." if doc["question_type"] in BINARY_TYPES else "")


GREEDY = {"temperature": 0, "do_sample": False, "until": []}

PROTOCOLS: dict[str, Protocol] = {
    "default": Protocol(
        "the suite's", 16, _default_prompt, {"max_new_tokens": 128, **GREEDY}, scoring.default_scores,
        (Metric("score", "mean"), Metric("micro_score", "mean"), Metric("unextracted", total, higher_is_better=False),
         Metric("length_ratio", "mean", higher_is_better=False)), as_video=True),
    # utils.py robovqa_doc_to_visual: 8 PIL frames of the Tianli mp4, which mivllm.py (84-85) sends as 8 image items;
    # mivllm.py: its system turn (119), " /no_think" after the text (117; the README's no-think RoboVQA), the
    # robovqa.yaml's 32,768 new tokens capped at 16,384 (62-63)
    "mimo": Protocol(
        "XiaomiMiMo/MiMo-Embodied@0bee4b6 lmms_eval/tasks/robovqa/{robovqa.yaml,utils.py}, lmms_eval/models/"
        "mivllm.py", 8, lambda doc: scoring.mimo_prompt(doc["question"]) + scoring.MIMO_NO_THINK,
        {"max_new_tokens": 16384, "top_p": 1.0, "num_beams": 1, **GREEDY},
        scoring.mimo_scores, tuple(Metric(name, "mean") for name in (
            "mimo_score", "mimo_bleu1", "mimo_bleu2", "mimo_bleu3", "mimo_bleu4")), layout=TIANLI),
    # eval_robovqa.py: local data (qa.jsonl) runs train_explicit_style with its system prompt and 16 frames; its
    # sampling defaults: temperature 0, top-p 1, top-k -1, repetition penalty 1.05, 128 tokens; benchmark/robovqa.py
    # load_dataset puts the 16 frame paths in row["images"], core/hf_engine.py prepare_messages one image item each
    "physbrain": Protocol(
        "DeepCybo-PhysAI/PhysBrainEvalKit@c95d9ee eval_robovqa.py, benchmark/robovqa.py (train_explicit_style)", 16,
        lambda doc: scoring.physbrain_question(doc["question"], doc["tag"])[0],
        {"max_new_tokens": 128, "top_p": 1.0, "repetition_penalty": 1.05, **GREEDY}, scoring.physbrain_scores,
        (Metric("physbrain_bleu", "mean"),), layout=FRAMES16),
    # run_test asks for sampling at temperature 0.4 (src/test.py:379-385), but its Mamba generate keeps top_k 1
    # (src/model/my_mamba/modeling_mamba.py:786-806), and sample() short-circuits top_k 1 to argmax (632-638): greedy
    "robomamba": Protocol(
        "lmzpai/roboMamba@d383bbb src/test.py (load_dataset_robovqa, VQADataset, run_test, judge_robovqa), "
        "src/model/my_mamba/modeling_mamba.py (generate, sample)", None,
        lambda doc: f"Question:{doc['question']} Answer:", {"max_new_tokens": 128, **GREEDY}, scoring.robomamba_scores,
        tuple(Metric(f"robomamba_bleu{n}", "mean") for n in range(1, 5))),
    # robovqa_module.py sends the last image, then the text, under ROBOVQA_PROMPT as the system turn; the decoding and
    # (by default, multinet_scorer) the scorer of its open-weight runs: src/v1/modules/Magma/scripts/
    # robovqa_single_inference.py (greedy, max_new_tokens 75)
    "multinet": Protocol(
        "ManifoldRG/MultiNet@d6fe80e src/v1/modules/robovqa_module.py, src/data_utils/openx_dataloader.py, "
        "definitions/robovqa_prompt.py, src/v1/modules/Magma/scripts/robovqa_single_inference.py", None,
        lambda doc: scoring.multinet_question(doc["question"]), {"max_new_tokens": 75, **GREEDY},
        scoring.multinet_scores, (Metric("multinet_exact_match", "mean"), Metric("multinet_similarity", "mean"),
                                  Metric("multinet_invalid", total, higher_is_better=False)), embeds=True),
}


# =============================================================================================
# The questions
# =============================================================================================


def load_docs(context: TaskContext) -> LoadedDocs:
    """The questions of the task's type (its YAML's ``dataset_name``), their frames checked."""
    settings, kind = context.settings, context.dataset_name
    if settings.multinet_scorer != scoring.MULTINET_SCRIPT and settings.protocol != "multinet":
        raise SettingsError(f"RoboVQA: {setting_name(ENV_PREFIX, 'multinet_scorer')} is {settings.multinet_scorer}, "
                            f"which chooses the multinet protocol's scorer, but {setting_name(ENV_PREFIX, 'protocol')} "
                            f"is {settings.protocol}: set the protocol to multinet, or leave the scorer unset")
    loaded = load_type(settings, kind)
    warn_of_skipped(context.task_name, loaded.skipped, "question(s) with unusable frames", ENV_PREFIX)
    protocol = PROTOCOLS[settings.protocol]
    docs = [{**doc, "protocol": settings.protocol, "max_side": settings.max_side,
             "multinet_scorer": settings.multinet_scorer} for doc in loaded.docs]
    check_prompts(protocol, docs, settings)
    logger.info(f"{context.task_name}: {len(docs)} questions, protocol {settings.protocol} ({protocol.source})")
    return LoadedDocs(docs, loaded.skipped, read_from=[settings.root])


def check_prompts(protocol: Protocol, docs: Sequence[Mapping], settings: Any) -> None:
    """Every question's prompt built before the model loads: a question the preset cannot rewrite (physbrain's
    ``transform_training_qa`` raises on a template it does not know) stops the run now, naming it, not at its
    request."""
    unwritable = []
    for doc in docs:
        try:
            protocol.prompt(doc)
        except ValueError as error:
            unwritable.append(f"{doc['item_id']}: {error}")
    if unwritable:
        shown = "\n  ".join(unwritable[:10]) + (f"\n  ... and {len(unwritable) - 10} more" if len(unwritable) > 10
                                                else "")
        raise RoboVQADataError(f"the {settings.protocol} protocol ({protocol.source}) cannot write the prompt of "
                               f"{len(unwritable)} question(s) of the RoboVQA data under {settings.root}:\n  {shown}\n"
                               f"set {setting_name(ENV_PREFIX, 'protocol')} to another protocol (default reads every "
                               f"question)")


def configure(context: TaskContext, config: Mapping[str, Any]) -> Configuration:
    """The decoding of the chosen protocol."""
    return Configuration(generation_kwargs=dict(PROTOCOLS[context.settings.protocol].decoding))


def protocol_metrics(context: TaskContext, docs: Sequence[Mapping]) -> list[Metric]:
    return list(PROTOCOLS[context.settings.protocol].metrics)


def on_backend(context: TaskContext, backend: str, chat: bool) -> None:
    """Say where a run departs from the preset it names: a system turn lmms-eval's plain backends do not send; a data
    layout other than the one its lineage read (once a run, for all of its tasks)."""
    settings = context.settings
    protocol = PROTOCOLS[settings.protocol]
    if settings.system_prompt and not chat and backend not in ("egoplan_hf", "egoplan_server"):
        logger.warning(f"{context.task_name}: the {settings.protocol} protocol sends a system prompt; "
                       f"lmms-eval's {backend} backend sends none of the task's, so this run departs from it")
    if protocol.layout not in (None, settings.data_source) and context.run is not None:
        said = f"robovqa: {settings.protocol} on {settings.data_source}"
        if said not in context.run.said_once:
            context.run.said_once.add(said)
            logger.warning(f"RoboVQA: {LAYOUT_DEPARTURES[settings.protocol, settings.data_source]}; set "
                           f"{setting_name(ENV_PREFIX, 'data_source')} to {protocol.layout} to show its frames")


# Where a preset's frames are not its lineage's, by data layout (the lineage's own layout: ``Protocol.layout``).
LAYOUT_DEPARTURES = {
    ("mimo", FRAMES16): "the mimo protocol's 8 frames are spread over the 16 frames the frames16 copy kept, not over "
                        "the video's frames as MiMo's robovqa_doc_to_visual spreads them over a Tianli/robovqa mp4: "
                        "other frames",
    ("mimo", TFRECORD): "the mimo protocol's 8 frames are spread over the official shard's frames; MiMo decoded "
                        "Tianli/robovqa's mp4 files, and the shards' frames are not shown to be theirs",
    ("physbrain", TIANLI): "the physbrain protocol's 16 frames are spread over the video's frames; PhysBrainEvalKit "
                           "read the 16 frames the frames16 copy kept, whose choice is not shown to be this spread",
    ("physbrain", TFRECORD): "the physbrain protocol's 16 frames are spread over the shard's frames; PhysBrainEvalKit "
                             "read the 16 frames the frames16 copy kept, whose choice is not shown to be this spread",
}


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
    """The protocol's frames of the question's video: tagged as one clip where the protocol sends a video, else
    each an image of its own (a single frame, or the frames a lineage sends as separate images)."""
    protocol = PROTOCOLS[doc["protocol"]]
    return list(_frames(doc["item_id"], _media_key(doc["media"]), protocol.frames, doc["max_side"],
                        protocol.as_video and protocol.frames is not None))


def _media_key(media_of: Mapping) -> tuple:
    return tuple((key, tuple(value) if isinstance(value, list) else value) for key, value in sorted(media_of.items()))


@functools.lru_cache(maxsize=8)
def _frames(item_id: str, media_key: tuple, frames: int | None, max_side: int | None, as_video: bool) -> tuple:
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
    return tuple(media.as_video_frames(images, clip=item_id) if as_video else images)


# =============================================================================================
# 2. Text (doc_to_text, doc_to_messages)
# =============================================================================================


def doc_to_text(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> str:
    return PROTOCOLS[doc["protocol"]].prompt(doc)


def doc_to_messages(doc: Mapping, lmms_eval_specific_kwargs: Mapping | None = None) -> list[dict]:
    """Chat backends: the protocol's system turn (if any), then the frames and the text."""
    return chat_messages(scoring.SYSTEM_PROMPTS.get(doc["protocol"], ""), doc_to_visual(doc), doc_to_text(doc))


# =============================================================================================
# 3. Results (process_results)
# =============================================================================================


def process_results(doc: Mapping, results: Sequence[str], context: TaskContext) -> dict[str, Any]:
    """The answer scored by the protocol's scorer; what it was scored against logged."""
    answer = results[0]
    scores: dict[str, Any] = PROTOCOLS[doc["protocol"]].scored(
        answer, doc, lambda: run_encoder(context.run, model=None, device=None, user="RoboVQA's multinet scorer"))
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
