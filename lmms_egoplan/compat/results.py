"""lmms-eval workarounds about what reaches and leaves the results and samples files: loglikelihood
pairs kept as pairs, model output cleaned of lone surrogates, strict JSON, files written whole or the
run failed, and the run's date-time for the files a task writes beside them. Guards and the switch
table: ``lmms_egoplan.compat``."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from lmms_egoplan.compat import affected_release, switched_off
from lmms_egoplan.compat.replacements import RECORD_KEY, add_layer, has_layer, workaround_record
from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.core.provenance import PROVENANCE_KEY, environment, model_identity
from lmms_egoplan.core.run import SuiteRun, run_of

# The zone lmms-eval 0.7.3 names a run's files in when its --timezone is not given (``cli_evaluate``'s default).
LMMS_EVAL_DEFAULT_TIMEZONE = "Asia/Singapore"


def keep_loglikelihood_results() -> bool:
    """Hand ``multiple_choice`` tasks the ``(loss, is_greedy)`` pairs that backends return.

    Bug: ``lmms_eval/api/instance.py:unwrap_generation_output``, which the evaluator applies to
    every response, turns anything but text into ``str(response)``: a loglikelihood pair becomes
    ``"(1.2, False)"`` and every multiple_choice task fails in process_results ("too many values
    to unpack"); a pair read back from ``--use_cache`` (a JSON list) meets the same fate. Fix:
    pairs pass through as tuples; everything else is unwrapped as before. The evaluator binds the
    name at import, so it is replaced there too. Returns whether the workaround is in place.
    Retired by docs/upstream/01-loglikelihood-results.patch.
    """
    from lmms_eval.api import instance

    if switched_off(_KEEP_PAIRS):  # docs/upstream/01-loglikelihood-results.patch
        return False
    if has_layer(_KEEP_PAIRS, *_UNWRAP):
        return True
    if not (affected_release() and _pairs_become_strings(instance.unwrap_generation_output)):
        return False

    def keep_pairs(unwrap, output):
        if _is_loglikelihood_pair(output):
            return tuple(output), None
        return unwrap(output)

    add_layer(_KEEP_PAIRS, *_UNWRAP, keep_pairs)
    return True


_KEEP_PAIRS = "results.keep_loglikelihood_results"
_UNWRAP = ("lmms_eval.api.instance", "unwrap_generation_output")


def clean_lone_surrogates() -> bool:
    """Log model output that holds a lone surrogate instead of losing the samples file.

    Bug: an API model can return text with a lone surrogate (from broken bytes, e.g. "\\udcff");
    ``lmms_eval/loggers/evaluation_tracker.py:save_results_samples`` writes samples as UTF-8, which
    cannot encode it, and the task's samples file stays empty (the run still exits 0); with a response
    cache, ``ResponseCache.execute`` writes the text into its audit log (UTF-8) before it returns, and the
    run fails there (``UnicodeEncodeError``). Fix: text responses are cleaned where the evaluator unwraps
    them (``unwrap_generation_output``) and where the response cache takes what it keeps
    (``ResponseCache._extract_cacheable``): lone surrogates become U+FFFD, what any UTF-8 decoder makes of
    broken bytes (a cached text read back is the one the run scored). Returns whether the workaround is in
    place.
    Retired by docs/upstream/12-lone-surrogates.patch.
    """
    from lmms_eval.api import instance
    from lmms_eval.caching.response_cache import ResponseCache

    from lmms_egoplan.core.files import valid_text

    if switched_off(_CLEAN_TEXT) or not affected_release():
        return False

    def clean(unwrap, output):
        text, counts = unwrap(output)
        return (valid_text(text) if isinstance(text, str) else text), counts

    def clean_cacheable(extract, response):
        cacheable = extract(response)
        return valid_text(cacheable) if isinstance(cacheable, str) else cacheable

    if not has_layer(_CLEAN_TEXT, *_UNWRAP) and instance.unwrap_generation_output("\udcff")[0] == "\udcff":
        add_layer(_CLEAN_TEXT, *_UNWRAP, clean)
    if not has_layer(_CLEAN_TEXT, *_CACHEABLE) and ResponseCache._extract_cacheable("\udcff") == "\udcff":
        add_layer(_CLEAN_TEXT, *_CACHEABLE, clean_cacheable)
    return has_layer(_CLEAN_TEXT, *_UNWRAP) or has_layer(_CLEAN_TEXT, *_CACHEABLE)


_CLEAN_TEXT = "results.clean_lone_surrogates"
_CACHEABLE = ("lmms_eval.caching.response_cache", "ResponseCache._extract_cacheable")


def _is_loglikelihood_pair(output: Any) -> bool:
    return (isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], bool)
            and isinstance(output[0], (int, float)) and not isinstance(output[0], bool))


def _pairs_become_strings(unwrap: Callable) -> bool:
    return isinstance(unwrap((1.5, False))[0], str)


def write_results_as_strict_json() -> bool:
    """Write a metric without a value as ``null``, not as a bare ``NaN``.

    Bug: ``lmms_eval/loggers/evaluation_tracker.py`` writes the results and samples files with
    ``json.dumps`` defaults, which print NaN and infinity as ``NaN`` / ``Infinity``: not JSON, so
    strict parsers (``jq``, JavaScript, Go, Rust, ``json.loads`` with ``parse_constant``) reject the
    whole file. A metric has no value where nothing could score it (a judge that failed every
    judgement). Fix: ``save_results_aggregated`` and ``save_results_samples`` write copies in which
    such numbers are ``null`` (``core.files.finite_or_null``); the run's judged / failed counts beside
    a judged metric say why. What lmms-eval prints and returns is unchanged. Returns whether the
    workaround is in place.
    Retired by docs/upstream/10-strict-json.patch.
    """
    from lmms_egoplan.core.files import finite_or_null

    if switched_off(_STRICT_JSON):
        return False
    if has_layer(_STRICT_JSON, *SAVE_RESULTS):
        return True
    if not affected_release():
        return False

    def strict_results(save_results, self, results, samples, datetime_str):
        written = finite_or_null(results)
        save_results(self, written, samples, datetime_str)
        results.update((key, value) for key, value in written.items() if key not in results)  # task hashes, config

    def strict_samples(save_samples, self, task_name, samples):
        save_samples(self, task_name, finite_or_null(samples))

    add_layer(_STRICT_JSON, *SAVE_RESULTS, strict_results)
    add_layer(_STRICT_JSON, *SAVE_SAMPLES, strict_samples)
    return True


_STRICT_JSON = "results.write_results_as_strict_json"
SAVE_RESULTS = ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_aggregated")
SAVE_SAMPLES = ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples")


def fail_runs_whose_files_are_cut() -> bool:
    """Make a results or samples file that lmms-eval could not write whole fail the run, naming it.

    Bug: ``lmms_eval/loggers/evaluation_tracker.py``: ``save_results_aggregated`` and
    ``save_results_samples`` catch every exception, log "Could not save results aggregated" /
    "Could not save sample results" with the error (``OSError(28, 'No space left on device')``)
    and go on; the run exits 0. On a full disk the results file is left cut in the middle of its
    JSON (written in one ``write``), a samples file with a cut last line (appended a sample at a
    time), and the run looks finished. Fix: after each, the file is checked (the results file
    parses as JSON; the samples file gained one whole line per sample): a cut results file is
    removed, a cut samples file cut back to its last whole line, and the run fails (StorageError)
    naming the file, why, and what the run keeps. Returns whether the workaround is in place.
    Retired by docs/upstream/11-results-files-whole.patch.
    """
    if switched_off(_WHOLE_FILES):
        return False
    if has_layer(_WHOLE_FILES, *SAVE_SAMPLES):
        return True
    if not affected_release():
        return False

    def whole_results(save_results, self, results, samples, datetime_str):
        with _logged_write_errors() as errors:
            save_results(self, results, samples, datetime_str)
        if not self.output_path:
            return
        path = _output_folder(self) / f"{datetime_str.replace(':', '-')}_results.json"
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            raise StorageError(f"cannot write the results file {path}: {_why(errors)}; no part of it is left. "
                               f"{_what_is_kept(run_of(self))}") from None

    def whole_samples(save_samples, self, task_name, samples):
        path = _output_folder(self) / f"{self.date_id}_samples_{task_name}.jsonl" if self.output_path else None
        start = path.stat().st_size if path and path.exists() else 0  # lmms-eval appends
        with _logged_write_errors() as errors:
            save_samples(self, task_name, samples)
        if path is None:
            return
        written = _written_since(path, start)
        if not samples or (written.count(b"\n") == len(samples) and written.endswith(b"\n")):
            return
        whole = written[:written.rfind(b"\n") + 1]
        if path.exists():
            os.truncate(path, start + len(whole))  # a cut line would join the next line appended
        lines = whole.count(b"\n")
        raise StorageError(f"cannot write the samples file {path}: {_why(errors)}; {lines} of its {len(samples)} "
                           f"samples are written, each whole. {_what_is_kept(run_of(self))}")

    add_layer(_WHOLE_FILES, *SAVE_RESULTS, whole_results)
    add_layer(_WHOLE_FILES, *SAVE_SAMPLES, whole_samples)
    return True


_WHOLE_FILES = "results.fail_runs_whose_files_are_cut"


def _written_since(path: Path, start: int) -> bytes:
    if not path.exists():
        return b""
    with open(path, "rb") as file:
        file.seek(start)
        return file.read()


def _output_folder(tracker: Any) -> Path:
    return Path(tracker.output_path, tracker.general_config_tracker.model_name_sanitized)


@contextlib.contextmanager
def _logged_write_errors():
    """The errors lmms-eval's results writer logs (and swallows) while the block runs."""
    from loguru import logger

    errors: list[str] = []
    sink = logger.add(lambda message: errors.append(message.record["message"]), level="INFO", format="{message}",
                      filter=lambda record: record["name"] == "lmms_eval.loggers.evaluation_tracker"
                      and record["message"].endswith(")") and "Error(" in record["message"])
    try:
        yield errors
    finally:
        logger.remove(sink)


def _why(errors: list[str]) -> str:
    """Why lmms-eval could not write a file, from the error it logged (and swallowed)."""
    if any("No space left" in error or "Errno 28" in error or "Errno 122" in error for error in errors):
        return f"the disk is full ({errors[-1]})"
    return errors[-1] if errors else "lmms-eval left it cut"


def _what_is_kept(run: SuiteRun | None) -> str:
    """What a run that cannot write its files keeps (``run``; None: one the suite made none for), and how to resume."""
    run = run or SuiteRun()
    kept = [f"the model's responses are kept in the response cache {run.response_cache_root}" if run.response_cache_root
            else "this run had no --use_cache: its model responses are not kept", *run.kept_on_stop]
    return f"The run stopped: {'; '.join(kept)}. Free space on that disk (or point --output_path at another) and run " \
           f"the same command again"


def evaluated_model(config: Mapping[str, Any]) -> dict:
    """``{"model": core.provenance.model_identity}`` of the run's ``--model_args pretrained=...[,revision=...]``
    (lmms-eval's results ``config``); {} for a backend without a ``pretrained`` checkpoint (a server's API)."""
    from lmms_eval.utils import simple_parse_args_string

    model_args = config.get("model_args") or {}
    if isinstance(model_args, str):
        try:
            model_args = simple_parse_args_string(model_args)
        except Exception:  # noqa: BLE001 (lmms-eval parsed them to run: a record only)
            return {}
    pretrained = model_args.get("pretrained") if isinstance(model_args, dict) else None
    if not pretrained:
        return {}
    revision = model_args.get("revision")
    return {"model": model_identity(str(pretrained), str(revision) if revision else None)}


def record_in_results() -> bool:
    """Write into the run's results file which workarounds were in place, and lmms-eval's release
    (``RECORD_KEY``: ``{"lmms_eval": "0.7.3", "applied": ["results.keep_loglikelihood_results", ...]}``, named
    as in ``lmms_egoplan.compat``'s table and docs/upstream/README.md), so that a number can be traced to the
    lmms-eval behaviour that produced it; the software and machine of the run (``PROVENANCE_KEY``:
    ``core.provenance.environment``); and, for the tasks that score the token closing the assistant's turn
    (``SuiteRun.turn_end_tasks``), which token that was and where it came from (``SuiteRun.turn_end``: the template, or
    the model's generation config or tokenizer), in the results (``TURN_END_KEY``: {task: "</s>
    (generation_config)"}) and in each of their logged samples (``TURN_END_KEY``). Put on
    ``save_results_aggregated`` and ``save_results_samples`` by a run that names or uses the suite (on an
    lmms-eval release the suite works around). Returns whether it is in place."""
    if has_layer(_RECORD, *SAVE_RESULTS):
        return True
    if not affected_release():
        return False

    def record(save_results, self, results, samples, datetime_str):
        run = run_of(self) or SuiteRun()  # the facts of the run this writer writes (none: not the suite's)
        results[RECORD_KEY] = workaround_record(run_of(self))
        results[PROVENANCE_KEY] = {**environment(), **evaluated_model(results.get("config") or {})}
        if run.protocol_changes:
            results[PROTOCOL_CHANGES_KEY] = {task: dict(changes) for task, changes in run.protocol_changes.items()}
        if run.turn_end_tasks:
            results[TURN_END_KEY] = {task: run.turn_end for task in sorted(run.turn_end_tasks)}
        save_results(self, results, samples, datetime_str)

    def record_in_samples(save_samples, self, task_name, samples):
        run = run_of(self) or SuiteRun()
        if task_name in run.turn_end_tasks:
            samples = [{**sample, TURN_END_KEY: run.turn_end} for sample in samples]
        save_samples(self, task_name, samples)

    add_layer(_RECORD, *SAVE_RESULTS, record)
    add_layer(_RECORD, *SAVE_SAMPLES, record_in_samples)
    return True


TURN_END_KEY = "lmms_egoplan_end_of_turn"
PROTOCOL_CHANGES_KEY = "lmms_egoplan_protocol_changes"
_RECORD = "results.record_in_results"
