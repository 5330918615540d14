"""Every workaround of an lmms-eval bug this suite needs, in one place, scoped to runs of the suite.

Each workaround below is a named function whose docstring gives the bug, where it sits in
lmms-eval, what it breaks, and the fix; ``docs/upstream.md`` gives each a minimal reproduction
and the change proposed to lmms-eval. Each one

* is guarded by version (lmms-eval releases before ``FIXED_IN``, i.e. up to the 0.7.x this suite
  is pinned to) AND by behaviour: it first checks that the installed lmms-eval still behaves
  wrongly and changes nothing where it does not;
* is switched on only by a run that uses the suite:

  ================================  =====================================================
  workaround                        switched on when
  ================================  =====================================================
  ``enable_plugin_task_discovery``  ``LMMS_EVAL_PLUGINS`` names ``lmms_egoplan``
  ``fail_runs_with_failed_tasks``   that, or a suite task / the suite's backend is built
  ``keep_loglikelihood_results``    a suite task or the suite's backend is built
  ``keep_responses_of_stopped_runs``  a suite task or the suite's backend is built
  ``clean_lone_surrogates``         a suite task or the suite's backend is built
  ``unretried_process_results``     called by the suite's tasks only
  ``bind_class_task_to_backend``    called by the suite's tasks only
  ``run_datetime_str``              called by the suite's tasks only (reads, changes nothing)
  ================================  =====================================================

lmms-eval loads the suite's model entry point in every run once the suite is installed; the
entry point registers the backend's manifest and calls ``on_entry_point_load``, which does
nothing unless ``LMMS_EVAL_PLUGINS`` names the suite. A run that uses none of the suite behaves
as lmms-eval alone (tests/test_lmms_eval_compat.py runs one both ways).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Mapping

from loguru import logger

SUITE_PLUGIN = "lmms_egoplan"
# The first lmms-eval release not known to have these bugs; the behaviour checks decide below it.
FIXED_IN = (0, 8)


def lmms_eval_version() -> tuple[int, ...]:
    numbers = []
    for part in version("lmms-eval").split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers)


def _affected_release() -> bool:
    return lmms_eval_version() < FIXED_IN


def lmms_eval_source(module: str, qualified_name: str) -> str:
    """The source text of a function of the installed lmms-eval, read from its file: the behaviour
    checks run while lmms-eval is still importing (entry points load then), so they import nothing."""
    import ast

    path = importlib.util.find_spec(module).origin
    with open(path, encoding="utf-8") as file:
        text = file.read()
    scope: list = ast.parse(text).body
    node = None
    for name in qualified_name.split("."):
        node = next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
        scope = node.body
    return ast.get_source_segment(text, node)


# ---------------------------------------------------------------------------------------------
# When the workarounds are switched on
# ---------------------------------------------------------------------------------------------

def suite_plugin_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``LMMS_EVAL_PLUGINS`` names this suite (the user asked lmms-eval for its tasks)."""
    return SUITE_PLUGIN in (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))


def on_entry_point_load() -> None:
    """Called when lmms-eval loads the suite's model entry point, i.e. in every lmms-eval run once
    the suite is installed: only runs that name the suite in ``LMMS_EVAL_PLUGINS`` get anything.
    The moment matters: lmms-eval loads entry points before it builds its task index."""
    if suite_plugin_enabled():
        enable_plugin_task_discovery()
        fail_runs_with_failed_tasks()


def on_suite_use() -> None:
    """Called when a suite task or the suite's backend is built: this run uses the suite."""
    keep_loglikelihood_results()
    fail_runs_with_failed_tasks()
    keep_responses_of_stopped_runs()
    clean_lone_surrogates()


# ---------------------------------------------------------------------------------------------
# Plugin task discovery
# ---------------------------------------------------------------------------------------------

def enable_plugin_task_discovery() -> bool:
    """Make ``LMMS_EVAL_PLUGINS=<pkg>`` index ``<pkg>.tasks`` as lmms-eval documents.

    Bug: ``lmms_eval/__main__.py:cli_evaluate_single`` builds its ``TaskManager`` first and only
    then appends the plugin task folders to ``args.include_path``, which nothing reads afterwards:
    ``--tasks <plugin task>`` fails with "Tasks not found". Fix: ``TaskManager.__init__`` adds the
    plugin folders itself (de-duplicated, so a lmms-eval that passes them is unaffected).
    Returns whether the workaround is in place.
    """
    from lmms_eval.tasks import TaskManager

    if getattr(TaskManager.__init__, "_includes_plugin_tasks", False):
        return True
    if not (_affected_release() and _plugin_folders_reach_the_index_too_late()):
        return False
    original_init = TaskManager.__init__

    @functools.wraps(original_init)
    def __init__(self, verbosity="INFO", include_path=None, include_defaults=True, model_name=None):
        paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
        for folder in plugin_task_folders():
            if folder not in paths:
                paths.append(folder)
        original_init(self, verbosity, paths or None, include_defaults, model_name)

    __init__._includes_plugin_tasks = True
    TaskManager.__init__ = __init__
    return True


def _plugin_folders_reach_the_index_too_late(task_manager_init: str | None = None, cli_evaluate_single: str | None = None) -> bool:
    """Behaviour check without indexing every task (seconds): neither the TaskManager reads
    ``LMMS_EVAL_PLUGINS`` nor the CLI adds the plugin folders before it builds the TaskManager."""
    task_manager_init = task_manager_init or lmms_eval_source("lmms_eval.tasks", "TaskManager.__init__")
    cli_evaluate_single = cli_evaluate_single or lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single")
    if "LMMS_EVAL_PLUGINS" in task_manager_init:
        return False
    plugins, index = cli_evaluate_single.find("LMMS_EVAL_PLUGINS"), cli_evaluate_single.find("TaskManager(")
    return plugins < 0 or plugins > index


def plugin_task_folders(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Task folders of the packages listed in ``LMMS_EVAL_PLUGINS`` (those that have one)."""
    folders = []
    for plugin in filter(None, (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))):
        spec = importlib.util.find_spec(f"{plugin}.tasks")
        if spec is not None and spec.submodule_search_locations:
            folders.append(list(spec.submodule_search_locations)[0])
    return folders


# ---------------------------------------------------------------------------------------------
# Loglikelihood results
# ---------------------------------------------------------------------------------------------

def keep_loglikelihood_results() -> bool:
    """Hand ``multiple_choice`` tasks the ``(loss, is_greedy)`` pairs that backends return.

    Bug: ``lmms_eval/api/instance.py:unwrap_generation_output``, which the evaluator applies to
    every response, turns anything but text into ``str(response)``: a loglikelihood pair becomes
    ``"(1.2, False)"`` and every multiple_choice task fails in process_results ("too many values
    to unpack"); a pair read back from ``--use_cache`` (a JSON list) meets the same fate. Fix:
    pairs pass through as tuples; everything else is unwrapped as before. The evaluator binds the
    name at import, so it is replaced there too. Returns whether the workaround is in place.
    """
    from lmms_eval.api import instance

    original = instance.unwrap_generation_output
    if getattr(original, "_keeps_loglikelihood_pairs", False):
        return True
    if not (_affected_release() and _pairs_become_strings(original)):
        return False

    @functools.wraps(original)
    def unwrap_generation_output(output):
        if _is_loglikelihood_pair(output):
            return tuple(output), None
        return original(output)

    unwrap_generation_output._keeps_loglikelihood_pairs = True
    instance.unwrap_generation_output = unwrap_generation_output
    evaluator = sys.modules.get("lmms_eval.evaluator")
    if evaluator is not None and hasattr(evaluator, "unwrap_generation_output"):
        evaluator.unwrap_generation_output = unwrap_generation_output
    return True


def clean_lone_surrogates() -> bool:
    """Log model output that holds a lone surrogate instead of losing the samples file.

    Bug: an API model can return text with a lone surrogate (from broken bytes, e.g. "\\udcff");
    ``lmms_eval/loggers/evaluation_tracker.py:save_results_samples`` writes samples as UTF-8, which
    cannot encode it, and the task's samples file stays empty (the run still exits 0). Fix: text
    responses are cleaned where the evaluator unwraps them (``unwrap_generation_output``): lone
    surrogates become U+FFFD, what any UTF-8 decoder makes of broken bytes. Returns whether the
    workaround is in place.
    """
    from lmms_eval.api import instance

    from lmms_egoplan.records import valid_text

    unwrap = instance.unwrap_generation_output
    if getattr(unwrap, "_cleans_lone_surrogates", False):
        return True
    if not (_affected_release() and unwrap("\udcff")[0] == "\udcff"):
        return False

    @functools.wraps(unwrap)
    def unwrap_generation_output(output):
        text, counts = unwrap(output)
        return (valid_text(text) if isinstance(text, str) else text), counts

    unwrap_generation_output._cleans_lone_surrogates = True
    unwrap_generation_output._keeps_loglikelihood_pairs = getattr(unwrap, "_keeps_loglikelihood_pairs", False)
    instance.unwrap_generation_output = unwrap_generation_output
    evaluator = sys.modules.get("lmms_eval.evaluator")
    if evaluator is not None and hasattr(evaluator, "unwrap_generation_output"):
        evaluator.unwrap_generation_output = unwrap_generation_output
    return True


def _is_loglikelihood_pair(output: Any) -> bool:
    return (isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], bool)
            and isinstance(output[0], (int, float)) and not isinstance(output[0], bool))


def _pairs_become_strings(unwrap: Callable) -> bool:
    return isinstance(unwrap((1.5, False))[0], str)


# ---------------------------------------------------------------------------------------------
# Exit status
# ---------------------------------------------------------------------------------------------

_FAILED_RUN_EXIT_STATUS = 1


def keep_responses_of_stopped_runs() -> bool:
    """Make ``--use_cache`` resume a run that stopped part-way from the responses it had.

    Bugs, both in ``lmms_eval/caching/response_cache.py``: ``ResponseCache.execute`` sends every
    uncached request of a type to the model in one call and stores the responses only when that
    call returns; and ``ResponseCache.finalize(success=False)`` leaves what a failed run stored in
    its ``runs/<id>/`` folder, which later runs never read. A run that stops at a sample it cannot
    read after hours of GPU work keeps nothing, and the next run starts from zero. Fix: call the
    model per chunk of whole documents (``RESPONSE_CHUNK_BATCHES`` batches of the backend's batch
    size, at least ``RESPONSE_CHUNK_MIN_DOCS`` documents), storing each chunk as it returns, and
    merge a failed run's stored responses into the cache like a finished run's (each is a complete
    response to its request). A chunk that fails is called again a document at a time, so that the
    documents before the failing one are stored too (``call_in_chunks``). Responses and their order
    are unchanged; a backend sorts and batches within a chunk. A process killed outright still
    leaves its folder unmerged. Returns whether the workaround is in place.
    """
    from lmms_eval.caching.response_cache import ResponseCache

    if getattr(ResponseCache.execute, "_stores_per_chunk", False):
        return True
    if not (_affected_release() and _stores_after_the_whole_call() and _drops_failed_runs()):
        return False
    whole_call, finalize = ResponseCache.execute, ResponseCache.finalize

    @functools.wraps(whole_call)
    def execute(self, lm, reqtype, requests):
        size = max(RESPONSE_CHUNK_MIN_DOCS, RESPONSE_CHUNK_BATCHES * _batch_size(lm))
        return call_in_chunks(functools.partial(whole_call, self, lm, reqtype), requests, size)

    @functools.wraps(finalize)
    def finalize_keeping_responses(self, *, success: bool, **kwargs):
        return finalize(self, success=True, **kwargs)

    execute._stores_per_chunk = True
    ResponseCache.execute = execute
    ResponseCache.finalize = finalize_keeping_responses
    return True


RESPONSE_CHUNK_BATCHES = 4
RESPONSE_CHUNK_MIN_DOCS = 4


def _stores_after_the_whole_call(execute: str | None = None) -> bool:
    execute = execute or lmms_eval_source("lmms_eval.caching.response_cache", "ResponseCache.execute")
    return "getattr(lm, reqtype)(uncached)" in execute


def _drops_failed_runs(finalize: str | None = None) -> bool:
    finalize = finalize or lmms_eval_source("lmms_eval.caching.response_cache", "ResponseCache.finalize")
    return "if not success" in finalize


def _batch_size(lm) -> int:
    try:
        return max(1, int(getattr(lm, "batch_size", 1)))
    except (TypeError, ValueError):  # e.g. "auto"
        return 1


def call_in_chunks(call, requests: list, size: int) -> list:
    """``call(chunk)`` for each chunk of ``size`` documents, responses concatenated in order.

    When a chunk's call fails, its documents are called one at a time: those before the failing
    document get their responses (and the cache stores them) at the cost of computing at most
    ``size - 1`` documents twice, once, in a run that is stopping anyway; the failing document
    raises its error again (a failure that does not recur, e.g. memory taken by a batch, is gone).
    """
    responses = []
    for chunk in _document_chunks(requests, size):
        try:
            responses += call(chunk)
        except Exception:
            documents = _document_chunks(chunk, 1)
            if len(documents) == 1:
                raise
            for document in documents:
                responses += call(document)
    return responses


def _document_chunks(requests: list, size: int) -> list[list]:
    """``requests`` in order, cut into runs of at most ``size`` documents (a document's requests,
    e.g. the four candidates of a question, stay together)."""
    chunks: list[list] = []
    documents = 0
    previous = None
    for request in requests:
        document = (request.task_name, request.doc_id)
        if document != previous:
            if not chunks or documents == size:
                chunks.append([])
                documents = 0
            documents += 1
            previous = document
        chunks[-1].append(request)
    return chunks


def fail_runs_with_failed_tasks() -> bool:
    """Make a run of the suite that failed exit with a non-zero status.

    Bug: ``lmms_eval/__main__.py:cli_evaluate`` catches any exception of an evaluation, prints it,
    logs "Error during evaluation" and carries on; the process then exits 0, so scripts and CI
    cannot tell a failed run from a good one. Fix: when that error is logged in a run that uses the
    suite, the process exits with status 1 right after the message (a run with several
    ``--config`` entries stops at the first failing one). With ``--verbosity DEBUG`` lmms-eval
    re-raises, and the exit status is already non-zero. Returns whether the workaround is in place.
    """
    global _exit_guard_sink
    if not (_affected_release() and _cli_swallows_evaluation_errors()):
        return False
    if _exit_guard_sink is not None:
        # Added again each time: ``cli_evaluate`` removes every loguru sink when it sets the
        # verbosity, which may come after the entry point added this one.
        try:
            logger.remove(_exit_guard_sink)
        except ValueError:
            pass
    _exit_guard_sink = logger.add(_exit_after_evaluation_error, level="ERROR", format="{message}",
                                  filter=_is_evaluation_error)
    return True


_exit_guard_sink: int | None = None


def _cli_swallows_evaluation_errors(cli_evaluate: str | None = None) -> bool:
    cli_evaluate = cli_evaluate or lmms_eval_source("lmms_eval.__main__", "cli_evaluate")
    return "Error during evaluation" in cli_evaluate and "sys.exit(1)" not in cli_evaluate


def _is_evaluation_error(record: Mapping[str, Any]) -> bool:
    # By file, not module name: ``python -m lmms_eval`` runs that file as ``__main__``.
    return (Path(record["file"].path).parts[-2:] == ("lmms_eval", "__main__.py") and record["function"] == "cli_evaluate"
            and str(record["message"]).startswith("Error during evaluation"))


def _exit_after_evaluation_error(message) -> None:
    sys.stdout.flush()
    sys.stderr.write(f"lmms-egoplan: the evaluation failed (the error is above); exiting with status "
                     f"{_FAILED_RUN_EXIT_STATUS}, where lmms-eval {version('lmms-eval')} alone would exit 0 "
                     f"(see docs/upstream.md)\n")
    sys.stderr.flush()
    raise SystemExit(_FAILED_RUN_EXIT_STATUS)


# ---------------------------------------------------------------------------------------------
# Workarounds the suite's tasks call for themselves
# ---------------------------------------------------------------------------------------------

def unretried_process_results(method: Callable) -> Callable:
    """``ConfigurableTask.process_results`` without the retry lmms-eval wraps it in.

    Bug: ``lmms_eval/api/task.py`` decorates ``ConfigurableTask.process_results`` with tenacity's
    ``@retry`` (5 tries, 2 s apart), so a deterministic scoring error costs 8 s per document and
    surfaces as a ``RetryError`` that hides its cause. Fix: the suite's tasks call the undecorated
    function, so a scoring error surfaces at once, by name. Other tasks keep lmms-eval's retry.
    """
    wrapped = getattr(method, "__wrapped__", None)
    is_retry_wrapper = hasattr(method, "retry") and wrapped is not None
    return wrapped if is_retry_wrapper and _affected_release() else method


def run_datetime_str(cli_args: Any = None) -> str | None:
    """The date-time lmms-eval names this run's results and samples files with, or None where it
    cannot be learnt.

    Gap: ``lmms_eval/__main__.py:cli_evaluate`` computes ``datetime_str`` and hands it only to
    ``evaluator.simple_evaluate`` and the results writer; a task that writes files beside the
    results (judgements, plans, a submission) cannot learn it, so its files carry a later second
    than the run's results file. Workaround: read it from the running ``simple_evaluate`` call
    (its frame; nothing of lmms-eval changes). Fix proposed upstream: ``cli_args.datetime_str``,
    which is read first.
    """
    if isinstance(getattr(cli_args, "datetime_str", None), str):
        return cli_args.datetime_str
    if not _affected_release():
        return None
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "simple_evaluate" and frame.f_globals.get("__name__") == "lmms_eval.evaluator":
            value = frame.f_locals.get("datetime_str")
            return value if isinstance(value, str) else None
        frame = frame.f_back
    return None


def bind_class_task_to_backend(task: Any, cli_args: Any) -> None:
    """Give a ``class:`` task the model name lmms-eval did not give it, before requests are built.

    Bug: ``lmms_eval/tasks/__init__.py:TaskManager._load_individual_task_or_group`` constructs
    ``class:`` tasks as ``config["class"](config=config)``, without ``model_name``, while YAML tasks
    get it: model-specific ``lmms_eval_specific_kwargs`` presets never apply to them. Fix: learn
    the model from the CLI arguments lmms-eval hands every task (``task.args``) and prepare the
    model-specific config then; a task that already has its model name is left as it is.
    """
    model = getattr(cli_args, "model", None)
    if not isinstance(model, str) or getattr(task, "model_name", None) == model:
        return
    task.model_name = model
    task._prepare_model_specific_config()
