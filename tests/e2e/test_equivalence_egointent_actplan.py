"""EgoIntent (patch 31) and ActPlan-1K (patch 32) in lmms-eval score as the suite's tasks do: docs/upstream/
equivalence.py on the demo's data, one run of the real CLI per side carrying egointent, actplan1k and
actplan1k_text_only. A scripted model answers through lmms-eval's ``openai`` backend (EgoIntent's steps told apart by
the frames they show: the authors' prompt names no step; ActPlan-1K's by their task descriptions); a loopback judge
rates EgoIntent's fields by the same script and fails the ratings whose reference mentions a jar, so that both sides
must fail the same judgements; a BLEURT classifier in the release's checkpoint format judges about half the plans
correct. Every model prompt and image, every judge prompt, every per-sample value and every aggregate must agree."""

from __future__ import annotations

import base64
import io
import os
from contextlib import ExitStack

import torch
from PIL import Image

from docs.upstream.equivalence import BENCHMARKS, compare, together
from lmms_egoplan.actplan.classifier import load_classifier
from lmms_egoplan.demo import actplan, egointent
from lmms_egoplan.demo.kit.judge_server import ChatCall, ChatServer, Reply
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.kit.scripted import answering, rating_by_script
from lmms_egoplan.egointent.data import RELEASE, load_samples
from lmms_egoplan.egointent.protocol import EgoIntentSettings

FAILED_REFERENCE_WORD = "jar"  # the scripted judge gives no rating to the fields whose reference holds it


def answers_by_frames(release) -> dict[tuple[int, int], str]:
    """EgoIntent's scripted answers (``demo.egointent.SCRIPTED_STEPS``) by the first and last frame each step shows
    (frames show their number in the source video)."""
    steps = {step.sample_id: step for step in egointent.released_steps()}
    by_frames = {}
    for number, doc in enumerate(load_samples(EgoIntentSettings(annotations=release)).docs):
        step = steps[doc["step_id"]]
        form, kinds = egointent.SCRIPTED_STEPS[number % len(egointent.SCRIPTED_STEPS)]
        fields = {name: egointent.field_answer(step.record[RELEASE.references[name]], kind)
                  for name, kind in zip(egointent.FIELDS, kinds) if kind}
        shown = (step.first_frame + doc["frame_indices"][0], step.first_frame + doc["frame_indices"][-1])
        by_frames[shown] = egointent.scripted_text(form, fields)
    assert len(by_frames) == len(steps), "two steps show the same first and last frames"
    return by_frames


def model(release, plans) -> callable:
    """The scripted model: an EgoIntent step by the frames its request carries, an ActPlan-1K instance by its text."""
    by_frames, by_text = answers_by_frames(release), answering([plans])

    def respond(call: ChatCall) -> Reply:
        images = [part["image_url"]["url"] for message in call.messages if message["role"] == "user"
                  for part in message["content"] if isinstance(part, dict) and part.get("type") == "image_url"]
        if not images or "local_intent" not in call.text + str(call.messages[0]):
            return by_text(call)
        shown = tuple(read_index(Image.open(io.BytesIO(base64.b64decode(images[i].split(",", 1)[1])))) for i in (0, -1))
        return Reply(by_frames.get(shown, f"(no scripted answer for frames {shown})"))
    return respond


def judge(release) -> callable:
    rate = rating_by_script([egointent.scripted_answers(release)])

    def respond(call: ChatCall) -> Reply:
        reference = egointent._JUDGED_PAIR.search(call.text)
        if reference and FAILED_REFERENCE_WORD in reference.group(1):
            return Reply("The reference and the prediction are hard to compare; no rating.")
        return rate(call)
    return respond


def release_checkpoint(folder, tmp_path, calibration) -> tuple[str, str]:
    """A plan classifier in the release's format (``bleu-cls/finetune*.py``'s ``torch.save(model.state_dict())``:
    BERT with its pooler, and the ``mlp`` head) and the BLEURT folder it was fine-tuned from."""
    base = actplan.build_tiny_bert(tmp_path / "tiny-bert")
    suite_folder = actplan.write_classifier_checkpoint(folder, base, calibration)
    state = load_classifier(suite_folder, device="cpu").module.state_dict()
    hidden = state["bert.embeddings.word_embeddings.weight"].shape[1]
    pooler = torch.nn.Linear(hidden, hidden)
    state.update({"bert.pooler.dense.weight": pooler.weight.detach(), "bert.pooler.dense.bias": pooler.bias.detach()})
    checkpoint = tmp_path / "best-model.ckpt"
    torch.save(state, checkpoint)
    return str(checkpoint), str(base)


def calibration(data) -> list[tuple[str, str]]:
    """The plan pairs the classifier will be asked about (the scripted plans that hold steps, against their first gold
    plans) and one more, so that it judges about half of them correct, none of them by a hair."""
    from lmms_egoplan.actplan.data import load_instances
    from lmms_egoplan.actplan.plans import plan_text

    docs = load_instances(data)
    plans = [actplan.scripted_plan(actplan.SCRIPTED_KINDS[i % len(actplan.SCRIPTED_KINDS)], doc["gold_plans"][0])
             for i, doc in enumerate(docs)]
    pairs = [(plan_text(doc["gold_plans"][0]), plan_text(plan.steps)) for doc, plan in zip(docs, plans) if plan.steps]
    return pairs + [(plan_text(docs[0]["gold_plans"][0]), plan_text(docs[-1]["gold_plans"][0]))]


def test_egointent_and_actplan_in_lmms_eval_score_as_the_suites_tasks(tmp_path, monkeypatch):
    release = egointent.write_release(tmp_path / "EgoIntent")
    data = actplan.write_release_dataset(tmp_path / "ActPlan-1K", scenes=2, activities=1, samples=1)
    checkpoint, base = release_checkpoint(tmp_path / "classifier", tmp_path, calibration(data))
    plans = actplan.scripted_answers(data, checkpoint)
    with ExitStack() as servers:
        chat = servers.enter_context(ChatServer(model(release, plans), model_name="scripted-answers"))
        rater = servers.enter_context(ChatServer(judge(release)))
        for name, value in {"EGOINTENT_ANNOTATIONS": release, "EGOINTENT_JUDGE_BASE_URL": rater.base_url,
                            "EGOINTENT_JUDGE_MODEL": "scripted-judge", "EGOINTENT_JUDGE_CACHE_DIR": tmp_path / "cache",
                            "ACTPLAN_DATA_ROOT": data, "ACTPLAN_BLEURT_CHECKPOINT": checkpoint,
                            "ACTPLAN_BLEURT_BASE": base, "OPENAI_API_KEY": "unused", "API_TYPE": "openai"}.items():
            monkeypatch.setenv(name, str(value))
        same = compare(together(BENCHMARKS["egointent"], BENCHMARKS["actplan1k"]), "openai",
                       f"model_version=scripted-answers,base_url={chat.base_url},api_key=unused", None,
                       tmp_path / "work", environ=os.environ, out=(printed := io.StringIO()))
    report = printed.getvalue()
    assert same, report
    assert "lmms_egoplan modules imported: none" in report, report
    assert "judge (EGOINTENT): the same" in report, report
    for task in ("egointent", "actplan1k", "actplan1k_text_only"):
        assert f"== {task} (lmms-eval, patched) against {task} (the suite)" in report, report
    # The script drove both runs: answers were read, some judgements failed on both sides, plans were judged.
    for line in ("failed 6,", "judged 36,", "missing_fields 3,", "bleurt_accuracy 0.25,", "no_plan_rate 0.25,"):
        assert line in report, (line, report)
