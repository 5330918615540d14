"""What one run learns as it goes, in one named object: ``RUN``.

Its lifetime is the process: an lmms-eval (or lm-eval) run is one process, and what its tasks,
backends and the lmms-eval workarounds learn while it runs (the date-time its files are named by, the
response cache it opened, why it must exit non-zero, its judges and their judgements) lives here
until the process ends. Nothing in it is written to disk; a run that is started again starts with an
empty one. Code that runs several evaluations in one process (tests; ``--config`` with several
entries shares one, as lmms-eval shares its own state) starts a new one with ``RUN.reset()``.
It names no type of the layers that fill it: it sits below all of them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass
class RetriedAnswers:
    """The answers a backend generated again because they were empty (``models.empty_answer_retry``), for the task
    that counts them: {(task, the answer as lmms-eval hands it to the task, stripped): [(retries, still empty)]}.
    Keyed by the answer because lmms-eval hands a task only the document and the answer text; answers alike share
    a list, so the task's totals are exact."""

    by_answer: dict[tuple[str, str], list[tuple[int, bool]]] = field(default_factory=dict)
    # The same records until the response cache stores their answers beside them (``unstored``; ``compat.
    # durability.resume_sampled_runs``), so that a run resumed from the cache counts them again
    unstored: dict[tuple[str, str], list[tuple[int, bool]]] = field(default_factory=dict)

    def record(self, task: str, answer: str, retries: int, still_empty: bool, *, stored: bool = False) -> None:
        """Record an answer asked ``retries`` times again (``stored``: one the response cache served, with the
        record it keeps beside it)."""
        self.by_answer.setdefault((task, answer.strip()), []).append((retries, still_empty))
        if not stored:
            self.unstored.setdefault((task, answer.strip()), []).append((retries, still_empty))

    def to_store(self, task: str, answer: str) -> tuple[int, bool]:
        """(retries, still empty) of an answer of ``task`` the response cache is storing, for it to keep beside the
        answer; (0, False): asked once. Answers alike share a list: each record is handed out once."""
        found = self.unstored.get((task, answer.strip()))
        return found.pop() if found else (0, False)

    def take(self, task: str, answer: str) -> tuple[int, bool]:
        """(retries, still empty) of an answer of ``task``; (0, False): asked once."""
        found = self.by_answer.get((task, answer.strip()))
        return found.pop() if found else (0, False)


@dataclass
class RunState:
    # lmms-eval's date-time of this run's files ("20261123_101010"), once learnt
    # (``harness.run_files.run_stamp``); lm-eval runs: by the harness's call frame
    stamp: str | None = None
    lm_eval_stamps: dict[int, str] = field(default_factory=dict)
    # Output folders this run claimed (``harness.output_folder.claim_output_folder``)
    claimed_folders: set[Path] = field(default_factory=set)
    # The --use_cache root this run opened (``compat.durability.keep_responses_of_stopped_runs``)
    response_cache_root: str | None = None
    # The response cache the suite gave a run that named none (``compat.durability.keep_responses_by_default``)
    default_response_cache: str | None = None
    # loguru's id of the sink that ends a failed run with status 1 (``compat.durability.fail_runs_with_failed_tasks``)
    # Why a run that computed its results must still exit non-zero (e.g. failed judgements): callables the
    # suite's tasks register (``compat.durability.ask_for_exit_status``), each returning None or
    # (exit status, the line saying what to do), given the results and samples files written
    exit_reasons: list[Callable[[list[Path]], tuple[int, str] | None]] = field(default_factory=list)
    # What lmms-eval has written of the run, once it writes its results (``compat.durability.WrittenFiles``)
    written: Any = None
    # What else a stopped run keeps, said when it stops (``compat.durability.note_kept_on_stop``)
    kept_on_stop: list[str] = field(default_factory=list)
    # The run's own secrets (the evaluated model's api_key, keys in the environment), masked wherever
    # lmms-eval logs or keeps an error text (``compat.secrets.keep_secrets_out_of_lmms_evals_error_texts``)
    secrets: tuple[str, ...] = ()
    # The judges of this run: one engine per judge configuration, those whose preflight passed (with what
    # their server said answered it), and each judged task's judgements (``harness.judged``)
    judges: dict[Any, Any] = field(default_factory=dict)
    answering_judges: dict[Any, Any] = field(default_factory=dict)
    task_judgements: dict[str, Any] = field(default_factory=dict)
    # Each generative task's (failed, asked) model requests, once aggregated (``harness.failed_requests``)
    failed_requests: dict[str, tuple[int, int]] = field(default_factory=dict)
    # The token that closes a scored assistant turn and where it comes from ("</s> (generation_config)"),
    # as the run's likelihood backend found it (``models.likelihood.TurnEnd``); None: the backend has none.
    # The tasks that score it (``harness.lmms_eval_task``); both are recorded in the results and samples
    # files (``compat.results.record_in_results``)
    turn_end: str | None = None
    turn_end_tasks: set[str] = field(default_factory=set)
    # Where the run's backend changed a task's frame plan ({task: {setting: what it changed}}, warned once per task
    # and setting: ``models.doc_requests``), recorded in the results (``compat.results.record_in_results``)
    protocol_changes: dict[str, dict[str, str]] = field(default_factory=dict)
    # The answers the run's backend generated again, until their task counts them (``models.empty_answer_retry``)
    retried_answers: RetriedAnswers = field(default_factory=RetriedAnswers)
    # lmms-eval's four seeds of the run (random, numpy, torch, fewshot), which key the sampled answers of the suite's
    # tasks in the response cache (``compat.durability.resume_sampled_runs``); None: that run keeps none
    sampling_seeds: tuple[Any, ...] | None = None

    def reset(self) -> None:
        """Start a new run's state (every field back to its default), in place: modules keep ``RUN``."""
        for item in dataclasses.fields(self):
            setattr(self, item.name, item.default_factory() if item.default_factory is not dataclasses.MISSING
                    else item.default)


RUN = RunState()
