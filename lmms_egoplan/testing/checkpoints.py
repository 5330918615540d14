"""Deterministic builders for tiny random-weight multimodal checkpoints.

The evaluation code paths (model loading, processors, chat templates, placeholder expansion,
likelihood scoring, generation) must be exercised in tests without network access and without
multi-gigabyte downloads.  This module fabricates complete, self-consistent checkpoints -- model
weights, config, tokenizer, image/video processors and chat template -- that load with the stock
``transformers`` Auto classes from a local directory, exactly like a Hub checkpoint would.

Public API
----------
``ARCHITECTURES``            names accepted by the builders.
``BUILDER_VERSION``          bump when the produced checkpoints change; part of the cache key.
``build_tiny_checkpoint``    build + ``save_pretrained`` into a directory.
``tiny_checkpoint``          cached, race-safe wrapper around ``build_tiny_checkpoint``.

Everything is deterministic: the tokenizer is derived from an embedded corpus with a pure-Python
BPE trainer (no dependence on ``tokenizers`` trainer internals), and weights are initialised after
seeding torch, so the same arguments always yield byte-identical weights.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ARCHITECTURES: tuple[str, ...] = ("llava", "llava_onevision", "qwen2_vl", "idefics3", "qwen2_5_vl", "qwen3_vl",
                                   "internvl", "gemma3", "smolvlm", "llava_next_video", "mistral3", "llama")

# Part of the tiny_checkpoint cache key: bump whenever the checkpoint contents change.
BUILDER_VERSION = "2"

# Architectures whose processor also accepts ``videos=``.
VIDEO_ARCHITECTURES: tuple[str, ...] = ("llava_onevision", "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "internvl", "smolvlm",
                                        "llava_next_video")

# ---------------------------------------------------------------------------------------------
# Geometry of the default tiny vision towers.  Kept small so that a processor call + forward pass
# on CPU takes milliseconds, while still producing several placeholder tokens per image.
# ---------------------------------------------------------------------------------------------
_LLAVA_IMAGE = 32  # CLIP tower: 32px / patch 8 -> 16 patches (+CLS dropped) = 16 tokens / image
_LLAVA_PATCH = 8
_OV_IMAGE = 32  # SigLIP tower: 32px / patch 8 -> 16 tokens per crop
_OV_PATCH = 8
_OV_PINPOINTS = [[32, 32], [32, 64], [64, 32], [64, 64]]  # anyres grid, at most 2x2 crops
_QWEN_PATCH = 4  # 4px patches, 2x2 merge -> one token per 8x8 pixels
_QWEN_MERGE = 2
_QWEN_TEMPORAL = 2
_QWEN_MIN_PIXELS = 16 * 16
_QWEN_MAX_PIXELS = 32 * 32  # <= 16 tokens per image / per temporal patch of a video
_IDEFICS_TILE = 32  # SigLIP-style tower: 32px / patch 4 -> 64 patches, pixel-shuffle 2 -> 16 tokens
_IDEFICS_PATCH = 4
_IDEFICS_SCALE = 2
_IDEFICS_LONGEST_EDGE = 2 * _IDEFICS_TILE  # images are split into at most 2x2 tiles + a global view
_INTERNVL_TILE = 32  # InternViT-style tower: 32px tiles / patch 4, pixel shuffle 0.5 -> 16 tokens per tile
_INTERNVL_PATCH = 4
_GEMMA3_IMAGE = 32  # SigLIP tower: 32px / patch 4 -> 8x8 patches, pooled to 4x4 = 16 tokens per image
_GEMMA3_PATCH = 4
_GEMMA3_WINDOW = 64  # sliding-window layers' span, in tokens
_PIXTRAL_LONGEST_EDGE = 32  # Pixtral tower: native aspect ratio, at most 32px / patch 4, 2x2 merge -> 4x4 tokens
_PIXTRAL_PATCH = 4
_PIXTRAL_MERGE = 2

_DEFAULT_HIDDEN = 32
_DEFAULT_LAYERS = 2
_MAX_POSITIONS = 8192  # rotary everywhere, so long prompts cost nothing in parameters


# =============================================================================================
# Tokenizer
# =============================================================================================

# Small embedded corpus: only used to learn a few hundred merges so that common English words
# become multi-byte tokens (realistic sequence lengths).  Coverage of arbitrary text comes from the
# 256-byte base alphabet, not from this corpus.
_CORPUS = """
The person is in the kitchen and picks up the knife to cut the tomato on the board.
What is the next action the camera wearer should take to complete the task?
Answer with the option's letter from the given choices directly.
A. open the fridge B. wash the hands C. put the pan on the stove D. take the cup
Considering the progress shown in the video and my current observation in the last frame,
what action should I take next in order to make a cup of coffee, cook the rice, clean the table?
The user wants to know which step comes next. The assistant answers the question.
Please describe the image in detail. There is a man holding a bottle of water near the sink.
She opened the door, walked into the room, and turned on the light. They are playing in the garden.
Is the following answer correct? Yes or no. The correct answer is the first one.
You are a helpful assistant. You are an expert judge. Score the response from 0 to 10.
Question: where is the bowl? Answer: the bowl is on the table next to the plate and the spoon.
Task goal: prepare breakfast. Progress: took eggs, cracked eggs, mixed eggs. Next step: heat the pan.
image video frame frames time seconds first second third last left right up down hand hands
pick place put take open close cut wash stir pour add remove move turn hold use get make clean
1 2 3 4 5 6 7 8 9 10 100 2024 0.5 (a) (b) (c) (d) "quoted" 'single' - : ; , . ? ! /
"""

_NUM_MERGES = 320


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte->printable-unicode table used by byte-level BPE (all 256 bytes are covered)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


@functools.cache
def _train_bpe(num_merges: int) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]:
    """Tiny, fully deterministic BPE trainer (ties broken lexicographically).

    Written in Python instead of using ``tokenizers.trainers.BpeTrainer`` so the vocabulary can never
    drift with the installed ``tokenizers`` version (vocab ids are baked into saved weights).
    """
    from tokenizers import pre_tokenizers

    byte_map = _bytes_to_unicode()
    # Base alphabet: all 256 bytes, in byte order -> ids 0..255.
    vocab: dict[str, int] = {byte_map[b]: b for b in range(256)}
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    words: Counter[tuple[str, ...]] = Counter()
    for line in _CORPUS.strip().splitlines():
        for piece, _ in pre.pre_tokenize_str(line):
            words[tuple(piece)] += 1

    merges: list[tuple[str, str]] = []
    for _ in range(num_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for a, b in itertools.pairwise(word):
                pairs[(a, b)] += freq
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        merges.append(best)
        vocab[merged] = len(vocab)
        new_words: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += freq
        words = new_words
    # Immutable so the lru_cache'd result cannot be mutated by callers.
    return tuple(vocab.items()), tuple(merges)


# Per-architecture special tokens, modelled on the real checkpoints' tokenizers.
#   "special": tokens added as special (never split, skipped by decode(skip_special_tokens=True))
#   "named":   standard special-token attributes (bos/eos/pad/unk)
#   "extra":   model-specific named tokens exposed as tokenizer.<name> / tokenizer.<name>_id,
#              which processors consult (e.g. tokenizer.image_token).
_IDEFICS_ROW_COL = [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
_SPECIALS: dict[str, dict[str, Any]] = {
    "llama": {
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|finetune_right_pad_id|>",
        ],
        "named": {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "pad_token": "<|finetune_right_pad_id|>",
        },
        "extra": {},
        "stop": ["<|eot_id|>", "<|end_of_text|>"],
    },
    "llava": {
        "special": ["<unk>", "<s>", "</s>", "<pad>", "<image>"],
        "named": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "extra": {"image_token": "<image>"},
        "stop": ["</s>"],
    },
    "llava_onevision": {
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<video>"],
        "named": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "extra": {"image_token": "<image>", "video_token": "<video>"},
        "stop": ["<|im_end|>", "<|endoftext|>"],
    },
    "qwen2_vl": {
        "special": [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|object_ref_start|>",
            "<|object_ref_end|>",
            "<|box_start|>",
            "<|box_end|>",
            "<|quad_start|>",
            "<|quad_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
        ],
        "named": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "extra": {
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_bos_token": "<|vision_start|>",
            "vision_eos_token": "<|vision_end|>",
        },
        "stop": ["<|im_end|>", "<|endoftext|>"],
    },
    "idefics3": {
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|finetune_right_pad_id|>",
            "<end_of_utterance>",
            "<fake_token_around_image>",
            "<image>",
            "<global-img>",
            *_IDEFICS_ROW_COL,
        ],
        "named": {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<end_of_utterance>",
            "pad_token": "<|finetune_right_pad_id|>",
        },
        "extra": {"image_token": "<image>"},
        "stop": ["<end_of_utterance>", "<|end_of_text|>"],
    },
    "internvl": {  # InternVL3-hf: a Qwen2.5 tokenizer with <img>...</img> around <IMG_CONTEXT> tokens
        "special": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>"],
        "named": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "extra": {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>",
                  "video_token": "<video>"},
        "stop": ["<|im_end|>", "<|endoftext|>"],
    },
    "gemma3": {  # the template renders <start_of_image>; the processor expands it around <image_soft_token>s
        "special": ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                    "<end_of_image>", "<image_soft_token>"],
        "named": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "extra": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"},
        "stop": ["<end_of_turn>", "<eos>"],
    },
    "smolvlm": {  # SmolVLM2: Idefics3's image tokens, plus <video>; <|im_start|> is the BOS
        "special": ["<|im_start|>", "<|im_end|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>",
                    "<global-img>", "<video>", *_IDEFICS_ROW_COL],
        "named": {"bos_token": "<|im_start|>", "eos_token": "<end_of_utterance>", "pad_token": "<|im_end|>"},
        "extra": {"image_token": "<image>", "video_token": "<video>"},
        "stop": ["<end_of_utterance>"],
    },
    "llava_next_video": {
        "special": ["<unk>", "<s>", "</s>", "<pad>", "<image>", "<video>"],
        "named": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "extra": {"image_token": "<image>", "video_token": "<video>"},
        "stop": ["</s>"],
    },
    "mistral3": {  # Mistral-Small-3.1: Pixtral's [IMG] / [IMG_BREAK] / [IMG_END] image tokens
        "special": ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]",
                    "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]"],
        "named": {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "extra": {"image_token": "[IMG]"},
        "stop": ["</s>"],
    },
}
# Qwen2.5-VL and Qwen3-VL keep Qwen2-VL's vision tokens.
_SPECIALS["qwen2_5_vl"] = _SPECIALS["qwen3_vl"] = _SPECIALS["qwen2_vl"]

# ---------------------------------------------------------------------------------------------
# Chat templates.  Each mimics the real model's prompt format but is written so that
#   render([user, assistant(X)]) == render([user], add_generation_prompt=True) + X + END_OF_TURN
# holds exactly (likelihood scoring relies on it), i.e. the generation prompt is a strict prefix of
# the assistant turn and the assistant text is emitted verbatim.  ``content`` may be a string or a
# list of {"type": "image"|"video"|"text"} parts; parts are rendered in order.
# ---------------------------------------------------------------------------------------------

# Shared macro: renders a content list with per-arch placeholders for images/videos.
_RENDER_MACRO = (
    "{%- macro render_content(content, image_str, video_str) -%}"
    "{%- if content is string -%}{{ content }}"
    "{%- else -%}{%- for part in content -%}"
    "{%- if part['type'] == 'image' or part['type'] == 'image_url' -%}{{ image_str }}"
    "{%- elif part['type'] == 'video' -%}"
    "{%- if video_str is none -%}{{ raise_exception('This model does not accept video inputs.') }}{%- endif -%}"
    "{{ video_str }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{%- endmacro -%}"
)

# NOTE: HF renders templates with trim_blocks/lstrip_blocks and we use "{%-"/"-%}" freely, so every
# literal that contains whitespace is emitted through a string expression ({{ '...' }}).


def _vicuna_template(video_str: str) -> str:
    """LLaVA-1.5 / LLaVA-NeXT-Video (vicuna style): "<s>USER: <image>\\nQ ASSISTANT:A</s>";
    ``video_str``: the Jinja expression a video renders as (``none``: videos are refused)."""
    return (
        _RENDER_MACRO + "{{ bos_token }}"
        "{%- for message in messages -%}"
        "{%- if message['role'] == 'system' -%}{{ render_content(message['content'], '', none) + ' ' }}"
        "{%- elif message['role'] == 'user' -%}"
        "{{ 'USER: ' + render_content(message['content'], '<image>\\n', " + video_str + ") + ' ' }}"
        "{%- else -%}{{ 'ASSISTANT:' + render_content(message['content'], '', none) + eos_token }}"
        "{%- endif -%}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{ 'ASSISTANT:' }}{%- endif -%}"
    )


_LLAVA_TEMPLATE = _vicuna_template("none")

# LLaVA-OneVision (Qwen2 LM, ChatML): "<|im_start|>user\n<image>\nQ<|im_end|>\n<|im_start|>assistant\n".
_LLAVA_OV_TEMPLATE = (
    _RENDER_MACRO + "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{{ render_content(message['content'], '<image>\\n', '<video>\\n') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Qwen2-VL: the official template (default system prompt, vision_start/pad/end triplets).
_QWEN2_VL_TEMPLATE = (
    _RENDER_MACRO + "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{{ render_content(message['content'], '<|vision_start|><|image_pad|><|vision_end|>', "
    "'<|vision_start|><|video_pad|><|vision_end|>') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Idefics3: "<|begin_of_text|>User:<image>Q<end_of_utterance>\nAssistant:A<end_of_utterance>\n"
# (like the real template, a space follows "User:" only when the turn starts with text).
_IDEFICS3_TEMPLATE = (
    _RENDER_MACRO + "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ (message['role'] | capitalize) + ':' }}"
    "{%- if message['role'] != 'assistant' and (message['content'] is string or "
    "(message['content'] | length > 0 and message['content'][0]['type'] == 'text')) -%}{{ ' ' }}{%- endif -%}"
    "{{ render_content(message['content'], '<image>', none) + '<end_of_utterance>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)

# Qwen3-VL-Instruct: ChatML, no default system prompt; each frame of a video gets its own
# vision_start/end pair from the processor (with its timestamp).
_QWEN3_VL_TEMPLATE = (
    _RENDER_MACRO + "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{{ render_content(message['content'], '<|vision_start|><|image_pad|><|vision_end|>', "
    "'<|vision_start|><|video_pad|><|vision_end|>') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# InternVL3-hf: ChatML (its long default system prompt left out), "<IMG_CONTEXT>\n" per image.
_INTERNVL_TEMPLATE = (
    _RENDER_MACRO + "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{{ render_content(message['content'], '<IMG_CONTEXT>\\n', '<video>\\n') + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

# Gemma 3: the system prompt opens the first user turn, the assistant's role is "model".
_GEMMA3_TEMPLATE = (
    _RENDER_MACRO + "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = render_content(messages[0]['content'], '', none) + '\\n\\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n' }}"
    "{{ (first_user_prefix if loop.first else '') + render_content(message['content'], '<start_of_image>', none) }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

# SmolVLM2: Idefics3's "User:<image>Q<end_of_utterance>" turns after <|im_start|>, "<video>" per video.
_SMOLVLM_TEMPLATE = (
    _RENDER_MACRO + "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ (message['role'] | capitalize) + ':' }}"
    "{%- if message['role'] != 'assistant' and (message['content'] is string or "
    "(message['content'] | length > 0 and message['content'][0]['type'] == 'text')) -%}{{ ' ' }}{%- endif -%}"
    "{{ render_content(message['content'], '<image>', '<video>') + '<end_of_utterance>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)

_LLAVA_NEXT_VIDEO_TEMPLATE = _vicuna_template("'<video>\\n'")

# Mistral-Small-3.1: "<s>[SYSTEM_PROMPT]S[/SYSTEM_PROMPT][INST][IMG]Q[/INST]A</s>" (its long default
# system prompt left out); like the real one, it has no generation prompt: the answer follows [/INST].
_MISTRAL3_TEMPLATE = (
    _RENDER_MACRO + "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{{ '[SYSTEM_PROMPT]' + render_content(message['content'], '', none) + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' -%}{{ '[INST]' + render_content(message['content'], '[IMG]', none) + '[/INST]' }}"
    "{%- else -%}{{ render_content(message['content'], '', none) + eos_token }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

# Llama-3 instruct style, text only (used as an offline LLM judge).
_LLAMA_TEMPLATE = (
    _RENDER_MACRO + "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ render_content(message['content'], '', none) + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"
)

CHAT_TEMPLATES: dict[str, str] = {
    "llava": _LLAVA_TEMPLATE,
    "llava_onevision": _LLAVA_OV_TEMPLATE,
    "qwen2_vl": _QWEN2_VL_TEMPLATE,
    "idefics3": _IDEFICS3_TEMPLATE,
    "qwen2_5_vl": _QWEN2_VL_TEMPLATE,  # Qwen2.5-VL publishes Qwen2-VL's template
    "qwen3_vl": _QWEN3_VL_TEMPLATE,
    "internvl": _INTERNVL_TEMPLATE,
    "gemma3": _GEMMA3_TEMPLATE,
    "smolvlm": _SMOLVLM_TEMPLATE,
    "llava_next_video": _LLAVA_NEXT_VIDEO_TEMPLATE,
    "mistral3": _MISTRAL3_TEMPLATE,
    "llama": _LLAMA_TEMPLATE,
}

# What the template appends after the assistant's text (the "end of turn" marker).
END_OF_TURN: dict[str, str] = {
    "llava": "</s>",
    "llava_onevision": "<|im_end|>\n",
    "qwen2_vl": "<|im_end|>\n",
    "idefics3": "<end_of_utterance>\n",
    "qwen2_5_vl": "<|im_end|>\n",
    "qwen3_vl": "<|im_end|>\n",
    "internvl": "<|im_end|>\n",
    "gemma3": "<end_of_turn>\n",
    "smolvlm": "<end_of_utterance>\n",
    "llava_next_video": "</s>",
    "mistral3": "</s>",
    "llama": "<|eot_id|>",
}


def build_tokenizer(arch: str):
    """Byte-level BPE ``PreTrainedTokenizerFast`` with ``arch``'s special tokens and chat template.

    No BOS/EOS is added automatically by ``tokenizer(text)``; templates that need a BOS emit it
    themselves (as Llama-3 templates do), which keeps "tokenize(prefix) + tokenize(rest)" aligned
    with "tokenize(prefix + rest)" at template boundaries.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    _check_arch(arch)
    spec = _SPECIALS[arch]
    vocab_items, merges = _train_bpe(_NUM_MERGES)
    backend = Tokenizer(models.BPE(vocab=dict(vocab_items), merges=list(merges), fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec["special"]])

    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        chat_template=CHAT_TEMPLATES[arch],
        extra_special_tokens=dict(spec["extra"]) or None,
        clean_up_tokenization_spaces=False,
        model_max_length=_MAX_POSITIONS,
        padding_side="left",  # decoder-only generation
        **spec["named"],
    )
    return tok


# =============================================================================================
# Models / processors
# =============================================================================================


def _check_arch(arch: str) -> None:
    if arch not in ARCHITECTURES:
        raise ValueError(f"Unknown architecture {arch!r}; expected one of {ARCHITECTURES}")


def _heads(hidden: int) -> tuple[int, int]:
    """(num_attention_heads, num_key_value_heads): head_dim 8 for tiny models, 64 for big ones."""
    head_dim = 64 if hidden >= 256 else 8
    if hidden % head_dim:
        raise ValueError(f"hidden_size must be a multiple of {head_dim}, got {hidden}")
    n = hidden // head_dim
    return n, (n // 2 if n % 2 == 0 else n)  # GQA like the real models


def _text_kwargs(tok, hidden: int, layers: int) -> dict[str, Any]:
    heads, kv = _heads(hidden)
    return {
        "vocab_size": len(tok),  # exactly covers every token id incl. added specials
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden if hidden < 256 else int(2.75 * hidden),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "max_position_embeddings": _MAX_POSITIONS,
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "tie_word_embeddings": False,
    }


def _vision_dims(hidden: int | None, layers: int | None) -> tuple[int, int]:
    """Vision tower size: fixed tiny by default; grows moderately with an explicit text size."""
    v_hidden = 32 if hidden is None else max(32, min(hidden // 2, 512))
    v_hidden -= v_hidden % 32  # divisible by 4 heads with head_dim multiple of 8
    v_layers = 2 if layers is None else max(1, layers // 2)
    return v_hidden, v_layers


def _vision_tower(hidden: int, layers: int, image_size: int, patch_size: int, **extra: Any) -> dict:
    """A ViT-style vision tower config: 4 heads, MLP twice the width (plus architecture extras)."""
    return {"hidden_size": hidden, "intermediate_size": 2 * hidden, "num_hidden_layers": layers,
            "num_attention_heads": 4, "image_size": image_size, "patch_size": patch_size, **extra}


def _build_llava(tok, hidden, layers, v_hidden, v_layers):
    from transformers import CLIPImageProcessor, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    num_tokens = (_LLAVA_IMAGE // _LLAVA_PATCH) ** 2  # CLS dropped by the "default" strategy
    config = LlavaConfig(
        vision_config=_vision_tower(v_hidden, v_layers, _LLAVA_IMAGE, _LLAVA_PATCH, model_type="clip_vision_model",
                                    projection_dim=v_hidden),
        text_config={"model_type": "llama", **_text_kwargs(tok, hidden, layers)},
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        image_seq_length=num_tokens,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": _LLAVA_IMAGE}, crop_size={"height": _LLAVA_IMAGE, "width": _LLAVA_IMAGE}
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        patch_size=_LLAVA_PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token
        chat_template=CHAT_TEMPLATES["llava"],
    )
    return LlavaForConditionalGeneration, config, processor


def _build_llava_onevision(tok, hidden, layers, v_hidden, v_layers):
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    config = LlavaOnevisionConfig(
        vision_config=_vision_tower(v_hidden, v_layers, _OV_IMAGE, _OV_PATCH, model_type="siglip_vision_model",
                                    vision_use_head=False),
        text_config={"model_type": "qwen2", **_text_kwargs(tok, hidden, layers)},
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        video_token_index=tok.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="full",
        vision_feature_layer=-1,
        image_grid_pinpoints=_OV_PINPOINTS,
        vision_aspect_ratio="anyres_max_9",
    )
    size = {"height": _OV_IMAGE, "width": _OV_IMAGE}
    image_processor = LlavaOnevisionImageProcessor(size=size, image_grid_pinpoints=_OV_PINPOINTS)
    video_processor = LlavaOnevisionVideoProcessor(size=size)
    processor = LlavaOnevisionProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=video_processor,
        num_image_tokens=(_OV_IMAGE // _OV_PATCH) ** 2,
        vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9",
        chat_template=CHAT_TEMPLATES["llava_onevision"],
    )
    return LlavaOnevisionForConditionalGeneration, config, processor


def _mrope_text_kwargs(tok, hidden: int, layers: int, rope_theta: float, **rope: Any) -> dict[str, Any]:
    """Text config of a Qwen-VL language model: M-RoPE splits the rotary half-dim into (temporal,
    height, width) sections, which must sum to half the head dim."""
    text = _text_kwargs(tok, hidden, layers)
    heads, _ = _heads(hidden)
    half = (hidden // heads) // 2
    mrope = [half - 2 * (half // 4), half // 4, half // 4]
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": rope_theta, "mrope_section": mrope, **rope}
    return text


def _qwen_vl_parts(tok, arch: str, processor_cls, video_processor_cls, vision: dict[str, Any]):
    """What the Qwen-VL generations share: vision token ids, patch geometry, processors."""
    token_ids = {f"{name}_token_id": tok.convert_tokens_to_ids(f"<|{token}|>") for name, token in
                 (("image", "image_pad"), ("video", "video_pad"), ("vision_start", "vision_start"),
                  ("vision_end", "vision_end"))}
    vision = {**vision, "patch_size": _QWEN_PATCH, "spatial_merge_size": _QWEN_MERGE, "temporal_patch_size": _QWEN_TEMPORAL}
    geometry = {"patch_size": _QWEN_PATCH, "merge_size": _QWEN_MERGE, "temporal_patch_size": _QWEN_TEMPORAL}
    size = {"shortest_edge": _QWEN_MIN_PIXELS, "longest_edge": _QWEN_MAX_PIXELS}
    from transformers import Qwen2VLImageProcessor

    image_processor = Qwen2VLImageProcessor(size=size, **geometry)
    # cap_pixels_per_frame=True: reference (qwen-vl-utils) behaviour, and silences a FutureWarning.
    video_processor = video_processor_cls(size=size, cap_pixels_per_frame=True, min_frames=2, **geometry)
    processor = processor_cls(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                              chat_template=CHAT_TEMPLATES[arch])
    return token_ids, vision, processor


def _build_qwen2_vl(tok, hidden, layers, v_hidden, v_layers):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLProcessor, Qwen2VLVideoProcessor

    token_ids, vision, processor = _qwen_vl_parts(
        tok, "qwen2_vl", Qwen2VLProcessor, Qwen2VLVideoProcessor,
        {"depth": v_layers, "embed_dim": v_hidden, "hidden_size": hidden,  # merger output dim == LM hidden size
         "mlp_ratio": 2, "num_heads": 4})
    config = Qwen2VLConfig(text_config=_mrope_text_kwargs(tok, hidden, layers, 1_000_000.0), vision_config=vision,
                           **token_ids)
    return Qwen2VLForConditionalGeneration, config, processor


def _build_qwen2_5_vl(tok, hidden, layers, v_hidden, v_layers):
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLVideoProcessor,
    )

    token_ids, vision, processor = _qwen_vl_parts(
        tok, "qwen2_5_vl", Qwen2_5_VLProcessor, Qwen2VLVideoProcessor,
        # Windowed attention over 2x2 merged tokens in every block but the last, as the real model
        # keeps every 8th block global.
        {"depth": v_layers, "hidden_size": v_hidden, "intermediate_size": 2 * v_hidden, "num_heads": 4,
         "out_hidden_size": hidden, "window_size": 2 * _QWEN_PATCH * _QWEN_MERGE, "fullatt_block_indexes": [v_layers - 1],
         "tokens_per_second": 2})
    config = Qwen2_5_VLConfig(text_config=_mrope_text_kwargs(tok, hidden, layers, 1_000_000.0), vision_config=vision,
                              **token_ids)
    return Qwen2_5_VLForConditionalGeneration, config, processor


def _build_qwen3_vl(tok, hidden, layers, v_hidden, v_layers):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor

    token_ids, vision, processor = _qwen_vl_parts(
        tok, "qwen3_vl", Qwen3VLProcessor, Qwen3VLVideoProcessor,
        # Learned position embeddings on an 8x8 grid (interpolated to each image's); the first
        # block's features are also added to the first LM layers ("deepstack").
        {"depth": v_layers, "hidden_size": v_hidden, "intermediate_size": 2 * v_hidden, "num_heads": 4,
         "out_hidden_size": hidden, "num_position_embeddings": 64, "deepstack_visual_indexes": [0]})
    text = _mrope_text_kwargs(tok, hidden, layers, 5_000_000.0, mrope_interleaved=True)
    text["head_dim"] = hidden // _heads(hidden)[0]
    config = Qwen3VLConfig(text_config=text, vision_config=vision, **token_ids)
    return Qwen3VLForConditionalGeneration, config, processor


def _build_idefics3(tok, hidden, layers, v_hidden, v_layers):
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor, Idefics3Processor

    image_seq_len = (_IDEFICS_TILE // _IDEFICS_PATCH) ** 2 // _IDEFICS_SCALE**2
    config = Idefics3Config(
        vision_config=_vision_tower(v_hidden, v_layers, _IDEFICS_TILE, _IDEFICS_PATCH),
        text_config={"model_type": "llama", **_text_kwargs(tok, hidden, layers)},
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=_IDEFICS_SCALE,
        pad_token_id=tok.pad_token_id,
    )
    image_processor = Idefics3ImageProcessor(
        size={"longest_edge": _IDEFICS_LONGEST_EDGE},
        max_image_size={"longest_edge": _IDEFICS_TILE},
        do_image_splitting=True,
    )
    processor = Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tok,
        image_seq_len=image_seq_len,
        chat_template=CHAT_TEMPLATES["idefics3"],
    )
    return Idefics3ForConditionalGeneration, config, processor


def _build_internvl(tok, hidden, layers, v_hidden, v_layers):
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    # 32px tiles / patch 4 = 8x8 patches, pixel-shuffled (downsample 0.5) to 16 tokens per tile.
    image_seq_length = (_INTERNVL_TILE // _INTERNVL_PATCH) ** 2 // 4
    config = InternVLConfig(
        vision_config=_vision_tower(v_hidden, v_layers, [_INTERNVL_TILE] * 2, [_INTERNVL_PATCH] * 2),
        text_config={"model_type": "qwen2", **_text_kwargs(tok, hidden, layers)},
        image_token_id=tok.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=image_seq_length,
        downsample_ratio=0.5,
    )
    size = {"height": _INTERNVL_TILE, "width": _INTERNVL_TILE}
    # Like InternVL3: an image is cut into tiles of its aspect ratio (here at most 2) plus a thumbnail.
    image_processor = GotOcr2ImageProcessor(size=size, crop_to_patches=True, min_patches=1, max_patches=2)
    processor = InternVLProcessor(image_processor=image_processor, tokenizer=tok,
                                  video_processor=InternVLVideoProcessor(size=size),
                                  image_seq_length=image_seq_length, chat_template=CHAT_TEMPLATES["internvl"])
    return InternVLForConditionalGeneration, config, processor


def _build_gemma3(tok, hidden, layers, v_hidden, v_layers):
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, Gemma3ImageProcessor, Gemma3Processor

    text = _text_kwargs(tok, hidden, layers)
    head_dim = hidden // _heads(hidden)[0]
    # Local (sliding-window) layers before a global one, as in Gemma 3's 5:1 pattern; the window is
    # shorter than a prompt with a few images, so cached continuations cross it.
    text.update(model_type="gemma3_text", head_dim=head_dim, query_pre_attn_scalar=head_dim,
                sliding_window=_GEMMA3_WINDOW, layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"])
    image_tokens = (_GEMMA3_IMAGE // _GEMMA3_PATCH) ** 2 // 4  # average-pooled 2x2
    config = Gemma3Config(
        vision_config=_vision_tower(v_hidden, v_layers, _GEMMA3_IMAGE, _GEMMA3_PATCH, model_type="siglip_vision_model",
                                    vision_use_head=False),
        text_config=text,
        mm_tokens_per_image=image_tokens,
        boi_token_index=tok.convert_tokens_to_ids("<start_of_image>"),
        eoi_token_index=tok.convert_tokens_to_ids("<end_of_image>"),
        image_token_index=tok.convert_tokens_to_ids("<image_soft_token>"),
    )
    image_processor = Gemma3ImageProcessor(size={"height": _GEMMA3_IMAGE, "width": _GEMMA3_IMAGE})
    processor = Gemma3Processor(image_processor=image_processor, tokenizer=tok, image_seq_length=image_tokens,
                                chat_template=CHAT_TEMPLATES["gemma3"])
    return Gemma3ForConditionalGeneration, config, processor


def _build_smolvlm(tok, hidden, layers, v_hidden, v_layers):
    from transformers import (
        SmolVLMConfig,
        SmolVLMForConditionalGeneration,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    # Idefics3's geometry: 32px tiles of 16 tokens, at most 2x2 tiles plus a global view; video
    # frames are single 32px views.
    image_seq_len = (_IDEFICS_TILE // _IDEFICS_PATCH) ** 2 // _IDEFICS_SCALE**2
    config = SmolVLMConfig(
        vision_config=_vision_tower(v_hidden, v_layers, _IDEFICS_TILE, _IDEFICS_PATCH),
        text_config={"model_type": "llama", **_text_kwargs(tok, hidden, layers)},
        image_token_id=tok.convert_tokens_to_ids("<image>"),
        scale_factor=_IDEFICS_SCALE,
        pad_token_id=tok.pad_token_id,
    )
    tile = {"longest_edge": _IDEFICS_TILE}
    image_processor = SmolVLMImageProcessor(size={"longest_edge": _IDEFICS_LONGEST_EDGE}, max_image_size=tile,
                                            do_image_splitting=True)
    video_processor = SmolVLMVideoProcessor(size=tile, max_image_size=tile)
    processor = SmolVLMProcessor(image_processor=image_processor, tokenizer=tok, video_processor=video_processor,
                                 image_seq_len=image_seq_len, chat_template=CHAT_TEMPLATES["smolvlm"])
    return SmolVLMForConditionalGeneration, config, processor


def _build_llava_next_video(tok, hidden, layers, v_hidden, v_layers):
    from transformers import (
        LlavaNextImageProcessor,
        LlavaNextVideoConfig,
        LlavaNextVideoForConditionalGeneration,
        LlavaNextVideoProcessor,
        LlavaNextVideoVideoProcessor,
    )

    patches = (_LLAVA_IMAGE // _LLAVA_PATCH) ** 2
    config = LlavaNextVideoConfig(
        vision_config=_vision_tower(v_hidden, v_layers, _LLAVA_IMAGE, _LLAVA_PATCH, model_type="clip_vision_model",
                                    projection_dim=v_hidden),
        text_config={"model_type": "llama", **_text_kwargs(tok, hidden, layers)},
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        video_token_index=tok.convert_tokens_to_ids("<video>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
        image_grid_pinpoints=_OV_PINPOINTS,  # anyres: a base view plus up to 2x2 crops
        spatial_pool_stride=2,  # a video frame's 4x4 patches are pooled to 2x2 tokens
        image_seq_length=patches,
        video_seq_length=patches // 4,
    )
    size, crop = {"shortest_edge": _LLAVA_IMAGE}, {"height": _LLAVA_IMAGE, "width": _LLAVA_IMAGE}
    processor = LlavaNextVideoProcessor(
        video_processor=LlavaNextVideoVideoProcessor(size=size, crop_size=crop),
        image_processor=LlavaNextImageProcessor(size=size, crop_size=crop, image_grid_pinpoints=_OV_PINPOINTS),
        tokenizer=tok,
        patch_size=_LLAVA_PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's CLS token
        chat_template=CHAT_TEMPLATES["llava_next_video"],
    )
    return LlavaNextVideoForConditionalGeneration, config, processor


def _build_mistral3(tok, hidden, layers, v_hidden, v_layers):
    from transformers import Mistral3Config, Mistral3ForConditionalGeneration, PixtralImageProcessor, PixtralProcessor

    config = Mistral3Config(
        vision_config=_vision_tower(v_hidden, v_layers, _PIXTRAL_LONGEST_EDGE, _PIXTRAL_PATCH, model_type="pixtral",
                                    head_dim=v_hidden // 4),
        text_config={"model_type": "mistral", **_text_kwargs(tok, hidden, layers)},
        image_token_index=tok.convert_tokens_to_ids("[IMG]"),
        spatial_merge_size=_PIXTRAL_MERGE,
    )
    # Pixtral keeps each image's aspect ratio: one [IMG] per 8x8 pixels (2x2 merged patches), an
    # [IMG_BREAK] after each row and [IMG_END] last.
    image_processor = PixtralImageProcessor(size={"longest_edge": _PIXTRAL_LONGEST_EDGE}, patch_size=_PIXTRAL_PATCH)
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tok, patch_size=_PIXTRAL_PATCH,
                                 spatial_merge_size=_PIXTRAL_MERGE, chat_template=CHAT_TEMPLATES["mistral3"])
    return Mistral3ForConditionalGeneration, config, processor


def _build_llama(tok, hidden, layers, v_hidden, v_layers):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM, LlamaConfig(**_text_kwargs(tok, hidden, layers)), None


_BUILDERS = {
    "llava": _build_llava,
    "llava_onevision": _build_llava_onevision,
    "qwen2_vl": _build_qwen2_vl,
    "idefics3": _build_idefics3,
    "qwen2_5_vl": _build_qwen2_5_vl,
    "qwen3_vl": _build_qwen3_vl,
    "internvl": _build_internvl,
    "gemma3": _build_gemma3,
    "smolvlm": _build_smolvlm,
    "llava_next_video": _build_llava_next_video,
    "mistral3": _build_mistral3,
    "llama": _build_llama,
}

_DTYPES = {"float32", "float16", "bfloat16"}


def build_tiny_checkpoint(
    arch: str,
    out_dir: str | os.PathLike,
    *,
    seed: int = 0,
    hidden_size: int | None = None,
    num_layers: int | None = None,
    dtype: str = "float32",
) -> Path:
    """Build a random-weight ``arch`` checkpoint and ``save_pretrained`` it into ``out_dir``.

    The directory then loads offline with ``AutoProcessor`` + ``AutoModelForImageTextToText``
    (multimodal archs) or ``AutoTokenizer`` + ``AutoModelForCausalLM`` (``"llama"``).
    ``hidden_size``/``num_layers`` size the language model (the vision tower scales to roughly
    half of it); the defaults give a ~1 MB model that runs a forward pass in milliseconds.
    """
    import torch
    from transformers import GenerationConfig

    _check_arch(arch)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    hidden = _DEFAULT_HIDDEN if hidden_size is None else int(hidden_size)
    layers = _DEFAULT_LAYERS if num_layers is None else int(num_layers)
    v_hidden, v_layers = _vision_dims(hidden_size, num_layers)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer(arch)
    model_cls, config, processor = _BUILDERS[arch](tok, hidden, layers, v_hidden, v_layers)

    # Seed immediately before init so weights depend only on (arch, sizes, seed); fork_rng keeps
    # the caller's global RNG state untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.eval()
    model.to(getattr(torch, dtype))
    stop_ids = [tok.convert_tokens_to_ids(t) for t in _SPECIALS[arch]["stop"]]
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=stop_ids if len(stop_ids) > 1 else stop_ids[0],
        pad_token_id=tok.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out)
    if processor is None:
        tok.save_pretrained(out)
    else:
        processor.save_pretrained(out)
    return out


# =============================================================================================
# Cache
# =============================================================================================


def _cache_key(arch: str, kwargs: dict[str, Any]) -> str:
    import transformers

    payload = json.dumps(
        {
            "arch": arch,
            "kwargs": kwargs,
            "builder_version": BUILDER_VERSION,
            # Serialization formats change across transformers releases.
            "transformers": transformers.__version__,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def tiny_checkpoint(arch: str, cache_root: str | os.PathLike, **kwargs: Any) -> Path:
    """Return a cached ``build_tiny_checkpoint(arch, ..., **kwargs)`` directory under ``cache_root``.

    Builds only if missing.  The build goes into a private temp dir that is atomically renamed into
    place, so concurrent callers (e.g. pytest-xdist workers) never observe a half-written checkpoint;
    if another process wins the race, its result is used and ours is discarded.
    """
    _check_arch(arch)
    root = Path(cache_root)
    final = root / f"{arch}-{_cache_key(arch, kwargs)}"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        build_tiny_checkpoint(arch, tmp, **kwargs)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():  # a real failure, not a lost race
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


__all__ = [
    "ARCHITECTURES",
    "BUILDER_VERSION",
    "CHAT_TEMPLATES",
    "END_OF_TURN",
    "VIDEO_ARCHITECTURES",
    "build_tiny_checkpoint",
    "build_tokenizer",
    "tiny_checkpoint",
]
