"""EgoThink (Cheng et al., CVPR 2024): can vision-language models think from a first-person view?

The protocol, as the paper (section 3-4, appendices C-D) and its release define it:

* 700 egocentric images (Ego4D frames) with open-ended questions in twelve dimensions grouped
  into six capabilities (Table 4): Object (existence, attribute, affordance), Activity,
  Localization (location, spatial relationship), Reasoning (counting, comparison, situated
  reasoning), Forecasting, Planning (navigation, assistance). One lmms-eval task per dimension.
* The model answers zero-shot with its family's inference prompt: short answers (Table 5),
  detailed ones for the two planning dimensions (Table 6). The prompts are per-model presets
  in the task YAMLs' ``lmms_eval_specific_kwargs``; greedy decoding by default (the ``decoding``
  setting offers the official scripts' sampling instead); 30 new tokens, 300 for planning (the
  official inference script's limits).
* GPT-4 grades each answer against the reference with the prompt of Table 7 ("single-answer
  grading"): 0 (wrong), 0.5 (partially correct) or 1 (correct), written ``Rating: [[x]]``. OpenAI shut
  ``gpt-4`` down on 2026-10-23: the judge here is the suite's default, an open-weights model served
  locally (``lmms_egoplan.judge.settings``), with the same prompt and scale; the paper's GPT-4 stays
  selectable where it is still served (tasks/egothink/README.md).
* A dimension's score is its mean rating x 100; the paper's "Average" (Table 3) is the mean of
  the twelve dimension scores (it reproduces every row but one to 0.05, see tasks/egothink/README.md), which
  is what the ``ego_think`` group reports; capability groups average their dimensions. The groups' ``micro_score``
  is the mean over the questions instead, the average some later reports print (PhysBrain's).
  Judgements that fail or carry no valid rating are excluded from the mean, as the official
  ``show_result.py`` does, and counted (``judged`` / ``failed``).

Data comes from the Hub dataset or from a local copy of the release layout, chosen by the
``source`` setting; loading and checking it is ``lmms_egoplan.egothink.data``. This module follows
the task YAMLs (``tasks/egothink/``): the documents and the model's configuration, then what the harness calls in
order -- visuals, text, results (judged metrics declared: ``lmms_egoplan.contract.judged``) -- and the tasks' specs.
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any, Mapping

import yaml
from loguru import logger

from lmms_egoplan.contract.benchmark import Configuration, LoadedDocs, TaskContext, TaskSpec, chat_messages
from lmms_egoplan.contract.judged import JUDGED_METRICS, judged
from lmms_egoplan.core.hub_download import resolved_commit
from lmms_egoplan.core.media import load_image
from lmms_egoplan.core.provenance import HUB_PREFIX
from lmms_egoplan.core.reasoning import without_reasoning
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.egothink.data import (
    DIMENSIONS,
    ENV_PREFIX,
    load_hub_dimension,
    load_release_dimension,
)
from lmms_egoplan.egothink.protocol import DECODING_PRESETS, RUBRIC_NAME, judge_request
from lmms_egoplan.judge.rubrics import judge_parts_item

# --- The documents -----------------------------------------------------------------------------


def load_docs(context: TaskContext) -> LoadedDocs:
    """One dimension's questions (the YAML's ``dataset_name``), from the Hub or a local copy of the release."""
    task_name, settings = context.task_name, context.settings
    dimension = DIMENSIONS.get(context.dataset_name)
    if dimension is None:
        raise ValueError(f"task {task_name}: dataset_name must be one of {', '.join(DIMENSIONS)}, "
                         f"got {context.dataset_name!r}")
    if settings.source == "local":
        if settings.data_root is None:
            raise SettingsError(f"task {task_name}: source is local but "
                                f"{setting_name(ENV_PREFIX, 'data_root')} (the release's data folder) is not set")
        docs = load_release_dimension(settings.data_root, dimension, allow_outside=settings.allow_paths_outside_root,
                                      images_decoded=settings.images_decoded_at_load)
        origin = read_from = str(settings.data_root)
    elif settings.source == "hub":
        # The commit the revision names now is what is loaded and recorded; unresolved (offline): the name given,
        # none for the default branch.
        revision = resolved_commit(settings.hub_repo, settings.hub_revision) or settings.hub_revision
        docs = load_hub_dimension(settings.hub_repo, dimension, revision=revision,
                                  image_cache=settings.image_cache, images_decoded=settings.images_decoded_at_load)
        origin = f"{settings.hub_repo} ({dimension.hub_config})"
        read_from = f"{HUB_PREFIX}{settings.hub_repo}@{revision or ''}"
    else:
        raise SettingsError(f"task {task_name}: {setting_name(ENV_PREFIX, 'source')} must be 'hub' or "
                            f"'local', got {settings.source!r}")
    said = f"EgoThink {dimension.capability}/{dimension.name}: {len(docs)} questions from {origin}"
    if len(docs) == dimension.paper_count:
        logger.info(f"{said} (as the paper)")
    else:  # a partial copy scores over other questions than the paper's, with nothing else to say so
        logger.warning(f"{said}, the paper has {dimension.paper_count}: its score is over other questions than "
                       f"the paper's")
    return LoadedDocs(docs, read_from=[read_from])


def configure(context: TaskContext, config: Mapping[str, Any]) -> Configuration:
    """The decoding preset's generation arguments, and the inference-prompt preset of the YAML's
    ``lmms_eval_specific_kwargs`` the ``prompt_preset`` setting names (none: lmms-eval's choice by model)."""
    decoding = DECODING_PRESETS[context.settings.decoding]
    preset = context.settings.prompt_preset
    if not preset:
        return Configuration(generation_kwargs=decoding)
    presets = {k: v for k, v in (config.get("lmms_eval_specific_kwargs") or {}).items() if isinstance(v, dict)}
    if preset not in presets:
        raise SettingsError(f"task {context.task_name}: {setting_name(ENV_PREFIX, 'prompt_preset')} {preset!r} "
                            f"is not one of {', '.join(sorted(presets))}")
    return Configuration(generation_kwargs=decoding, prompt_preset=presets[preset])


def configure_blind(context: TaskContext, config: Mapping[str, Any]) -> Configuration:
    """The lm-eval baselines answer in the default prompt, decoded as the ``decoding`` setting says."""
    if context.settings.prompt_preset:
        raise SettingsError(f"task {context.task_name}: {setting_name(ENV_PREFIX, 'prompt_preset')} chooses "
                            f"among the lmms-eval tasks' per-model prompts; the lm-eval baselines use the "
                            f"default prompt (lm-eval's --apply_chat_template and --system_instruction apply)")
    return Configuration(generation_kwargs=DECODING_PRESETS[context.settings.decoding])


# --- 1. Visuals ---------------------------------------------------------------------------------


def doc_to_visual(doc: dict) -> list:
    """The question's image."""
    return [load_image(doc["image"])]


# --- 2. Text: the model's inference prompt ------------------------------------------------------


def _prompt(doc: dict, preset: dict | None) -> tuple[str, str]:
    """(system prompt, user text) of the model's inference prompt, from its preset."""
    preset = preset or {}
    return (preset.get("system_prompt") or "",
            f"{preset.get('pre_prompt', '')}{doc['question']}{preset.get('post_prompt', '')}")


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """Plain-text backends have no system turn: a preset's system prompt leads the text."""
    system, text = _prompt(doc, lmms_eval_specific_kwargs)
    return f"{system}\n{text}" if system else text


@functools.cache
def _default_preset(template: str) -> dict:
    """The ``default`` inference-prompt preset of one of the lmms-eval task templates."""
    text = (importlib.resources.files("lmms_egoplan.tasks") / "egothink" / template).read_text(encoding="utf-8")
    return yaml.safe_load(text)["lmms_eval_specific_kwargs"]["default"]


def doc_to_text_blind(doc: dict) -> str:
    """``ego_think_blind`` (lm-eval): the question without its image, in the default preset's prompt
    of the dimension's kind (Table 5: short answers; Table 6: detailed, for planning)."""
    template = "_planning_yaml" if doc["capability"] == "Planning" else "_short_answer_yaml"
    return _prompt(doc, _default_preset(template))[1]


def doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    """Chat backends: the preset's system prompt as a system turn, then the image and the text."""
    system, text = _prompt(doc, lmms_eval_specific_kwargs)
    return chat_messages(system, doc_to_visual(doc), text)


# --- 3. Results: the judge (Table 7) ------------------------------------------------------------

def process_results(doc: dict, results: list, context: TaskContext) -> dict:
    """The judge item for this answer less its reasoning blocks (``core.reasoning``: the judge rates the answer, not
    a thinking model's drafts); the judge rates all items of the task after generation."""
    item = judge_parts_item({"": judge_request(doc, without_reasoning(results[0]))}, RUBRIC_NAME)  # as a whole
    return {"score": item, "micro_score": item, "judged": item, "failed": item}


def judge_rubric(settings) -> str:
    return RUBRIC_NAME


# --- The tasks, as the harnesses build them -----------------------------------------------------

# ``micro_score``: a dimension's score again, under the name its groups average over the questions (weighted by their
# sizes), the mean some later reports print as EgoThink's average (PhysBrain's Table 1), beside the paper's ``score``.
METRICS = (*JUDGED_METRICS, judged("micro_score"))

DIMENSION = TaskSpec(load_docs=load_docs, doc_to_visual=doc_to_visual, doc_to_text=doc_to_text,
                     doc_to_messages=doc_to_messages, doc_to_target="answer", process_results=process_results,
                     metrics=METRICS, judge_rubric=judge_rubric, configure=configure)
BLIND = TaskSpec(load_docs=load_docs, doc_to_text=doc_to_text_blind, doc_to_target="answer",
                 process_results=process_results, metrics=METRICS, judge_rubric=judge_rubric,
                 configure=configure_blind)
