"""The inference servers ``egoplan_server`` scores and generates with: SGLang and vLLM, over HTTP.

Each engine turns a question (the suite's chat rendering and visuals, see ``egoplan_server``) into
the requests its server documents, and reports per scored position the log-probability the server
computed and the token ids it ran (visual placeholders expanded), so that the backend locates the
scored span in the server's own ids. docs/backend.md cites the engines' sources for each field;
tests/models/test_engine_conformance.py runs every request the backend builds through the released
engines' own request code.

* SGLang (native ``POST /generate``; it applies no chat template): a text-only prompt goes as the
  suite's token ids (``input_ids``), which SGLang runs as they are; a prompt with images goes as the
  rendered text with the images as PNG data URLs and ``modalities`` naming several images (the one
  form in which SGLang's LLaVA processor takes every image at one crop each), and SGLang's tokenizer
  adds its special tokens itself (``TokenizerManager._tokenize_texts``, and most multimodal
  processors), so the text leaves out the leading BOS that the chat template wrote where the
  tokenizer adds one. A prefix-only request (``max_new_tokens`` 0) returns the expanded length of
  the prompt and warms the radix cache; each candidate then asks for the log-probabilities from its
  first scored token on (``logprob_start_len``: the radix cache reuses the prompt up to there, so
  the candidates share the visuals and the question).
* vLLM (``POST /v1/chat/completions`` with ``prompt_logprobs``): the server renders the
  conversation with its chat template (checked against the suite's at load), images as PNG data
  URLs, a video as its frames (``data:video/jpeg;base64,...``, PNG-encoded, lossless) with their
  timing in ``media_io_kwargs``, as far as the model's modality limits let it (``VLLM_MODALITIES``:
  frames as images where it takes no video). Prompt log-probabilities bypass vLLM's prefix cache:
  each candidate is a full prefill.

Several servers (``ServerPool``): each question goes, with all its candidates, to the live server
with the fewest questions in flight (``concurrency`` per live server); a question that fails is
tried once on another server; a server is taken out only where its health probe fails too, and
probed again after ``recheck_after`` seconds.
"""

from __future__ import annotations

import base64
import fnmatch
import io
import math
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from loguru import logger

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.retry import backoff_delay, retry_after
from lmms_egoplan.core.secrets import mask_secrets
from lmms_egoplan.models.chat import RenderedAnswer
from lmms_egoplan.models.likelihood import PromptAlignmentError, ScoredSequence

# A position of a server's prompt whose token id it did not report (before SGLang's logprob_start_len).
from lmms_egoplan.models.prompt_check import UNREPORTED
from lmms_egoplan.models.visuals import UNTIMED_VIDEO_FPS, ModelVisuals, UnsupportedVisualError

ENGINES = ("sglang", "vllm")
# Read in the released vLLM wheels (docs/backend.md, Inference servers): the chat endpoint returns
# the prompt's token ids (``return_token_ids``, vllm PR 22587) from 0.10.2; frames sent as
# ``video/jpeg`` keep the fps, frames_indices, total_num_frames and duration of ``media_io_kwargs``
# (``multimodal/media/video.py``, PR 40133) from 0.20.0; Qwen2.5-VL hands that timing to its
# processor (``second_per_grid_ts``, PR 47736) from 0.31.0.
VLLM_MIN_VERSION = (0, 10, 2)
VLLM_VIDEO_TIMING_VERSION = (0, 20, 0)
VLLM_MODEL_VIDEO_TIMING_VERSION = {"qwen2_5_vl": (0, 31, 0)}
# Per-request media_io_kwargs need --trust-request-mm-kwargs from vLLM 0.31.0 on (vllm PR 58830).
VLLM_REQUEST_MM_KWARGS_VERSION = (0, 31, 0)
# Seconds to open a connection, and for a health probe's answer (the read timeout is model_args timeout).
CONNECT_TIMEOUT_S = 10.0
HEALTH_TIMEOUT_S = 10.0
# The most likely entries per position the load check asks for (vLLM's --max-logprobs is 20 by default).
VLLM_PROBE_TOP_LOGPROBS = 5
# The finish reasons of a generation that did not end as the model ended it: vLLM's "abort" / "error"
# (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS), SGLang's "abort" (managers/schedule_batch.py FINISH_ABORT).
INCOMPLETE_FINISH_REASONS = ("abort", "error")
# The sampling settings a generation request carries, those set (engines' names; vLLM's max tokens
# is max_completion_tokens).
SAMPLING_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "stop")

# What vllm 0.33.0 serves each architecture with, where it is not images and videos without limit:
# ``get_supported_mm_limits`` of the model's processing info (``model_executor/models/<model>.py``);
# a request over a limit gets a 400 ("At most 0 image(s) may be provided in one prompt").
VLLM_MODALITIES: dict[str, dict[str, int | None]] = {
    "llava": {"image": None},
    "idefics3": {"image": None},
    "smolvlm": {"image": None},
    "gemma3": {"image": None},
    "mistral3": {"image": None},
    "llava_next_video": {"video": 1},
}
# SGLang 0.5.23 serves these without their vision tower unless the server is started with
# --enable-multimodal (``configs/model_config.py``, ``mm_disabled_models``); /model_info then
# reports no image understanding and /generate drops the images.
SGLANG_MULTIMODAL_FLAG = {"gemma3": "Gemma 3"}
# Models that attend bidirectionally inside an image, which SGLang 0.5.23 builds only with its
# Triton attention backend and only for an image wholly in the part of the prompt being computed
# (``models/gemma3_mm.py`` 217-251, note at 442): any other backend, a prompt split by chunked
# prefill, or a cached prefix ending inside an image (the radix cache matches whole pages,
# ``mem_cache/radix_cache.py`` 215-220) attends to the image causally.
SGLANG_BIDIRECTIONAL_IMAGES = {"gemma3": "Gemma 3"}
# The server flags that give those models their bidirectional image attention on SGLang.
SGLANG_BIDIRECTIONAL_FLAGS = "--attention-backend triton --chunked-prefill-size -1 --page-size 1"
# Where the engine's own preprocessing gives the model another input than egoplan_hf's processor
# (tests/models/test_engine_conformance.py shows each against the engine's code): egoplan_server still
# scores, and says so at load.
ENGINE_DEVIATIONS: dict[tuple[str, str], str] = {
    ("sglang", "qwen2_vl"): "SGLang loads Qwen2-VL's processor with its own pixel range, 3,136 to 1,003,520 pixels "
                            "per image (utils/hf_transformers/processor.py), not the checkpoint's: images outside "
                            "it are resized otherwise than egoplan_hf resizes them",
    ("sglang", "llava"): "SGLang pads each LLaVA image to a square before its CLIP processor (original LLaVA-1.5's "
                         "'pad', multimodal/processors/llava.py 240-243), where transformers' CLIP processor "
                         "(egoplan_hf) crops its center: the same positions per image (576 for LLaVA-1.5, "
                         "models/llava.py pad_input_ids), other pixels for every image that is not square (a "
                         "16:9 frame shows all of its width, with bars, instead of its central 56%); a prompt "
                         "with more than 16 images gets each pooled 2x2 (models/llava.py 93-97: 144 positions "
                         "per image instead of 576)",
    ("sglang", "llava_onevision"): "SGLang gives each image of a prompt with several images its AnyRes tiles, where "
                                   "transformers (egoplan_hf) gives each one crop",
    ("vllm", "llava_onevision"): "vLLM gives each image of a prompt with several images its AnyRes tiles "
                                 "(model_executor/models/llava_onevision.py), where transformers (egoplan_hf) gives "
                                 "each one crop",
}


class ServerSetupError(InputError):
    """The server cannot score for this run (unreachable, other model, no prompt log-probabilities, ...)."""


class ServerRequestError(RuntimeError):
    """A request the server refused (``status``: its HTTP status), or that still failed after the retries."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class ServerUnavailableError(ServerRequestError):
    """The server stopped answering: no connection, timeouts or 408 / 429 / 5xx through every retry."""


class ServerNotAnsweringError(ServerSetupError):
    """No server answers at the address (not yet, where it is still starting: ``wait_for_servers``)."""


class IncompleteReplyError(ServerRequestError):
    """A reply that is no whole answer (``Engine.whole_answer``): aborted, without content, or empty
    where the engine stopped for another reason than the model's own stop."""


class QuestionFailedError(RuntimeError):
    """A question that failed on every server it was tried on (``ServerPool.run``) while those servers
    still answer their health probe: the question's failure, not the cluster's."""


class _Transient(Exception):
    """A failure worth retrying: no connection, a timeout, 408 / 429 / 5xx."""

    def __init__(self, message: str, retry_after: float | None = None, *, timed_out: bool = False):
        super().__init__(message)
        self.retry_after, self.timed_out = retry_after, timed_out


@dataclass(frozen=True)
class ServerPrompt:
    """One question or generation request as the suite renders it."""

    messages: list[dict]  # the user turn, in transformers' chat format (``ChatRenderer.user_turn``)
    visuals: ModelVisuals
    prefix_text: str  # ``messages`` rendered with the generation prompt
    prefix_ids: list[int]  # the local tokenizer's ids of ``prefix_text``
    where: str
    # Whether the model's processor adds the tokenizer's special tokens (the BOS) to the rendering
    # (``ChatRenderer.adds_special_tokens``): ``prefix_ids`` and the scored sequences hold them.
    add_special_tokens: bool = False


@dataclass(frozen=True)
class ServerScores:
    """What the server reports for one conversation: the token ids it ran, and per position whose
    log-probability it returned, (log-probability of that token, whether it was the most likely)."""

    token_ids: list[int]
    positions: dict[int, tuple[float, bool]]
    # The ids of the prompt before the answer where ``token_ids`` leaves them unreported (SGLang's,
    # from the prefix request), checked against the suite's (``prompt_check``).
    prefix_ids: list[int] | None = None


@dataclass(frozen=True)
class ServerReply:
    """A generation: the text, and the ids of the prompt the server ran (None where it ran the suite's
    own ids: SGLang's text-only prompts)."""

    text: str
    prompt_ids: list[int] | None


class ServerClient:
    """JSON over HTTP to one server, with a timeout per request and retries with backoff for
    transient failures; ``stopping`` ends the retries (the run is stopping). ``api_key``: sent as a
    bearer token (a server started with --api-key)."""

    def __init__(self, base_url: str, *, timeout: float, retries: int, backoff: float, max_backoff: float = 60.0,
                 connections: int = 16, api_key: str | None = None):
        import httpx

        self.base_url = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.stopping = threading.Event()
        self.authenticated = bool(api_key)
        # A node that does not accept a connection is known in seconds; a long prefill may take ``timeout``.
        self._client = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S),
                                    headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
                                    limits=httpx.Limits(max_connections=connections,
                                                        max_keepalive_connections=connections))

    def close(self) -> None:
        self.stopping.set()
        self._client.close()

    def get(self, path: str, *, retry: bool = True) -> Any:
        return self._call("GET", path, None, retry)

    def get_first(self, paths: Sequence[str]) -> Any:
        """The first of ``paths`` the server (or the router in front of it) does not answer with 404."""
        for path in paths:
            try:
                return self.get(path, retry=False)
            except ServerRequestError as error:
                if error.status != 404 or path == paths[-1]:
                    raise

    def post(self, path: str, body: dict, *, retry: bool = True) -> Any:
        return self._call("POST", path, body, retry)

    def _call(self, method: str, path: str, body: dict | None, retry: bool) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(method, path, body)
            except _Transient as error:
                if not retry or attempt > self.retries or self.stopping.is_set():
                    tries = f" (gave up after {attempt} attempts)" if retry else ""
                    raise ServerUnavailableError(f"{method} {self.base_url}{path}: {error}{tries}") from None
                if error.timed_out and not self.healthy():
                    # A hung node: no retry waits out another read timeout on it.
                    raise ServerUnavailableError(f"{method} {self.base_url}{path}: {error}, and the server does not "
                                                 f"answer its health probe (GET /health)") from None
                self.stopping.wait(backoff_delay(attempt, self.backoff, self.max_backoff, error.retry_after))

    def healthy(self) -> bool:
        """Whether the server answers ``GET /health`` within ``HEALTH_TIMEOUT_S`` (both engines and their
        routers serve it: vLLM's api_server, SGLang's http_server and model gateway)."""
        import httpx

        try:
            return self._client.get("/health", timeout=HEALTH_TIMEOUT_S).status_code == 200
        except httpx.HTTPError:
            return False

    def _once(self, method: str, path: str, body: dict | None) -> Any:
        import httpx

        try:
            response = self._client.request(method, path, json=body)
        except httpx.ConnectTimeout:
            raise _Transient(f"no connection within {CONNECT_TIMEOUT_S:g} s") from None
        except httpx.TimeoutException:
            raise _Transient("timed out", timed_out=True) from None
        except httpx.TransportError as error:
            raise _Transient(f"connection failed: {error}") from None
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}: {_error_message(response)}",
                             retry_after(response.headers))
        if response.status_code != 200:
            raise ServerRequestError(f"{method} {self.base_url}{path}: HTTP {response.status_code}: "
                                     f"{_error_message(response)}", response.status_code)
        try:
            return response.json()
        except ValueError:
            raise _Transient(f"not a JSON body: {mask_secrets(response.text[:120])!r}") from None


class Engine:
    """What ``egoplan_server`` asks of one server; one subclass per engine."""

    name: str

    def __init__(self, client: ServerClient, model: str, *, concurrency: int):
        self.client = client
        self.model = model
        self.model_type = ""
        self.pretrained = ""
        self.context_length: int | None = None  # the served model's, from GET /v1/models
        # Candidates of the questions in flight go out at once.
        self._candidates = ThreadPoolExecutor(max_workers=4 * concurrency, thread_name_prefix=f"{self.name}-candidates")

    def close(self) -> None:
        self._candidates.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def connect(self) -> str:
        """Check that the server answers and serves the model; returns where the server loaded it from
        (the default processor of the suite's side)."""
        entry = next(m for m in self._served_models() if m.get("id") == self.model)
        self.context_length = entry.get("max_model_len") if isinstance(entry.get("max_model_len"), int) else None
        return entry.get("root") or ""

    def configure(self, tokenizer, model_type: str, *, pretrained: str, takes_images: bool, video_native: bool,
                  videos_as_frames: bool) -> bool:
        """Fit the requests to the served architecture (``model_type``, the checkpoint's in
        ``pretrained``); returns whether videos go to the server as videos (else as their frames,
        images). Raises ServerSetupError where no form of the model's visuals reaches the server."""
        self.model_type, self.pretrained = model_type, pretrained
        self.video_native = video_native and not videos_as_frames
        return self.video_native

    def warn_deviation(self) -> None:
        deviation = ENGINE_DEVIATIONS.get((self.name, self.model_type))
        if deviation:
            logger.warning(f"egoplan_server: {deviation}; those scores can differ from egoplan_hf's "
                           f"({doc_page('backend.md', 'Architectures and engines')})")

    def check_visuals(self, visuals: ModelVisuals, where: str) -> None:
        """Raise UnsupportedVisualError for visuals the server refuses for this architecture."""

    def check(self, probe: ServerPrompt, rendered: RenderedAnswer, sequence: ScoredSequence, tokenizer, *,
              takes_images: bool) -> ServerScores:
        """Raise ServerSetupError unless the server can score: the model is served, it returns the
        log-probabilities of a text-only probe question's tokens (``probe``, answered ``rendered``), and
        its token ids of that conversation are the suite's (``sequence``: the same chat template and
        tokenizer, no token added)."""
        self._check_server(takes_images)
        try:
            [scores] = self.score(probe, [rendered], [sequence])
        except (ServerRequestError, PromptAlignmentError, KeyError, TypeError, IndexError, ValueError,
                AttributeError) as error:
            raise self._probe_failed(f"did not return the prompt log-probabilities of a probe request "
                                     f"({type(error).__name__}: {error})") from None
        if not _same_ids(scores.token_ids, sequence.token_ids):
            raise self._other_tokens(tokenizer, scores.token_ids, sequence.token_ids, self._other_tokens_fix())
        return scores

    def _other_tokens_fix(self) -> str:
        return "the server's tokenizer adds or splits tokens differently"

    def _other_tokens(self, tokenizer, server_ids: list[int], suite_ids: list[int], fix: str) -> ServerSetupError:
        return ServerSetupError(
            f"egoplan_server: the {self.name} server at {self.client.base_url} turns a probe conversation into "
            f"other tokens than model_args pretrained's processor and chat template do (server: "
            f"{tokenizer.decode([i for i in server_ids if i >= 0])!r}, suite: {tokenizer.decode(suite_ids)!r}), so "
            f"it would score another prompt than egoplan_hf: {fix}; or point pretrained at the served model's "
            f"processor")

    def _check_server(self, takes_images: bool) -> None:
        """The engine's own load checks (its model information, its version)."""
        raise NotImplementedError

    def score(self, prompt: ServerPrompt, rendered: Sequence[RenderedAnswer],
              sequences: Sequence[ScoredSequence]) -> list[ServerScores]:
        raise NotImplementedError

    def generate(self, prompt: ServerPrompt, sampling: dict) -> ServerReply:
        """The text generated after ``prompt``, and the prompt's ids as the server ran them; ``sampling``:
        max_new_tokens, temperature, top_p, top_k,
        min_p, repetition_penalty, stop (those set). Raises IncompleteReplyError for a reply that is
        no whole answer (``whole_answer``)."""
        raise NotImplementedError

    def whole_answer(self, text: str | None, finish_reason: str | None, where: str, detail: str = "") -> str:
        """``text``, where it is a whole answer: not aborted (``finish_reason`` abort or error: vLLM's
        FINISH_REASON_STRINGS, SGLang's FINISH_ABORT), not null (vLLM's ``content`` of a reply whose
        output went elsewhere), and not empty unless the model stopped itself (an empty reply cut by
        ``length`` is no answer the model gave)."""
        if text is None or finish_reason in INCOMPLETE_FINISH_REASONS or (text == "" and finish_reason != "stop"):
            got = "no content" if text is None else f"{len(text)} characters"
            raise IncompleteReplyError(f"the {self.name} server at {self.client.base_url} returned no whole answer for "
                                       f"{where} (finish_reason {finish_reason!r}{detail}, {got})")
        return text

    def _served_models(self) -> list[dict]:
        """The models ``GET /v1/models`` lists (both engines have it), ours among them."""
        try:
            listing = self.client.get("/v1/models", retry=False)
        except ServerRequestError as error:
            if error.status in (401, 403):
                raise ServerSetupError(
                    f"egoplan_server: the {self.name} server at {self.client.base_url} refuses requests without its "
                    f"API key (HTTP {error.status}): export the key in an environment variable and name it with "
                    f"model_args api_key_env=<variable>" if not self.client.authenticated else
                    f"egoplan_server: the {self.name} server at {self.client.base_url} refuses the API key of "
                    f"model_args api_key_env (HTTP {error.status}): export the key the server was started with "
                    f"(--api-key)") from None
            raise ServerNotAnsweringError(f"egoplan_server: no {self.name} server answers at base_url="
                                          f"{self.client.base_url} ({error}); start it, or fix model_args base_url "
                                          f"(wait_for_servers=<seconds> waits for a server that is starting)") from None
        models = [entry for entry in (listing or {}).get("data", []) if isinstance(entry, dict)]
        names = [entry.get("id") for entry in models]
        if self.model not in names:
            raise ServerSetupError(f"egoplan_server: the server at {self.client.base_url} serves {names}, not "
                                   f"{self.model!r}: fix model_args model (the server's --served-model-name)")
        return models

    def _probe_failed(self, what: str) -> ServerSetupError:
        return ServerSetupError(
            f"egoplan_server: the server at {self.client.base_url} {what}: it is not a {self.name} server that returns "
            f"prompt log-probabilities (model_args engine={self.name}; {doc_page('backend.md', 'Inference servers')})")


class SGLangEngine(Engine):
    name = "sglang"

    def connect(self) -> str:
        super().connect()
        return self._model_info().get("model_path") or ""

    def configure(self, tokenizer, model_type: str, **form) -> bool:
        # SGLang tokenizes text with the tokenizer's defaults: where they add a BOS, the text leaves
        # out the one the chat template wrote (sent as ids, a text-only prompt needs no such care).
        self._server_bos = _bos_added_by(tokenizer)
        return super().configure(tokenizer, model_type, **form)

    def _model_info(self) -> dict:
        # /model_info, or its older name, which SGLang's model gateway passes on (to its first worker).
        try:
            return self.client.get_first(["/model_info", "/get_model_info"])
        except ServerRequestError as error:
            raise self._probe_failed(f"does not answer GET /model_info or /get_model_info ({error})") from None

    def _server_info(self) -> dict:
        try:
            return self.client.get_first(["/server_info", "/get_server_info"])
        except ServerRequestError as error:
            raise self._probe_failed(f"does not answer GET /server_info or /get_server_info ({error})") from None

    def _check_server(self, takes_images: bool) -> None:
        info = self._model_info()
        model_type = info.get("model_type") or self.model_type
        if takes_images and not info.get("has_image_understanding"):
            # /generate silently drops the media of a model served without image input.
            flagged = SGLANG_MULTIMODAL_FLAG.get(model_type)
            fix = (f"start the server with --enable-multimodal (SGLang serves {flagged} without its vision tower "
                   f"otherwise)" if flagged else "serve the model the task is scored with, or fix pretrained")
            raise ServerSetupError(
                f"egoplan_server: the server at {self.client.base_url} serves {info.get('model_path')} without image "
                f"input, but model_args pretrained names a processor with one: {fix}")
        settings = self._server_info()
        if settings.get("allow_auto_truncate"):
            raise ServerSetupError(
                f"egoplan_server: the SGLang server at {self.client.base_url} was started with --allow-auto-truncate, "
                f"which cuts the end off a prompt longer than the context (managers/tokenizer_manager.py 1338-1346) "
                f"and would score a candidate without its answer: start it without the flag (egoplan_server "
                f"shortens max_new_tokens near the context itself)")
        if settings.get("enable_mis") or settings.get("multi_item_scoring_delimiter") is not None:
            raise ServerSetupError(
                f"egoplan_server: the SGLang server at {self.client.base_url} runs multi-item scoring (--enable-mis; "
                f"--multi-item-scoring-delimiter in earlier releases), which computes log-probabilities only at the "
                f"delimiters of its /v1/score requests and wants them on every request of a batch "
                f"(model_executor/forward_batch_info.py 1325-1336), with its radix cache and chunked prefill off "
                f"(arg_groups/attention_hook.py 526-575): egoplan_server scores each answer token through /generate; "
                f"start the server without the flag")
        if takes_images and model_type in SGLANG_BIDIRECTIONAL_IMAGES:
            self._check_bidirectional_images(SGLANG_BIDIRECTIONAL_IMAGES[model_type], settings)

    def _check_bidirectional_images(self, model: str, settings: dict) -> None:
        """The settings under which SGLang attends bidirectionally inside each image, as the model
        does in egoplan_hf (``token_type_ids``) and vLLM (``is_mm_prefix_lm``)."""
        backends = {settings.get(f"{phase}_attention_backend") or settings.get("attention_backend")
                    for phase in ("prefill", "decode")}
        chunk = settings.get("chunked_prefill_size")
        page = settings.get("page_size") or 1
        wrong = []
        if backends != {"triton"}:
            # The mask is built only where the backend is a TritonAttnBackend; different prefill and
            # decode backends make a hybrid backend, which is not one (model_executor/...
            # attention_backend_setup.py 219-244).
            wrong.append(f"its attention backend is {' / '.join(sorted(map(str, backends)))}, not triton")
        if chunk is not None and chunk > 0:
            # A prompt is split wherever the batch's remaining prefill budget ends, whatever its own
            # length (managers/schedule_policy.py 1327-1358): only disabling chunked prefill keeps
            # every image in one extend.
            wrong.append(f"chunked prefill splits prompts ({chunk} tokens per batch)")
        if page > 1:
            wrong.append(f"its radix cache matches pages of {page} tokens")
        if wrong:
            raise ServerSetupError(
                f"egoplan_server: the SGLang server at {self.client.base_url} would attend to {model}'s images "
                f"causally ({'; '.join(wrong)}), where {model} attends bidirectionally inside each image "
                f"(egoplan_hf, vLLM): "
                f"SGLang builds that mask only with its Triton attention backend and for an image wholly in the part "
                f"of the prompt being computed (models/gemma3_mm.py 217-251): start it with "
                f"{SGLANG_BIDIRECTIONAL_FLAGS} "
                f"({doc_page('backend.md', 'Architectures and engines')})")

    def check(self, probe, rendered, sequence, tokenizer, *, takes_images: bool) -> ServerScores:
        probed = super().check(probe, rendered, sequence, tokenizer, takes_images=takes_images)
        # Prompts with images go as text, tokenized by the server; a text-only prompt goes as ids, which
        # would hide another tokenizer: the server's tokenization of the probe's text must be the suite's.
        [scores] = self._logprobs([self._server_text(rendered.text)], 0)
        if not _same_ids(scores.token_ids, sequence.token_ids):
            raise self._other_tokens(tokenizer, scores.token_ids, sequence.token_ids, self._other_tokens_fix())
        return probed

    def score(self, prompt, rendered, sequences):
        media = self._media(prompt.visuals, prompt.where)
        # The prefix alone: its length after the visuals' placeholders expand (sglang PR 2597), and the
        # radix cache warm with it before the candidates arrive.
        prefix_fields = self._prompt_fields(prompt.prefix_text, prompt.prefix_ids, media)
        # With media, the prefix's ids as the server ran them (entry 0 on), for the prompt check.
        prefix = self.client.post("/generate", {**prefix_fields, **self._prompt_ids_fields(media),
                                                "sampling_params": {"max_new_tokens": 0}})
        shift = prefix["meta_info"]["prompt_tokens"] - len(prompt.prefix_ids)
        prefix_ids = self._reported_prompt_ids(prefix) if media else None
        # Entry 0 of input_token_logprobs is always null: each starts one token before its first scored one.
        starts = [shift + sequence.first - 1 for sequence in sequences]
        scores = self._logprobs([self._prompt_fields(r.text, s.token_ids, media) for r, s in zip(rendered, sequences)],
                                starts)
        return [ServerScores(s.token_ids, s.positions, prefix_ids) for s in scores]

    @staticmethod
    def _prompt_ids_fields(media: dict) -> dict:
        """What makes /generate report every id of a prompt with media (which the server tokenizes and
        expands): the log-probabilities from position 0 (``input_token_logprobs`` carry the ids; the
        gateway drops return_prompt_token_ids)."""
        return {"return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 0} if media else {}

    @staticmethod
    def _reported_prompt_ids(answer: dict) -> list[int]:
        return [int(entry[1]) for entry in answer["meta_info"]["input_token_logprobs"]]

    def _logprobs(self, prompts: Sequence[dict], starts: Sequence[int] | int) -> list[ServerScores]:
        """Each prompt's ids and log-probabilities from its ``start`` on, the requests concurrent."""
        starts = [starts] * len(prompts) if isinstance(starts, int) else starts

        def one(fields: dict, start: int) -> ServerScores:
            body = {**fields, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                    "logprob_start_len": start, "top_logprobs_num": 1}
            return self._scores(self.client.post("/generate", body), start)

        return list(self._candidates.map(one, prompts, starts))

    def _prompt_tokens(self, fields: dict) -> int:
        """A prompt's length as the model runs it (visual placeholders expanded), by a prefill."""
        prefill = self.client.post("/generate", {**fields, "sampling_params": {"max_new_tokens": 0}})
        return prefill["meta_info"]["prompt_tokens"]

    def generate(self, prompt, sampling):
        media = self._media(prompt.visuals, prompt.where)
        fields = self._prompt_fields(prompt.prefix_text, prompt.prefix_ids, media)
        sampling_params = {k: sampling[k] for k in SAMPLING_KEYS if k in sampling}
        if not media:  # SGLang refuses a prompt plus max_new_tokens over the context (tokenizer_manager.py 1353-1378)
            sampling_params["max_new_tokens"] = self._within_context(len(prompt.prefix_ids), sampling_params,
                                                                     prompt.where)
        fields = {**fields, **self._prompt_ids_fields(media)}
        try:
            return self._generated(self.client.post("/generate", {**fields, "sampling_params": sampling_params}),
                                   prompt.where, media)
        except ServerRequestError as error:
            if error.status != 400 or not media or self.context_length is None:
                raise
            # Where the expanded prompt is too long for max_new_tokens: shortened, as the other backends do.
            try:
                length = self._prompt_tokens(fields)
            except ServerRequestError:
                raise error from None
            if length + sampling_params["max_new_tokens"] <= self.context_length:
                raise
            sampling_params["max_new_tokens"] = self._within_context(length, sampling_params, prompt.where)
            return self._generated(self.client.post("/generate", {**fields, "sampling_params": sampling_params}),
                                   prompt.where, media)

    def _generated(self, answer: dict, where: str, media: dict) -> ServerReply:
        finish = (answer.get("meta_info") or {}).get("finish_reason") or {}
        message = f": {finish['message']}" if isinstance(finish, dict) and finish.get("message") else ""
        text = self.whole_answer(answer.get("text"), finish.get("type") if isinstance(finish, dict) else finish,
                                 where, message)
        # A text-only prompt went as the suite's ids, which the server runs as they are.
        return ServerReply(text, self._reported_prompt_ids(answer) if media else None)

    def _within_context(self, length: int, sampling_params: dict, where: str) -> int:
        """``max_new_tokens`` shortened to fit a prompt of ``length`` tokens into the context, as
        egoplan_hf and vLLM (``get_max_tokens``) shorten it, with egoplan_hf's warning."""
        requested = sampling_params["max_new_tokens"]
        if self.context_length is None or length + requested <= self.context_length:
            return requested
        logger.warning(f"{self.model}: {where}: max_new_tokens {requested} cut to {self.context_length - length} "
                       f"to stay within the context window of {self.context_length} tokens")
        return max(0, self.context_length - length)

    def _prompt_fields(self, text: str, token_ids: Sequence[int], media: dict) -> dict:
        """A prompt as ``/generate`` takes it: without media, the suite's ids (run as they are); with
        media, the text, whose placeholders the server's processor expands."""
        return {**self._server_text(text), **media} if media else {"input_ids": list(token_ids)}

    def _server_text(self, text: str) -> dict:
        """``text`` for the server to tokenize: the BOS left to its tokenizer where that adds one."""
        if self._server_bos and text.startswith(self._server_bos):
            text = text[len(self._server_bos):]
        return {"text": text}

    @staticmethod
    def _scores(answer: dict, start: int) -> ServerScores:
        meta = answer["meta_info"]
        entries, tops = meta["input_token_logprobs"], meta.get("input_top_logprobs") or []
        if isinstance(meta.get("prompt_tokens"), int) and start + len(entries) != meta["prompt_tokens"]:
            raise _cut_short("sglang", len(entries), start, meta["prompt_tokens"])
        positions = {start + k: (float(entries[k][0]), bool(tops) and tops[k][0][1] == entries[k][1])
                     for k in range(1, len(entries))}
        # The ids from ``start`` on, as the server's logprobs count them (placeholders expanded, also
        # where a model expands them after the tokenization that prompt_token_ids reports).
        return ServerScores([UNREPORTED] * start + [int(entry[1]) for entry in entries], positions)

    def _media(self, visuals: ModelVisuals, where: str) -> dict:
        if visuals.videos:
            # /generate takes a video only as an encoded file, resampled by the server's own
            # --mm-process-config over the whole file, with no per-video timing for Qwen2/2.5-VL.
            raise UnsupportedVisualError(
                f"egoplan_server: {where} has a video, which SGLang's /generate cannot take with the frames and timing "
                f"the task chose ({doc_page('backend.md', 'Inference servers')}); use engine=vllm, or "
                f"videos_as_frames=true to "
                f"send its frames as images (the model then sees no time, unlike egoplan_hf)")
        if not visuals.images:
            return {}
        # Several images for every image request: SGLang's LLaVA processor otherwise takes only the first
        # image, at anyres (multimodal/processors/llava.py 230-263); its other processors do not read it.
        return {"image_data": [png_data_url(image) for image in visuals.images], "modalities": ["multi-images"]}


class VLLMEngine(Engine):
    name = "vllm"

    def configure(self, tokenizer, model_type: str, *, pretrained: str, takes_images: bool, video_native: bool,
                  videos_as_frames: bool) -> bool:
        video_native = super().configure(tokenizer, model_type, pretrained=pretrained, takes_images=takes_images,
                                         video_native=video_native, videos_as_frames=videos_as_frames)
        self.modalities = VLLM_MODALITIES.get(model_type, {"image": None, "video": None})
        if video_native and "video" not in self.modalities:
            logger.warning(f"egoplan_server: vLLM serves {model_type} without video input "
                           f"({_modalities_source(model_type)}): "
                           f"videos go as their frames (images), where egoplan_hf sends a prompt with only a video in "
                           f"the model's video format")
        if "image" not in self.modalities and takes_images and not video_native:
            raise ServerSetupError(
                f"egoplan_server: vLLM serves {model_type} with {_limits_text(self.modalities)} per prompt "
                f"({_modalities_source(model_type)}), and videos_as_frames=true would send every video as images: "
                f"leave videos_as_frames false (images still cannot go), or score with egoplan_hf")
        self.video_native = video_native and "video" in self.modalities
        return self.video_native

    def check_visuals(self, visuals: ModelVisuals, where: str) -> None:
        counts = {"image": len(visuals.images), "video": len(visuals.videos)}
        for modality, count in counts.items():
            limit = self.modalities.get(modality, 0)
            if count and limit is not None and count > limit:
                raise UnsupportedVisualError(
                    f"egoplan_server: {where} has {count} {modality}(s), and vLLM serves {self.model_type} with "
                    f"{_limits_text(self.modalities)} per prompt ({_modalities_source(self.model_type)}): score this "
                    f"task with egoplan_hf (or engine=sglang)")

    def _check_server(self, takes_images: bool) -> None:
        try:
            version = str(self.client.get("/version", retry=False)["version"])
        except (ServerRequestError, KeyError, TypeError) as error:
            raise self._probe_failed(f"does not answer GET /version with its version ({error})") from None
        self.version = _version_tuple(version)
        if self.version < VLLM_MIN_VERSION:
            raise ServerSetupError(
                f"egoplan_server: the server at {self.client.base_url} runs vLLM {version}; scoring needs vLLM "
                f"{_dotted(VLLM_MIN_VERSION)} or later (the prompt's token ids, return_token_ids: vllm PR 22587): "
                f"upgrade it")

    def check(self, probe, rendered, sequence, tokenizer, *, takes_images: bool) -> ServerScores:
        try:
            probed = super().check(probe, rendered, sequence, tokenizer, takes_images=takes_images)
        except ServerSetupError as error:
            flags = mistral_format_flags(self.pretrained)
            if flags:  # vLLM serves it with its Mistral tokenizer / config, which render and tokenize otherwise
                raise ServerSetupError(
                    f"{error}. model_args pretrained ({self.pretrained}) is a Mistral-format repository, which vLLM "
                    f"serves with its Mistral tokenizer and config unless told otherwise (vllm/tokenizers/registry.py "
                    f"145-161, transformers_utils/config.py 889-899): start it with {' '.join(flags)}") from None
            raise
        scored_turn = {"role": "assistant",
                       "content": [{"type": "text", "text": rendered.text[rendered.start:rendered.end]}]}
        body = self._scoring_body([*probe.messages, scored_turn], add_special_tokens=probe.add_special_tokens)
        self._check_log_probabilities(body)
        if self.video_native and self.version >= VLLM_REQUEST_MM_KWARGS_VERSION:
            self._check_media_kwargs(body)
        return probed

    def _other_tokens_fix(self) -> str:
        return ("serve the model with the same chat template (--chat-template) or pass the server's as model_args "
                "chat_template, and with the tokenizer of pretrained")

    def _check_log_probabilities(self, body: dict) -> None:
        """Prompt log-probabilities, not logits: vLLM returns logits under --logprobs-mode raw_logits or
        processed_logits (v1/worker/gpu_model_runner.py 5321-5327); the most likely entries of a
        position then do not sum to at most 1."""
        try:
            answer = self.client.post("/v1/chat/completions", {**body, "prompt_logprobs": VLLM_PROBE_TOP_LOGPROBS})
        except ServerRequestError as error:
            raise ServerSetupError(
                f"egoplan_server: the vLLM server at {self.client.base_url} does not return the "
                f"{VLLM_PROBE_TOP_LOGPROBS} most likely tokens per prompt position that the load check asks for "
                f"({error}): start it with "
                f"--max-logprobs {VLLM_PROBE_TOP_LOGPROBS} or more (its default is 20)") from None
        for entry in answer["prompt_logprobs"][1:]:
            values = [float(candidate["logprob"]) for candidate in entry.values()]
            if max(values) > 0 or sum(math.exp(value) for value in values) > 1 + 1e-3:
                raise ServerSetupError(
                    f"egoplan_server: the vLLM server at {self.client.base_url} returns logits, not "
                    f"log-probabilities, as its prompt_logprobs (a position's {len(values)} most likely entries: "
                    f"{values[:3]}...): start it "
                    f"without --logprobs-mode, or with raw_logprobs / processed_logprobs, which for prompt tokens are "
                    f"the same (vllm/v1/worker/gpu_model_runner.py 5321-5327)")

    def _check_media_kwargs(self, body: dict) -> None:
        """Per-request media_io_kwargs (a video's frame timing) pass the server's check, which vLLM
        0.31+ makes for any request carrying them (entrypoints/generate/base/protocol.py 72-97)."""
        try:
            self.client.post("/v1/chat/completions", {**body, "media_io_kwargs": {"video": {"num_frames": 1}}},
                             retry=False)
        except ServerRequestError as error:
            if error.status != 400:
                raise
            raise ServerSetupError(
                f"egoplan_server: the vLLM server at {self.client.base_url} refuses per-request media_io_kwargs, which "
                f"carry each video's frame timing ({error}): start it with --trust-request-mm-kwargs, or send videos "
                f"as frames (videos_as_frames=true: the model then sees no time)") from None

    def score(self, prompt, rendered, sequences):
        messages, media_io = self._request_media(prompt)

        def one(answer: str) -> ServerScores:
            conversation = [*messages, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
            return self._scores(self.client.post("/v1/chat/completions", self._scoring_body(
                conversation, media_io, add_special_tokens=prompt.add_special_tokens)))

        return list(self._candidates.map(one, [r.assistant_text for r in rendered]))

    def generate(self, prompt, sampling):
        messages, media_io = self._request_media(prompt)
        # vLLM shortens max_completion_tokens to the context itself (entrypoints/serve/utils/api_utils.py 234-269).
        body = {"model": self.model, "messages": messages, "max_completion_tokens": sampling["max_new_tokens"],
                "return_token_ids": True,  # the prompt's ids, for the prompt check
                **{k: sampling[k] for k in SAMPLING_KEYS if k != "max_new_tokens" and k in sampling}}
        if prompt.add_special_tokens:
            body["add_special_tokens"] = True
        if media_io:
            body["media_io_kwargs"] = media_io
        answer = self.client.post("/v1/chat/completions", body)
        choice = answer["choices"][0]
        message = choice.get("message") or {}
        # Choice: refused. A reasoning parser takes the model's reasoning out of the answer, which
        # egoplan_hf scores whole (vLLM 0.33 names the field reasoning, earlier releases reasoning_content).
        reasoning = next((message[key] for key in ("reasoning", "reasoning_content") if message.get(key) is not None),
                         None)
        if reasoning is not None:
            raise ServerSetupError(
                f"egoplan_server: the vLLM server at {self.client.base_url} splits the model's output for "
                f"{prompt.where} into reasoning ({len(reasoning)} characters) and content (it runs with "
                f"--reasoning-parser), where egoplan_hf scores the whole output as the answer: start it without "
                f"--reasoning-parser ({doc_page('backend.md', 'Replies that are no answer')})")
        if not isinstance(answer.get("prompt_token_ids"), list):
            raise IncompleteReplyError(f"the vLLM server at {self.client.base_url} returned no prompt_token_ids for "
                                       f"{prompt.where}, which return_token_ids asks for (vLLM 0.10.2 on)")
        return ServerReply(self.whole_answer(message.get("content"), choice.get("finish_reason"), prompt.where),
                           list(answer["prompt_token_ids"]))

    def _request_media(self, prompt: ServerPrompt) -> tuple[list[dict], dict | None]:
        self.check_visuals(prompt.visuals, prompt.where)
        if prompt.visuals.videos:
            self._check_video_timing(prompt.where)
        return _openai_messages(prompt.messages, prompt.visuals)

    def _scoring_body(self, messages: list[dict], media_io: dict | None = None, *, add_special_tokens: bool) -> dict:
        # The closed assistant turn, its end-of-turn token(s) included; one generated token (at least
        # one is required), the prompt's log-probabilities (each token's own, with its rank) and ids;
        # the BOS added where the model's processor adds it (vLLM's chat default adds none).
        body = {"model": self.model, "messages": messages, "add_generation_prompt": False,
                "continue_final_message": False, "prompt_logprobs": 0, "return_token_ids": True,
                "max_completion_tokens": 1, "temperature": 0.0}
        if add_special_tokens:
            body["add_special_tokens"] = True
        if media_io:
            body["media_io_kwargs"] = media_io
        return body

    @staticmethod
    def _scores(answer: dict) -> ServerScores:
        ids, logprobs = answer["prompt_token_ids"], answer["prompt_logprobs"]
        if not isinstance(ids, list) or not isinstance(logprobs, list):
            raise ValueError("no prompt_token_ids / prompt_logprobs")
        if len(ids) != len(logprobs):
            raise _cut_short("vllm", len(logprobs), 0, len(ids))
        positions = {}
        for position in range(1, len(ids)):  # entry 0 is null: nothing predicts the first token
            entry = (logprobs[position] or {}).get(str(ids[position]))
            if entry is None:
                raise PromptAlignmentError(f"the vllm server returned no log-probability of the token at position "
                                           f"{position} of the prompt (id {ids[position]})")
            positions[position] = (float(entry["logprob"]), entry.get("rank") == 1)
        return ServerScores(list(ids), positions)

    def _check_video_timing(self, where: str) -> None:
        needed = max(VLLM_VIDEO_TIMING_VERSION, VLLM_MODEL_VIDEO_TIMING_VERSION.get(self.model_type, (0,)))
        if self.version < needed:
            raise UnsupportedVisualError(
                f"egoplan_server: {where} has a video, whose frames' timing vLLM hands to {self.model_type}'s "
                f"processor from release {_dotted(needed)} on (vllm PR "
                f"{'47736' if needed > VLLM_VIDEO_TIMING_VERSION else '40133'}); the server runs "
                f"{_dotted(self.version)}: upgrade it, or videos_as_frames=true to send the frames as images")


ENGINE_CLASSES = {"sglang": SGLangEngine, "vllm": VLLMEngine}
Result = TypeVar("Result")


class ServerPool:
    """The servers of a run (``model_args base_urls``), each an ``Engine`` checked at load.

    ``run(work, where)`` calls ``work(engine)`` on the live server with the fewest calls in flight,
    at most ``concurrency`` on each (it waits for a free place), so that a question and all its
    candidates go to one server (which shares their prefix). A call that fails on a server
    (``ServerUnavailableError`` after its retries, ``IncompleteReplyError``) is tried once on another
    one; the server is taken out only where its health probe fails too, and probed again
    ``recheck_after`` seconds later (back in where it answers). A question that failed on two servers
    (on the only one, where there is one) that still answer is ``QuestionFailedError``: the
    question's failure; once no server answers, the run stops with the error."""

    def __init__(self, engines: Sequence[Engine], *, concurrency: int, recheck_after: float = 30.0):
        self.engines = list(engines)
        self.concurrency, self.recheck_after = concurrency, recheck_after
        self._live = list(engines)
        self._dropped: dict[int, float] = {}  # id(engine) -> when it was taken out
        self._in_flight = {id(engine): 0 for engine in engines}
        self._free = threading.Condition()

    def run(self, work: Callable[[Engine], Result], where: str) -> Result:
        failures: list[str] = []
        tried: set[int] = set()
        failed_on_live = 0
        while True:
            engine = self._take(tried, failures)
            try:
                return work(engine)
            except (ServerUnavailableError, IncompleteReplyError) as error:
                failures.append(str(error))
                tried.add(id(engine))
                if isinstance(error, ServerUnavailableError) and not engine.client.healthy():
                    self._drop(engine, error)  # the server's failure: the question goes on to another one
                    continue
                failed_on_live += 1
                with self._free:
                    untried = [e for e in self._live if id(e) not in tried]
                if failed_on_live >= 2 or not untried:
                    raise QuestionFailedError(f"{where} failed on {len(tried)} server(s), which still answer their "
                                              f"health probe: {'; '.join(failures)}") from None
            finally:
                with self._free:
                    self._in_flight[id(engine)] -= 1
                    self._free.notify_all()

    def _take(self, tried: set[int], failures: Sequence[str]) -> Engine:
        """The live server with the fewest calls in flight, one this call has not tried where one is
        left, once it has a free place."""
        with self._free:
            while True:
                self._recheck()
                if not self._live:
                    last = f"; the last error: {failures[-1]}" if failures else ""
                    raise ServerUnavailableError(f"no server answers any more (each failed its health probe){last}")
                candidates = [engine for engine in self._live if id(engine) not in tried] or self._live
                engine = min(candidates, key=lambda candidate: self._in_flight[id(candidate)])
                if self._in_flight[id(engine)] < self.concurrency:
                    self._in_flight[id(engine)] += 1
                    return engine
                self._free.wait(timeout=self.recheck_after if self._dropped else None)

    def _drop(self, engine: Engine, error: Exception) -> None:
        with self._free:
            if engine in self._live:
                self._live.remove(engine)
                self._dropped[id(engine)] = time.monotonic()
                logger.warning(f"egoplan_server: the server at {engine.client.base_url} stopped answering "
                               f"({error}) and "
                               f"fails its health probe: its questions go to the {len(self._live)} other server(s), "
                               f"and it is probed again in {self.recheck_after:g} s")
            self._free.notify_all()

    def _recheck(self) -> None:
        """Servers taken out ``recheck_after`` seconds ago or more: back in where they answer (holds the lock)."""
        now = time.monotonic()
        for engine in self.engines:
            dropped = self._dropped.get(id(engine))
            if dropped is not None and now - dropped >= self.recheck_after:
                if engine.client.healthy():
                    del self._dropped[id(engine)]
                    self._live.append(engine)
                    logger.warning(f"egoplan_server: the server at {engine.client.base_url} answers its health probe "
                                   f"again and takes questions again")
                else:
                    self._dropped[id(engine)] = now

    def stop(self) -> None:
        for engine in self.engines:
            engine.client.stopping.set()

    def close(self) -> None:
        for engine in self.engines:
            engine.close()


def mistral_format_flags(pretrained: str) -> list[str]:
    """The vLLM flags that make it serve ``pretrained`` (a local folder) from its transformers files,
    where vLLM 0.33 would pick its Mistral tokenizer (``consolidated*.safetensors`` with ``tekken.json``
    or ``tokenizer.model.v*``: ``vllm/tokenizers/registry.py`` 145-161) or its Mistral config (with
    ``params.json``: ``transformers_utils/config.py`` 889-899), as the released Mistral-Small-3.1
    repositories hold both; [] for any other folder."""
    folder = Path(pretrained)
    names = [path.name for path in folder.rglob("*") if path.is_file()] if folder.is_dir() else []
    if not any(fnmatch.fnmatch(name, "consolidated*.safetensors") for name in names):
        return []
    tokenizer = any(fnmatch.fnmatch(name, pattern) for name in names
                    for pattern in ("tekken.json", "tokenizer.model.v*"))
    return [*(["--tokenizer-mode hf"] if tokenizer else []),
            *(["--config-format hf"] if (folder / "params.json").is_file() else [])]


def _same_ids(server_ids: Sequence[int], suite_ids: Sequence[int]) -> bool:
    """The server's ids are the suite's, where the server reported them."""
    return len(server_ids) == len(suite_ids) and all(s == t for s, t in zip(server_ids, suite_ids) if s != UNREPORTED)


def _bos_added_by(tokenizer) -> str | None:
    """The BOS token that ``tokenizer`` puts in front of a text with its default settings, if any."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos:
        return None
    added = tokenizer("a")["input_ids"]
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    return bos if added[:1] == [tokenizer.bos_token_id] and added[1:] == plain else None


def _cut_short(engine: str, returned: int, start: int, length: int) -> PromptAlignmentError:
    return PromptAlignmentError(f"the {engine} server returned {returned} prompt log-probabilities from position "
                                f"{start} of a prompt of {length} tokens (cut short, by the server or a router in "
                                f"front of it), so the scored tokens cannot be located")


def _limits_text(modalities: dict[str, int | None]) -> str:
    return " and ".join(f"{'any number of' if limit is None else limit} {modality}(s)"
                        for modality, limit in modalities.items()) + ", nothing else"


def _modalities_source(model_type: str) -> str:
    module = {"gemma3": "gemma3_mm"}.get(model_type, model_type)  # vLLM's file for Gemma 3's vision model
    return f"vllm/model_executor/models/{module}.py, get_supported_mm_limits"


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _openai_messages(messages: Sequence[dict], visuals: ModelVisuals) -> tuple[list[dict], dict | None]:
    """``messages`` (transformers' chat format, placeholders in order) in the OpenAI format with the
    media inlined, and the ``media_io_kwargs`` carrying the video's frame timing (one video at most:
    the timing is per request)."""
    images, videos = iter(visuals.images), iter(visuals.videos)
    converted = []
    for message in messages:
        content = []
        for part in message["content"]:
            if part["type"] == "text":
                content.append({"type": "text", "text": part["text"]})
            elif part["type"] == "image":
                content.append({"type": "image_url", "image_url": {"url": png_data_url(next(images))}})
            else:
                frames = ",".join(_png_base64(frame) for frame in next(videos).frames)
                content.append({"type": "video_url", "video_url": {"url": f"data:video/jpeg;base64,{frames}"}})
        converted.append({"role": message["role"], "content": content})
    if not visuals.videos:
        return converted, None
    if len(visuals.videos) > 1:
        raise UnsupportedVisualError("egoplan_server: vLLM takes one frame timing per request (media_io_kwargs), "
                                     f"and a request has {len(visuals.videos)} videos")
    return converted, {"video": vllm_video_timing(visuals.videos[0])}


def vllm_video_timing(video) -> dict:
    """The ``media_io_kwargs`` video entry that makes vLLM (0.33.0, ``vllm/multimodal/media/video.py``)
    build the ``VideoMetadata`` egoplan_hf gives the processor (``visuals.Video.metadata``).

    vLLM wants integral ``total_num_frames``, where egoplan_hf's is the clip's fractional length at
    its sampling rate: frame numbers, frame rate and length are all scaled by the smallest integer
    that makes it whole, which leaves every frame's time (``frames_indices / fps``: Qwen3-VL's
    timestamps) and the sampling rate (``len(frames_indices) / total_num_frames * fps``: Qwen2.5-VL's
    seconds per temporal patch) unchanged. Frames without times get the frame rate transformers
    assumes for them in egoplan_hf (``UNTIMED_VIDEO_FPS``), where vLLM's own default is 1 fps."""
    metadata = video.metadata()
    count = len(video.frames)
    timing = {"num_frames": count}  # vLLM keeps only the first num_frames frames (default 32)
    if metadata["fps"] is None:
        return {**timing, "fps": UNTIMED_VIDEO_FPS, "frames_indices": metadata["frames_indices"],
                "total_num_frames": metadata["total_num_frames"]}
    total = Fraction(metadata["total_num_frames"]).limit_denominator(count)
    scale = total.denominator
    return {**timing, "fps": metadata["fps"] * scale, "frames_indices": [i * scale for i in metadata["frames_indices"]],
            "total_num_frames": int(total * scale), "duration": metadata["duration"]}


def png_data_url(image) -> str:
    return f"data:image/png;base64,{_png_base64(image)}"


def _png_base64(image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(number) for number in re.findall(r"\d+", version.split("+")[0])[:3])


def _error_message(response) -> str:
    """The server's error text (a key it echoes masked: it reaches the log and the run's last line)."""
    try:
        body = response.json()
    except ValueError:
        return mask_secrets(response.text[:200])
    error = body.get("error", body) if isinstance(body, dict) else body
    return mask_secrets(str(error.get("message", error) if isinstance(error, dict) else error)[:300])
