"""Model requests that failed, for every generative suite task at once: counted, left out, asked again.

``SuiteTask.process_results`` (``harness.lmms_eval_task``) recognises a failed request
(``core.failed_requests.failed_request``: lmms-eval's failure and budget placeholders, a missing
text, the empty text of backends that fail with one) before the benchmark sees the answer: the
sample is not parsed, judged or scored, and returns only ``failed_requests: 1`` (its logged sample
carries that mark). Every other metric leaves it out, its denominator included, as if it had not
been asked: a mean over the answered samples, a judged score without it (the judge never sees it),
a run-level score without its output.

Every generative suite task reports ``failed_requests`` (the count, 0 when none failed); its
aggregation remembers each task's count on its run (``SuiteRun.failed_requests``), and once lmms-eval has written
the results (and samples) files, a run with failed requests ends with status
``FAILED_REQUESTS_EXIT_STATUS`` and a last line saying how many failed, in which tasks, and the
command that asks only those again (``failed_requests_verdict``, through
``compat.durability.ask_for_exit_status``, as failed judgements end a run). The answered
requests come from lmms-eval's response cache (``--use_cache``), which never keeps a failed one
(``compat.durability.keep_failed_requests_out_of_the_response_cache``).
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from lmms_egoplan.compat import suite_plugin_enabled
from lmms_egoplan.compat.durability import ask_for_exit_status
from lmms_egoplan.contract.benchmark import Metric, TaskContext
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.core.secrets import MASK, mask_secrets

FAILED_REQUESTS = "failed_requests"
# Failed judgements end a run with 3 (judge_failed_exit_status); a failed model request leaves more out.
FAILED_REQUESTS_EXIT_STATUS = 4
# The per-sample value of a sample whose request failed, where a metric needs one (a judged metric's item,
# what a --predict_only run logs under "bypass"): {FAILED_REQUEST_MARK: why}.
FAILED_REQUEST_MARK = "failed_request"


def is_failed_request_item(value: Any) -> bool:
    """Whether a metric's per-sample value stands for a sample whose request failed (a judged task's)."""
    return isinstance(value, dict) and FAILED_REQUEST_MARK in value


def failed_request_count(items: Sequence[float], args: Any = None, *, context: TaskContext) -> int:
    """The ``failed_requests`` aggregation: how many of the task's requests failed; remembers the count
    (and the task's total) so that the run ends saying so."""
    failed = int(sum(items))
    context.run.failed_requests[context.task_name] = (failed, len(items))
    if failed:
        ask_for_exit_status(context.run, failed_requests_verdict)
    return failed


# Every generative lmms-eval task of the suite reports it (``harness.compiled_task.compile_task``'s ``counted``).
FAILED_REQUESTS_METRIC = Metric(FAILED_REQUESTS, failed_request_count, higher_is_better=False, with_context=True)


def failed_requests_verdict(run: SuiteRun, files: Sequence[Path]) -> tuple[int, str] | None:
    """(exit status, what to do) when model requests of ``run`` failed; None when none did.
    ``files``: the results and samples files of the run (``<output_path>/<model>/<file>``: where the next run keeps its
    answers)."""
    failed = {task: count for task, (count, _) in run.failed_requests.items() if count}
    if not failed:
        return None
    total = sum(asked for _, asked in run.failed_requests.values())
    counts = ", ".join(f"{task} {count}" for task, count in failed.items())
    line = (f"{sum(failed.values())} of {total} model requests failed ({counts}) and are left out of the scores "
            f"(each task's failed_requests counts them, their logged samples carry failed_requests 1); the results are "
            f"written; ")
    if run.response_cache_root is not None:
        line += (f"ask only them again (the answered ones come from the response cache {run.response_cache_root}) "
                 f"with the same command: {rerun_command()}")
    else:
        cache = Path(files[0].parents[1] if files else ".", "response_cache")
        line += (f"this run had no --use_cache, so its answers were not kept: ask every request again, keeping the "
                 f"answers (a run after that asks only the failed ones), with: "
                 f"{rerun_command('--use_cache', str(cache))}")
    if MASK in line:
        line += f" (your key in place of {MASK})"
    return FAILED_REQUESTS_EXIT_STATUS, line


def rerun_command(*added: str, argv: Sequence[str] | None = None) -> str:
    """The command line of this lmms-eval run (``argv``: ``sys.argv``), with ``added`` arguments, as a
    shell line that sets ``LMMS_EVAL_PLUGINS`` as this run had it; secrets masked."""
    argv = list(sys.argv if argv is None else argv)
    plugins = f"LMMS_EVAL_PLUGINS={shlex.quote(os.environ['LMMS_EVAL_PLUGINS'])} " if suite_plugin_enabled() else ""
    return mask_secrets(plugins + shlex.join(["lmms-eval", *argv[1:], *added]))
