"""Nothing users see in a run's files changes (issue 50, point 6): the offline demo, ``lmms-egoplan smoke`` (every
task of every benchmark through the real ``lmms-eval`` CLI on a tiny random model, then the generative ones with
scripted answers through lmms-eval's ``openai`` backend and loopback judges; with a text-only model, EgoPlan's
text-only baselines through the real ``lm_eval`` CLI), and the structure of what each of its runs writes compared to
the snapshots ``tests/architecture/user_surface/run_files*.json`` (taken at 5a0c717): file names and kinds, task and
group names, metric names, versions, recorded settings, the keys of the samples, judgements, plans files. Masked
(they vary): date-times in file names, the model's folder, scores, times, versions and hashes of the run, paths
under the work folder, the loopback judge's address and reply (the settings' defaults: the fast tier's snapshot)."""

import subprocess
import sys
from pathlib import Path

from tests.architecture.user_surface import compare_with_snapshot, run_structure


def demo_runs(workdir: Path, *arguments: str) -> dict:
    """The structure of each run of ``lmms-egoplan smoke <arguments>`` (a folder of ``<workdir>/logs``)."""
    command = Path(sys.executable).parent / "lmms-egoplan"
    completed = subprocess.run([str(command), "smoke", "--workdir", str(workdir), *arguments], capture_output=True,
                               text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    varying = (str(workdir), "127.0.0.1", "loopback-judge")  # the demo's own data, judge and judge model
    return {run.name: run_structure(run, varying) for run in sorted((workdir / "logs").iterdir())}


def test_the_demos_lmms_eval_runs_write_what_they_wrote_before_the_refactor(tmp_path):
    compare_with_snapshot("run_files", demo_runs(tmp_path))


def test_the_demos_lm_eval_runs_write_what_they_wrote_before_the_refactor(tmp_path):
    """A text-only model: EgoPlan's baselines through ``lm_eval`` (its results, samples and submission files)."""
    compare_with_snapshot("run_files_lm_eval", demo_runs(tmp_path, "--arch", "llama", "--benchmark", "egoplan"))
