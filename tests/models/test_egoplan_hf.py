"""egoplan_hf in-process: likelihood values, prefix sharing, visuals, generation, errors.

The lmms-eval CLI runs (single process, two ranks, response cache) are in tests/e2e/test_egoplan_hf.py.
"""

from __future__ import annotations

import json
import os
import shutil
import threading

import pytest
import torch
from loguru import logger

from lmms_egoplan.core.media import MediaError, as_video_frames
from lmms_egoplan.core.request_options import (
    ANSWER,
    ANSWER_AND_END_OF_TURN,
    INPUT_ORDER,
    LOSS_MEAN,
    NONZERO_LOSS_TOKENS,
    SCORED_SPAN,
    TEXT_FIRST,
)
from lmms_egoplan.core.settings import SettingsError
from lmms_egoplan.demo.kit.checkpoints import ANSWER_OPENING, ARCHITECTURES, BOS_ADDING, CHAT_TEMPLATES, END_OF_TURN
from lmms_egoplan.demo.kit.media import index_image, read_index, write_video
from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models import egoplan_hf
from lmms_egoplan.models.chat import ChatRenderer, ChatTemplateError
from lmms_egoplan.models.egoplan_hf import ContextTooLongError, EgoPlanHF
from lmms_egoplan.models.likelihood import (
    GENERATION_CONFIG,
    TEMPLATE,
    TOKENIZER,
    PromptAlignmentError,
    TurnEnd,
    scored_sequence,
    special_token_ids,
    turn_end,
)
from lmms_egoplan.models.visuals import UnsupportedVisualError, VisualLimits, prepare_visuals

ARCHS = [arch for arch in ARCHITECTURES if arch != "llama"]  # every multimodal tiny checkpoint
TASK, SPLIT = "probe", "test"
CHOICES = ["open the fridge", "wash the hands", "put the pan on the stove", "take the cup"]
# The module that runs the vision encoder, per architecture (to count its forward passes).
VISION_TOWER = {**dict.fromkeys(ARCHS, "vision_tower"),
                **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen3_vl"), "visual"),
                "idefics3": "vision_model", "smolvlm": "vision_model"}
# Vision encoder runs per question for EgoPlan's clip and image: one for both, or (separate video
# input) one for the image and one for the video.
ENCODER_RUNS = {**dict.fromkeys(ARCHS, 1), **dict.fromkeys(("llava_onevision", "qwen2_vl", "qwen2_5_vl", "qwen3_vl",
                                                           "llava_next_video"), 2)}

# Like the real LLaVA-1.5 template: the generation prompt ends "ASSISTANT:" but the assistant
# turn renders "ASSISTANT: <answer>", so the space before the answer is the template's, and the
# tokenizer merges it with the answer's first word (" wash" is one token).
SPACED_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}{{ 'USER: ' }}"
    "{% for p in m['content'] %}{% if p['type'] == 'image' %}{{ '<image>\\n' }}{% else %}{{ p['text'] }}{% endif %}"
    "{% endfor %}{{ ' ' }}{% else %}{{ 'ASSISTANT: ' }}{% for p in m['content'] %}{{ p['text'] }}{% endfor %}"
    "{{ eos_token }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def egoplan_doc(seed: int) -> dict:
    return {"question": f"Task goal: make coffee (case {seed}). Considering the progress shown in the video "
                        f"and my current observation in the last frame, what action should I take next?",
            "frames": list(range(seed * 8, seed * 8 + 8)), "observation": 1000 + seed}


def egoplan_visuals(doc: dict) -> list:
    """What EgoPlan-Bench sends: 8 progress frames tagged as one clip, then the observation image."""
    frames = as_video_frames([index_image(i, size=(48, 40)) for i in doc["frames"]], clip="progress")
    return [*frames, index_image(doc["observation"], size=(56, 42))]


def mc_requests(backend: EgoPlanHF, docs: list[dict], choices=CHOICES, doc_to_visual=egoplan_visuals,
                delimiter: str = " ", span: str | None = None, **options: str) -> list[SuiteInstance]:
    """lmms-eval's multiple_choice requests; ``span``: the scored span the task asks for, if any;
    ``options``: other request options by name (``loss_mean``, ``input_order``)."""
    backend.task_dict = {TASK: {SPLIT: docs}}
    requests = [SuiteInstance(request_type="loglikelihood", idx=i,
                         arguments=(doc["question"], delimiter + choice, doc_to_visual, doc_id, TASK, SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, doc in enumerate(docs) for i, choice in enumerate(choices)]
    if span is not None:
        SCORED_SPAN.mark(requests, span)
    for option in (LOSS_MEAN, INPUT_ORDER):
        if option.name in options:
            option.mark(requests, options[option.name])
    return requests


def gen_requests(backend: EgoPlanHF, docs: list[dict], **generation_kwargs) -> list[SuiteInstance]:
    backend.task_dict = {TASK: {SPLIT: docs}}
    return [SuiteInstance(request_type="generate_until", idx=0,
                     arguments=(doc["question"], dict(generation_kwargs), egoplan_visuals, doc_id, TASK, SPLIT),
                     metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
            for doc_id, doc in enumerate(docs)]


@pytest.fixture(scope="module")
def backend(tiny_model):
    """``backend(arch, **model_args)``: one EgoPlanHF per (arch, args), shared by the module's tests."""
    loaded = {}

    def get(arch: str, **model_args) -> EgoPlanHF:
        key = (arch, tuple(sorted(model_args.items())))
        if key not in loaded:
            loaded[key] = EgoPlanHF(pretrained=str(tiny_model(arch)),
                                    **{"device": "cpu", "dtype": "float32", **model_args})
        return loaded[key]

    return get


def model_visuals(model: EgoPlanHF, doc: dict):
    return prepare_visuals(egoplan_visuals(doc), limits=model.limits, video_native=model.video_native,
                           takes_images=model.takes_images, model_name=model.pretrained,
                           videos_with_images=model.videos_with_images)


# The token each tiny template closes the assistant's turn with (its END_OF_TURN, newline left out);
# llava-hf's templates (LLaVA-1.5, LLaVA-NeXT-Video) close it with a space, no special token.
SCORED_END_OF_TURN = {arch: END_OF_TURN[arch].rstrip("\n") for arch in ARCHS if END_OF_TURN[arch].strip()}
CLOSING_ARCHS = list(SCORED_END_OF_TURN)


def labelled_loss(model: EgoPlanHF, doc: dict, answer: str, *, with_end_of_turn: bool = False,
                  end_of_turn: str | None = None) -> float:
    """Reference: HF's own loss over the answer tokens (and the token closing the turn) of one full
    forward pass.

    The tiny templates render ``prompt + opening + answer + end_of_turn`` (test_checkpoints checks it),
    so the answer's tokens are those between the generation prompt and the end-of-turn marker (the
    opening space merges into the answer's first word), and the closing token is the marker's first.
    ``end_of_turn``: a closing token written right after the answer instead, and scored.
    """
    arch = model.model.config.model_type
    if end_of_turn is not None:
        unscored = ""
    else:
        end_of_turn = END_OF_TURN[arch]
        unscored = end_of_turn.removeprefix(SCORED_END_OF_TURN[arch]) if with_end_of_turn else end_of_turn
    visuals = model_visuals(model, doc)
    prompt = model.chat.generation_prompt(model.chat.user_turn(visuals.parts, doc["question"]))
    inputs = model._on_device(model._encode([prompt + ANSWER_OPENING[arch] + answer + end_of_turn], [visuals],
                                            "reference"))  # a Qwen-VL's pixels normalised there, as the model gets them
    first = model._encode([prompt], [visuals], "reference")["input_ids"].shape[1]
    stop = inputs["input_ids"].shape[1] - len(model.tokenizer(unscored, add_special_tokens=False)["input_ids"])
    labels = torch.full_like(inputs["input_ids"], -100)
    labels[:, first:stop] = inputs["input_ids"][:, first:stop]
    with torch.inference_mode():
        return float(model.model(**inputs, labels=labels).loss)


# ---------------------------------------------------------------------------------------------
# loglikelihood: values, prefix sharing, the delimiter, the boundary merge
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_prefix_shared_scores_equal_a_full_forward_per_candidate(arch, backend):
    docs = [egoplan_doc(0), egoplan_doc(1)]
    shared = backend(arch).loglikelihood(mc_requests(backend(arch), docs))
    naive = backend(arch, prefix_sharing=False).loglikelihood(mc_requests(backend(arch, prefix_sharing=False), docs))
    assert len(shared) == len(naive) == 8
    for (value, greedy), (expected, expected_greedy) in zip(shared, naive):
        assert value == pytest.approx(expected, abs=1e-4) and greedy == expected_greedy
    for question in (slice(0, 4), slice(4, 8)):
        assert min(range(4), key=lambda i: shared[question][i][0]) == min(range(4), key=lambda i: naive[question][i][0])
    # The naive values are HF's loss over exactly the answer tokens (delimiter stripped).
    references = [labelled_loss(backend(arch), docs[0], choice) for choice in CHOICES]
    assert [v for v, _ in naive[:4]] == pytest.approx(references, abs=1e-5)
    # Different docs, different visuals: the scores are not all the same.
    assert len({round(v, 6) for v, _ in shared}) > 4


@pytest.mark.parametrize("arch", CLOSING_ARCHS)
def test_the_end_of_turn_span_scores_the_answer_and_the_token_closing_the_turn(arch, backend):
    docs = [egoplan_doc(0), egoplan_doc(1)]
    span = ANSWER_AND_END_OF_TURN
    shared = backend(arch).loglikelihood(mc_requests(backend(arch), docs, span=span))
    naive_model = backend(arch, prefix_sharing=False)
    naive = naive_model.loglikelihood(mc_requests(naive_model, docs, span=span))
    for (value, greedy), (expected, expected_greedy) in zip(shared, naive):
        assert value == pytest.approx(expected, abs=1e-4) and greedy == expected_greedy
    for question in (slice(0, 4), slice(4, 8)):
        assert min(range(4), key=lambda i: shared[question][i][0]) == min(range(4), key=lambda i: naive[question][i][0])
    references = [labelled_loss(backend(arch), docs[0], choice, with_end_of_turn=True) for choice in CHOICES]
    assert [v for v, _ in shared[:4]] == pytest.approx(references, abs=1e-4)
    assert [v for v, _ in naive[:4]] == pytest.approx(references, abs=1e-5)
    answer_only = backend(arch).loglikelihood(mc_requests(backend(arch), docs))
    # Every score moves (by the closing token's NLL minus the answer's mean, which a near-uniform tiny
    # model can make small), most by far more than the tolerance above.
    assert all(a[0] != b[0] for a, b in zip(shared, answer_only))
    assert sum(abs(a[0] - b[0]) > 1e-3 for a, b in zip(shared, answer_only)) >= len(shared) // 2


def test_the_end_of_turn_token_flips_the_ranking_of_a_candidate_and_its_own_prefix(backend):
    """A model biased, through its logits, so that the turn does not end after "cupboard" but does
    after "door", and "door" is unlikely after "cupboard": answer-only scoring prefers the prefix,
    the official range (answer + end-of-turn) the whole action."""
    short, long = "open the cupboard", "open the cupboard door"
    for prefix_sharing in (True, False):
        model = backend("qwen2_vl", prefix_sharing=prefix_sharing)
        rendered = model.chat.with_answers(model.chat.user_turn([], "Next?"), [short, long])
        short_ids, long_ids = (scored_sequence(model.tokenizer, r) for r in rendered)
        end_of_turn = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
        last_short, extra, last_long = (short_ids.token_ids[short_ids.stop - 1], long_ids.token_ids[short_ids.stop],
                                        long_ids.token_ids[long_ids.stop - 1])
        assert len({last_short, extra, last_long}) == 3
        bias = torch.zeros(len(model.tokenizer), len(model.tokenizer))  # bias[input token, next token]
        bias[last_short, end_of_turn], bias[last_short, extra], bias[last_long, end_of_turn] = -30.0, -10.0, 30.0

        def biased(module, args, kwargs, output):
            logits = output.logits
            output.logits = logits + bias[kwargs["input_ids"][:, -logits.shape[1]:]].to(logits.dtype)
            return output

        hook = model.model.register_forward_hook(biased, with_kwargs=True)
        try:
            rankings = {}
            for span in SCORED_SPAN.values:
                values = [v for v, _ in model.loglikelihood(mc_requests(model, [egoplan_doc(2)], choices=[short, long],
                                                                        span=span))]
                rankings[span] = min(range(2), key=values.__getitem__)
        finally:
            hook.remove()
        assert rankings == {ANSWER: 0, ANSWER_AND_END_OF_TURN: 1}


# llava-hf's templates close the assistant's turn with a space (``ASSISTANT: <answer> ``); the oracle
# template writes the model's EOS right after the answer instead, as LLaVA's training conversations do.
ASSISTANT_TEXT = "{% generation %}{{ part['text'] + ' ' }}{% endgeneration %}"
EOS_CLOSED_TEMPLATES = {arch: CHAT_TEMPLATES[arch].replace(ASSISTANT_TEXT, ASSISTANT_TEXT.replace("' '", "'</s>'"))
                        for arch in ("llava", "llava_next_video")}


@pytest.mark.parametrize("prefix_sharing", [True, False])
@pytest.mark.parametrize("arch", list(EOS_CLOSED_TEMPLATES))
def test_a_template_without_a_closing_special_token_gets_the_models_eos_as_a_template_writing_it(
        arch, prefix_sharing, backend, tmp_path):
    """The model's own EOS (its generation_config's ``</s>``) is scored right after the answer: every
    candidate's loss equals the loss with a template that writes ``</s>`` there (abs 1e-6)."""
    assert EOS_CLOSED_TEMPLATES[arch] != CHAT_TEMPLATES[arch]
    oracle_template = tmp_path / "eos_closed.jinja"
    oracle_template.write_text(EOS_CLOSED_TEMPLATES[arch])
    model = backend(arch, prefix_sharing=prefix_sharing)
    oracle = backend(arch, prefix_sharing=prefix_sharing, chat_template=str(oracle_template))
    assert model.turn_end == TurnEnd("</s>", GENERATION_CONFIG) and oracle.turn_end == TurnEnd("</s>", TEMPLATE)
    docs = [egoplan_doc(0), egoplan_doc(1)]
    scores = model.loglikelihood(mc_requests(model, docs, span=ANSWER_AND_END_OF_TURN))
    expected = oracle.loglikelihood(mc_requests(oracle, docs, span=ANSWER_AND_END_OF_TURN))
    assert len(scores) == 8
    for (value, greedy), (expected_value, expected_greedy) in zip(scores, expected):
        assert value == pytest.approx(expected_value, abs=1e-6) and greedy == expected_greedy
    # HF's own loss over the answer and the </s> of the oracle's rendering
    references = [labelled_loss(model, docs[0], choice, end_of_turn="</s>") for choice in CHOICES]
    assert [v for v, _ in scores[:4]] == pytest.approx(references, abs=1e-4 if prefix_sharing else 1e-5)
    answer_only = model.loglikelihood(mc_requests(model, docs))
    assert sum(abs(a[0] - b[0]) > 1e-3 for a, b in zip(scores, answer_only)) >= len(scores) // 2


def test_the_end_of_turn_token_comes_from_the_generation_config_then_the_tokenizer_else_an_error(tiny_model):
    from transformers import AutoProcessor, GenerationConfig

    processor = AutoProcessor.from_pretrained(tiny_model("llava"))
    chat = ChatRenderer(processor, "llava")
    [rendered] = chat.with_answers(chat.user_turn([], "Next?"), ["wash the hands"])
    tokenizer = processor.tokenizer
    pad = tokenizer.convert_tokens_to_ids("<pad>")
    assert turn_end(tokenizer, rendered, GenerationConfig(eos_token_id=[pad, tokenizer.eos_token_id])) == \
        TurnEnd("<pad>", GENERATION_CONFIG)  # the first the generation config stops at
    assert turn_end(tokenizer, rendered, GenerationConfig()) == TurnEnd("</s>", TOKENIZER)
    tokenizer.eos_token = None
    with pytest.raises(ChatTemplateError, match=r"closes the assistant's turn with no special token.*\(' '\).*neither"):
        turn_end(tokenizer, rendered, GenerationConfig(), model_name="llava")


@pytest.mark.parametrize("prefix_sharing", [True, False])
def test_the_official_loss_mean_leaves_out_a_token_the_model_is_certain_of(prefix_sharing, backend):
    """A model biased, through its logits, to be certain of the second token of "wash the hands" after
    its first (a logit 1e4 above the rest: its loss is exactly 0 in float32, as a near-certain token's
    rounds to 0 under the official fp16 autocast). The official mean divides that candidate's summed
    loss by one token fewer; every other candidate keeps its value."""
    model = backend("qwen2_vl", prefix_sharing=prefix_sharing)
    [rendered] = model.chat.with_answers(model.chat.user_turn([], "Next?"), ["wash the hands"])
    sequence = scored_sequence(model.tokenizer, rendered)
    first, second = sequence.token_ids[sequence.first:sequence.first + 2]
    scored = sequence.stop - sequence.first
    bias = torch.zeros(len(model.tokenizer))
    bias[second] = 1e4

    def certain(module, args, kwargs, output):
        previous = kwargs["input_ids"][:, -output.logits.shape[1]:]
        output.logits = output.logits + (previous == first)[..., None] * bias.to(output.logits.dtype)
        return output

    hook = model.model.register_forward_hook(certain, with_kwargs=True)
    try:
        docs = [egoplan_doc(3)]
        every = [v for v, _ in model.loglikelihood(mc_requests(model, docs, doc_to_visual=lambda doc: []))]
        official = [v for v, _ in model.loglikelihood(mc_requests(model, docs, doc_to_visual=lambda doc: [],
                                                                  loss_mean=NONZERO_LOSS_TOKENS))]
    finally:
        hook.remove()
    wash = CHOICES.index("wash the hands")
    assert official[wash] == pytest.approx(every[wash] * scored / (scored - 1), rel=1e-6)
    assert [v for i, v in enumerate(official) if i != wash] == [v for i, v in enumerate(every) if i != wash]


@pytest.mark.parametrize("arch", ["qwen2_vl", "gemma3"])
def test_a_request_asking_for_the_text_first_gets_its_visuals_after_the_text(arch, backend):
    """ActPlan-1K's order, VLM([T, I1, I2, ...]): the text, then the images, in both paths (where the
    template renders the parts in order: llava-hf's put a turn's images first whatever the order)."""
    model = backend(arch)
    prompts = []
    encode = model._encode

    def recording(texts, visuals, where):
        prompts.extend(texts)
        return encode(texts, visuals, where)

    model._encode = recording
    try:
        docs = [egoplan_doc(4)]
        model.loglikelihood(mc_requests(model, docs, input_order=TEXT_FIRST))
        requests = gen_requests(model, docs, max_new_tokens=1)
        INPUT_ORDER.mark(requests, TEXT_FIRST)
        model.generate_until(requests)
    finally:
        del model._encode
    placeholder = model.processor.image_token
    for prompt in prompts:
        assert prompt.index(docs[0]["question"]) < prompt.index(placeholder)
    default = model.chat.generation_prompt(model.chat.user_turn([{"type": "image"}], docs[0]["question"]))
    assert default.index(placeholder) < default.index(docs[0]["question"])


@pytest.mark.parametrize("arch", ARCHS)
def test_vision_encoder_and_visual_decoding_run_once_per_question(arch, backend):
    encoder_runs_per_question = ENCODER_RUNS[arch]
    calls = {"doc_to_visual": 0, "vision": 0}

    def counting_visuals(doc):
        calls["doc_to_visual"] += 1
        return egoplan_visuals(doc)

    def count_vision(*_):
        calls["vision"] += 1

    docs = [egoplan_doc(0), egoplan_doc(1)]
    for prefix_sharing, runs_per_question in ((True, encoder_runs_per_question),
                                              (False, 4 * encoder_runs_per_question)):
        model = backend(arch, prefix_sharing=prefix_sharing)
        hook = getattr(model.model.model, VISION_TOWER[arch]).register_forward_hook(count_vision)
        calls.update(doc_to_visual=0, vision=0)
        try:
            model.loglikelihood(mc_requests(model, docs, doc_to_visual=counting_visuals))
        finally:
            hook.remove()
        assert calls == {"doc_to_visual": len(docs), "vision": len(docs) * runs_per_question}


@pytest.mark.parametrize("prefix_sharing", [True, False])
def test_a_processor_that_rewrites_text_outside_the_placeholders_is_refused_naming_the_architecture(
        prefix_sharing, backend, monkeypatch):
    model = backend("qwen2_vl", prefix_sharing=prefix_sharing)
    processor_call = type(model.processor).__call__

    def rewriting(self, *args, text, **kwargs):  # changes the end of each turn, after the answer
        return processor_call(self, *args, text=[t.replace("<|im_end|>", ".<|im_end|>") for t in text], **kwargs)

    monkeypatch.setattr(type(model.processor), "__call__", rewriting)
    with pytest.raises(PromptAlignmentError,
                       match=rf"{model.pretrained}: .*the qwen2_vl processor changes text outside "
                                                   r"the visual placeholders, which egoplan_hf cannot score"):
        model.loglikelihood(mc_requests(model, [egoplan_doc(0)]))


def test_target_delimiter_is_stripped_inside_the_assistant_turn(backend):
    """lmms-eval sends `" " + choice`; in a chat turn the answer starts the turn, without the space."""
    docs = [egoplan_doc(0)]
    spaced = backend("qwen2_vl").loglikelihood(mc_requests(backend("qwen2_vl"), docs, delimiter=" "))
    bare = backend("qwen2_vl").loglikelihood(mc_requests(backend("qwen2_vl"), docs, delimiter=""))
    assert spaced == bare
    kept = backend("qwen2_vl", lstrip_continuation=False)
    with_space = kept.loglikelihood(mc_requests(kept, docs, delimiter=" "))
    assert all(abs(a[0] - b[0]) > 1e-3 for a, b in zip(with_space, spaced))


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_model_gets_the_tokens_its_own_processor_gives_the_conversation(arch, backend, tiny_model):
    """The oracle: transformers' ``apply_chat_template(tokenize=True)`` of the model's own processor (a
    text-only model's tokenizer), which adds the BOS unless the template wrote it. egoplan_hf's model
    input and the scored sequence's ids are its ids: with the BOS for llava-hf's LLaVA-1.5 and
    LLaVA-NeXT-Video, whose templates write none, and with one BOS where the template writes it."""
    model = backend(arch) if arch != "llama" else EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu",
                                                           dtype="float32")
    images = [] if arch == "llama" else [index_image(1, size=(48, 40)), index_image(2, size=(56, 42))]
    visuals = prepare_visuals(images, limits=model.limits, video_native=model.video_native,
                              takes_images=model.takes_images, model_name=arch,
                              videos_with_images=model.videos_with_images)
    [rendered] = model.chat.with_answers(model.chat.user_turn(visuals.parts, "What next?"), ["wash the hands"])
    conversation = [{"role": "user", "content": [*({"type": "image", "image": image} for image in images),
                                                 {"type": "text", "text": "What next?"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "wash the hands"}]}]
    oracle = model.processor.apply_chat_template(conversation, tokenize=True, return_dict=True)["input_ids"]
    oracle = oracle.tolist() if isinstance(oracle, torch.Tensor) else oracle
    oracle = oracle[0] if isinstance(oracle[0], list) else oracle
    assert model._encode([rendered.text], [visuals], "the oracle")["input_ids"][0].tolist() == oracle
    sequence = scored_sequence(model.tokenizer, rendered,
                               add_special_tokens=model.chat.adds_special_tokens(rendered.text))
    bos = model.tokenizer.bos_token_id
    assert sequence.token_ids[1] != bos and (arch not in BOS_ADDING or sequence.token_ids[0] == bos)
    if not images:
        assert sequence.token_ids == oracle


@pytest.mark.parametrize("arch", ARCHS)
def test_scored_tokens_are_exactly_the_answer(arch, tiny_model):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model(arch))
    chat = ChatRenderer(processor, arch)
    answers = ["B", "wash the hands", "put the pan on the stove, then 煮 water."]
    for answer, rendered in zip(answers, chat.with_answers(chat.user_turn([{"type": "image"}], "Next?"), answers)):
        sequence = scored_sequence(processor.tokenizer, rendered)
        scored = processor.tokenizer.decode(sequence.token_ids[sequence.first:sequence.stop])
        # llava-hf's "ASSISTANT: " opening space merges into a first word (" wash"), which is scored.
        assert scored.removeprefix(ANSWER_OPENING[arch]) == answer
        assert rendered.text[rendered.end:] == END_OF_TURN[arch]  # the end-of-turn marker is not scored
        if arch not in SCORED_END_OF_TURN:
            with pytest.raises(ChatTemplateError, match="no special token"):
                scored_sequence(processor.tokenizer, rendered, end_of_turn_ids=special_token_ids(processor.tokenizer))
            continue
        closed = scored_sequence(processor.tokenizer, rendered, end_of_turn_ids=special_token_ids(processor.tokenizer))
        assert closed.first == sequence.first
        assert (processor.tokenizer.decode(closed.token_ids[closed.first:closed.stop])
                == answer + SCORED_END_OF_TURN[arch])


def test_tokens_merged_across_the_answer_boundary_are_scored_and_shared_prefix_stops_before_them(
        backend, tmp_path, tiny_model):
    template = tmp_path / "spaced.jinja"
    template.write_text(SPACED_TEMPLATE)
    shared = backend("llava", chat_template=str(template))
    chat, tokenizer = shared.chat, shared.tokenizer
    rendered = chat.with_answers(chat.user_turn([], "Next?"), ["wash the hands", "B"])
    merged, separate = (scored_sequence(tokenizer, r) for r in rendered)
    # " wash" is one token holding the template's space: it is scored (it produces "wash").
    assert tokenizer.decode(merged.token_ids[merged.first:merged.stop]) == " wash the hands"
    # " B" is not a token: the space stays a token of its own, outside the answer.
    assert tokenizer.decode(separate.token_ids[separate.first:separate.stop]) == "B"
    assert merged.token_ids[:merged.first] != separate.token_ids[:separate.first]
    choices = ["wash the hands", "B", "take the cup", "open the fridge"]
    naive = backend("llava", chat_template=str(template), prefix_sharing=False)
    docs = [egoplan_doc(3)]
    expected = naive.loglikelihood(mc_requests(naive, docs, choices=choices))
    got = shared.loglikelihood(mc_requests(shared, docs, choices=choices))
    assert [v for v, _ in got] == pytest.approx([v for v, _ in expected], abs=1e-4)


def test_more_candidates_than_one_continuation_batch(backend):
    docs = [egoplan_doc(4)]
    chunked = backend("qwen2_vl", continuation_batch_size=3)
    whole = backend("qwen2_vl")
    choices = CHOICES + ["close the door", "stir the soup", "pour the water"]
    in_chunks = chunked.loglikelihood(mc_requests(chunked, docs, choices=choices))
    at_once = whole.loglikelihood(mc_requests(whole, docs, choices=choices))
    assert [v for v, _ in in_chunks] == pytest.approx([v for v, _ in at_once], abs=1e-5)


def test_context_free_requests_are_scored(backend):
    """acc_mutual_info adds (context="", continuation) requests without visuals."""
    model = backend("qwen2_vl")
    request = SuiteInstance(request_type="loglikelihood", arguments=("", " wash the hands"), idx=0,
                       metadata={"task": TASK, "doc_id": 0, "repeats": 1})
    [(value, greedy)] = model.loglikelihood([request])
    assert value > 0 and isinstance(greedy, bool)


# ---------------------------------------------------------------------------------------------
# Visuals
# ---------------------------------------------------------------------------------------------


def test_egoplan_visuals_become_a_video_and_an_image_for_video_models_and_images_otherwise():
    limits = VisualLimits()
    native = prepare_visuals(egoplan_visuals(egoplan_doc(0)), limits=limits, video_native=True,
                             takes_images=True, model_name="m")
    assert native.parts == [{"type": "video"}, {"type": "image"}]
    assert [read_index(f) for f in native.videos[0].frames] == list(range(8)) and read_index(native.images[0]) == 1000
    flat = prepare_visuals(egoplan_visuals(egoplan_doc(0)), limits=limits, video_native=False,
                           takes_images=True, model_name="m")
    assert flat.parts == [{"type": "image"}] * 9 and not flat.videos
    assert [read_index(i) for i in flat.images] == [*range(8), 1000]


# How many frames of a clip reach the model, per architecture whose processor takes videos: its own
# video input, or (InternVL, SmolVLM) frames laid out by the processor among the image tiles.
VIDEO_FRAMES = {
    "llava_onevision": lambda inputs: inputs["pixel_values_videos"].shape[1],
    "llava_next_video": lambda inputs: inputs["pixel_values_videos"].shape[1],
    "qwen2_vl": lambda inputs: int(inputs["video_grid_thw"][0, 0]) * 2,  # temporal patches of 2 frames
    "qwen2_5_vl": lambda inputs: int(inputs["video_grid_thw"][0, 0]) * 2,
    "qwen3_vl": lambda inputs: int(inputs["video_grid_thw"][0, 0]) * 2,
    "internvl": lambda inputs: inputs["pixel_values"].shape[0],
    "smolvlm": lambda inputs: inputs["pixel_values"].shape[1],
}
# The processor's own text around a video's frames, where it writes one.
VIDEO_LAYOUT = {"internvl": "Frame8: <img>", "smolvlm": "the following series of eight frames",
                "qwen3_vl": "seconds><|vision_start|><|video_pad|>"}


@pytest.mark.parametrize("arch", ARCHS)
def test_a_clip_goes_to_the_model_as_a_video_where_the_processor_takes_videos(arch, backend):
    model = backend(arch)
    assert model.video_native == (arch in VIDEO_FRAMES)
    clip = prepare_visuals(egoplan_visuals(egoplan_doc(0))[:-1], limits=model.limits, video_native=model.video_native,
                           takes_images=model.takes_images, model_name=model.pretrained)
    inputs = model._encode([model.chat.generation_prompt(model.chat.user_turn(clip.parts, "Q"))], [clip], "test")
    if arch not in VIDEO_FRAMES:  # image-only processor: the frames are 8 images
        assert clip.parts == [{"type": "image"}] * 8 and "pixel_values_videos" not in inputs
        return
    assert clip.parts == [{"type": "video"}]
    assert VIDEO_FRAMES[arch](inputs) == 8  # every frame the backend sampled, none resampled by the processor
    assert VIDEO_LAYOUT.get(arch, "") in model.tokenizer.decode(inputs["input_ids"][0])
    # EgoPlan's clip and observation image together: as a video and an image, except where the processor
    # cannot take both in one prompt (SmolVLM), which gets the frames and the image as 9 images.
    both = model_visuals(model, egoplan_doc(0))
    if arch == "smolvlm":
        assert not model.videos_with_images and both.parts == [{"type": "image"}] * 9
    else:
        assert both.parts == [{"type": "video"}, {"type": "image"}]


def test_videos_as_frames_shows_a_clip_as_the_images_of_an_untagged_frame_list(backend):
    """``videos_as_frames=true``: the clip's frames go as images, scored as the same frames untagged (how lmms-eval's
    own backends show a task's frame list)."""
    model = backend("qwen2_vl", videos_as_frames=True)
    assert not model.video_native and model_visuals(model, egoplan_doc(0)).parts == [{"type": "image"}] * 9

    def untagged(doc):
        frames = [frame.copy() for frame in egoplan_visuals(doc)]
        for frame in frames:
            frame.info.clear()  # no clip tag, no time
        return frames

    as_frames = model.loglikelihood(mc_requests(model, [egoplan_doc(0)], span=ANSWER_AND_END_OF_TURN))
    as_images = model.loglikelihood(mc_requests(model, [egoplan_doc(0)], doc_to_visual=untagged,
                                                span=ANSWER_AND_END_OF_TURN))
    assert as_frames == as_images
    video = backend("qwen2_vl").loglikelihood(mc_requests(backend("qwen2_vl"), [egoplan_doc(0)],
                                                          span=ANSWER_AND_END_OF_TURN))
    assert [loss for loss, _ in video] != [loss for loss, _ in as_frames]


def test_a_batch_mixing_video_prompts_and_image_prompts_is_refused_where_the_processor_cannot_take_both(backend):
    model = backend("smolvlm", batch_size=2)
    docs = [egoplan_doc(0), egoplan_doc(1)]

    def clip_or_image(doc):  # doc 0: EgoPlan's clip alone (a video); doc 1: its observation image alone
        return egoplan_visuals(doc)[:-1] if doc is docs[0] else egoplan_visuals(doc)[-1:]

    requests = gen_requests(model, docs, max_new_tokens=2)
    for request in requests:
        request.arguments = (*request.arguments[:2], clip_or_image, *request.arguments[3:])
    with pytest.raises(UnsupportedVisualError, match=rf"{model.pretrained}: SmolVLMProcessor cannot take videos and "
                                                     r"images in one call, .*run with --batch_size 1"):
        model.generate_until(requests)
    one_at_a_time = backend("smolvlm")
    one_at_a_time.task_dict = model.task_dict
    assert len(one_at_a_time.generate_until(requests)) == 2


def test_video_files_are_sampled_uniformly_and_long_clips_are_capped(tmp_path):
    video = write_video(tmp_path / "clip.mp4", num_frames=40)
    limits = VisualLimits(max_frames=5, video_max_side=32, image_max_pixels=20 * 20)
    prepared = prepare_visuals([str(video), index_image(7, size=(64, 64))], limits=limits, video_native=True,
                               takes_images=True, model_name="m")
    assert [read_index(f) for f in prepared.videos[0].frames] == [0, 10, 20, 29, 39]
    assert max(prepared.videos[0].frames[0].size) == 32
    assert prepared.images[0].size == (20, 20)
    long_clip = [[index_image(i) for i in range(20)]]  # a nested frame list is a video too
    capped = prepare_visuals(long_clip, limits=limits, video_native=False, takes_images=True, model_name="m")
    assert [read_index(f) for f in capped.images] == [0, 5, 10, 14, 19]


def test_unusable_visuals_raise_naming_the_model(tmp_path):
    with pytest.raises(UnsupportedVisualError, match=r"my-model: cannot take a visual of type dict"):
        prepare_visuals([{"array": [0.0], "sampling_rate": 16000}], limits=VisualLimits(), video_native=True,
                        takes_images=True, model_name="my-model")
    with pytest.raises(UnsupportedVisualError, match=r"my-llm is a text-only model"):
        prepare_visuals([index_image(1)], limits=VisualLimits(), video_native=False, takes_images=False,
                        model_name="my-llm")
    with pytest.raises(MediaError, match="missing.mp4"):
        prepare_visuals([str(tmp_path / "missing.mp4")], limits=VisualLimits(), video_native=True,
                        takes_images=True, model_name="m")


def test_text_only_checkpoint_scores_text_and_refuses_visuals(tiny_model):
    model = EgoPlanHF(pretrained=str(tiny_model("llama")), device="cpu", dtype="float32")
    text_only = mc_requests(model, [egoplan_doc(0)], doc_to_visual=lambda doc: [])
    assert len(model.loglikelihood(text_only)) == 4
    with pytest.raises(UnsupportedVisualError, match=f"{tiny_model('llama')} is a text-only model"):
        model.loglikelihood(mc_requests(model, [egoplan_doc(0)]))


# ---------------------------------------------------------------------------------------------
# generate_until
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_generation_is_batched_with_left_padding_and_returns_only_new_text(arch, backend):
    docs = [egoplan_doc(0), {**egoplan_doc(1), "question": "Short?"}, egoplan_doc(2)]
    one = backend(arch).generate_until(gen_requests(backend(arch), docs, max_new_tokens=8))
    batched = backend(arch, batch_size=3)
    assert batched.generate_until(gen_requests(batched, docs, max_new_tokens=8)) == one
    # Reference: the model's own generate() on the same prompt; only the new tokens are returned.
    model = backend(arch)
    visuals = model_visuals(model, docs[1])
    prompt = model.chat.generation_prompt(model.chat.user_turn(visuals.parts, "Short?"))
    inputs = model._on_device(model._encode([prompt], [visuals], "t"))
    with torch.inference_mode():
        out = model.model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert one[1] == model.tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)


def test_generation_honours_until_and_max_new_tokens_and_samples_when_asked(backend):
    model = backend("qwen2_vl")
    docs = [egoplan_doc(0)]
    [full] = model.generate_until(gen_requests(model, docs, max_new_tokens=12))
    [short] = model.generate_until(gen_requests(model, docs, max_new_tokens=3))
    assert full.startswith(short) and len(short) < len(full)
    stop = full[len(full) // 2:len(full) // 2 + 2]
    [cut] = model.generate_until(gen_requests(model, docs, max_new_tokens=12, until=[stop]))
    assert cut == full[:full.find(stop)]
    torch.manual_seed(0)
    [sampled] = model.generate_until(gen_requests(model, docs, max_new_tokens=12, temperature=1.0))
    torch.manual_seed(0)
    [again] = model.generate_until(gen_requests(model, docs, max_new_tokens=12, do_sample=True, temperature=1.0))
    assert sampled == again != full


# ---------------------------------------------------------------------------------------------
# Models larger than one device: device_map
# ---------------------------------------------------------------------------------------------


def assert_same_likelihoods(got, expected, tolerance=1e-5):
    """The same computation on another path (weights loaded by hooks, visuals decoded in a thread):
    float32 values within ``tolerance`` (CPU kernels may sum in another order, e.g. with another
    thread count), the same greedy flags and the same argmin per question of 4 candidates."""
    assert [v for v, _ in got] == pytest.approx([v for v, _ in expected], abs=tolerance)
    assert [g for _, g in got] == [g for _, g in expected]
    for question in range(0, len(expected), 4):
        pick = [min(range(4), key=lambda i: values[question + i][0]) for values in (got, expected)]
        assert pick[0] == pick[1]


def test_a_device_map_offloading_layers_to_disk_gives_the_single_device_likelihoods_and_generations(
        backend, tiny_model, tmp_path):
    """Accelerate's big-model inference on CPU: the second decoder layer and the LM head live on disk
    (weights on the meta device, loaded by hooks at each forward), so the prefill's KV cache and its
    per-chunk copies (continuation_batch_size 3 < 4 candidates) are built through those hooks."""
    device_map = {"model.visual": "cpu", "model.language_model.embed_tokens": "cpu",
                  "model.language_model.layers.0": "cpu",
                  "model.language_model.layers.1": "disk", "model.language_model.norm": "cpu",
                  "model.language_model.rotary_emb": "cpu", "lm_head": "disk"}
    split = EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), dtype="float32", continuation_batch_size=3,
                      device_map=json.dumps(device_map), offload_folder=str(tmp_path / "offload"))
    assert split.model.model.language_model.layers[1].mlp.up_proj.weight.device.type == "meta"
    assert split.device == torch.device("cpu")
    single = backend("qwen2_vl")
    docs = [egoplan_doc(0), egoplan_doc(1)]
    for span in SCORED_SPAN.values:
        assert_same_likelihoods(split.loglikelihood(mc_requests(split, docs, span=span)),
                                single.loglikelihood(mc_requests(single, docs, span=span)))
    assert (split.generate_until(gen_requests(split, docs, max_new_tokens=6))
            == single.generate_until(gen_requests(single, docs, max_new_tokens=6)))


@pytest.mark.parametrize("strategy", ["auto", "balanced", "sequential"])
def test_a_device_map_strategy_on_one_device_gives_the_single_device_likelihoods(strategy, backend):
    """On a machine with one device (here the CPU) accelerate resolves the strategy to that device and
    transformers leaves the model undispatched, without ``hf_device_map``: the inputs go where the
    embedding weights are."""
    mapped = EgoPlanHF(pretrained=backend("qwen2_vl").pretrained, dtype="float32", device_map=strategy)
    assert not hasattr(mapped.model, "hf_device_map") and mapped.device == torch.device("cpu")
    single = backend("qwen2_vl")
    docs = [egoplan_doc(0), egoplan_doc(1)]
    got, expected = mapped.loglikelihood(mc_requests(mapped, docs)), single.loglikelihood(mc_requests(single, docs))
    assert [greedy for _, greedy in got] == [greedy for _, greedy in expected]
    assert [value for value, _ in got] == pytest.approx([value for value, _ in expected], abs=1e-6)


# hf_device_map as accelerate writes it after dispatching a Qwen2-VL over several devices (GPU
# indices), over a GPU and the CPU, or with the disk; the input device is the embedding layer's.
ACCELERATE_DEVICE_MAPS = [
    ({"model.visual": 0, "model.language_model.embed_tokens": 0, "model.language_model.layers.0": 0,
      "model.language_model.layers.1": 1, "model.language_model.norm": 1, "model.language_model.rotary_emb": 1,
      "lm_head": 1}, "cuda:0"),
    ({"model.visual": 0, "model.language_model.embed_tokens": 1, "model.language_model.layers": 1, "lm_head": 2},
     "cuda:1"),
    ({"model.visual": 1, "model.language_model": 0, "lm_head": 0}, "cuda:0"),
    ({"model": "cuda:1", "lm_head": "cuda:0"}, "cuda:1"),
    ({"model.visual": 0, "model.language_model": "cpu", "lm_head": "disk"}, "cpu"),
    ({"model.visual": "disk", "model.language_model.embed_tokens": "disk", "model.language_model.layers": 0,
      "lm_head": 0}, "cpu"),
    ({"": "mps"}, "mps"),
]


@pytest.mark.parametrize("device_map, device", ACCELERATE_DEVICE_MAPS)
def test_the_inputs_of_a_dispatched_model_go_to_its_embedding_layers_device(device_map, device, backend, monkeypatch):
    from lmms_egoplan.models.egoplan_hf import _input_device

    model = backend("qwen2_vl").model
    monkeypatch.setattr(model, "hf_device_map", device_map, raising=False)
    assert _input_device(model) == torch.device(device)


def test_device_map_errors_name_the_model_arg(tiny_model, monkeypatch):
    import accelerate

    pretrained = str(tiny_model("qwen2_vl"))
    with pytest.raises(ValueError,
                       match="device_map must be one of auto, balanced, balanced_low_0, sequential or a JSON"):
        EgoPlanHF(pretrained=pretrained, device_map="everywhere")
    with pytest.raises(ValueError, match="model_args device_map is not valid JSON"):
        EgoPlanHF(pretrained=pretrained, device_map="{lm_head: 0}")
    with pytest.raises(ValueError, match="pass device .'cpu'. or device_map, not both"):
        EgoPlanHF(pretrained=pretrained, device="cpu", device_map="auto")
    with pytest.raises(ValueError, match="model_args max_memory needs device_map"):
        EgoPlanHF(pretrained=pretrained, max_memory='{"0": "20GiB"}')

    class TwoProcesses(accelerate.Accelerator):
        num_processes = 2

    monkeypatch.setattr(accelerate, "Accelerator", TwoProcesses)
    with pytest.raises(ValueError, match=r"cannot combine with lmms-eval's data parallelism \(2 processes"):
        EgoPlanHF(pretrained=pretrained, device_map="auto")


# ---------------------------------------------------------------------------------------------
# Visuals decoded in the background
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl"])
def test_the_next_questions_visuals_decode_while_the_model_runs_with_the_same_results(arch, backend):
    """doc 0's vision encoder waits for doc 1's doc_to_visual: it returns only because prefetching
    decodes doc 1 in the background while the model works on doc 0."""
    docs = [egoplan_doc(seed) for seed in range(4)]
    second_decoded = threading.Event()
    waited = []

    def signalling_visuals(doc):
        if doc is docs[1]:
            second_decoded.set()
        return egoplan_visuals(doc)

    def wait_for_the_second(*_):
        if not waited:
            waited.append(second_decoded.wait(timeout=30))

    model = backend(arch, visual_prefetch=2)
    off = backend(arch)
    hook = getattr(model.model.model, VISION_TOWER[arch]).register_forward_hook(wait_for_the_second)
    try:
        values = model.loglikelihood(mc_requests(model, docs, doc_to_visual=signalling_visuals))
    finally:
        hook.remove()
    assert waited == [True]
    assert_same_likelihoods(values, off.loglikelihood(mc_requests(off, docs)))
    generations = model.generate_until(gen_requests(model, docs, max_new_tokens=5))
    assert generations == off.generate_until(gen_requests(off, docs, max_new_tokens=5))


@pytest.mark.parametrize("ahead", [{"visual_prefetch": 3}, {"visual_prefetch": 3, "prefetch_processes": 1}],
                         ids=["thread", "worker process"])
def test_a_decoding_error_is_raised_as_itself_at_its_question_after_the_questions_before_it(ahead, backend):
    """From a worker process too: not torch DataLoader's rewrapping (a RuntimeError for an error whose constructor
    takes two arguments) but the error itself, its message and file."""
    docs = [egoplan_doc(seed) for seed in range(5)]
    scored = []

    def broken_third(doc):
        if doc is docs[2]:
            raise MediaError("EgoPlan sample 2: cannot decode /data/clip-2.mp4", "/data/clip-2.mp4")
        return egoplan_visuals(doc)

    model = backend("qwen2_vl", **ahead)
    hook = model.model.model.visual.register_forward_hook(lambda *_: scored.append(1))
    try:
        with pytest.raises(MediaError, match="^EgoPlan sample 2: cannot decode /data/clip-2.mp4$") as raised:
            model.loglikelihood(mc_requests(model, docs, doc_to_visual=broken_third))
    finally:
        hook.remove()
    assert raised.value.path == "/data/clip-2.mp4"
    assert len(scored) == 2 * 2  # docs 0 and 1 (an image and a video each), none after the broken one


@pytest.mark.parametrize("processes", [1, 2])
def test_batches_prepared_in_worker_processes_score_as_in_a_thread(processes, backend, tmp_path):
    """prefetch_processes: the visuals decoded and the processor run in other processes (their doc_to_visual calls
    say which), the batches back in order, the same values as prepared in a thread and as with nothing ahead."""
    docs = [egoplan_doc(seed) for seed in range(5)]
    decoded_in = tmp_path / "pids"

    def noting_the_process(doc):
        with decoded_in.open("a") as pids:
            pids.write(f"{os.getpid()}\n")
        return egoplan_visuals(doc)

    model = backend("qwen2_vl", visual_prefetch=2, prefetch_processes=processes, batch_size=2)
    values = model.loglikelihood(mc_requests(model, docs, doc_to_visual=noting_the_process))
    pids = decoded_in.read_text().split()
    assert len(pids) == len(docs) and str(os.getpid()) not in pids and len(set(pids)) == processes
    for kwargs in ({"visual_prefetch": 2}, {}):
        reference = backend("qwen2_vl", batch_size=2, **kwargs)
        assert values == reference.loglikelihood(mc_requests(reference, docs))


def test_a_batch_prepared_in_a_worker_is_pinned_whole_by_the_loaders_thread(backend, monkeypatch):
    """What torch's DataLoader calls on each batch from a worker (``pin_memory``; a worker must not pin, this CPU
    cannot): every tensor of the prefill, its start positions included, replaced by its pinned copy."""
    model = backend("qwen2_5_vl", batch_size=2)
    docs = [egoplan_doc(seed) for seed in range(2)]
    requests = mc_requests(model, docs)
    prepared = model._prepared_in_worker(model._question_batches(model._questions(requests))[0])
    pinned = []

    def pin(tensor):
        pinned.append(tensor.clone())
        return pinned[-1]

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    tensors = [value for value in prepared.prefill.inputs.values() if isinstance(value, torch.Tensor)]
    assert prepared.prefill.starts is not None and prepared.questions == [] and prepared.visuals == []
    result = prepared.pin_memory()
    assert len(pinned) == len(tensors) + 1
    assert all(any(value is copy for copy in pinned) for value in result.prefill.inputs.values()
               if isinstance(value, torch.Tensor)) and any(result.prefill.starts is copy for copy in pinned)


def test_prefetch_processes_need_batches_ahead(tiny_model):
    pretrained = str(tiny_model("qwen2_vl"))
    with pytest.raises(ValueError, match="prefetch_processes=1 prepares batches ahead, but visual_prefetch is 0"):
        EgoPlanHF(pretrained=pretrained, prefetch_processes=1)
    with pytest.raises(SettingsError, match="egoplan_hf model_args prefetch_processes must be at least 0, got -1"):
        EgoPlanHF(pretrained=pretrained, visual_prefetch=2, prefetch_processes=-1)


def test_the_gpu_defaults_apply_on_a_gpu_only_and_an_explicit_setting_wins(backend):
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert egoplan_hf._prefetch_processes(None, 2, cuda) == egoplan_hf.GPU_DEFAULTS["prefetch_processes"] == 2
    assert egoplan_hf._prefetch_processes(None, 0, cuda) == 0  # nothing prepared ahead: no process either
    assert egoplan_hf._prefetch_processes(None, 2, cpu) == 0
    assert egoplan_hf._prefetch_processes(0, 2, cuda) == 0
    model = backend("qwen2_vl")
    assert model.prefetch_processes == 0 and model.fused_elementwise is None  # CPU: both off unless asked
    assert not model.scorer.candidates_in_prefill
    assert egoplan_hf._scorer(model.model, model.pretrained, 16, None, cuda).candidates_in_prefill \
        is egoplan_hf.GPU_DEFAULTS["candidates_in_prefill"] is True
    assert egoplan_hf._scorer(model.model, model.pretrained, 16, None, cpu).candidates_in_prefill is False
    assert egoplan_hf._scorer(model.model, model.pretrained, 16, False, cuda).candidates_in_prefill is False
    # Unset on a GPU where inductor cannot compile (here: no CUDA), the default quietly stays eager.
    assert egoplan_hf._fused(model.model, None, cuda) is None
    with pytest.raises(SettingsError, match="fused_elementwise=true compiles with torch's inductor"):
        egoplan_hf._fused(model.model, True, cuda)


def test_visual_prefetch_is_a_count_off_by_default_on_cpu(backend, tiny_model):
    assert backend("qwen2_vl").visual_prefetch == 0  # the model's threads already use every core
    with pytest.raises(SettingsError, match="egoplan_hf model_args visual_prefetch must be at least 0, got -1"):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), visual_prefetch=-1)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


def test_over_long_prompts_raise_naming_the_model_and_the_limit(backend, tiny_model, caplog):
    model = backend("qwen2_vl", max_length=60)
    with pytest.raises(ContextTooLongError, match=rf"{tiny_model('qwen2_vl')}: the prompt of probe doc 0 has \d+ "
                                                  r"tokens, more than the model's context window of 60 tokens"):
        model.loglikelihood(mc_requests(model, [egoplan_doc(0)]))
    roomy = backend("qwen2_vl", max_length=120)
    sink = logger.add(caplog.handler, level="WARNING", format="{message}")  # the backend logs through loguru
    try:
        [text] = roomy.generate_until(gen_requests(roomy, [{**egoplan_doc(0), "question": "Hi?"}], max_new_tokens=200))
    finally:
        logger.remove(sink)
    assert "cut to" in caplog.text and "context window of 120 tokens" in caplog.text


def test_missing_chat_template_and_rewriting_template_raise_naming_the_checkpoint(tiny_model, tmp_path):
    bare = tmp_path / "no-template"
    shutil.copytree(tiny_model("llava"), bare)
    (bare / "chat_template.jinja").unlink()
    with pytest.raises(ChatTemplateError, match=f"{bare} has no chat template.*chat_template=<path"):
        EgoPlanHF(pretrained=str(bare), device="cpu")
    upper = tmp_path / "upper.jinja"
    upper.write_text(SPACED_TEMPLATE.replace("{{ p['text'] }}{% endfor %}{{ eos_token }}",
                                             "{{ p['text'] | upper }}{% endfor %}{{ eos_token }}"))
    model = EgoPlanHF(pretrained=str(bare), device="cpu", chat_template=str(upper))
    with pytest.raises(ChatTemplateError, match=f"chat template of {bare} does not reproduce"):
        model.loglikelihood(mc_requests(model, [egoplan_doc(0)]))


# Renders only the text parts of a message: no placeholder for its images or videos.
TEXT_ONLY_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] + ': ' }}{% for p in m['content'] %}{% if p['type'] == 'text' %}"
    "{{ p['text'] }}{% endif %}{% endfor %}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)


@pytest.mark.parametrize("arch, kind", [("llava", "image"), ("qwen2_vl", "video")])
def test_a_template_without_visual_placeholders_is_named_before_the_processor_runs(arch, kind, backend, tmp_path):
    template = tmp_path / "text-only.jinja"
    template.write_text(TEXT_ONLY_TEMPLATE)
    model = backend(arch, chat_template=str(template))
    message = (rf"{model.pretrained}: the chat template renders 0 {kind} placeholder\(s\) .* for the \d+ {kind}\(s\) "
               rf"of probe doc.*pass chat_template=<path")
    visuals = egoplan_visuals if kind == "image" else (lambda doc: egoplan_visuals(doc)[:-1])  # the clip alone
    with pytest.raises(ChatTemplateError, match=message):
        model.loglikelihood(mc_requests(model, [egoplan_doc(0)], doc_to_visual=visuals))
    with pytest.raises(ChatTemplateError, match=message.replace(kind, "(image|video)")):
        model.generate_until(gen_requests(model, [egoplan_doc(0)], max_new_tokens=2))


def test_bad_model_args_raise(tiny_model):
    with pytest.raises(SettingsError, match=r"unknown model_args max_frame \(did you mean max_frames\?\)"):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), max_frame=8)
    with pytest.raises(SettingsError, match=r"unknown model_args devicemap \(did you mean device_map\?\); qqq \(known: "
                                            r"attn_implementation, batch_size, "):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), devicemap="auto", qqq=1)
    with pytest.raises(ValueError, match="dtype must be auto or one of"):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), dtype="fp8")
    with pytest.raises(ValueError, match="egoplan_hf model_args image_max_side: expected an integer, got 'big'"):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), image_max_side="big")
    with pytest.raises(ValueError, match="egoplan_hf model_args prefix_sharing: expected true/false"):
        EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), prefix_sharing="maybe")


@pytest.mark.parametrize("name,value", [("image_max_side", -3), ("image_max_pixels", 0), ("video_max_side", "0"),
                                        ("video_max_pixels", -1), ("max_frames", 0), ("batch_size", 0),
                                        ("continuation_batch_size", 0), ("max_length", 0)])
def test_a_size_or_count_that_would_show_no_image_or_score_nothing_is_refused_naming_it(tiny_model, name, value):
    """image_max_side=-3 used to fit every image into one pixel, and 0 to mean no limit: a run scored that. Each is
    refused before the weights load (a folder that holds none is not even looked at)."""
    for pretrained in (str(tiny_model("qwen2_vl")), "/no/such/checkpoint"):
        with pytest.raises(SettingsError, match=f"egoplan_hf model_args {name} must be at least 1, got {value!r}"):
            EgoPlanHF(pretrained=pretrained, **{name: value})


@pytest.mark.parametrize("model_args", [{"visual_prefetch": -1}, {"prefetch_processes": "-1"},
                                        {"candidates_in_prefill": "maybe"}, {"fused_elementwise": "perhaps"},
                                        {"packed_vision_attention": "2"}, {"videos_as_frames": "x"}])
def test_every_model_arg_that_needs_no_model_is_checked_before_the_weights_load(model_args):
    [name] = model_args
    with pytest.raises(SettingsError, match=f"egoplan_hf model_args {name}"):
        EgoPlanHF(pretrained="/no/such/checkpoint", **model_args)


def test_dtype_and_attention_implementation_are_model_args(backend):
    model = backend("llava", dtype="bfloat16", attn_implementation="eager")
    assert model.model.dtype == torch.bfloat16
    assert model.model.config.get_text_config()._attn_implementation == "eager"
    values = model.loglikelihood(mc_requests(model, [egoplan_doc(0)]))
    reference = backend("llava").loglikelihood(mc_requests(backend("llava"), [egoplan_doc(0)]))
    assert [v for v, _ in values] == pytest.approx([v for v, _ in reference], abs=0.05)  # bfloat16 precision


# Cosmos-Reason1's two answer types: (the request's rule, its decoding, run_model's tokens and temperature per call).
RETRIED = {"reasoning": ("no_letter_in_answer_tag", {"max_new_tokens": 1024, "temperature": 0.6, "top_p": 0.95,
                                                     "do_sample": True},
                         [(1024, 0.6), (1280, 0.65), (1536, 0.7)]),
           "letter": ("no_capital_letter", {"max_new_tokens": 10, "temperature": 0, "do_sample": False},
                      [(10, 0), (1280, 0), (1536, 0)])}


@pytest.mark.parametrize("answer_type", RETRIED)
def test_an_empty_answer_is_generated_again_for_a_request_that_asks_with_the_official_sampling(backend, monkeypatch,
                                                                                                answer_type):
    """``empty_answer_retry``: only the asking request's prompt goes to the model again (encoded alone), with 256
    more tokens per retry (over 1,024 for the letter type's 10) and 0.05 more temperature (the greedy letter type
    stays greedy), until its parser reads a letter; each generation runs the real model (2 new tokens) and its text
    is then scripted."""
    from lmms_egoplan.core.request_facts import retries_of
    from lmms_egoplan.core.request_options import EMPTY_ANSWER_RETRY

    rule, decoding, sampling = RETRIED[answer_type]
    model = backend("qwen2_vl", batch_size=2)
    generate, calls = model._generate, []

    def scripted(inputs, generation_kwargs, where, sampling_defaults):
        calls.append((inputs["input_ids"].shape[0], generation_kwargs["max_new_tokens"],
                      pytest.approx(generation_kwargs["temperature"], abs=1e-9)))
        generated = generate(inputs, {**generation_kwargs, "max_new_tokens": 2}, where, sampling_defaults)
        return ["<answer>B</answer>" if len(calls) == 3 else "<think>no tag</think>" for _ in generated]

    monkeypatch.setattr(model, "_generate", scripted)
    requests = gen_requests(model, [egoplan_doc(0), egoplan_doc(1)], **decoding)
    EMPTY_ANSWER_RETRY.mark(requests[1], rule)
    assert model.generate_until(requests) == ["<think>no tag</think>", "<answer>B</answer>"]
    assert calls == [(size, tokens, pytest.approx(temperature, abs=1e-9))
                     for size, (tokens, temperature) in zip([2, 1, 1], sampling)]
    assert retries_of(requests[1]) == (2, False)
    assert retries_of(requests[0]) == (0, False)  # the request that did not ask
