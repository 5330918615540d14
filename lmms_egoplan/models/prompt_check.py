"""The prompt a server ran, compared with the suite's, for every question and generation of ``egoplan_server``.

The suite's ids hold one placeholder token per image or video (``visual_placeholder_ids``), which the
server's processor expands into the visual's tokens: the server's ids must hold the suite's text tokens
between the placeholders unchanged and in order, whatever each expansion holds (its length, and the
timestamps or row markers some processors put in it). A token on either side of a placeholder may
differ (a processor that writes newlines around an image re-tokenizes its neighbours). Anything else
(a template the server reads otherwise, images moved before a turn's text, a BOS added or left out)
is ``PromptMismatchError``, raised before anything of the prompt is scored.
"""

from __future__ import annotations

from typing import Sequence

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.core.errors import InputError

# A position whose id the server did not report: it matches any.
UNREPORTED = -1
# Tokens on each side of a placeholder that its expansion may change.
BOUNDARY_SLACK = 1


class PromptMismatchError(InputError):
    """The server ran another prompt than the suite's (its chat template, content format, BOS)."""


def visual_placeholder_ids(processor) -> frozenset[int]:
    """The ids of the processor's image and video placeholders (the tokens its expansion replaces)."""
    tokenizer = getattr(processor, "tokenizer", processor)
    names = [getattr(processor, name, None) for name in ("image_token", "boi_token", "video_token")]
    ids = {tokenizer.convert_tokens_to_ids(name) for name in names if isinstance(name, str) and name}
    return frozenset(i for i in ids if isinstance(i, int) and i != tokenizer.unk_token_id)


def first_difference(server: Sequence[int], suite: Sequence[int], placeholders: frozenset[int]
                     ) -> tuple[int, int | None] | None:
    """(suite position, server position or None) of the first suite token the server's ids do not
    hold where they should; None where they hold every one."""
    def same(server_id: int, suite_id: int) -> bool:
        return server_id == UNREPORTED or server_id == suite_id

    cuts = [index for index, token in enumerate(suite) if token in placeholders]
    if not cuts:
        for index in range(max(len(server), len(suite))):
            if index >= len(server) or index >= len(suite) or not same(server[index], suite[index]):
                return index, index if index < len(server) else None
        return None
    head = max(0, cuts[0] - BOUNDARY_SLACK)
    for index in range(head):
        if index >= len(server) or not same(server[index], suite[index]):
            return index, index if index < len(server) else None
    # The text between placeholders, found in order.
    position = head
    for before, after in zip(cuts, cuts[1:]):
        core = list(suite[before + 1 + BOUNDARY_SLACK:after - BOUNDARY_SLACK])
        found = _find(server, core, position, same)
        if found is None:
            return before + 1 + BOUNDARY_SLACK, None
        position = found + len(core)
    tail = min(len(suite), cuts[-1] + 1 + BOUNDARY_SLACK)
    offset = len(server) - len(suite)
    for index in range(tail, len(suite)):
        if index + offset < position or not same(server[index + offset], suite[index]):
            return index, index + offset if index + offset >= 0 else None
    return None


def _find(server: Sequence[int], core: list[int], start: int, same) -> int | None:
    for at in range(start, len(server) - len(core) + 1):
        if all(same(server[at + k], token) for k, token in enumerate(core)):
            return at
    return None


def check_prompt(server: Sequence[int], suite: Sequence[int], *, tokenizer, placeholders: frozenset[int],
                 engine: str, base_url: str, where: str, has_visuals: bool) -> None:
    """Raise PromptMismatchError, naming the first differing position in text and its likely cause,
    unless the server's ids (``server``) hold the suite's (``suite``) as the module says."""
    difference = first_difference(server, suite, placeholders)
    if difference is None:
        return
    at, server_at = difference
    character = len(tokenizer.decode(list(suite[:at])))
    suite_text = tokenizer.decode(list(suite[at:at + 8]))
    server_text = "(nothing there)" if server_at is None else tokenizer.decode(
        [token for token in server[server_at:server_at + 8] if token >= 0])
    raise PromptMismatchError(
        f"egoplan_server: the {engine} server at {base_url} ran another prompt than the suite's for {where}: they "
        f"differ from character {character} of the suite's prompt on (suite: {suite_text!r}, server: "
        f"{server_text!r}); {_likely_cause(server, suite, at, tokenizer, placeholders, engine, has_visuals)}. "
        f"Nothing is scored from a prompt the model would not see in egoplan_hf "
        f"({doc_page('backend.md', 'The prompt the server ran')})")


def _leading(ids: Sequence[int], token: int | None) -> int:
    count = 0
    while count < len(ids) and ids[count] == token:
        count += 1
    return count


def _likely_cause(server, suite, at: int, tokenizer, placeholders, engine: str, has_visuals: bool) -> str:
    bos = getattr(tokenizer, "bos_token_id", None)
    server_bos, suite_bos = _leading(server, bos), _leading(suite, bos)
    if bos is not None and at <= suite_bos and server_bos != suite_bos:
        added = "adds a BOS the suite's prompt does not hold" if server_bos > suite_bos else \
            "leaves out the BOS the suite's prompt starts with"
        return (f"likely cause: the server {added} ({server_bos} BOS where the suite has {suite_bos}: its tokenizer's "
                f"add_bos_token, or a template that writes one)")
    server_visual = next((index for index, token in enumerate(server) if token in placeholders), None)
    suite_visual = next((index for index, token in enumerate(suite) if token in placeholders), None)
    if has_visuals and server_visual is not None and suite_visual is not None and server_visual < suite_visual:
        fix = (" (vLLM moves a turn's images and videos before its text where it reads the chat template's content "
               "format as string: start it with --chat-template-content-format openai)" if engine == "vllm" else "")
        return (f"likely cause: the server puts a visual before text the suite puts first (the task's input_order "
                f"text_first), its chat template's content format{fix}")
    return ("likely cause: the server renders or tokenizes the conversation otherwise (another chat template: "
            "--chat-template, another tokenizer, or a router that rewrites prompts)")
