"""The released engines' own request code, run on the tiny checkpoints without an engine (no GPU).

``EngineCode("vllm" | "sglang")`` starts ``python -m tests.models.engine_code <engine>``
with the engine's own folder first on its path (``.ci/install-engines`` installs vllm 0.33.0 and
sglang 0.5.23 there ``--no-deps``, pinned, with the few pure-Python packages and the transformers
release each pins; the suite's environment gives torch), and asks it, one JSON line at a time:

* ``load(checkpoint, **server_options)``: start serving the checkpoint as the server would (vLLM:
  the ``OnlineRenderer`` its CPU-only render server builds, ``vllm launch render``, with the engine
  arguments given; SGLang: the ``TokenizerManager``'s model config, tokenizer and multimodal
  processor). Returns the server's view of the model: vLLM's per-model modality limits
  (``get_supported_mm_limits``); SGLang's ``GET /model_info`` fields (``has_image_understanding``,
  ...), its multimodal processor and the ``GET /server_info`` fields the backend reads, built by
  the function that endpoint calls (``utils/common.py`` ``build_server_info``).
* ``request(body)``: what the server makes of one request body, through its own request model and
  preprocessing: ``{"status": 200, "token_ids": [...]}`` (the ids the engine runs, visual
  placeholders expanded by its own multimodal processor) or ``{"status": 400, "error": message}``
  where its validation refuses the body. Both return the positions the model fills with visual
  embeddings (``embedded``). vLLM also returns each video's ``second_per_grid_ts`` (Qwen2.5-VL's
  time per temporal patch). SGLang's ``token_ids`` are those its tokenization stage reports as
  ``prompt_token_ids``; for a request with media, its scheduler's next step runs too, the model's
  ``pad_input_ids`` (``managers/scheduler.py`` 3200-3226): ``padded_ids`` are the ids the model
  runs, ``embedded`` the positions holding an item's pad value (its embeddings go there,
  ``managers/mm_utils.py`` ``embed_mm_inputs``) or, for the transformers backend, whose
  ``pad_input_ids`` keeps the ids, the image / video token's; ``items`` each media item's
  modality, positions and (``features=True``) pixel values.
* ``command(arguments)``: a server command line's options, parsed by the engine's own parser
  (``vllm serve``'s, ``sglang.launch_server``'s): ``{"status": 0}`` or ``{"status": 2, "error": ...}``.
* ``response(answer)``: a response body in the engine's own response shape (vLLM: the
  ``ChatCompletionResponse`` model, validated and dumped; SGLang: ``meta_info``'s
  ``input_token_logprobs`` / ``input_top_logprobs`` as its ``TokenizerManager`` formats the
  scheduler's values and ids).

What is not run: the engines' models (their forward passes: attention masks, embeddings, the
log-probabilities) and schedulers, other than SGLang's ``pad_input_ids``. That is called on an
instance of the model class built on CPU without weights where it reads the model's configuration
(the LLaVA family: LLaVA-1.5, Mistral 3); the others read only the request's items and are called
on an instance with nothing built. SGLang 0.5.23 cannot build llava-hf's LLaVA-1.5 as released:
its registry has no ``CLIPVisionModel`` (``models/clip.py`` registers only ``CLIPModel``), so the
vision tower resolves to the transformers backend, which fails on a vision config
(``models/llava.py`` 782-792, ``models/transformers.py`` 632-636); to run ``pad_input_ids`` here,
SGLang's own ``CLIPVisionModel`` (``models/clip.py`` 492) is registered for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

ENGINE_PACKAGES = {"vllm": "vllm", "sglang": "sglang"}
SERVED_MODEL_NAME = "tiny"
# Where .ci/install-engines puts each engine's folder (LMMS_EGOPLAN_ENGINES overrides it).
CHECKOUT = Path(__file__).resolve().parents[2]
DEFAULT_ENGINES_DIR = CHECKOUT / ".engines"


def engines_dir() -> Path:
    return Path(os.environ.get("LMMS_EGOPLAN_ENGINES") or DEFAULT_ENGINES_DIR)


def installed(engine: str) -> bool:
    """Whether the engine's folder holds its package (``.ci/install-engines``)."""
    return (engines_dir() / engine / ENGINE_PACKAGES[engine] / "__init__.py").is_file()


class EngineCodeError(RuntimeError):
    """The engine's process failed outside a request (import, load)."""


class EngineCode:
    """One engine's code in a subprocess of its own; ``load`` and ``request`` as above."""

    def __init__(self, engine: str, log_path: str | os.PathLike):
        if not installed(engine):
            raise EngineCodeError(f"{engine} is not installed in {engines_dir() / engine}: run .ci/install-engines")
        self.engine = engine
        self.log_path = Path(log_path)
        # The checkout on the path: this module runs as ``tests.models.engine_code`` from any folder.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(engines_dir() / engine), str(CHECKOUT),
                                                            *filter(None, [os.environ.get("PYTHONPATH")])]),
               # vLLM picks its CPU platform from this (its wheel is a CUDA build).
               "VLLM_TARGET_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false"}
        self._log = open(self.log_path, "w")  # noqa: SIM115 -- open for the process's lifetime
        self._process = subprocess.Popen([sys.executable, "-m", __name__, engine],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                         env=env)
        self._lock = threading.Lock()

    def load(self, checkpoint: str | os.PathLike, **server_options) -> dict:
        return self._call({"op": "load", "checkpoint": str(checkpoint), "options": server_options})

    def request(self, body: dict, *, features: bool = False) -> dict:
        return self._call({"op": "request", "body": body, **({"features": True} if features else {})})

    def mistral_format(self, folder: str | os.PathLike) -> dict:
        return self._call({"op": "mistral_format", "body": str(folder)})

    def response(self, answer: dict) -> dict:
        return self._call({"op": "response", "body": answer})

    def command(self, arguments: list[str]) -> dict:
        return self._call({"op": "command", "body": arguments})

    def _call(self, message: dict) -> dict:
        with self._lock:
            self._process.stdin.write(json.dumps(message) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        if not line:
            raise EngineCodeError(f"the {self.engine} process ended: {self._log_tail()}")
        answer = json.loads(line)
        if "failure" in answer:
            raise EngineCodeError(f"{self.engine} {message['op']}: {answer['failure']}")
        return answer

    def _log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text()[-3000:]

    def close(self) -> None:
        self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


# ----------------------------------------------------------------------------------------------
# Inside the engine's process
# ----------------------------------------------------------------------------------------------


class _VLLM:
    """vLLM 0.33.0's chat-completions preprocessing: ``ChatCompletionRequest``, then the
    ``OnlineRenderer`` that ``vllm serve`` and ``vllm launch render`` build
    (``entrypoints/launchers/render/app_state.py``): chat template, tokenization, media decoding
    (``media_io_kwargs``), per-prompt modality limits and the model's multimodal processor."""

    def __init__(self):
        from vllm.model_executor.models import registry

        # vLLM inspects a model class in a subprocess only to keep CUDA uninitialised in the server;
        # the result is the same here, without a second interpreter per architecture.
        registry._run_in_subprocess = lambda function: function()
        self.renderer = None

    def load(self, checkpoint: str, trust_request_mm_kwargs: bool = True, dtype: str = "float32",
             **engine_args) -> dict:
        from vllm import envs
        from vllm.config import VllmConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm.renderers import renderer_from_config
        from vllm.renderers.online_renderer import OnlineRenderer

        # The tiny checkpoints' dtype (vLLM's CPU default is bfloat16, which rounds the processors' tensors).
        arguments = AsyncEngineArgs(model=checkpoint, served_model_name=[SERVED_MODEL_NAME], dtype=dtype, **engine_args)
        model_config = arguments.create_model_config()
        model_config.quantization = None  # as the render server: preprocessing only
        envs.VLLM_CPU_KVCACHE_SPACE = 0
        config = VllmConfig(model_config=model_config,
                            structured_outputs_config=arguments.create_structured_outputs_config())
        self.renderer = OnlineRenderer(model_config=model_config, renderer=renderer_from_config(config),
                                       request_logger=None, chat_template=None, chat_template_content_format="auto",
                                       trust_request_mm_kwargs=trust_request_mm_kwargs)
        limits = (MULTIMODAL_REGISTRY.create_processor(model_config).info.get_supported_mm_limits()
                  if model_config.is_multimodal_model else {})
        return {"modalities": dict(limits), "architectures": list(model_config.architectures),
                "tokenizer_mode": model_config.tokenizer_mode, "config_format": str(model_config.config_format)}

    @staticmethod
    def mistral_format(folder: str) -> dict:
        """What vLLM's own detection makes of a folder: a Mistral-format repository (its Mistral
        tokenizer, ``tokenizers/registry.py`` 145-161; its Mistral config, ``transformers_utils/config.py``
        889-899) under ``--tokenizer-mode auto`` / ``--config-format auto``."""
        from vllm.transformers_utils.config import MISTRAL_CONFIG_NAME
        from vllm.transformers_utils.repo_utils import (
            any_pattern_in_repo_files,
            file_or_path_exists,
            is_mistral_model_repo,
        )

        mistral = is_mistral_model_repo(model_name_or_path=folder)
        return {"tokenizer": mistral and any_pattern_in_repo_files(model_name_or_path=folder,
                                                                   allow_patterns=["tekken.json",
                                                                                   "tokenizer.model.v*"]),
                "config": mistral and file_or_path_exists(model=folder, config_name=MISTRAL_CONFIG_NAME, revision=None)}

    async def request(self, body: dict) -> dict:
        from pydantic import ValidationError
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.exceptions import VLLMClientError

        try:
            request = ChatCompletionRequest.model_validate(body)
            rendered = await self.renderer.render_chat(request, skip_mm_cache=True)  # every item processed
        except (ValidationError, VLLMClientError, ValueError, TypeError) as error:  # the server answers these with 400
            return {"status": 400, "error": str(error)}
        if not isinstance(rendered, tuple):  # an ErrorResponse
            return {"status": rendered.error.code, "error": rendered.error.message}
        [engine_input] = rendered[1]
        embedded = sorted(placeholder.offset + index
                          for ranges in (engine_input.get("mm_placeholders") or {}).values() for placeholder in ranges
                          for index in range(placeholder.length)
                          if placeholder.is_embed is None or bool(placeholder.is_embed[index]))
        answer = {"status": 200, "token_ids": list(engine_input["prompt_token_ids"]), "embedded": embedded}
        videos = (engine_input.get("mm_kwargs") or {}).get("video") or []
        seconds = [float(item["second_per_grid_ts"].data) for item in videos if "second_per_grid_ts" in item]
        if seconds:
            answer["second_per_grid_ts"] = seconds
        return answer

    @staticmethod
    def command(arguments: list[str]) -> dict:
        """``vllm serve MODEL OPTIONS...``'s options (``arguments``: MODEL first), by its parser and checks."""
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        def parse():
            validate_parsed_serve_args(make_arg_parser(FlexibleArgumentParser()).parse_args(
                ["--model", *arguments[:1], *arguments[1:]]))

        return _parsed(parse)

    def response(self, answer: dict) -> dict:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse

        return ChatCompletionResponse.model_validate(answer).model_dump(mode="json", exclude_unset=True)


class _SGLang:
    """SGLang 0.5.23's ``/generate`` preprocessing: ``GenerateReqInput``, then the
    ``TokenizerManager``'s tokenization (``_tokenize_one_request``: ``_tokenize_texts`` for text,
    the multimodal processor for media, the request checks) and ``SamplingParams`` checks, with the
    server arguments published as ``launch_server`` publishes them."""

    def __init__(self):
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
        from sglang.srt.sampling.sampling_params import SamplingParams

        class Tokenization(TokenizerManager):
            """The manager's model, tokenizer and processor set-up, without its sockets and workers."""

            def __init__(self, server_args):  # noqa: D107 -- TokenizerManager.__init__'s first steps
                self.server_args = server_args
                self.allow_auto_truncate = False
                self.init_model_config()
                self.init_tokenizer_and_processor()
                self.max_req_input_len = self.context_len

            def _create_tokenized_object(self, obj, input_text, input_ids, input_embeds=None, mm_inputs=None, *rest):
                sampling = SamplingParams(**obj.sampling_params)
                sampling.normalize(self.tokenizer)
                sampling.verify(self.model_config.vocab_size)
                return input_ids, mm_inputs

        self.tokenization_class = Tokenization
        self.manager = None
        self.pad_input_ids = None
        self._parallel_groups = False

    def load(self, checkpoint: str, **options) -> dict:
        from sglang.srt.entrypoints.engine import publish, resolve_auto_parsers
        from sglang.srt.server_args import ServerArgs
        from sglang.srt.utils.common import build_server_info

        server_args = ServerArgs(model_path=checkpoint, device="cpu", served_model_name=SERVED_MODEL_NAME, **options)
        server_args.resolve_once()
        resolve_auto_parsers(server_args)
        publish(server_args, role="tokenizer")
        self.manager = self.tokenization_class(server_args)
        config = self.manager.model_config
        processor = self.manager.mm_processor
        self.pad_input_ids = self._pad_function(server_args, config) if config.is_multimodal else None
        info = build_server_info(server_args, {})
        return {"has_image_understanding": bool(config.is_image_understandable_model),
                "model_type": config.hf_config.model_type, "architectures": list(config.hf_config.architectures),
                "processor": type(getattr(processor, "inner", processor)).__name__ if processor else None,
                "server_info": {key: info.get(key) for key in SGLANG_SERVER_INFO_KEYS}}

    def _pad_function(self, server_args, config):
        """The model class's ``pad_input_ids`` (see the module's docstring for how it is built)."""
        from sglang.srt.models.llava import LlavaBaseForCausalLM
        from sglang.srt.models.registry import ModelRegistry

        model_class, _ = ModelRegistry.resolve_model_cls(config.hf_config.architectures)
        if not issubclass(model_class, LlavaBaseForCausalLM):  # the transformers backend has none: ids kept
            pad = getattr(model_class, "pad_input_ids", None)
            return pad.__get__(object.__new__(model_class)) if pad else lambda input_ids, mm_inputs: input_ids
        import sglang.srt.layers.rotary_embedding.base as rotary
        from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
        from sglang.srt.entrypoints.engine import publish
        from sglang.srt.models.clip import CLIPVisionModel
        from sglang.srt.runtime_context import SpawnRanks

        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, gpu_id=None))
        if not self._parallel_groups:
            init_distributed_environment(backend="gloo", world_size=1, rank=0, local_rank=0,
                                         distributed_init_method=f"tcp://127.0.0.1:{_free_port()}")
            initialize_model_parallel(backend="gloo")
            self._parallel_groups = True
        ModelRegistry.models.setdefault("CLIPVisionModel", CLIPVisionModel)  # missing in 0.5.23 (docstring)
        rotary._is_cpu = True  # the CPU rotary path: the fallback kernel it would import is vLLM's
        return model_class(config.hf_config).pad_input_ids

    async def request(self, body: dict, features: bool = False) -> dict:
        from sglang.srt.managers.io_struct import GenerateReqInput

        try:
            request = GenerateReqInput(**body)
            request.normalize_batch_and_arguments()
            ids, mm_inputs = await self.manager._tokenize_one_request(request)
        except (ValueError, TypeError) as error:  # the server answers these with 400
            return {"status": 400, "error": str(error)}
        answer = {"status": 200, "token_ids": list(ids)}
        if mm_inputs is not None:
            answer.update(self._padded(ids, mm_inputs, features))
        return answer

    def _padded(self, ids, mm_inputs, features: bool) -> dict:
        """The scheduler's next steps for a request with media (``managers/scheduler.py`` 3200-3226)."""
        from array import array

        from sglang.srt.managers.mm_utils import duplicate_pad_mm_input_ids
        from sglang.srt.managers.schedule_batch import MultimodalInputs

        inputs = MultimodalInputs.from_processor_output(
            mm_inputs, requires_mm_token_modalities=self.manager.model_config.requires_mm_token_modalities)
        padded = list(duplicate_pad_mm_input_ids(array("q", ids), inputs, self.pad_input_ids))
        items = inputs.mm_items
        values = [set(item.padding_values()) for item in items]  # the values an item's positions cycle through
        markers = set().union(*values)
        if padded == list(ids):  # the transformers backend: the model scatters into the media tokens
            markers = {token for token in (inputs.im_token_id, inputs.video_token_id) if token is not None}
        described = [{"modality": item.modality.name, "positions": sum(token in item_values for token in padded)}
                     for item, item_values in zip(items, values)]
        if features:
            for entry, item in zip(described, items):
                entry["features"] = np.asarray(item.feature, dtype=np.float32).tolist()
        return {"padded_ids": padded, "embedded": [i for i, token in enumerate(padded) if token in markers],
                "items": described}

    @staticmethod
    def command(arguments: list[str]) -> dict:
        """``python -m sglang.launch_server OPTIONS...``'s options, by its parser (``ServerArgs.add_cli_args``)."""
        import argparse

        from sglang.srt.server_args import ServerArgs

        parser = argparse.ArgumentParser(prog="sglang.launch_server")
        ServerArgs.add_cli_args(parser)
        return _parsed(lambda: parser.parse_args(arguments))

    def response(self, answer: dict) -> dict:
        """``meta_info``'s prompt log-probabilities as SGLang formats the scheduler's values and ids
        (``add_logprob_to_meta_info``, without text: ``return_text_in_logprobs`` is off by default)."""
        meta = answer["meta_info"]
        entries, tops = meta["input_token_logprobs"], meta.get("input_top_logprobs") or []
        formatted = {"input_token_logprobs": self.manager.detokenize_logprob_tokens(
            [entry[0] for entry in entries], [entry[1] for entry in entries], False)}
        if tops:
            formatted["input_top_logprobs"] = self.manager.detokenize_top_logprobs_tokens(
                [[e[0] for e in top] if top else None for top in tops],
                [[e[1] for e in top] if top else None for top in tops], False)
        return json.loads(json.dumps(formatted))


# The GET /server_info fields egoplan_server reads (engines.SGLangEngine).
SGLANG_SERVER_INFO_KEYS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                           "chunked_prefill_size", "page_size", "allow_auto_truncate")


def _free_port() -> int:
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return listener.getsockname()[1]


def _parsed(parse) -> dict:
    """An argparse run: status 0, or argparse's exit status with what it printed."""
    import contextlib
    import io

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parse()
    except SystemExit as stop:
        return {"status": stop.code, "error": errors.getvalue()[-500:]}
    except ValueError as error:  # vLLM's own checks of the parsed options
        return {"status": 2, "error": str(error)}
    return {"status": 0}


def _serve(engine: str) -> None:
    # Engines log to stdout; the answers keep the original stdout to themselves.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    code = {"vllm": _VLLM, "sglang": _SGLang}[engine]()
    loop = asyncio.new_event_loop()
    for line in sys.stdin:
        message = json.loads(line)
        try:
            if message["op"] == "load":
                answer = code.load(message["checkpoint"], **message["options"])
            elif message["op"] in ("response", "command", "mistral_format"):
                answer = getattr(code, message["op"])(message["body"])
            else:
                answer = loop.run_until_complete(code.request(message["body"], **({"features": True}
                                                                                  if message.get("features") else {})))
        except Exception as error:  # noqa: BLE001 -- reported to the test, which fails with it
            answer = {"failure": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
