"""The inference servers ``egoplan_server`` scores and generates with: SGLang and vLLM, over HTTP.

Each engine turns a question (the suite's chat rendering and visuals, see ``egoplan_server``) into
the requests its server documents, and reports per scored position the log-probability the server
computed and the token ids it ran (visual placeholders expanded), so that the backend locates the
scored span in the server's own ids. docs/backend.md cites the engines' sources for each field;
tests/models/test_engine_conformance.py runs every request the backend builds through the released
engines' own request code.

* SGLang (native ``POST /generate``; it applies no chat template): a text-only prompt goes as the
  suite's token ids (``input_ids``), which SGLang runs as they are; a prompt with images goes as the
  rendered text with the images as PNG data URLs, and SGLang's tokenizer adds its special tokens
  itself (``TokenizerManager._tokenize_texts``, and most multimodal processors), so the text leaves
  out the leading BOS that the chat template wrote where the tokenizer adds one. A prefix-only
  request (``max_new_tokens`` 0) returns the expanded length of the prompt and warms the radix
  cache; each candidate then asks for the log-probabilities from its first scored token on
  (``logprob_start_len``: the radix cache reuses the prompt up to there, so the candidates share the
  visuals and the question).
* vLLM (``POST /v1/chat/completions`` with ``prompt_logprobs``): the server renders the
  conversation with its chat template (checked against the suite's at load), images as PNG data
  URLs, a video as its frames (``data:video/jpeg;base64,...``, PNG-encoded, lossless) with their
  timing in ``media_io_kwargs``, as far as the model's modality limits let it (``VLLM_MODALITIES``:
  frames as images where it takes no video). Prompt log-probabilities bypass vLLM's prefix cache:
  each candidate is a full prefill.
"""

from __future__ import annotations

import base64
import io
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

from loguru import logger

from lmms_egoplan.core.documentation import doc_page
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.retry import backoff_delay, retry_after
from lmms_egoplan.core.secrets import mask_secrets
from lmms_egoplan.models.chat import RenderedAnswer
from lmms_egoplan.models.likelihood import ScoredSequence
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
# Where the engine's own preprocessing gives the model another input than egoplan_hf's processor
# (tests/models/test_engine_conformance.py shows each against the engine's code): egoplan_server still
# scores, and says so at load.
ENGINE_DEVIATIONS: dict[tuple[str, str], str] = {
    ("sglang", "qwen2_vl"): "SGLang loads Qwen2-VL's processor with its own pixel range, 3,136 to 1,003,520 pixels "
                            "per image (utils/hf_transformers/processor.py), not the checkpoint's: images outside "
                            "it are resized otherwise than egoplan_hf resizes them",
    ("sglang", "llava"): "SGLang expands LLaVA's image placeholders inside the model (models/llava.py, "
                         "pad_input_ids), after its tokenization: how many tokens it gives each image is "
                         "not checked against egoplan_hf's",
    ("sglang", "llava_onevision"): "SGLang gives each image of a prompt with several images its AnyRes tiles, where "
                                   "transformers (egoplan_hf) gives each one crop",
    ("vllm", "llava_onevision"): "vLLM gives each image of a prompt with several images its AnyRes tiles "
                                 "(model_executor/models/llava_onevision.py), where transformers (egoplan_hf) gives "
                                 "each one crop",
}


class ServerSetupError(InputError):
    """The server cannot score for this run (unreachable, other model, no prompt log-probabilities, ...)."""


class ServerRequestError(RuntimeError):
    """A request the server refused, or that still failed after the retries."""


class _Transient(Exception):
    """A failure worth retrying: no connection, a timeout, 408 / 429 / 5xx."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class ServerPrompt:
    """One question or generation request as the suite renders it."""

    messages: list[dict]  # the user turn, in transformers' chat format (``ChatRenderer.user_turn``)
    visuals: ModelVisuals
    prefix_text: str  # ``messages`` rendered with the generation prompt
    prefix_ids: list[int]  # the local tokenizer's ids of ``prefix_text`` (no special tokens added)
    where: str


@dataclass(frozen=True)
class ServerScores:
    """What the server reports for one conversation: the token ids it ran, and per position whose
    log-probability it returned, (log-probability of that token, whether it was the most likely)."""

    token_ids: list[int]
    positions: dict[int, tuple[float, bool]]


class ServerClient:
    """JSON over HTTP to one server, with a timeout per request and retries with backoff for
    transient failures; ``stopping`` ends the retries (the run is stopping)."""

    def __init__(self, base_url: str, *, timeout: float, retries: int, backoff: float, max_backoff: float = 60.0,
                 connections: int = 16):
        import httpx

        self.base_url = re.sub(r"/v1/?$", "", base_url.rstrip("/"))
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff
        self.stopping = threading.Event()
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout,
                                    limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections))

    def close(self) -> None:
        self.stopping.set()
        self._client.close()

    def get(self, path: str, *, retry: bool = True) -> Any:
        return self._call("GET", path, None, retry)

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
                    raise ServerRequestError(f"{method} {self.base_url}{path}: {error}{tries}") from None
                self.stopping.wait(backoff_delay(attempt, self.backoff, self.max_backoff, error.retry_after))

    def _once(self, method: str, path: str, body: dict | None) -> Any:
        import httpx

        try:
            response = self._client.request(method, path, json=body)
        except httpx.TimeoutException:
            raise _Transient("timed out") from None
        except httpx.TransportError as error:
            raise _Transient(f"connection failed: {error}") from None
        if response.status_code in (408, 429) or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}: {_error_message(response)}",
                             retry_after(response.headers))
        if response.status_code != 200:
            raise ServerRequestError(f"{method} {self.base_url}{path}: HTTP {response.status_code}: "
                                     f"{_error_message(response)}")
        try:
            return response.json()
        except ValueError:
            raise _Transient(f"not a JSON body: {mask_secrets(response.text[:120])!r}") from None


class Engine:
    """What ``egoplan_server`` asks of a server; one subclass per engine."""

    name: str

    def __init__(self, client: ServerClient, model: str, *, concurrency: int):
        self.client = client
        self.model = model
        self.model_type = ""
        # Candidates of the questions in flight go out at once.
        self._candidates = ThreadPoolExecutor(max_workers=4 * concurrency, thread_name_prefix=f"{self.name}-candidates")

    def close(self) -> None:
        self._candidates.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def connect(self) -> str:
        """Check that the server answers and serves the model; returns where the server loaded it from
        (the default processor of the suite's side)."""
        listing = self._served_models()
        return next((m.get("root") or "" for m in listing if m.get("id") == self.model), "")

    def configure(self, tokenizer, model_type: str, *, takes_images: bool, video_native: bool,
                  videos_as_frames: bool) -> bool:
        """Fit the requests to the served architecture (``model_type``, the checkpoint's); returns
        whether videos go to the server as videos (else as their frames, images). Raises
        ServerSetupError where no form of the model's visuals reaches the server."""
        self.model_type = model_type
        deviation = ENGINE_DEVIATIONS.get((self.name, model_type))
        if deviation:
            logger.warning(f"egoplan_server: {deviation}; those scores can differ from egoplan_hf's "
                           f"({doc_page('backend.md', 'Architectures and engines')})")
        return video_native and not videos_as_frames

    def check_visuals(self, visuals: ModelVisuals, where: str) -> None:
        """Raise UnsupportedVisualError for visuals the server refuses for this architecture."""

    def check(self, probe: ServerPrompt, rendered: RenderedAnswer, sequence: ScoredSequence, tokenizer, *,
              takes_images: bool) -> None:
        """Raise ServerSetupError unless the server can score: the model is served, it returns the
        log-probabilities of a text-only probe question's tokens (``probe``, answered ``rendered``), and
        its token ids of that conversation are the suite's (``sequence``: the same chat template and
        tokenizer, no token added)."""
        self._check_server(takes_images)
        try:
            [scores] = self.score(probe, [rendered], [sequence])
        except (ServerRequestError, KeyError, TypeError, IndexError, ValueError, AttributeError) as error:
            raise self._probe_failed(f"did not return the prompt log-probabilities of a probe request "
                                     f"({type(error).__name__}: {error})") from None
        if not _same_ids(scores.token_ids, sequence.token_ids):
            raise self._other_tokens(tokenizer, scores.token_ids, sequence.token_ids,
                                     "serve the model with the same chat template (--chat-template) or pass the "
                                     "server's as model_args chat_template" if self.name == "vllm" else
                                     "the server's tokenizer adds or splits tokens differently")

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

    def generate(self, prompt: ServerPrompt, sampling: dict) -> str:
        """The text generated after ``prompt``; ``sampling``: max_new_tokens, temperature, top_p, top_k,
        repetition_penalty, stop (those set)."""
        raise NotImplementedError

    def _served_models(self) -> list[dict]:
        """The models ``GET /v1/models`` lists (both engines have it), ours among them."""
        try:
            listing = self.client.get("/v1/models", retry=False)
        except ServerRequestError as error:
            raise ServerSetupError(f"egoplan_server: no {self.name} server answers at base_url={self.client.base_url} "
                                   f"({error}); start it, or fix model_args base_url") from None
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
        try:
            return self.client.get("/model_info", retry=False)
        except ServerRequestError as error:
            raise self._probe_failed(f"does not answer GET /model_info ({error})") from None

    def _check_server(self, takes_images: bool) -> None:
        info = self._model_info()
        if takes_images and not info.get("has_image_understanding"):
            # /generate silently drops the media of a model served without image input.
            flagged = SGLANG_MULTIMODAL_FLAG.get(info.get("model_type") or self.model_type)
            fix = (f"start the server with --enable-multimodal (SGLang serves {flagged} without its vision tower "
                   f"otherwise)" if flagged else "serve the model the task is scored with, or fix pretrained")
            raise ServerSetupError(
                f"egoplan_server: the server at {self.client.base_url} serves {info.get('model_path')} without image "
                f"input, but model_args pretrained names a processor with one: {fix}")

    def check(self, probe, rendered, sequence, tokenizer, *, takes_images: bool) -> None:
        super().check(probe, rendered, sequence, tokenizer, takes_images=takes_images)
        if takes_images:
            # Prompts with images go as text, tokenized by the server: its tokenizer must give the suite's ids.
            answer = self.client.post("/generate", {**self._server_text(rendered.text), "return_prompt_token_ids": True,
                                                    "sampling_params": {"max_new_tokens": 0}})
            if list(answer["prompt_token_ids"]) != sequence.token_ids:
                raise self._other_tokens(tokenizer, list(answer["prompt_token_ids"]), sequence.token_ids,
                                         "the server's tokenizer adds or splits tokens differently")

    def score(self, prompt, rendered, sequences):
        media = self._media(prompt.visuals, prompt.where)
        # The prefix alone: its length after the visuals' placeholders expand (sglang PR 2597), and the
        # radix cache warm with it before the candidates arrive.
        prefix = self.client.post("/generate", {**self._prompt_fields(prompt.prefix_text, prompt.prefix_ids, media),
                                                "sampling_params": {"max_new_tokens": 0}})
        shift = prefix["meta_info"]["prompt_tokens"] - len(prompt.prefix_ids)

        def one(text: str, sequence: ScoredSequence) -> ServerScores:
            # Entry 0 of input_token_logprobs is always null: start one token before the first scored one.
            start = shift + sequence.first - 1
            body = {**self._prompt_fields(text, sequence.token_ids, media), "sampling_params": {"max_new_tokens": 0},
                    "return_logprob": True, "logprob_start_len": start, "top_logprobs_num": 1}
            return self._scores(self.client.post("/generate", body), start)

        return list(self._candidates.map(one, [r.text for r in rendered], sequences))

    def generate(self, prompt, sampling):
        sampling_params = {"max_new_tokens": sampling["max_new_tokens"], "temperature": sampling.get("temperature", 0.0),
                           **{k: sampling[k] for k in ("top_p", "top_k", "repetition_penalty") if k in sampling}}
        if sampling.get("stop"):
            sampling_params["stop"] = sampling["stop"]
        media = self._media(prompt.visuals, prompt.where)
        answer = self.client.post("/generate", {**self._prompt_fields(prompt.prefix_text, prompt.prefix_ids, media),
                                                "sampling_params": sampling_params})
        return answer["text"]

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
                f"the task chose ({doc_page('backend.md', 'Inference servers')}); use engine=vllm, or videos_as_frames=true to "
                f"send its frames as images (the model then sees no time, unlike egoplan_hf)")
        return {"image_data": [png_data_url(image) for image in visuals.images]} if visuals.images else {}


class VLLMEngine(Engine):
    name = "vllm"

    def configure(self, tokenizer, model_type: str, *, takes_images: bool, video_native: bool,
                  videos_as_frames: bool) -> bool:
        video_native = super().configure(tokenizer, model_type, takes_images=takes_images, video_native=video_native,
                                         videos_as_frames=videos_as_frames)
        self.modalities = VLLM_MODALITIES.get(model_type, {"image": None, "video": None})
        if video_native and "video" not in self.modalities:
            logger.warning(f"egoplan_server: vLLM serves {model_type} without video input ({_modalities_source(model_type)}): "
                           f"videos go as their frames (images), where egoplan_hf sends a prompt with only a video in "
                           f"the model's video format")
        if "image" not in self.modalities and takes_images and not video_native:
            raise ServerSetupError(
                f"egoplan_server: vLLM serves {model_type} with {_limits_text(self.modalities)} per prompt "
                f"({_modalities_source(model_type)}), and videos_as_frames=true would send every video as images: "
                f"leave videos_as_frames false (images still cannot go), or score with egoplan_hf")
        return video_native and "video" in self.modalities

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

    def score(self, prompt, rendered, sequences):
        messages, media_io = self._request_media(prompt)

        def one(answer: str) -> ServerScores:
            conversation = [*messages, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
            return self._scores(self.client.post("/v1/chat/completions", self._scoring_body(conversation, media_io)))

        return list(self._candidates.map(one, [r.text[r.start:r.end] for r in rendered]))

    def generate(self, prompt, sampling):
        messages, media_io = self._request_media(prompt)
        body = {"model": self.model, "messages": messages, "max_completion_tokens": sampling["max_new_tokens"],
                "temperature": sampling.get("temperature", 0.0),
                **{k: sampling[k] for k in ("top_p", "top_k", "repetition_penalty", "stop") if sampling.get(k)}}
        if media_io:
            body["media_io_kwargs"] = media_io
        return self.client.post("/v1/chat/completions", body)["choices"][0]["message"]["content"] or ""

    def _request_media(self, prompt: ServerPrompt) -> tuple[list[dict], dict | None]:
        self.check_visuals(prompt.visuals, prompt.where)
        if prompt.visuals.videos:
            self._check_video_timing(prompt.where)
        return _openai_messages(prompt.messages, prompt.visuals)

    def _scoring_body(self, messages: list[dict], media_io: dict | None = None) -> dict:
        # The closed assistant turn, its end-of-turn token(s) included; one generated token (at least
        # one is required), the prompt's log-probabilities (each token's own, with its rank) and ids.
        body = {"model": self.model, "messages": messages, "add_generation_prompt": False,
                "continue_final_message": False, "prompt_logprobs": 0, "return_token_ids": True,
                "max_completion_tokens": 1, "temperature": 0.0}
        if media_io:
            body["media_io_kwargs"] = media_io
        return body

    @staticmethod
    def _scores(answer: dict) -> ServerScores:
        ids, logprobs = answer["prompt_token_ids"], answer["prompt_logprobs"]
        if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
            raise ValueError("no prompt_token_ids / prompt_logprobs of the prompt's length")
        positions = {}
        for position in range(1, len(ids)):  # entry 0 is null: nothing predicts the first token
            entry = logprobs[position][str(ids[position])]
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
# A position of a server's prompt whose token id it did not report (before SGLang's logprob_start_len).
UNREPORTED = -1


def _same_ids(server_ids: Sequence[int], suite_ids: Sequence[int]) -> bool:
    """The server's ids are the suite's, where the server reported them."""
    return len(server_ids) == len(suite_ids) and all(s == t for s, t in zip(server_ids, suite_ids) if s != UNREPORTED)


def _bos_added_by(tokenizer) -> str | None:
    """The BOS token that ``tokenizer`` puts in front of a text with its default settings, if any."""
    bos = getattr(tokenizer, "bos_token", None)
    if not bos:
        return None
    added = tokenizer("a")["input_ids"]
    return bos if added[:1] == [tokenizer.bos_token_id] and added[1:] == tokenizer("a", add_special_tokens=False)["input_ids"] else None


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
