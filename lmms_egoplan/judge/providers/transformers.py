"""An in-process transformers causal LM as the judge: no server, no network."""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Mapping, Sequence

from lmms_egoplan.core.devices import resolve_device
from lmms_egoplan.judge.base import JudgeBackend
from lmms_egoplan.judge.protocol import Completion, Decoding, JudgeCallError


@dataclass(frozen=True, eq=False)  # each prompt is its caller's: two alike are two
class _Prompt:
    conversation: tuple
    decoding: Decoding
    answer: Future


class TransformersBackend(JudgeBackend):
    """An in-process transformers causal LM, for judging with no server and no network.

    One worker thread generates (left-padded batches). A caller queues its prompt and waits on its own answer;
    the prompts that arrive while a generation runs gather into the next batch, up to ``batch_size`` of the same
    decoding, so the engine's ``concurrency`` is the generation batch here. ``generate_calls`` counts the batches.
    """

    # How long a batch short of ``batch_size`` waits for one more prompt: the callers just answered send their
    # next within it, so their prompts join one batch instead of each starting its own behind the generation.
    GATHER_SECONDS = 0.02
    IDLE_SECONDS = 1.0  # the worker ends when nothing comes for this long; the next call starts another

    def __init__(self, model: str, *, revision: str | None = None, batch_size: int = 8):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model = model
        self.kind = "hf"
        self.generate_calls = 0
        self._batch_size = batch_size
        self._tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, padding_side="left")
        if self._tokenizer.pad_token is None:
            self._tokenizer.pad_token = self._tokenizer.eos_token
        # Loaded onto its device in the checkpoint's dtype: no copy of the weights on the CPU first.
        device = resolve_device("auto", runs=f"the hf judge {model}")
        self._model = AutoModelForCausalLM.from_pretrained(model, revision=revision, dtype="auto",
                                                           device_map=device).eval()
        self._prompts: queue.SimpleQueue[_Prompt] = queue.SimpleQueue()
        self._worker_lock = threading.Lock()
        self._serving = False

    def complete(self, messages: Sequence[Mapping[str, str]], decoding: Decoding) -> Completion:
        prompt = _Prompt(tuple(messages), decoding, Future())
        self._prompts.put(prompt)
        with self._worker_lock:  # after the put: a worker that finds the queue empty has ended, or sees it
            if not self._serving:
                self._serving = True
                threading.Thread(target=self._serve, name=f"judge {self.model}", daemon=True).start()
        return prompt.answer.result()

    def _serve(self) -> None:
        held: deque[_Prompt] = deque()  # prompts of another decoding than the batch gathered: the next batches'
        while True:
            if not held:
                try:
                    held.append(self._prompts.get(timeout=self.IDLE_SECONDS))
                except queue.Empty:
                    with self._worker_lock:
                        if self._prompts.empty():
                            self._serving = False
                            return
                    continue
            self._answer(self._gather(held))

    def _gather(self, held: deque[_Prompt]) -> list[_Prompt]:
        """The next batch: the held prompts of the first one's decoding, then what arrives until the batch is full
        or no prompt came for ``GATHER_SECONDS``."""
        decoding = held[0].decoding
        batch = [p for p in held if p.decoding == decoding][: self._batch_size]
        for prompt in batch:
            held.remove(prompt)
        while len(batch) < self._batch_size:
            try:
                prompt = self._prompts.get(timeout=self.GATHER_SECONDS)
            except queue.Empty:
                break
            (batch if prompt.decoding == decoding else held).append(prompt)
        return batch

    def _answer(self, batch: list[_Prompt]) -> None:
        try:
            texts = self._generate([p.conversation for p in batch], batch[0].decoding)
        except Exception as error:  # every caller of this batch gets the error
            for prompt in batch:
                prompt.answer.set_exception(JudgeCallError(f"generation failed: {error}"))
        else:
            for prompt, text in zip(batch, texts):
                prompt.answer.set_result(Completion(text=text, model=self.model))

    def _generate(self, conversations: list[tuple], decoding: Decoding) -> list[str]:
        import torch

        self.generate_calls += 1
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
