"""An in-process transformers causal LM as the judge: no server, no network."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Mapping, Sequence

from lmms_egoplan.core.devices import resolve_device
from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.protocol import Completion, Decoding, JudgeCallError


class TransformersBackend(JudgeBackend):
    """An in-process transformers causal LM, for judging with no server and no network.

    Concurrent calls are gathered into batches (left-padded generation), so the engine's
    ``concurrency`` is the generation batch size here.
    """

    def __init__(self, model: str, *, revision: str | None = None, batch_size: int = 8):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        self.kind = "hf"
        self._batch_size = batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, padding_side="left")
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        self._model = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype="auto").to(
            resolve_device("auto", runs=f"the hf judge {model}")).eval()
        self._pending: list[tuple[tuple, Decoding, Future]] = []
        self._pending_lock = threading.Lock()
        self._generate_lock = threading.Lock()

    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        mine: Future = Future()
        with self._pending_lock:
            self._pending.append((tuple(messages), decoding, mine))
        # Whoever holds the generation lock serves a batch of what is pending, ours or not.
        while not mine.done():
            with self._generate_lock:
                if mine.done():
                    break
                with self._pending_lock:
                    batch = [p for p in self._pending if p[1] == self._pending[0][1]][: self._batch_size]
                    self._pending = [p for p in self._pending if p not in batch]
                try:
                    texts = self._generate([m for m, _, _ in batch], batch[0][1])
                except Exception as error:  # every waiter of this batch gets the error
                    for _, _, future in batch:
                        future.set_exception(JudgeCallError(f"generation failed: {error}"))
                else:
                    for (_, _, future), text in zip(batch, texts):
                        future.set_result(Completion(text=text, model=self.model))
        return mine.result()

    def _generate(self, conversations: list[tuple], decoding: Decoding) -> list[str]:
        import torch

        tokenizer = self._tokenizer
        if tokenizer.chat_template:
            prompts = [tokenizer.apply_chat_template(list(c), add_generation_prompt=True, tokenize=False)
                       for c in conversations]
            encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        else:
            prompts = ["\n\n".join(m["content"] for m in c) for c in conversations]
            encoded = tokenizer(prompts, return_tensors="pt", padding=True)
        encoded = encoded.to(self._model.device)
        sampling = ({"do_sample": True, "temperature": decoding.temperature} if decoding.temperature > 0
                    else {"do_sample": False})
        with torch.inference_mode():
            output = self._model.generate(**encoded, max_new_tokens=decoding.max_tokens,
                                          pad_token_id=tokenizer.pad_token_id, **sampling)
        new_tokens = output[:, encoded["input_ids"].shape[1]:]
        return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
