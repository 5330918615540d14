"""lmms-eval workarounds that keep the evaluated model's API key (``--model_args api_key=...``) out of
what a run writes and prints: the response cache's model fingerprint and the summary line. Both use
lmms-eval's own rule for what is secret (``lmms_eval.evaluator._redact_eval_config_secrets``, which
already keeps the key out of the results file). Guards and the switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

from typing import Any, Callable

from lmms_egoplan.compat import affected_release, lmms_eval_source, switched_off
from lmms_egoplan.compat.replacements import add_layer, has_layer


def keep_api_keys_out_of_the_response_cache() -> bool:
    """Fingerprint the evaluated model for ``--use_cache`` without its API key.

    Bug: ``lmms_eval/caching/response_cache.py:ResponseCache.create`` fingerprints the model as
    ``<model>|<model_args as JSON>`` and writes that fingerprint into the ``meta`` table
    (``model_fingerprint``) of every rank's database and of the merged ``cache.db``: a run with
    ``--model_args api_key=sk-...`` leaves the key in plain text in its cache folder, which is kept,
    copied and shared. Fix: ``create`` gets the model_args with their secrets redacted by lmms-eval's
    own rule (``api_key=[REDACTED]``). A key changes no response: runs with another key of the same
    model share the cache, and a cache written with the key in its fingerprint is not read again (its
    request keys differ). Returns whether the workaround is in place.
    """
    redact = _lmms_evals_redaction()
    if switched_off(_CACHE_FINGERPRINT):
        return False
    if has_layer(_CACHE_FINGERPRINT, *_CREATE):
        return True
    if not (affected_release() and redact is not None and _fingerprints_the_model_args_as_given()):
        return False

    def create_without_secrets(create, cls, cache_root: str, **kwargs):
        if isinstance(kwargs.get("model_args"), (str, dict)):
            kwargs["model_args"] = redact(kwargs["model_args"])
        return create(cls, cache_root, **kwargs)

    add_layer(_CACHE_FINGERPRINT, *_CREATE, create_without_secrets)
    return True

_CACHE_FINGERPRINT = "secrets.keep_api_keys_out_of_the_response_cache"
_CREATE = ("lmms_eval.caching.response_cache", "ResponseCache.create")


def _fingerprints_the_model_args_as_given(create: str | None = None) -> bool:
    create = create or lmms_eval_source("lmms_eval.caching.response_cache", "ResponseCache.create")
    return 'model_fp = f"{model}|{model_args_fp}"' in create and "_redact" not in create


def keep_api_keys_out_of_the_run_summary() -> bool:
    """Print the run's summary line without the evaluated model's API key.

    Bug: ``lmms_eval/__main__.py:cli_evaluate`` prints ``<model> (<model_args>), gen_kwargs: ...`` above
    the results table, the model_args as given: ``--model_args api_key=sk-...`` puts the key on the
    console and into every log that captures it. Fix: once ``simple_evaluate`` has built the model
    (the one use of the key), the run's ``cli_args.model_args`` are redacted by lmms-eval's own rule, so
    the line reads ``api_key=[REDACTED]``. Switched on once a run that uses the suite names its tasks
    (before ``simple_evaluate`` starts). Returns whether the workaround is in place.
    """
    import inspect

    from lmms_eval import evaluator

    redact = _lmms_evals_redaction()
    if switched_off(_RUN_SUMMARY):
        return False
    if has_layer(_RUN_SUMMARY, *_SIMPLE_EVALUATE):
        return True
    if not (affected_release() and redact is not None and _prints_the_model_args_as_given()):
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


def _prints_the_model_args_as_given(cli_evaluate: str | None = None) -> bool:
    cli_evaluate = cli_evaluate or lmms_eval_source("lmms_eval.__main__", "cli_evaluate")
    return 'print(f"{args.model} ({args.model_args})' in cli_evaluate and "_redact" not in cli_evaluate


def _lmms_evals_redaction() -> Callable[[Any], Any] | None:
    """lmms-eval's own redaction of secrets in a run's configuration (None where a release lacks it)."""
    from lmms_eval import evaluator

    return getattr(evaluator, "_redact_eval_config_secrets", None)
