"""What the suite's backends do with lmms-eval's requests before any model sees them.

``egoplan_hf`` (the model in the process) and ``egoplan_server`` (the model behind an inference
server) share it, so that both group a question's candidates, decode its visuals and place them in
the prompt the same way, and hand each response to lmms-eval's response cache as it is computed.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from lmms_eval.api.instance import Instance
from loguru import logger

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.core.request_options import (
    ANSWER_AND_END_OF_TURN,
    EMPTY_ANSWER_RETRIES,
    EMPTY_ANSWER_RETRY,
    INPUT_ORDER,
    LOSS_MEAN,
    SAMPLING_DEFAULTS,
    SCORED_SPAN,
    SYSTEM_PROMPT,
    UNSET_IS_OFF,
)
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.core.settings import closest_name_hint, coerce_setting
from lmms_egoplan.models.chat import ChatTemplateError, RenderedAnswer
from lmms_egoplan.models.likelihood import ScoredSequence, TurnEnd, scored_sequence, special_token_ids, turn_end
from lmms_egoplan.models.visuals import (
    ModelVisuals,
    VisualLimits,
    decode_ahead,
    limits_below_the_plan,
    prepare_visuals,
)

# The conversation from which a backend learns how its chat template closes the assistant's turn (and
# egoplan_server's load check of each server).
PROBE_QUESTION, PROBE_ANSWER = "What should I do next?", "Open the fridge."
# The request options a likelihood backend honours (``request_options``); a question's candidates share them.
QUESTION_OPTIONS = (SCORED_SPAN, LOSS_MEAN, INPUT_ORDER)
DEFAULT_MAX_NEW_TOKENS = 256
# Generation kwargs lmms-eval tasks send that the backends read; anything else is reported once.
GENERATION_KEYS = frozenset({"until", "max_new_tokens", "max_gen_toks", "temperature", "do_sample", "top_p", "top_k",
                             "num_beams", "repetition_penalty"})
# The sampling settings a checkpoint's generation_config (else transformers' defaults) fills where a request sets
# none; those applied only when sampling.
SAMPLING_DEFAULT_KEYS = ("repetition_penalty", "top_k", "top_p", "min_p")
SAMPLING_ONLY = ("top_k", "top_p", "min_p")


@dataclass(frozen=True)
class Generation:
    """lmms-eval's generation kwargs of a request, read once for both backends."""

    until: list[str]  # stop strings
    max_new_tokens: int
    temperature: float  # 0: greedy; sampling at this temperature otherwise
    options: dict[str, Any]  # those set of top_p / top_k (only when sampling), num_beams, repetition_penalty
    model_defaults: bool = True  # False: what the request leaves unset is off (``SAMPLING_DEFAULTS``), in ``options``

    @property
    def sampling(self) -> bool:
        return self.temperature > 0


@dataclass
class Question:
    """A question's loglikelihood requests: one context and visuals, its candidate continuations."""

    visual_key: tuple  # (task, split, doc_id, doc_to_visual): what ``DocRequests._doc_visuals`` decodes
    context: str
    where: str  # the question, for errors
    options: dict[str, str]  # request option name -> value (checked)
    members: list[tuple[int, str]]  # (index of the request, its continuation)

    @property
    def continuations(self) -> list[str]:
        return [continuation for _, continuation in self.members]


def processor_inputs(processor) -> tuple[bool, bool, bool]:
    """(takes images, takes videos, takes videos and images in one call) of a processor."""
    takes_images = getattr(processor, "image_processor", None) is not None
    video_native = getattr(processor, "video_processor", None) is not None
    videos_with_images = not video_native or not takes_images or not (
        set(processor.video_processor.model_input_names) & set(processor.image_processor.model_input_names))
    return takes_images, video_native, videos_with_images


class DocRequests:
    """Mixin of the suite's backends. The backend sets ``pretrained``, ``processor``, ``tokenizer``, ``chat``,
    ``limits``, ``takes_images``, ``video_native``, ``videos_with_images``, ``visual_prefetch`` and
    ``_reported_generation_keys`` (an empty set), and calls ``settle_turn_end`` (which gives it a run of its own,
    ``run``, until it joins the evaluation's: ``join_run``); lmms-eval sets ``task_dict``."""

    # Set while lmms-eval's --use_cache calls the backend (``compat.durability.
    # keep_responses_of_stopped_runs``): each response is handed to it as soon as it is computed,
    # and stored, so that a run killed mid-pass keeps every question it scored.
    response_sink: Callable[[Instance, Any], None] | None = None
    is_simple = True
    backend_name = "the backend"  # its --model name, in what it says
    request_options = {option.name: option.values for option in (*QUESTION_OPTIONS, EMPTY_ANSWER_RETRY,
                                                                  EMPTY_ANSWER_RETRIES, SYSTEM_PROMPT,
                                                                  SAMPLING_DEFAULTS)}
    # The values that switch off each of ``SAMPLING_DEFAULT_KEYS`` on this backend (``SAMPLING_DEFAULTS``).
    sampling_off: dict[str, Any] = {}

    @staticmethod
    def visual_limits(backend: str, max_frames, image_max_side, image_max_pixels, video_max_side,
                      video_max_pixels) -> VisualLimits:
        """The visual-size model_args both backends take, each checked under its own name."""
        def arg(value, annotation, name: str):  # 0 or less would show one-pixel images, or none
            return coerce_setting(value, annotation, f"{backend} model_args {name}", minimum=1)

        return VisualLimits(max_frames=arg(max_frames, int, "max_frames"),
                            image_max_side=arg(image_max_side, int | None, "image_max_side"),
                            image_max_pixels=arg(image_max_pixels, int | None, "image_max_pixels"),
                            video_max_side=arg(video_max_side, int | None, "video_max_side"),
                            video_max_pixels=arg(video_max_pixels, int | None, "video_max_pixels"))

    def join_run(self, run: SuiteRun) -> None:
        """Keep this backend's facts (its turn end, the protocol changes it makes) on the evaluation's ``run``
        (``contract.adapter.JoinsARun``: compat's ``simple_evaluate`` wrapper hands it over)."""
        run.turn_end = self.run.turn_end
        self.run = run

    def settle_turn_end(self, generation_config) -> None:
        """How a scored assistant turn ends for this model (``likelihood.TurnEnd``: the template's special
        token, else the model's EOS from ``generation_config`` or the tokenizer), found once from a probe
        conversation and recorded for the run's results and samples (``SuiteRun.turn_end``). A model without
        one keeps the error, raised when a task asks for its end-of-turn token."""
        self.run = SuiteRun()
        self.special_ids = special_token_ids(self.tokenizer)
        try:
            [probe] = self.chat.with_answers(self.chat.user_turn([], PROBE_QUESTION), [PROBE_ANSWER])
            self.turn_end: TurnEnd | ChatTemplateError = turn_end(
                self.tokenizer, probe, generation_config, model_name=self.pretrained,
                add_special_tokens=self.chat.adds_special_tokens(probe.text))
            self.run.turn_end = self.turn_end.describe()
        except ChatTemplateError as error:
            self.turn_end = error

    def scored_sequences(self, rendered: Sequence[RenderedAnswer], scored_span: str,
                         add_special_tokens: bool) -> tuple[list[RenderedAnswer], list[ScoredSequence]]:
        """The candidates' renderings as they are scored (with the end-of-turn span, the turn closed by
        the model's own EOS where the template writes no special token) and their scored tokens."""
        end_of_turn_ids = None
        if scored_span == ANSWER_AND_END_OF_TURN:
            if isinstance(self.turn_end, ChatTemplateError):
                raise self.turn_end
            rendered, end_of_turn_ids = [self.turn_end.close(r) for r in rendered], self.special_ids
        return list(rendered), [scored_sequence(self.tokenizer, r, end_of_turn_ids=end_of_turn_ids,
                                                model_name=self.pretrained, add_special_tokens=add_special_tokens)
                                for r in rendered]

    def _generation(self, generation_kwargs: dict, backend: str, ignored: Sequence[str] = (),
                    sampling_defaults: str = SAMPLING_DEFAULTS.convention) -> Generation:
        """``generation_kwargs`` as a ``Generation``; keys the backend does not read (``ignored``: those it
        reads but cannot honour) are reported once per run. ``do_sample`` without a temperature samples
        at 1, a temperature above 0 samples (as transformers' ``generate`` does). Where the request asks for it
        (``sampling_defaults``), the sampling settings it leaves unset are switched off (``sampling_off``)."""
        until = generation_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        unread = (set(generation_kwargs) - GENERATION_KEYS) | set(ignored)
        if unread - self._reported_generation_keys:
            logger.warning(f"{backend} ignores these generation kwargs: "
                           f"{sorted(unread - self._reported_generation_keys)}")
            self._reported_generation_keys |= unread
        temperature = float(generation_kwargs.get("temperature") or 0.0)
        do_sample = coerce_setting(generation_kwargs.get("do_sample", False), bool, f"{backend} gen_kwargs do_sample")
        sampling = do_sample or temperature > 0
        options = {k: generation_kwargs[k] for k in ("top_p", "top_k")
                   if sampling and generation_kwargs.get(k) is not None}
        options.update({k: generation_kwargs[k] for k in ("num_beams", "repetition_penalty")
                        if generation_kwargs.get(k) is not None})
        off = SAMPLING_DEFAULTS.check(sampling_defaults, f"a {backend} generation request") == UNSET_IS_OFF
        if off:
            options = {**{k: v for k, v in self.sampling_off.items() if sampling or k not in SAMPLING_ONLY}, **options}
        max_new_tokens = generation_kwargs.get("max_new_tokens",
                                               generation_kwargs.get("max_gen_toks", DEFAULT_MAX_NEW_TOKENS))
        return Generation(until, int(max_new_tokens), (temperature or 1.0) if sampling else 0.0, options,
                          model_defaults=not off)

    def _questions(self, requests: Sequence[Instance]) -> list[Question]:
        """The requests grouped by question (same doc, context, visuals and options), in order."""
        questions: dict[tuple, Question] = {}
        for index, request in enumerate(requests):
            context, continuation, doc_to_visual, doc_id, task, split = loglikelihood_args(request)
            if callable(continuation):  # output_type: loglikelihood passes doc_to_target itself
                continuation = continuation(self.task_dict[task][split][doc_id])
            options = tuple(option.of(request) for option in QUESTION_OPTIONS)
            key = (task, split, doc_id, doc_to_visual, context, *options)
            if key not in questions:
                where = f"{task} doc {doc_id}" if task is not None else "a context-free request"
                checked = {option.name: option.check(value, where) for option, value in zip(QUESTION_OPTIONS, options)}
                questions[key] = Question(key[:4], context, where, checked, [])
            questions[key].members.append((index, continuation))
        return list(questions.values())

    def _hand_over(self, request: Instance, response: Any) -> None:
        if self.response_sink is not None:
            self.response_sink(request, response)

    def _visuals_in_order(self, keys: Sequence[tuple]) -> Iterator[ModelVisuals]:
        """The visuals of each (task, split, doc_id, doc_to_visual) key, in order: decoded once for a
        run of equal keys (requests arrive grouped by doc), the next ``visual_prefetch`` docs in a
        background thread while the model runs. A decoding error is raised when its key is reached."""
        runs = [(key, sum(1 for _ in run)) for key, run in itertools.groupby(keys)]
        with contextlib.closing(decode_ahead(self._doc_visuals, [key for key, _ in runs],
                                             self.visual_prefetch)) as decoded:
            for visuals, (_, count) in zip(decoded, runs):
                yield from itertools.repeat(visuals, count)

    def _doc_visuals(self, key: tuple) -> ModelVisuals:
        task, split, doc_id, doc_to_visual = key
        raw = doc_to_visual(self.task_dict[task][split][doc_id]) if doc_to_visual is not None else []
        raw = raw if isinstance(raw, (list, tuple)) else [raw]
        if task is not None:
            self._warn_of_limits_below_the_plan(task, raw)
        return prepare_visuals(raw, limits=self.limits, video_native=self.video_native, takes_images=self.takes_images,
                               model_name=self.pretrained, videos_with_images=self.videos_with_images)

    def _warn_of_limits_below_the_plan(self, task: str, raw: Sequence) -> None:
        """Warn once per task and setting where this backend's model_args cut or downscale the frames the task
        planned (``visuals.limits_below_the_plan``), and record it for the run's results (``SuiteRun.protocol_changes``,
        written by ``compat.results.record_in_results``): a protocol changed, never silently."""
        changes = self.run.protocol_changes.setdefault(task, {})
        for setting, change in limits_below_the_plan(raw, self.limits, self.backend_name):
            if setting not in changes:
                changes[setting] = change
                logger.warning(f"{task}: {change}; its numbers are not the paper's protocol")

    def _check_placeholders(self, text: str, visuals: ModelVisuals, where: str) -> None:
        """The rendered prompt must hold one placeholder per image and per video (the processor
        expands each into the visual's tokens); a chat template that renders only string content
        leaves them out, and the processor's own error then names neither model nor template."""
        for kind, count in (("image", len(visuals.images)), ("video", len(visuals.videos))):
            # Gemma-3-style processors expand a begin-of-image token that the template renders.
            names = ("boi_token", "image_token") if kind == "image" else ("video_token",)
            placeholder = next((getattr(self.processor, n) for n in names if getattr(self.processor, n, None)), None)
            if count and placeholder and text.count(placeholder) != count:
                raise ChatTemplateError(
                    f"{self.pretrained}: the chat template renders {text.count(placeholder)} {kind} placeholder(s) "
                    f"({placeholder}) for the {count} {kind}(s) of {where}: it must render one for each "
                    f"{{'type': '{kind}'}} content item; pass chat_template=<path to a Jinja template that does> "
                    f"in --model_args"
                )


def loglikelihood_args(request: Instance) -> tuple:
    """(context, continuation, doc_to_visual, doc_id, task, split); mutual-information requests carry only
    (context, continuation) and no visuals."""
    args = request.args
    return tuple(args) if len(args) == 6 else (args[0], args[1], None, None, None, None)


def unknown_model_args_message(backend: str, backend_class: type, unknown: Sequence[str]) -> str:
    """Each unknown key with the closest model_arg of ``backend_class``."""
    import inspect

    known = [name for name in inspect.signature(backend_class.__init__).parameters if name not in ("self", "unknown")]
    named = "; ".join(f"{key} ({closest_name_hint(key, known)})" for key in sorted(unknown))
    return f"{backend}: unknown model_args {named}; every model_arg is in {doc_page('backend.md')}"


def cut_at_first(text: str, stops: Sequence[str]) -> str:
    cut = min((text.find(s) for s in stops if s and s in text), default=len(text))
    return text[:cut]
