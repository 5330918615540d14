"""A suite task (SuiteTask) through the real lmms-eval CLI: settings, presets and --limit."""
import json

import pytest

from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from tests.fixtures import PROBE_TASKS


def test_benchmark_task_through_the_cli_uses_settings_presets_and_limit(tmp_path):
    data = tmp_path / "probe.json"
    data.write_text(json.dumps([{"question": f"q{i}?", "answer": "A" if i % 2 == 0 else "B"} for i in range(3)]))
    run = run_lmms_eval(model="dummy", model_args="", tasks=["lmms_egoplan_probe"], output_dir=tmp_path / "out",
                        include_path=PROBE_TASKS, use_plugin=False, extra_args=["--limit", "5"],
                        env={"PROBE_DATA_FILE": str(data), "PROBE_REPEAT": "2"})
    # Docs come from the loader (3 rows x repeat 2), --limit applies to them.
    assert run.results["n-samples"]["lmms_egoplan_probe"] == {"original": 6, "effective": 5}
    samples = run.samples("lmms_egoplan_probe")
    # YAML metadata sets the prefix; the model-specific preset for `dummy` wins over `default`.
    assert [s["input"] for s in samples] == [f"Question: q{i % 3}? (dummy preset)" for i in range(5)]
    # The dummy backend always answers "A": docs 0, 2, 4 are right.
    assert run.metric("lmms_egoplan_probe", "exact") == pytest.approx(3 / 5)
    recorded = run.results["configs"]["lmms_egoplan_probe"]["metadata"]
    # The probe's loader names no file it read (data_read_from) and every metric is scored (not_scored).
    assert recorded == {"version": 1, "prompt_prefix": "Question: ", "data_file": str(data), "repeat": 2,
                        "data_read_from": [], "not_scored": {}}
