"""Mean negative log-likelihood of an answer's tokens, as lmms-eval's ``multiple_choice`` ranks them,
or of the answer's tokens and the end-of-turn token(s) that close it, where the task asks for it
(``lmms_egoplan.core.request_options.SCORED_SPAN``; EgoPlan-Bench's official loss); averaged over every
scored token, or over those whose loss is not exactly 0 as EgoPlan-Bench's official code does
(``mean_loss``, ``request_options.LOSS_MEAN``).

Two ways to compute the same numbers:

* ``score_full``: one forward pass over the whole conversation per candidate answer (what
  lmms-eval's own backends do; the reference).
* ``score_shared``: the candidates of one question share their prompt, visuals included, so the
  vision encoder and the prompt run once (prefill, KV cache kept) and all candidates continue from
  that cache in batched forward passes. Where the tokenizer merges the end of the prompt with
  the start of an answer, the candidates' token sequences part earlier; only their common token
  prefix is shared. Several questions go together: their prefixes left padded in one prefill,
  each continuation on its own question's rows of the cache, at the positions its prefix ends.
  It runs in two steps: ``prefill_on_host`` cuts the processor's output to the prefixes and computes
  their positions (an M-RoPE model's through its own ``get_rope_index``) from host tensors, ahead of
  the model and off its thread (egoplan_hf's prefetch), so that ``score_shared``, the model step,
  reads nothing back from the device for them; ``score_shared`` runs the prefill and the continuations.
  With ``candidates_in_prefill``, the continuations go into the prefill itself (``CandidateTree``): each row holds
  its question's prefix followed by every candidate, under an attention mask shaped as a tree (a candidate sees the
  prefix and itself, not the other candidates) with each candidate's positions continuing from the prefix's end,
  so that one forward pass scores the batch, with no KV cache kept or copied.

Positions are handled in two token spaces: the tokenizer's ids of the rendered conversation
(each visual placeholder one token, the BOS where the model's processor adds one; ``ScoredSequence``) and
the processor's ids, where placeholders are expanded to one token per visual embedding. Expansion happens
only inside the user turn, so the two agree on everything after it, shifted by a constant;
``expansion_shift`` checks that before any position is trusted.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import os
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from lmms_egoplan.core.request_options import EVERY_SCORED_TOKEN, LOSS_MEAN, NONZERO_LOSS_TOKENS
from lmms_egoplan.models.chat import ChatTemplateError, RenderedAnswer, token_range


class PromptAlignmentError(RuntimeError):
    """The processor's token ids do not end with the tokenizer's ids of the same rendering."""


@dataclass(frozen=True)
class ScoredSequence:
    """Tokenizer ids of a rendered conversation; the scored tokens are ``token_ids[first:stop]``."""

    token_ids: list[int]
    first: int
    stop: int


def special_token_ids(tokenizer) -> frozenset[int]:
    """Ids of the tokenizer's special tokens, named (eos, ...) or added as special (``<|im_end|>``, ...)."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return frozenset(tokenizer.all_special_ids) | {index for index, token in added.items() if token.special}


# Where the token that closes the assistant's turn comes from (``TurnEnd.source``).
TEMPLATE, GENERATION_CONFIG, TOKENIZER = "template", "generation_config", "tokenizer"


@dataclass(frozen=True)
class TurnEnd:
    """The special token that closes the assistant's turn in a scored conversation, and where it comes
    from: the chat template writes it after the answer (``template``: ``<|im_end|>``, ``<end_of_turn>``,
    ...); or the template writes no special token there (llava-hf's LLaVA-1.5 and LLaVA-NeXT-Video close
    the turn with a space) and the model's own EOS, the token its ``generation_config`` (else its
    tokenizer) stops at, is written right after the answer's last token, as the model was trained to
    emit it (EgoPlan-Bench's official loss: Video-LLaMA's ``preprocess_for_llama_v2`` scores the answer, the
    separator space of its ``{answer} </s>`` and ``</s>``; the rule scores such a separator wherever a template
    writes one before its special token)."""

    token: str
    source: str

    def close(self, rendered: RenderedAnswer) -> RenderedAnswer:
        """``rendered`` with the model's end-of-turn token right after the answer where the template writes none."""
        if self.source == TEMPLATE:
            return rendered
        return RenderedAnswer(rendered.text[:rendered.end] + self.token + rendered.text[rendered.end:],
                              rendered.start, rendered.end, self.token)

    def describe(self) -> str:
        """What results and samples record: ``</s> (generation_config)``."""
        return f"{self.token} ({self.source})"


def model_end_of_turn(generation_config, tokenizer) -> tuple[int, str] | None:
    """(id, source) of the EOS the model stops at: its generation config's (the first, where it lists
    several), else its tokenizer's; None where neither names one."""
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    if eos is not None:
        return int(eos), GENERATION_CONFIG
    return (tokenizer.eos_token_id, TOKENIZER) if tokenizer.eos_token_id is not None else None


def turn_end(tokenizer, rendered: RenderedAnswer, generation_config, *, model_name: str = "",
             add_special_tokens: bool = False) -> TurnEnd:
    """How the assistant's turn of ``rendered`` (any answer: a template closes every turn alike) ends
    when it is scored: the first special token the template writes after the answer, else the model's
    own EOS (``TurnEnd``). A ChatTemplateError where neither the template nor the model names one."""
    special = special_token_ids(tokenizer)
    token_ids, _, stop = _answer_tokens(tokenizer, rendered, add_special_tokens)
    closing = _first_special(token_ids, stop, special)
    if closing is not None:
        return TurnEnd(tokenizer.convert_ids_to_tokens(token_ids[closing]), TEMPLATE)
    eos = model_end_of_turn(generation_config, tokenizer)
    if eos is None or eos[0] not in special:
        raise ChatTemplateError(
            f"the chat template of {model_name} closes the assistant's turn with no special token after the "
            f"answer ({rendered.text[rendered.end:]!r}), and neither its generation_config nor its tokenizer names "
            f"an EOS token, so its end-of-turn token cannot be scored; score the answer tokens only (the task's "
            f"setting for it), or pass a chat_template that ends the turn with the model's end-of-turn token"
        )
    return TurnEnd(tokenizer.convert_ids_to_tokens(eos[0]), eos[1])


def scored_sequence(tokenizer, rendered: RenderedAnswer, *, end_of_turn_ids: frozenset[int] | None = None,
                    model_name: str = "", add_special_tokens: bool = False) -> ScoredSequence:
    """The rendered conversation's token ids and the scored range: the answer's tokens, and with
    ``end_of_turn_ids`` (the special token ids) also the tokens that follow the answer up to and
    including the first special token -- how the turn closes (``<|im_end|>``, ``<end_of_turn>``,
    ``</s>``, ...; ``TurnEnd.close`` writes the model's own where the template writes none); the text
    after it (a newline) is not scored.
    ``add_special_tokens``: the tokenizer's own (the BOS) added, as the model's processor adds them
    (``ChatRenderer.adds_special_tokens``).
    """
    token_ids, first, stop = _answer_tokens(tokenizer, rendered, add_special_tokens)
    if first == 0:
        raise ValueError("the answer starts the conversation: no token precedes it to predict it")
    if end_of_turn_ids is not None:
        closing = _first_special(token_ids, stop, end_of_turn_ids)
        if closing is None:
            raise ChatTemplateError(f"the conversation of {model_name} has no special token after the answer "
                                    f"({rendered.text[rendered.end:]!r}) to close the assistant's turn")
        stop = closing + 1
    return ScoredSequence(token_ids, first, stop)


def _answer_tokens(tokenizer, rendered: RenderedAnswer, add_special_tokens: bool) -> tuple[list[int], int, int]:
    """(token ids of ``rendered.text``, first, stop of the answer's tokens)."""
    encoded = tokenizer(rendered.text, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
    first, stop = token_range(encoded["offset_mapping"], rendered.start, rendered.end)
    return list(encoded["input_ids"]), first, stop


def _first_special(token_ids: Sequence[int], start: int, special: frozenset[int]) -> int | None:
    return next((index for index in range(start, len(token_ids)) if token_ids[index] in special), None)


def expansion_shift(expanded_ids: Sequence[int], sequence: ScoredSequence, from_index: int, model_name: str,
                    architecture: str) -> int:
    """How many tokens placeholder expansion added before ``sequence.token_ids[from_index]``
    (``architecture``: the model's ``model_type``, for the error).

    Checks that the processor's ids end with ``sequence.token_ids[from_index:]`` unchanged.
    """
    shift = len(expanded_ids) - len(sequence.token_ids)
    if shift < 0 or list(expanded_ids[shift + from_index:]) != sequence.token_ids[from_index:]:
        raise PromptAlignmentError(
            f"{model_name}: the processor's token ids of the prompt do not end with the tokenizer's ids of the "
            f"same text (from token {from_index} on), so the answer tokens cannot be located; the {architecture} "
            f"processor changes text outside the visual placeholders, which egoplan_hf cannot score"
        )
    return shift


def mean_loss(token_losses: Sequence[float], rule: str = EVERY_SCORED_TOKEN) -> float:
    """A candidate's loss from the negative log-likelihoods of its scored tokens, under ``rule``
    (``request_options.LOSS_MEAN``; any backend computes it so from its per-token losses):

    * ``every_scored_token``: their mean (lmms-eval's convention);
    * ``nonzero_loss_tokens``: their sum over the number of tokens whose loss is not exactly 0, as
      EgoPlan-Bench's official code computes it (``modeling_llama.py``: ``loss.sum(1) / (loss !=
      0).sum(1)``, meant to leave out the masked prompt tokens; it also leaves out a scored token
      the model is certain of, whose loss rounds to exactly 0). A candidate whose every token has
      loss 0 gets 0: the official code divides 0 by 0 and its ``argmin`` picks the NaN, so such a
      candidate wins there as 0 does here (ties: the first).
    """
    if not token_losses:
        raise ValueError("a candidate without scored tokens has no loss")
    if rule == NONZERO_LOSS_TOKENS:
        counted = sum(1 for loss in token_losses if loss != 0)
        return sum(token_losses) / counted if counted else 0.0
    LOSS_MEAN.check(rule, "a loss")
    return sum(token_losses) / len(token_losses)


def answer_nll(logits: torch.Tensor, targets: torch.Tensor, rule: str = EVERY_SCORED_TOKEN) -> tuple[float, bool]:
    """(loss of ``targets`` under ``rule``, whether each is the argmax) from their predicting logits."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    nll = -logprobs.gather(-1, targets[:, None].to(logits.device))[:, 0]
    return mean_loss(nll.tolist(), rule), bool((logits.argmax(-1) == targets.to(logits.device)).all())


def answer_scores(logits: Sequence[torch.Tensor], targets: Sequence[torch.Tensor],
                  rule: str = EVERY_SCORED_TOKEN) -> list[tuple[float, bool]]:
    """``answer_nll`` of several candidates with one read of their values to the host."""
    device = logits[0].device
    targets = [target.to(device) for target in targets]
    nll = [-torch.log_softmax(scores.float(), dim=-1).gather(-1, target[:, None])[:, 0]
           for scores, target in zip(logits, targets)]
    greedy = [(scores.argmax(-1) == target).all().float()[None] for scores, target in zip(logits, targets)]
    values = torch.cat([*nll, *greedy]).tolist()
    losses, flags = values[:-len(greedy)], values[-len(greedy):]
    stops = list(itertools.accumulate(len(t) for t in targets))
    return [(mean_loss(losses[stop - len(t):stop], rule), bool(flag)) for t, stop, flag in zip(targets, stops, flags)]


def token_aligned(inputs, length: int) -> dict:
    """Processor outputs cut to the first ``length`` tokens (per-token tensors only; media untouched)."""
    shape = tuple(inputs["input_ids"].shape)
    return {key: value[:, :length] if _is_per_token(value, shape) else value for key, value in inputs.items()}


def _is_per_token(value, shape: tuple) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 2 and tuple(value.shape[:2]) == shape


def cache_keyword(model) -> str:
    """The name under which the installed transformers takes and returns a model's KV cache: ``cache`` from 5.24 on
    (``past_key_values``, its old name, warns there and goes in 5.40), ``past_key_values`` before (5.20.x is what
    vLLM 0.33.0 installs). Read from the model's ``forward``, whose deprecation wrapper keeps the new signature."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _cut_to_prefixes(inputs, firsts: Sequence[int], prefixes: Sequence[int]) -> dict:
    """``inputs`` with row i cut to its ``prefixes[i]`` tokens from ``firsts[i]`` (where its left padding ends) and
    left padded again to the longest (per-token tensors only; media untouched)."""
    longest, shape = max(prefixes), tuple(inputs["input_ids"].shape)
    if len(set(prefixes)) == 1 and len(set(firsts)) == 1:
        return token_aligned(inputs, firsts[0] + longest)
    cut = {}
    for key, value in inputs.items():
        if not _is_per_token(value, shape):
            cut[key] = value
            continue
        rows_cut = value.new_zeros((shape[0], longest, *value.shape[2:]))  # padding: masked out
        for row, (first, prefix) in enumerate(zip(firsts, prefixes)):
            rows_cut[row, longest - prefix:] = value[row, first:first + prefix]
        cut[key] = rows_cut
    return cut


@dataclass(frozen=True)
class CandidateTree:
    """Where a batch's candidates sit in its prefill when they are scored inside it (``candidates_in_prefill``):
    each row is its question's prefix (left padded to the longest, as without them), then its candidates one after
    the other, then right padding. The attention mask is built from ``segments`` on the device
    (``tree_attention_mask``); the scored tokens' predicting logits are read at (``rows``, ``columns``), columns
    counted from the prefixes' last token, where every row's prefix ends."""

    segments: torch.Tensor  # (rows, length): -1 padding, 0 the prefix, c + 1 the question's candidate c
    prefix_length: int  # the prefixes' columns (each row's prefix ends at column prefix_length - 1)
    rows: torch.Tensor  # each scored token's row
    columns: torch.Tensor  # the column of its predicting logit, from column prefix_length - 1 on
    targets: torch.Tensor  # the scored tokens
    lengths: tuple[int, ...]  # scored tokens a candidate, questions in order, each question's candidates in order

    def moved(self, move) -> CandidateTree:
        return replace(self, segments=move(self.segments), rows=move(self.rows), columns=move(self.columns),
                       targets=move(self.targets))


def tree_attention_mask(segments: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive 4D mask (rows, 1, length, length) of a ``CandidateTree``'s ``segments``: a token attends to the
    tokens before it in the prefix and in its own candidate; a padding token only to itself (a row of the attention
    with no key would be NaN, and NaN times a zero weight spreads)."""
    length = segments.shape[1]
    position = torch.arange(length, device=segments.device)
    before = position[None, :] <= position[:, None]
    query, key = segments[:, :, None], segments[:, None, :]
    allowed = before & (key >= 0) & ((key == 0) | (key == query)) | torch.eye(length, dtype=torch.bool,
                                                                              device=segments.device)
    return torch.zeros(allowed.shape, dtype=dtype, device=segments.device).masked_fill(
        ~allowed, torch.finfo(dtype).min)[:, None]


def candidates_in_prefill_unsupported(model) -> str | None:
    """Why ``model`` cannot score its candidates inside the prefill (``CandidateTree``), or None where it can: the
    tree mask replaces the mask the model would build, so a model that builds more than a causal mask with padding
    (sliding windows, image tokens attending both ways) or an attention that takes no such mask keeps the path of a
    prefill and continuations."""
    config = model.config
    text = getattr(config, "text_config", None) or config
    implementation = getattr(config, "_attn_implementation", None)
    if implementation not in ("sdpa", "eager"):
        return f"its attention ({implementation}) takes no custom 4D mask"
    if "sliding_attention" in (getattr(text, "layer_types", None) or ()) or (
            getattr(text, "sliding_window", None) and getattr(text, "use_sliding_window", True)):
        return "its sliding-window layers build a mask of their own"
    if config.model_type in ("gemma3", "paligemma"):
        return "its image tokens attend to each other both ways (token_type_ids), which a tree mask would overwrite"
    positioned = [m for m in model.modules() if hasattr(m, "rope_deltas")]
    if positioned and not any(callable(getattr(m, "get_rope_index", None)) for m in positioned):
        return "its M-RoPE positions are computed inside the model, so the candidates' cannot be given"
    return None


def candidate_tree(cut: dict, starts: torch.Tensor, questions: Sequence[Sequence[ScoredSequence]],
                   commons: Sequence[int]) -> tuple[dict, CandidateTree]:
    """``cut`` (the prefixes, left padded, with their positions) with every question's candidates after its prefix
    (``CandidateTree``): their tokens from the common prefix to the scored span's end, their positions going on from
    the question's ``starts`` (on every M-RoPE axis alike, as text tokens), zeros in every other per-token input."""
    suffixes = [[sequence.token_ids[common:sequence.stop] for sequence in sequences]
                for sequences, common in zip(questions, commons)]
    rows, prefix_length = cut["input_ids"].shape
    added = max(sum(len(suffix) for suffix in row) for row in suffixes)
    segments = torch.full((rows, prefix_length + added), -1, dtype=torch.long)
    segments[:, :prefix_length] = cut["attention_mask"].long() - 1 if "attention_mask" in cut else 0
    token_ids = torch.zeros((rows, added), dtype=cut["input_ids"].dtype)
    positions = torch.zeros((rows, added), dtype=torch.long)
    scored_rows, columns, targets, lengths = [], [], [], []
    for row, (row_suffixes, sequences, common) in enumerate(zip(suffixes, questions, commons)):
        column = 0  # from the prefix's end
        for candidate, (suffix, sequence) in enumerate(zip(row_suffixes, sequences)):
            token_ids[row, column:column + len(suffix)] = torch.tensor(suffix)
            positions[row, column:column + len(suffix)] = starts[row] + torch.arange(len(suffix))
            segments[row, prefix_length + column:prefix_length + column + len(suffix)] = candidate + 1
            scored = range(sequence.first - common, sequence.stop - common)
            # suffix[k] is predicted by the prefix's last token (k = 0) or by suffix[k - 1]
            columns.extend(0 if k == 0 else column + k for k in scored)
            scored_rows.extend([row] * len(scored))
            targets.extend(suffix[k] for k in scored)
            lengths.append(len(scored))
            column += len(suffix)
    shape = tuple(cut["input_ids"].shape)
    inputs = {}
    for key, value in cut.items():
        if key == "attention_mask":
            continue  # the tree's mask replaces it (built on the device)
        if key == "position_ids":  # (rows, length), or (axes, rows, length) for M-RoPE
            axes = value if value.dim() == 3 else value[None]
            grown = torch.cat([axes, positions[None].expand(axes.shape[0], -1, -1).to(axes.dtype)], dim=-1)
            inputs[key] = grown if value.dim() == 3 else grown[0]
        elif _is_per_token(value, shape):
            added_values = token_ids if key == "input_ids" else value.new_zeros((rows, added, *value.shape[2:]))
            inputs[key] = torch.cat([value, added_values], dim=1)
        else:
            inputs[key] = value
    if "position_ids" not in inputs:  # no padding, no M-RoPE: the prefix at 0, 1, ...; the candidates after it
        prefix_positions = torch.arange(prefix_length).expand(rows, -1)
        inputs["position_ids"] = torch.cat([prefix_positions, positions], dim=1)
    return inputs, CandidateTree(segments, prefix_length, torch.tensor(scored_rows), torch.tensor(columns),
                                 torch.tensor(targets), tuple(lengths))


@dataclass(frozen=True)
class Prefill:
    """The model inputs of a batch of questions' common prefixes, one row each, left padded, and where their
    continuations go on (``LikelihoodScorer.prefill_on_host``)."""

    inputs: dict  # the processor's outputs cut to the prefixes, with ``position_ids`` where computed on the host
    commons: list[int]  # each question's common prefix, in the tokenizer's ids
    prefixes: list[int]  # the same prefix in the processor's ids (visual placeholders expanded)
    # The position of each question's first token after its prefix; None: the model's M-RoPE offsets decide,
    # read from the module after the prefill (a model whose ``get_rope_index`` cannot be called on the host).
    starts: torch.Tensor | None
    # The candidates laid in the prefill (``inputs`` then holds them too); None: continuations after the prefill
    tree: CandidateTree | None = None
    padded_tokens: int = 0  # of ``inputs``' tokens, padding (left, and with ``tree`` right), counted on the host

    def moved(self, move) -> Prefill:
        """The prefill with each of its tensors replaced by ``move(tensor)`` (pinned, copied to the device)."""
        inputs = {key: move(value) if isinstance(value, torch.Tensor) else value for key, value in self.inputs.items()}
        return replace(self, inputs=inputs, starts=None if self.starts is None else move(self.starts),
                       tree=None if self.tree is None else self.tree.moved(move))


@dataclass
class ForwardTokens:
    """The tokens of a scorer's forward passes, and the padding among them (counted on the host where each batch is
    built): what speed/bench_loglikelihood.py reads for its ``padding_share``."""

    total: int = 0
    padded: int = 0

    def count(self, input_ids: torch.Tensor, padded: int) -> None:
        self.total += input_ids.numel()
        self.padded += padded


class LikelihoodScorer:
    def __init__(self, model, model_name: str, continuation_batch_size: int, candidates_in_prefill: bool = False):
        self.model = model
        self.model_name = model_name
        self.architecture = model.config.model_type
        self.continuation_batch_size = continuation_batch_size
        # Candidates scored inside the prefill (``CandidateTree``) where asked for and the model can take the tree's
        # mask; why it cannot, said once by whoever asked for it (egoplan_hf)
        self.tree_unsupported = candidates_in_prefill_unsupported(model)
        self.candidates_in_prefill = candidates_in_prefill and self.tree_unsupported is None
        # Qwen2-VL-style models keep the M-RoPE offset of the last prefill on the module and reuse it
        # for cached continuations; a text-only prefill does not refresh it, so it is cleared first.
        self._position_state = [m for m in model.modules() if hasattr(m, "rope_deltas")]
        self.forward_tokens = ForwardTokens()

    @torch.inference_mode()
    def score_full(self, inputs, sequence: ScoredSequence, rule: str = EVERY_SCORED_TOKEN) -> tuple[float, bool]:
        """One forward pass over the whole conversation (``inputs``: its processor output, batch 1).

        Only the logits that predict scored tokens are computed (the vocabulary projection of every
        prompt token would cost more than a decoder layer)."""
        ids = inputs["input_ids"][0]
        shift = expansion_shift(ids.tolist(), sequence, sequence.first, self.model_name, self.architecture)
        self._clear_position_state()
        first, stop = shift + sequence.first, shift + sequence.stop
        self.forward_tokens.count(inputs["input_ids"], 0)
        logits = self.model(**inputs, logits_to_keep=len(ids) - first + 1).logits[0]  # from position first - 1 on
        return answer_nll(logits[:stop - first], ids[first:stop], rule)

    @torch.inference_mode()
    def prefill_on_host(self, inputs, questions: Sequence[Sequence[ScoredSequence]]) -> Prefill:
        """The prefill of ``questions``' common prefixes (``Prefill``), made from host tensors without the model's
        weights, so that it runs ahead of the model (egoplan_hf's background thread) and the model step reads no
        tensor back to the host for it.

        ``inputs`` is the processor output of each question's first sequence (one row per question, left
        padded); the other candidates differ from it only after the common prefix, so they need no processor
        call (no second image preprocessing). Each row is cut to its question's common prefix and left padded
        again (per-token tensors only; media untouched). Positions: an M-RoPE model's 3D position ids and
        offsets from its own ``get_rope_index`` where it can be called with the processor's outputs (else the
        model computes them in the prefill, as without this step); the attention mask's cumulative sum where
        left padding shifts another model's default positions."""
        commons = [min(len(os.path.commonprefix([s.token_ids for s in sequences])), min(s.first for s in sequences))
                   for sequences in questions]
        rows = inputs["input_ids"].tolist()
        lengths = inputs["attention_mask"].sum(1).tolist() if "attention_mask" in inputs else [len(rows[0])] * len(rows)
        firsts = [len(row) - length for row, length in zip(rows, lengths)]
        prefixes = [expansion_shift(row[first:], sequences[0], common, self.model_name, self.architecture) + common
                    for row, first, sequences, common in zip(rows, firsts, questions, commons)]
        cut = _cut_to_prefixes(inputs, firsts, prefixes)
        starts = torch.tensor(prefixes)
        visuals = any(key.endswith("grid_thw") for key in inputs)
        rope_index = self._models_rope_index(cut) if visuals else None
        if rope_index is not None:
            cut["position_ids"], deltas = rope_index
            starts = starts + deltas.reshape(-1)
            cut.update(self._vision_tower_layout(cut))
        elif visuals and self._position_state:
            starts = None  # the model places the tokens and leaves the offsets on the module (rope_deltas)
        elif len(set(prefixes)) > 1 or len(set(firsts)) > 1:
            cut["position_ids"] = (cut["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        # starts None (a get_rope_index that asked for what the processor did not give): the path of continuations
        if self.candidates_in_prefill and starts is not None:
            inputs, tree = candidate_tree(cut, starts, questions, commons)
            return Prefill(inputs, commons, prefixes, starts, tree, int((tree.segments < 0).sum()))
        padded = int((cut["attention_mask"] == 0).sum()) if "attention_mask" in cut else 0
        return Prefill(cut, commons, prefixes, starts, padded_tokens=padded)

    def _vision_tower_layout(self, inputs: dict) -> dict:
        """What a Qwen-VL vision tower computes from each modality's ``grid_thw`` before its blocks (segment bounds,
        window order, rotary positions: a loop of host reads of the GPU's grid), computed here on the host tensors
        by transformers' own ``precompute_export_inputs`` and passed as the ``image_`` / ``video_`` kwargs that the
        model's ``get_image_features`` / ``get_video_features`` hand to the tower (``accepts_precomputed_kwargs``),
        with each segmentation's longest segment as a host number (``max_seqlen``, ``max_window_seqlen``: what
        ``vision_attention``'s one call per block pads to). Nothing where the model has no such tower."""
        from transformers.exporters.utils import precompute_export_inputs

        owner = next((m for m in self._position_state if isinstance(getattr(m, "visual", None), torch.nn.Module)), None)
        layout = {}
        for modality in ("image", "video") if owner is not None else ():
            if inputs.get(f"{modality}_grid_thw") is None:
                continue
            tower = {"grid_thw": inputs[f"{modality}_grid_thw"]}
            precompute_export_inputs(owner.visual, tower)
            for bounds, longest in (("cu_seqlens", "max_seqlen"), ("cu_window_seqlens", "max_window_seqlen")):
                if tower.get(bounds) is not None and tower.get(longest) is None:
                    tower[longest] = int((tower[bounds][1:] - tower[bounds][:-1]).max())
            layout.update({f"{modality}_{name}": value for name, value in tower.items() if name != "grid_thw"})
        return layout

    def _models_rope_index(self, inputs: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The model's own M-RoPE positions of ``inputs`` (``get_rope_index``: the 3D position ids, and each row's
        offset of its positions past its length), given the processor outputs its signature names; None where the
        model has no such function or it asks for a value the processor did not give (its parameters differ
        between architectures and transformers releases)."""
        owner = next((m for m in self._position_state if callable(getattr(m, "get_rope_index", None))), None)
        if owner is None:
            return None
        parameters = inspect.signature(owner.get_rope_index).parameters.values()
        named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if any(p.default is p.empty and inputs.get(p.name) is None for p in named):
            return None
        return owner.get_rope_index(**{p.name: inputs[p.name] for p in named if inputs.get(p.name) is not None})

    @torch.inference_mode()
    def score_shared(self, prefill: Prefill, questions: Sequence[Sequence[ScoredSequence]],
                     rule: str = EVERY_SCORED_TOKEN) -> list[list[tuple[float, bool]]]:
        """Each question's ``sequences`` (one prompt, different answers) from one prefill of their common
        prefix; the questions' prefills in one forward pass, their candidates' continuations in batches of
        ``continuation_batch_size`` on the prefills' KV cache.

        ``prefill``: ``prefill_on_host(inputs, questions)``, its tensors on the model's device (``Prefill.moved``).
        """
        if prefill.tree is not None:
            return self._score_in_prefill(prefill, questions, rule)
        commons, prefixes = prefill.commons, prefill.prefixes
        self._clear_position_state()
        self.forward_tokens.count(prefill.inputs["input_ids"], prefill.padded_tokens)
        output = self.model(**prefill.inputs, use_cache=True, logits_to_keep=1)
        last_logits = output.logits[:, -1]  # each row's prediction of the first token after its prefix
        # Where each question's continuation starts: its prefix length, plus the M-RoPE offset of its positions.
        starts = prefill.starts
        if starts is None:
            starts = torch.tensor(prefixes, device=last_logits.device)
            deltas = next((m.rope_deltas for m in self._position_state if m.rope_deltas is not None), None)
            if deltas is not None:
                starts = starts + deltas.reshape(-1).to(starts.device)
        rows = [(question, common, sequence) for question, (sequences, common) in enumerate(zip(questions, commons))
                for sequence in sequences]
        padded = len(set(prefixes)) > 1
        chunks = [rows[i:i + self.continuation_batch_size] for i in range(0, len(rows), self.continuation_batch_size)]
        keyword = cache_keyword(self.model)
        scores = []
        for number, chunk in enumerate(chunks):
            owners = torch.tensor([question for question, _, _ in chunk], device=last_logits.device)
            suffixes = [torch.tensor(sequence.token_ids[common:sequence.stop]) for _, common, sequence in chunk]
            # Right padding: padded positions come after every real token, so causal attention keeps
            # them out of the real tokens' logits.
            batch = torch.nn.utils.rnn.pad_sequence(suffixes, batch_first=True, padding_value=0)
            cache = output[keyword] if number == len(chunks) - 1 else copy.deepcopy(output[keyword])
            cache.batch_select_indices(owners)
            continuation = {"input_ids": batch.to(last_logits.device),
                            "position_ids": starts[owners, None] + torch.arange(batch.shape[1], device=owners.device)}
            if padded:  # the cache holds left padding: masked out, as in the prefill
                continuation["attention_mask"] = torch.cat(
                    [prefill.inputs["attention_mask"][owners], torch.ones_like(continuation["input_ids"])], dim=1)
            self.forward_tokens.count(batch, batch.numel() - sum(len(suffix) for suffix in suffixes))
            logits = self.model(**continuation, use_cache=True, **{keyword: cache}).logits
            predicting = [torch.cat([last_logits[question, None], logits[row, :len(suffix) - 1]])
                          [sequence.first - common:sequence.stop - common]
                          for row, ((question, common, sequence), suffix) in enumerate(zip(chunk, suffixes))]
            scores.extend(answer_scores(predicting, [suffix[sequence.first - common:sequence.stop - common]
                                                     for (_, common, sequence), suffix in zip(chunk, suffixes)], rule))
        counts = itertools.accumulate(len(sequences) for sequences in questions)
        return [scores[stop - len(sequences):stop] for sequences, stop in zip(questions, counts)]

    def _score_in_prefill(self, prefill: Prefill, questions: Sequence[Sequence[ScoredSequence]],
                          rule: str) -> list[list[tuple[float, bool]]]:
        """Every candidate of the batch in one forward pass over the prefixes and the candidates under the tree's
        mask (``CandidateTree``); logits only from the prefixes' last token on."""
        tree = prefill.tree
        inputs = {**prefill.inputs, "attention_mask": tree_attention_mask(tree.segments, self.model.dtype)}
        self._clear_position_state()
        kept = inputs["input_ids"].shape[1] - tree.prefix_length + 1
        self.forward_tokens.count(inputs["input_ids"], prefill.padded_tokens)
        logits = self.model(**inputs, use_cache=False, logits_to_keep=kept).logits
        predicting = logits[tree.rows, tree.columns]
        scores = answer_scores(list(predicting.split(tree.lengths)), list(tree.targets.split(tree.lengths)), rule)
        counts = itertools.accumulate(len(sequences) for sequences in questions)
        return [scores[stop - len(sequences):stop] for sequences, stop in zip(questions, counts)]

    def _clear_position_state(self) -> None:
        for module in self._position_state:
            module.rope_deltas = None
