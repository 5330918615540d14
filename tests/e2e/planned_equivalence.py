"""EgoThink (patches 24 and 30) and ActPlan-1K (patch 32) on the demo's data, for
tests/e2e/test_upstream_equivalence.py. ActPlan-1K: one run of the real CLI per side carries actplan1k and
actplan1k_text_only; a scripted model answers through lmms-eval's ``openai`` backend (the instances told apart by
their task descriptions); no BLEURT classifier (32 has none). EgoThink: the demo's Hub-shaped copy, the scripted
answers and ratings, a judge withholding the ratings of the answers whose reference is EGOTHINK_FAILED_REFERENCE."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from lmms_egoplan.core.embeddings import default_sentence_model
from lmms_egoplan.demo import actplan, egothink
from lmms_egoplan.demo.kit.judge_server import ChatCall, ChatServer, Reply
from lmms_egoplan.demo.kit.scripted import MODEL_NAME, ScriptedAnswers, answering, rating_by_script

EGOTHINK_FAILED_REFERENCE = "Yes."  # the reference of 4 of the demo's 24 questions, in 4 dimensions
EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # the one actplan1k's metadata names


def hub_cache_holding(model_id: str, folder: str, cache: Path) -> Path:
    """A Hugging Face Hub cache holding ``folder``'s files as ``model_id``'s main revision (links, no copy)."""
    snapshot = cache / f"models--{model_id.replace('/', '--')}" / "snapshots" / "local"
    for file in (path for path in Path(folder).rglob("*") if path.is_file()):
        (snapshot / file.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / file.relative_to(folder)).symlink_to(file)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("local")
    return cache


def actplan_release(workdir: Path, resources: ExitStack, tiny_model=None) -> tuple[str, str, dict[str, str]]:
    """A small ActPlan-1K release answered by the scripted model through lmms-eval's openai backend, without a BLEURT
    classifier (32 has none: the authors publish none): (model, model_args, the settings). No checkpoint: ``tiny_model``
    goes unused."""
    data = actplan.write_release_dataset(workdir / "ActPlan-1K", scenes=2, activities=1, samples=1)
    chat = resources.enter_context(ChatServer(answering([actplan.scripted_answers(data, None)]),
                                              model_name=MODEL_NAME))
    settings = {"ACTPLAN_DATA_ROOT": data,
                # lmms-eval's task loads the embedding model its metadata names from the Hub, offline: from this cache
                "HF_HUB_CACHE": hub_cache_holding(EMBEDDING_MODEL, default_sentence_model(), workdir / "hub-cache")}
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
