"""Nothing users see in a run's files changes (issue 50, point 6): the offline demo, ``lmms-egoplan smoke`` (every
task of every benchmark through the real ``lmms-eval`` CLI on a tiny random model, then the generative ones with
scripted answers through lmms-eval's ``openai`` backend and loopback judges), and the structure of what each of its
runs writes compared to the snapshot ``tests/architecture/user_surface/run_files.json`` (taken at 5a0c717): file
names and kinds, task and group names, metric names, versions, recorded settings with their defaults, the keys of
the samples, judgements and plans files. Masked (they vary): date-times in file names, the model's folder, scores,
times, versions and hashes of the run, paths under the work folder, the loopback judge's address and reply."""

import subprocess
import sys
from pathlib import Path

from tests.architecture.user_surface import compare_with_snapshot, run_structure


def test_the_demos_runs_write_the_files_tasks_metrics_and_settings_they_wrote_before_the_refactor(tmp_path):
    command = Path(sys.executable).parent / "lmms-egoplan"
    completed = subprocess.run([str(command), "smoke", "--workdir", str(tmp_path)], capture_output=True, text=True,
                               timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    logs = tmp_path / "logs"
    varying = (str(tmp_path), "127.0.0.1", "loopback-judge")  # the demo's own data, judge and judge model
    compare_with_snapshot("run_files", {run.name: run_structure(run, varying) for run in sorted(logs.iterdir())})
