"""egoplan_server against loopback SGLang / vLLM servers computing with the tiny checkpoints.

Fast tier (in-process): the server backend's likelihoods equal egoplan_hf's within 1e-4 with the
same argmin on every architecture each loopback engine serves; generation, with the model's sampling
defaults and near the context; SGLang's shared prefix; the load checks (Gemma 3's image attention,
truncation, tokenizers, API keys, log-probabilities, media kwargs, Mistral-format repositories); a
server dying mid-run; several servers, one killed mid-run; routers in front of them. The e2e tier
(tests/e2e/test_egoplan_server.py) runs the real lmms-eval CLI against loopback vLLM servers.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
from loguru import logger

from lmms_egoplan.core.media import as_video_frames, frame_times
from lmms_egoplan.core.request_options import (
    ANSWER_AND_END_OF_TURN,
    INPUT_ORDER,
    LOSS_MEAN,
    NONZERO_LOSS_TOKENS,
    SCORED_SPAN,
)
from lmms_egoplan.core.settings import SettingsError
from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES, VIDEO_ARCHITECTURES
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.media import index_image
from lmms_egoplan.harness.lmms_eval_task import SuiteInstance
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from lmms_egoplan.models.egoplan_server import EgoPlanServer
from lmms_egoplan.models.engines import (
    SGLANG_BIDIRECTIONAL_IMAGES,
    VLLM_MODALITIES,
    ServerRequestError,
    ServerSetupError,
    mistral_format_flags,
    png_data_url,
)
from lmms_egoplan.models.visuals import ModelVisuals, UnsupportedVisualError
from tests.models.engine_servers import EngineServer, RouterProxy

TASK, SPLIT = "probe", "test"
CHOICES = ["open the fridge", "wash the hands", "put the pan on the stove", "take the cup"]
TOLERANCE = 1e-4
# EgoPlan-Val sample 115's 8 frame numbers (30 fps), from its first: a span of 724 frames in 7 steps.
CLIP_FRAMES = [0, 103, 206, 310, 413, 517, 620, 724]


def doc(seed: int, *, video: bool = True, observation: bool = True, timed: bool = True) -> dict:
    return {"question": f"Task goal: make coffee (case {seed}). What action should I take next?",
            "frames": list(range(seed * 8, seed * 8 + 8)) if video else [],
            "observation": 1000 + seed if observation else None, "timed": timed}


def visuals(d: dict) -> list:
    """EgoPlan's visuals: 8 progress frames tagged as one clip with their times (30 fps source; none
    where the doc is not ``timed``), the observation (where the doc has one)."""
    frames = [index_image(i, size=(48, 40)) for i in d["frames"]]
    times = frame_times(CLIP_FRAMES, 0, 30.0) if d.get("timed", True) else None
    clip = as_video_frames(frames, clip="progress", times=times) if frames else []
    return [*clip, *([index_image(d["observation"], size=(56, 42))] if d["observation"] is not None else [])]


def mc_requests(backend, docs: list[dict], **options: str) -> list[SuiteInstance]:
    backend.task_dict = {TASK: {SPLIT: docs}}
    requests = [SuiteInstance(request_type="loglikelihood", idx=i,
                         arguments=(d["question"], " " + choice, visuals, doc_id, TASK, SPLIT),
                         metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
                for doc_id, d in enumerate(docs) for i, choice in enumerate(CHOICES)]
    for option in (SCORED_SPAN, LOSS_MEAN, INPUT_ORDER):
        if option.name in options:
            option.mark(requests, options[option.name])
    return requests


def gen_requests(backend, docs: list[dict]) -> list[SuiteInstance]:
    backend.task_dict = {TASK: {SPLIT: docs}}
    return [SuiteInstance(request_type="generate_until", idx=0,
                     arguments=(d["question"], {"max_new_tokens": 6, "until": ["\n"]}, visuals, doc_id, TASK, SPLIT),
                     metadata={"task": TASK, "doc_id": doc_id, "repeats": 1})
            for doc_id, d in enumerate(docs)]


def serving_flags(engine: str, arch: str) -> dict:
    """How the docs start the server for the architecture: SGLang's Gemma 3 with the flags that give
    it bidirectional image attention (``engines.SGLANG_BIDIRECTIONAL_FLAGS``)."""
    if engine == "sglang" and arch in SGLANG_BIDIRECTIONAL_IMAGES:
        return {"attention_backend": "triton", "chunked_prefill_size": -1}
    return {}


@pytest.fixture(scope="module")
def servers(tiny_model):
    """``servers(engine, arch, **options)``: a running loopback server per (engine, arch, options),
    with the modality limits the engine serves the architecture with (``engines.VLLM_MODALITIES``)
    and the flags the docs start it with (``serving_flags``)."""
    started = {}

    def get(engine: str, arch: str, **options) -> EngineServer:
        key = (engine, arch, tuple(sorted(options.items())))
        if key not in started:
            limits = VLLM_MODALITIES.get(arch) if engine == "vllm" else None
            started[key] = EngineServer(engine, tiny_model(arch), **{"modalities": limits,
                                                                     **serving_flags(engine, arch), **options}).start()
        started[key].die_after(None)
        started[key].reset()
        return started[key]

    yield get
    for server in started.values():
        server.close()


@pytest.fixture(scope="module")
def reference(tiny_model):
    return reference_backends(tiny_model)


def reference_backends(tiny_model):
    """``get(arch)``: the in-process egoplan_hf of an architecture's tiny checkpoint, loaded once."""
    loaded = {}

    def get(arch: str) -> EgoPlanHF:
        if arch not in loaded:
            loaded[arch] = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", max_frames=8)
        return loaded[arch]

    return get


def server_backend(server: EngineServer, **model_args) -> EgoPlanServer:
    return EgoPlanServer(engine=server.engine, base_url=server.base_url, model=server.served_model_name,
                         **{"max_frames": 8, "retries": 0, "backoff": 0.01, "concurrency": 2, **model_args})


def assert_same_scores(got, expected, docs: int):
    assert len(got) == len(expected)
    for (value, _), (reference_value, _) in zip(got, expected):
        assert value == pytest.approx(reference_value, abs=TOLERANCE)
    values, reference_values = np.array([v for v, _ in got]), np.array([v for v, _ in expected])
    assert (values.reshape(docs, -1).argmin(1) == reference_values.reshape(docs, -1).argmin(1)).all()


CASES = ([("vllm", arch) for arch in ARCHITECTURES] + [("sglang", arch) for arch in ARCHITECTURES])


def question_shape(engine: str, arch: str) -> dict:
    """The EgoPlan question each engine can take for the architecture: a timed clip and an image;
    SGLang's /generate takes no frame list, so video models get the image only there; vLLM serves
    LLaVA-NeXT-Video with one video and no image, so the clip only; the text-only Llama no visual."""
    if arch == "llama":
        return {"video": False, "observation": False}
    if engine == "sglang" and arch in VIDEO_ARCHITECTURES:
        return {"video": False}
    if engine == "vllm" and "image" not in VLLM_MODALITIES.get(arch, {"image": None}):
        return {"observation": False}
    return {}


@pytest.mark.parametrize("engine,arch", CASES)
def test_the_server_backend_scores_as_egoplan_hf(engine, arch, servers, reference):
    """EgoPlan's question (``question_shape``) with the official span and mean: the same values
    within 1e-4 and the same argmin (a BOS-adding tokenizer on Llama, Gemma 3, Mistral 3, Idefics3,
    whose templates write it, and LLaVA, LLaVA-NeXT-Video, whose llava-hf templates do not)."""
    server = servers(engine, arch)
    backend = server_backend(server)
    docs = [doc(0, **question_shape(engine, arch)), doc(1, **question_shape(engine, arch))]
    # llava-hf's templates close the assistant's turn with no special token: the model's EOS is sent after
    # the answer and scored there, as egoplan_hf scores it.
    options = {"scored_span": ANSWER_AND_END_OF_TURN, "loss_mean": NONZERO_LOSS_TOKENS}
    hf = reference(arch)
    visual_function = visuals if arch != "llama" else None
    got = backend.loglikelihood(_with_visuals(mc_requests(backend, docs, **options), visual_function))
    expected = hf.loglikelihood(_with_visuals(mc_requests(hf, docs, **options), visual_function))
    assert_same_scores(got, expected, len(docs))


def _with_visuals(requests: list[SuiteInstance], doc_to_visual) -> list[SuiteInstance]:
    for request in requests:
        request.arguments = (*request.arguments[:2], doc_to_visual, *request.arguments[3:])
    return requests


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_lmms_evals_span_and_mean_are_scored_as_egoplan_hf(engine, servers, reference):
    server = servers(engine, "qwen2_vl")
    backend = server_backend(server, videos_as_frames=engine == "sglang")
    docs = [doc(2, video=engine == "vllm")]
    got = backend.loglikelihood(mc_requests(backend, docs))
    expected = reference("qwen2_vl").loglikelihood(mc_requests(reference("qwen2_vl"), docs))
    assert_same_scores(got, expected, 1)


def test_sglang_candidates_reuse_the_prefix_the_prefix_request_cached(servers):
    server = servers("sglang", "gemma3")
    backend = server_backend(server)
    server.reset()
    backend.loglikelihood(mc_requests(backend, [doc(3)], scored_span=ANSWER_AND_END_OF_TURN))
    [prefix, *candidates] = [body for _, body in server.requests]
    # The prefix reports its ids from position 0 (the prompt check), a prefill that warms the cache.
    assert prefix["logprob_start_len"] == 0 and prefix["sampling_params"] == {"max_new_tokens": 0}
    assert len(candidates) == 4 and len({c["logprob_start_len"] for c in candidates}) == 1
    assert len(prefix["image_data"]) == 9  # gemma3 takes the 8 frames as images, then the observation
    # The candidates start scoring after the expanded prefix (placeholders count many tokens each).
    prompt_tokens = candidates[0]["logprob_start_len"] + 1
    assert prompt_tokens > len(backend.tokenizer(prefix["text"], add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_generation_is_egoplan_hfs_greedy_text(engine, servers, reference):
    server = servers(engine, "qwen2_vl")
    backend = server_backend(server, videos_as_frames=engine == "sglang")
    docs = [doc(4, video=engine == "vllm"), doc(5, video=engine == "vllm")]
    hf = reference("qwen2_vl")
    assert backend.generate_until(gen_requests(backend, docs)) == hf.generate_until(gen_requests(hf, docs))


def test_sglang_refuses_a_video_naming_the_model_arg_that_sends_its_frames(servers):
    backend = server_backend(servers("sglang", "qwen2_vl"))
    with pytest.raises(UnsupportedVisualError, match="videos_as_frames=true"):
        backend.loglikelihood(mc_requests(backend, [doc(0)]))


def test_vllm_sends_the_clips_frames_and_timing(servers):
    server = servers("vllm", "qwen2_5_vl")
    backend = server_backend(server)
    backend.loglikelihood(mc_requests(backend, [doc(0)]))
    _, body = server.requests[-1]
    # egoplan_hf's clip length, 8 * 724 / 7 source frames, made whole: frame numbers and rate x7, same times.
    assert body["media_io_kwargs"]["video"] == {"num_frames": 8, "fps": 30.0 * 7, "total_num_frames": 8 * 724,
                                                "frames_indices": [7 * i for i in CLIP_FRAMES], "duration": 724 / 30}
    assert body["prompt_logprobs"] == 0 and body["add_generation_prompt"] is False


def test_vllm_gets_a_clip_without_times_at_the_frame_rate_egoplan_hf_assumes(servers, reference):
    """Frames without times: transformers assumes 24 fps in egoplan_hf, vLLM 1 fps unless told; the
    backend tells it, so Qwen3-VL writes the same timestamps into the prompt."""
    server = servers("vllm", "qwen3_vl")
    backend = server_backend(server)
    docs = [doc(6, timed=False)]
    got = backend.loglikelihood(mc_requests(backend, docs))
    _, body = server.requests[-1]
    assert body["media_io_kwargs"]["video"] == {"num_frames": 8, "fps": 24.0, "frames_indices": list(range(8)),
                                                "total_num_frames": 8}
    assert_same_scores(got, reference("qwen3_vl").loglikelihood(mc_requests(reference("qwen3_vl"), docs)), 1)


def test_vllm_gets_frames_as_images_where_it_serves_the_model_without_video(servers, reference):
    """vLLM serves SmolVLM with images only (VLLM_MODALITIES): a clip goes as its frames."""
    server = servers("vllm", "smolvlm")
    backend = server_backend(server)
    backend.loglikelihood(mc_requests(backend, [doc(7, observation=False)]))
    _, body = server.requests[-1]
    parts = [part["type"] for part in body["messages"][0]["content"]]
    assert parts.count("image_url") == 8 and "video_url" not in parts and "media_io_kwargs" not in body


def test_vllm_llava_next_video_takes_a_clip_but_no_image(servers):
    """vLLM serves LLaVA-NeXT-Video with one video and no image: a question with an image is refused
    before any request, naming the limit; frames as images (videos_as_frames) are refused at load; the
    loopback server refuses an image as vLLM does."""
    server = servers("vllm", "llava_next_video")
    backend = server_backend(server)
    server.reset()
    with pytest.raises(UnsupportedVisualError,
                       match=r"1 image\(s\), and vLLM serves llava_next_video with 1 video\(s\)"):
        backend.loglikelihood(mc_requests(backend, [doc(8)]))
    assert server.requests == []
    with pytest.raises(ServerSetupError, match="videos_as_frames=true would send every video as images"):
        server_backend(server, videos_as_frames=True)
    image = {"type": "image_url", "image_url": {"url": png_data_url(index_image(1))}}
    with pytest.raises(ServerRequestError, match=r"HTTP 400: At most 0 image\(s\) may be provided in one prompt"):
        backend.engine.client.post("/v1/chat/completions", {"model": "tiny", "messages": [
            {"role": "user", "content": [image, {"type": "text", "text": "?"}]}]})


@pytest.mark.parametrize("arch,version,release", [("qwen2_5_vl", "0.30.0", "0.31.0 on \\(vllm PR 47736\\)"),
                                                  ("qwen2_vl", "0.19.1", "0.20.0 on \\(vllm PR 40133\\)")])
def test_a_vllm_that_drops_the_clips_timing_is_refused_a_video(arch, version, release, servers):
    backend = server_backend(servers("vllm", arch, version=version))
    with pytest.raises(UnsupportedVisualError, match=f"processor from release {release}; the server runs {version}"):
        backend.loglikelihood(mc_requests(backend, [doc(9)]))


def test_sglang_gets_token_ids_for_text_and_text_without_the_bos_its_tokenizer_adds(servers):
    """SGLang tokenizes text with the tokenizer's defaults: a text-only prompt goes as the suite's ids;
    a prompt with images as text, without the BOS Gemma 3's template writes (its tokenizer adds one)."""
    server = servers("sglang", "gemma3")
    backend = server_backend(server)
    server.reset()
    backend.loglikelihood(mc_requests(backend, [doc(10, video=False)]))
    [prefix, *candidates] = [body for _, body in server.requests]
    assert not prefix["text"].startswith("<bos>") and prefix["text"].startswith("<start_of_turn>user")
    server.reset()
    backend.loglikelihood(_with_visuals(mc_requests(backend, [doc(11)]), None))
    start = [backend.tokenizer.bos_token_id, backend.tokenizer.convert_tokens_to_ids("<start_of_turn>")]
    assert all("text" not in body and body["input_ids"][:2] == start for _, body in server.requests)


def test_a_text_prompt_with_two_bos_on_sglang_is_what_the_backend_no_longer_sends(servers):
    """The defect: SGLang's text path adds the tokenizer's BOS to the one the template wrote."""
    server = servers("sglang", "llama")
    backend = server_backend(server)
    probe = backend._prompt(ModelVisuals(), "What should I do next?", INPUT_ORDER.convention, "here")
    answer = backend.engine.client.post("/generate",
                                        {"text": probe.prefix_text, "sampling_params": {"max_new_tokens": 0},
                                                      "return_prompt_token_ids": True})
    assert answer["prompt_token_ids"] == [backend.tokenizer.bos_token_id, *probe.prefix_ids]


# ---------------------------------------------------------------------------------------------
# Load checks and a dying server
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_an_unreachable_server_is_named_at_load(engine, tiny_model):
    with pytest.raises(ServerSetupError, match="fix model_args base_url"):
        EgoPlanServer(engine=engine, base_url=f"http://127.0.0.1:{free_port()}", model="tiny",
                      pretrained=str(tiny_model("qwen2_vl")))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_model_the_server_does_not_serve_is_named_at_load(engine, servers):
    server = servers(engine, "qwen2_vl")
    with pytest.raises(ServerSetupError, match=r"serves \['tiny'\], not 'other'.*fix model_args model"):
        EgoPlanServer(engine=engine, base_url=server.base_url, model="other")
    assert server.requests == []  # nothing scored


def test_the_processor_defaults_to_the_served_model_folder(servers, tiny_model):
    backend = server_backend(servers("vllm", "qwen2_vl"))
    assert backend.pretrained == str(tiny_model("qwen2_vl"))


@pytest.mark.parametrize("options,message", [
    ({"version": "0.10.1.1"}, "runs vLLM 0.10.1.1; scoring needs vLLM 0.10.2 or later.*PR 22587"),
    ({"prompt_logprobs": False}, "did not return the prompt log-probabilities.*engine=vllm"),
])
def test_a_vllm_without_prompt_logprobs_is_refused_at_load(options, message, servers):
    with pytest.raises(ServerSetupError, match=message):
        server_backend(servers("vllm", "qwen2_vl", **options))


def test_a_plain_openai_endpoint_is_refused_at_load(tiny_model):
    with ChatServer(lambda call: Reply("hello"), model_name="tiny") as openai_like:
        with pytest.raises(ServerSetupError, match="does not answer GET /version"):
            EgoPlanServer(engine="vllm", base_url=openai_like.base_url, model="tiny",
                          pretrained=str(tiny_model("qwen2_vl")))


def test_a_server_with_another_chat_template_is_refused_at_load(servers, tiny_model):
    template = ("{% for m in messages %}{{ m['role'] }}: "
                "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}\n{% endfor %}")
    server = servers("vllm", "qwen2_vl", chat_template=template)
    with pytest.raises(ServerSetupError, match="other tokens than model_args pretrained's processor and chat template"):
        server_backend(server)


def test_an_sglang_server_of_a_text_only_model_is_refused_for_a_multimodal_processor(servers, tiny_model):
    with pytest.raises(ServerSetupError, match="without image input.*serve the model the task is scored with"):
        server_backend(servers("sglang", "llama"), pretrained=str(tiny_model("qwen2_vl")))


def test_an_sglang_gemma3_server_without_its_vision_tower_is_told_the_flag(servers):
    with pytest.raises(ServerSetupError, match="start the server with --enable-multimodal"):
        server_backend(servers("sglang", "gemma3", multimodal=False))


def test_a_server_dying_mid_run_keeps_every_question_it_scored(servers):
    server = servers("vllm", "qwen2_vl")
    backend = server_backend(server, concurrency=1)
    handed = []
    backend.response_sink = lambda request, response: handed.append((request.doc_id, response))
    server.die_after(2 * 4)  # two questions' candidates
    with pytest.raises(ServerRequestError, match="connection failed"):
        backend.loglikelihood(mc_requests(backend, [doc(seed) for seed in range(4)]))
    assert sorted(doc_id for doc_id, _ in handed) == [0] * 4 + [1] * 4


def test_bad_model_args_are_named(servers):
    server = servers("vllm", "qwen2_vl")
    with pytest.raises(Exception, match="unknown model_args concurency"):
        server_backend(server, concurency=2)
    with pytest.raises(Exception, match="engine must be one of sglang, vllm"):
        EgoPlanServer(engine="tgi", base_url=server.base_url, model="tiny")


@pytest.mark.parametrize("name,value,limit", [("timeout", 0, "greater than 0"), ("retries", -1, "at least 0"),
                                              ("backoff", -0.5, "at least 0"), ("recheck_after", -1, "at least 0"),
                                              ("wait_for_servers", -2, "at least 0"), ("concurrency", 0, "at least 1"),
                                              ("image_max_side", 0, "at least 1")])
def test_a_timeout_count_or_size_out_of_range_is_refused_before_any_server_is_asked(name, value, limit):
    """timeout=0 would fail every request, counted only once the run is over."""
    with pytest.raises(SettingsError, match=f"egoplan_server model_args {name} must be {limit}, got {value!r}"):
        EgoPlanServer(engine="vllm", model="tiny", base_url="http://127.0.0.1:9", **{"wait_for_servers": 0,
                                                                                   name: value})


@pytest.mark.parametrize("model_args,message", [({"model": "tiny"}, r"model_args engine=sglang\|vllm is required"),
                                                ({"engine": "vllm"},
                                                 "model_args model=<the served model name> is required")])
def test_a_missing_engine_or_model_is_named_with_its_choices(model_args, message):
    with pytest.raises(SettingsError, match=message):
        EgoPlanServer(**model_args)


# ---------------------------------------------------------------------------------------------
# Load checks that check: Gemma 3's image attention, truncation, tokenizers, keys, log-probabilities
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags,named", [
    ({}, r"attention backend is fa3, not triton; chunked prefill splits prompts \(8192 tokens per batch\)"),
    ({"attention_backend": "triton"}, r"chunked prefill splits prompts \(8192"),
    ({"chunked_prefill_size": -1}, "attention backend is fa3, not triton"),
    ({"attention_backend": "triton", "chunked_prefill_size": -1, "page_size": 16}, "matches pages of 16 tokens"),
])
def test_sglang_gemma3_is_refused_where_it_would_attend_to_images_causally(flags, named, tiny_model):
    """SGLang's H100 defaults (fa3, chunked prefill) and each partial fix: refused at load, naming the
    flags; the docs' flags (serving_flags) load (every other test of Gemma 3 on SGLang)."""
    with EngineServer("sglang", tiny_model("gemma3"), **flags) as server:
        with pytest.raises(ServerSetupError, match=f"{named}.*start it with --attention-backend triton "
                                                   f"--chunked-prefill-size -1 --page-size 1"):
            server_backend(server)
        assert server.requests == []


def test_sglang_gemma3_behind_a_router_is_checked_through_get_server_info(tiny_model):
    with EngineServer("sglang", tiny_model("gemma3")) as server, RouterProxy("sglang-gateway", [server]) as router:
        with pytest.raises(ServerSetupError, match="attention backend is fa3"):
            EgoPlanServer(engine="sglang", base_url=router.base_url, model="tiny", retries=0)


def test_an_sglang_server_that_truncates_prompts_is_refused_at_load(servers):
    with pytest.raises(ServerSetupError, match="started with --allow-auto-truncate"):
        server_backend(servers("sglang", "qwen2_vl", allow_auto_truncate=True))


@pytest.fixture(scope="module")
def foreign_tokenizer(tiny_model, tmp_path_factory):
    """The tiny Llama checkpoint with a tokenizer that splits words otherwise (its last 150 merges
    dropped): same special tokens and chat template, other ids for the same text."""
    import shutil

    folder = tmp_path_factory.mktemp("foreign") / "llama"
    shutil.copytree(tiny_model("llama"), folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"]["merges"] = tokenizer["model"]["merges"][:-150]
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    return folder


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_pretrained_with_another_tokenizer_is_refused_on_both_engines_text_only_included(engine, servers,
                                                                                            foreign_tokenizer):
    """SGLang runs a text-only prompt's ids as they are, so the ids alone would pass: the load check
    also has the server tokenize the probe's text."""
    server = servers(engine, "llama")
    with pytest.raises(ServerSetupError, match="other tokens than model_args pretrained's processor"):
        server_backend(server, pretrained=str(foreign_tokenizer))


def test_a_vllm_without_trust_request_mm_kwargs_is_named_at_load_not_at_the_first_video(servers):
    server = servers("vllm", "qwen2_vl", trust_request_mm_kwargs=False)
    with pytest.raises(ServerSetupError, match="refuses per-request media_io_kwargs.*--trust-request-mm-kwargs"):
        server_backend(server)
    server_backend(server, videos_as_frames=True)  # frames as images carry no media_io_kwargs


def test_a_vllm_returning_logits_is_refused_at_load(servers):
    with pytest.raises(ServerSetupError, match="returns logits, not log-probabilities.*--logprobs-mode"):
        server_backend(servers("vllm", "llama", logprobs_mode="raw_logits"))


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_server_with_an_api_key_takes_it_from_the_variable_named_in_api_key_env(engine, servers, monkeypatch):
    server = servers(engine, "qwen2_vl", api_key="sk-loopback-secret")
    with pytest.raises(ServerSetupError, match="refuses requests without its API key.*api_key_env=<variable>"):
        server_backend(server)
    monkeypatch.setenv("LOOPBACK_KEY", "sk-wrong")
    with pytest.raises(ServerSetupError, match="refuses the API key of model_args api_key_env"):
        server_backend(server, api_key_env="LOOPBACK_KEY")
    monkeypatch.setenv("LOOPBACK_KEY", "sk-loopback-secret")
    backend = server_backend(server, api_key_env="LOOPBACK_KEY", videos_as_frames=engine == "sglang")
    assert len(backend.loglikelihood(mc_requests(backend, [doc(12, video=engine == "vllm")]))) == 4
    with pytest.raises(SettingsError, match="LOOPBACK_MISSING, which is not set"):
        server_backend(server, api_key_env="LOOPBACK_MISSING")
    with pytest.raises(SettingsError, match="api_key is not taken.*api_key_env=<variable>"):
        server_backend(server, api_key="sk-loopback-secret")


@pytest.fixture(scope="module")
def mistral_format(tiny_model, tmp_path_factory):
    """The tiny Mistral 3 checkpoint as the released Mistral-Small-3.1 repositories hold it: the
    transformers files and Mistral's own (consolidated weights, params.json, tekken.json)."""
    import shutil

    folder = tmp_path_factory.mktemp("mistral_format") / "mistral3"
    shutil.copytree(tiny_model("mistral3"), folder)
    shutil.copy(folder / "model.safetensors", folder / "consolidated.safetensors")
    (folder / "params.json").write_text(json.dumps({"dim": 32, "n_layers": 2}))
    (folder / "tekken.json").write_text(json.dumps({"config": {}}))
    return folder


def test_a_mistral_format_repository_on_vllm_is_named_with_the_two_flags(servers, mistral_format):
    """A vLLM that serves it with its Mistral tokenizer renders the probe otherwise (played here by
    another chat template); the error names what makes vLLM serve the transformers files."""
    template = ("{% for m in messages %}[{{ m['role'] }}]"
                "{% for p in m['content'] %}{{ p['text'] }}{% endfor %}{% endfor %}")
    server = servers("vllm", "mistral3", chat_template=template)
    with pytest.raises(ServerSetupError, match="Mistral-format repository.*--tokenizer-mode hf --config-format hf"):
        server_backend(server, pretrained=str(mistral_format))
    assert mistral_format_flags(str(mistral_format)) == ["--tokenizer-mode hf", "--config-format hf"]


def test_a_processor_folder_without_the_models_config_is_said_to_leave_the_architectures_checks_out(
        tiny_model, tmp_path):
    """Without config.json the engine's per-prompt limits and deviations of the architecture went unchecked,
    silently."""
    import shutil

    import lmms_eval.evaluator  # noqa: F401 (its import, in the backend's, removes loguru's handlers: done before)

    folder = tmp_path / "processor-only"
    shutil.copytree(tiny_model("qwen2_vl"), folder)
    (folder / "config.json").unlink()
    said = []
    sink = logger.add(lambda message: said.append(message.record["message"]), level="WARNING")
    try:
        with EngineServer("vllm", tiny_model("qwen2_vl")) as server:
            server_backend(server, pretrained=str(folder))
    finally:
        logger.remove(sink)
    assert [line for line in said if "gives no model config" in line] == [
        f"egoplan_server: {folder} gives no model config (ValueError), so the architecture is not known: its engine's "
        f"per-prompt media limits and known deviations are not checked; pass the served model's folder as model_args "
        f"pretrained"]


# ---------------------------------------------------------------------------------------------
# Generation parity: the model's sampling defaults, the context
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def penalised(tiny_model, tmp_path_factory):
    """The tiny Qwen2-VL with a repetition penalty in its generation_config (as Qwen2.5-VL-Instruct's
    sets 1.05), strong enough to change the tiny model's greedy text."""
    import shutil

    folder = tmp_path_factory.mktemp("penalised") / "qwen2_vl"
    shutil.copytree(tiny_model("qwen2_vl"), folder)
    config = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 3.0}))
    return folder


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_generation_carries_the_models_sampling_defaults_as_egoplan_hf_applies_them(engine, penalised):
    docs = [doc(13, video=engine == "vllm"), doc(14, video=engine == "vllm")]
    hf = EgoPlanHF(pretrained=str(penalised), device="cpu", dtype="float32", max_frames=8)
    expected = hf.generate_until(long_generations(hf, docs))
    with EngineServer(engine, penalised) as server:
        backend = server_backend(server, videos_as_frames=engine == "sglang")
        assert backend.generate_until(long_generations(backend, docs)) == expected
        bodies = [body for _, body in server.requests[-2:]]
        assert all((body["sampling_params"] if engine == "sglang" else body)["repetition_penalty"] == 3.0
                   for body in bodies)
        backend.sampling_defaults = {}  # what SGLang's /generate applied without them: another text
        assert backend.generate_until(long_generations(backend, docs)) != expected or engine == "vllm"


def long_generations(backend, docs: list[dict], max_new_tokens: int = 24) -> list[SuiteInstance]:
    requests = gen_requests(backend, docs)
    for request in requests:
        request.arguments = (request.arguments[0], {"max_new_tokens": max_new_tokens, "until": []},
                             *request.arguments[2:])
    return requests


@pytest.mark.parametrize("engine,video", [("sglang", False), ("sglang", True), ("vllm", True)])
def test_a_prompt_near_the_context_shortens_max_new_tokens_as_egoplan_hf_does(engine, video, tiny_model, caplog):
    """A context only a little longer than the prompt: egoplan_hf (max_length) and both engines cut
    max_new_tokens to what fits, with the same text; SGLang's refusal of a prompt with images (whose
    expanded length the suite does not know) is answered by a prefill that measures it."""
    arch = "qwen2_vl"
    docs = [doc(15, video=False, observation=video)]
    hf = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32", max_frames=8)
    hf.task_dict = {TASK: {SPLIT: docs}}
    prompt_visuals = hf._doc_visuals((TASK, SPLIT, 0, visuals if video else None))
    prompt = hf.chat.generation_prompt(hf.chat.user_turn(prompt_visuals.parts, docs[0]["question"]))
    prompt_length = hf._encode([prompt], [prompt_visuals], "the context")["input_ids"].shape[1]
    hf.max_length = prompt_length + 5
    expected = hf.generate_until(_with_visuals(long_generations(hf, docs, 40), visuals if video else None))
    sink = logger.add(caplog.handler, level="WARNING", format="{message}")  # the backends log through loguru
    try:
        with EngineServer(engine, tiny_model(arch), context_length=prompt_length + 5) as server:
            backend = server_backend(server)
            got = backend.generate_until(_with_visuals(long_generations(backend, docs, 40), visuals if video else None))
    finally:
        logger.remove(sink)
    assert got == expected
    assert "max_new_tokens 40 cut to 5" in caplog.text or engine == "vllm"


# ---------------------------------------------------------------------------------------------
# Several servers, and routers in front of them
# ---------------------------------------------------------------------------------------------


def questions_on(servers_used: list[EngineServer]) -> dict[str, set[int]]:
    """Per question (its text, answer turn left out), the servers that got its scoring requests."""
    seen: dict[str, set[int]] = {}
    for index, server in enumerate(servers_used):
        for _, body in server.requests:
            key = body.get("text") or json.dumps(body.get("messages", [body.get("input_ids")])[0])
            seen.setdefault(key.split("Task goal")[-1][:60], set()).add(index)
    return seen


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_several_servers_share_the_questions_each_with_all_its_candidates(engine, tiny_model, reference):
    arch = "qwen2_vl"
    docs = [doc(20 + i, video=engine == "vllm") for i in range(6)]
    started = [EngineServer(engine, tiny_model(arch)).start() for _ in range(3)]
    try:
        backend = EgoPlanServer(engine=engine, base_urls=f"[{','.join(s.base_url for s in started)}]", model="tiny",
                                max_frames=8, retries=0, concurrency=1, videos_as_frames=engine == "sglang")
        for server in started:
            server.reset()
        got = backend.loglikelihood(mc_requests(backend, docs))
        assert_same_scores(got, reference(arch).loglikelihood(mc_requests(reference(arch), docs)), len(docs))
        assert all(server.requests for server in started)  # every server scored some
        assert all(len(on) == 1 for on in questions_on(started).values())  # each question on one server
    finally:
        for server in started:
            server.close()


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_server_killed_mid_run_loses_nothing_and_scores_nothing_twice(engine, tiny_model, reference):
    """One of three servers stops answering after two requests of the scoring pass: its question
    goes to the others; every question is handed over once, with egoplan_hf's values."""
    arch = "qwen2_vl"
    docs = [doc(30 + i, video=engine == "vllm") for i in range(6)]
    started = [EngineServer(engine, tiny_model(arch)).start() for _ in range(3)]
    try:
        backend = EgoPlanServer(engine=engine, base_urls=[s.base_url for s in started], model="tiny", max_frames=8,
                                retries=1, backoff=0.01, concurrency=1, videos_as_frames=engine == "sglang")
        handed = []
        backend.response_sink = lambda request, response: handed.append((request.doc_id, request.idx, response))
        started[1].die_after(2)
        got = backend.loglikelihood(mc_requests(backend, docs))
        assert sorted((doc_id, idx) for doc_id, idx, _ in handed) == [(d, i) for d in range(6) for i in range(4)]
        assert [response for _, _, response in handed] == [got[4 * d + i] for d, i, _ in handed]
        assert_same_scores(got, reference(arch).loglikelihood(mc_requests(reference(arch), docs)), len(docs))
        assert backend.servers._live == [backend.servers.engines[0], backend.servers.engines[2]]
    finally:
        for server in started:
            server.close()


def test_when_every_server_is_gone_the_run_stops_with_the_error(tiny_model):
    started = [EngineServer("vllm", tiny_model("llama")).start() for _ in range(2)]
    try:
        backend = EgoPlanServer(engine="vllm", base_urls=[s.base_url for s in started], model="tiny", retries=0)
        for server in started:
            server.die_after(0)
        with pytest.raises(ServerRequestError, match="connection failed"):
            backend.loglikelihood(_with_visuals(mc_requests(backend, [doc(40, video=False, observation=False)]), None))
    finally:
        for server in started:
            server.close()


@pytest.mark.parametrize("kind,engine", [("sglang-gateway", "sglang"), ("vllm-dp", "vllm")])
def test_the_backend_scores_through_a_router_that_passes_only_what_routers_pass(kind, engine, tiny_model, reference):
    """Two servers behind SGLang's model gateway (its /get_model_info and /get_server_info, /generate
    bodies re-serialized: return_prompt_token_ids dropped) or a vLLM data-parallel API server, each
    request to the next server in turn (the candidates of one question on different servers):
    loaded, checked and scored as egoplan_hf scores; images included."""
    arch = "gemma3" if engine == "sglang" else "qwen2_vl"
    docs = [doc(50 + i, **question_shape(engine, arch)) for i in range(2)]
    upstreams = [EngineServer(engine, tiny_model(arch), **serving_flags(engine, arch)).start() for _ in range(2)]
    try:
        with RouterProxy(kind, upstreams) as router:
            backend = EgoPlanServer(engine=engine, base_url=router.base_url, model="tiny", max_frames=8, retries=0)
            got = backend.loglikelihood(mc_requests(backend, docs))
            assert all(upstream.requests for upstream in upstreams)
            if engine == "sglang":
                assert not any("return_prompt_token_ids" in body for _, body in router.posts)
        assert_same_scores(got, reference(arch).loglikelihood(mc_requests(reference(arch), docs)), len(docs))
    finally:
        for upstream in upstreams:
            upstream.close()


def test_base_url_and_base_urls_are_not_both_taken(servers):
    with pytest.raises(SettingsError, match="base_url .*or base_urls"):
        server_backend(servers("vllm", "llama"), base_urls="[http://127.0.0.1:1]")
    with pytest.raises(SettingsError, match="distinct servers"):
        EgoPlanServer(engine="vllm", base_urls="[http://a:1,http://a:1]", model="tiny")
