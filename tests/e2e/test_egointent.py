"""EgoIntent end to end through the real lmms-eval CLI: the authors' release read as downloaded (the chat run; the
flat format: the egoplan_hf run), metrics equal those recomputed from the audit trail, one judgement per field,
rejudging, the pre-outcome frames the model gets, a damaged release stopped before the model loads."""
import base64
import io
import json
import re
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from lmms_egoplan.compat.results import PROTOCOL_CHANGES_KEY
from lmms_egoplan.demo.egointent import released_steps, write_dataset, write_release
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply, rating_responder
from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.egointent.data import (
    FIELDS,
    scenario_metric,
)
from lmms_egoplan.egointent.protocol import RELEASE_SYSTEM, RELEASE_USER
from lmms_egoplan.egointent.task import parse_answer, prompt_turns
from tests.egointent.test_protocol import (
    audit_trail,
    dataset_docs,
    judge_env,
    recomputed,
    scripted_answer,
    sometimes_unrated,
)

STEP_ID = re.compile(r"Step id: (\S+)")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The synthetic flat file the egoplan_hf run reads (its documents: ``dataset_docs``)."""
    return write_dataset(tmp_path_factory.mktemp("egointent") / "data")


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """The synthetic release, as downloaded, that the chat run reads."""
    return write_release(tmp_path_factory.mktemp("egointent") / "EgoIntent")


class ScriptedModel:
    """A chat model behind lmms-eval's `openai` backend: records what it is shown, answers by script."""

    def __init__(self):
        self.seen: dict[str, dict] = {}

    def __call__(self, call):
        content = call.messages[-1]["content"]
        text = "\n".join(part["text"] for part in content if part["type"] == "text")
        images = [Image.open(io.BytesIO(base64.b64decode(part["image_url"]["url"].split(",", 1)[1])))
                  for part in content if part["type"] == "image_url"]
        step_id = STEP_ID.search(text).group(1)
        system = ["".join(part["text"] for part in m["content"]) if isinstance(m["content"], list) else m["content"]
                  for m in call.messages if m["role"] == "system"]
        self.seen[step_id] = {"system": system, "text": text, "frames": [read_index(image) for image in images]}
        return Reply(scripted_answer(step_id))


@pytest.fixture(scope="module")
def runs(dataset, release, tiny_model, tmp_path_factory):
    """Two lmms-eval runs at once (each spends most of its time starting up): lmms-eval's `openai`
    backend against a scripted chat model on the release, and this suite's backend on a tiny random
    qwen2_vl on the flat format."""
    from concurrent.futures import ThreadPoolExecutor

    root = tmp_path_factory.mktemp("egointent-runs")
    model = ScriptedModel()
    with ChatServer(model) as model_server, ChatServer(sometimes_unrated) as chat_judge, \
            ChatServer(sometimes_unrated) as hf_judge, ThreadPoolExecutor(2) as pool:
        chat = pool.submit(run_lmms_eval, model="openai", output_dir=root / "chat", tasks=["egointent"], check=False,
                           model_args=f"model=scripted-vlm,base_url={model_server.base_url},api_key=unused",
                           # the default prompt, the step id shown: it tells the scripted model the step
                           env={**judge_env(chat_judge, root / "chat-judge-cache", release),
                                "EGOINTENT_SHOW_STEP_ID": "true"})
        hf = pool.submit(run_lmms_eval, model="egoplan_hf", output_dir=root / "hf", tasks=["egointent"], check=False,
                         # max_frames=2: below the task's frame plan (a protocol change, warned and recorded)
                         model_args=f"pretrained={tiny_model('qwen2_vl')},max_frames=2",
                         env=judge_env(hf_judge, root / "hf-judge-cache", dataset),
                         extra_args=["--limit", "6", "--gen_kwargs", "max_new_tokens=8"])
        return SimpleNamespace(chat=SimpleNamespace(run=chat.result().judged("egointent"), model=model,
                                                    judge=chat_judge),
                               hf=SimpleNamespace(run=hf.result().judged("egointent"), judge=hf_judge))


@pytest.fixture(scope="module")
def chat_run(runs):
    return runs.chat


def response(sample: dict) -> str:
    """The model's answer in a logged sample."""
    answer = sample["filtered_resps"]
    return answer[0] if isinstance(answer, list) else answer


def check_metrics_against_audit_trail(run, docs) -> dict:
    samples = run.samples("egointent")
    audit = audit_trail(run.output_dir)
    for metric, value in recomputed(samples, docs, audit).items():
        assert run.metric("egointent", metric) == pytest.approx(value), metric
    assert run.metric("egointent", "judged") == sum(r["rating"] is not None for r in audit.values())
    assert run.metric("egointent", "failed") == sum(r["rating"] is None for r in audit.values())
    missing = [len(FIELDS) - len(parse_answer(response(s))) for s in samples]
    assert run.metric("egointent", "missing_fields") == sum(missing)
    assert run.metric("egointent", "incomplete_answers") == sum(m > 0 for m in missing)
    assert run.metric("egointent", "capped_samples") == sum(docs[s["doc_id"]]["frames_capped"] for s in samples) > 0
    # Breakdowns partition the steps: each step counts in exactly one environment and one scenario.
    breakdowns = {"indoor", "outdoor", *(scenario_metric(docs[s["doc_id"]]["scenario"]) for s in samples)}
    for sample in samples:
        doc = docs[sample["doc_id"]]
        present = [key for key in breakdowns if key in sample]
        assert sorted(present) == sorted([doc["environment"], scenario_metric(doc["scenario"])])
    for group in (["indoor", "outdoor"], sorted(breakdowns - {"indoor", "outdoor"})):
        counts = [sum(key in s for s in samples) for key in group]
        assert sum(counts) == len(samples) and all(counts)
    return audit


def test_chat_backend_metrics_equal_those_recomputed_from_the_audit_trail(chat_run, release):
    docs = dataset_docs(release)
    audit = check_metrics_against_audit_trail(chat_run.run, docs)
    run = chat_run.run
    # The script leaves fields out (scored 0), and the judge fails some ratings (excluded): both happen.
    assert run.metric("egointent", "incomplete_answers") == 6 and run.metric("egointent", "missing_fields") == 12
    assert 0 < run.metric("egointent", "failed") < len(audit)
    assert {key.split(",")[0] for key in run.results["results"]["egointent"]} >= {
        "overall", *FIELDS, "indoor", "outdoor", "scenario_kitchen", "scenario_yard", "scenario_bedroom"}


def test_each_present_field_is_judged_once_whatever_metrics_read_it(chat_run, release):
    audit, docs = audit_trail(chat_run.run.output_dir), dataset_docs(release)
    expected = {f"{docs[s['doc_id']]['step_id']}/{field}" for s in chat_run.run.samples("egointent")
                for field in parse_answer(response(s))}
    assert audit.keys() == expected
    assert len(chat_run.judge.calls) == len(expected)  # eight judged metrics, one judgement per field


def test_rejudging_the_logged_samples_reproduces_every_metric_judging_each_field_once(chat_run, tmp_path):
    from lmms_egoplan.cli import main

    with ChatServer(sometimes_unrated) as judge:  # the same ratings, a fresh cache: every field judged again
        assert main(["rejudge", str(chat_run.run.output_dir), "--output", str(tmp_path),
                     "--judge_base_url", judge.base_url, "--judge_model", "another-judge", "--judge_api_key_env", "",
                     "--judge_cache_dir", str(tmp_path / "cache")]) == (3 if chat_run.run.metric("egointent",
                                                                                                 "failed") else 0)
    summary = json.loads(next(tmp_path.glob("*_rejudged.json")).read_text())["egointent"]
    reported = {key.split(",")[0]: value for key, value in chat_run.run.results["results"]["egointent"].items()
                if key != "alias" and "stderr" not in key}
    scored = [metric for metric in summary if metric in reported and metric not in ("judged", "failed")]
    assert set(scored) >= {"overall", *FIELDS, "indoor", "outdoor", "scenario_kitchen"}
    for metric in [*scored, "judged", "failed"]:
        assert summary[metric] == pytest.approx(reported[metric]), metric
    assert len(judge.calls) == reported["judged"] + reported["failed"] == len(audit_trail(chat_run.run.output_dir))


def test_the_model_gets_the_unified_prompt_and_only_pre_outcome_frames(chat_run, release):
    """Every step of the release is asked once; the frames it is shown (each shows its number in the
    source video) are the planned ones of its clip, all before its obs_end_time."""
    by_id = {d["step_id"]: d for d in dataset_docs(release)}
    steps = {step.sample_id: step for step in released_steps()}
    assert chat_run.model.seen.keys() == by_id.keys() == steps.keys()
    for step_id, seen in chat_run.model.seen.items():
        doc, step = by_id[step_id], steps[step_id]
        # the authors' prediction prompt: their system message as a system turn, the user message with the clip
        assert seen["system"] == [RELEASE_SYSTEM]
        assert seen["text"] == prompt_turns({"step_id": step_id, "definitions": "release", "show_step_id": True})[1]
        assert seen["frames"] == [step.first_frame + i for i in doc["frame_indices"]]
        assert all(Fraction(n) / step.event.fps < Fraction(step.record["obs_end_time"]) for n in seen["frames"])


def test_egoplan_hf_backend_end_to_end(runs, dataset):
    docs = dataset_docs(dataset)
    run = runs.hf.run
    check_metrics_against_audit_trail(run, docs)
    assert len(run.samples("egointent")) == 6 and run.metric("egointent", "skipped_samples") == 0
    # The authors' system message goes as the system turn (the request option), not in the text.
    assert {sample["input"] for sample in run.samples("egointent")} == {RELEASE_USER}
    # Judged only what the random model's answers held (usually nothing): one call per field found.
    assert len(runs.hf.judge.calls) == len(audit_trail(run.output_dir))


def test_a_backend_setting_below_the_frame_plan_is_warned_once_per_task_and_recorded_and_the_device_named(runs):
    """egoplan_hf's max_frames=2 cuts the clips the task planned: one warning naming the plan and the setting, the
    change in the results file; the device the model runs on is said (on a machine without CUDA, a warning that
    device=auto runs it on the CPU). Issue 65, point 5."""
    run = runs.hf.run
    warnings = [line for line in run.log.splitlines() if "egointent: its plan shows" in line]
    assert len(warnings) == 1 and "model_args max_frames=2 keeps 2 of them" in warnings[0], warnings
    planned = int(re.search(r"its plan shows (\d+) frames", warnings[0]).group(1))
    assert planned > 2
    recorded = run.results[PROTOCOL_CHANGES_KEY]
    assert list(recorded) == ["egointent"] and list(recorded["egointent"]) == ["max_frames"]
    assert f"egointent: {recorded['egointent']['max_frames']}; its numbers are not the paper's protocol" in warnings[0]
    if torch.cuda.is_available():
        assert "egoplan_hf's model" in run.log and "runs on cuda" in run.log
    else:
        assert sum("device=auto found no CUDA GPU" in line and "runs on the CPU" in line
                   for line in run.log.splitlines()) == 1


def test_a_damaged_release_stops_the_run_before_the_model_loads_naming_every_problem(release, tiny_model, tmp_path):
    """A missing clip, a clip shorter than its window, an empty clip, a step without obs_end_time, a step_id
    used twice, a label file that is not JSON, and (with longer_clips: error) a clip longer than its window:
    one error, the run's last line, before egoplan_hf is built."""
    import shutil

    from tests.e2e.test_failed_runs import last_line, observed_run
    from tests.egointent.test_release import damage_annotations, damage_media, edit_steps

    root = tmp_path / "EgoIntent"
    shutil.copytree(release, root)
    expected = damage_media(root) + damage_annotations(root)
    # the bedroom's step 4 starts 1 s later: its 9.6 s clip holds an 8.6 s window
    bedroom = root / "indoor" / "bedroom" / "make_bed" / "step_label.json"
    edit_steps(bedroom, lambda steps: steps[3].update({"start_time": steps[3]["start_time"] + 1.0}))
    expected.append("indoor/bedroom/make_bed/step_label.json: event make_bed, step 4: the clip is 1.000 s longer than "
                    "its window")
    with ChatServer(rating_responder(lambda call: "5")) as judge:
        status, log, loading, seconds = observed_run(tmp_path, f"pretrained={tiny_model('qwen2_vl')}", "egointent",
                                                     {**judge_env(judge, tmp_path / "judge-cache", root),
                                                      "EGOINTENT_LONGER_CLIPS": "error"})
    assert status == 1 and not loading, log[-3000:]
    last = last_line(log)
    assert last.startswith(f"lmms-egoplan: error: 7 problems in the EgoIntent release {root}"), last
    assert all(line in last for line in expected), last
    print(f"a damaged release: failed in {seconds:.1f} s, the model never loaded")
