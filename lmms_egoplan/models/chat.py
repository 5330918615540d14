"""Prompts rendered with the checkpoint's own chat template, and where an answer sits in them.

A request becomes one user turn: the visuals' placeholders (in order), then the context text, or
the text first where the request asks for it (``request_options.INPUT_ORDER``). For generation
the template's generation prompt follows; for likelihood the candidate answer is rendered as the
assistant turn, and the answer's characters are located in that rendering so that exactly the
tokens covering them are scored (whatever the template puts around them, and whatever the
tokenizer merges across their boundary).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from lmms_egoplan.core.files import read_text
from lmms_egoplan.core.request_options import TEXT_FIRST, VISUALS_FIRST


class ChatTemplateError(ValueError):
    """The checkpoint has no chat template, or its template does not render an answer verbatim."""


class SystemPromptConflict(ValueError):
    """The backend's system_prompt model_arg differs from the system prompt a task's requests carry."""


@dataclass(frozen=True)
class RenderedAnswer:
    """A conversation ending with an assistant turn; ``text[start:end]`` is the answer, followed by
    ``closing``, the model's end-of-turn token where the suite writes it (``likelihood.TurnEnd``)."""

    text: str
    start: int
    end: int
    closing: str = ""

    @property
    def assistant_text(self) -> str:
        """The assistant turn's content that renders as ``text`` (what a server is sent)."""
        return self.text[self.start:self.end] + self.closing


class ChatRenderer:
    def __init__(self, processor, model_name: str, *, system_prompt: str | None = None,
                 chat_template: str | os.PathLike | None = None):
        self.processor = processor
        self.model_name = model_name
        self.system_prompt = system_prompt
        tokenizer = getattr(processor, "tokenizer", processor)
        if chat_template is not None:
            self.template = read_text(chat_template, ChatTemplateError)
        else:
            self.template = getattr(processor, "chat_template", None) or getattr(tokenizer, "chat_template", None)
        if not self.template:
            raise ChatTemplateError(
                f"{model_name} has no chat template (neither its processor nor its tokenizer defines one); "
                f"pass chat_template=<path to a Jinja template> in --model_args"
            )

    def user_turn(self, visual_parts: Sequence[dict], text: str, input_order: str = VISUALS_FIRST,
                  task_system_prompt: str = "") -> list[dict]:
        """The system turn (the task's, ``request_options.SYSTEM_PROMPT``, else the model_arg ``system_prompt``), then
        the user turn."""
        messages = []
        if task_system_prompt and self.system_prompt and self.system_prompt != task_system_prompt:
            raise SystemPromptConflict(
                f"{self.model_name}: model_args system_prompt {self.system_prompt!r} differs from the system prompt "
                f"{task_system_prompt!r} that the task sends (its official evaluation's); drop system_prompt from "
                f"--model_args")
        if system_prompt := task_system_prompt or self.system_prompt:
            messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
        text_part = [{"type": "text", "text": text}]
        content = [*text_part, *visual_parts] if input_order == TEXT_FIRST else [*visual_parts, *text_part]
        messages.append({"role": "user", "content": content})
        return messages

    def adds_special_tokens(self, text: str) -> bool:
        """Whether the model's own processor adds its tokenizer's special tokens (the BOS) to ``text``,
        a rendering of this template: transformers' ``ProcessorMixin.apply_chat_template(tokenize=True)``
        adds them unless the rendering already starts with the BOS (``processing_utils.py``); a text-only
        model's tokenizer adds none to a chat. Both backends tokenize every rendering so, which gives
        llava-hf's LLaVA-1.5 and LLaVA-NeXT-Video, whose templates write no BOS, the BOS they were
        trained with (docs/backend.md, BOS)."""
        from transformers import ProcessorMixin

        bos = getattr(getattr(self.processor, "tokenizer", None), "bos_token", None)
        return isinstance(self.processor, ProcessorMixin) and not (bos and text.startswith(bos))

    def generation_prompt(self, messages: list[dict]) -> str:
        return self._render(messages, add_generation_prompt=True)

    def with_answers(self, messages: list[dict], answers: Sequence[str]) -> list[RenderedAnswer]:
        """``messages`` followed by each answer as the assistant turn, with the answer located.

        The conversation with an empty answer is rendered too: the answer is where the two
        renderings differ. A template that rewrites the answer text raises ChatTemplateError.
        """
        without = self._render(messages + [_assistant("")])
        return [self._locate(self._render(messages + [_assistant(answer)]), without, answer) for answer in answers]

    def _locate(self, text: str, without: str, answer: str) -> RenderedAnswer:
        # text == without[:start] + answer + without[start:]; start cannot exceed the common prefix.
        start = len(os.path.commonprefix([text, without]))
        while start >= 0:
            end = start + len(answer)
            if text[start:end] == answer and text[end:] == without[start:]:
                return RenderedAnswer(text, start, end)
            start -= 1
        raise ChatTemplateError(
            f"the chat template of {self.model_name} does not reproduce the assistant's text verbatim "
            f"(answer {answer!r}), so its tokens cannot be located for likelihood scoring"
        )

    def _render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.processor.apply_chat_template(messages, chat_template=self.template, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def token_range(offsets: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """``[first, stop)``: the tokens whose characters overlap ``[start, end)``.

    A token that straddles ``start`` (the tokenizer merged the end of the prompt with the start
    of the answer) belongs to the answer: it is the token that produces the answer's first
    characters.
    """
    covering = [i for i, (a, b) in enumerate(offsets) if b > a and b > start and a < end]
    if not covering:
        raise ValueError(f"no token covers characters {start}..{end}")
    return covering[0], covering[-1] + 1
