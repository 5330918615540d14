"""What a backend hands over instead of an answer when a model request fails: ``failed_request``.

lmms-eval 0.7.3's API backends never raise for a request that fails; they return a text in place of
the answer, which a task would otherwise parse, judge and score:

* ``[LMMS_EVAL_REQUEST_FAILED after N retries] <the error>``: ``openai`` (``models/chat/openai.py`` 146,
  ``models/simple/openai.py`` 377; ``litellm`` inherits both), ``async_openai`` (``models/chat/async_openai.py``
  375) and ``gemini`` (``models/chat/gemini.py`` 225, ``models/simple/gemini.py`` 483), once every attempt failed;
* ``[LMMS_EVAL_BUDGET_EXCEEDED]``: ``openai`` (chat, 243), ``gemini`` (chat, 288) and ``async_openai``
  (354) for every request after the token budget (``--max_tokens``) is spent;
* an empty text: ``claude`` (after its 5 attempts, and once the budget is spent), ``gpt4v``, ``reka``,
  ``srt_api``, ``qwen_vl_api`` and ``gpt4o_audio`` (after their attempts), ``gemini`` (the simple one once
  the budget is spent; both when no response came back);
* ``Batch failed``: ``batch_gpt4``, for every request of a batch the provider failed;
* no text at all (None): e.g. an OpenAI-compatible server whose message has no content.

Decision (docs/reliability.md): the two placeholders and a missing text are failures whatever the
backend; an empty text (and ``Batch failed``) is a failure only from the backends above, which say so
with it. From any other backend (a local model: ``egoplan_hf``, ``egoplan_server``, lmms-eval's
``vllm``, ``llava_hf``, ...) an empty generation is the model's answer: a real, bad one, scored. A
Gemini safety block (``[SAFETY_BLOCKED...]``, ``finish_reason=...``) is the provider's answer and is
scored as well. lm-eval's API backends raise once their retries are spent (the run fails), and the
empty text they put in place of a null content is the model's answer.
"""

from __future__ import annotations

from lmms_egoplan.core.secrets import mask_secrets

REQUEST_FAILED_PREFIX = "[LMMS_EVAL_REQUEST_FAILED after "
BUDGET_EXCEEDED = "[LMMS_EVAL_BUDGET_EXCEEDED]"

# lmms-eval backends (canonical --model names) -> the text each returns in place of an answer it failed to get.
FAILURE_TEXTS: dict[str, str] = {
    "claude": "", "gpt4v": "", "reka": "", "srt_api": "", "qwen_vl_api": "", "gpt4o_audio": "", "gemini": "",
    "batch_gpt4": "Batch failed",
}


def failed_request(answer: object, backend: str | None = None) -> str | None:
    """Why ``answer`` (a response as a task receives it) is no answer, or None when it is one.
    ``backend``: the run's ``--model`` (canonical name), for the backends that fail with a plain text."""
    if answer is None:
        return "the backend returned no text"
    if not isinstance(answer, str):
        return None  # a likelihood, or an answer of another kind: answered
    if answer.startswith(REQUEST_FAILED_PREFIX):
        return mask_secrets(answer.split("\n", 1)[0])  # the error of a server that may echo the request's key
    if answer.strip() == BUDGET_EXCEEDED:
        return f"{BUDGET_EXCEEDED}: the token budget of the run (--max_tokens) was spent before this request"
    if backend in FAILURE_TEXTS and answer.strip() == FAILURE_TEXTS[backend]:
        shown = f"the text {FAILURE_TEXTS[backend]!r}" if FAILURE_TEXTS[backend] else "an empty text"
        return f"--model {backend} returned {shown}, which it returns for a request that failed"
    return None


def request_failed_text(why: str, retries: int) -> str:
    """lmms-eval's failure placeholder for a request given up after ``retries`` retries, which a suite
    backend (``egoplan_server``) returns in place of an answer it did not get, so that the request is
    counted, left out and asked again as any backend's failed request is."""
    return f"{REQUEST_FAILED_PREFIX}{retries} retries] {why}"


def is_failure_placeholder(answer: object) -> bool:
    """Whether ``answer`` is one of lmms-eval's failure placeholders, whatever the backend (what must
    never be stored as a response)."""
    return isinstance(answer, str) and (answer.startswith(REQUEST_FAILED_PREFIX) or answer.strip() == BUDGET_EXCEEDED)
