"""Runs that say what happened, through the real lmms-eval CLI: a run that uses the suite and fails exits non-zero
with one lmms-egoplan: error: line naming what to fix, before the model loads where it can; runs without the suite
keep lmms-eval's status."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV, run_lmms_eval
from lmms_egoplan.demo.kit.warm_python import run_python

# lmms-eval's CLI, in a process where building egoplan_hf is observable: it writes MARKER first.
OBSERVED_CLI = r"""
import sys
from pathlib import Path
marker, argv = Path(sys.argv[1]), sys.argv[2:]
from lmms_egoplan.models import egoplan_hf
building = egoplan_hf.EgoPlanHF.__init__
def observed(self, *args, **kwargs):
    marker.write_text("the model was being loaded")
    building(self, *args, **kwargs)
egoplan_hf.EgoPlanHF.__init__ = observed
sys.argv = ["lmms-eval", *argv]
from lmms_eval.cli.dispatch import main
main()
"""


def observed_run(tmp_path: Path, model_args: str, tasks: str, env: dict, *extra: str):
    """(exit status, log, whether egoplan_hf started loading, seconds) of ``lmms-eval --model egoplan_hf``."""
    marker, output = tmp_path / "model_loading", tmp_path / "out"
    output.mkdir()
    argv = ["--model", "egoplan_hf", "--model_args", model_args, "--tasks", tasks, "--output_path", str(output), *extra]
    started = time.monotonic()
    completed = run_python([sys.executable, "-c", OBSERVED_CLI, str(marker), *argv], cwd=output, timeout=900,
                           env={**os.environ, **OFFLINE_ENV, "LMMS_EVAL_PLUGINS": "lmms_egoplan", **env})
    return completed.returncode, completed.stdout, marker.exists(), time.monotonic() - started


def last_line(log: str) -> str:
    return log.rstrip().splitlines()[-1]


@pytest.mark.parametrize("case, env, named", [
    ("a setting of the wrong type", {"EGOPLAN_NUM_FRAMES": "abc"},
     "EGOPLAN_NUM_FRAMES: expected an integer, got 'abc'"),
    ("an empty annotation folder", {"EGOPLAN_ANNOTATION_DIR": "{empty}"},
     "EgoPlan annotation file EgoPlan_validation.json not found: the folder {empty}, named by EGOPLAN_ANNOTATION_DIR"),
    # Media: a frame that is no image (a web page saved as .jpg), found by its first bytes, with frames decoded
    # ahead (visual_prefetch), where it used to fail after the weights were in memory, a progress bar last.
    ("an EPIC-KITCHENS frame that is not an image", {}, "frame(s) unusable, e.g. not an image file (it starts with "
                                                        "bytes 3c 68 74 6d 6c 3e 3c 62 6f 64 79 3e, as no "
                                                        "JPEG, PNG, GIF, "
                                                        "BMP, WebP or TIFF file does): {frame}"),
])
def test_a_misconfigured_run_fails_before_the_model_starts_loading(case, env, named, egoplan_data, tiny_model,
                                                                   tmp_path):
    from tests.e2e.runs import broken_copy, first_epic_frame

    empty = tmp_path / "empty"
    empty.mkdir()
    data, frame = egoplan_data, None
    if "not an image" in case:
        data = broken_copy(egoplan_data, tmp_path)
        frame = first_epic_frame(data)
        frame.write_text("<html><body>429 Too Many Requests</body></html>\n")
    env = {**data.env(), **{key: value.format(empty=empty) for key, value in env.items()}}
    status, log, loading, seconds = observed_run(tmp_path, f"pretrained={tiny_model('qwen2_vl')},visual_prefetch=2",
                                                 "egoplan_val", env)
    assert status == 1 and not loading, (case, log[-3000:])
    assert last_line(log).startswith("lmms-egoplan: error: ") and named.format(empty=empty,
                                                                               frame=frame) in last_line(log), case
    print(f"{case}: failed in {seconds:.1f} s, the model never loaded")


def test_a_judge_shut_down_by_its_provider_is_named_so_and_fails_the_run_before_the_model_starts_loading(
        tiny_model, tmp_path):
    """The paper's judge, asked of a server that answers as OpenAI does for a model it shut down."""
    from lmms_egoplan.demo.egothink import write_release
    from lmms_egoplan.demo.kit.judge_server import ChatServer, shut_down_model

    with ChatServer(shut_down_model("gpt-4"), answer_preflight=False) as judge:
        env = {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(write_release(tmp_path / "data", per_dimension=1)),
               "EGOTHINK_JUDGE_BASE_URL": judge.base_url, "EGOTHINK_JUDGE_MODEL": "gpt-4",
               "EGOTHINK_JUDGE_API_KEY_ENV": "", "EGOTHINK_JUDGE_CACHE_DIR": str(tmp_path / "cache")}
        status, log, loading, seconds = observed_run(tmp_path, f"pretrained={tiny_model('qwen2_vl')}",
                                                     "ego_think_counting", env)
    assert status == 1 and not loading, log[-3000:]
    assert [call.body["model"] for call in judge.calls] == ["gpt-4"]  # the preflight's request, nothing judged
    assert last_line(log).startswith("lmms-egoplan: error: task ego_think_counting: the judge openai:gpt-4 did not "
                                     "answer a test request: HTTP 404: The model `gpt-4` does not exist")
    assert last_line(log).endswith(
        "; OpenAI shut down the judge model gpt-4 on 2026-10-23 (announced 2026-04-22); set EGOTHINK_JUDGE_MODEL "
        "(metadata.judge_model) to a current model (OpenAI names its substitutes on "
        "https://platform.openai.com/docs/deprecations), or serve the "
        "suite's default open-weights judge Qwen/Qwen3-30B-A3B-Instruct-2507 locally (docs/judges.md)")
    print(f"a shut-down judge: failed in {seconds:.1f} s, the model never loaded")


def test_a_good_run_loads_the_model_once_its_tasks_are_checked_and_builds_them_once(egoplan_data, tiny_model, tmp_path):
    status, log, loading, _ = observed_run(tmp_path, f"pretrained={tiny_model('qwen2_vl')}", "egoplan_val",
                                           egoplan_data.env(), "--limit", "1")
    assert status == 0 and loading, log[-3000:]
    results = json.loads(next((tmp_path / "out").rglob("*_results.json")).read_text())
    assert results["results"]["egoplan_val"]["predictions,none"] == 1
    assert log.count("Building contexts for egoplan_val") == 1  # the checked task is the one lmms-eval runs


@pytest.mark.parametrize("case, model, model_args, tasks, error", [
    ("lmms-eval's chat backend on a likelihood task", "llava_hf", "pretrained=/no/such/dir", "egoplan_val",
     "lmms-egoplan: error: task egoplan_val ranks its candidate answers by likelihood, which --model llava_hf does not "
     "compute (lmms-eval's chat implementation of it only generates); run it with --model egoplan_hf (transformers, in "
     "this process) or --model egoplan_server (an SGLang / vLLM server), or run the generative task egoplan_val_gen "
     "with --model llava_hf, or add --force_simple for lmms-eval's simple implementation of llava_hf, which scores by "
     "lmms-eval's conventions: with EGOPLAN_SCORED_TOKENS (metadata.scored_tokens) set to 'answer' and "
     "EGOPLAN_LOSS_MEAN (metadata.loss_mean) set to 'every_scored_token'; --model llava_hf "
     "needs device=cpu,device_map=cpu in its --model_args on a machine without a CUDA GPU, and decord, which it "
     "imports and this environment lacks (pip install decord)"),
    # Said before lmms-eval imports the backend's module (its decord import would fail first: issue 57).
    ("lmms-eval's simple backend without loglikelihood, decord missing", "qwen2_vl", "pretrained=/no/such/dir",
     "egoplan_val",
     "lmms-egoplan: error: task egoplan_val ranks its candidate answers by likelihood, which --model qwen2_vl does not "
     "compute (lmms-eval's Qwen2_VL does not implement loglikelihood); run it with --model egoplan_hf (transformers, "
     "in this process) or --model egoplan_server (an SGLang / vLLM server), or run the generative task "
     "egoplan_val_gen with --model qwen2_vl; --model qwen2_vl needs device=cpu,device_map=cpu in its --model_args on "
     "a machine without a CUDA GPU, and decord, which it imports and this environment lacks (pip install decord)"),
    ("lmms-eval's backend without decord", "llava_hf", "pretrained=/no/such/dir", "egoplan_val_gen",
     "lmms-egoplan: error: --model llava_hf could not be loaded: ModuleNotFoundError: No module named 'decord'; "
     "lmms-eval's own video backends (llava_hf, llava, ...) import decord, which lmms-eval does not declare: "
     "pip install decord (or pip install 'lmms-egoplan[lmms-builtins]')"),
    ("lmms-eval's backend that fails while it is built", "llava", "pretrained=/no/such/dir", "egoplan_val_gen",
     "lmms-egoplan: error: --model llava could not be loaded: NameError: name "
     "'get_model_name_from_path' is not defined; the suite's tasks also run on its own backends: --model egoplan_hf "
     "(transformers) or --model egoplan_server (an SGLang / vLLM server)"),
    ("a --model_args item without its key", "egoplan_hf", "pretrained=/no/such/dir,bfloat16", "egoplan_val",
     "lmms-egoplan: error: --model egoplan_hf could not be loaded: --model_args: 'bfloat16' is no key=value item (the "
     "items are key=value, separated by commas)"),
    ("the suite's backend without its checkpoint", "egoplan_hf", "max_frames=8", "egoplan_val_gen",
     "lmms-egoplan: error: egoplan_hf: model_args pretrained is required: the checkpoint's folder or hub id "
     "(--model_args pretrained=Qwen/Qwen2-VL-7B-Instruct,...)"),
    ("the suite's server backend without its engine", "egoplan_server", "model=served", "egoplan_val",
     "lmms-egoplan: error: egoplan_server: model_args engine=sglang|vllm is required: the engine of the server that "
     f"scores ({doc_page('backend.md', 'Inference servers')})"),
])
def test_a_backend_that_cannot_serve_or_be_built_exits_1_naming_what_to_use(case, model, model_args, tasks, error,
                                                                             egoplan_data, tmp_path):
    run = run_lmms_eval(model=model, model_args=model_args, tasks=[tasks], output_dir=tmp_path,
                        env=egoplan_data.env(), check=False)
    assert run.returncode == 1 and last_line(run.log) == error, (case, run.log[-3000:])


def test_a_backend_that_fails_to_build_in_a_run_without_the_suite_keeps_lmms_evals_exit_status(tmp_path):
    data = tmp_path / "plain.json"
    data.write_text(json.dumps([{"question": "q?", "answer": "A"}]))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "plain_probe.yaml").write_text(
        f"task: plain_probe\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {json.dumps(str(data))}\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_visual: null\ndoc_to_text: question\n"
        "doc_to_target: answer\nmetric_list:\n  - metric: exact_match\n")
    run = run_lmms_eval(model="llava_hf", model_args="pretrained=/no/such/dir", tasks=["plain_probe"],
                        output_dir=tmp_path / "out", include_path=tasks, use_plugin=False, check=False)
    assert run.returncode == 0 and "No module named 'decord'" in run.log and "lmms-egoplan" not in run.log


def test_a_run_naming_the_suite_only_in_its_plugin_variable_exits_non_zero(tmp_path):
    """lmms-eval's own backend and its own task, LMMS_EVAL_PLUGINS naming the suite: the backend fails while it is
    built (exit 1, its traceback in a file, the error last)."""
    run = run_lmms_eval(model="llava_hf", model_args="pretrained=/no/such/dir", tasks=["egothink_counting"],
                        output_dir=tmp_path, check=False)
    assert run.returncode == 1 and "Traceback" not in run.log and last_line(run.log).startswith(
        "lmms-egoplan: error: --model llava_hf could not be loaded: ModuleNotFoundError: No module named 'decord'")


def test_a_run_of_the_suite_that_fails_before_its_tasks_are_named_exits_1(tmp_path):
    """LMMS_EVAL_PLUGINS names the suite, and the run fails on its arguments (lmms-eval checks them after building
    its task index and before naming the tasks): lmms-eval alone exits 0."""
    environment = {**os.environ, **OFFLINE_ENV, "LMMS_EVAL_PLUGINS": "lmms_egoplan"}
    completed = run_python([sys.executable, "-m", "lmms_eval", "--model", "openai", "--tasks", "egoplan_val_gen",
                            "--predict_only"], cwd=tmp_path, env=environment, timeout=600)
    assert completed.returncode == 1, completed.stdout[-3000:]
    assert last_line(completed.stdout) == ("lmms-egoplan: error: ValueError: Specify --output_path if providing "
                                           "--log_samples or --predict_only")
