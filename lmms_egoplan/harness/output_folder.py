"""The output folder of an lmms-eval run, claimed before any model call: no two runs write the files of the same
date-time into it (a lock file for the run's lifetime; the lock of a run that ended without removing it, killed or
stopped a second time, is removed by the next run into the folder)."""

from __future__ import annotations

import atexit
import json
import os
import socket
from pathlib import Path
from typing import Any

from lmms_egoplan.compat.durability import process_runs, process_start
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.harness.run_files import run_model_name, run_stamp


def claim_output_folder(run: SuiteRun, args: Any) -> None:
    """Before any model call: the folder this run writes into (``<output_path>/<model>``) is
    writable, and no other run writes the files of the same date-time into it.

    lmms-eval names a run's results and samples files by the second it started, as this suite
    names its side files: two runs started in the same second with the same ``--output_path`` and
    model would overwrite each other's files. Rank 0 (the one that writes) creates
    ``<date-time>.lmms_egoplan.lock`` there for the run's lifetime; a run that finds it refuses to
    start, with an InputError saying what to change. Once per run (``run``).
    """
    output_path = getattr(args, "output_path", None)
    if not output_path or os.environ.get("RANK", "0") != "0":
        return
    from lmms_eval.utils import sanitize_model_name

    folder = Path(output_path) / sanitize_model_name(run_model_name(args))
    if folder in run.claimed_folders:
        return
    stamp = run_stamp(run, args)
    lock = folder / f"{stamp}{_LOCK_SUFFIX}"
    taken = InputError(f"another run (its lock {lock}, or its files {stamp}_*) writes the files of the same date-time "
                       f"({stamp}) into "
                       f"{folder}: its results, samples and side files would overwrite this run's. Start this run "
                       f"a second later, or give it another --output_path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_locks_of_ended_runs(folder)
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        raise taken from None
    except OSError as error:
        raise InputError(f"--output_path {output_path}: cannot write into {folder} ({error}); "
                         f"give a writable folder") from None
    with os.fdopen(descriptor, "w") as file:
        file.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                               "started": process_start(os.getpid())}))
    # A run of the same second that has finished (it wrote its files, then removed its lock) is there
    # by its files: a slow start can reach this point after such a run has ended.
    if any(path != lock for path in folder.glob(f"{stamp}_*")):
        lock.unlink(missing_ok=True)
        raise taken
    run.claimed_folders.add(folder)
    atexit.register(lock.unlink, missing_ok=True)


_LOCK_SUFFIX = ".lmms_egoplan.lock"


def _remove_locks_of_ended_runs(folder: Path) -> None:
    """Remove the locks that runs of this machine left in ``folder`` when they ended without removing them (a
    SIGKILL, a second SIGTERM): their processes no longer run. Others' locks, and unreadable ones, are kept."""
    host = socket.gethostname()
    for lock in folder.glob(f"*{_LOCK_SUFFIX}"):
        try:
            owner = json.loads(lock.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(owner, dict) and owner.get("host") == host \
                and not process_runs(owner.get("pid"), owner.get("started")):
            lock.unlink(missing_ok=True)
