"""Chat completions through the official ``openai`` client: OpenAI, Azure OpenAI, vLLM, SGLang, ..."""

from __future__ import annotations

import functools
import json
import os
from typing import Mapping, Sequence

from lmms_egoplan.core.retry import retry_after
from lmms_egoplan.core.secrets import mask_secrets
from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.protocol import (
    Completion,
    Decoding,
    JudgeCallError,
    JudgeUnreachableError,
    TransientJudgeError,
)
from lmms_egoplan.judge.retirements import says_model_is_gone

# Reasoning models take max_completion_tokens and reject a temperature other than the default.
REASONING_MODEL_PREFIXES = ("gpt-5", "o1", "o3", "o4")


def sampling_kwargs(model: str, decoding: Decoding) -> dict:
    """The token limit and temperature of a request, by lmms-eval's rule
    (``lmms_eval.llm_judge.providers.openai.build_sampling_kwargs``; a test keeps them equal)."""
    if model.startswith(REASONING_MODEL_PREFIXES):
        return {"max_completion_tokens": decoding.max_tokens}
    return {"max_tokens": decoding.max_tokens, "temperature": decoding.temperature}


class OpenAIChatBackend(JudgeBackend):
    """Any OpenAI-compatible chat-completions endpoint; Azure OpenAI given ``azure_api_version``."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 azure_api_version: str | None = None, timeout: float = 120.0,
                 environ: Mapping[str, str] = os.environ):
        import openai

        self.model = model
        self.kind = "azure" if azure_api_version else "openai"
        # Local servers without authentication still need a non-empty key for the client.
        api_key = environ[api_key_env] if api_key_env else "EMPTY"
        self._secrets = (api_key,)  # masked in every error text (a server may echo the key)
        # Retries are the engine's (exponential backoff, counted, and only for transient errors).
        if azure_api_version:
            self._client = openai.AzureOpenAI(api_key=api_key, azure_endpoint=base_url, api_version=azure_api_version,
                                              timeout=timeout, max_retries=0)
        else:
            self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        import openai

        masked = functools.partial(mask_secrets, known=self._secrets)
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=list(messages), **sampling_kwargs(self.model, decoding))
        except openai.APIStatusError as error:
            message = masked(f"HTTP {error.status_code}: {_error_message(error)}{self._route_hint(error)}")
            if error.status_code in (408, 409, 429) or error.status_code >= 500:
                headers = getattr(getattr(error, "response", None), "headers", None)
                raise TransientJudgeError(message, retry_after(headers)) from None
            raise JudgeCallError(message, error.status_code, _error_code(error)) from None
        except openai.APITimeoutError:
            raise JudgeUnreachableError("timed out") from None
        except openai.APIConnectionError as error:
            raise JudgeUnreachableError(masked(f"connection failed: {error.__cause__ or error}")) from None
        except openai.APIResponseValidationError as error:
            raise TransientJudgeError(masked(f"malformed response body: {error}")) from None
        except openai.APIError as error:
            raise JudgeCallError(masked(f"{type(error).__name__}: {error}")) from None
        except json.JSONDecodeError as error:  # a JSON body cut short (the client parses it unguarded)
            raise TransientJudgeError(masked(f"malformed response body (cut JSON: {error})")) from None
        # A proxy in trouble can answer 200 with an HTML page or a truncated body: retried like a 5xx.
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise TransientJudgeError(masked(f"malformed response body (no choices): {str(response)[:120]!r}"))
        return Completion(text=choices[0].message.content or "", model=response.model or self.model,
                          fingerprint=getattr(response, "system_fingerprint", None))

    def _route_hint(self, error) -> str:
        """For a 404 that names no model: the request's URL, which the server does not serve (a base URL without
        /v1 is the usual slip; the reply alone, "Error code: 404", names neither)."""
        if error.status_code != 404 or says_model_is_gone(404, _error_code(error), _error_message(error)):
            return ""
        request = error.request
        usual = ("" if self.kind == "azure" or "/v1/" in request.url.path else
                 "; an OpenAI-compatible server's routes are under /v1: a base URL such as http://localhost:8000/v1")
        return f" ({request.method} {request.url}: no such route on this server{usual})"


def _error_code(error) -> str | None:
    """The ``code`` of an OpenAI-style error body (``{"error": {"code": "model_not_found", ...}}``)."""
    body = getattr(error, "body", None)
    body = body.get("error", body) if isinstance(body, dict) else None
    code = body.get("code") if isinstance(body, dict) else None
    return str(code) if code else getattr(error, "code", None)


def _error_message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        body = body.get("error", body)
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])
    return str(getattr(error, "message", error))


