"""The one fact of a run still kept for the whole process, removed by part C: ``RUN.exit_guard_sink``.

Every other fact of a run lives on the run object of its evaluation (``core.run.SuiteRun``) or on its requests
(``core.request_facts``). This holder serves only the loguru sink that ends a failed run with status 1
(``compat.durability.fail_runs_with_failed_tasks``), a mechanism part C of issue 75 removes with it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunState:
    # loguru's id of the sink that ends a failed run with status 1 (``compat.durability.fail_runs_with_failed_tasks``)
    exit_guard_sink: int | None = None


RUN = RunState()  # removed by part C
