"""The released engines' own request code, run on the tiny checkpoints without an engine (no GPU).

``EngineCode("vllm" | "sglang")`` starts ``python -m tests.models.engine_code <engine>``
with the engine's own folder first on its path (``.ci/install-engines`` installs vllm 0.33.0 and
sglang 0.5.23 there ``--no-deps``, pinned, with the few pure-Python packages and the transformers
release each pins; the suite's environment gives torch), and asks it, one JSON line at a time:

* ``load(checkpoint, **server_options)``: start serving the checkpoint as the server would (vLLM:
  the ``OnlineRenderer`` its CPU-only render server builds, ``vllm launch render``; SGLang: the
  ``TokenizerManager``'s model config, tokenizer and multimodal processor). Returns the server's
  view of the model: vLLM's per-model modality limits (``get_supported_mm_limits``); SGLang's
  ``GET /model_info`` fields (``has_image_understanding``, ...) and its multimodal processor.
* ``request(body)``: what the server makes of one request body, through its own request model and
  preprocessing: ``{"status": 200, "token_ids": [...]}`` (the ids the engine runs, visual
  placeholders expanded by its own multimodal processor) or ``{"status": 400, "error": message}``
  where its validation refuses the body. vLLM also returns the positions its visual embeddings
  take (``embedded``) and each video's ``second_per_grid_ts`` (Qwen2.5-VL's time per temporal
  patch); SGLang's ids are those its tokenization stage reports as ``prompt_token_ids``.
* ``command(arguments)``: a server command line's options, parsed by the engine's own parser
  (``vllm serve``'s, ``sglang.launch_server``'s): ``{"status": 0}`` or ``{"status": 2, "error": ...}``.
* ``response(answer)``: a response body in the engine's own response shape (vLLM: the
  ``ChatCompletionResponse`` model, validated and dumped; SGLang: ``meta_info``'s
  ``input_token_logprobs`` / ``input_top_logprobs`` as its ``TokenizerManager`` formats the
  scheduler's values and ids).

What is not run: the engines' models (the scheduler-side steps, such as SGLang's ``pad_input_ids``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

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

    def request(self, body: dict) -> dict:
        return self._call({"op": "request", "body": body})

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

    def load(self, checkpoint: str, trust_request_mm_kwargs: bool = True, dtype: str = "float32") -> dict:
        from vllm import envs
        from vllm.config import VllmConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm.renderers import renderer_from_config
        from vllm.renderers.online_renderer import OnlineRenderer

        # The tiny checkpoints' dtype (vLLM's CPU default is bfloat16, which rounds the processors' tensors).
        arguments = AsyncEngineArgs(model=checkpoint, served_model_name=[SERVED_MODEL_NAME], dtype=dtype)
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
        return {"modalities": dict(limits), "architectures": list(model_config.architectures)}

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

            def _create_tokenized_object(self, obj, input_text, input_ids, *rest):
                sampling = SamplingParams(**obj.sampling_params)
                sampling.normalize(self.tokenizer)
                sampling.verify(self.model_config.vocab_size)
                return input_ids

        self.tokenization_class = Tokenization
        self.manager = None

    def load(self, checkpoint: str, **options) -> dict:
        from sglang.srt.entrypoints.engine import publish, resolve_auto_parsers
        from sglang.srt.server_args import ServerArgs

        server_args = ServerArgs(model_path=checkpoint, device="cpu", served_model_name=SERVED_MODEL_NAME, **options)
        server_args.resolve_once()
        resolve_auto_parsers(server_args)
        publish(server_args, role="tokenizer")
        self.manager = self.tokenization_class(server_args)
        config = self.manager.model_config
        processor = self.manager.mm_processor
        return {"has_image_understanding": bool(config.is_image_understandable_model),
                "model_type": config.hf_config.model_type, "architectures": list(config.hf_config.architectures),
                "processor": type(getattr(processor, "inner", processor)).__name__ if processor else None}

    async def request(self, body: dict) -> dict:
        from sglang.srt.managers.io_struct import GenerateReqInput

        try:
            request = GenerateReqInput(**body)
            request.normalize_batch_and_arguments()
            ids = await self.manager._tokenize_one_request(request)
        except (ValueError, TypeError) as error:  # the server answers these with 400
            return {"status": 400, "error": str(error)}
        return {"status": 200, "token_ids": list(ids)}

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
            elif message["op"] in ("response", "command"):
                answer = getattr(code, message["op"])(message["body"])
            else:
                answer = loop.run_until_complete(code.request(message["body"]))
        except Exception as error:  # noqa: BLE001 -- reported to the test, which fails with it
            answer = {"failure": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
