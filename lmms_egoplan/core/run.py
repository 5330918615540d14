"""What one evaluation learns as it goes, on an object handed to what takes part in it: ``SuiteRun``.

lmms-eval's ``simple_evaluate`` call makes one (``compat.tasks.check_suite_tasks_before_the_model``) and hands it
over in the open: to each suite task it builds (``harness.lmms_eval_task.SuiteTask.join_run``, which puts it on the
task's ``TaskContext.run``), to the run's results writer and response cache (``hand_over``: an attribute of
lmms-eval's object, read back with ``run_of``) and to the backend (``models.doc_requests.DocRequests.join_run``).
Two evaluations in one process have two of them. A task or backend built outside such a call (by a ``TaskManager``
directly) has one of its own. Facts of a single request (how often its answer was asked again) travel on the
request (``core.request_facts``), not here.
It names no type of the layers that fill it: it sits below all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(eq=False)
class SuiteRun:
    # lmms-eval's date-time of this run's files ("20261123_101010"): the ``datetime_str`` of its ``simple_evaluate``
    # call; a task's own run learns it at its first file (``harness.run_files.run_stamp``)
    stamp: str | None = None
    # Output folders this run claimed (``harness.output_folder.claim_output_folder``)
    claimed_folders: set[Path] = field(default_factory=set)
    # The --use_cache root this run opened (``compat.durability.keep_responses_of_stopped_runs``)
    response_cache_root: str | None = None
    # The response cache the suite gave a run that named none (``compat.durability.keep_responses_by_default``)
    default_response_cache: str | None = None
    # Why a run that computed its results must still exit non-zero (e.g. failed judgements): callables the
    # suite's tasks register (``compat.durability.ask_for_exit_status``), each returning None or
    # (exit status, the line saying what to do), given this run and the results and samples files written
    exit_reasons: list[Callable[[SuiteRun, list[Path]], tuple[int, str] | None]] = field(default_factory=list)
    # What lmms-eval has written of the run, once it writes its results (``compat.durability.WrittenFiles``)
    written: Any = None
    # What else a stopped run keeps, said when it stops (``compat.durability.note_kept_on_stop``)
    kept_on_stop: list[str] = field(default_factory=list)
    # The judges of this run: one engine per judge configuration, those whose preflight passed (with what
    # their server said answered it), and each judged task's judgements (``harness.judged``)
    judges: dict[Any, Any] = field(default_factory=dict)
    answering_judges: dict[Any, Any] = field(default_factory=dict)
    task_judgements: dict[str, Any] = field(default_factory=dict)
    # Each generative task's (failed, asked) model requests, once aggregated (``harness.failed_requests``)
    failed_requests: dict[str, tuple[int, int]] = field(default_factory=dict)
    # The token that closes a scored assistant turn and where it comes from ("</s> (generation_config)"),
    # as the run's likelihood backend found it (``models.likelihood.TurnEnd``), handed over as it joins the run
    # (``models.doc_requests.DocRequests.join_run``); None: the backend has none. The tasks that score it
    # (``harness.lmms_eval_task``); both are recorded in the results and samples files
    # (``compat.results.record_in_results``)
    turn_end: str | None = None
    turn_end_tasks: set[str] = field(default_factory=set)
    # Where the run's backend changed a task's protocol ({task: {setting: what it changed}}, warned once per task and
    # setting: its frame plan, ``models.doc_requests``; the empty answers it does not retry,
    # ``cosmos_reason1.task.on_backend``), recorded in the results (``compat.results.record_in_results``) and noted
    # in the report's row (``report.tables``)
    protocol_changes: dict[str, dict[str, str]] = field(default_factory=dict)
    # Scoring models the run's tasks share, by what builds them (ActPlan-1K's step matcher, with its LCS cache, and its
    # plan classifier; a sentence encoder per model and device, ``core.embeddings.run_encoder``, which ActPlan-1K and
    # RoboVQA share): built once a run, and again by the next, which may find other files (``shared_scorer``)
    scorers: dict[Any, Any] = field(default_factory=dict)
    # lmms-eval's four seeds of the run (random, numpy, torch, fewshot), which key the sampled answers of the suite's
    # tasks in the response cache (``compat.durability.resume_sampled_runs``); None: that run keeps none
    sampling_seeds: tuple[Any, ...] | None = None
    # What the run's tasks said once for all of them (a warning each of several tasks would give; e.g.
    # ``robovqa.task.on_backend``'s data layout a preset's lineage did not read), by a key of the caller's
    said_once: set[str] = field(default_factory=set)
    # The exit status a run of a ``--config`` file of several runs asks for, and its lines, kept (on the run's lmms-eval
    # ``args``) until the command's last run has run (``compat.durability._exit_with``); None: none asked
    waiting_exit: tuple[int, list[str]] | None = None


# The attribute an lmms-eval object of one evaluation (its results writer, its response cache, its CLI arguments)
# carries its run in.
_RUN_ATTRIBUTE = "lmms_egoplan_run"


def hand_over(run: SuiteRun, owner: Any) -> None:
    """Give ``owner`` (an lmms-eval object of ``run``'s evaluation, which lmms-eval hands the suite's code) the run."""
    setattr(owner, _RUN_ATTRIBUTE, run)


def run_of(owner: Any) -> SuiteRun | None:
    """The run ``hand_over`` gave ``owner``; None: an evaluation that is not the suite's."""
    return getattr(owner, _RUN_ATTRIBUTE, None)


def shared_scorer(run: SuiteRun, key: Any, build: Callable[[], Any]) -> Any:
    """The scorer ``run`` holds under ``key``, built by ``build`` the first time a task of the run asks."""
    if key not in run.scorers:
        run.scorers[key] = build()
    return run.scorers[key]
