"""The end-to-end tier: every test in this folder goes through the real lmms-eval / lm_eval CLI (marked e2e by the
root conftest)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def egoplan_data(tmp_path_factory):
    from lmms_egoplan.demo.egoplan import build_fixture

    return build_fixture(tmp_path_factory.mktemp("egoplan"))


@pytest.fixture(scope="session", autouse=True)
def warm_python():
    """The lmms-eval and lm-eval runs of this worker (``run_lmms_eval``, ``run_lm_eval``, the demo's, the CLIs'
    started from them) fork from one warm Python (``demo/kit/warm_python.py``) instead of importing torch,
    transformers and evaluate again each: most of this tier's time before. Each run parses the harnesses' own
    installed task YAMLs once for the worker (``task_index_memo.py``), unless ``LMMS_EGOPLAN_E2E_FRESH_INDEX=1``."""
    import collections
    import os
    import subprocess
    import sys
    import tempfile
    import warnings
    from pathlib import Path

    from lmms_egoplan.demo.kit import warm_python
    from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV
    from tests.e2e import task_index_memo

    with tempfile.TemporaryDirectory(prefix="warm-python-") as folder, pytest.MonkeyPatch.context() as patch:
        socket = Path(folder) / "socket"
        prelude = [] if os.environ.get("LMMS_EGOPLAN_E2E_FRESH_INDEX") == "1" else [str(task_index_memo.__file__)]
        # Under the runs' offline variables, which the pre-imported modules read when imported.
        server = subprocess.Popen([sys.executable, warm_python.__file__, str(socket), *prelude],
                                  stdout=subprocess.DEVNULL, env={**os.environ, **OFFLINE_ENV})
        patch.setenv(warm_python.WARM_PYTHON_VARIABLE, str(socket))
        patch.setenv(task_index_memo.MEMO_FOLDER_VARIABLE, folder)
        yield
        server.terminate()
        server.wait(timeout=60)
        failed = Path(f"{socket}.failed")  # its runs started as plain processes: right, but slow
        assert not failed.exists(), f"the warm Python did not start:\n{failed.read_text()}"
        refused = Path(f"{socket}.refused")  # some by design (a test's own HF_HOME); a surprise costs the tier time
        if refused.exists():
            reasons = collections.Counter(line.rsplit(": ", 1)[1] for line in refused.read_text().splitlines())
            warnings.warn(f"runs this test process started plain, not forked from its warm Python, by the "
                          f"import-time variables they differ in: {dict(reasons.most_common())}", stacklevel=1)
