"""``egoplan_hf``: any transformers image-text-to-text checkpoint as an lmms-eval backend.

``lmms-eval --model egoplan_hf --model_args pretrained=<dir or hub id>,...``. It loads the model,
processor and chat template through the Auto classes, gives each architecture its visuals in
native form and real timing (see ``visuals``), scores ``multiple_choice`` the way lmms-eval ranks it
(mean negative log-likelihood of the answer tokens, lower is better; with the end-of-turn token(s),
or averaged as EgoPlan-Bench's official code averages, where the task asks for it, see
``lmms_egoplan.core.request_options``) with the prompt and visuals computed once per question (see
``likelihood``), and generates in batches.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import torch
from lmms_eval.api.instance import Instance
from lmms_eval.api.model import lmms
from loguru import logger
from torch.utils.data import get_worker_info
from tqdm import tqdm

from lmms_egoplan.compat.switches import SUITE_USED, switch_on
from lmms_egoplan.core.devices import describe_device, resolve_device
from lmms_egoplan.core.hub_download import hub_checked
from lmms_egoplan.core.request_options import INPUT_ORDER, LOSS_MEAN, SAMPLING_DEFAULTS, SCORED_SPAN, SYSTEM_PROMPT
from lmms_egoplan.core.settings import SettingsError, coerce_setting
from lmms_egoplan.models.chat import ChatRenderer, RenderedAnswer
from lmms_egoplan.models.device_pixels import RAW_VALUES, DevicePixels
from lmms_egoplan.models.doc_requests import (
    DocRequests,
    Question,
    cut_at_first,
    processor_inputs,
    unknown_model_args_message,
)
from lmms_egoplan.models.empty_answer_retry import with_retries
from lmms_egoplan.models.fused_elementwise import FusedElementwise, fuse_elementwise, inductor_missing
from lmms_egoplan.models.likelihood import LikelihoodScorer, Prefill, ScoredSequence
from lmms_egoplan.models.vision_attention import pack_vision_attention
from lmms_egoplan.models.visuals import ModelVisuals, UnsupportedVisualError, decode_ahead, decode_ahead_in_processes

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# The likelihood path's speed options on a GPU when a run leaves them unset, as speed/bench_loglikelihood.py's
# DEFAULT_RULE decided (docs/development.md, "Measured on a GPU"): fused 1.16x / 1.39x the batched method's steady
# rate, 2 processes 1.30x / 1.08x the fused thread's (H200 and H100, 2026-11-27); candidates_in_prefill 1.23x the
# fused path in 2 processes, its losses within 0.1, choices changed only on near ties (H200, 2026-11-28).
GPU_DEFAULTS = {"fused_elementwise": True, "prefetch_processes": 2, "candidates_in_prefill": True}
# Questions of several a batch are sorted by length within windows of this many batches (``_length_sorted``), as
# lmms-eval's Collator sorts requests by length: a batch's rows then differ little, and pad little. Bounded, so the
# scores still come in about the requests' order (a progress bar, an interrupted run's cached responses).
LENGTH_SORTED_BATCHES = 16


class ContextTooLongError(ValueError):
    """A prompt has more tokens than the model's context window."""


@dataclass
class PreparedBatch:
    """Questions scored together, made ready on the host (``EgoPlanHF._prepared_batch``)."""

    questions: Sequence[Question]
    visuals: list[ModelVisuals]
    conversations: list[tuple[list[RenderedAnswer], list[ScoredSequence]]]  # per question: renderings, sequences
    prefill: Prefill | None  # the questions' common prefixes ready for the model (prefix sharing), else None
    where: str

    def pin_memory(self) -> PreparedBatch:
        """With the prefill's tensors in pinned host memory, for a copy to the GPU beside the model's work: what a
        ``DataLoader``'s pinning thread calls on a batch prepared in a worker process (``prefetch_processes``)."""
        if self.prefill is not None:
            self.prefill = self.prefill.moved(torch.Tensor.pin_memory)
        return self


class EgoPlanHF(DocRequests, lmms):
    backend_name = "egoplan_hf"
    # transformers' generate: top_k 0 and min_p 0 filter nothing, top_p and repetition_penalty 1.0 change nothing.
    sampling_off = {"repetition_penalty": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}

    def __init__(
        self,
        pretrained: str | None = None,
        revision: str | None = None,  # the Hub revision (commit, branch, tag) of pretrained; the results record it
        device: str = "auto",
        dtype: str = "auto",
        attn_implementation: str | None = None,
        device_map: str | dict | None = None,
        max_memory: str | dict | None = None,
        offload_folder: str | None = None,
        batch_size: int | str = 1,
        max_frames: int = 32,
        image_max_side: int | None = None,
        image_max_pixels: int | None = None,
        video_max_side: int | None = None,
        video_max_pixels: int | None = None,
        videos_as_frames: bool = False,
        max_length: int | None = None,
        system_prompt: str | None = None,
        chat_template: str | None = None,
        prefix_sharing: bool = True,
        lstrip_continuation: bool = True,
        continuation_batch_size: int = 16,
        candidates_in_prefill: bool | None = None,
        visual_prefetch: int | None = None,
        prefetch_processes: int | None = None,
        packed_vision_attention: bool = True,
        fused_elementwise: bool | None = None,
        trust_remote_code: bool = False,
        max_batch_size: int | None = None,  # lmms-eval passes --max_batch_size to every backend; unused
        **unknown: Any,
    ) -> None:
        switch_on(SUITE_USED)
        super().__init__()
        if unknown:
            raise SettingsError(unknown_model_args_message("egoplan_hf", EgoPlanHF, unknown))
        if not pretrained:
            raise SettingsError("egoplan_hf: model_args pretrained is required: the checkpoint's folder or hub id "
                                "(--model_args pretrained=Qwen/Qwen2-VL-7B-Instruct,...)")
        # Every model_arg that needs no model checked before the weights load (minutes for a large checkpoint).
        self.limits = self.visual_limits("egoplan_hf", max_frames, image_max_side, image_max_pixels, video_max_side,
                                         video_max_pixels)
        max_length = _arg(max_length, int | None, "max_length", minimum=1)
        self.batch_size = _batch_size(batch_size)
        self.prefix_sharing = _arg(prefix_sharing, bool, "prefix_sharing")
        self.lstrip_continuation = _arg(lstrip_continuation, bool, "lstrip_continuation")
        videos_as_frames = _arg(videos_as_frames, bool, "videos_as_frames")
        packed_vision_attention = _arg(packed_vision_attention, bool, "packed_vision_attention")
        speed = _SpeedArgs.checked(fused_elementwise, continuation_batch_size, candidates_in_prefill, visual_prefetch,
                                   prefetch_processes)
        from accelerate import Accelerator
        self.pretrained = str(pretrained)
        accelerator = Accelerator()
        placement = _placement(device_map, max_memory, offload_folder, device, accelerator.num_processes)
        if accelerator.num_processes > 1:
            # Data parallel: each rank holds a full model and scores its shard of the requests.
            self.accelerator = accelerator
            self._rank = accelerator.process_index
            self._world_size = accelerator.num_processes
        self.processor, self._model = _load(self.pretrained, dtype, attn_implementation, trust_remote_code, placement,
                                            revision)
        self._device = _place(self._model, self.pretrained, device, placement, accelerator)
        self._model.eval()
        # Qwen-VL vision towers: every window in one attention call (vision_attention); None: nothing to pack.
        self.vision_attention = pack_vision_attention(self._model, packed_vision_attention)
        self.device_pixels = DevicePixels.for_model(self._model.config.model_type, self.processor, self._model.dtype)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.tokenizer.padding_side = "left"  # decoder-only batched generation
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.takes_images, self.video_native, self.videos_with_images = processor_inputs(self.processor)
        # A video's frames as images, as lmms-eval's own backends show a frame list (the model then sees no time).
        self.video_native = self.video_native and not videos_as_frames
        self.chat = ChatRenderer(self.processor, self.pretrained, system_prompt=system_prompt,
                                 chat_template=chat_template)
        self.max_length = max_length or _context_window(self._model)
        # After packing: the packed forwards' rotary embedding is compiled too.
        self._choose_speed_options(speed)
        self.settle_turn_end(self._model.generation_config)
        self._reported_generation_keys: set[str] = set()

    def _choose_speed_options(self, speed: _SpeedArgs) -> None:
        """The likelihood path's speed options; each one a run leaves unset, by the run's device (``_place``)."""
        self.fused_elementwise = _fused(self._model, speed.fused_elementwise, self._device)
        self.scorer = _scorer(self._model, self.pretrained, speed.continuation_batch_size, speed.candidates_in_prefill,
                              self._device)
        self.visual_prefetch = _visual_prefetch(speed.visual_prefetch, self._device)
        self.prefetch_processes = _prefetch_processes(speed.prefetch_processes, self.visual_prefetch, self._device)

    @property
    def model(self):
        return self._model

    @property
    def device(self):
        return self._device

    def clean(self):
        # lmms-eval frees the model after the requests (e.g. to make room for a local judge); the
        # scorer holds it too.
        self.scorer = None
        super().clean()

    # ------------------------------------------------------------------ loglikelihood

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        """(mean NLL per scored token, scored tokens are greedy) per request; questions share their prefix.

        The scored tokens are the answer's, and the end-of-turn token(s) after it where the request
        asks for them (``SCORED_SPAN``); the mean is over every scored token, or over those whose
        loss is not exactly 0 where the request asks for it (``LOSS_MEAN``). With prefix sharing,
        ``batch_size`` questions are scored together: their prompts in one forward pass, their candidates
        in batches of ``continuation_batch_size``. The next ``visual_prefetch`` batches are decoded and
        preprocessed, and their prompts cut to the common prefixes with their positions computed (the model's
        M-RoPE index included, ``LikelihoodScorer.prefill_on_host``), in a background thread while the model works,
        or in ``prefetch_processes`` worker processes, which do not hold up this thread's interpreter lock; the model
        step then reads nothing back from the device for them."""
        questions = self._questions(requests)
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        batches = self._question_batches(questions)
        # The bar is closed (drawn for the last time) before an error leaves: else it is drawn at exit, below the error.
        with tqdm(total=len(requests), disable=self.rank != 0, desc="egoplan_hf loglikelihood") as progress, \
                contextlib.closing(self._prepared_ahead(batches)) as prepared:
            for batch, ready in zip(batches, prepared):
                for question, scores in zip(batch, self._score_questions(ready)):
                    for (index, _), score in zip(question.members, scores):
                        results[index] = score
                        self._hand_over(requests[index], score)
                    progress.update(len(question.members))
        return results

    def _prepared_ahead(self, batches: list[list[Question]]) -> Iterator[PreparedBatch]:
        if not self.prefetch_processes:
            yield from decode_ahead(self._prepared_batch, batches, self.visual_prefetch)
            return
        with contextlib.closing(decode_ahead_in_processes(self._prepared_in_worker, batches, self.visual_prefetch,
                                                          self.prefetch_processes,
                                                          pin_memory=self._device.type == "cuda")) as prepared:
            for batch, ready in zip(batches, prepared):
                ready.questions = batch
                yield ready

    def _prepared_in_worker(self, batch: Sequence[Question]) -> PreparedBatch:
        """``_prepared_batch`` in a worker process, with only what the scoring process lacks travelling back: not the
        questions (it has them; their ``doc_to_visual`` need not pickle), nor the decoded visuals where their pixel
        values are in the inputs (prefix sharing)."""
        prepared = self._prepared_batch(batch)
        prepared.questions = []
        if prepared.prefill is not None:
            prepared.visuals = []
        return prepared

    def _question_batches(self, questions: Sequence[Question]) -> list[list[Question]]:
        """Questions ``batch_size`` at most (1 without prefix sharing), of one loss rule each, in request order; several
        a batch, in the order of their lengths within each window of ``LENGTH_SORTED_BATCHES`` batches
        (``_length_sorted``), so that a batch pads little."""
        size = self.batch_size if self.prefix_sharing else 1
        if size > 1:
            questions = self._length_sorted(questions, size * LENGTH_SORTED_BATCHES)
        batches: list[list[Question]] = []
        for question in questions:
            if batches and len(batches[-1]) < size and batches[-1][0].options == question.options:
                batches[-1].append(question)
            else:
                batches.append([question])
        return batches

    def _length_sorted(self, questions: Sequence[Question], window: int) -> list[Question]:
        """``questions`` sorted within each run of ``window`` by their options (in order of first appearance: a batch
        holds one loss rule), then their context's tokens, then their candidates' tokens: what the prefill's rows
        (left padded to the longest) and the candidates' (right padded) are made of; the visuals' tokens are not
        known before they are decoded. The scores go back by request index, so the order of the requests holds."""
        ordered = []
        for start in range(0, len(questions), window):
            run = questions[start:start + window]
            context_tokens = self.tokenizer([q.context for q in run], add_special_tokens=False)["input_ids"]
            candidate_tokens = self.tokenizer([c for q in run for c in q.continuations],
                                              add_special_tokens=False)["input_ids"]
            stops = list(itertools.accumulate(len(q.members) for q in run))
            ranks: dict[tuple, int] = {}
            keys = [(ranks.setdefault(tuple(q.options.items()), len(ranks)), len(context),
                     sum(len(tokens) for tokens in candidate_tokens[stop - len(q.members):stop]))
                    for q, context, stop in zip(run, context_tokens, stops)]
            ordered.extend(question for _, question in sorted(zip(keys, run), key=lambda pair: pair[0]))
        return ordered

    def _prepared_batch(self, batch: Sequence[Question]) -> PreparedBatch:
        """A batch's visuals decoded, its candidates rendered and tokenized, and (prefix sharing) its prompts
        through the processor and cut to their common prefixes, positions included (``prefill_on_host``), on the
        host: what the background thread (or a worker process) does ahead of the model."""
        visuals = [self._doc_visuals(question.visual_key) for question in batch]
        conversations = [self._scored_conversation(q.context, q.continuations, v, q.where,
                                                   q.options.get(SCORED_SPAN.name, SCORED_SPAN.convention),
                                                   q.options.get(INPUT_ORDER.name, INPUT_ORDER.convention))
                         for q, v in zip(batch, visuals)]
        where = batch[0].where if len(batch) == 1 else f"{batch[0].where} to {batch[-1].where}"
        prefill = None
        if self.prefix_sharing:
            inputs = self._encode([rendered[0].text for rendered, _ in conversations], visuals, where)
            for (rendered, sequences), length, question in zip(conversations, inputs["attention_mask"].sum(1).tolist(),
                                                                batch):
                self._check_length(length + max(len(s.token_ids) for s in sequences) - len(sequences[0].token_ids),
                                   question.where)
            prefill = self.scorer.prefill_on_host(inputs, [sequences for _, sequences in conversations])
            prefill = prefill.moved(self._pinned)  # the cut and the positions are new tensors
        return PreparedBatch(batch, visuals, conversations, prefill, where)

    def _scored_conversation(self, context: str, continuations: Sequence[str], visuals: ModelVisuals, where: str,
                             scored_span: str, input_order: str) -> tuple[list[RenderedAnswer], list[ScoredSequence]]:
        answers = [c.lstrip() if self.lstrip_continuation else c for c in continuations]
        if not all(answers):
            raise ValueError(f"{self.pretrained}: an empty continuation in {where} has no tokens to score")
        rendered = self.chat.with_answers(self.chat.user_turn(visuals.parts, context, input_order), answers)
        return self.scored_sequences(rendered, scored_span, self.chat.adds_special_tokens(rendered[0].text))

    def _score_questions(self, prepared: PreparedBatch) -> list[list[tuple[float, bool]]]:
        loss_mean = prepared.questions[0].options.get(LOSS_MEAN.name, LOSS_MEAN.convention)
        if prepared.prefill is None:  # one forward pass per candidate
            [(rendered, sequences)], [visuals] = prepared.conversations, prepared.visuals
            return [[self.scorer.score_full(self._on_device(self._encode([r.text], [visuals], prepared.where)), s,
                                             loss_mean)
                     for r, s in zip(rendered, sequences)]]
        return self.scorer.score_shared(self._on_device(prepared.prefill),
                                        [sequences for _, sequences in prepared.conversations], loss_mean)

    # ------------------------------------------------------------------ generation

    def generate_until(self, requests: list[Instance]) -> list[str]:
        from lmms_eval.utils import Collator

        # Same generation kwargs and sampling defaults per batch, longest prompts first (memory errors surface at
        # once); each request's arguments followed by where it places the visuals, its system prompt and its
        # sampling defaults (request options).
        collator = Collator([(*r.args, INPUT_ORDER.of(r), SYSTEM_PROMPT.of(r), SAMPLING_DEFAULTS.of(r))
                             for r in requests], lambda args: (-len(args[0]), args[0]), grouping=True,
                            group_fn=lambda args: {**(args[1] or {}), SAMPLING_DEFAULTS.name: args[-1]})
        outputs = []
        chunks = list(collator.get_batched(n=self.batch_size))
        in_batch_order = iter([requests[index] for index in collator.reorder_indices])
        keys = [(task, split, doc_id, doc_to_visual)
                for chunk in chunks for _, _, doc_to_visual, doc_id, task, split, *_ in chunk]
        retried = [0]  # answers asked again so far (an empty answer's retries), shown beside the bar
        with tqdm(total=len(requests), disable=self.rank != 0, desc="egoplan_hf generate_until") as progress, \
                contextlib.closing(self._visuals_in_order(keys)) as visuals_in_order:

            def asked_again(count: int) -> None:
                retried[0] += count
                progress.set_postfix_str(f"{retried[0]} answers asked again")

            for chunk in chunks:
                contexts, generation_kwargs, _, doc_ids, tasks, _, placements, system_prompts, defaults = zip(*chunk)
                visuals = list(itertools.islice(visuals_in_order, len(chunk)))
                where = f"{tasks[0]} docs {list(doc_ids)}"
                prompts = [self.chat.generation_prompt(self.chat.user_turn(v.parts, c, INPUT_ORDER.check(p, where),
                                                                           SYSTEM_PROMPT.check(s, where)))
                           for v, c, p, s in zip(visuals, contexts, placements, system_prompts)]
                inputs = self._on_device(self._encode(prompts, visuals, where))
                batch, kwargs = list(itertools.islice(in_batch_order, len(chunk))), dict(generation_kwargs[0] or {})

                def answered(index: int, text: str, batch=batch) -> None:
                    # Each answer stored as it is final (a stop keeps it) and counted while others are asked again.
                    self._hand_over(batch[index], text)
                    progress.update(1)

                outputs.extend(with_retries(self._generate(inputs, kwargs, where, defaults[0]), batch, kwargs,
                                            self._generate_again(prompts, visuals, where, defaults[0]), answered,
                                            asked_again))
        return collator.get_original(outputs)

    def _generate_again(self, prompts: list[str], visuals: list[ModelVisuals], where: str, sampling_defaults: str):
        """Generation of some of a batch's prompts again (their indices), with other generation kwargs: the retry of
        an empty answer (``models.empty_answer_retry``)."""
        def generate(indices: list[int], generation_kwargs: dict) -> list[str]:
            inputs = self._encode([prompts[i] for i in indices], [visuals[i] for i in indices], where)
            return self._generate(self._on_device(inputs), generation_kwargs, where, sampling_defaults)

        return generate

    @torch.inference_mode()
    def _generate(self, inputs, generation_kwargs: dict, where: str, sampling_defaults: str) -> list[str]:
        generation = self._generation(generation_kwargs, "egoplan_hf", sampling_defaults=sampling_defaults)
        prompt_length = inputs["input_ids"].shape[1]
        max_new_tokens = generation.max_new_tokens
        if self.max_length is not None and prompt_length + max_new_tokens > self.max_length:
            logger.warning(f"{self.pretrained}: {where}: max_new_tokens {max_new_tokens} cut to "
                           f"{self.max_length - prompt_length} to stay within the context window of "
                           f"{self.max_length} tokens")
            max_new_tokens = self.max_length - prompt_length
        settings: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": generation.sampling,
                                    **generation.options}
        if generation.sampling:
            settings["temperature"] = generation.temperature
        if generation.until:
            settings.update(stop_strings=generation.until, tokenizer=self.tokenizer)
        with self.fused_elementwise.unfused() if self.fused_elementwise else contextlib.nullcontext():
            generated = self._model.generate(**inputs, pad_token_id=self.tokenizer.pad_token_id, **settings)
        texts = self.tokenizer.batch_decode(generated[:, prompt_length:], skip_special_tokens=True)
        return [cut_at_first(text, generation.until) for text in texts]

    def generate_until_multi_round(self, requests) -> list[str]:
        raise NotImplementedError("egoplan_hf does not implement generate_until_multi_round")

    # ------------------------------------------------------------------ shared steps

    def _encode(self, texts: list[str], visuals: Sequence[ModelVisuals], where: str):
        """Processor output for ``texts`` (chat-rendered; the tokenizer's special tokens added where the
        model's own processor adds them to a chat, ``ChatRenderer.adds_special_tokens``), on the host,
        ready to go to the device (``_on_device``).

        Images are nested per prompt (LLaVA-OneVision reads a flat list as one image per prompt);
        videos are one flat list of frame lists, which every video processor reads the same way,
        each with its ``video_metadata`` (the frames' real timing, ``visuals.Video.metadata``). The
        likelihood and the generation paths both encode here, so the model sees the same timing.
        """
        for text, visual in zip(texts, visuals):
            self._check_placeholders(text, visual, where)
        media: dict[str, list] = {}
        if any(v.images for v in visuals):
            media["images"] = [v.images for v in visuals]
        if any(v.videos for v in visuals):
            if "images" in media and not self.videos_with_images:
                raise UnsupportedVisualError(
                    f"{self.pretrained}: {type(self.processor).__name__} cannot take videos and images in one call, "
                    f"and the batch of {where} holds both; run with --batch_size 1")
            # The frames were sampled already (by the task, or here: max_frames); a processor that
            # samples by fps (Qwen3-VL's) would keep only a few of them.
            videos = [video for v in visuals for video in v.videos]
            media.update(videos=[video.frames for video in videos],
                         video_metadata=[video.metadata() for video in videos],
                         do_sample_frames=False)
        if media and self.device_pixels is not None:
            media.update(RAW_VALUES)
        # One template renders every text of a batch, so they all start alike (transformers decides from the first).
        inputs = self.processor(text=texts, return_tensors="pt", padding=True,
                                add_special_tokens=self.chat.adds_special_tokens(texts[0]), **media)
        self._check_length(inputs["input_ids"].shape[1], where)
        if media and self.device_pixels is not None:
            self.device_pixels.on_host(inputs)
        # Pixel values in the model's dtype before they travel (bfloat16: half the bytes of float32), or uint8 patches
        # (device_pixels); ids and masks stay integers.
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor):
                inputs[key] = self._pinned(value.to(self._model.dtype) if value.is_floating_point() else value)
        return inputs

    def _pinned(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` pinned on the host for a GPU, so that its copy there runs beside the model's work; not in a
        worker process (``prefetch_processes``), which must not touch CUDA: there the DataLoader's thread pins."""
        return tensor.pin_memory() if self._device.type == "cuda" and get_worker_info() is None else tensor

    def _on_device(self, inputs):
        """Processor outputs (``_encode``) or a prefill, on the model's device (not blocking: from pinned memory), with
        uint8 pixels normalised there (``device_pixels``)."""
        if isinstance(inputs, Prefill):
            moved = inputs.moved(lambda tensor: tensor.to(self._device, non_blocking=True))
            return replace(moved, inputs=self._normalised(moved.inputs))
        return self._normalised(inputs.to(self._device, non_blocking=True))

    def _normalised(self, inputs):
        return inputs if self.device_pixels is None else self.device_pixels.normalised(inputs)

    def _check_length(self, length: int, where: str) -> None:
        if self.max_length is not None and length > self.max_length:
            raise ContextTooLongError(
                f"{self.pretrained}: the prompt of {where} has {length} tokens, more than the model's context window "
                f"of {self.max_length} tokens; lower max_frames / image_max_pixels / video_max_pixels, or raise "
                f"max_length if the model supports more"
            )


def _load(pretrained: str, dtype: str, attn_implementation: str | None, trust_remote_code: bool, placement: dict,
          revision: str | None = None):
    """Processor (or tokenizer, for text-only checkpoints) and model, through the Auto classes, at the Hub
    ``revision`` (None: the default branch); ``placement``: accelerate's big-model options (device_map, max_memory,
    offload_folder), if any."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if dtype != "auto" and dtype not in DTYPES:
        raise ValueError(f"egoplan_hf: dtype must be auto or one of {sorted(DTYPES)}, got {dtype!r}")
    hub_checked(pretrained, revision)
    processor = load_processor(pretrained, trust_remote_code, "egoplan_hf", revision=revision)
    takes_images = getattr(processor, "image_processor", None) is not None
    model_class = AutoModelForImageTextToText if takes_images else AutoModelForCausalLM
    options = {"dtype": DTYPES.get(dtype, "auto"), "trust_remote_code": trust_remote_code, "revision": revision,
               **placement}
    if attn_implementation:
        options["attn_implementation"] = attn_implementation
    try:
        model = model_class.from_pretrained(pretrained, **options)
    except ValueError as error:
        raise ValueError(f"egoplan_hf: {pretrained} cannot be loaded with {model_class.__name__}: {error}") from error
    return processor, model


def load_processor(pretrained: str, trust_remote_code: bool, backend: str, hint: str = "", *,
                   revision: str | None = None):
    """The checkpoint's processor (or tokenizer, for text-only checkpoints) at the Hub ``revision``: chat template
    included."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(pretrained, trust_remote_code=trust_remote_code, revision=revision)
    except (OSError, ValueError) as error:
        raise ValueError(f"{backend}: no processor or tokenizer could be loaded for {pretrained}: {error}"
                         + (f"; {hint}" if hint else "")) from error


DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _placement(device_map, max_memory, offload_folder, device: str, num_processes: int) -> dict:
    """from_pretrained's big-model options from the model_args; {} without a device_map.

    ``device_map``: one of accelerate's strategies, or a JSON object {module name: device}
    (a GPU index, "cpu" or "disk"); ``max_memory``: a JSON object {GPU index or "cpu": size}.
    """
    if device_map is None:
        for name, value in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value is not None:
                raise ValueError(f"egoplan_hf: model_args {name} needs device_map (e.g. device_map=auto)")
        return {}
    if num_processes > 1:
        raise ValueError(
            f"egoplan_hf: device_map spreads one model over the visible devices, which cannot combine with "
            f"lmms-eval's data parallelism ({num_processes} processes, each with a full model); run one process "
            f"(python -m lmms_eval or accelerate launch --num_processes 1) with device_map, or drop device_map")
    if device != "auto":
        raise ValueError(f"egoplan_hf: pass device ({device!r}) or device_map, not both: device_map places the model")
    placement = {"device_map": _json_arg(device_map, "device_map") if _is_json(device_map) else device_map}
    if isinstance(placement["device_map"], str) and placement["device_map"] not in DEVICE_MAP_STRATEGIES:
        raise ValueError(f"egoplan_hf: model_args device_map must be one of {', '.join(DEVICE_MAP_STRATEGIES)} or a "
                         f"JSON object {{module name: device}}, got {device_map!r}")
    if max_memory is not None:
        memory = _json_arg(max_memory, "max_memory")
        placement["max_memory"] = {int(k) if str(k).isdigit() else k: v for k, v in memory.items()}
    if offload_folder is not None:
        placement["offload_folder"] = str(offload_folder)
    return placement


def _is_json(value) -> bool:
    return isinstance(value, dict) or str(value).lstrip().startswith("{")


def _json_arg(value, name: str) -> dict:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"egoplan_hf: model_args {name} is not valid JSON ({error}): {value!r}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"egoplan_hf: model_args {name} must be a JSON object, got {value!r}")
    return parsed


def _input_device(model) -> torch.device:
    """Where a device-mapped model's embedding layer runs: its entry in ``hf_device_map`` (the
    longest module-name prefix); layers offloaded to "cpu" / "disk" run on the CPU.

    transformers dispatches a model (and sets ``hf_device_map``) only when its map spans several
    devices or the disk; a map that resolves to one device (``auto`` with one GPU, or on a CPU-only
    machine) leaves the whole model there, without a map: the embedding weights say where."""
    embeddings = model.get_input_embeddings()
    device_map = getattr(model, "hf_device_map", None)
    if not device_map:
        return embeddings.weight.device
    name = next(n for n, module in model.named_modules() if module is embeddings)
    owner = max((key for key in device_map if key == "" or name == key or name.startswith(key + ".")), key=len)
    where = device_map[owner]
    return torch.device("cpu" if where in ("cpu", "disk", "meta") else f"cuda:{where}"
                        if isinstance(where, int) else where)


def _place(model, pretrained: str, device: str, placement: dict, accelerator) -> torch.device:
    """Where the model's inputs go, the model moved there unless a device_map placed it; said in the log (a warning
    where device=auto finds no GPU)."""
    runs = f"egoplan_hf's model {pretrained}"
    if not placement:
        resolved = torch.device(_resolve_device(device, accelerator, runs))
        model.to(resolved)
        return resolved
    # Layers spread over devices (accelerate's hooks move activations between them); the inputs go where the
    # embedding layer runs.
    resolved = _input_device(model)
    spread = sorted({str(where) for where in (getattr(model, "hf_device_map", None) or {}).values()})
    logger.info(f"{runs} runs on {describe_device(str(resolved))} (device_map: {', '.join(spread) or 'one device'})")
    return resolved


def _resolve_device(device: str | None, accelerator, runs: str) -> str:
    """``auto``: the rank's GPU where there is one, else the CPU (warned); a bare ``cuda`` gets the rank's index."""
    device = resolve_device(device, runs=runs)
    if device == "cuda" and accelerator.num_processes > 1:
        device = f"cuda:{accelerator.local_process_index}"
    return device


@dataclass(frozen=True)
class _SpeedArgs:
    """The likelihood path's speed model_args as the run gives them (None: chosen by the device), checked before the
    weights load."""

    fused_elementwise: bool | None
    continuation_batch_size: int
    candidates_in_prefill: bool | None
    visual_prefetch: int | None
    prefetch_processes: int | None

    @classmethod
    def checked(cls, fused_elementwise, continuation_batch_size, candidates_in_prefill, visual_prefetch,
                prefetch_processes) -> _SpeedArgs:
        return cls(_arg(fused_elementwise, bool | None, "fused_elementwise"),
                   _arg(continuation_batch_size, int, "continuation_batch_size", minimum=1),
                   _arg(candidates_in_prefill, bool | None, "candidates_in_prefill"),
                   _arg(visual_prefetch, int | None, "visual_prefetch", minimum=0),
                   _arg(prefetch_processes, int | None, "prefetch_processes", minimum=0))


def _visual_prefetch(value: int | None, device: torch.device) -> int:
    """The batches prepared ahead: on a GPU the scoring thread mostly waits for the device, so a preparing
    thread runs beside it; on CPU the model's threads already use every core, and preparing ahead only
    competes with them."""
    return (2 if device.type == "cuda" else 0) if value is None else value


def _prefetch_processes(processes: int | None, visual_prefetch: int, device: torch.device) -> int:
    """Worker processes preparing the batches ahead (0: a thread, ``visual_prefetch``); by default on a GPU
    ``GPU_DEFAULTS``' count where batches are prepared ahead."""
    if processes is None:
        return GPU_DEFAULTS["prefetch_processes"] if device.type == "cuda" and visual_prefetch else 0
    if processes and not visual_prefetch:
        raise ValueError(f"egoplan_hf: prefetch_processes={processes} prepares batches ahead, but visual_prefetch is 0 "
                         "(none ahead; on a CPU its default): set visual_prefetch to 1 or more or prefetch_processes=0")
    return processes


def _scorer(model, pretrained: str, continuation_batch_size: int, candidates_in_prefill: bool | None,
            device: torch.device) -> LikelihoodScorer:
    """The likelihood scorer of the model args (``candidates_in_prefill`` unset: ``GPU_DEFAULTS``' where the run is on
    a GPU, else off); where the model cannot score its candidates inside the prefill, the continuations, said once."""
    if candidates_in_prefill is None:
        candidates_in_prefill = device.type == "cuda" and GPU_DEFAULTS["candidates_in_prefill"]
    scorer = LikelihoodScorer(model, pretrained, continuation_batch_size, candidates_in_prefill)
    if candidates_in_prefill and scorer.tree_unsupported:
        logger.warning(f"egoplan_hf: candidates_in_prefill: {type(model).__name__} scores its candidates after the "
                       f"prefill instead: {scorer.tree_unsupported}")
    return scorer


def _fused(model, wanted: bool | None, device: torch.device) -> FusedElementwise | None:
    """fused_elementwise: the likelihood path's norms, MLPs and rotary embeddings compiled, their elementwise
    work fused (``models.fused_elementwise``); refused at once where inductor cannot compile for ``device``. Unset:
    on where ``GPU_DEFAULTS`` says so and inductor can compile there, else off."""
    if wanted is False:
        return None
    missing = inductor_missing(device)
    if wanted is None:
        if device.type != "cuda" or not GPU_DEFAULTS["fused_elementwise"] or missing:
            return None
    elif missing:
        raise SettingsError(f"egoplan_hf: fused_elementwise=true compiles with torch's inductor, which cannot run "
                            f"here: {missing}; drop fused_elementwise")
    fused = fuse_elementwise(model)
    if fused is None and wanted:
        logger.warning(f"egoplan_hf: fused_elementwise: {type(model).__name__} has no norm, MLP or rotary embedding to "
                       f"compile; it runs as it is")
    return fused


def _context_window(model) -> int | None:
    return getattr(model.config.get_text_config(), "max_position_embeddings", None)


def _batch_size(value) -> int:
    """``--batch_size`` as a number (``auto`` is refused)."""
    if str(value).startswith("auto"):
        raise ValueError("egoplan_hf: batch_size=auto is not supported; pass --batch_size N")
    return _arg(value, int, "batch_size", minimum=1)


def _arg(value, annotation, name: str, **limits):
    """A model_arg (lmms-eval passes them as parsed literals or strings) as ``annotation``, within ``limits``
    (``coerce_setting``'s); a value that does not fit raises an error naming the argument."""
    return coerce_setting(value, annotation, f"egoplan_hf model_args {name}", **limits)
