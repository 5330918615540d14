"""lmms-eval workarounds about what a run keeps and how it ends: responses stored as they are
computed and recovered from killed runs, SIGTERM and Ctrl-C stopping cleanly, and an exit status that says what
happened (a failed run exits non-zero; a task may end a finished run with its own status). Guards
and the switch table: ``lmms_egoplan.compat``; a run's facts: ``lmms_egoplan.core.run.SuiteRun``, handed to the
objects of its evaluation (``core.run.hand_over``)."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from loguru import logger

from lmms_egoplan.compat import (
    SUITE_BACKENDS,
    SUITE_PLUGIN,
    affected_release,
    switched_off,
)
from lmms_egoplan.compat.replacements import (
    add_layer,
    command_in_progress,
    counts_when_in_effect,
    has_layer,
    note_in_place,
    uses_the_suite,
)
from lmms_egoplan.core.errors import StorageError
from lmms_egoplan.core.files import disk_full, storage_failure, write_atomically
from lmms_egoplan.core.request_facts import AnswerRetries, mark_retries, retries_of
from lmms_egoplan.core.run import SuiteRun, hand_over, run_of

_FAILED_RUN_EXIT_STATUS = 1


def fail_runs_with_failed_tasks() -> bool:
    """Make a run of the suite that failed exit with a non-zero status.

    Bug: ``lmms_eval/__main__.py:cli_evaluate`` catches any exception of an evaluation, prints its
    traceback, logs "Error during evaluation" and carries on; the process then exits 0, so scripts and CI
    cannot tell a failed run from a good one. A run without ``--tasks`` logs "Need to specify task to
    evaluate." and calls ``sys.exit()``: 0 as well. Fix, through lmms-eval's own attributes and loguru's
    public API only: an error of the run's ``simple_evaluate`` (lmms-eval's CLI passes it ``cli_args``)
    has its traceback written into a file and the process exits 1 with the error last
    (``_evaluation_ending_the_run``, a layer on ``simple_evaluate``); where lmms-eval's CLI logs either failure
    itself (an error outside ``simple_evaluate``: a task not found, a results file not written), a loguru sink
    exits 1 right after its line (``_exit_after_evaluation_error``). ``cli_evaluate`` removes every loguru sink
    once, when it sets the verbosity: the sink is (re-)added at moments after that, when the run's
    ``TaskManager`` is built (the first line of ``cli_evaluate_single``: a layer on ``TaskManager.__init__``)
    and when a suite task or backend is built (``switches.SUITE_USED``). With ``--verbosity DEBUG`` lmms-eval
    re-raises, and the exit status is already non-zero. A ``--config`` file of several runs exits once its last run
    has run, as the patch has it (``_exit_with``). Retired by docs/upstream/03. Returns whether the
    workaround is in place.
    """
    global _exit_guard_sink
    if switched_off(_EXIT_GUARD) or not affected_release():
        return False
    if _exit_guard_sink is not None:
        # Added again each time, after the sinks a run added since (lmms-eval's own log line first).
        try:
            logger.remove(_exit_guard_sink)
        except ValueError:
            pass
    _exit_guard_sink = logger.add(_exit_after_evaluation_error, level="ERROR", format="{message}",
                                  filter=_is_evaluation_error)
    if not has_layer(_EXIT_GUARD, *_TASK_MANAGER_INIT):
        add_layer(_EXIT_GUARD, *_TASK_MANAGER_INIT, _arming_the_exit_guard_again)
    return True


def _arming_the_exit_guard_again(init, *args, **kwargs):
    """lmms-eval's CLI builds the run's TaskManager after its log reset: the guard's sink again, last of the sinks,
    and the layer on ``simple_evaluate`` (not before: lmms-eval loads the entry point while its evaluator imports)."""
    if fail_runs_with_failed_tasks() and not has_layer(_EXIT_GUARD, *_SIMPLE_EVALUATE):
        add_layer(_EXIT_GUARD, *_SIMPLE_EVALUATE, _evaluation_ending_the_run)
    return init(*args, **kwargs)


_EXIT_GUARD = "durability.fail_runs_with_failed_tasks"
_SIMPLE_EVALUATE = ("lmms_eval.evaluator", "simple_evaluate")
_TASK_MANAGER_INIT = ("lmms_eval.tasks", "TaskManager.__init__")
# loguru's handle of the exit guard's sink: loguru's sinks belong to the process, and so does its exit status.
_exit_guard_sink: int | None = None


def _evaluation_ending_the_run(simple_evaluate, *args, **kwargs):
    """An error of an evaluation lmms-eval's CLI started (it passes ``cli_args``) ends the process with status 1,
    before ``cli_evaluate`` prints its traceback and carries on: the traceback goes into a file of the run's
    ``--output_path`` (``write_traceback``), a line says where, the error is the last line. A call without
    ``cli_args`` (``simple_evaluate`` called from Python) raises as lmms-eval's does, and so does the error of a run
    that does not use the suite (``replacements.uses_the_suite``), and that of a run of a ``--config`` file with runs
    after it: lmms-eval's CLI prints it and goes on, and the command ends with status 1 once they have run
    (``_exit_with``)."""
    cli_args = kwargs.get("cli_args")
    try:
        return simple_evaluate(*args, **kwargs)
    except Exception as error:
        if cli_args is None or getattr(cli_args, "verbosity", None) == "DEBUG" or not uses_the_suite(cli_args) \
                or _runs_after_this_one():
            raise
        import traceback

        path = write_traceback(traceback.format_exc(), getattr(cli_args, "output_path", None))
        if path is None:
            traceback.print_exc()
        else:
            sys.stderr.write(f"lmms-egoplan: lmms-eval's traceback of the error is in {path}\n")
        _exit_failed(error_line(error))


def write_traceback(text: str, output_path: str | None) -> Path | None:
    """``text`` (a traceback) in a new file ``lmms-egoplan-traceback-*.txt`` of the run's ``output_path`` (the
    temporary folder for a run without one: nothing is left outside a run's output folder); None where none can be
    written."""
    import tempfile

    try:
        folder = Path(output_path).expanduser() if output_path else None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        handle, path = tempfile.mkstemp(prefix="lmms-egoplan-traceback-", suffix=".txt", dir=folder)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError:
        return None
    return Path(path)


# What lmms-eval's CLI logs where a run failed, by the function that logs it: an evaluation's error
# (caught by ``cli_evaluate``), a run without tasks (``cli_evaluate_single``, before ``sys.exit()``).
_FAILURE_RECORDS = {"cli_evaluate": "Error during evaluation",
                    "cli_evaluate_single": "Need to specify task to evaluate"}


def _is_evaluation_error(record: Mapping[str, Any]) -> bool:
    # By file, not module name: ``python -m lmms_eval`` runs that file as ``__main__``. Logged by a run of the suite
    # only: the sink stays for the process's later runs, which may not use it.
    start = _FAILURE_RECORDS.get(record["function"])
    return (start is not None and Path(record["file"].path).parts[-2:] == ("lmms_eval", "__main__.py")
            and str(record["message"]).startswith(start) and uses_the_suite())


def _exit_after_evaluation_error(message) -> None:
    # The sink runs inside lmms-eval's ``except`` block, which still holds the error (none for a run without tasks).
    error = sys.exc_info()[1]
    if error is None and str(message).startswith(_FAILURE_RECORDS["cli_evaluate_single"]):
        # lmms-eval's sys.exit() follows, which ends a command of several runs too
        _exit_failed("--tasks: name the tasks to evaluate (`lmms-eval --tasks list` lists them)",
                     after_the_command=False)
    else:
        _exit_failed(error_line(error, str(message)))


def _exit_failed(line: str, *, after_the_command: bool = True) -> None:
    """End the process with status 1, ``line`` (the error) last (``_exit_with``; ``after_the_command``: once the runs
    after this one of a ``--config`` file have run)."""
    from lmms_egoplan.core.documentation import doc_page

    _exit_with(_FAILED_RUN_EXIT_STATUS, [
        f"lmms-egoplan: the evaluation failed; exiting with status {_FAILED_RUN_EXIT_STATUS}, where lmms-eval "
        f"{version('lmms-eval')} alone would exit 0 (see {doc_page('upstream.md')})",
        f"lmms-egoplan: error: {line}"],  # the error again, last: lmms-eval printed it above dozens of log lines
        after_the_command=after_the_command, concern=_EXIT_GUARD)


# lmms-eval's CLI runs the runs of a ``--config`` file one after another in one process (``cli_evaluate``'s loop over
# ``args_list``, each run's ``args``), and a run that fails does not stop the others. A run that must end with a
# non-zero status ends the command once the runs after it have run, as docs/upstream/03 has it: its status and lines
# wait on its ``args`` (``SuiteRun.waiting_exit``: a run whose results are written or that wrote none, so no file of
# lmms-eval's records the arguments after).
_CLI_RUN = ("lmms_eval.__main__", "cli_evaluate_single")


def _runs_of_the_command() -> tuple[Any, list] | None:
    """(the ``args`` of the run lmms-eval's CLI is running, those of every run of its command), read from its
    ``cli_evaluate`` loop on the stack; None outside it (``simple_evaluate`` called from Python)."""
    command = command_in_progress()
    runs, current = command.get("args_list"), command.get("args")
    return (current, runs) if isinstance(runs, list) and any(run is current for run in runs) else None


def _runs_after(command: tuple[Any, list] | None) -> bool:
    """Whether ``command`` (``_runs_of_the_command``'s) has runs after the one running."""
    return command is not None and command[1][-1] is not command[0]


def _runs_after_this_one() -> bool:
    return _runs_after(_runs_of_the_command())


def _exit_with(status: int, lines: list[str], *, after_the_command: bool = True, concern: str) -> None:
    """End the process with ``status`` (0: go on), ``lines`` last. Where lmms-eval's CLI has runs of its ``--config``
    file after this one (and ``after_the_command``), once they have run: the status waits on this run's ``args``, and
    the command's last run (``concern``'s layer on ``cli_evaluate_single``, or its own exit) ends the process with the
    highest status of its runs, the lines of each run that asked for one in order, headed by the run."""
    command = _runs_of_the_command()
    if status and after_the_command and _runs_after(command):
        run = run_of(command[0]) or SuiteRun()
        run.waiting_exit = (status, lines)
        hand_over(run, command[0])
        if not has_layer(concern, *_CLI_RUN):
            add_layer(concern, *_CLI_RUN, _ending_the_command_after_its_last_run)
        sys.stderr.write(f"lmms-egoplan: {lines[-1].removeprefix('lmms-egoplan: ')}; the other runs of the --config "
                         f"file go on, then the command exits with status {status}\n")
        return
    runs = command[1] if command is not None else []
    waiting = [(f"lmms-egoplan: run {number} of {len(runs)} of the --config file (--tasks {args.tasks}):", *exit)
               for number, args in enumerate(runs, 1) if (exit := getattr(run_of(args), "waiting_exit", None))]
    if status:
        waiting.append(("", status, lines))
    if not waiting:
        return
    sys.stdout.flush()
    for heading, _, run_lines in waiting:
        sys.stderr.write("".join(f"{line}\n" for line in (heading, *run_lines) if line))
    sys.stderr.flush()
    raise SystemExit(max(run_status for _, run_status, _ in waiting))


def _ending_the_command_after_its_last_run(cli_evaluate_single, args, *more, **kwargs):
    outcome = cli_evaluate_single(args, *more, **kwargs)
    command = _runs_of_the_command()
    if command is not None and command[1][-1] is args:
        _exit_with(0, [], concern=_EXIT_GUARD)  # the statuses the command's earlier runs asked for
    return outcome


def error_line(error: BaseException | None, logged: str = "") -> str:
    """The error on one line: its message (the suite's errors name the file, field or setting to
    fix), with the type of anything else, and the backend where building it failed; without the
    error, the one lmms-eval logged."""
    if error is None:
        text = logged.removeprefix("Error during evaluation: ").split(". Please set `--verbosity=DEBUG`")[0]
    elif items := _model_args_without_a_value(error):
        text = (f"--model_args: {', '.join(map(repr, items))} "
                f"{'is no key=value item' if len(items) == 1 else 'are no key=value items'} (the items are key=value, "
                f"separated by commas)")
    elif type(error).__module__.split(".")[0] == SUITE_PLUGIN:
        text = str(error)
    else:
        text = f"{type(error).__name__}: {error}"
    backend = _backend_being_built(error)
    if backend is not None and not text.startswith(f"{backend}:"):
        text = f"--model {backend} could not be loaded: {text}{_backend_hint(backend, error)}"
    return " ".join(text.split())


def _model_args_without_a_value(error: BaseException) -> list[str]:
    """The items of ``--model_args`` without a ``=`` that lmms-eval's parser failed on (its error, "not enough values
    to unpack (expected 2, got 1)", names none), or []."""
    import traceback

    for frame, _ in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_name == "simple_parse_args_string" and frame.f_globals.get("__name__") == "lmms_eval.utils":
            return [item for item in frame.f_locals.get("arg_list") or () if "=" not in item]
    return []


# ``lmms_eval/api/model.py:lmms.create_from_arg_string`` / ``create_from_arg_obj``).
_BACKEND_CONSTRUCTION = ("get_model", "create_from_arg_string", "create_from_arg_obj")


def _backend_being_built(error: BaseException | None) -> str | None:
    """The ``--model`` whose import or construction raised ``error`` inside ``simple_evaluate``, or None."""
    import traceback

    model = None
    for frame, _ in traceback.walk_tb(getattr(error, "__traceback__", None)):
        if frame.f_code.co_name == "simple_evaluate" and isinstance(frame.f_locals.get("model"), str):
            model = frame.f_locals["model"]
        elif model is not None and frame.f_code.co_name in _BACKEND_CONSTRUCTION \
                and frame.f_globals.get("__name__", "").startswith("lmms_eval."):
            return model
    return None


def _backend_hint(backend: str, error: BaseException) -> str:
    if hint := missing_dependency_hint(error):
        return hint
    if backend in SUITE_BACKENDS:
        return ""
    return ("; the suite's tasks also run on its own backends: --model egoplan_hf (transformers) or "
            "--model egoplan_server (an SGLang / vLLM server)")


def missing_dependency_hint(error: BaseException) -> str:
    """What to install where an lmms-eval backend failed to import a package lmms-eval does not declare."""
    if isinstance(error, ModuleNotFoundError) and error.name == "decord":
        return ("; lmms-eval's own video backends (llava_hf, llava, ...) import decord, which lmms-eval does not "
                "declare: pip install decord (or pip install 'lmms-egoplan[lmms-builtins]')")
    return ""


def ask_for_exit_status(run: SuiteRun, reason: Callable[[SuiteRun, list[Path]], tuple[int, str] | None]) -> None:
    """Have ``reason`` asked, once lmms-eval has written ``run``'s files, whether the run ends with a non-zero
    status (``exit_when_results_are_written``). Run facts only: it patches nothing (a judged task asks once its
    judgements are made, a generative one when model requests failed)."""
    if reason not in run.exit_reasons:
        run.exit_reasons.append(reason)


def exit_when_results_are_written() -> bool:
    """Let a task end a run with a non-zero status once lmms-eval has written its files.

    Gap: a task cannot set the exit status of a run that finished: ``lmms_eval/__main__.py:
    cli_evaluate_single`` writes the results file, then the samples files, and the process exits
    0 whatever the task saw (e.g. judgements that failed, which are missing from the score). Fix:
    once the results file and every samples file of the run are written (``EvaluationTracker.
    save_results_aggregated`` / ``save_results_samples``), the registered ``reason`` callables are
    asked (with the files written); where one returns a status, the results tables are printed as
    lmms-eval would print them, then the reasons' lines, the one of the highest status last, and the
    process exits with that status (a run of a ``--config`` file of several runs: once the last has run).
    Reasons come from the suite's tasks only (``ask_for_exit_status``); a run none
    asks goes on as lmms-eval's, and its results do not list the workaround (``counts_when_in_effect``). Returns
    whether it is in place.
    No patch retires it: suite policy (docs/upstream/README.md).
    """
    counts_when_in_effect(_EXIT_WHEN_WRITTEN, lambda run: run is not None and bool(run.exit_reasons))
    if has_layer(_EXIT_WHEN_WRITTEN, *_SAVE_SAMPLES):
        return True
    if not affected_release():
        return False

    def results_written(save_results, self, results, samples, datetime_str):
        save_results(self, results, samples, datetime_str)
        if (run := run_of(self)) is None:  # the writer of an evaluation the suite made no run for
            return
        files = [Path(self.output_path, self.general_config_tracker.model_name_sanitized,
                      f"{self.date_id}_results.json")] if self.output_path else []
        run.written = WrittenFiles(self, files, results, set(results.get("configs", {})) if samples else set())
        _exit_if_asked(run)

    def samples_written(save_samples, self, task_name, samples):
        save_samples(self, task_name, samples)
        run = run_of(self)
        written = run.written if run is not None else None
        if written is None or written.tracker is not self:  # not called by the CLI after the results
            return
        written.files.append(Path(self.output_path, self.general_config_tracker.model_name_sanitized,
                                  f"{self.date_id}_samples_{task_name}.jsonl"))
        written.unsaved.discard(task_name)
        _exit_if_asked(run)

    add_layer(_EXIT_WHEN_WRITTEN, *_SAVE_RESULTS, results_written)
    add_layer(_EXIT_WHEN_WRITTEN, *_SAVE_SAMPLES, samples_written)
    return True


_EXIT_WHEN_WRITTEN = "durability.exit_when_results_are_written"
_SAVE_RESULTS = ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_aggregated")
_SAVE_SAMPLES = ("lmms_eval.loggers.evaluation_tracker", "EvaluationTracker.save_results_samples")


@dataclass
class WrittenFiles:
    """What lmms-eval's ``tracker`` has written of the run so far (``exit_when_results_are_written``): its files,
    the results, and the tasks whose samples file is still to come (empty: every file is written)."""

    tracker: Any
    files: list[Path]
    results: Mapping[str, Any]
    unsaved: set[str] = field(default_factory=set)


def _exit_if_asked(run: SuiteRun) -> None:
    written = run.written
    if written.unsaved:
        return
    verdicts = [verdict for reason in run.exit_reasons if (verdict := reason(run, list(written.files)))]
    verdicts.sort(key=lambda verdict: verdict[0])  # the line of the highest status last
    if not any(status for status, _ in verdicts):  # none, or accepted by a setting: said, lmms-eval goes on
        for _, line in verdicts:
            logger.warning(f"lmms-egoplan: {line}")
        if written.files:  # lmms-eval names its samples files, not its results file
            logger.info(f"lmms-egoplan: results in {written.files[0]}; `lmms-egoplan report "
                        f"{written.files[0].parent.parent}` sets them beside the papers' rows")
        return
    from lmms_eval.utils import make_table

    results = written.results
    if not _runs_after_this_one():  # lmms-eval prints the tables of a --config file's runs after the last has run
        print(make_table(results))
        if "groups" in results:
            print(make_table(results, "groups"))
    _exit_with(max(status for status, _ in verdicts), [f"lmms-egoplan: {line}" for _, line in verdicts],
               concern=_EXIT_WHEN_WRITTEN)


def keep_responses_of_stopped_runs() -> bool:
    """Make ``--use_cache`` resume a run that stopped part-way, or was killed, from the responses it had.

    Bugs, all in ``lmms_eval/caching/response_cache.py``: ``ResponseCache.execute`` sends every
    uncached request of a type to the model in one call and stores the responses only when that
    call returns; ``ResponseCache.finalize(success=False)`` leaves what a failed run stored in its
    ``runs/<id>/`` folder; and a process killed outright (SIGKILL, out of memory) never finalizes:
    later runs read neither folder (``ResponseCache.create`` opens only the merged ``cache.db``).
    A run that stops or dies after hours of GPU work keeps nothing, and the next run starts from
    zero. Fix:

    * a backend with a ``response_sink`` attribute (``egoplan_hf``) hands over each response as it
      computes it, and it is stored at once, as lmms-eval stores it (its key, its rank's
      ``runs/<id>/rank_<r>.db``; ``_store_as_computed``): a killed run loses only the question or
      batch in flight. Other backends are called per chunk of whole documents
      (``RESPONSE_CHUNK_BATCHES`` batches of the backend's batch size, at least
      ``RESPONSE_CHUNK_MIN_DOCS`` documents, and at least as many requests as the backend runs at once,
      ``concurrent_requests``, so that its concurrency is kept), each chunk stored as it returns; a chunk that fails is
      called again a document at a time, so that the documents before the failing one are stored too
      (``call_in_chunks``). Responses and their order are unchanged;
    * a failed run's stored responses are merged into the cache like a finished run's;
    * a ``cache.db`` that is no readable database (cut short, emptied, damaged) is set aside and built again from
      the run folders lmms-eval merged into it (``rebuild_unreadable_cache``), before the run opens the cache;
    * each rank records its process in its run folder (``<rank db>.owner.json``), and the next run
      on the same machine, before it opens the cache, merges the folders of runs whose processes
      are all gone (``recover_killed_runs``, under lmms-eval's merge lock; a folder of a run still
      alive, of another machine, or written without this workaround, is left as it is), with the answers
      their audit logs hold whole and their databases lack (``replay_whole_audit_lines``: lmms-eval writes
      the line first, so a kill between the two, or a full disk with room for a line, kept them there only);
    * a full disk (lmms-eval: ``OperationalError: database or disk is full`` naming no file, a cut
      line in the cache's audit log, and the backend called again for each document of the chunk):
      a cache that cannot be opened is named with what it keeps; a response that cannot be stored
      stops the run at the end of its chunk (at once with a ``response_sink``), before the backend
      computes more, saying how many were not stored and where (``_GuardedStoring``); a line the
      audit log cannot take whole is cut back off; a merge that fails leaves the run's folder for
      the next run to merge, and so does a run with responses not stored, for their audit lines.

    Returns whether the workaround is in place.
    No patch retires it yet: docs/upstream/issues/response-cache-stopped-runs.md asks lmms-eval for the design; the
    merge lock's fix is docs/upstream/22-response-cache-merge-lock-owner.patch.
    """
    if switched_off(_KEEP_RESPONSES):
        return False
    if has_layer(_KEEP_RESPONSES, *_CACHE_EXECUTE):
        return True
    if not affected_release():
        return False

    add_layer(_KEEP_RESPONSES, *_CACHE_EXECUTE, _execute_storing_as_it_goes)
    add_layer(_KEEP_RESPONSES, _RESPONSE_CACHE, "ResponseCache.finalize", _finalize_keeping_responses)
    add_layer(_KEEP_RESPONSES, _RESPONSE_CACHE, "ResponseCache.create", _create_recovering)
    return True


def _stored_call(whole_call, self, lm, reqtype, requests, *, store_sampled: bool = False):
    responses = whole_call(self, lm, reqtype, requests)
    if store_sampled:  # a backend without a response_sink: lmms-eval stored the chunk's others (resume_sampled_runs)
        store = _store_as_computed(self, reqtype, sampled_only=True)
        for request, response in zip(requests, responses):
            store(request, response)
    _GuardedStoring.of(self).stop_if_not_stored()
    return responses


def _execute_storing_as_it_goes(whole_call, self, lm, reqtype, requests):
    if hasattr(lm, "response_sink"):
        lm.response_sink = _store_as_computed(self, reqtype)
        try:
            return _stored_call(whole_call, self, lm, reqtype, requests)
        finally:
            lm.response_sink = None
    size = max(RESPONSE_CHUNK_MIN_DOCS, RESPONSE_CHUNK_BATCHES * _batch_size(lm))
    call = functools.partial(_stored_call, whole_call, self, lm, reqtype, store_sampled=True)
    return call_in_chunks(call, requests, size, min_requests=concurrent_requests(lm))


def _finalize_keeping_responses(finalize, self, *, success: bool, **kwargs):
    import sqlite3

    stored = None if success else _responses_stored(self)
    if stored is not None and (run := run_of(self)) is not None:  # said in the stopped run's last line
        # (stop_cleanly_on_sigterm), beside the cache's name
        note_kept_on_stop(run, f"this run stored {stored} model response(s) there", first=True)
    try:
        finalize(self, success=True, **kwargs)
        guard = getattr(self, "_lmms_egoplan_storing", None)
        if guard is not None and guard.not_stored:  # answers its audit log may hold: the next run replays them
            Path(self._run_dir, ".merged").unlink(missing_ok=True)
    except (OSError, sqlite3.Error) as error:  # a full disk: the run's folder keeps them for the next run
        _drop_ownerless_lock(self._cache_root)
        logger.warning(f"ResponseCache: this run's responses could not be merged into {self._cache_root} "
                       f"({storage_failure(error, self._cache_root)}); they are kept in {self._run_dir}, which "
                       f"the next run with --use_cache {self._cache_root} merges")


def _responses_stored(cache: Any) -> int | None:
    """How many responses this run stored (its own database, before the merge); None where it cannot be read."""
    import sqlite3

    try:
        return cache.db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except (AttributeError, sqlite3.Error):  # closed, or never opened
        return None


def _create_recovering(create, cls, cache_root: str, **kwargs):
    import sqlite3

    root = cache_folder(cache_root)
    rebuild_unreadable_cache(root)
    recover_killed_runs(root)
    try:
        cache = create(cls, cache_root, **kwargs)
        _claim_run_folder(cache)
    except (OSError, sqlite3.Error) as error:
        where = getattr(error, "filename", None) or _database_being_opened(error) or root
        advice = ("Free space on its disk (or point --use_cache at a folder on another disk)" if disk_full(error, root)
                  else "Point --use_cache at a folder this run can write (a read-only one cannot take a response)")
        raise StorageError(f"--use_cache {root}: the response cache cannot store responses there "
                           f"({storage_failure(error, root)}: {where}); the responses it holds are kept. {advice} and "
                           f"run again") from None
    _GuardedStoring.guard(cache)
    return cache


def cache_folder(cache_root: str) -> str:
    """The folder of a response cache lmms-eval opens at ``cache_root`` (``--use_cache``: a folder, or its .db)."""
    return os.path.abspath(os.path.dirname(cache_root) if cache_root.endswith(".db") else cache_root)


def join_response_cache(run: SuiteRun, cache: Any) -> None:
    """Hand ``run`` the response cache its evaluation opened (it says where the run's responses are kept), and the
    cache the run (the seeds that key its sampled answers, what a stopped run keeps)."""
    hand_over(run, cache)
    run.response_cache_root = cache_folder(cache._cache_root)


_KEEP_RESPONSES = "durability.keep_responses_of_stopped_runs"


def key_suite_answers_by_what_changes_them() -> bool:
    """Key the response cache's answers of the suite's tasks by what changes an answer, and say what changed.

    Gap: ``lmms_eval/caching/response_cache.py:ResponseCache.create`` fingerprints each task by its whole config
    (``dump_config``), and a suite task's config records every resolved setting in its ``metadata``: the judge's
    URL, timeout and cache folder, the data folders, the settings file's path. A run stopped while judging and run
    again with the judge on another port, or with the same settings file at another path, served none of its answers
    (a 7B model generated them all again) and said nothing. Fix (the suite's tasks only): such a task's fingerprint is
    that of its ``answer_identity`` (``contract.adapter.KeysItsAnswers``: the config without its records and scoring,
    the settings that change answers, the data by content), recorded in the cache's ``meta`` table beside the
    answers; a run whose answer identity differs from the one the cache recorded for the task says which settings
    moved before it computes the answers again, and a cache holding a task's answers with no record (an earlier
    lmms-egoplan's, keyed by the whole config) is said not to be served, and why.

    Bug, in the same keys (every task's): ``lmms_eval/utils.py:get_lmms_eval_cache_version``, which ``create`` puts in
    every key, is the commit ``git describe`` finds from the folder above the ``lmms_eval`` package; for an
    installed lmms-eval that is ``site-packages``, and where the virtual environment lies inside a git repository (a
    project's ``.venv``, this suite's checkout) it is that repository's commit: any commit or pull there made every
    stored answer unreachable, silently (the warning lmms-eval has for it reads the run's new database). Fix (the
    whole cache: lmms-eval's own tasks' keys too): the commit only where lmms-eval runs from its own checkout (a
    ``.git`` beside its package, what lmms-eval means it for), else lmms-eval's release (``_cache_version``), as
    lmms-eval has it outside a repository. Returns whether it is in place.
    No patch retires it: suite policy (docs/upstream/README.md).
    """
    if switched_off(_ANSWER_KEYS):
        return False
    if has_layer(_ANSWER_KEYS, *_CREATE):
        return True
    if not affected_release():
        return False
    add_layer(_ANSWER_KEYS, *_CREATE, _create_keying_answers)
    return True


_ANSWER_KEYS = "durability.key_suite_answers_by_what_changes_them"
_CREATE = ("lmms_eval.caching.response_cache", "ResponseCache.create")
# The meta key of what a suite task's stored answers were made with (its answer identity, as JSON).
_ANSWERS_MADE_WITH = "lmms_egoplan.answers_made_with:"


def _create_keying_answers(create, cls, cache_root: str, **kwargs):
    import re
    import sqlite3

    from lmms_eval.utils import hash_string

    from lmms_egoplan.contract.adapter import KeysItsAnswers

    cache = create(cls, cache_root, **kwargs)
    cache._eval_version = _cache_version(cache._eval_version)
    for name, task in _named_tasks(kwargs.get("task_dict") or {}):
        if not isinstance(task, KeysItsAnswers):
            continue
        # as lmms-eval writes a config: a function's address is no part of it
        identity = re.sub(r" at 0x[0-9a-fA-F]+>", ">", json.dumps(task.answer_identity(), sort_keys=True, default=str))
        cache._task_fingerprints[name] = hash_string(identity)[:16]
        _say_what_moved(cache, name, json.loads(identity))
        try:
            cache.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (_ANSWERS_MADE_WITH + name,
                                                                                    identity))
            cache.db.commit()
        except sqlite3.Error as error:
            logger.warning(f"ResponseCache: what task {name}'s answers are made with is not recorded in "
                           f"{cache.db_path} ({error}): a later run cannot say what changed")
    return cache


def _cache_version(chosen: str) -> str:
    """The lmms-eval version in the response cache's keys: ``chosen`` (lmms-eval's) where lmms-eval runs from its own
    git checkout, else its release (not the commit of a repository that merely holds the environment)."""
    import lmms_eval

    if Path(lmms_eval.__file__).resolve().parents[1].joinpath(".git").exists():
        return chosen
    return version("lmms-eval")


def _named_tasks(task_dict: Mapping) -> list[tuple[str, Any]]:
    """The tasks of lmms-eval's task dict by name, those of groups included (as ``ResponseCache.create`` walks it)."""
    named = []
    for name, task in task_dict.items():
        named += _named_tasks(task) if isinstance(task, dict) else [(name, task)]
    return named


def _say_what_moved(cache: Any, task: str, identity: dict) -> None:
    """Say, before the answers are computed again, why the answers the cache holds of ``task`` are not served: the
    settings, config keys or data that changed since they were recorded, or the cache's key that changed with an
    earlier lmms-egoplan."""
    import sqlite3

    if cache._shared_db is None:
        return
    try:
        record = cache._shared_db.execute("SELECT value FROM meta WHERE key = ?",
                                          (_ANSWERS_MADE_WITH + task,)).fetchone()
        held = cache._shared_db.execute("SELECT COUNT(*) FROM responses WHERE task_name = ?", (task,)).fetchone()[0]
    except sqlite3.Error:  # lmms-eval opened it read-only; one it cannot read it says of itself
        return
    if record is None:
        if held:
            logger.warning(f"ResponseCache: the {held} answers of task {task} in {cache._cache_root} were stored by an "
                           f"earlier lmms-egoplan, keyed by the task's whole config (the judge's URL and folders, the "
                           f"settings file's path included); they are not served: this run computes them again")
        return
    moved = _differences(json.loads(record[0]), identity)
    if moved:
        logger.warning(f"ResponseCache: task {task}'s answers in {cache._cache_root} were made with other settings "
                       f"({'; '.join(moved)}); they are kept for a run with those, and this run computes its own")


def _differences(before: dict, now: dict) -> list[str]:
    """What changes an answer and differs between two answer identities, each "<what> <before> -> <now>"."""
    moved = [f"{part} {key} {old.get(key)!r} -> {new.get(key)!r}"
             for part, old, new in (("setting", before.get("settings", {}), now["settings"]),
                                    ("config", before.get("config", {}), now["config"]))
             for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]
    if before.get("data") != now["data"]:
        moved.append(f"data {before.get('data')} -> {now['data']}")
    return moved


# The response cache of a run of the suite's tasks that names none, under its --output_path.
DEFAULT_RESPONSE_CACHE = "response_cache"


def keep_responses_by_default(run: SuiteRun, use_cache: str | None, cli_args: Any) -> str | None:
    """The ``use_cache`` of a run that names the suite's tasks: the one it names, else
    ``<--output_path>/response_cache`` (None without an output path, or where switched off).

    Gap: lmms-eval keeps a run's model responses only with ``--use_cache``; a run without it that is stopped
    (Ctrl-C, SIGTERM), killed, or whose judge dies keeps none of them: hours of generation are paid for again.
    Fix (the suite's policy, not an lmms-eval bug): a run that names a suite task and no ``--use_cache`` gets
    lmms-eval's own response cache under its output folder, said in one line; with
    ``keep_responses_of_stopped_runs`` every response is stored as it is computed, and the same command resumes
    from them (the cache is keyed by model, model_args, task config and request, so one folder serves every
    model and task). Every task of such a run is cached, lmms-eval's own in a mixed run too (lmms-eval scopes its
    cache by run, not by task). ``LMMS_EGOPLAN_COMPAT_OFF=durability.keep_responses_by_default`` leaves runs
    without a cache.
    No patch retires it: suite policy (docs/upstream/README.md).
    """
    output_path = getattr(cli_args, "output_path", None)
    if use_cache is not None or not output_path or switched_off(_BY_DEFAULT):
        return use_cache
    root = str(Path(output_path).absolute() / DEFAULT_RESPONSE_CACHE)
    logger.info(f"lmms-egoplan: no --use_cache given: the model's responses are kept as they are computed in the "
                f"response cache {root}; the same command (the same --output_path) resumes from them after a stop")
    note_in_place(_BY_DEFAULT)  # listed for the runs it gave a cache only
    counts_when_in_effect(_BY_DEFAULT, lambda run: run is not None and run.default_response_cache is not None)
    run.default_response_cache = root
    return root


_BY_DEFAULT = "durability.keep_responses_by_default"
_RESPONSE_CACHE = "lmms_eval.caching.response_cache"
_CACHE_EXECUTE = (_RESPONSE_CACHE, "ResponseCache.execute")


def keep_failed_requests_out_of_the_response_cache() -> bool:
    """Make ``--use_cache`` ask a failed model request again instead of serving its failure.

    Bug: ``lmms_eval/caching/response_cache.py:ResponseCache._is_valid_response`` takes any non-empty
    text for a response, lmms-eval's failure placeholders too (``[LMMS_EVAL_REQUEST_FAILED after N
    retries] ...``, ``[LMMS_EVAL_BUDGET_EXCEEDED]``, which its API backends return in place of an
    answer: ``lmms_egoplan.core.failed_requests``): ``ResponseCache.execute`` stores the failure as the
    request's response, and every later run with the same cache is served it and never asks again.
    Fix: a failure placeholder is no valid response (neither ``execute`` nor ``_store_as_computed``
    stores it), and one a cache already holds (written before, or replayed from a run folder's audit
    log by ``_replay_audit_log``) is a miss (``ResponseCache._lookup``): the request is sent again.
    Answered requests are stored and served as before. Returns whether the workaround is in place.
    Retired by docs/upstream/14-failed-requests-not-cached.patch.
    """
    from lmms_egoplan.core.failed_requests import is_failure_placeholder

    if switched_off(_NO_FAILURES_CACHED):
        return False
    if has_layer(_NO_FAILURES_CACHED, _RESPONSE_CACHE, "ResponseCache._lookup"):
        return True
    if not affected_release():
        return False

    def answered_only(is_valid, response: Any, request_type: str) -> bool:
        return not is_failure_placeholder(getattr(response, "text", response)) and is_valid(response, request_type)

    def lookup_answered(lookup, self, cache_key: str) -> Any:
        found = lookup(self, cache_key)
        return None if is_failure_placeholder(found) else found

    add_layer(_NO_FAILURES_CACHED, _RESPONSE_CACHE, "ResponseCache._is_valid_response", answered_only)
    add_layer(_NO_FAILURES_CACHED, _RESPONSE_CACHE, "ResponseCache._lookup", lookup_answered)
    return True


_NO_FAILURES_CACHED = "durability.keep_failed_requests_out_of_the_response_cache"


def resume_sampled_runs(run: SuiteRun, seeds: Sequence[Any]) -> bool:
    """Make the response cache keep and serve the sampled answers of the suite's tasks, keyed by the run's seeds.

    Gap: ``lmms_eval/caching/response_cache.py:ResponseCache.execute`` neither stores nor serves a generation
    request that ``is_deterministic`` calls sampled (``temperature > 0``, ``do_sample``): a run of a sampled protocol
    (Cosmos-Reason1's ``official_reasoning``: temperature 0.6, 1,024 new tokens) that stops or is killed after hours
    of generation resumes from nothing. Fix (the suite's tasks only; lmms-eval's own keep lmms-eval's rule): such a
    request is stored and served under lmms-eval's own key with the run's four seeds (``--seed`` as in force:
    lmms-eval's default ``0,1234,1234,1234`` where none is given) added to its task fingerprint
    (``response_key``; ``canonicalize_gen_kwargs`` drops any key but the sampling ones). The same command with the
    same cache resumes from the answers it had; so does any rerun with the same seeds and cache, which reuses the
    samples instead of drawing them again (its hits line says so); another ``--seed`` or another cache draws new
    ones. A run with a seed unset (``None`` among the first three) keeps lmms-eval's rule. How often the suite's
    backends asked each stored answer again (``models.empty_answer_retry``) is kept beside it and recorded again
    when it is served (``_serve_suite_answers``), so that a resumed run counts every retry. Called once the run's
    suite tasks are named (``tasks.check_suite_tasks_before_the_model``), with the seeds ``simple_evaluate`` sets,
    which ``run`` keeps. Returns whether sampled answers are kept in this run.
    No patch retires it: suite policy (docs/upstream/README.md).
    """
    run.sampling_seeds = None
    if switched_off(_SAMPLED) or not affected_release():
        return False
    if not has_layer(_SAMPLED, *_CACHE_EXECUTE):
        add_layer(_SAMPLED, *_CACHE_EXECUTE, _serve_suite_answers)  # also serves the retry records of greedy answers
    if any(seed is None for seed in seeds[:3]):
        logger.info(f"lmms-egoplan: --seed {_seed_text(seeds)} leaves a seed unset: the suite's sampled answers are "
                    f"neither kept nor served by the response cache (each run draws them anew)")
        return False
    run.sampling_seeds = tuple(seeds)
    return True


_SAMPLED = "durability.resume_sampled_runs"
_RETRY_RECORD = "lmms_egoplan.retried:"


def _seed_text(seeds: Sequence[Any]) -> str:
    return ",".join(str(seed) for seed in seeds)


@functools.lru_cache(maxsize=1)
def _suite_tasks() -> frozenset[str]:
    """The task names the suite's task YAMLs declare (``task: <name>``), read as text: the response cache knows a
    request's task by its name only."""
    import importlib.util
    import re

    folders = importlib.util.find_spec(f"{SUITE_PLUGIN}.tasks").submodule_search_locations
    declared = re.compile(r"^task:[ \t]*([\w.-]+)[ \t]*$", re.MULTILINE)
    return frozenset(name for folder in folders for path in Path(folder).rglob("*.yaml")
                     for name in declared.findall(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class StoredKey:
    """The response cache's key of a request's answer: lmms-eval's, or the seeded one of a suite task's sampled
    answer (``sampled``); ``suite_answer``: a generation answer of a suite task, stored with its retry record."""

    key: str
    gen_kwargs: dict
    sampled: bool
    suite_answer: bool


def response_key(cache: Any, reqtype: str, request: Any) -> StoredKey | None:
    """The key ``cache`` stores ``request``'s answer under; None: it stores none (a sampled request of lmms-eval's own
    tasks, or of a run that keeps no sampled answers: ``resume_sampled_runs``)."""
    from lmms_eval.caching.response_cache import (
        _extract_content_hash,
        compute_cache_key,
        extract_gen_kwargs,
        is_deterministic,
    )

    gen_kwargs = extract_gen_kwargs(request)
    fingerprint = cache._task_fingerprints.get(request.task_name, "")
    suite_answer = reqtype == "generate_until" and request.task_name in _suite_tasks()
    sampled = not is_deterministic(reqtype, gen_kwargs)
    if sampled:
        run = run_of(cache)
        seeds = run.sampling_seeds if run is not None else None
        if not suite_answer or seeds is None:
            return None
        fingerprint += f"|seed={_seed_text(seeds)}"
    key = compute_cache_key(request_type=reqtype, task_name=request.task_name, doc_id=request.doc_id,
                            gen_kwargs=gen_kwargs, idx=request.idx, content_hash=_extract_content_hash(request),
                            task_fingerprint=fingerprint, model_fingerprint_hash=cache._model_fingerprint_hash,
                            eval_version=cache._eval_version)
    return StoredKey(key, gen_kwargs, sampled, suite_answer)


def _serve_suite_answers(execute, self, lm, reqtype, requests):
    """The generation requests of the suite's tasks that ``self`` holds an answer to, served with their retry records
    (each marked on its request, ``core.request_facts``, as the run that computed it made it); the others, sampled
    answers of the suite's tasks among them, go on to lmms-eval's ``execute`` (and are stored as computed,
    ``_store_as_computed``)."""
    if reqtype != "generate_until" or not any(request.task_name in _suite_tasks() for request in requests):
        return execute(self, lm, reqtype, requests)
    results, asked, sampled = [None] * len(requests), [], 0
    for index, request in enumerate(requests):
        key = response_key(self, reqtype, request) if request.task_name in _suite_tasks() else None
        answer = self._lookup(key.key) if key is not None else None
        if answer is None:
            asked.append(index)
            continue
        results[index], self._hits, sampled = answer, self._hits + 1, sampled + key.sampled
        mark_retries(request, _retry_record(self, key.key))
    if len(asked) < len(requests):
        reused = (f"; {sampled} sampled with --seed {_seed_text(run_of(self).sampling_seeds)} by an earlier run, "
                  f"reused: another --seed or another --use_cache draws new samples") if sampled else ""
        logger.info(f"ResponseCache: {len(requests) - len(asked)}/{len(requests)} cache hits (the suite's answers "
                    f"with their retry records{reused})")
    for index, response in zip(asked, execute(self, lm, reqtype, [requests[index] for index in asked])
                               if asked else []):
        results[index] = response
    return results


def _keep_retry_record(cache: Any, key: str, record: AnswerRetries) -> None:
    """Keep how often the answer stored under ``key`` was asked again beside it, in the cache's ``meta`` table,
    which lmms-eval's merges (``ResponseCache.merge_shards``) copy with the responses; committed with the answer
    (``ResponseCache._store``). An answer asked once leaves no record (one an earlier answer left is removed)."""
    import json
    import sqlite3

    retries, still_empty = record
    try:
        if retries:
            cache.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             (_RETRY_RECORD + key, json.dumps([retries, still_empty])))
        else:
            cache.db.execute("DELETE FROM meta WHERE key = ?", (_RETRY_RECORD + key,))
    except (OSError, sqlite3.Error) as error:
        _GuardedStoring.of(cache).not_stored.append(storage_failure(error, os.path.dirname(cache.db_path)))


def _retry_record(cache: Any, key: str) -> AnswerRetries:
    """(retries, still empty) kept beside the answer under ``key``, from the database that holds the answer (this
    run's, else the merged cache); (0, False): asked once."""
    import json
    import sqlite3

    for database in (cache.db, cache._shared_db):
        if database is None:
            continue
        try:
            if database.execute("SELECT 1 FROM responses WHERE cache_key = ?", (key,)).fetchone() is None:
                continue
            row = database.execute("SELECT value FROM meta WHERE key = ?", (_RETRY_RECORD + key,)).fetchone()
        except sqlite3.Error:  # the answer is served; its record is lost with the database
            return AnswerRetries()
        if row is None:
            return AnswerRetries()
        retries, still_empty = json.loads(row[0])
        return AnswerRetries(int(retries), bool(still_empty))
    return AnswerRetries()


def _database_being_opened(error: BaseException) -> str | None:
    """The database file a ``ResponseCache`` was opening when ``error`` was raised (SQLite's errors name none)."""
    import traceback

    from lmms_eval.caching.response_cache import ResponseCache

    caches = [frame.f_locals.get("self") for frame, _ in traceback.walk_tb(error.__traceback__)]
    opening = [cache.db_path for cache in caches
               if isinstance(cache, ResponseCache) and getattr(cache, "db_path", None)]
    return opening[-1] if opening else None


def _store_as_computed(cache: Any, reqtype: str, *, sampled_only: bool = False) -> Callable[[Any, Any], None]:
    """Store one response the way ``ResponseCache.execute`` stores it after the backend returns (the
    same key, validity rule and row); execute stores it again then (the same row). A sampled answer of a suite task
    is stored under its seeded key (``resume_sampled_runs``), with how often the backend asked it again
    (``_keep_retry_record``); ``sampled_only``: those only."""

    def store(request: Any, response: Any) -> None:
        key = response_key(cache, reqtype, request)
        if key is None or (sampled_only and not key.sampled) or not cache._is_valid_response(response, reqtype):
            return
        answer = cache._extract_cacheable(response)
        if key.suite_answer:
            _keep_retry_record(cache, key.key, retries_of(request))
        cache._store(key.key, reqtype, request.task_name, request.doc_id, request.idx, key.gen_kwargs, answer)
        _GuardedStoring.of(cache).stop_if_not_stored()  # inside the backend's loop: it computes nothing more

    return store


class _GuardedStoring:
    """A response cache's writes, guarded against a full disk: ``ResponseCache._store`` and
    ``_log_to_audit`` (called by lmms-eval's storing loop, one response at a time) count a response
    they cannot store instead of raising in the middle of the loop, and the audit log keeps whole
    lines; ``stop_if_not_stored`` then ends the run before the backend computes more."""

    def __init__(self, cache: Any):
        self.cache = cache
        self.not_stored: list[str] = []  # why, per response the cache could not store
        self.audit_failure: str | None = None
        store, log = cache._store, cache._log_to_audit
        cache._store = functools.partial(self._store, store)
        cache._log_to_audit = functools.partial(self._log, log)
        cache._lmms_egoplan_storing = self

    @classmethod
    def guard(cls, cache: Any) -> "_GuardedStoring":
        """The cache's guard, made once (a guard around a guard would keep the failures to itself)."""
        return getattr(cache, "_lmms_egoplan_storing", None) or cls(cache)

    @staticmethod
    def of(cache: Any) -> "_GuardedStoring":
        return cache._lmms_egoplan_storing

    def _store(self, store: Callable, *args, **kwargs) -> None:
        import sqlite3

        try:
            store(*args, **kwargs)
        except (OSError, sqlite3.Error) as error:
            self.not_stored.append(storage_failure(error, os.path.dirname(self.cache.db_path)))

    def _log(self, log: Callable, *args, **kwargs) -> None:
        if self.audit_failure:
            return
        path = self.cache.audit_path
        whole = os.path.getsize(path)
        try:
            log(*args, **kwargs)
        except OSError as error:
            self.audit_failure = storage_failure(error, os.path.dirname(path))
            try:
                self.cache._audit_file.close()  # drops what its buffer could not write
            except OSError:
                pass
            os.truncate(path, whole)  # a cut line would join the next run's first line
            self.cache._audit_file = open(path, "a", encoding="utf-8")

    def stop_if_not_stored(self) -> None:
        """Raise StorageError if a response could not be stored: how many, where, what is kept."""
        if not (self.not_stored or self.audit_failure):
            return
        import sqlite3

        cache = self.cache
        try:
            kept = f"the {cache.db.execute('SELECT COUNT(*) FROM responses').fetchone()[0]} responses it stored"
        except (AttributeError, sqlite3.Error):  # a count for the message only
            kept = "the responses it stored"
        count = len(self.not_stored)
        problems = ([f"{count} model response{'s' if count > 1 else ''} just computed could not be stored in "
                     f"{cache.db_path} ({self.not_stored[0]})"] if count else [])
        problems += [f"its audit log {cache.audit_path} could not take a line ({self.audit_failure}; it ends with its "
                     f"last whole line)"] if self.audit_failure else []
        raise StorageError(f"--use_cache {cache._cache_root}: {'; '.join(problems)}. The run stopped before the model "
                           f"computed more, so that none is paid for twice; {kept} are kept in {cache._run_dir}, which "
                           f"the next run merges. Free space on that disk (or point --use_cache at another) and run "
                           f"the same command again: it computes only what is not stored")


_OWNER_SUFFIX = ".owner.json"


def _claim_run_folder(cache: Any) -> None:
    """Record this process as the writer of its rank's database, so that a later run can tell that
    it died; a run folder reused under the same id (e.g. a requeued Slurm job) is unmerged again."""
    import json
    import socket

    Path(cache._run_dir, ".merged").unlink(missing_ok=True)
    owner = {"host": socket.gethostname(), "pid": os.getpid(), "started": process_start(os.getpid())}
    # whole or absent: a cut owner file would leave the folder to a warning at every later recovery
    write_atomically(Path(cache._run_dir, f"rank_{cache._global_rank}.db{_OWNER_SUFFIX}"), json.dumps(owner))


def recover_killed_runs(cache_root: str) -> int:
    """Merge into ``<cache_root>/cache.db`` the run folders whose writers (their owner files) are all
    processes of this machine that no longer run; marks each merged. Returns the responses merged."""
    import json
    import socket
    import sqlite3
    from glob import glob

    from lmms_eval.caching.response_cache import ResponseCache, _merge_lock, _touch_text

    runs = Path(cache_root, "runs")
    if not runs.is_dir():
        return 0
    merged = 0
    host = socket.gethostname()
    try:
        with _merge_lock(str(runs / ".merge.lock"), timeout_seconds=60):
            for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
                try:
                    owners = [json.loads(p.read_text()) for p in folder.glob(f"*{_OWNER_SUFFIX}")]
                    if (folder / ".merged").exists() or not owners or any(
                            o.get("host") != host or process_runs(o.get("pid"), o.get("started")) for o in owners):
                        continue
                    replayed = replay_whole_audit_lines(folder)
                    databases = sorted(glob(str(folder / "rank_*.db")))
                    count = ResponseCache.merge_shards(databases, str(Path(cache_root, "cache.db"))) if databases else 0
                    ResponseCache.merge_audit_logs(sorted(glob(str(folder / "rank_*.audit.jsonl"))),
                                                   str(Path(cache_root, "cache.audit.jsonl")))
                except (OSError, ValueError, sqlite3.Error) as error:  # recovery must not stop the new run
                    logger.warning(f"ResponseCache: could not recover the killed run in {folder}: {error}")
                    continue
                _touch_text(str(folder / ".merged"), "recovered by lmms_egoplan from a run that was killed\n")
                logger.info(f"ResponseCache: recovered {count} responses of a killed run ({folder}) into {cache_root}"
                            + (f", {replayed} of them from its audit log only" if replayed else ""))
                merged += count
    except TimeoutError as error:
        logger.warning(f"ResponseCache: killed runs not recovered now (merge lock busy): {error}")
    except OSError as error:  # the lock cannot be written (a full disk): their folders wait for a later run
        _drop_ownerless_lock(cache_root)
        logger.warning(f"ResponseCache: killed runs not recovered now ({storage_failure(error, cache_root)})")
    return merged


def rebuild_unreadable_cache(cache_root: str) -> int:
    """Set aside a ``<cache_root>/cache.db`` that is no readable SQLite database (a copy cut short, a damaged disk),
    and build it again from the run folders lmms-eval keeps under ``runs/``, those it merged before: each finished
    run's responses are still there. Returns the responses merged. lmms-eval only warns that it cannot open the
    database, computes every answer again, and fails to merge them into it, in that run and every later one."""
    import sqlite3
    import time
    from glob import glob

    from lmms_eval.caching.response_cache import ResponseCache, _merge_lock

    database = Path(cache_root, "cache.db")
    if _unreadable_database(database) is None:
        return 0
    runs = Path(cache_root, "runs")
    merged = 0
    try:
        with _merge_lock(str(runs / ".merge.lock"), timeout_seconds=60):
            if (problem := _unreadable_database(database)) is None:  # another run rebuilt it meanwhile
                return 0
            aside = f"cache.db.unreadable-{time.strftime('%Y%m%dT%H%M%S')}"
            for suffix in ("", "-wal", "-shm"):  # its journal would be read into the new one
                if Path(f"{database}{suffix}").exists():
                    os.replace(f"{database}{suffix}", Path(cache_root, aside + suffix))
            finished = sorted(folder for folder in runs.glob("*") if (folder / ".merged").exists())
            for folder in finished:
                replay_whole_audit_lines(folder)
                merged += ResponseCache.merge_shards(sorted(glob(str(folder / "rank_*.db"))), str(database))
    except (TimeoutError, OSError, sqlite3.Error) as error:
        why = storage_failure(error, cache_root)
        raise StorageError(f"--use_cache {cache_root}: its database {database} is no readable SQLite database, and it "
                           f"could not be rebuilt from the run folders under {runs} ({why}); move it away and run "
                           f"again") from None
    logger.warning(f"ResponseCache: {database} is no readable SQLite database ({problem}); it is kept as "
                   f"{Path(cache_root, aside)}, and was built again with the {merged} responses of {len(finished)} "
                   f"finished run(s) kept under {runs}")
    return merged


def _unreadable_database(path: Path) -> str | None:
    """Why the SQLite database ``path`` cannot be read (not a database, damaged, empty: SQLite never leaves a database
    of 0 bytes, a copy cut short does), or None (none there; or readable; or a problem that is no damage, such as a
    lock, which lmms-eval reports itself)."""
    import sqlite3
    import urllib.parse
    from contextlib import closing

    if not path.is_file():
        return None
    if not path.stat().st_size:
        return "an empty file"
    try:
        with closing(sqlite3.connect(f"file:{urllib.parse.quote(str(path))}?mode=ro", uri=True, timeout=60)) as db:
            db.execute("SELECT COUNT(*) FROM responses").fetchone()
    except sqlite3.DatabaseError as error:
        if getattr(error, "sqlite_errorcode", 0) & 0xFF in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
            return str(error)
    return None


def replay_whole_audit_lines(folder: Path) -> int:
    """Store in each rank database of the run ``folder`` the answers its audit log holds whole and the database
    lacks; returns how many. lmms-eval writes a response's audit line before it stores the response: a run killed
    between the two, or whose disk had room for the line but not for the database's next page, computed answers
    that only the line keeps (lmms-eval replays a log only when the same run reopens it). A line counts as lmms-eval
    stores: deterministic, with its key, and a valid response (``ResponseCache._is_valid_response``: no failure)."""
    import sqlite3
    from contextlib import closing

    from lmms_eval.caching.response_cache import ResponseCache, _deserialize_response

    replayed = 0
    for audit in sorted(folder.glob("rank_*.audit.jsonl")):
        database = audit.with_name(audit.name.removesuffix(".audit.jsonl") + ".db")
        if not database.is_file():
            continue
        with closing(sqlite3.connect(database, timeout=30)) as db:
            for line in audit.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    row = (record["cache_key"], record["request_type"], record["task_name"], record["doc_id"],
                           record.get("idx", 0), record.get("gen_kwargs", "{}"), record["response"],
                           record.get("created_at", 0))
                except (ValueError, TypeError, KeyError):  # a line cut by the kill
                    continue
                if (not row[0] or not record.get("deterministic", True)
                        or not ResponseCache._is_valid_response(_deserialize_response(row[6]), row[1])):
                    continue
                replayed += db.execute("INSERT OR IGNORE INTO responses (cache_key, request_type, task_name, doc_id, "
                                       "idx, gen_kwargs, response, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                                       row).rowcount
            db.commit()
    return replayed


def _drop_ownerless_lock(cache_root: str) -> None:
    """Remove the merge lock a full disk left without its owner file (lmms-eval's ``_merge_lock`` makes the
    folder, then fails to write ``owner.json`` and never removes the folder: every later merge would wait
    for it, time out and merge nothing). A lock whose owner file was written is another run's, kept."""
    lock = Path(cache_root, "runs", ".merge.lock")
    owner = lock / "owner.json"
    try:
        if lock.is_dir() and not (owner.exists() and owner.stat().st_size):
            owner.unlink(missing_ok=True)
            lock.rmdir()
    except OSError:
        pass


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux: clock ticks since boot), telling it from a later
    process given the same id; None where it cannot be read."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_runs(pid: Any, started: str | None) -> bool:
    if not isinstance(pid, int):
        return True  # unknown: leave the folder alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    return started is None or process_start(pid) in (None, started)


RESPONSE_CHUNK_BATCHES = 4

RESPONSE_CHUNK_MIN_DOCS = 4


def _batch_size(lm) -> int:
    try:
        return max(1, int(getattr(lm, "batch_size", 1)))
    except (TypeError, ValueError):  # e.g. "auto"
        return 1


def concurrent_requests(lm) -> int:
    """How many requests a backend runs at once: lmms-eval's API backends built on its concurrency control (they
    have ``adaptive_concurrency``) run ``num_concurrent`` (``openai``, ``gemini``) or ``num_cpus`` (``async_openai``),
    up to ``adaptive_config.max_concurrency`` when adaptive; any other backend, one."""
    if not hasattr(lm, "adaptive_concurrency"):
        return 1
    if lm.adaptive_concurrency:
        return max(1, int(lm.adaptive_config.max_concurrency))
    return max(1, int(getattr(lm, "num_concurrent", getattr(lm, "num_cpus", 1)) or 1))


def call_in_chunks(call, requests: list, size: int, min_requests: int = 0) -> list:
    """``call(chunk)`` for each chunk of at least ``size`` documents and ``min_requests`` requests (the last one:
    what is left), responses concatenated in order.

    When a chunk's call fails, its documents are called one at a time: those before the failing
    document get their responses (and the cache stores them) at the cost of computing at most
    ``size - 1`` documents twice, once, in a run that is stopping anyway; the failing document
    raises its error again (a failure that does not recur, e.g. memory taken by a batch, is gone).
    """
    responses = []
    for chunk in _document_chunks(requests, size, min_requests):
        try:
            responses += call(chunk)
        except StorageError:  # the model answered; the disk could not keep it: calling again would pay twice
            raise
        except Exception:
            documents = _document_chunks(chunk, 1)
            if len(documents) == 1:
                raise
            for document in documents:
                responses += call(document)
    return responses


def _document_chunks(requests: list, size: int, min_requests: int = 0) -> list[list]:
    """``requests`` in order, cut at document boundaries into runs of ``size`` documents, more where a run needs
    more to hold ``min_requests`` requests (a document's requests, e.g. the four candidates of a question, stay
    together)."""
    chunks: list[list] = []
    documents = 0
    previous = None
    for request in requests:
        document = (request.task_name, request.doc_id)
        if document != previous:
            if not chunks or (documents >= size and len(chunks[-1]) >= min_requests):
                chunks.append([])
                documents = 0
            documents += 1
            previous = document
        chunks[-1].append(request)
    return chunks


def stop_cleanly_on_sigterm() -> bool:
    """Make SIGTERM (what Slurm and Kubernetes send on preemption), and Ctrl-C (SIGINT) in a run of lmms-eval's CLI,
    stop a run the way an error does, its last line saying what is kept and how to resume.

    Bug: lmms-eval installs no SIGTERM handler, so the process ends at once, in the middle of a
    pass: no ``finally`` runs, ``ResponseCache.finalize`` never merges what the run stored, nothing
    says what happened, and the run's work is lost like a SIGKILL's. Ctrl-C raises Python's
    ``KeyboardInterrupt``, which lmms-eval's CLI does not catch: the cleanup runs, but the run ends on
    a traceback of wherever the signal fell, and nothing says what was kept or how to resume. Fix:
    SIGTERM raises ``RunStopped`` (a ``SystemExit`` with status 128 + 15 = 143, as a shell reports a
    process ended by SIGTERM) in the main thread; Ctrl-C raises a ``KeyboardInterrupt`` whose traceback
    is not printed, so that Python ends the process by SIGINT once the cleanup and exit handlers have
    run, as on any Ctrl-C (a shell reports 130, and a shell script running the command stops with it:
    bash goes on with a script's next command where the command exits 130 instead). Either way
    lmms-eval's cleanup runs (the response cache merges what was computed,
    ``keep_responses_of_stopped_runs``; the judge engine stores the judgements that arrive and asks
    nothing more), and the last line says what is kept and how to resume. A second SIGTERM or
    Ctrl-C ends the process at once (the signals' defaults: a user is never trapped). Each signal
    is left alone where a handler other than Python's default is installed, or outside the main
    thread; Ctrl-C also outside lmms-eval's CLI (``simple_evaluate`` called from Python, a notebook:
    there the caller handles ``KeyboardInterrupt``). A SIGTERM or Ctrl-C during a later run of the process that does
    not use the suite (``replacements.uses_the_suite``) gets Python's own handling, as lmms-eval's does. Returns
    whether the workaround is in place.
    Retired by docs/upstream/09-sigterm.patch.
    """
    import threading

    if switched_off(_STOP_CLEANLY) or not affected_release():
        return False
    may_install = threading.current_thread() is threading.main_thread()  # signal.signal's own condition
    in_the_cli = _runs_of_the_command() is not None
    for signum, python_default in _STOP_SIGNALS.items():
        if (may_install and signal.getsignal(signum) == python_default
                and (signum != signal.SIGINT or in_the_cli)):
            signal.signal(signum, _stop_on_signal)
    handled = any(signal.getsignal(signum) is _stop_on_signal for signum in _STOP_SIGNALS)
    if handled:
        note_in_place(_STOP_CLEANLY)
    return handled


_STOP_CLEANLY = "durability.stop_cleanly_on_sigterm"
# The signals that stop a run cleanly, each with Python's own handling of it: the only one the workaround replaces.
_STOP_SIGNALS = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


class RunStopped(SystemExit):
    """The run was asked to stop (SIGTERM); its exit status is 128 + the signal number. ``run``: the run it
    stopped, as the ``simple_evaluate`` wrapper that made it hands it over while the stop passes
    (``tasks.check_suite_tasks_before_the_model``; Ctrl-C's ``KeyboardInterrupt`` gets it the same way); None: a
    stop outside one."""

    run: SuiteRun | None = None


def _stop_on_signal(signum, frame) -> None:
    import atexit

    if not uses_the_suite():  # a run that is lmms-eval's alone: Python's own handling of the signal, as there
        if signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)  # KeyboardInterrupt
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    for stop_signal in _STOP_SIGNALS:  # a second stop, of either kind, ends the process at once
        signal.signal(stop_signal, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.write(f"lmms-egoplan: {signal.Signals(signum).name} received: stopping; what this run computed is "
                     f"being kept\n")
    sys.stderr.flush()
    stopped = _interrupted() if signum == signal.SIGINT else RunStopped(128 + signum)
    atexit.register(_report_stop, signum, stopped)  # after the run's cleanup, which says what it kept
    raise stopped


def _interrupted() -> KeyboardInterrupt:
    """Ctrl-C's stop: Python's own ``KeyboardInterrupt`` (its exact class: only that one makes the interpreter end by
    SIGINT once it has run the exit handlers), whose traceback the process's exception hook does not print."""
    interrupted = KeyboardInterrupt()
    print_exception = sys.excepthook

    def printing_all_but_the_stop(kind, error, traceback):
        if error is not interrupted:
            print_exception(kind, error, traceback)

    sys.excepthook = printing_all_but_the_stop  # the process is ending: the hook it ends with
    return interrupted


def _report_stop(signum: int, stopped: BaseException) -> None:
    name = signal.Signals(signum).name
    run = getattr(stopped, "run", None) or SuiteRun()
    if run.response_cache_root is not None:
        given = ("the same --output_path" if run.response_cache_root == run.default_response_cache
                 else f"with --use_cache {run.response_cache_root}")
        kept = (f"the model responses it computed are kept in the response cache {run.response_cache_root}; the same "
                f"command ({given}) resumes from them")
    else:
        kept = "it ran with neither --use_cache nor --output_path, so its model responses are not kept"
    sys.stdout.flush()
    sys.stderr.write(f"lmms-egoplan: stopped by {name} (exit status {128 + signum}); "
                     + "; ".join([kept, *run.kept_on_stop]) + "\n")
    sys.stderr.flush()


def note_kept_on_stop(run: SuiteRun, what: str, *, first: bool = False) -> None:
    """What else ``run`` keeps if it is stopped (e.g. "judgements already made are in the judge cache <dir>"),
    said when it stops (``stop_cleanly_on_sigterm``); ``first``: right after the response cache's name."""
    if what not in run.kept_on_stop:
        run.kept_on_stop.insert(0 if first else len(run.kept_on_stop), what)
