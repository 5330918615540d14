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

Inside the harnesses, a judged task's adapter holds a ``lmms_egoplan.harness.judged.Judging``;
``lmms-egoplan rejudge`` uses it to re-score logged model outputs with another judge.
"""

# The module ``retirements`` and its function of that name: the function is the package's attribute (bound
# here, before any import of the module could bind the module instead).
from lmms_egoplan.judge.retirements import Retirement, retirement, retirements

# The others are imported when first asked for (PEP 562): lmms-eval loads the suite's entry point in every run,
# which needs none of them; the engine and its backends load with a judge.
_EXPORTS = {
    "JudgeBackend": "base",
    "JudgeCache": "cache", "JudgeCacheError": "cache",
    "Judge": "engine", "RetiredJudgeError": "engine", "preflight": "engine",
    "make_backend": "factory",
    "JudgeIdentity": "identity",
    "Completion": "protocol", "Decoding": "protocol", "JudgeCallError": "protocol", "Judgement": "protocol",
    "JudgeRequest": "protocol", "JudgeResults": "protocol", "RatingParser": "protocol",
    "TransientJudgeError": "protocol",
    "OpenAIChatBackend": "providers.openai_compatible",
    "TransformersBackend": "providers.transformers",
    "FixedRating": "rubrics", "ItemScore": "rubrics", "Rubric": "rubrics", "bracket_rating": "rubrics",
    "is_judge_parts_item": "rubrics", "item_parts": "rubrics", "item_requests": "rubrics", "items_rubric": "rubrics",
    "judge_parts_item": "rubrics", "load_rubric": "rubrics", "register_rubric": "rubrics",
    "register_rubrics": "rubrics",
    "score_judged": "rubrics", "unjudged": "rubrics",
    "DEFAULT_JUDGE_MODEL": "settings", "JUDGE_BACKENDS": "settings", "JudgeSettings": "settings",
    "JudgeSetupError": "settings",
}

__all__ = [
    "DEFAULT_JUDGE_MODEL", "JUDGE_BACKENDS", "Completion", "Decoding", "FixedRating", "ItemScore", "Judge",
    "JudgeBackend", "JudgeCache", "JudgeCacheError", "JudgeCallError", "JudgeIdentity", "JudgeRequest", "JudgeResults",
    "JudgeSettings",
    "JudgeSetupError", "Judgement", "OpenAIChatBackend", "RatingParser", "RetiredJudgeError", "Retirement", "Rubric",
    "TransformersBackend", "TransientJudgeError", "bracket_rating", "is_judge_parts_item", "item_parts",
    "item_requests", "items_rubric", "judge_parts_item", "load_rubric", "make_backend", "preflight",
    "register_rubric", "register_rubrics", "retirement", "retirements", "score_judged", "unjudged",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
