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
  is what the ``ego_think`` group reports; capability groups average their dimensions.
  Judgements that fail or carry no valid rating are excluded from the mean, as the official
  ``show_result.py`` does, and counted (``judged`` / ``failed``).

Data comes from the Hub dataset or from a local copy of the release layout, chosen by the
``source`` setting; loading and checking it is ``lmms_egoplan.egothink.data``. This module follows
the task YAMLs (``tasks/egothink/``): settings, the task, then what the harness calls in order --
visuals, text, results (aggregation: ``lmms_egoplan.harness.judged``).
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml
from lmms_eval.api.task import ConfigurableMessagesTask
from loguru import logger

from lmms_egoplan.core.media import IMAGES_DECODED_AT_LOAD, load_image
from lmms_egoplan.core.settings import SettingsError, setting, setting_name
from lmms_egoplan.egothink.data import (
    CAPABILITIES,
    DIMENSIONS,
    ENV_PREFIX,
    load_hub_dimension,
    load_release_dimension,
)
from lmms_egoplan.harness.judged import JudgedTask
from lmms_egoplan.judge import JudgeRequest, JudgeSettings, Rubric, bracket_rating, judge_parts_item, register_rubric

# How answers are decoded: ``greedy`` keeps the YAML's generation_kwargs (the default: a run is
# repeatable); the others are the sampling of the official inference scripts (AdaCheng/EgoThink
# ``models/test_llava2.py``: temperature 0.2, top_p unset; ``models/test_pandagpt.py``: temperature
# 0.1, top_p 0.01), put over the YAML's. Token limits are the YAML's either way (the scripts' too).
DECODING_PRESETS: dict[str, dict] = {
    "greedy": {},
    "official_llava": {"do_sample": True, "temperature": 0.2, "num_beams": 1},
    "official_pandagpt": {"do_sample": True, "temperature": 0.1, "top_p": 0.01},
}


@dataclass(frozen=True)
class EgoThinkSettings(JudgeSettings):
    source: str = "hub"  # "hub" (Hugging Face dataset) or "local" (release layout under data_root)
    data_root: Optional[Path] = None  # the release's data folder (holds Activity/, Object/, ...)
    hub_repo: str = "EgoThink/EgoThink"
    hub_revision: Optional[str] = None
    image_cache: Path = Path("~/.cache/lmms_egoplan/egothink")  # Hub images are written here as files
    prompt_preset: Optional[str] = None  # force an inference-prompt preset (default: by --model)
    decoding: str = setting("greedy", choices=tuple(DECODING_PRESETS))  # how answers are decoded
    # Images decoded in full before the model loads, spread over the data (every one's first and
    # last bytes are checked): core.media.image_problems
    images_decoded_at_load: int = setting(IMAGES_DECODED_AT_LOAD, minimum=0)
    # Read images that a record's image_path places outside data_root (through a symlink out of it).
    allow_paths_outside_root: bool = False


# --- The task -----------------------------------------------------------------------------------


class EgoThinkScoring:
    """What an EgoThink task does under either harness: its settings and docs (judged by
    ``harness.judged.JudgedScoring``)."""

    Settings = EgoThinkSettings
    ENV_PREFIX = ENV_PREFIX
    JUDGE_RUBRIC = "egothink"  # its judged items' rubric (RUBRIC_NAME, registered below)

    def load_docs(self) -> list[dict]:
        dimension = DIMENSIONS.get(self.config.dataset_name)
        if dimension is None:
            raise ValueError(f"task {self.config.task}: dataset_name must be one of {', '.join(DIMENSIONS)}, "
                             f"got {self.config.dataset_name!r}")
        settings = self.settings
        if settings.source == "local":
            if settings.data_root is None:
                raise SettingsError(f"task {self.config.task}: source is local but "
                                    f"{setting_name(ENV_PREFIX, 'data_root')} (the release's data folder) is not set")
            docs = load_release_dimension(settings.data_root, dimension,
                                          allow_outside=settings.allow_paths_outside_root,
                                          images_decoded=settings.images_decoded_at_load)
            origin = str(settings.data_root)
        elif settings.source == "hub":
            docs = load_hub_dimension(settings.hub_repo, dimension, revision=settings.hub_revision,
                                      image_cache=settings.image_cache, images_decoded=settings.images_decoded_at_load)
            origin = f"{settings.hub_repo} ({dimension.hub_config})"
        else:
            raise SettingsError(f"task {self.config.task}: {setting_name(ENV_PREFIX, 'source')} must be 'hub' or "
                                f"'local', got {settings.source!r}")
        logger.info(f"EgoThink {dimension.capability}/{dimension.name}: {len(docs)} questions from {origin} "
                    f"(the paper has {dimension.paper_count})")
        return docs


class EgoThinkTask(EgoThinkScoring, JudgedTask):
    """One EgoThink dimension (YAML ``dataset_name``), judged by an LLM after generation."""

    def _prepare_model_specific_config(self):
        # lmms-eval calls this before the data loads and after its model-specific generation_kwargs
        # (a --gen_kwargs on the command line still overrides the decoding preset).
        super()._prepare_model_specific_config()
        self.config.generation_kwargs.update(DECODING_PRESETS[self.settings.decoding])
        preset = self.settings.prompt_preset
        if preset:
            presets = {k: v for k, v in (self.config.lmms_eval_specific_kwargs or {}).items() if isinstance(v, dict)}
            if preset not in presets:
                raise SettingsError(f"task {self.config.task}: {setting_name(ENV_PREFIX, 'prompt_preset')} {preset!r} "
                                    f"is not one of {', '.join(sorted(presets))}")
            self.lmms_eval_specific_kwargs = presets[preset]


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
    return _prompt(doc, _default_preset("_planning_yaml" if doc["capability"] == "Planning" else "_short_answer_yaml"))[1]


def doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    """Chat backends: the preset's system prompt as a system turn, then the image and the text."""
    system, text = _prompt(doc, lmms_eval_specific_kwargs)
    system_turn = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    return system_turn + ConfigurableMessagesTask._build_user_turn(doc_to_visual(doc), text)


# --- 3. Results: the judge (Table 7) ------------------------------------------------------------

# Table 7's text; whitespace, the "[[rating]]" brackets and the system turn as in the authors'
# released judge prompt ("single-math-v2" of their FastChat-based judge_prompts.jsonl).
JUDGE_SYSTEM_PROMPT = "You are a helpful assistant."
JUDGE_PROMPT = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an "
    "AI assistant to the user question displayed below. Your evaluation should consider correctness and "
    "helpfulness. You will be given a reference answer and the assistant's answer. Begin your evaluation by "
    "comparing the assistant's answer with the reference answer. Identify and correct any mistakes. The "
    "assistant has access to an image alongwith questions but you will not be given images. Therefore, please "
    "consider only how the answer is close to the reference answer. If the assistant's answer is not exactly "
    "same as or similar to the answer, then he must be wrong.  Be as objective as possible. Discourage "
    "uninformative answers. Also, equally treat short and long answers and focus on the correctness of "
    "answers.  After providing your explanation, you must rate the response with either 0, 0.5 or 1 by "
    "strictly following this format: \"[[rating]]\", for example: \"Rating: [[0.5]]\".\n\n"
    "[Question]\n{question}\n\n"
    "[The Start of Reference Answer]\n{reference}\n[The End of Reference Answer]\n\n"
    "[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
)

# Scores are mean ratings x 100; a rating other than 0, 0.5 or 1 is no valid rating.
RATINGS = (0, 0.5, 1)
RUBRIC = Rubric(bracket_rating(allowed=RATINGS), scale=100.0, levels=RATINGS,
                prompt=f"{JUDGE_SYSTEM_PROMPT}\n\n{JUDGE_PROMPT}", version="1",
                answer_pattern=r"\[The Start of Assistant's Answer\]\n(?P<answer>.*)\n\[The End of Assistant's Answer\]$")
RUBRIC_NAME = register_rubric("egothink", RUBRIC)  # the name its judged items (and logs) carry


def judge_request(doc: dict, prediction: str) -> JudgeRequest:
    """Table 7's grading prompt for one answer."""
    prompt = JUDGE_PROMPT.format(question=doc["question"], reference=doc["answer"], answer=prediction)
    return JudgeRequest.from_prompt(doc["id"], prompt, system=JUDGE_SYSTEM_PROMPT)


def process_results(doc: dict, results: list) -> dict:
    """The judge item for this answer; the judge rates all items of the task after generation."""
    item = judge_parts_item({"": judge_request(doc, results[0])}, RUBRIC_NAME)  # judged as a whole
    return {"score": item, "judged": item, "failed": item}


def group_scores(task_scores: dict[str, dict]) -> dict[str, dict]:
    """The groups' scores as the run reports them (``tasks/egothink/_group_yaml``), from the
    dimensions' (``rejudge``): each capability and ``ego_think`` the unweighted mean of their
    dimensions' scores (the paper's Average: over the 12 dimensions), judged / failed totals.
    Only groups whose dimensions are all present."""
    capabilities = {f"ego_think_capability_{capability}": [f"ego_think_{name}" for name in names]
                    for capability, names in CAPABILITIES.items()}
    members = {"ego_think": [task for tasks in capabilities.values() for task in tasks], **capabilities}
    groups = {}
    for group, tasks in members.items():
        if all(task in task_scores for task in tasks):
            rows = [task_scores[task] for task in tasks]
            groups[group] = {"score": sum(row["score"] for row in rows) / len(rows),
                             "judged": sum(row["judged"] for row in rows), "failed": sum(row["failed"] for row in rows)}
    return groups
