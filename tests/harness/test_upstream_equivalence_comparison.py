"""docs/upstream/equivalence.py's comparison can fail: on two sides' logged samples, results and captured requests
written here, it finds a changed prompt, image, request parameter, per-sample value and aggregate, explains only what
a declared difference names, reads a loss logged as text as a number, refuses a
setting lmms-eval's task lacks, and does not call a run proven whose guard saw the suite imported; the likelihood
capture's recorder keeps what a backend answered (the real runs: tests/e2e/test_upstream_equivalence.py)."""

import base64
import io
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from docs.upstream import equivalence
from docs.upstream.equivalence import (
    SUITE,
    UPSTREAM,
    Difference,
    EquivalenceError,
    LikelihoodCapture,
    Request,
    SideRun,
    TaskPair,
    chat_request,
    compare_pair,
    image_digest,
    proof_lines,
    upstream_settings,
)
from lmms_egoplan.demo.kit.judge_server import ChatCall
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun

PROMPT = "Which action next?\nA. open oven\nB. cut dough"


def sample(doc_id=0, **values):
    return {"doc_id": doc_id, "doc_hash": "h", "input": PROMPT, "target": "0", "filtered_resps": ["A"],
            "accuracy": 1.0, **values}


def side(tmp_path, name, task, samples, metrics, requests) -> SideRun:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / f"run_samples_{task}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    results = {"results": {task: {f"{metric},none": value for metric, value in metrics.items()}}}
    return SideRun(name, EvalRun(command=[], returncode=0, log="", output_dir=folder, results=results), requests)


def compared(tmp_path, pair=TaskPair("t_up", "t_suite"), upstream=None, suite=None):
    """The comparison of two sides that agree, but for what ``upstream`` / ``suite`` (samples, metrics, requests)
    replace."""
    base = ([sample()], {"accuracy": 1.0}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')])
    ours = side(tmp_path, UPSTREAM, pair.upstream, *(upstream or base))
    theirs = side(tmp_path, SUITE, pair.suite, *(suite or base))
    return compare_pair(pair, ours, theirs)


def test_two_sides_that_agree_differ_in_nothing(tmp_path):
    report = compared(tmp_path)
    assert report.differing == [] and report.deliberate == {}
    assert "requests: 1 equal in their images (2 in all, pixel for pixel) and parameters" in report.equal


@pytest.mark.parametrize("changed, found", [
    (([sample(input="Which action?")], {"accuracy": 1.0}, [Request("Which action?", ("img1", "img2"), "")]),
     "prompt:input"),
    (([sample()], {"accuracy": 1.0}, [Request(PROMPT, ("img1", "img3"), '{"max_tokens": 16}')]), "request:images"),
    (([sample()], {"accuracy": 1.0}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 1024}')]),
     "request:parameters"),
    (([sample()], {"accuracy": 1.0}, []), "request:count"),
    (([sample(accuracy=0.0)], {"accuracy": 1.0}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]),
     "sample:accuracy"),
    (([sample(extra=1)], {"accuracy": 1.0}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]),
     "sample:extra"),
    (([sample()], {"accuracy": 0.5}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]), "aggregate:accuracy"),
    (([sample()], {"accuracy": 1.0, "more": 2}, [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]),
     "aggregate:more"),
])
def test_each_kind_of_difference_is_found(tmp_path, changed, found):
    report = compared(tmp_path, upstream=changed)
    assert [line.split(":")[0] + ":" + line.split(":")[1] for line in report.differing] == [found]


def test_only_what_a_declared_difference_names_is_deliberate(tmp_path):
    pair = TaskPair("t_up", "t_suite", differences=(Difference("gold as a letter", "convention", ("sample:target",)),))
    requests = [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]
    report = compared(tmp_path, pair, upstream=([sample(target="A", accuracy=0.0)], {"accuracy": 1.0}, requests))
    assert list(report.deliberate) == ["gold as a letter"] and report.deliberate["gold as a letter"][0].startswith(
        "sample:target: doc 0")
    assert [line.split(":")[1] for line in report.differing] == ["accuracy"]


def png(pixels: Image.Image, level: int) -> str:
    buffer = io.BytesIO()
    pixels.save(buffer, format="PNG", compress_level=level)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_a_requests_images_are_compared_by_their_pixels_not_their_encoding():
    red, blue = Image.new("RGB", (4, 4), (255, 0, 0)), Image.new("RGB", (4, 4), (0, 0, 255))

    def call(*urls):
        content = [*({"type": "image_url", "image_url": {"url": url}} for url in urls), {"type": "text", "text": "Q"}]
        return ChatCall("/v1/chat/completions", {"messages": [{"role": "user", "content": content}], "max_tokens": 8},
                        {}, 0, 0.0)

    assert chat_request(call(png(red, 1))) == chat_request(call(png(red, 9)))
    assert chat_request(call(png(red, 1))).images != chat_request(call(png(blue, 1))).images


def test_a_setting_lmms_evals_task_lacks_is_refused_and_the_shared_ones_handed_over(fixture_env):
    declared = equivalence.BENCHMARKS["egoplan_bench2"].settings
    handed = upstream_settings(declared, fixture_env)  # the suite's default parser is eval.py's, 27's reading
    # the media's folders, and the questions' folder as the Hub dataset's copy: no parser, no frames
    assert handed == {"EGOPLAN2_EGO4D_VIDEOS_ROOT": fixture_env["EGOPLAN2_EGO4D_VIDEOS_ROOT"],
                      equivalence.DATASET_COPY: fixture_env["EGOPLAN2_ANNOTATION_DIR"],
                      "EGOPLAN2_SEED_BENCH_R1_ROOT": ""}
    # 27's variants fix the frames and the data source, its YAML the reading: the suite's must match them
    for name, value in (("EGOPLAN2_MAX_SIDE", "224"), ("EGOPLAN2_FRAME_SAMPLING", "clip"),
                        ("EGOPLAN2_DATA_SOURCE", "seed_bench_r1")):
        with pytest.raises(EquivalenceError, match=f"lmms-eval's task has no setting {name}"):
            upstream_settings(declared, {**fixture_env, name: value})
    with pytest.raises(EquivalenceError, match="lmms-eval's task fixes what the suite sets with EGOPLAN2_PARSER="
                                               "official"):
        upstream_settings(declared, {**fixture_env, "EGOPLAN2_PARSER": "robust"})
    # the Hub dataset's file name is 27's YAML's
    with pytest.raises(EquivalenceError, match="fixes what the suite sets with EGOPLAN2_ANNOTATION_FILE="
                                               "EgoPlan-Bench2.json"):
        upstream_settings(declared, {**fixture_env, "EGOPLAN2_ANNOTATION_FILE": "mine.json"})


@pytest.fixture
def fixture_env(tmp_path):
    return {"EGOPLAN2_ANNOTATION_DIR": str(tmp_path), "EGOPLAN2_EGO4D_VIDEOS_ROOT": str(tmp_path)}


def test_a_run_whose_guard_saw_the_suite_imported_is_not_proven(tmp_path):
    scratch = tmp_path / "lmms-eval"
    cli = {"argv": [f"{scratch}/lmms_eval/__main__.py"], "lmms_eval": f"{scratch}/lmms_eval/__init__.py",
           "refused": ["lmms_egoplan"], "imported": []}
    assert proof_lines([cli], scratch)[1]
    assert not proof_lines([{**cli, "imported": ["lmms_egoplan"]}], scratch)[1]
    assert not proof_lines([{**cli, "lmms_eval": "/usr/lib/lmms_eval/__init__.py"}], scratch)[1]
    assert not proof_lines([], scratch)[1]


@pytest.mark.parametrize("losses, differs", [
    ([["6.354610919952393", "False"]], False),  # 6e-08 apart: within the pair's 1e-4
    ([["6.36", "False"]], True),
    ([["6.354610860347748", "True"]], True),
])
def test_a_loss_logged_as_text_is_compared_as_a_number_within_the_tolerance(tmp_path, losses, differs):
    pair = TaskPair("t_up", "t_suite", tolerance=1e-4)
    requests = [Request(PROMPT, ("img1", "img2"), '{"max_tokens": 16}')]
    ours = ([sample(filtered_resps=losses)], {"accuracy": 1.0}, requests)
    theirs = ([sample(filtered_resps=[["6.354610860347748", "False"]])], {"accuracy": 1.0}, requests)
    report = compared(tmp_path, pair, ours, theirs)
    assert [line.split(":")[1] for line in report.differing] == (["filtered_resps"] if differs else [])


def test_egoplans_per_task_annotation_file_is_its_default_and_a_setting_its_upstream_tasks_lack_is_refused(tmp_path):
    declared = equivalence.BENCHMARKS["egoplan"].settings
    roots = {name: str(tmp_path) for name in ("EGOPLAN_ANNOTATION_DIR", "EGOPLAN_EPIC_FRAMES_ROOT",
                                               "EGOPLAN_EGO4D_VIDEOS_ROOT")}
    # lmms-eval's loglikelihood averages over every scored token: the suite's default, the official division, is refused
    with pytest.raises(EquivalenceError, match="fixes what the suite sets with EGOPLAN_LOSS_MEAN=every_scored_token"):
        upstream_settings(declared, roots)
    roots["EGOPLAN_LOSS_MEAN"] = "every_scored_token"
    # egoplan_val.yaml's EgoPlan_validation.json: no change; the release's folder is copied into lmms-eval's run folder
    assert upstream_settings(declared, roots) == {
        **{name: root for name, root in roots.items() if name not in ("EGOPLAN_ANNOTATION_DIR", "EGOPLAN_LOSS_MEAN")},
        equivalence.RELEASE_FOLDER: roots["EGOPLAN_ANNOTATION_DIR"]}
    for name, value in (("EGOPLAN_ANNOTATION_FILE", "/data/other.json"), ("EGOPLAN_SCORED_TOKENS", "answer"),
                        ("EGOPLAN_FRAME_SAMPLING", "uniform")):
        with pytest.raises(EquivalenceError, match=f"lmms-eval's task has no setting {name}"):
            upstream_settings(declared, {**roots, name: value})
    del roots["EGOPLAN_LOSS_MEAN"]
    upstream_settings(equivalence.BENCHMARKS["egoplan_gen"].settings, roots)  # the generative pair scores no loss


# A backend in a process started with the likelihood capture's environment: its class and a subclass calling it.
RECORDED_BACKEND = """
from PIL import Image
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms


class Scorer(lmms):
    def loglikelihood(self, requests):
        return [(float(len(request.args[1])), False) for request in requests]

    def generate_until(self, requests):
        return []

    def generate_until_multi_round(self, requests):
        return []


class Subclass(Scorer):
    def loglikelihood(self, requests):
        return super().loglikelihood(requests)


backend = Subclass()
backend.task_dict = {"t": {"test": [{"image": Image.new("RGB", (4, 4), (255, 0, 0))}]}}
requests = [Instance(request_type="loglikelihood", arguments=("Q", choice, lambda doc: [doc["image"]], 0, "t", "test"),
                     idx=i, metadata={"task": "t", "doc_id": 0, "repeats": 1}) for i, choice in enumerate(["ab", "c"])]
print(backend.loglikelihood(requests))
"""


def test_the_likelihood_recorder_keeps_each_answered_request_once_with_its_images(tmp_path):
    with LikelihoodCapture(tmp_path) as capture:
        _, _, env = capture.prepare(SUITE, "egoplan_hf", "pretrained=x")
        ran = subprocess.run([sys.executable, "-c", RECORDED_BACKEND], env={**os.environ, **env}, capture_output=True,
                             text=True, timeout=300)
        assert ran.returncode == 0, ran.stderr[-2000:]
        red = io.BytesIO()
        Image.new("RGB", (4, 4), (255, 0, 0)).save(red, format="PNG")
        assert capture.requests(SUITE) == [Request("Q", (image_digest(red.getvalue()),), '{"continuation": "ab"}'),
                                           Request("Q", (image_digest(red.getvalue()),), '{"continuation": "c"}')]
        assert [json.loads(line)["result"] for line in capture.record(SUITE).read_text().splitlines()] == \
            [[2.0, False], [1.0, False]]
