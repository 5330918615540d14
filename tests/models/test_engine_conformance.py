"""egoplan_server against the released engines' own request code: vllm 0.33.0 and sglang 0.5.23,
run on the tiny checkpoints by ``tests.models.engine_code`` (no engine, no GPU).

* Every request the backend sends (the load probe, an EgoPlan question's prefix and candidates, a
  generation, a question and a generation with the text before the visuals: ActPlan-1K's
  ``input_order: text_first``) is accepted by the engine's request model and preprocessing, and the engine runs the
  token ids the loopback server ran for it, which are those egoplan_hf scores
  (tests/models/test_egoplan_server.py), except where the engine's preprocessing differs
  (``engines.ENGINE_DEVIATIONS``), which each such case shows exactly.
* Every image of every request becomes image embeddings: the positions the engine fills with them
  (vLLM's placeholders; SGLang's after its model's ``pad_input_ids``) are those of egoplan_hf's
  image and video tokens, for every architecture.
* The facts the backend and the loopback servers keep per architecture are the engines': vLLM's
  modality limits (refused with vLLM's message), SGLang's Gemma 3 without its vision tower unless
  --enable-multimodal, SGLang's text tokenization (a second BOS), the ``/server_info`` fields the
  backend reads, vLLM's recognition of a Mistral-format repository and the flags that serve it as
  the transformers checkpoint.
* The loopback servers answer in the engines' response shapes.
* vLLM's video metadata handling gives Qwen2.5-VL egoplan_hf's time per temporal patch.

Skipped where an engine is not installed (.ci/install-engines); CI installs both and sets
LMMS_EGOPLAN_REQUIRE_ENGINES=1, which makes that a failure.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from transformers import AutoConfig, AutoProcessor

from lmms_egoplan.core.media import frame_time
from lmms_egoplan.core.request_options import INPUT_ORDER, TEXT_FIRST
from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES, BOS_ADDING, VIDEO_ARCHITECTURES
from lmms_egoplan.demo.kit.media import index_image
from lmms_egoplan.models.engines import (
    ENGINE_DEVIATIONS,
    SGLANG_MULTIMODAL_FLAG,
    VLLM_MODALITIES,
    mistral_format_flags,
    png_data_url,
)
from lmms_egoplan.models.visuals import Video
from tests.models.engine_code import EngineCode, engines_dir, installed
from tests.models.engine_servers import EngineServer, data_url_image, hf_messages
from tests.models.test_egoplan_server import (
    doc,
    gen_requests,
    mc_requests,
    question_shape,
    server_backend,
    serving_flags,
    visuals,
)

CASES = [(engine, arch) for engine in ("vllm", "sglang") for arch in ARCHITECTURES]
# How the server is started for each architecture, as the docs start it (SGLang: Gemma 3's vision
# tower needs a flag, its bidirectional image attention three more).
SERVER_OPTIONS = {("sglang", arch): {"enable_multimodal": True, **serving_flags("sglang", arch)}
                  for arch in SGLANG_MULTIMODAL_FLAG}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    """``engines(engine, checkpoint, **server_options)``: the engine's code serving the checkpoint."""
    started: dict[str, EngineCode] = {}
    loaded: dict[str, tuple] = {}

    def get(engine: str, checkpoint, **options) -> EngineCode:
        if engine not in started:
            if not installed(engine):
                message = f"{engine} is not installed in {engines_dir() / engine} (.ci/install-engines)"
                if os.environ.get("LMMS_EGOPLAN_REQUIRE_ENGINES") == "1":
                    pytest.fail(message)
                pytest.skip(message)
            started[engine] = EngineCode(engine, tmp_path_factory.mktemp("engine_code") / f"{engine}.log")
        key = (str(checkpoint), tuple(sorted(options.items())))
        if loaded.get(engine, (None,))[0] != key:
            loaded[engine] = (key, started[engine].load(checkpoint, **options))
        return started[engine]

    get.loaded = lambda engine: loaded[engine][1]
    yield get
    for code in started.values():
        code.close()


def loopback(engine: str, checkpoint, arch: str, **options) -> EngineServer:
    return EngineServer(engine, checkpoint, modalities=VLLM_MODALITIES.get(arch) if engine == "vllm" else None,
                        **{**serving_flags(engine, arch), **options})


def backend_exchanges(engine: str, arch: str, checkpoint) -> list[tuple[dict, list[int]]]:
    """Every (request body, token ids the loopback server ran) of egoplan_server's load, an EgoPlan
    question as the docs run it on the engine (SGLang: a video model's clip as frames,
    videos_as_frames=true), a question with two images (ActPlan-1K's scenes) where the engine takes
    images for the architecture, and a generation."""
    frames_as_images = engine == "sglang" and arch in VIDEO_ARCHITECTURES
    shape = {} if frames_as_images else question_shape(engine, arch)
    two_images = arch != "llama" and "image" in (VLLM_MODALITIES.get(arch, {"image": None})
                                                 if engine == "vllm" else {"image": None})
    with loopback(engine, checkpoint, arch) as server:
        backend = server_backend(server, videos_as_frames=frames_as_images)
        requests = [*with_visuals(mc_requests(backend, [doc(0, **shape)]), visuals if arch != "llama" else None),
                    *with_visuals(gen_requests(backend, [doc(1, **shape)]), visuals if arch != "llama" else None)]
        backend.loglikelihood([r for r in requests if r.request_type == "loglikelihood"])
        generations = [r for r in requests if r.request_type == "generate_until"]
        backend.generate_until(generations)
        # Sampling: the model's generation_config defaults (transformers' top_k 50) go too.
        generations[0].arguments = (generations[0].arguments[0], {"max_new_tokens": 2, "temperature": 0.7},
                                    *generations[0].arguments[2:])
        backend.generate_until(generations[:1])
        if two_images:
            backend.loglikelihood(with_visuals(mc_requests(backend, [doc(2)]), scene_images))
        if arch != "llama":
            # ActPlan-1K's order: the question before the scene images (input_order text_first).
            text_first = with_visuals(mc_requests(backend, [doc(3, **shape)], input_order=TEXT_FIRST),
                                      scene_images if two_images else visuals)
            backend.loglikelihood(text_first)
            generation = with_visuals(gen_requests(backend, [doc(3, **shape)]), scene_images if two_images else visuals)
            INPUT_ORDER.mark(generation, TEXT_FIRST)
            backend.generate_until(generation)
        return list(server.ran)


def scene_images(d: dict) -> list:
    return [index_image(d["observation"], size=(48, 40)), index_image(d["observation"] + 1, size=(56, 42))]


def with_visuals(requests: list, doc_to_visual) -> list:
    for request in requests:
        request.arguments = (*request.arguments[:2], doc_to_visual, *request.arguments[3:])
    return requests


def engine_ids(answer: dict, reference: list[int]) -> tuple[list[int], list[int]]:
    """The ids the engine's model runs (SGLang's after ``pad_input_ids``) and ``reference``, each with
    the positions the engine fills with visual embeddings masked (the token there is the engine's
    choice: vLLM's InternVL puts ``<video>`` where transformers puts ``<IMG_CONTEXT>``, SGLang its
    items' pad values; the model never sees it)."""
    masked = set(answer.get("embedded", []))
    ran = answer.get("padded_ids", answer["token_ids"])
    return ([None if i in masked else t for i, t in enumerate(ran)],
            [None if i in masked else t for i, t in enumerate(reference)])


def media_positions(ids: list[int], checkpoint) -> list[int]:
    """Where egoplan_hf's processor put the model's image and video tokens (those of its config, into
    which the model scatters the visual embeddings)."""
    config = AutoConfig.from_pretrained(checkpoint)
    media = {getattr(config, name, None) for name in ("image_token_id", "image_token_index", "video_token_id",
                                                      "video_token_index")} - {None}
    return [i for i, token in enumerate(ids) if token in media]


def sglang_qwen2_vl_pixel_range(body: dict, ran: list[int], processor) -> list[int]:
    """SGLang's Qwen2-VL: the processor loaded with SGLang's pixel range, not the checkpoint's."""
    if not body.get("image_data"):
        return ran
    images = [data_url_image(url) for url in body["image_data"]]
    return processor(text=[body["text"]], images=[images], size={"shortest_edge": 3136, "longest_edge": 1003520},
                     add_special_tokens=True, return_tensors="pt")["input_ids"][0].tolist()


def anyres_per_image(body: dict, ran: list[int], processor) -> list[int]:
    """LLaVA-OneVision: several images of one prompt each get their AnyRes tiles (the images handed
    to transformers' processor one by one, as for a prompt per image), not one crop each."""
    if "messages" in body:  # vLLM renders the conversation with the model's template
        messages, images, _ = hf_messages(body["messages"])
        text = processor.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=body.get("add_generation_prompt", True))
    else:
        text, images = body.get("text"), [data_url_image(url) for url in body.get("image_data") or []]
    if len(images) < 2:
        return ran
    return processor(text=[text], images=images, add_special_tokens=False, return_tensors="pt")["input_ids"][0].tolist()


# What each engine runs where it differs from egoplan_hf's ids (engines.ENGINE_DEVIATIONS): the ids
# computed as the engine's code computes them, for the request body and the ids the backend scored.
DEVIATIONS = {("sglang", "qwen2_vl"): sglang_qwen2_vl_pixel_range,
              ("sglang", "llava_onevision"): anyres_per_image,
              ("vllm", "llava_onevision"): anyres_per_image}
# Deviations in the pixels, not the ids (tested below).
PIXEL_DEVIATIONS = {("sglang", "llava")}


def test_the_deviations_tested_are_those_the_backend_announces():
    assert set(DEVIATIONS) | PIXEL_DEVIATIONS == set(ENGINE_DEVIATIONS)


@pytest.mark.parametrize("engine,arch", CASES)
def test_the_engine_runs_each_request_of_the_backend_as_the_backend_scores_it(engine, arch, engines, tiny_model):
    """The ids of every request: the loopback server's (egoplan_hf's), or where the engine deviates,
    exactly those of its documented deviation, which some request shows; and every image and video
    becomes embeddings at the positions of egoplan_hf's (or the deviation's) image and video tokens."""
    checkpoint = tiny_model(arch)
    exchanges = backend_exchanges(engine, arch, checkpoint)
    code = engines(engine, checkpoint, **SERVER_OPTIONS.get((engine, arch), {}))
    deviation = DEVIATIONS.get((engine, arch))
    processor = AutoProcessor.from_pretrained(checkpoint)
    deviating = 0
    for body, ran in exchanges:
        answer = code.request(body)
        assert answer["status"] == 200, f"{engine} refuses a request of the backend: {answer['error']}"
        expected = deviation(body, ran, processor) if deviation else ran
        deviating += expected != ran
        if body.get("image_data") or any(part.get("type") != "text" for message in body.get("messages", [])
                                          if isinstance(message["content"], list) for part in message["content"]):
            assert answer["embedded"] == media_positions(expected, checkpoint), (
                f"{engine} fills other positions with visual embeddings than {arch}'s media tokens in "
                f"{json.dumps(body)[:300]}")
        got, expected = engine_ids(answer, expected)
        assert got == expected, f"{engine} runs other ids than the backend expects for {json.dumps(body)[:300]}"
    assert deviating or not deviation, f"no request shows {engine}'s deviation for {arch}: drop it"


def test_sglang_llava_pads_every_image_to_a_square_with_egoplan_hfs_positions(engines, tiny_model):
    """engines.ENGINE_DEVIATIONS[("sglang", "llava")], exactly: each image of the backend's requests
    (``modalities`` multi-images) becomes one item of egoplan_hf's 16 positions (the tiny CLIP's; 576
    for LLaVA-1.5), whose pixels are CLIP's of the image padded to a square with the mean colour
    (``expand2square``), not the centre crop egoplan_hf's processor takes: the same for a square
    image, others for the backend's 48x40 frames; with more than 16 images each is pooled to 4."""
    checkpoint = tiny_model("llava")
    code = engines("sglang", checkpoint)
    processor = AutoProcessor.from_pretrained(checkpoint)
    clip = processor.image_processor
    frames = [index_image(i, size=(48, 40)) for i in range(2)] + [index_image(9, size=(40, 40))]
    text = processor.apply_chat_template([{"role": "user", "content": [*({"type": "image"} for _ in frames),
                                                                       {"type": "text", "text": "Next?"}]}],
                                         tokenize=False, add_generation_prompt=True)
    answer = code.request({"text": text, "image_data": [png_data_url(frame) for frame in frames],
                           "modalities": ["multi-images"], "sampling_params": {"max_new_tokens": 0}}, features=True)
    assert [item["positions"] for item in answer["items"]] == [16, 16, 16]
    for frame, item in zip(frames, answer["items"]):
        mean = tuple(int(x * 255) for x in clip.image_mean)
        square = Image.new("RGB", (max(frame.size),) * 2, mean)
        square.paste(frame, ((max(frame.size) - frame.width) // 2, (max(frame.size) - frame.height) // 2))
        padded, cropped = (clip(image, return_tensors="np")["pixel_values"][0] for image in (square, frame))
        assert np.array(item["features"])[0] == pytest.approx(padded, abs=1e-2)  # SGLang keeps float16
        assert (np.abs(padded - cropped).max() < 1e-2) == (frame.width == frame.height)
    many = [png_data_url(index_image(i, size=(40, 40))) for i in range(17)]
    text = processor.apply_chat_template([{"role": "user", "content": [*({"type": "image"} for _ in many),
                                                                       {"type": "text", "text": "Next?"}]}],
                                         tokenize=False, add_generation_prompt=True)
    answer = code.request({"text": text, "image_data": many, "modalities": ["multi-images"],
                           "sampling_params": {"max_new_tokens": 0}})
    assert {item["positions"] for item in answer["items"]} == {4}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_vllm_serves_each_architecture_with_the_modalities_the_backend_knows(arch, engines, tiny_model):
    engines("vllm", tiny_model(arch))
    loaded = engines.loaded("vllm")
    expected = {} if arch == "llama" else VLLM_MODALITIES.get(arch, {"image": None, "video": None})
    assert loaded["modalities"] == expected


@pytest.mark.parametrize("arch,modality", [("llava_next_video", "image"), ("smolvlm", "video"), ("idefics3", "video")])
def test_vllm_and_its_loopback_refuse_a_modality_over_the_model_limit_alike(arch, modality, engines, tiny_model):
    """What the backend no longer sends (frames as images, no image for LLaVA-NeXT-Video): refused by
    vLLM's own code and by the loopback server, with vLLM's message."""
    checkpoint = tiny_model(arch)
    frame = png_data_url(index_image(3, size=(48, 40)))
    part = ({"type": "image_url", "image_url": {"url": frame}} if modality == "image"
            else {"type": "video_url", "video_url": {"url": f"data:video/jpeg;base64,{frame.split(',')[1]}"}})
    body = {"model": "tiny", "messages": [{"role": "user", "content": [part, {"type": "text", "text": "What next?"}]}],
            "max_completion_tokens": 1}
    answer = engines("vllm", checkpoint).request(body)
    with loopback("vllm", checkpoint, arch) as server:
        fake = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=60)
    assert answer["status"] == fake.status_code == 400
    assert f"At most 0 {modality}(s) may be provided in one prompt" in answer["error"]
    assert fake.json()["error"]["message"] in answer["error"]


# The multimodal processor SGLang serves each architecture with (docs/backend.md's table): its own, or
# its transformers backend's (``TransformersAutoMultimodalProcessor``, for models it has no class for).
SGLANG_PROCESSORS = {"llava": "LlavaImageProcessor", "qwen2_vl": "QwenVLImageProcessor",
                     "qwen2_5_vl": "QwenVLImageProcessor", "qwen3_vl": "QwenVLImageProcessor",
                     "gemma3": "Gemma3SGLangImageProcessor", "mistral3": "PixtralProcessor", "llama": None,
                     **dict.fromkeys(["llava_onevision", "idefics3", "internvl", "smolvlm", "llava_next_video"],
                                     "TransformersAutoMultimodalProcessor")}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sglang_reports_image_input_as_the_backend_expects(arch, engines, tiny_model):
    """GET /model_info's has_image_understanding for each architecture: every multimodal one, Gemma 3
    only with --enable-multimodal (the loopback server's multimodal=False plays it without); and the
    processor SGLang serves it with."""
    checkpoint = tiny_model(arch)
    engines("sglang", checkpoint)
    default = engines.loaded("sglang")
    assert default["has_image_understanding"] == (arch != "llama" and arch not in SGLANG_MULTIMODAL_FLAG)
    if arch not in SGLANG_MULTIMODAL_FLAG:
        assert default["processor"] == SGLANG_PROCESSORS[arch]
    if arch in SGLANG_MULTIMODAL_FLAG:
        engines("sglang", checkpoint, enable_multimodal=True)
        assert engines.loaded("sglang")["has_image_understanding"]
        assert engines.loaded("sglang")["processor"] == SGLANG_PROCESSORS[arch]
        with loopback("sglang", checkpoint, arch, multimodal=False) as server:
            assert httpx.get(f"{server.base_url}/model_info").json()["has_image_understanding"] is False


@pytest.mark.parametrize("arch", sorted(BOS_ADDING))
def test_sglang_tokenizes_a_text_as_its_loopback_does(arch, engines, tiny_model):
    """The defect the backend avoids: a text that starts with the template's BOS gets a second one from
    SGLang's text path (TokenizerManager._tokenize_texts); its loopback server does the same."""
    checkpoint = tiny_model(arch)
    processor = AutoProcessor.from_pretrained(checkpoint)
    tokenizer = getattr(processor, "tokenizer", processor)
    text = processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "What next?"}]}],
                                         tokenize=False, add_generation_prompt=True)
    body = {"text": text, "sampling_params": {"max_new_tokens": 0}, "return_prompt_token_ids": True}
    answer = engines("sglang", checkpoint, **SERVER_OPTIONS.get(("sglang", arch), {})).request(body)
    with loopback("sglang", checkpoint, arch) as server:
        fake = httpx.post(f"{server.base_url}/generate", json=body, timeout=60).json()
    assert answer["token_ids"] == fake["prompt_token_ids"] == [tokenizer.bos_token_id,
                                                               *tokenizer(text, add_special_tokens=False)["input_ids"]]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_loopback_servers_answer_in_the_engines_response_shapes(engine, engines, tiny_model):
    """A scoring answer of the loopback server, read back through the engine's own response code."""
    checkpoint = tiny_model("qwen2_vl")
    code = engines(engine, checkpoint)
    with loopback(engine, checkpoint, "qwen2_vl") as server:
        backend = server_backend(server)
        backend.loglikelihood(mc_requests(backend, [doc(3, video=False)]))
        _, body = server.requests[-1]
        answer = httpx.post(f"{server.base_url}{server.requests[-1][0]}", json=body, timeout=60).json()
    formatted = code.response(answer)
    if engine == "vllm":
        assert formatted["prompt_token_ids"] == answer["prompt_token_ids"]
        assert formatted["prompt_logprobs"] == answer["prompt_logprobs"]
    else:
        assert formatted == {key: answer["meta_info"][key] for key in ("input_token_logprobs", "input_top_logprobs")}


@pytest.mark.parametrize("timed", [True, False])
def test_vllm_gives_qwen2_5_vl_egoplan_hfs_time_per_temporal_patch(timed, engines, tiny_model):
    """vLLM builds the video's metadata from media_io_kwargs (multimodal/media/video.py) and Qwen2.5-VL's
    processor turns it into second_per_grid_ts: egoplan_hf's value, for a timed clip and for frames
    without times (24 fps, where vLLM alone would assume 1)."""
    checkpoint = tiny_model("qwen2_5_vl")
    code = engines("vllm", checkpoint)
    with loopback("vllm", checkpoint, "qwen2_5_vl") as server:
        backend = server_backend(server)
        backend.loglikelihood(mc_requests(backend, [doc(4, observation=False, timed=timed)]))
        _, body = server.requests[-1]
    frames = visuals(doc(4, observation=False, timed=timed))
    video = Video(frames, [frame_time(frame) for frame in frames] if timed else None)
    processor = AutoProcessor.from_pretrained(checkpoint)
    expected = processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[frames],
                         video_metadata=[video.metadata()], do_sample_frames=False,
                         return_tensors="pt")["second_per_grid_ts"]
    assert code.request(body)["second_per_grid_ts"] == pytest.approx(expected.tolist(), rel=1e-6)


DOCUMENTED = [Path(__file__).resolve().parents[2] / name for name in ("README.md", "docs/backend.md")]
SERVER_COMMANDS = {"vllm": "vllm serve ", "sglang": "python -m sglang.launch_server "}


def documented_commands(engine: str) -> list[list[str]]:
    """The server command lines of the README and docs/backend.md (continuation lines joined)."""
    commands = []
    for path in DOCUMENTED:
        text = path.read_text().replace("\\\n", " ")
        commands += [shlex.split(line.split(SERVER_COMMANDS[engine], 1)[1]) for line in text.splitlines()
                     if line.lstrip().startswith(SERVER_COMMANDS[engine])]
    return commands


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_documented_server_commands_parse_with_the_engines_own_parser(engine, engines, tiny_model):
    """Every `vllm serve` / `python -m sglang.launch_server` line of the docs, options as written (the
    model path is the docs'; it is not loaded)."""
    commands = documented_commands(engine)
    assert commands
    code = engines(engine, tiny_model("qwen2_vl"))
    for command in commands:
        assert code.command(command) == {"status": 0}, command
    assert code.command([*commands[0], "--no-such-option"])["status"] == 2


@pytest.mark.parametrize("flags", [{}, {"attention_backend": "triton", "chunked_prefill_size": -1, "page_size": 1},
                                   {"allow_auto_truncate": True}])
def test_sglang_server_info_holds_the_settings_the_backend_reads_as_its_loopback_does(flags, engines, tiny_model):
    """GET /server_info's fields (build_server_info over the resolved server arguments): the names and
    the values the loopback server reports for the same flags, SGLang resolving the attention backend
    itself where none is named (torch_native on this CPU; fa3 on an H100, model_override_base.py
    305-311, which the loopback plays) and chunked prefill on by default."""
    checkpoint = tiny_model("gemma3")
    engines("sglang", checkpoint, enable_multimodal=True, **flags)
    info = engines.loaded("sglang")["server_info"]
    with loopback("sglang", checkpoint, "gemma3", **flags) as server:
        played = httpx.get(f"{server.base_url}/server_info").json()
    for key in ("prefill_attention_backend", "decode_attention_backend", "page_size", "allow_auto_truncate"):
        assert info[key] == played[key], key
    assert info["attention_backend"] == flags.get("attention_backend", "torch_native")
    assert (info["chunked_prefill_size"] > 0 if "chunked_prefill_size" not in flags
            else info["chunked_prefill_size"] == -1)


def test_vllm_recognises_a_mistral_format_repository_as_the_backend_does(engines, tiny_model, tmp_path):
    """vLLM's own detection (tokenizers/registry.py, transformers_utils/config.py) and the backend's
    mistral_format_flags agree on the layouts of a folder; with --tokenizer-mode hf --config-format hf
    vLLM serves the Mistral-format folder from its transformers files, with the probe's ids of the
    transformers checkpoint."""
    import shutil

    code = engines("vllm", tiny_model("mistral3"))
    base = tmp_path / "mistral3"
    shutil.copytree(tiny_model("mistral3"), base)
    layouts = {"transformers only": [], "consolidated": ["consolidated.safetensors"],
               "tekken": ["consolidated.safetensors", "tekken.json"],
               "sentencepiece v3": ["consolidated-00001.safetensors", "tokenizer.model.v3"],
               "params": ["consolidated.safetensors", "params.json"],
               "both": ["consolidated.safetensors", "tekken.json", "params.json"]}
    for layout, files in layouts.items():
        folder = tmp_path / layout.replace(" ", "_")
        shutil.copytree(base, folder)
        for name in files:  # the weights a real copy (vLLM reads safetensors headers), the rest placeholders
            if name.endswith(".safetensors"):
                shutil.copy(base / "model.safetensors", folder / name)
            else:
                (folder / name).write_text("{}")
        detected = code.mistral_format(folder)
        assert mistral_format_flags(str(folder)) == [*(["--tokenizer-mode hf"] if detected["tokenizer"] else []),
                                                     *(["--config-format hf"] if detected["config"] else [])], layout
    assert mistral_format_flags(str(tmp_path / "both")) == ["--tokenizer-mode hf", "--config-format hf"]
    served = code.load(tmp_path / "both", tokenizer_mode="hf", config_format="hf")
    assert served["tokenizer_mode"] == "hf" and served["architectures"] == ["Mistral3ForConditionalGeneration"]
    with loopback("vllm", tiny_model("mistral3"), "mistral3") as server:
        backend = server_backend(server)
        body, ran = server.ran[0]
    assert code.request(body)["token_ids"] == ran
    backend.clean()


def test_vllm_refuses_the_load_checks_media_kwargs_without_trust_as_its_loopback_does(engines, tiny_model):
    """The load check's probe with media_io_kwargs: 400 from vLLM's own renderer started without
    --trust-request-mm-kwargs (validate_request_mm_kwargs), as from the loopback server; accepted
    with it."""
    checkpoint = tiny_model("qwen2_vl")
    with loopback("vllm", checkpoint, "qwen2_vl", trust_request_mm_kwargs=False) as server:
        with pytest.raises(Exception, match="--trust-request-mm-kwargs"):
            server_backend(server)
        [body] = [body for _, body in server.requests if "media_io_kwargs" in body]
    untrusted = engines("vllm", checkpoint, trust_request_mm_kwargs=False).request(body)
    assert untrusted["status"] == 400 and "--trust-request-mm-kwargs" in untrusted["error"]
    assert engines("vllm", checkpoint).request(body)["status"] == 200
