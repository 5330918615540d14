"""lmms-eval workarounds in lmms-eval's own backends, for runs of the suite's tasks on them. Guards and the
switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

from lmms_egoplan.compat import affected_release, switched_off
from lmms_egoplan.compat.replacements import add_layer, has_layer


def score_llava_hf_with_its_images(model_class: type) -> bool:
    """Let lmms-eval's ``llava_hf`` score likelihood tasks on llava-hf checkpoints.

    Bug: ``lmms_eval/models/simple/llava_hf.py:LlavaHf.loglikelihood`` renders the user's turn as a string
    with ``<image>`` written into it; llava-hf's chat templates render an image placeholder only for an
    ``{"type": "image"}`` item of a list content, so the prompt holds none and the processor refuses it
    ("Found total 0 <image> tokens and 8 images"): every image likelihood task fails on a llava-hf
    checkpoint. It also measures the context by calling the processor again without the images, whose
    placeholders then stay unexpanded, so the wrong tokens would be scored. Fix: the conversation in the
    template's list form, one image item per image; the continuation's tokens counted by the tokenizer alone
    (the processor expands placeholders inside the prompt only); ``is_greedy`` compares each continuation
    token with the logits that predict it. Put on ``LlavaHf.loglikelihood`` when a suite task is bound to
    ``--model llava_hf --force_simple`` (``model_class``: the run's backend); acts on every likelihood task of
    that run. Returns whether the workaround is in place.
    Retired by docs/upstream/19-llava-hf-likelihood.patch.
    """
    if switched_off(_LLAVA_HF):  # docs/upstream/19-llava-hf-likelihood.patch
        return False
    if has_layer(_LLAVA_HF, *_LLAVA_HF_LOGLIKELIHOOD):
        return True
    module, attribute = _LLAVA_HF_LOGLIKELIHOOD
    if not (affected_release() and model_class.__module__ == module and model_class.__name__ == "LlavaHf"):
        return False
    add_layer(_LLAVA_HF, *_LLAVA_HF_LOGLIKELIHOOD, lambda loglikelihood, self, requests: _loglikelihood(self, requests))
    return True


_LLAVA_HF = "backends.score_llava_hf_with_its_images"
_LLAVA_HF_LOGLIKELIHOOD = ("lmms_eval.models.simple.llava_hf", "LlavaHf.loglikelihood")


def _loglikelihood(backend, requests) -> list[tuple[float, bool]]:
    """``LlavaHf.loglikelihood`` as the patch has it: per request, (mean NLL of the continuation's tokens,
    whether each is the model's argmax)."""
    import torch

    scores = []
    for context, doc_to_target, doc_to_visual, doc_id, task, split in [request.args for request in requests]:
        doc = backend.task_dict[task][split][doc_id]
        continuation = doc_to_target if isinstance(doc_to_target, str) else doc_to_target(doc)
        visuals = backend.flatten([doc_to_visual(doc)])
        prompt, conversation = _rendered(backend, context, continuation, len(visuals))
        inputs = backend._image_processor(text=[conversation], images=visuals or None,
                                          return_tensors="pt").to(backend._device, backend.model.dtype)
        scored = len(backend.tokenizer(conversation)["input_ids"]) - len(backend.tokenizer(prompt)["input_ids"])
        if scored <= 0:
            raise ValueError(f"llava_hf: the chat template renders no token of the continuation {continuation!r} "
                             f"(doc {doc_id} of {task})")
        labels = inputs["input_ids"].clone()
        labels[:, :-scored] = -100
        with torch.inference_mode():
            outputs = backend.model(**inputs, labels=labels)
        greedy = outputs["logits"][:, -scored - 1:-1].argmax(dim=-1)  # the logits at i predict the token at i + 1
        scores.append((float(outputs["loss"].item()), bool((greedy == inputs["input_ids"][:, -scored:]).all())))
    return scores


def _rendered(backend, context: str, continuation: str, images: int) -> tuple[str, str]:
    """(prompt, prompt and continuation) rendered with the chat template, the user's turn in the template's list
    form (one image item per image, then the text); lmms-eval's Vicuna fallback takes a string."""
    from lmms_eval.models.simple.llava_hf import DEFAULT_IMAGE_TOKEN, VICUNA_CHAT_TEMPLATE

    template = backend.chat_template or backend._image_processor.chat_template or backend.tokenizer.chat_template
    if template is None:
        template, assistant = VICUNA_CHAT_TEMPLATE, continuation
        user = f"{' '.join([DEFAULT_IMAGE_TOKEN] * images)}\n{context}"
    else:
        user = [*({"type": "image"} for _ in range(images)), {"type": "text", "text": context}]
        assistant = [{"type": "text", "text": continuation}]
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    render = backend._image_processor.apply_chat_template
    return (render(messages[:-1], chat_template=template, tokenize=False, add_generation_prompt=True),
            render(messages, chat_template=template, tokenize=False, add_generation_prompt=False))
