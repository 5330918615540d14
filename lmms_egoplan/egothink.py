"""EgoThink (Cheng et al., CVPR 2024): can vision-language models think from a first-person view?

The protocol, as the paper (section 3-4, appendices C-D) and its release define it:

* 700 egocentric images (Ego4D frames) with open-ended questions in twelve dimensions grouped
  into six capabilities (Table 4): Object (existence, attribute, affordance), Activity,
  Localization (location, spatial relationship), Reasoning (counting, comparison, situated
  reasoning), Forecasting, Planning (navigation, assistance). One lmms-eval task per dimension.
* The model answers zero-shot with its family's inference prompt: short answers (Table 5),
  detailed ones for the two planning dimensions (Table 6). The prompts are per-model presets
  in the task YAMLs' ``lmms_eval_specific_kwargs``; greedy decoding; 30 new tokens, 300 for
  planning (the official inference script's limits).
* GPT-4 grades each answer against the reference with the prompt of Table 7 ("single-answer
  grading"): 0 (wrong), 0.5 (partially correct) or 1 (correct), written ``Rating: [[x]]``.
* A dimension's score is its mean rating x 100; the paper's "Average" (Table 3) is the mean of
  the twelve dimension scores (it reproduces every row but one to 0.05, see the README), which
  is what the ``ego_think`` group reports; capability groups average their dimensions.
  Judgements that fail or carry no valid rating are excluded from the mean, as the official
  ``show_result.py`` does, and counted (``judged`` / ``failed``).

Data comes from the Hub dataset (``EgoThink/EgoThink``: one config per dimension, split
``test``) or from a local copy of the release layout (``<data_root>/<Capability>/<dimension>/
annotations.json`` + ``images/``), chosen by the ``source`` setting.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lmms_eval.api.task import ConfigurableMessagesTask
from loguru import logger

from lmms_egoplan.errors import InputError
from lmms_egoplan.judge import JudgeRequest, JudgeSettings, Rubric, bracket_rating, judge_parts_item, register_rubric
from lmms_egoplan.judged_task import JudgedTask
from lmms_egoplan.media import MediaError, load_image
from lmms_egoplan.settings import SettingsError, setting_name


@dataclass(frozen=True)
class Dimension:
    name: str  # task ego_think_<name>
    capability: str
    hub_config: str  # config name in the Hub dataset; also the task YAML's dataset_name
    release_dirs: tuple[str, ...]  # folder under the release's data root (first that exists)
    paper_count: int = 50  # questions in the paper's Table 4


DIMENSIONS: dict[str, Dimension] = {d.hub_config: d for d in (
    Dimension("existence", "Object", "Object_existence", ("Object/existence",)),
    Dimension("attribute", "Object", "Object_attribute", ("Object/attribute",)),
    Dimension("affordance", "Object", "Object_affordance", ("Object/affordance",)),
    Dimension("activity", "Activity", "Activity", ("Activity",), paper_count=100),
    Dimension("location", "Localization", "Localization_location", ("Localization/location",)),
    Dimension("spatial", "Localization", "Localization_spatial", ("Localization/spatial",)),
    Dimension("counting", "Reasoning", "Reasoning_counting", ("Reasoning/counting",)),
    Dimension("comparing", "Reasoning", "Reasoning_comparing", ("Reasoning/comparing",)),
    Dimension("situated", "Reasoning", "Reasoning_situated", ("Reasoning/situated",)),
    # The official release names this folder "Forecast" (its Hub config is "Forecasting").
    Dimension("forecasting", "Forecasting", "Forecasting", ("Forecast", "Forecasting"), paper_count=100),
    Dimension("navigation", "Planning", "Planning_navigation", ("Planning/navigation",)),
    Dimension("assistance", "Planning", "Planning_assistance", ("Planning/assistance",)),
)}


ENV_PREFIX = "EGOTHINK"  # settings are overridden by environment variables EGOTHINK_<SETTING>


class EgoThinkDataError(InputError):
    """An annotation file of the release cannot be used."""


@dataclass(frozen=True)
class EgoThinkSettings(JudgeSettings):
    judge_model: str = "gpt-4"  # the paper's judge
    source: str = "hub"  # "hub" (Hugging Face dataset) or "local" (release layout under data_root)
    data_root: Optional[Path] = None  # the release's data folder (holds Activity/, Object/, ...)
    hub_repo: str = "EgoThink/EgoThink"
    hub_revision: Optional[str] = None
    image_cache: Path = Path("~/.cache/lmms_egoplan/egothink")  # Hub images are written here as files
    prompt_preset: Optional[str] = None  # force an inference-prompt preset (default: by --model)


# --- The judge (Table 7) -------------------------------------------------------------------
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
RUBRIC = Rubric(bracket_rating(allowed=(0, 0.5, 1)), scale=100.0)
_RUBRIC_REFERENCE = register_rubric("egothink", RUBRIC)  # the name its judged items (and logs) carry


def judge_request(doc: dict, prediction: str) -> JudgeRequest:
    prompt = JUDGE_PROMPT.format(question=doc["question"], reference=doc["answer"], answer=prediction)
    return JudgeRequest.from_prompt(doc["id"], prompt, system=JUDGE_SYSTEM_PROMPT)


# --- The task --------------------------------------------------------------------------------


class EgoThinkTask(JudgedTask):
    Settings = EgoThinkSettings
    ENV_PREFIX = ENV_PREFIX

    def load_docs(self) -> list[dict]:
        dimension = DIMENSIONS.get(self.config.dataset_name)
        if dimension is None:
            raise ValueError(f"task {self.config.task}: dataset_name must be one of {', '.join(DIMENSIONS)}, "
                             f"got {self.config.dataset_name!r}")
        settings = self.settings
        if settings.source == "local":
            if settings.data_root is None:
                raise SettingsError(f"task {self.config.task}: source is local but {_setting('data_root')} "
                                    f"(the release's data folder) is not set")
            docs, origin = load_release_dimension(settings.data_root, dimension), str(settings.data_root)
        elif settings.source == "hub":
            docs = load_hub_dimension(settings.hub_repo, dimension, revision=settings.hub_revision,
                                      image_cache=settings.image_cache)
            origin = f"{settings.hub_repo} ({dimension.hub_config})"
        else:
            raise SettingsError(f"task {self.config.task}: {_setting('source')} must be 'hub' or 'local', "
                                f"got {settings.source!r}")
        logger.info(f"EgoThink {dimension.capability}/{dimension.name}: {len(docs)} questions from {origin} "
                    f"(the paper has {dimension.paper_count})")
        return docs

    def _prepare_model_specific_config(self):
        super()._prepare_model_specific_config()
        preset = self.settings.prompt_preset
        if preset:
            presets = {k: v for k, v in (self.config.lmms_eval_specific_kwargs or {}).items() if isinstance(v, dict)}
            if preset not in presets:
                raise SettingsError(f"task {self.config.task}: {_setting('prompt_preset')} {preset!r} is not one of "
                                    f"{', '.join(sorted(presets))}")
            self.lmms_eval_specific_kwargs = presets[preset]


def _setting(field: str) -> str:
    return setting_name(ENV_PREFIX, field)


# --- Data ------------------------------------------------------------------------------------


def load_release_dimension(data_root: str | Path, dimension: Dimension) -> list[dict]:
    """One dimension from the release layout: ``<data_root>/<dir>/annotations.json`` + ``images/``.

    As the official inference script does, a record's image is ``images/<file name of its
    first image_path>``. Every image is checked here, before anything runs.
    """
    candidates = [Path(data_root).expanduser() / d for d in dimension.release_dirs]
    folder = next((c for c in candidates if (c / "annotations.json").is_file()), None)
    if folder is None:
        raise FileNotFoundError(f"EgoThink {dimension.name}: no annotations.json in "
                                + " or ".join(str(c) for c in candidates) + " (is data_root the release's data folder?)")
    annotations = folder / "annotations.json"
    try:
        records = json.loads(annotations.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise EgoThinkDataError(f"{annotations}: not valid JSON: {error}") from None
    if not isinstance(records, list):
        raise EgoThinkDataError(f"{annotations}: expected a JSON list of records")
    docs, missing = [], []
    for index, record in enumerate(records):
        for key in ("question", "answer"):
            if not isinstance(record, dict) or not isinstance(record.get(key), str):
                raise EgoThinkDataError(f"{annotations}: record {index} has no text field {key!r}")
        if not isinstance(record.get("image_path"), list) or not record["image_path"]:
            raise EgoThinkDataError(f"{annotations}: record {index} has no image_path list")
        image = folder / "images" / Path(record["image_path"][0]).name
        if not image.is_file():
            missing.append(image)
        docs.append(_doc(dimension, index, record["question"], record["answer"], image))
    if missing:
        raise MediaError(f"EgoThink {dimension.name}: {len(missing)} image(s) named in {annotations} are missing, "
                         f"e.g. {missing[0]}", missing[0])
    return docs


def load_hub_dimension(repo: str, dimension: Dimension, *, revision: str | None = None,
                       image_cache: str | Path) -> list[dict]:
    """One dimension (config) of the Hub dataset, split ``test``; its images are written once
    to ``image_cache`` (content-addressed, original bytes) so that documents hold paths."""
    import datasets

    try:
        data = datasets.load_dataset(repo, dimension.hub_config, split="test", revision=revision)
    except Exception as error:  # say which settings lead elsewhere, keep the cause
        raise RuntimeError(
            f"EgoThink {dimension.name}: could not load config {dimension.hub_config!r} of {repo} "
            f"(revision {revision or 'default'}): {error}. If this datasets version refuses the repository's "
            f"loading script, set {_setting('hub_revision')} to refs/convert/parquet, or {_setting('hub_repo')} to "
            f"lmms-lab/Egothink (same configs), or use a local copy ({_setting('source')} local, "
            f"{_setting('data_root')})") from error
    data = data.cast_column("image", datasets.Image(decode=False))
    folder = Path(image_cache).expanduser() / re.sub(r"[^\w.-]+", "_", repo) / dimension.hub_config
    folder.mkdir(parents=True, exist_ok=True)
    docs = []
    for index, row in enumerate(data):
        image = _stored_image(row["image"], folder, index)
        docs.append(_doc(dimension, index, row["question"], row["answer"], image))
    return docs


def _stored_image(image: dict, folder: Path, index: int) -> Path:
    content = image.get("bytes")
    if content is None:  # the dataset points at a local file
        return Path(image["path"])
    suffix = Path(image.get("path") or "").suffix or ".jpg"
    path = folder / f"{index}-{hashlib.sha256(content).hexdigest()[:16]}{suffix}"
    if not path.is_file():
        # Ranks load at once and may store the same image together: each writes a file of its
        # own and renames it into place (the same bytes, whichever rename lands last).
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{path.name}.", suffix=".partial", delete=False) as partial:
            partial.write(content)
        try:
            os.replace(partial.name, path)
        except OSError:
            Path(partial.name).unlink(missing_ok=True)
            if not path.is_file():
                raise
    return path


def _doc(dimension: Dimension, index: int, question: str, answer: str, image: Path) -> dict:
    return {"id": f"{dimension.hub_config}/{index}", "dimension": dimension.name,
            "capability": dimension.capability, "question": question, "answer": answer, "image": str(image)}


# --- Prompts and results ---------------------------------------------------------------------


def _prompt(doc: dict, preset: dict | None) -> tuple[str, str]:
    """(system prompt, user text) of the model's inference prompt, from its preset."""
    preset = preset or {}
    return (preset.get("system_prompt") or "",
            f"{preset.get('pre_prompt', '')}{doc['question']}{preset.get('post_prompt', '')}")


def doc_to_visual(doc: dict) -> list:
    return [load_image(doc["image"])]


def doc_to_text(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> str:
    """Plain-text backends have no system turn: a preset's system prompt leads the text."""
    system, text = _prompt(doc, lmms_eval_specific_kwargs)
    return f"{system}\n{text}" if system else text


def doc_to_messages(doc: dict, lmms_eval_specific_kwargs: dict | None = None) -> list[dict]:
    system, text = _prompt(doc, lmms_eval_specific_kwargs)
    system_turn = [{"role": "system", "content": [{"type": "text", "text": system}]}] if system else []
    return system_turn + ConfigurableMessagesTask._build_user_turn(doc_to_visual(doc), text)


def process_results(doc: dict, results: list) -> dict:
    """The judge item for this answer; the judge rates all items of the task after generation."""
    item = judge_parts_item({"": judge_request(doc, results[0])}, _RUBRIC_REFERENCE)  # judged as a whole
    return {"score": item, "judged": item, "failed": item}
