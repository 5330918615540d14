"""EgoThink (patches 24 and 30), EgoIntent (patch 31) and ActPlan-1K (patch 32) on the demo's data, for
tests/e2e/test_upstream_equivalence.py: one run of the real CLI per side carries egointent, actplan1k and
actplan1k_text_only. A scripted model answers through lmms-eval's ``openai`` backend (EgoIntent's steps told apart by
the frames they show: the authors' prompt names no step; ActPlan-1K's instances by their task descriptions); a
loopback judge rates EgoIntent's fields by the same script and gives no rating to those whose reference mentions a
jar, so that both sides must fail the same judgements; a BLEURT classifier in the release's checkpoint format judges
some plans correct and others not. EgoThink runs alone (its own run per side): the demo's Hub-shaped copy, the
scripted answers and ratings, a judge withholding the ratings of the answers whose reference is
EGOTHINK_FAILED_REFERENCE."""

from __future__ import annotations

import base64
import io
from contextlib import ExitStack
from pathlib import Path

import torch
from PIL import Image

from lmms_egoplan.actplan.classifier import load_classifier
from lmms_egoplan.demo import actplan, egointent, egothink
from lmms_egoplan.demo.kit.judge_server import ChatCall, ChatServer, Reply
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.kit.scripted import MODEL_NAME, ScriptedAnswers, answering, rating_by_script
from lmms_egoplan.egointent.data import RELEASE, load_samples
from lmms_egoplan.egointent.protocol import EgoIntentSettings

EGOTHINK_FAILED_REFERENCE = "Yes."  # the reference of 4 of the demo's 24 questions, in 4 dimensions
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


def release_checkpoint(folder, workdir, calibration) -> tuple[str, str]:
    """A plan classifier in the release's format (``bleu-cls/finetune*.py``'s ``torch.save(model.state_dict())``:
    BERT with its pooler, and the ``mlp`` head) and the BLEURT folder it was fine-tuned from."""
    base = actplan.build_tiny_bert(workdir / "tiny-bert")
    suite_folder = actplan.write_classifier_checkpoint(folder, base, calibration)
    state = load_classifier(suite_folder, device="cpu").module.state_dict()
    hidden = state["bert.embeddings.word_embeddings.weight"].shape[1]
    pooler = torch.nn.Linear(hidden, hidden)
    state.update({"bert.pooler.dense.weight": pooler.weight.detach(), "bert.pooler.dense.bias": pooler.bias.detach()})
    checkpoint = workdir / "best-model.ckpt"
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


def egointent_and_actplan(workdir: Path, resources: ExitStack, tiny_model=None) -> tuple[str, str, dict[str, str]]:
    """The demo's EgoIntent release and a small ActPlan-1K release, answered by the scripted model through lmms-eval's
    openai backend and judged by the scripted judge (``model``, ``judge``), with a BLEURT classifier in the release's
    format: (model, model_args, the settings of both benchmarks). No checkpoint: ``tiny_model`` goes unused."""
    release = egointent.write_release(workdir / "EgoIntent")
    data = actplan.write_release_dataset(workdir / "ActPlan-1K", scenes=2, activities=1, samples=1)
    checkpoint, base = release_checkpoint(workdir / "classifier", workdir, calibration(data))
    chat = resources.enter_context(ChatServer(model(release, actplan.scripted_answers(data, checkpoint)),
                                              model_name=MODEL_NAME))
    rater = resources.enter_context(ChatServer(judge(release)))
    settings = {"EGOINTENT_ANNOTATIONS": release, "EGOINTENT_JUDGE_BASE_URL": rater.base_url,
                "EGOINTENT_JUDGE_MODEL": "scripted-judge", "EGOINTENT_JUDGE_CACHE_DIR": workdir / "judge-cache",
                "ACTPLAN_DATA_ROOT": data, "ACTPLAN_BLEURT_CHECKPOINT": checkpoint, "ACTPLAN_BLEURT_BASE": base,
                # lmms-eval's llm_judge (its openai provider) needs a key, which the loopback judge ignores
                "API_TYPE": "openai", "OPENAI_API_KEY": "unused"}
    return ("openai", f"model_version={MODEL_NAME},base_url={chat.base_url},api_key=unused",
            {name: str(value) for name, value in settings.items()})


def withholding(script: ScriptedAnswers, reference: str) -> callable:
    """The scripted judge of ``script``, giving no rating to the answers of ``reference``."""
    rate = rating_by_script([script])

    def respond(call: ChatCall) -> Reply:
        pair = egothink._JUDGED_PAIR.search(call.text)
        if pair and pair.group(1) == reference:
            return Reply("The answer cannot be compared with the reference; no rating.")
        return rate(call)
    return respond


def egothink_paper(workdir: Path, resources: ExitStack, tiny_model=None) -> tuple[str, str, dict[str, str]]:
    """The demo's EgoThink questions in a local copy shaped like the Hub dataset (both tasks read it as the Hub's),
    answered by the demo's script through lmms-eval's openai backend; the judge rates them by the script but for the
    answers whose reference is EGOTHINK_FAILED_REFERENCE. No checkpoint: ``tiny_model`` goes unused."""
    per_dimension = 2
    hub_copy = egothink.write_hub_copy(workdir / "EgoThink-hub", per_dimension)
    script = egothink.scripted_answers(workdir / "unused", per_dimension)
    model = resources.enter_context(ChatServer(answering([script]), model_name=MODEL_NAME))
    rater = resources.enter_context(ChatServer(withholding(script, EGOTHINK_FAILED_REFERENCE)))
    settings = {"EGOTHINK_HUB_REPO": hub_copy, "EGOTHINK_IMAGE_CACHE": workdir / "image-cache",
                "EGOTHINK_JUDGE_BASE_URL": rater.base_url, "EGOTHINK_JUDGE_MODEL": "scripted-judge",
                "EGOTHINK_JUDGE_CACHE_DIR": workdir / "judge-cache",
                # lmms-eval's llm_judge (its openai provider) needs a key, which the loopback judge ignores
                "API_TYPE": "openai", "OPENAI_API_KEY": "unused"}
    return ("openai", f"model_version={MODEL_NAME},base_url={model.base_url},api_key=unused",
            {name: str(value) for name, value in settings.items()})
