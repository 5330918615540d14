"""The judge settings every judged benchmark shares, and their check."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings import setting, value_problems

JUDGE_BACKENDS = ("openai", "azure", "hf")

# The suite's default judge: open weights, served locally by any OpenAI-compatible server (docs/judges.md:
# `vllm serve` / SGLang), so that it can be run as long as its weights can be had. One server serves
# every judged benchmark.
DEFAULT_JUDGE_MODEL = "Qwen/Qwen3-30B-A3B-Instruct-2507"
DEFAULT_JUDGE_BASE_URL = "http://localhost:8000/v1"
# The Hub revision (commit) of open-weights judges that the suite's rubrics were checked with: the
# revision recorded for such a judge when judge_revision is not set (docs/judges.md: pinning a judge).
PINNED_REVISIONS = {DEFAULT_JUDGE_MODEL: "0d7cf23991f47feeb3a57ecb4c9cee8ea4a17bfe"}


# What each judge setting does, in a sentence (the ``--judge_*`` options' help; docs/judges.md says more).
SETTING_HELP = {
    "judge_backend": "how the judge is called: openai (any OpenAI-compatible server), azure (Azure OpenAI) or hf "
                     "(transformers, in this process)",
    "judge_model": "the judge: the model name a server serves (openai), the deployment (azure), or a Hub id or "
                   "folder (hf)",
    "judge_revision": "the judge model's Hub revision (commit), which the hf judge loads and the results record; none: "
                      "the revision the suite pins for the model, if any",
    "judge_base_url": "the judge server's URL (openai; none: OpenAI's own API) or the Azure endpoint",
    "judge_api_key_env": "the NAME of the environment variable that holds the judge's API key (never the key "
                         "itself); empty: no key, as for a local server",
    "judge_api_version": "the Azure OpenAI API version (azure only)",
    "judge_temperature": "the judge's sampling temperature",
    "judge_max_tokens": "the most tokens of one judge reply",
    "judge_concurrency": "judge calls in flight at once (hf: the generation batch size)",
    "judge_timeout": "seconds one judge call may take",
    "judge_retries": "retries after a failed call (HTTP 429 or 5xx, or a timeout, only)",
    "judge_backoff": "seconds before the first retry; doubles with each retry",
    "judge_cache_dir": "the folder of the judge's answer cache, from which a judgement asked again is read; none: "
                       "no cache",
    "judge_preflight": "true: one short test request first, so that a judge that cannot answer stops the command at "
                       "once",
    "judge_failed_exit_status": "the exit status when some judgements failed (they are left out of the scores); 0 "
                                "accepts that",
}


def judge_setting(default: Any, **limits: Any) -> Any:
    """A judge setting (``core.settings.setting``): the model's answers never depend on it, as the judge reads them
    once they are made."""
    return setting(default, changes_answers=False, **limits)


class JudgeSetupError(InputError):
    """The judge settings cannot work (unknown backend, missing key variable, ...)."""


@dataclass(frozen=True)
class JudgeSettings:
    """Judge settings, shared by every judged benchmark.

    A benchmark's Settings dataclass inherits these fields, so inside lmms-eval they come from
    the task YAML's ``metadata`` and environment variables ``<BENCH>_JUDGE_MODEL`` etc.
    (see ``lmms_egoplan.core.settings.resolve_settings``). A benchmark may redeclare a field to
    change its default.
    """

    # "openai" (any OpenAI-compatible server), "azure" or "hf"
    judge_backend: str = judge_setting("openai", choices=JUDGE_BACKENDS)
    # API model / Azure deployment / HF model path or id
    judge_model: str = judge_setting(DEFAULT_JUDGE_MODEL, non_empty=True)
    # The model's Hub revision: the hf judge loads it; a server is started with it (`vllm serve --revision`)
    # and the runs record it. Unset: the revision pinned for the model (PINNED_REVISIONS), if any.
    judge_revision: Optional[str] = judge_setting(None)
    judge_base_url: Optional[str] = judge_setting(DEFAULT_JUDGE_BASE_URL)  # none: OpenAI's; Azure: the endpoint
    judge_api_key_env: str = judge_setting("")  # NAME of the variable holding the key ("" = no key: a local server)
    judge_api_version: str = judge_setting("2024-10-21")  # Azure OpenAI only
    judge_temperature: float = judge_setting(0.0, minimum=0)
    judge_max_tokens: int = judge_setting(2048, minimum=1)
    judge_concurrency: int = judge_setting(16, minimum=1)  # calls in flight (hf: generation batch size)
    judge_timeout: float = judge_setting(120.0, above=0)  # seconds per call
    judge_retries: int = judge_setting(6, minimum=0)  # retries after the first attempt (429 / 5xx / timeouts only)
    judge_backoff: float = judge_setting(1.0, minimum=0)  # seconds before the first retry; doubles with each retry
    judge_cache_dir: Optional[Path] = judge_setting(Path("~/.cache/lmms_egoplan/judge"))  # none = no cache
    # A judged task sends one short request when it loads, so that a judge that cannot answer stops
    # the run before generation; false to generate now and judge later (``lmms-egoplan rejudge``).
    judge_preflight: bool = judge_setting(True)
    # The exit status of a run (or ``rejudge``) whose judgements did not all succeed, once its results
    # are written: distinct from 1 (the run failed); 0 to accept such runs.
    judge_failed_exit_status: int = judge_setting(3, minimum=0, maximum=255)

    def __post_init__(self):
        if self.judge_revision is None and self.judge_model in PINNED_REVISIONS:
            object.__setattr__(self, "judge_revision", PINNED_REVISIONS[self.judge_model])

    @classmethod
    def of(cls, settings: Any) -> "JudgeSettings":
        """The judge part of a benchmark's settings (an instance of a subclass)."""
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})

    def check(self, environ: Mapping[str, str] = os.environ, *, name: Callable[[str], str] = str) -> None:
        """Fail before anything is generated if these settings cannot judge. ``name`` says how the
        user sets a field (inside lmms-eval: its environment variable; default: the field name)."""
        if problems := value_problems(self, name):
            raise JudgeSetupError("; ".join(problems))
        if (self.judge_backend in ("openai", "azure") and self.judge_api_key_env
                and self.judge_api_key_env not in environ):
            raise JudgeSetupError(
                f"the judge's API key variable {self.judge_api_key_env} is not set: export it, or name another "
                f"variable with {name('judge_api_key_env')} (set it to an empty value for a server without "
                f"authentication)")
        if self.judge_backend == "azure" and not self.judge_base_url:
            raise JudgeSetupError(f"{name('judge_backend')} azure needs {name('judge_base_url')}, the Azure OpenAI "
                                  f"endpoint")
