"""`lmms-egoplan prepare` and `lmms-egoplan check-data` through the real CLI (issue 65 points 1 and 2), on the demo's
data path: the demo's builders write each benchmark's synthetic data and the demo's settings file, check-data reads
all seven as their runs would and exits 0; with one clip removed it exits 1 and names the clip. prepare fetches from
a Hub on 127.0.0.1 (HF_ENDPOINT) and writes a settings file check-data then reads."""

import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from lmms_egoplan.demo.kit.settings import DEMO_SETTINGS_FILE, with_demo_settings
from lmms_egoplan.demo.smoke import suites
from lmms_egoplan.suite import BENCHMARKS
from tests.kit.loopback_hub import LoopbackHub

COMMAND = str(Path(sys.executable).parent / "lmms-egoplan")


def lmms_egoplan(*arguments: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([COMMAND, *arguments], capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, **(env or {})})


def test_check_data_passes_the_demos_data_and_names_a_clip_removed_from_it(tmp_path):
    settings = tmp_path / DEMO_SETTINGS_FILE
    with ExitStack() as resources:
        for name, build in suites().items():  # as `lmms-egoplan smoke` builds them
            with_demo_settings(settings, name, build(tmp_path / "data" / name, resources))
    elsewhere = tmp_path / "a-checkout"
    elsewhere.mkdir()
    complete = lmms_egoplan("check-data", "--settings", str(settings), cwd=elsewhere)
    assert complete.returncode == 0, complete.stdout + complete.stderr[-3000:]
    source, *lines = complete.stdout.splitlines()
    assert source == f"Reading the data as a run would, with the settings file {settings}"
    assert [line.split(": ")[0:2] for line in lines[:len(BENCHMARKS)]] == \
        [[entry.name, "complete"] for entry in BENCHMARKS]
    assert "(a declared subset; the release has 3,355)" in lines[0]
    report = tmp_path / "lmms-egoplan-check-data.txt"  # beside the settings file, nothing in the current folder
    assert lines[-1] == f"Everything found missing, one item a line: {report}" and not list(elsewhere.iterdir())
    clip = sorted((tmp_path / "data" / "egointent").rglob("step*.mp4"))[0]
    clip.unlink()
    incomplete = lmms_egoplan("check-data", "--settings", str(settings), "egointent", "egothink", cwd=tmp_path)
    assert incomplete.returncode == 1
    thinking, intent = incomplete.stdout.splitlines()[1:3]  # in the suite's order
    assert thinking.startswith("egothink: complete: ")
    assert intent.startswith("egointent: INCOMPLETE: steps: ") and intent.endswith("; 1 sample with missing or "
                                                                                   "unusable media")
    assert "lmms-egoplan check-data: incomplete: egointent" in incomplete.stderr
    missing = [line for line in report.read_text().splitlines() if line.startswith("missing: ")]
    assert len(missing) == 1 and f"video not found: {clip}" in missing[0]


def test_prepare_fetches_from_the_hub_and_check_data_reads_what_it_wrote(tmp_path):
    from lmms_egoplan.demo import egothink

    release = egothink.write_release(tmp_path / "repo")
    settings, root = tmp_path / "settings.yaml", tmp_path / "data"
    with LoopbackHub() as hub:
        hub.add("EgoThink/EgoThink", release)
        prepared = lmms_egoplan("prepare", "egothink", "--root", str(root), "--settings", str(settings),
                                "--judge_model", "my-judge", cwd=tmp_path,
                                # the loopback Hub, which the HF_HUB_OFFLINE=1 of test_tiny_checkpoints would refuse
                                env={"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr[-3000:]
    assert f"egothink: fetched EgoThink/EgoThink at {hub.datasets['EgoThink/EgoThink'].sha[:12]}" in prepared.stdout
    assert prepared.stdout.rstrip().endswith(f"Settings file (a run reads it; see docs/data.md): {settings}")
    checked = lmms_egoplan("check-data", "egothink", cwd=tmp_path, env={"LMMS_EGOPLAN_SETTINGS": str(settings)})
    assert checked.returncode == 1  # the demo's 24 questions, not the release's 700
    assert checked.stdout.splitlines()[:2] == [
        f"Reading the data as a run would, with the settings file {settings}",
        "egothink: INCOMPLETE: questions: 24 of 700 questions (the release's count)"]
    shutil.rmtree(root / "egothink" / "EgoThink" / "Activity" / "images")
    checked = lmms_egoplan("check-data", "egothink", cwd=tmp_path, env={"LMMS_EGOPLAN_SETTINGS": str(settings)})
    assert "2 problems" in checked.stdout and checked.returncode == 1


def test_prepare_run_again_over_the_same_data_keeps_every_answer_a_run_stored(tmp_path):
    """The annotations given new times (as a copy to another disk gives them), then prepare run again: it checks each
    file against the Hub and rewrites its bookkeeping (``.cache/huggingface/``, with new timestamps). The content is
    the same, so the next run with the same response cache asks the model nothing."""
    import os

    from lmms_egoplan.demo import egothink
    from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
    from tests.e2e.test_resume import cache_hits

    release = egothink.write_release(tmp_path / "repo", per_dimension=3)
    settings, root = tmp_path / "settings.yaml", tmp_path / "data"
    with LoopbackHub() as hub, ChatServer(lambda call: Reply("Two.")) as model, \
            ChatServer(rating_responder(lambda call: "1")) as judge:
        hub.add("EgoThink/EgoThink", release)

        def prepare() -> None:
            prepared = lmms_egoplan("prepare", "egothink", "--root", str(root), "--settings", str(settings),
                                    "--judge_model", "loopback-judge", "--judge_base_url", judge.base_url,
                                    "--judge_api_key_env", "", "--judge_cache_dir", str(tmp_path / "judge"),
                                    cwd=tmp_path, env={"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"})
            assert prepared.returncode == 0, prepared.stdout + prepared.stderr[-3000:]

        prepare()
        args = dict(model="openai", model_args=f"model_version=fake,base_url={model.base_url},api_key=unused",
                    tasks=["ego_think_counting"], env={"LMMS_EGOPLAN_SETTINGS": str(settings)},
                    extra_args=["--use_cache", str(tmp_path / "responses")])
        assert run_lmms_eval(output_dir=tmp_path / "first", **args).returncode == 0 and len(model.calls) == 3
        bookkeeping = {path: path.read_text() for path in root.rglob(".cache/huggingface/download/**/*.metadata")}
        for annotations in root.rglob("annotations.json"):
            os.utime(annotations, (annotations.stat().st_atime, annotations.stat().st_mtime + 60))
        prepare()
        assert any(path.read_text() != text for path, text in bookkeeping.items())  # what the digest must not read
        model.reset()
        again = run_lmms_eval(output_dir=tmp_path / "second", **args)
    assert again.returncode == 0 and model.calls == [] and cache_hits(again.log) == 3
    assert "were made with other settings" not in again.log
