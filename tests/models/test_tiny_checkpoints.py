"""Tests for lmms_egoplan.demo.kit.checkpoints: tiny offline checkpoints must behave like real ones."""

from __future__ import annotations

import os

# Belt and braces: every from_pretrained below also passes local_files_only=True, so nothing can
# reach the Hub even if huggingface_hub was imported (and read its env) before this module.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
)

from lmms_egoplan.demo.kit import checkpoints as ck
from lmms_egoplan.demo.kit.checkpoints import (
    ARCHITECTURES,
    BOS_ADDING,
    BUILDER_VERSION,
    build_tiny_checkpoint,
    tiny_checkpoint,
)

MULTIMODAL = [a for a in ARCHITECTURES if a != "llama"]
VIDEO = [a for a in ARCHITECTURES if a in ck.VIDEO_ARCHITECTURES]
# The architectures whose tiny templates take the llava-hf form (no BOS, lists of parts only).
LLAVA_HF = ("llava", "llava_next_video")

# The model's image token: the processor expands each image into a run of it.
IMAGE_TOKEN = {
    "llava": "<image>",
    "llava_onevision": "<image>",
    "qwen2_vl": "<|image_pad|>",
    "idefics3": "<image>",
    "qwen2_5_vl": "<|image_pad|>",
    "qwen3_vl": "<|image_pad|>",
    "internvl": "<IMG_CONTEXT>",
    "gemma3": "<image_soft_token>",
    "smolvlm": "<image>",
    "llava_next_video": "<image>",
    "mistral3": "[IMG]",
}
# What the chat template renders per image, where it is not the image token itself.
IMAGE_PLACEHOLDER = {**IMAGE_TOKEN, "gemma3": "<start_of_image>"}
VIDEO_TOKEN = {"llava_onevision": "<video>", "qwen2_vl": "<|video_pad|>", "qwen2_5_vl": "<|video_pad|>",
               "qwen3_vl": "<|video_pad|>", "internvl": "<video>", "smolvlm": "<video>", "llava_next_video": "<video>"}
# Where a processor's video goes: its own input (a video token), or into the images' pixel_values
# (InternVL and SmolVLM expand a video into image tokens, one image per frame).
VIDEO_AS_FRAMES = ("internvl", "smolvlm")


def _images(n: int = 2) -> list[Image.Image]:
    rng = np.random.default_rng(123)
    # Different sizes/aspect ratios exercise resizing, anyres grids and image splitting.
    shapes = [(40, 50), (64, 30), (33, 33)]
    return [Image.fromarray(rng.integers(0, 256, (*shapes[i % 3], 3), dtype=np.uint8)) for i in range(n)]


def _frames(n: int = 8) -> list[Image.Image]:
    rng = np.random.default_rng(7)
    return [Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)) for _ in range(n)]


@pytest.fixture(scope="module")
def ckpt_dirs(tmp_path_factory) -> dict[str, os.PathLike]:
    root = tmp_path_factory.mktemp("tiny_ckpts")
    return {arch: build_tiny_checkpoint(arch, root / arch) for arch in ARCHITECTURES}


@pytest.fixture(scope="module")
def loaded(ckpt_dirs):
    """arch -> (processor_or_tokenizer, model), loaded through the Auto classes only."""
    out = {}
    for arch, path in ckpt_dirs.items():
        if arch == "llama":
            proc = AutoTokenizer.from_pretrained(path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        else:
            proc = AutoProcessor.from_pretrained(path, local_files_only=True)
            model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
        out[arch] = (proc, model.eval())
    return out


def _forward_and_generate(model, inputs, vocab_size: int) -> None:
    with torch.no_grad():
        out = model(**inputs)
    assert out.logits.shape[:2] == inputs["input_ids"].shape
    assert out.logits.shape[-1] == vocab_size
    assert torch.isfinite(out.logits).all()
    gen = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    n_new = gen.shape[1] - inputs["input_ids"].shape[1]
    assert 1 <= n_new <= 3
    assert torch.equal(gen[:, : inputs["input_ids"].shape[1]], inputs["input_ids"])
    assert int(gen.max()) < vocab_size


# ------------------------------------------------------------------------------------------------
# Loading, processing, forward, generate
# ------------------------------------------------------------------------------------------------


def test_saved_files(ckpt_dirs):
    for arch, path in ckpt_dirs.items():
        names = set(os.listdir(path))
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
        assert "chat_template.jinja" in names
        if arch != "llama":
            assert "processor_config.json" in names


def test_the_text_models_attend_as_the_real_checkpoints_where_that_decides_the_scoring_path(loaded):
    """Which likelihood path a model takes (``candidates_in_prefill_unsupported``) follows its attention: the tiny
    Mistral 3 has no sliding window, as Mistral3Config's own text config (Mistral Small 3.1's) has none, so it takes
    the tree mask as the real ones do; the tiny Gemma 3 has its sliding-window layers (a short window: prompts outrun
    it) and keeps the continuations."""
    from transformers import Mistral3Config

    from lmms_egoplan.models.likelihood import candidates_in_prefill_unsupported

    mistral3 = loaded["mistral3"][1]
    assert Mistral3Config().text_config.sliding_window is None
    assert mistral3.config.text_config.sliding_window is None
    assert candidates_in_prefill_unsupported(mistral3) is None
    assert "sliding-window" in candidates_in_prefill_unsupported(loaded["gemma3"][1])


@pytest.mark.parametrize("arch", MULTIMODAL)
def test_images_forward_generate(arch, loaded):
    proc, model = loaded[arch]
    tok = proc.tokenizer
    vocab = model.config.get_text_config().vocab_size
    assert vocab == len(tok)  # every token id (incl. added specials) has an embedding row
    assert model.config.image_token_id == tok.convert_tokens_to_ids(IMAGE_TOKEN[arch])

    messages = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "What should I do next?"}],
        }
    ]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True)
    assert prompt.count(IMAGE_PLACEHOLDER[arch]) == 2
    inputs = proc(text=prompt, images=_images(2), return_tensors="pt")

    n_img_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    if arch in ("llava", "gemma3"):
        assert n_img_tokens == 2 * 16  # (32/8)^2 patches, CLS dropped; Gemma 3 pools 8x8 patches to 4x4
    elif arch in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        assert n_img_tokens == int(inputs["image_grid_thw"].prod(-1).sum()) // 4
        assert n_img_tokens <= 2 * 16  # max_pixels caps each image at 32x32 px
    elif arch in ("idefics3", "smolvlm"):
        n_tiles = int(inputs["pixel_attention_mask"].flatten(2).any(-1).sum())
        assert n_img_tokens == 16 * n_tiles
    elif arch == "internvl":
        assert n_img_tokens == 16 * inputs["pixel_values"].shape[0]  # 16 per tile (thumbnail included)
    elif arch == "mistral3":
        assert n_img_tokens == int((inputs["image_sizes"] // 8).prod(-1).sum())  # one per 8x8 px, native aspect
    else:
        assert n_img_tokens > 2 * 16
    _forward_and_generate(model, inputs, vocab)


@pytest.mark.parametrize("arch", VIDEO)
@pytest.mark.parametrize("as_numpy", [False, True], ids=["pil_frames", "numpy"])
def test_video_forward_generate(arch, as_numpy, loaded):
    proc, model = loaded[arch]
    vocab = model.config.get_text_config().vocab_size
    frames = _frames(8)
    video = np.stack([np.asarray(f) for f in frames]) if as_numpy else frames
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Next step?"}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True)
    inputs = proc(text=prompt, videos=[video], do_sample_frames=False, return_tensors="pt")
    if arch in VIDEO_AS_FRAMES:
        assert int((inputs["input_ids"] == model.config.image_token_id).sum()) == 8 * 16
        _forward_and_generate(model, inputs, vocab)
        return
    assert "pixel_values_videos" in inputs
    n_vid_tokens = int((inputs["input_ids"] == model.config.video_token_id).sum())
    if arch in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        assert inputs["video_grid_thw"].tolist()[0][0] == 4  # 8 frames / temporal patch 2
        assert n_vid_tokens == int(inputs["video_grid_thw"].prod(-1).sum()) // 4
    elif arch == "llava_next_video":
        assert n_vid_tokens == 8 * 2 * 2  # 4x4 patches pooled to 2x2 per frame
    else:
        assert n_vid_tokens == 8 * 2 * 2 + 1  # 4x4 patches pooled to 2x2 per frame + newline
    _forward_and_generate(model, inputs, vocab)


# SmolVLM's video processor writes the images' pixel_values: one prompt cannot hold both (the
# backend sends such a request's videos as frames).
@pytest.mark.parametrize("arch", [a for a in VIDEO if a != "smolvlm"])
def test_images_and_video_together(arch, loaded):
    proc, model = loaded[arch]
    messages = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "Which is later?"}],
        }
    ]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True)
    inputs = proc(text=prompt, images=_images(1), videos=[_frames(4)], return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("arch", MULTIMODAL)
def test_batched_left_padded(arch, loaded):
    """Two prompts with different image counts, nested images, left padding (batched eval)."""
    proc, model = loaded[arch]
    vocab = model.config.get_text_config().vocab_size
    two = [{"type": "image"}, {"type": "image"}, {"type": "text", "text": "Compare the two views, please."}]
    one = [{"type": "image"}, {"type": "text", "text": "And this?"}]
    prompts = [
        proc.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True) for c in (two, one)
    ]
    imgs = _images(3)
    inputs = proc(text=prompts, images=[imgs[:2], imgs[2:]], padding=True, return_tensors="pt")
    mask = inputs["attention_mask"]
    assert mask.shape[0] == 2 and bool(mask[:, -1].all())  # left padding: last position is real
    assert not bool(mask.all())  # the prompts have different lengths
    if arch == "llava_onevision":  # multi-image prompts use the base crop + newline per image
        assert int((inputs["input_ids"][0] == model.config.image_token_id).sum()) == 2 * (16 + 1)
    _forward_and_generate(model, inputs, vocab)


def test_text_only_llama(loaded):
    tok, model = loaded["llama"]
    assert model.config.vocab_size == len(tok)
    ids = tok.apply_chat_template(
        [{"role": "system", "content": "You are a judge."}, {"role": "user", "content": "Score: 7/10?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    _forward_and_generate(model, dict(ids), len(tok))


def test_text_only_prompt_on_multimodal(loaded):
    """Text-only prompts must work too (e.g. a blind baseline)."""
    for arch in MULTIMODAL:
        proc, model = loaded[arch]
        prompt = proc.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
        inputs = proc(text=prompt, return_tensors="pt")
        with torch.no_grad():
            assert torch.isfinite(model(**inputs).logits).all()


# ------------------------------------------------------------------------------------------------
# Determinism and caching
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llava", "qwen2_vl"])
def test_deterministic_weights(arch, tmp_path):
    a = load_file(build_tiny_checkpoint(arch, tmp_path / "a", seed=3) / "model.safetensors")
    b = load_file(build_tiny_checkpoint(arch, tmp_path / "b", seed=3) / "model.safetensors")
    c = load_file(build_tiny_checkpoint(arch, tmp_path / "c", seed=4) / "model.safetensors")
    assert a.keys() == b.keys() and len(a) > 10
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)  # the seed matters
    # Tokenizer files are deterministic too (vocab ids are baked into the weights).
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


def test_build_does_not_touch_global_rng(tmp_path):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    build_tiny_checkpoint("llama", tmp_path / "x", seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_sizes_and_dtype(tmp_path):
    path = build_tiny_checkpoint("qwen2_vl", tmp_path / "q", hidden_size=64, num_layers=3, dtype="bfloat16")
    model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
    text_cfg = model.config.get_text_config()
    assert (text_cfg.hidden_size, text_cfg.num_hidden_layers) == (64, 3)
    assert model.dtype == torch.bfloat16
    with pytest.raises(ValueError):
        build_tiny_checkpoint("not_an_arch", tmp_path / "bad")


def test_tiny_checkpoint_caches(tmp_path, monkeypatch):
    calls = []
    real_build = ck.build_tiny_checkpoint

    def counting_build(*args, **kwargs):
        calls.append((args, kwargs))
        return real_build(*args, **kwargs)

    monkeypatch.setattr(ck, "build_tiny_checkpoint", counting_build)
    p1 = tiny_checkpoint("llama", tmp_path, seed=1)
    mtime = (p1 / "model.safetensors").stat().st_mtime_ns
    p2 = tiny_checkpoint("llama", tmp_path, seed=1)
    assert p1 == p2 and len(calls) == 1
    assert (p2 / "model.safetensors").stat().st_mtime_ns == mtime
    p3 = tiny_checkpoint("llama", tmp_path, seed=2)
    assert p3 != p1 and len(calls) == 2
    # Cache key includes the builder version; no temp dirs are left behind.
    assert BUILDER_VERSION
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([p1.name, p3.name])
    AutoModelForCausalLM.from_pretrained(p1, local_files_only=True)


def test_tiny_checkpoint_lost_race(tmp_path, monkeypatch):
    """If another process publishes the same checkpoint first, its copy wins and ours is dropped."""
    real_build = ck.build_tiny_checkpoint
    final = {}

    def racing_build(arch, out_dir, **kwargs):
        real_build(arch, out_dir, **kwargs)
        # Simulate the competitor finishing its atomic rename just before ours.
        target = tmp_path / out_dir.name.split(".tmp-")[0].lstrip(".")
        real_build(arch, target, **kwargs)
        (target / "WINNER").write_text("other process")
        final["path"] = target
        return out_dir

    monkeypatch.setattr(ck, "build_tiny_checkpoint", racing_build)
    path = tiny_checkpoint("llama", tmp_path)
    assert path == final["path"] and (path / "WINNER").exists()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


# ------------------------------------------------------------------------------------------------
# Tokenizer and chat template
# ------------------------------------------------------------------------------------------------

ROUND_TRIP_TEXTS = [
    "The person picks up the knife. A. cut tomato  B. wash hands",
    "  leading and trailing spaces  \n\ttabs\r\nCRLF ",
    "Ünïcödé: naïve café, 日本語のテキスト, 中文, русский, العربية, emoji 🍳🥚👩‍🍳",
    "control \x00\x01\x7f bytes and symbols ~`!@#$%^&*()_+-=[]{}|;':\",./<>?",
    "long " * 500,
    "",
]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tokenizer_round_trip(arch, ckpt_dirs):
    tok = AutoTokenizer.from_pretrained(ckpt_dirs[arch], local_files_only=True)
    assert tok.eos_token is not None and tok.pad_token is not None
    assert tok.pad_token_id != tok.eos_token_id or arch == "llama"
    assert 256 < len(tok) < 1000
    for text in ROUND_TRIP_TEXTS:
        ids = tok(text, add_special_tokens=True)["input_ids"]
        assert all(0 <= i < len(tok) for i in ids)
        assert tok.unk_token_id is None or tok.unk_token_id not in ids
        # The released tokenizers of these add their BOS by default; nothing else is ever added.
        added = [tok.bos_token_id] if arch in BOS_ADDING else []
        assert ids[:len(added)] == added and ids[len(added):] == tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids[len(added):]) == text
    # Merges make common words multi-byte tokens (realistic sequence lengths).
    assert len(tok("The person picks up the knife")["input_ids"]) < len("The person picks up the knife") / 2
    # Architecture special tokens are atomic.
    specials = [IMAGE_TOKEN.get(arch), VIDEO_TOKEN.get(arch), tok.eos_token, tok.pad_token]
    for special in filter(None, specials):
        ids = tok(special, add_special_tokens=False)["input_ids"]
        assert ids == [tok.convert_tokens_to_ids(special)]
    if arch in IMAGE_TOKEN:  # what processors read the image token from
        assert getattr(tok, "context_image_token" if arch == "internvl" else "image_token") == IMAGE_TOKEN[arch]


def _user_turns(arch: str) -> list[list[dict]]:
    text = "Task: make coffee. What next?\nA. grind beans\nB. boil water"
    with_visuals = [{"type": "image"}] + ([{"type": "video"}] if arch in VIDEO else [])
    turns = [
        [{"role": "user", "content": text}],
        [{"role": "user", "content": [*with_visuals, {"type": "text", "text": text}]}],
        [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]},
        ],
    ]
    if arch == "llama":  # text-only model: keep just the text parts
        turns = [[_text_parts_only(m) for m in t] for t in turns]
    if arch in LLAVA_HF:  # their templates render only lists of parts
        turns = [[{**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m["content"], str) else m
                  for m in t] for t in turns]
    return turns


def _text_parts_only(message: dict) -> dict:
    content = message["content"]
    if isinstance(content, str):
        return message
    return {**message, "content": [p for p in content if p["type"] == "text"]}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_chat_template_prefix_property(arch, ckpt_dirs):
    """render(user + assistant(X)) == render(user, add_generation_prompt) + X + end-of-turn."""
    path = ckpt_dirs[arch]
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    renderers = [tok]
    if arch != "llama":
        proc = AutoProcessor.from_pretrained(path, local_files_only=True)
        assert proc.chat_template == tok.chat_template == ck.CHAT_TEMPLATES[arch]
        renderers.append(proc)
    eot, opening = ck.END_OF_TURN[arch], ck.ANSWER_OPENING[arch]
    # llava-hf's templates render a string content as nothing: their turns are lists of parts.
    contents = (lambda text: [[{"type": "text", "text": text}]]) if arch in LLAVA_HF else (
        lambda text: [text, [{"type": "text", "text": text}]])
    # SmolVLM's processor swaps in its built-in template for conversations with a video unless one is
    # passed (the backend always passes the checkpoint's).
    template = {"chat_template": ck.CHAT_TEMPLATES[arch]} if arch == "smolvlm" else {}
    for r in renderers:
        for history in _user_turns(arch):
            context = r.apply_chat_template(history, tokenize=False, add_generation_prompt=True, **template)
            if arch != "mistral3":  # Mistral's answer follows [/INST]: no generation prompt
                assert context != r.apply_chat_template(history, tokenize=False, add_generation_prompt=False,
                                                        **template)
            for answer in ["B", " B", "grind the beans, then 煮 water.", ""]:
                for content in contents(answer):
                    full = r.apply_chat_template(history + [{"role": "assistant", "content": content}], tokenize=False,
                                                 **template)
                    assert full == context + opening + answer + eot
            # Token level: the context's ids are a prefix of the full conversation's ids.
            full = r.apply_chat_template(history + [{"role": "assistant", "content": contents("B")[-1]}],
                                         tokenize=False, **template)
            ctx_ids = tok(context, add_special_tokens=False)["input_ids"]
            full_ids = tok(full, add_special_tokens=False)["input_ids"]
            assert full_ids[: len(ctx_ids)] == ctx_ids


def test_chat_template_styles(ckpt_dirs):
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q"}]}]
    rendered = {
        arch: AutoTokenizer.from_pretrained(ckpt_dirs[arch], local_files_only=True).apply_chat_template(
            msgs if arch != "llama" else [{"role": "user", "content": "Q"}], tokenize=False, add_generation_prompt=True
        )
        for arch in ARCHITECTURES
    }
    assert rendered["llava"] == "USER: <image>\nQ ASSISTANT:"  # llava-hf's form: no BOS, a space after each text
    assert rendered["llava_onevision"] == "<|im_start|>user\n<image>\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert rendered["qwen2_vl"] == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Q<|im_end|>\n<|im_start|>assistant\n"
    )
    assert rendered["idefics3"] == "<|begin_of_text|>User:<image>Q<end_of_utterance>\nAssistant:"
    assert rendered["qwen2_5_vl"] == rendered["qwen2_vl"]
    assert rendered["qwen3_vl"] == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Q<|im_end|>\n<|im_start|>assistant\n"
    )
    assert rendered["internvl"] == "<|im_start|>user\n<IMG_CONTEXT>\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert rendered["gemma3"] == "<bos><start_of_turn>user\n<start_of_image>Q<end_of_turn>\n<start_of_turn>model\n"
    assert rendered["smolvlm"] == "<|im_start|>User:<image>Q<end_of_utterance>\nAssistant:"
    assert rendered["llava_next_video"] == rendered["llava"]
    assert rendered["mistral3"] == "<s>[INST][IMG]Q[/INST]"
    assert rendered["llama"] == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    # Video parts are rejected by image-only templates instead of being silently dropped (llava-hf's
    # drop them, as the released one does; the backends send LLaVA-1.5 no video).
    tok = AutoTokenizer.from_pretrained(ckpt_dirs["idefics3"], local_files_only=True)
    with pytest.raises(Exception, match="video"):
        tok.apply_chat_template([{"role": "user", "content": [{"type": "video"}]}], tokenize=False)
