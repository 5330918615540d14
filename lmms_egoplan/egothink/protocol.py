"""EgoThink's settings and its judge (Table 7), free of any harness: what ``lmms_egoplan.egothink.benchmark``
holds and ``task`` uses. The protocol itself is told in ``task``'s docstring."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lmms_egoplan.core.media import IMAGES_DECODED_AT_LOAD
from lmms_egoplan.core.settings import setting
from lmms_egoplan.egothink.data import CAPABILITIES
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.rubrics import Rubric, bracket_rating
from lmms_egoplan.judge.settings import JudgeSettings

# How answers are decoded: ``greedy`` keeps the YAML's generation_kwargs (the default: a run is
# repeatable); the others are the sampling of the official inference scripts (AdaCheng/EgoThink
# ``models/test_llava2.py`` as of 1c86253: temperature 0.2, top_p unset, where its first release a3074e2
# sampled at 0.001, near greedy; ``models/test_pandagpt.py``: temperature 0.1, top_p 0.01), put over the
# YAML's. Token limits are the YAML's either way (the scripts' too).
DECODING_PRESETS: dict[str, dict] = {
    "greedy": {},
    "official_llava": {"do_sample": True, "temperature": 0.2, "num_beams": 1},
    "official_pandagpt": {"do_sample": True, "temperature": 0.1, "top_p": 0.01},
}


@dataclass(frozen=True)
class EgoThinkSettings(JudgeSettings):
    source: str = "hub"  # "hub" (Hugging Face dataset) or "local" (release layout under data_root)
    # the release's data folder (holds Activity/, Object/, ...)
    data_root: Optional[Path] = setting(None, changes_answers=False)
    hub_repo: str = "EgoThink/EgoThink"
    hub_revision: Optional[str] = None
    # Hub images are written here as files
    image_cache: Path = setting(Path("~/.cache/lmms_egoplan/egothink"), changes_answers=False)
    prompt_preset: Optional[str] = None  # force an inference-prompt preset (default: by --model)
    decoding: str = setting("greedy", choices=tuple(DECODING_PRESETS))  # how answers are decoded
    # Images decoded in full before the model loads, spread over the data (every one's first and
    # last bytes are checked): core.media.image_problems
    images_decoded_at_load: int = setting(IMAGES_DECODED_AT_LOAD, minimum=0, changes_answers=False)
    # Read images that a record's image_path places outside data_root (through a symlink out of it).
    allow_paths_outside_root: bool = setting(False, changes_answers=False)


# --- The judge (Table 7) ---------------------------------------------------------------------

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

# Scores are mean ratings x 100; a rating other than 0, 0.5 or 1 is no valid rating. Version 2: a thinking judge's
# reasoning blocks left out before the rating is read (1: read with them).
RATINGS = (0, 0.5, 1)
RUBRIC = Rubric(bracket_rating(allowed=RATINGS), scale=100.0, levels=RATINGS,
                prompt=f"{JUDGE_SYSTEM_PROMPT}\n\n{JUDGE_PROMPT}", version="2",
                answer_pattern=r"\[The Start of Assistant's Answer\]\n(?P<answer>.*)"
                               r"\n\[The End of Assistant's Answer\]$")
RUBRIC_NAME = "egothink"  # the name its judged items (and logs) carry (lmms_egoplan.catalogue)


def judge_request(doc: dict, prediction: str) -> JudgeRequest:
    """Table 7's grading prompt for one answer."""
    prompt = JUDGE_PROMPT.format(question=doc["question"], reference=doc["answer"], answer=prediction)
    return JudgeRequest.from_prompt(doc["id"], prompt, system=JUDGE_SYSTEM_PROMPT)


def group_scores(task_scores: dict[str, dict]) -> dict[str, dict]:
    """The groups' scores as the run reports them (``tasks/egothink/_group_yaml``), from the
    dimensions' (``rejudge``): each capability and ``ego_think`` the unweighted mean of their
    dimensions' scores (the paper's Average: over the 12 dimensions), ``micro_score`` their mean weighted by their
    questions (where the samples logged it), judged / failed totals. Only groups whose dimensions are all present."""
    capabilities = {f"ego_think_capability_{capability}": [f"ego_think_{name}" for name in names]
                    for capability, names in CAPABILITIES.items()}
    members = {"ego_think": [task for tasks in capabilities.values() for task in tasks], **capabilities}
    groups = {}
    for group, tasks in members.items():
        if all(task in task_scores for task in tasks):
            rows = [task_scores[task] for task in tasks]
            groups[group] = {"score": sum(row["score"] for row in rows) / len(rows),
                             "judged": sum(row["judged"] for row in rows), "failed": sum(row["failed"] for row in rows)}
            if all("micro_score" in row for row in rows):
                sizes = [_questions(row) for row in rows]
                groups[group]["micro_score"] = sum(row["micro_score"] * n for row, n in zip(rows, sizes)) / sum(sizes)
    return groups


def _questions(row: dict) -> int:
    """A rejudged dimension's questions, as lmms-eval sizes a group's member: every sample it logged (judged, failed,
    its request failed, its row unusable)."""
    return row["judged"] + row["failed"] + row.get("failed_requests", 0) + row.get("unusable_rows", 0)
