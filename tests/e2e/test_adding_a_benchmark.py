"""docs/development.md, "Adding a benchmark", through the real CLIs: the throw-away sixth benchmark
(``tests/kit/sixth_benchmark.py``: its package and catalogue row on PYTHONPATH, its YAML folders named by
``--include_path``) runs through ``lmms-eval`` and ``lm_eval`` with their ``dummy`` models and is scored."""

import os
import sys

import pytest

from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV, finished_run, run_lmms_eval
from lmms_egoplan.demo.kit.warm_python import run_python
from tests.kit.sixth_benchmark import DOCS, write_sixth_benchmark


def test_the_sixth_benchmark_runs_through_both_harnesses_clis(tmp_path):
    data = write_sixth_benchmark(tmp_path / "sixth")
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "sixth"), os.environ.get("PYTHONPATH", "")]),
           "SIXTH_DATA_FILE": str(data)}
    run = run_lmms_eval(model="dummy", model_args="", tasks=["sixth_val"], output_dir=tmp_path / "lmms-eval",
                        include_path=tmp_path / "sixth" / "checkout_tasks", use_plugin=False, env=env)
    assert run.results["n-samples"]["sixth_val"] == {"original": len(DOCS), "effective": len(DOCS)}
    assert run.metric("sixth_val", "exact") == pytest.approx(0.5)  # lmms-eval's dummy answers "A": one of two
    assert run.results["configs"]["sixth_val"]["metadata"] == {"version": 1, "data_file": str(data),
                                                                "data_read_from": [], "not_scored": {}}
    output = tmp_path / "lm-eval"
    output.mkdir()
    command = [sys.executable, "-m", "lm_eval", "run", "--model", "dummy", "--tasks", "sixth_val_blind",
               "--include_path", str(tmp_path / "sixth" / "checkout_lm_eval_tasks"), "--output_path", str(output),
               "--log_samples"]
    completed = run_python(command, env={**os.environ, **OFFLINE_ENV, **env}, cwd=output, timeout=600)
    baseline = finished_run(command, completed.returncode, completed.stdout, output, 0.0, ["sixth_val_blind"], True,
                            results_glob="results_*.json")
    assert baseline.metric("sixth_val_blind", "exact") == 0.0  # lm-eval's dummy answers "lol"
