"""The LLM judge: many judgements at once, cached, retried, counted, audited.

A benchmark asks a judge model to rate model outputs. It builds one ``JudgeRequest`` per output
(an id and chat messages) and reads the answers with its registered ``Rubric`` (a rating parser
and a score scale); ``Judge.run`` answers from the cache what it can, sends the rest concurrently
with retries, and returns one ``Judgement`` per request (failed ones counted, never averaged in),
writing an audit trail. API keys are read from the environment variable *named* in the settings;
they never reach the cache, the audit trail or a log line.

Modules, in the shape of lmms-eval's ``lmms_eval/llm_judge`` (none of them imports lmms-eval or a
benchmark):

* ``protocol``: the data that crosses boundaries (requests, decoding, completions, judgements, errors);
* ``settings``: ``JudgeSettings``, which every judged benchmark's settings inherit, and their check;
* ``base``: what a backend implements; ``providers``: any OpenAI-compatible server (OpenAI, Azure
  OpenAI, vLLM, SGLang) and an in-process transformers model; ``factory``: the backend settings name;
* ``cache``: the SQLite cache of answers; ``engine``: ``Judge``;
* ``rubrics``: rubrics registered by name, the judged items tasks log, and their scores;
* ``identity``: ``JudgeIdentity``, what judged a run, whole (model, revision, snapshot, prompt, rubric);
* ``retirements``: the judge models their provider shut down or will (package data), and what to say;
* ``agreement``: how far two judges' ratings of the same answers agree (weighted kappa, intervals).

Inside lmms-eval, tasks use the judge through ``lmms_egoplan.harness.judged.JudgedTask``;
``lmms-egoplan rejudge`` uses it to re-score logged model outputs with another judge.
"""

from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.cache import JudgeCache, JudgeCacheError
from lmms_egoplan.judge.engine import Judge, RetiredJudgeError, preflight
from lmms_egoplan.judge.factory import make_backend
from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.judge.protocol import (
    Completion,
    Decoding,
    JudgeCallError,
    Judgement,
    JudgeRequest,
    JudgeResults,
    RatingParser,
    TransientJudgeError,
)
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.providers.transformers import TransformersBackend
from lmms_egoplan.judge.retirements import Retirement, retirement, retirements
from lmms_egoplan.judge.rubrics import (
    FixedRating,
    ItemScore,
    Rubric,
    bracket_rating,
    is_judge_parts_item,
    item_parts,
    item_requests,
    items_rubric,
    judge_parts_item,
    load_rubric,
    register_rubric,
    score_judged,
    unjudged,
)
from lmms_egoplan.judge.settings import DEFAULT_JUDGE_MODEL, JUDGE_BACKENDS, JudgeSettings, JudgeSetupError

__all__ = [
    "DEFAULT_JUDGE_MODEL", "JUDGE_BACKENDS", "Completion", "Decoding", "FixedRating", "ItemScore", "Judge",
    "JudgeBackend", "JudgeCache", "JudgeCacheError", "JudgeCallError", "JudgeIdentity", "JudgeRequest", "JudgeResults", "JudgeSettings",
    "JudgeSetupError", "Judgement", "OpenAIChatBackend", "RatingParser", "RetiredJudgeError", "Retirement", "Rubric",
    "TransformersBackend", "TransientJudgeError", "bracket_rating", "is_judge_parts_item", "item_parts",
    "item_requests", "items_rubric", "judge_parts_item", "load_rubric", "make_backend", "preflight",
    "register_rubric", "retirement", "retirements", "score_judged", "unjudged",
]
