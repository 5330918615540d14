"""The backend that judge settings name (``judge_backend``: openai, azure or hf)."""

from __future__ import annotations

import os
from typing import Mapping

from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.providers.transformers import TransformersBackend
from lmms_egoplan.judge.settings import JudgeSettings


def make_backend(settings: JudgeSettings, environ: Mapping[str, str] = os.environ) -> JudgeBackend:
    settings.check(environ)
    if settings.judge_backend == "hf":
        return TransformersBackend(settings.judge_model, revision=settings.judge_revision,
                                   batch_size=settings.judge_concurrency)
    return OpenAIChatBackend(
        settings.judge_model, base_url=settings.judge_base_url, api_key_env=settings.judge_api_key_env,
        azure_api_version=settings.judge_api_version if settings.judge_backend == "azure" else None,
        timeout=settings.judge_timeout, environ=environ)
