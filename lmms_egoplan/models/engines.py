"""The inference servers ``egoplan_server`` scores and generates with: SGLang and vLLM, over HTTP.

Each engine turns a question (the suite's chat rendering and visuals, see ``egoplan_server``) into
the requests its server documents, and reports per scored position the log-probability the server
computed and the token ids it ran (visual placeholders expanded), so that the backend locates the
scored span in the server's own ids. docs/backend.md cites the engines' sources for each field.

* SGLang (native ``POST /generate``): the client sends the rendered text (``/generate`` applies no
  chat template) with the images as PNG data URLs. A prefix-only request (``max_new_tokens`` 0)
  returns the expanded length of the prompt and warms the radix cache; each candidate then asks for
  the log-probabilities from its first scored token on (``logprob_start_len``: the radix cache
  reuses the prompt up to there, so the candidates share the visuals and the question).
* vLLM (``POST /v1/chat/completions`` with ``prompt_logprobs``): the server renders the
  conversation with its chat template (checked against the suite's at load), images as PNG data
  URLs, a video as its frames (``data:video/jpeg;base64,...``, PNG-encoded, lossless) with their
  timing in ``media_io_kwargs``. Prompt log-probabilities bypass vLLM's prefix cache: each
  candidate is a full prefill.
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

from lmms_egoplan.core.errors import InputError
from lmms_egoplan.judge.engine import backoff_delay
from lmms_egoplan.models.chat import RenderedAnswer
from lmms_egoplan.models.likelihood import ScoredSequence
from lmms_egoplan.models.visuals import ModelVisuals, UnsupportedVisualError

ENGINES = ("sglang", "vllm")
# The first vLLM release whose chat endpoint returns the prompt's token ids (``return_token_ids``)
# and that runs transformers 5; the first that reads a video's frame indices (vllm PR 40133).
VLLM_MIN_VERSION = (0, 19, 1)
VLLM_VIDEO_TIMING_VERSION = (0, 33, 0)


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
    prefix_length: int  # the local tokenizer's token count of ``prefix_text``
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
                             _float_or_none(response.headers.get("retry-after")))
        if response.status_code != 200:
            raise ServerRequestError(f"{method} {self.base_url}{path}: HTTP {response.status_code}: "
                                     f"{_error_message(response)}")
        try:
            return response.json()
        except ValueError:
            raise _Transient(f"not a JSON body: {response.text[:120]!r}") from None


class Engine:
    """What ``egoplan_server`` asks of a server; one subclass per engine."""

    name: str

    def __init__(self, client: ServerClient, model: str, *, concurrency: int):
        self.client = client
        self.model = model
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
        if scores.token_ids != sequence.token_ids:
            fix = ("serve the model with the same chat template (--chat-template) or pass the server's as model_args "
                   "chat_template" if self.name == "vllm" else "the server's tokenizer adds or splits tokens differently")
            raise ServerSetupError(
                f"egoplan_server: the {self.name} server at {self.client.base_url} turns a probe conversation into "
                f"other tokens than model_args pretrained's processor and chat template do (server: "
                f"{tokenizer.decode(scores.token_ids)!r}, suite: {tokenizer.decode(sequence.token_ids)!r}), so it "
                f"would score another prompt than egoplan_hf: {fix}; or point pretrained at the served model's "
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
            f"prompt log-probabilities (model_args engine={self.name}; docs/backend.md, Inference servers)")


class SGLangEngine(Engine):
    name = "sglang"

    def connect(self) -> str:
        super().connect()
        return self._model_info().get("model_path") or ""

    def _model_info(self) -> dict:
        try:
            return self.client.get("/model_info", retry=False)
        except ServerRequestError as error:
            raise self._probe_failed(f"does not answer GET /model_info ({error})") from None

    def _check_server(self, takes_images: bool) -> None:
        info = self._model_info()
        if takes_images and not info.get("has_image_understanding"):
            # /generate silently drops the media of a text-only model.
            raise ServerSetupError(
                f"egoplan_server: the server at {self.client.base_url} serves {info.get('model_path')}, a model without "
                f"image input, but model_args pretrained names a processor with one: serve the model the task is "
                f"scored with, or fix pretrained")

    def score(self, prompt, rendered, sequences):
        media = self._media(prompt.visuals, prompt.where)
        # The prefix alone: its length after the visuals' placeholders expand (sglang PR 2597), and the
        # radix cache warm with it before the candidates arrive.
        prefix = self.client.post("/generate", {"text": prompt.prefix_text, **media, "sampling_params": {"max_new_tokens": 0},
                                                "return_prompt_token_ids": True})
        shift = prefix["meta_info"]["prompt_tokens"] - prompt.prefix_length

        def one(text: str, sequence: ScoredSequence) -> ServerScores:
            # Entry 0 of input_token_logprobs is always null: start one token before the first scored one.
            start = shift + sequence.first - 1
            return self._scores(self.client.post("/generate", self._scoring_body(text, media, start)), start)

        return list(self._candidates.map(one, [r.text for r in rendered], sequences))

    def generate(self, prompt, sampling):
        sampling_params = {"max_new_tokens": sampling["max_new_tokens"], "temperature": sampling.get("temperature", 0.0),
                           **{k: sampling[k] for k in ("top_p", "top_k", "repetition_penalty") if k in sampling}}
        if sampling.get("stop"):
            sampling_params["stop"] = sampling["stop"]
        answer = self.client.post("/generate", {"text": prompt.prefix_text, **self._media(prompt.visuals, prompt.where),
                                                "sampling_params": sampling_params})
        return answer["text"]

    @staticmethod
    def _scoring_body(text: str, media: dict, start: int) -> dict:
        return {"text": text, **media, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                "logprob_start_len": start, "top_logprobs_num": 1, "return_prompt_token_ids": True}

    @staticmethod
    def _scores(answer: dict, start: int) -> ServerScores:
        meta = answer["meta_info"]
        entries, tops = meta["input_token_logprobs"], meta.get("input_top_logprobs") or []
        positions = {start + k: (float(entries[k][0]), bool(tops) and tops[k][0][1] == entries[k][1])
                     for k in range(1, len(entries))}
        return ServerScores(list(answer["prompt_token_ids"]), positions)

    def _media(self, visuals: ModelVisuals, where: str) -> dict:
        if visuals.videos:
            # /generate takes a video only as an encoded file, resampled by the server's own
            # --mm-process-config over the whole file, with no per-video timing for Qwen2/2.5-VL.
            raise UnsupportedVisualError(
                f"egoplan_server: {where} has a video, which SGLang's /generate cannot take with the frames and timing "
                f"the task chose (docs/backend.md, Inference servers); use engine=vllm, or videos_as_frames=true to "
                f"send its frames as images (the model then sees no time, unlike egoplan_hf)")
        return {"image_data": [png_data_url(image) for image in visuals.images]} if visuals.images else {}


class VLLMEngine(Engine):
    name = "vllm"

    def _check_server(self, takes_images: bool) -> None:
        try:
            version = str(self.client.get("/version", retry=False)["version"])
        except (ServerRequestError, KeyError, TypeError) as error:
            raise self._probe_failed(f"does not answer GET /version with its version ({error})") from None
        self.version = _version_tuple(version)
        if self.version < VLLM_MIN_VERSION:
            raise ServerSetupError(
                f"egoplan_server: the server at {self.client.base_url} runs vLLM {version}; scoring needs vLLM "
                f"{'.'.join(map(str, VLLM_MIN_VERSION))} or later (the prompt's token ids, return_token_ids): upgrade it")

    def score(self, prompt, rendered, sequences):
        messages, media_io = _openai_messages(prompt.messages, prompt.visuals)
        self._check_video_timing(prompt)

        def one(answer: str) -> ServerScores:
            conversation = [*messages, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]
            return self._scores(self.client.post("/v1/chat/completions", self._scoring_body(conversation, media_io)))

        return list(self._candidates.map(one, [r.text[r.start:r.end] for r in rendered]))

    def generate(self, prompt, sampling):
        messages, media_io = _openai_messages(prompt.messages, prompt.visuals)
        self._check_video_timing(prompt)
        body = {"model": self.model, "messages": messages, "max_completion_tokens": sampling["max_new_tokens"],
                "temperature": sampling.get("temperature", 0.0),
                **{k: sampling[k] for k in ("top_p", "top_k", "repetition_penalty", "stop") if sampling.get(k)}}
        if media_io:
            body["media_io_kwargs"] = media_io
        return self.client.post("/v1/chat/completions", body)["choices"][0]["message"]["content"] or ""

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

    def _check_video_timing(self, prompt: ServerPrompt) -> None:
        if prompt.visuals.videos and self.version < VLLM_VIDEO_TIMING_VERSION:
            raise UnsupportedVisualError(
                f"egoplan_server: {prompt.where} has a video, whose frames' timing (frames_indices) vLLM reads from "
                f"release {'.'.join(map(str, VLLM_VIDEO_TIMING_VERSION))} on (vllm PR 40133); the server runs "
                f"{'.'.join(map(str, self.version))}: upgrade it")


ENGINE_CLASSES = {"sglang": SGLangEngine, "vllm": VLLMEngine}


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
    seconds per temporal patch) unchanged. Without frame times, vLLM's defaults apply (fps 1)."""
    metadata = video.metadata()
    count = len(video.frames)
    timing = {"num_frames": count}  # vLLM keeps only the first num_frames frames (default 32)
    if metadata["fps"] is None:
        return timing
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
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error", body) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)[:300]


def _float_or_none(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
