"""Secrets kept out of what the suite writes and prints: ``mask_secrets`` replaces anything shaped like
an API key or an ``Authorization`` value, and the keys a caller names, by ``***``.

Where a provider's error text reaches a file or the console (a judge's error in its audit trail and
warnings, an inference server's error in egoplan_server's, the command a run prints), it passes through
here first: a server or proxy that answers 401 echoing the request's ``Authorization`` header, or an
error that quotes a key, must not put the key on disk. Shapes masked: OpenAI / Anthropic keys
(``sk-...``), Hugging Face tokens (``hf_...``), Google API keys (``AIza...``), ``Bearer <token>``,
the value of an ``Authorization`` / ``api-key`` / ``x-api-key`` header (as ``name: value`` or JSON),
and ``<...api_key|token|secret|password>=<value>`` assignments (``--model_args api_key=...``).
"""

from __future__ import annotations

import re
from typing import Iterable

MASK = "***"

# A configured key shorter than this is no secret worth a search (e.g. "EMPTY" or "unused" stand in
# for local servers that take none) and would mask ordinary words.
SHORTEST_KNOWN_SECRET = 8

_SHAPES = (
    # The value of a header that carries a credential, as "name: value" or a JSON / dict entry.
    re.compile(r"(?i)(\b(?:proxy-)?authorization|\bx?-?api-key|\bapi_key)(\"?'?\s*[:=]\s*[\"']?)"
               r"((?:bearer|basic)\s+)?[^\s\"',;})\]<>]+"),
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"(?i)(^|[^\w-])(sk-[A-Za-z0-9_-]{8,})"),
    re.compile(r"(^|[^\w-])(hf_[A-Za-z0-9]{20,})"),
    re.compile(r"(^|[^\w-])(AIza[0-9A-Za-z_-]{30,})"),
    re.compile(r"(?i)(^|[,\s?&<>])(\w*(?:api_key|token|secret|password))=([^,\s&\"')\]<>]+)"),
)


def mask_secrets(text: str, known: Iterable[str | None] = ()) -> str:
    """``text`` with every secret-shaped value and every one of the ``known`` secrets (e.g. the key a
    client was configured with) replaced by ``***``; what surrounds them is kept, so the error still
    says what went wrong."""
    if not isinstance(text, str) or not text:
        return text
    text = mask_known_secrets(text, known)
    header, scheme, openai_key, hf_token, google_key, assignment = _SHAPES
    text = header.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3) or ''}{MASK}", text)
    text = scheme.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)
    for shape in (openai_key, hf_token, google_key):
        text = shape.sub(lambda m: f"{m.group(1)}{MASK}", text)
    return assignment.sub(lambda m: f"{m.group(1)}{m.group(2)}={MASK}", text)


def mask_known_secrets(text: str, known: Iterable[str | None]) -> str:
    """``text`` with each of the ``known`` secrets (those long enough to be one) replaced by ``***``, and
    nothing else: for a model's answer, in which a key-shaped word is the model's and stays."""
    for secret in sorted({s for s in known if isinstance(s, str) and len(s) >= SHORTEST_KNOWN_SECRET}, key=len,
                         reverse=True):
        text = text.replace(secret, MASK)
    return text
