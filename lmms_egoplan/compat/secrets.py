"""lmms-eval workarounds that keep the evaluated model's API key (``--model_args api_key=...``) and the
run's other secrets out of what a run writes and prints: the response cache's model fingerprint and the
summary line (both by lmms-eval's own rule for what is secret, which already keeps the key out of the
results file; in the fingerprint a secret's value becomes a digest of it), and the error texts of failed
requests in log lines, the samples file and the cache's audit log.
Guards and the switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Mapping

from lmms_egoplan.compat import affected_release, switched_off
from lmms_egoplan.compat.replacements import add_layer, has_layer, note_in_place, uses_the_suite
from lmms_egoplan.core.failed_requests import is_failure_placeholder
from lmms_egoplan.core.secrets import SHORTEST_KNOWN_SECRET, mask_known_secrets, mask_secrets


def keep_api_keys_out_of_the_response_cache() -> bool:
    """Fingerprint the evaluated model for ``--use_cache`` without its API key.

    Bug: ``lmms_eval/caching/response_cache.py:ResponseCache.create`` fingerprints the model as
    ``<model>|<model_args as JSON>`` and writes that fingerprint into the ``meta`` table
    (``model_fingerprint``) of every rank's database and of the merged ``cache.db``: a run with
    ``--model_args api_key=sk-...`` leaves the key in plain text in its cache folder, which is kept,
    copied and shared. Fix: ``create`` gets the model_args with the value of each secret (by lmms-eval's
    own rule, which also matches names such as ``image_token``) replaced by a digest of it: no key in the
    cache folder, and every argument, a prompt-changing ``image_token`` as much as the key, still tells
    caches apart. A cache written with the key in its fingerprint is not read again (its request keys
    differ). Returns whether the workaround is in place.
    Retired by docs/upstream/15-api-key-redacted.patch.
    """
    from lmms_eval import evaluator
    from lmms_eval.utils import simple_parse_args_string

    is_secret = getattr(evaluator, "_is_sensitive_config_key", None)
    if switched_off(_CACHE_FINGERPRINT):
        return False
    if has_layer(_CACHE_FINGERPRINT, *_CREATE):
        return True
    if not (affected_release() and is_secret is not None):
        return False

    def create_without_secrets(create, cls, cache_root: str, **kwargs):
        model_args = kwargs.get("model_args")
        if isinstance(model_args, str):
            try:  # parsed as create parses it: the fingerprint of a run without secrets is unchanged
                model_args = simple_parse_args_string(model_args)
            except Exception:
                model_args = None
        if isinstance(model_args, dict):
            kwargs["model_args"] = {name: secret_digest(value) if is_secret(name) else value
                                    for name, value in model_args.items()}
        return create(cls, cache_root, **kwargs)

    add_layer(_CACHE_FINGERPRINT, *_CREATE, create_without_secrets)
    return True


_CACHE_FINGERPRINT = "secrets.keep_api_keys_out_of_the_response_cache"
_CREATE = ("lmms_eval.caching.response_cache", "ResponseCache.create")


def secret_digest(value: Any) -> str:
    """What stands for a secret's value in the response cache's model fingerprint: a digest, which tells values
    apart and cannot be read back (API keys are long random strings)."""
    return "sha256:" + hashlib.sha256(str(value).encode("utf-8")).hexdigest()[:16]


def keep_api_keys_out_of_the_run_summary() -> bool:
    """Print the run's summary line without the evaluated model's API key.

    Bug: ``lmms_eval/__main__.py:cli_evaluate`` prints ``<model> (<model_args>), gen_kwargs: ...`` above
    the results table, the model_args as given: ``--model_args api_key=sk-...`` puts the key on the
    console and into every log that captures it. Fix: once ``simple_evaluate`` has built the model
    (the one use of the key), the run's ``cli_args.model_args`` are redacted by lmms-eval's own rule, so
    the line reads ``api_key=[REDACTED]``. Switched on once a run that uses the suite names its tasks
    (before ``simple_evaluate`` starts). Returns whether the workaround is in place.
    Retired by docs/upstream/15-api-key-redacted.patch.
    """
    import inspect

    from lmms_eval import evaluator

    redact = _lmms_evals_redaction()
    if switched_off(_RUN_SUMMARY):
        return False
    if has_layer(_RUN_SUMMARY, *_SIMPLE_EVALUATE):
        return True
    if not (affected_release() and redact is not None):
        return False
    signature = inspect.signature(evaluator.simple_evaluate)

    def redact_once_evaluated(simple_evaluate, *args, **kwargs):
        cli_args = signature.bind(*args, **kwargs).arguments.get("cli_args")
        try:
            return simple_evaluate(*args, **kwargs)
        finally:
            if isinstance(getattr(cli_args, "model_args", None), (str, dict)):
                cli_args.model_args = redact(cli_args.model_args)

    add_layer(_RUN_SUMMARY, *_SIMPLE_EVALUATE, redact_once_evaluated)
    return True


_RUN_SUMMARY = "secrets.keep_api_keys_out_of_the_run_summary"
_SIMPLE_EVALUATE = ("lmms_eval.evaluator", "simple_evaluate")


def _lmms_evals_redaction() -> Callable[[Any], Any] | None:
    """lmms-eval's own redaction of secrets in a run's configuration (None where a release lacks it)."""
    from lmms_eval import evaluator

    return getattr(evaluator, "_redact_eval_config_secrets", None)


def keep_secrets_out_of_lmms_evals_error_texts() -> bool:
    """Mask the run's secrets in the error texts lmms-eval logs and keeps.

    Bug: lmms-eval's API backends log every failed attempt with its error's text (``Attempt 1/5 failed
    with error: ...``, ``lmms_eval/models/chat/openai.py`` 138-140, the simple one and gemini alike) and,
    once they give up, return that text as the answer (``[LMMS_EVAL_REQUEST_FAILED after N retries]
    <error>``), which the samples file (``resps``, ``filtered_resps``) and the response cache's audit log
    (``ResponseCache._log_to_audit``) keep: a server or proxy that answers 401 echoing the request's
    ``Authorization`` header, or an error that quotes the key, puts the key on the console and on disk.
    Fix: every log line of a run that uses the suite (``replacements.uses_the_suite``), the failure texts written
    into the samples file and the responses written into the cache's audit log pass through
    ``core.secrets.mask_secrets``, with the run's own secrets (``run_secrets``: the values of ``*_API_KEY`` /
    ``*_TOKEN`` environment variables, and the ``api_key`` of the ``model_args`` once ``simple_evaluate`` is called)
    masked wherever they appear. Answers that hold no secret are written as they are.
    Returns whether the workaround is in place.
    Retired by docs/upstream/18-secrets-in-error-texts.patch.
    """
    from loguru import logger

    if has_layer(_ERROR_TEXTS, _RESPONSE_CACHE, "ResponseCache._log_to_audit"):
        return True
    if switched_off(_ERROR_TEXTS) or not affected_release():
        return False
    global _masked_in_the_log
    _masked_in_the_log = masked = _MaskedSecrets(run_secrets(), _configured_patcher(logger))
    logger.configure(patcher=masked.mask_record)  # replaces the process's patcher: the one configured runs first

    def log_masked_to_audit(log_to_audit, self, request_type, task_name, doc_id, idx, gen_kwargs, response, **kwargs):
        return log_to_audit(self, request_type, task_name, doc_id, idx, gen_kwargs,
                            masked_response(response, masked.secrets), **kwargs)

    def save_masked_samples(save_samples, self, task_name, samples):
        # the failure texts of lmms-eval's API backends
        save_samples(self, task_name, masked_response(samples, masked.secrets))

    add_layer(_ERROR_TEXTS, _RESPONSE_CACHE, "ResponseCache._log_to_audit", log_masked_to_audit)
    add_layer(_ERROR_TEXTS, "lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples",
              save_masked_samples)
    note_in_place(_ERROR_TEXTS)  # the log's patcher too
    return True


def mask_the_model_args_key_too() -> None:
    """Once ``keep_secrets_out_of_lmms_evals_error_texts`` is in place: the ``api_key`` of the run's ``model_args``
    among the secrets it masks, from the moment ``simple_evaluate`` is called (put on once lmms-eval has finished
    importing its evaluator, which it is still importing when it loads the suite's entry point)."""
    if has_layer(_ERROR_TEXTS, *_SIMPLE_EVALUATE) or not has_layer(_ERROR_TEXTS, _RESPONSE_CACHE,
                                                                    "ResponseCache._log_to_audit"):
        return
    masked = _masked_in_the_log

    def learn_the_model_args_key(simple_evaluate, *args, **kwargs):
        masked.secrets = run_secrets(kwargs.get("model_args"))  # this call's run's
        return simple_evaluate(*args, **kwargs)

    add_layer(_ERROR_TEXTS, *_SIMPLE_EVALUATE, learn_the_model_args_key)


class _MaskedSecrets:
    """The secrets masked in lmms-eval's log: the run's, learnt again by each ``simple_evaluate`` call; ``previous``:
    the patcher configured before (the user's or another library's), which runs first."""

    def __init__(self, secrets: tuple[str, ...], previous: Callable[[dict], None] | None = None):
        self.secrets = secrets
        self.previous = previous

    def mask_record(self, record: dict) -> None:
        if self.previous is not None:
            self.previous(record)
        if uses_the_suite():  # the patcher stays for the process's later runs, which may not use the suite
            record["message"] = mask_secrets(record["message"], self.secrets)


def _configured_patcher(logger: Any) -> Callable[[dict], None] | None:
    """The patcher configured on loguru's logger (``logger.configure(patcher=...)``) before the suite's, the suite's
    own left out: loguru has no public way to read it, and its ``configure`` replaces it."""
    patcher = getattr(getattr(logger, "_core", None), "patcher", None)
    owner = getattr(patcher, "__self__", None)
    return owner.previous if isinstance(owner, _MaskedSecrets) else patcher


# loguru's logger is one per process, and so is the patcher that masks its lines: what it masks is held beside it
_masked_in_the_log: _MaskedSecrets | None = None
_ERROR_TEXTS = "secrets.keep_secrets_out_of_lmms_evals_error_texts"
_RESPONSE_CACHE = "lmms_eval.caching.response_cache"


def masked_response(value: Any, secrets: tuple[str, ...]) -> Any:
    """``value`` (a response, a logged sample) with the run's ``secrets`` masked in every string, at any depth,
    and every failure text (an error's, never a model's answer) masked of whatever has a secret's shape."""
    if isinstance(value, str):
        masked = mask_secrets if is_failure_placeholder(value) else mask_known_secrets
        return masked(value, secrets)
    if isinstance(value, dict):
        return {key: masked_response(item, secrets) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(masked_response(item, secrets) for item in value)
    return value


def run_secrets(model_args: Any = None, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """This run's secrets: the ``api_key`` of its ``model_args`` (lmms-eval's ``key=value,...`` string, or a mapping)
    and the values of environment variables whose names end in ``API_KEY``, ``_TOKEN`` or ``_SECRET``."""
    if isinstance(model_args, str):
        model_args = dict(pair.partition("=")[::2] for pair in model_args.split(","))
    given = [str(value) for key, value in (model_args or {}).items() if str(key).strip() == "api_key"]
    named = [value for name, value in environ.items() if name.upper().endswith(("API_KEY", "_TOKEN", "_SECRET"))]
    return tuple(secret for secret in {*given, *named} if len(secret) >= SHORTEST_KNOWN_SECRET)
