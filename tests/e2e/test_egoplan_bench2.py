"""EgoPlan-Bench2 end to end: both tasks through the real `lmms-eval` CLI, the suite's backend, a tiny
random Qwen2-VL and synthetic data in the release's layout; the scripted answers through lmms-eval's
`openai` backend on the SEED-Bench-R1 package's layout."""

import base64
import io
import json

import pytest
from PIL import Image

from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.demo.egoplan_bench2 import build_fixture, scripted_answers
from lmms_egoplan.demo.kit.judge_server import ChatServer
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.kit.scripted import answering, differences, reported_metrics
from lmms_egoplan.egoplan_bench2 import data, settings, task
from lmms_egoplan.egoplan_bench2.parsing import read_letters

# End to end: the real lmms-eval CLI in subprocesses.

UNAVAILABLE = "0badf00d-0000-4000-8000-000000000000_1"  # an extra question whose video does not exist


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("egoplan_bench2"))


@pytest.fixture(scope="module")
def with_unavailable(fixture, tmp_path_factory):
    """The release's questions and one more, whose video does not exist: the annotation file's path."""
    path = tmp_path_factory.mktemp("annotations") / "EgoPlan-Bench2.json"
    path.write_text(json.dumps([*fixture.records(), {**fixture.records()[0], "sample_id": UNAVAILABLE}]))
    return path


@pytest.fixture(scope="module")
def run(fixture, with_unavailable, tiny_model, tmp_path_factory):
    # A random model's answers are noise whatever their length: 16 new tokens keep the run short.
    return run_lmms_eval(model="egoplan_hf", model_args=f"pretrained={tiny_model('qwen2_vl')}",
                         tasks=["egoplan_bench2", "egoplan_bench2_likelihood"],
                         output_dir=tmp_path_factory.mktemp("out"),
                         env=fixture.env(skip_missing="true", annotation_file=with_unavailable),
                         extra_args=["--batch_size", "8", "--gen_kwargs", "max_new_tokens=16"])


def evaluated_docs(fixture, annotation_file):
    resolved = resolve_settings(settings.EgoPlanBench2Settings, task="check", metadata={}, env_prefix="EGOPLAN2",
                                environ=fixture.env(skip_missing="true", annotation_file=annotation_file))
    return data.load_samples(resolved).docs


def mean(values):
    return sum(values) / len(values)


def check_breakdowns(run, task_name, docs, correct):
    """Each domain's and scenario's accuracy is the mean of its questions' correctness, its count beside it."""
    for field in ("domain", "scenario"):
        for value in {doc[field] for doc in docs}:
            members = [doc["sample_id"] for doc in docs if doc[field] == value]
            label = f"{field}_{value.lower().replace(' ', '_')}"
            assert run.metric(task_name, f"accuracy_{label}") == pytest.approx(mean([correct[i] for i in members]))
            assert run.metric(task_name, f"n_{label}") == len(members)


def test_the_generative_task_reports_both_parsers_and_the_breakdowns_of_the_logged_answers(run, fixture,
                                                                                          with_unavailable):
    docs, samples = evaluated_docs(fixture, with_unavailable), run.samples("egoplan_bench2")
    assert len(samples) == len(docs) == len(fixture.records())
    letters = {doc["sample_id"]: read_letters(sample["filtered_resps"][0], task.doc_to_choice(doc))
               for doc, sample in zip(docs, samples)}
    for doc, sample in zip(docs, samples):  # each logged sample shows what each parser read
        item = sample["predictions"]
        assert item["letters"] == letters[doc["sample_id"]] and item["label"] == letters[doc["sample_id"]]["official"]
        assert (item["gold"], item["domain"], item["scenario"]) == (doc["golden_choice_idx"], doc["domain"],
                                                                    doc["scenario"])
    correct = {parser: {i: float(found[parser] == doc["golden_choice_idx"])
                        for (i, found), doc in zip(letters.items(), docs)}
               for parser in ("official", "robust")}
    for parser in ("official", "robust"):
        assert run.metric("egoplan_bench2", f"accuracy_{parser}") == pytest.approx(mean(list(correct[parser].values())))
        assert run.metric("egoplan_bench2",
                          f"unparseable_{parser}") == sum(found[parser] is None for found in letters.values())
    assert run.metric("egoplan_bench2", "accuracy") == run.metric("egoplan_bench2", "accuracy_official")
    check_breakdowns(run, "egoplan_bench2", docs, correct["official"])
    assert run.metric("egoplan_bench2", "skipped_samples") == 1 and UNAVAILABLE in run.log
    recorded = run.results["configs"]["egoplan_bench2"]["metadata"]
    assert (recorded["version"], recorded["parser"], recorded["frame_sampling"]) == (6, "official", "keyframes")


def test_the_likelihood_diagnostic_reports_the_argmin_of_the_logged_losses(run, fixture, with_unavailable):
    docs, samples = evaluated_docs(fixture, with_unavailable), run.samples("egoplan_bench2_likelihood")
    correct = {}
    for doc, sample in zip(docs, samples):
        losses = [float(result[0]) for result in sample["filtered_resps"]]
        assert len(losses) == 4 and len(set(losses)) > 1  # a real model scored four different continuations
        picked = "ABCD"[losses.index(min(losses))]
        assert sample["predictions"]["label"] == picked
        correct[doc["sample_id"]] = float(picked == doc["golden_choice_idx"])
    assert run.metric("egoplan_bench2_likelihood", "accuracy") == pytest.approx(mean(list(correct.values())))
    check_breakdowns(run, "egoplan_bench2_likelihood", docs, correct)


def test_scripted_answers_on_the_package_layout_score_as_the_script_implies(fixture, tmp_path):
    """lmms-eval's openai backend, the SEED-Bench-R1 package's data: each question's images (the
    clip's seven keyframes, then the observation image) reach the model, and every value the run
    reports is the one the script implies (computed without the parsers)."""
    records = fixture.records()
    script = scripted_answers(fixture)
    with ChatServer(answering([script])) as server:
        run = run_lmms_eval(model="openai", model_args=f"model_version=fake,base_url={server.base_url},api_key=unused",
                            tasks=["egoplan_bench2"], output_dir=tmp_path, env=fixture.env(data_source="seed_bench_r1"))
    assert differences(reported_metrics(run.results), script.expected(run)) == []
    assert len(server.calls) == len(records)
    for call in server.calls:
        record = next(r for r in records if f"A. {r['choice_a']}\nB. {r['choice_b']}" in call.text)
        content = [m for m in call.messages if m["role"] == "user"][-1]["content"]
        urls = [part["image_url"]["url"] for part in content if part["type"] == "image_url"]
        shown = [read_index(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))) for url in urls]
        assert shown == data.shown_frames(record["task_start_frame"], record["current_observation_frame"], 8)


def test_missing_media_stop_the_run_naming_the_sample_the_path_and_the_setting(fixture, with_unavailable, tmp_path):
    failed = run_lmms_eval(model="dummy", model_args="", tasks=["egoplan_bench2"], output_dir=tmp_path,
                           env=fixture.env(annotation_file=with_unavailable), check=False)
    assert failed.results is None and failed.returncode != 0
    assert f"EgoPlan-Bench2 sample {UNAVAILABLE}: video not found: {fixture.ego4d_root}/0badf00d" in failed.log
    assert "EGOPLAN2_EGO4D_VIDEOS_ROOT" in failed.log and "EGOPLAN2_SKIP_MISSING" in failed.log
