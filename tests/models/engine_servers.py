"""Loopback SGLang and vLLM servers that compute with a tiny transformers checkpoint.

``EngineServer("sglang" | "vllm", checkpoint)`` listens on a random loopback port and answers the
endpoints ``egoplan_server`` uses, with the request and response schemas of SGLang 0.5.23's native
API and vLLM 0.33.0's OpenAI-compatible API (docs/backend.md cites the sources):

* SGLang: ``POST /generate`` (``input_ids`` run as they are; a ``text`` tokenized with the
  tokenizer's special tokens, as ``TokenizerManager._tokenize_texts`` does, also where the text
  already starts with a BOS; with ``image_data`` (data URLs) the processor's, which adds them unless
  the text starts with BOS; ``max_new_tokens`` 0 is a prefill; ``input_token_logprobs``
  ``[logprob, id, text]`` from ``logprob_start_len`` on, entry 0 null; the expanded
  ``prompt_tokens`` and ``prompt_token_ids``; ``cached_tokens``: the longest prefix shared with an
  earlier prompt, capped at ``logprob_start_len`` as the radix cache caps it; a prompt of
  ``context_length`` tokens or more, or a prompt plus ``max_new_tokens`` over it, 400 with SGLang's
  messages; greedy generation with the request's ``repetition_penalty`` only, as SGLang's
  ``/generate`` applies no generation_config), ``GET /model_info`` and ``/get_model_info``,
  ``GET /server_info`` and ``/get_server_info`` (the server's flags: ``attention_backend``,
  ``chunked_prefill_size``, ``page_size``, ``allow_auto_truncate``, fa3 / 8192 / 1 / false by default,
  as on an H100), ``GET /v1/models`` (``max_model_len``: ``context_length``). Unknown sampling keys are
  refused with 400, as SGLang's request schema does; ``multimodal=False`` plays a multimodal model
  served without its vision tower (SGLang's Gemma 3 without --enable-multimodal): no image
  understanding, images dropped.
* vLLM: ``POST /v1/chat/completions`` (the server renders with its chat template; ``image_url``
  and ``video_url`` data URLs, a video as ``data:video/jpeg;base64,<frame>,<frame>...`` with its
  timing in ``media_io_kwargs``, 1 fps where it gives none; ``prompt_logprobs``: entry 0 null, then
  per position a dict keyed by the token id with ``logprob`` and ``rank``; ``prompt_token_ids`` with
  ``return_token_ids``), ``GET /version``, ``GET /v1/models``; a wrong model name gets 404, both
  generation-prompt flags 400, ``max_completion_tokens`` 0 400, per-request media kwargs 400 unless
  the server trusts them, more images or videos than ``modalities`` allows (the model's
  ``get_supported_mm_limits``, e.g. ``{"video": 1}``; None: any) 400 with vLLM's message;
  ``prompt_logprobs`` k: the token's entry and the k most likely, logits instead of log-probabilities
  under ``logprobs_mode`` raw_logits; a prompt over ``context_length`` 400, max tokens shortened to
  fit it (``get_max_tokens``); greedy generation with the request's ``repetition_penalty`` or else
  the checkpoint's generation_config one (``--generation-config auto``).
* Either engine: ``api_key`` answers 401 to a request without it (SGLang: every endpoint but
  ``/health``; vLLM: ``/v1/...``).

``RouterProxy`` stands in front of several servers as a router does: SGLang's model gateway
(``sgl-model-gateway``: ``/generate`` re-serialized through its request type, so fields it does not
know are dropped; ``/get_model_info`` and ``/get_server_info`` from its first worker, no
``/model_info`` or ``/server_info``) or the one API server of a vLLM data-parallel deployment.

The log-probabilities are a real computation: the checkpoint's processor expands the visuals and
one float32 forward pass over the whole prompt gives each token's log-softmax; ``ran`` records each
answered request's body with the token ids it ran. Faults for tests:
``die_after(n)`` drops every request after the next ``n`` (a crashed server behind its port);
``version`` plays an older vLLM; ``prompt_logprobs=False`` a server that ignores the field;
``chat_template`` a server started with another template.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading
import time

from lmms_egoplan.demo.kit.judge_server import _Handler, _Server

# SGLang 0.5.23's SamplingParams keys (sglang/api/v1/api_types.py); anything else is a 400.
SGLANG_SAMPLING_KEYS = frozenset({
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n", "json_schema", "regex",
    "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim",
    "stream_interval", "logit_bias", "sampling_seed", "custom_params", "beam_width", "watermark", "choice"})


class RequestRefused(Exception):
    def __init__(self, status: int, payload: dict):
        super().__init__(status, payload)
        self.status, self.payload = status, payload


class TinyModel:
    """The checkpoint's processor and model (float32, CPU); one forward pass at a time."""

    def __init__(self, checkpoint: str | os.PathLike):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor

        self.path = str(checkpoint)
        self.processor = AutoProcessor.from_pretrained(self.path)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.takes_images = getattr(self.processor, "image_processor", None) is not None
        model_class = AutoModelForImageTextToText if self.takes_images else AutoModelForCausalLM
        self.model = model_class.from_pretrained(self.path, dtype=torch.float32).eval()
        self.lock = threading.Lock()

    def encode(self, text: str, *, images=(), videos=(), video_metadata=(), add_special_tokens: bool) -> dict:
        media = {}
        if images:
            media["images"] = [list(images)]
        if videos:
            media.update(videos=[list(v) for v in videos], video_metadata=list(video_metadata), do_sample_frames=False)
        try:
            return self.processor(text=[text], return_tensors="pt", add_special_tokens=add_special_tokens, **media)
        except (ValueError, TypeError) as error:  # e.g. placeholders and media do not match
            raise RequestRefused(400, {"error": {"message": f"{type(error).__name__}: {error}"}}) from None

    def prompt_logprobs(self, inputs, top: int = 1, logits: bool = False) -> tuple[list[int], list[dict | None]]:
        """The prompt's ids and, per position p >= 1, ``{"logprob": log p(token p), "top": [(id, log p),
        ...]}`` with the ``top`` most likely tokens, most likely first (``logits``: the logits instead)."""
        import torch

        with self.lock, torch.inference_mode():
            raw = self.model(**inputs).logits[0].float()
        values = raw if logits else torch.log_softmax(raw, dim=-1)
        ids = inputs["input_ids"][0].tolist()
        rows: list[dict | None] = [None]
        for position in range(1, len(ids)):
            row = values[position - 1]
            best = torch.topk(row, max(top, 1))
            rows.append({"logprob": float(row[ids[position]]),
                         "top": [(int(i), float(v)) for i, v in zip(best.indices, best.values)]})
        return ids, rows

    def generate(self, inputs, max_new_tokens: int, stop: list[str], repetition_penalty: float | None = None
                 ) -> tuple[str, list[int]]:
        """Greedy generation with only the given settings (the end-of-sequence tokens the checkpoint's)."""
        import torch
        from transformers import GenerationConfig

        config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens,
                                  repetition_penalty=repetition_penalty or 1.0,
                                  eos_token_id=self.model.generation_config.eos_token_id,
                                  pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id)
        with self.lock, torch.inference_mode():
            output = self.model.generate(**inputs, generation_config=config)
        new = output[0, inputs["input_ids"].shape[1]:].tolist()
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        cut = min((text.find(s) for s in stop if s and s in text), default=len(text))
        return text[:cut], new


class _Loopback:
    """An HTTP server on a random loopback port, answered by ``handler`` (which reads the owner from
    ``self.server.owner``); a context manager."""

    def _listen(self, handler, port: int = 0) -> None:
        self._httpd = _Server(("127.0.0.1", port), handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self):
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class EngineServer(_Loopback):
    """The server; use it as a context manager. ``requests`` records each POST body (path, body)."""

    def __init__(self, engine: str, checkpoint: str | os.PathLike, *, served_model_name: str = "tiny",
                 version: str = "0.33.0", trust_request_mm_kwargs: bool = True, prompt_logprobs: bool = True,
                 chat_template: str | None = None, modalities: dict[str, int | None] | None = None,
                 multimodal: bool = True, api_key: str | None = None, context_length: int | None = None,
                 logprobs_mode: str = "raw_logprobs", port: int = 0, **server_flags):
        if engine not in ("sglang", "vllm"):
            raise ValueError(f"engine must be sglang or vllm, got {engine!r}")
        self.engine = engine
        self.model = TinyModel(checkpoint)
        self.api_key = api_key
        self.context_length = context_length or self.model.model.config.get_text_config().max_position_embeddings
        self.logprobs_mode = logprobs_mode
        self.server_flags = {**SGLANG_H100_FLAGS, **server_flags}
        unknown = set(self.server_flags) - set(SGLANG_H100_FLAGS)
        if unknown:
            raise ValueError(f"unknown server flags {sorted(unknown)}")
        self.served_model_name = served_model_name
        self.version = version
        self.trust_request_mm_kwargs = trust_request_mm_kwargs
        self.supports_prompt_logprobs = prompt_logprobs
        self.chat_template = chat_template or self.model.processor.chat_template
        self.modalities = modalities
        self.multimodal = multimodal and self.model.takes_images
        self.requests: list[tuple[str, dict]] = []
        self.ran: list[tuple[dict, list[int]]] = []  # (body, the token ids it ran) per answered request
        self.cached_prompts: list[list[int]] = []  # SGLang's radix cache, as prompts
        self._lock = threading.Lock()
        self._remaining: int | None = None
        # Faults (tests set them): a generation reply that is no whole answer ("abort", "null", "empty",
        # "reasoning"); a 500 for every POST whose body holds fail_on; seconds each POST hangs before
        # its answer; log-probabilities cut to the first truncate_logprobs entries, or NaN; vLLM moving
        # each turn's images before its text (as it does for a template it reads as string content);
        # 503 to everything while starting.
        self.reply_fault: str | None = None
        self.fail_on: str | None = None
        self.hang = 0.0
        self.truncate_logprobs: int | None = None
        self.nan_logprobs = False
        self.logprob_offset = 0.0  # added to every prompt log-probability (other weights)
        self.images_first = False
        self.starting = False
        self._listen(_EngineHandler, port)

    def die_after(self, requests: int | None) -> None:
        """Answer ``requests`` more POSTs, then drop every request without an answer (None: live again)."""
        with self._lock:
            self._remaining = requests

    def fails(self, body: dict) -> bool:
        """Whether ``fail_on`` is in the request's prompt (its text, or its ids decoded)."""
        if self.fail_on is None:
            return False
        ids = body.get("input_ids")
        return self.fail_on in json.dumps(body) or (isinstance(ids, list)
                                                    and self.fail_on in self.model.tokenizer.decode(ids))

    def dead(self) -> bool:
        with self._lock:
            return self._remaining is not None and self._remaining <= 0

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.ran.clear()
            self.cached_prompts.clear()

    def _ran(self, body: dict, ids: list[int]) -> None:
        with self._lock:
            self.ran.append((body, ids))

    def _admit(self, path: str, body: dict) -> bool:
        with self._lock:
            if self._remaining is not None:
                if self._remaining <= 0:
                    return False
                self._remaining -= 1
            self.requests.append((path, body))
            return True

    # ------------------------------------------------------------------ GET

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.served_model_name, "object": "model", "root": self.model.path,
                                            "owned_by": self.engine, "max_model_len": self.context_length}]}

    def server_info(self) -> dict:
        return {**self.server_flags, "prefill_attention_backend": None, "decode_attention_backend": None,
                "context_length": None, "version": "0.5.23"}

    def model_info(self) -> dict:
        config = self.model.model.config
        return {"model_path": self.model.path, "served_model_name": self.served_model_name,
                "tokenizer_path": self.model.path, "is_generation": True,
                "has_image_understanding": self.multimodal, "has_audio_understanding": False,
                "model_type": config.model_type, "architectures": config.architectures}

    # ------------------------------------------------------------------ SGLang /generate

    def sglang_generate(self, body: dict) -> dict:
        sampling = body.get("sampling_params") or {}
        unknown = set(sampling) - SGLANG_SAMPLING_KEYS
        if unknown:
            raise RequestRefused(400,
                                 {"error": f"Additional properties are not allowed ({sorted(unknown)} unexpected)"})
        if body.get("video_data"):
            raise RequestRefused(400, {"error": {"message": "the loopback server takes no video_data"}})
        images = body.get("image_data") or []
        if not isinstance(images, list):
            images = [images]
        images = [data_url_image(item) for item in images] if self.multimodal else []
        inputs = self._sglang_inputs(body, images)
        ids = inputs["input_ids"][0].tolist()
        max_new_tokens = int(sampling.get("max_new_tokens", 128))
        # TokenizerManager._validate_one_request (managers/tokenizer_manager.py 1338-1378).
        if len(ids) >= self.context_length:
            raise RequestRefused(400, {"error": {"message": f"The input ({len(ids)} tokens) is longer than the model's "
                                                            f"context length ({self.context_length} tokens)."}})
        if len(ids) + max_new_tokens > self.context_length:
            raise RequestRefused(400, {"error": {"message": (
                f"Requested token count exceeds the model's maximum context length of {self.context_length} tokens. "
                f"You requested a total of {len(ids) + max_new_tokens} tokens: {len(ids)} tokens from the input "
                f"messages and {max_new_tokens} tokens for the completion.")}})
        self._ran(body, ids)
        meta = {"id": f"req-{len(self.requests)}", "prompt_tokens": len(ids), "completion_tokens": 0,
                "finish_reason": {"type": "length", "length": 0}}
        start = body.get("logprob_start_len", -1) if body.get("return_logprob") else -1
        if start > len(ids):
            raise RequestRefused(400, {"error": {"message": f"req.logprob_start_len={start} is higher than the number "
                                                            f"of input tokens len(req.origin_input_ids)={len(ids)}."}})
        cap = len(ids) - 1 if start < 0 else min(len(ids) - 1, start)
        with self._lock:
            meta["cached_tokens"] = min(cap, max((len(os.path.commonprefix([ids, p])) for p in self.cached_prompts),
                                                 default=0))
            self.cached_prompts.append(ids)
        text, output_ids = "", []
        if body.get("return_logprob"):
            top = int(body.get("top_logprobs_num") or 0)
            _, rows = self.model.prompt_logprobs(inputs, top)
            start = len(ids) if start < 0 else start
            meta["input_token_logprobs"] = [[None, ids[start], None]
                                            if k == start else [rows[k]["logprob"], ids[k], None]
                                            for k in range(start, len(ids))]
            if top:
                meta["input_top_logprobs"] = [None if k == start else [[v, i, None] for i, v in rows[k]["top"][:top]]
                                              for k in range(start, len(ids))]
        if max_new_tokens > 0:
            stop = sampling.get("stop") or []
            text, output_ids = self.model.generate(inputs, max_new_tokens, [stop] if isinstance(stop, str) else stop,
                                                   sampling.get("repetition_penalty"))
            meta["completion_tokens"] = len(output_ids)
        if max_new_tokens > 0 and self.reply_fault in ("abort", "empty"):
            meta["finish_reason"] = ({"type": "abort", "message": "Abort request", "status_code": 200, "err_type": None}
                                     if self.reply_fault == "abort" else {"type": "length", "length": 1})
            text = text[:len(text) // 2] if self.reply_fault == "abort" else ""
        self._damage_logprobs(meta.get("input_token_logprobs"),
                              lambda entry, value: entry.__setitem__(0, entry[0] + value))
        answer = {"text": text, "output_ids": output_ids, "meta_info": meta}
        if body.get("return_prompt_token_ids"):
            answer["prompt_token_ids"] = ids
        return answer

    def _damage_logprobs(self, entries: list | None, make_nan) -> None:
        """``truncate_logprobs`` / ``nan_logprobs`` / ``logprob_offset`` applied to a reply's prompt
        log-probabilities (after its null first entry)."""
        if entries is None:
            return
        if self.nan_logprobs or self.logprob_offset:
            for entry in entries[1:]:
                make_nan(entry, float("nan") if self.nan_logprobs else self.logprob_offset)
        if self.truncate_logprobs is not None:
            del entries[self.truncate_logprobs:]

    def _sglang_inputs(self, body: dict, images: list):
        """The model inputs of a /generate prompt, tokenized where SGLang tokenizes it."""
        import torch

        if isinstance(body.get("input_ids"), list):
            if images:
                raise RequestRefused(400, {"error": {"message": "the loopback server takes images with a text only"}})
            ids = torch.tensor([body["input_ids"]])
        elif not isinstance(body.get("text"), str):
            raise RequestRefused(400,
                                 {"error": {"message": "the loopback server takes one text or input_ids per request"}})
        elif images:
            # The multimodal processor leaves out the special tokens of a text that starts with BOS
            # (multimodal/processors/base_processor.py).
            bos = self.model.tokenizer.bos_token
            return self.model.encode(body["text"], images=images,
                                     add_special_tokens=not (bos and body["text"].startswith(bos)))
        else:  # TokenizerManager._tokenize_texts: the tokenizer's defaults, a BOS in the text or not
            ids = self.model.tokenizer(body["text"], return_tensors="pt")["input_ids"]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    # ------------------------------------------------------------------ vLLM /v1/chat/completions

    def vllm_chat(self, body: dict) -> dict:
        if body.get("model") and body["model"] != self.served_model_name:
            raise RequestRefused(404, _vllm_error(f"The model `{body['model']}` does not exist. Valid aliases: "
                                                  f"{self.served_model_name}.", "NotFoundError", 404, "model"))
        add_generation_prompt = body.get("add_generation_prompt", True)
        continue_final = body.get("continue_final_message", False)
        if add_generation_prompt and continue_final:
            raise RequestRefused(400, _vllm_error("Cannot set both `continue_final_message` and "
                                                  "`add_generation_prompt` to True.", "Bad Request", 400))
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", 16))
        if max_tokens is not None and max_tokens < 1:
            raise RequestRefused(400, _vllm_error("max_tokens must be at least 1, got 0.", "BadRequestError", 400))
        for field in ("media_io_kwargs", "mm_processor_kwargs"):
            if body.get(field) and not self.trust_request_mm_kwargs:
                raise RequestRefused(400, _vllm_error(
                    "Per-request mm_processor_kwargs are disabled by default because they can change multimodal "
                    "preprocessing resource usage. Start the server with --trust-request-mm-kwargs only when "
                    "clients are trusted.", "BadRequestError", 400, field))
        messages, images, videos = hf_messages(body.get("messages") or [])
        if self.images_first:
            messages = [{**m, "content": sorted(m["content"], key=lambda part: part["type"] == "text")}
                        for m in messages]
        for modality, count in (("image", len(images)), ("video", len(videos))):
            limit = (self.modalities or {modality: None}).get(modality, 0)
            if count and limit is not None and count > limit:
                raise RequestRefused(400, _vllm_error(f"At most {limit} {modality}(s) may be provided in one prompt.",
                                                      "BadRequestError", 400, modality))
        timing = (body.get("media_io_kwargs") or {}).get("video", {})
        metadata = [_video_metadata(len(frames), timing) for frames in videos]
        text = self.model.processor.apply_chat_template(messages, chat_template=self.chat_template, tokenize=False,
                                                        add_generation_prompt=add_generation_prompt,
                                                        continue_final_message=continue_final)
        inputs = self.model.encode(text, images=images, videos=videos, video_metadata=metadata,
                                   add_special_tokens=bool(body.get("add_special_tokens", False)))
        ids = inputs["input_ids"][0].tolist()
        if len(ids) > self.context_length:
            raise RequestRefused(400, _vllm_error(f"Input length ({len(ids)}) exceeds model's maximum context length "
                                                  f"({self.context_length}).", "BadRequestError", 400))
        self._ran(body, ids)
        stop = body.get("stop") or []
        # get_max_tokens: the request's (else 16 here), shortened to the context; the checkpoint's
        # generation_config defaults under the request's settings (--generation-config auto).
        max_tokens = min(max_tokens or 16, self.context_length - len(ids))
        penalty = body.get("repetition_penalty", self.model.model.generation_config.repetition_penalty)
        generated, output_ids = self.model.generate(inputs, max_tokens, [stop] if isinstance(stop, str) else stop,
                                                    penalty)
        answer = {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "model": self.served_model_name,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": generated}, "logprobs": None,
                               "finish_reason": "length", "stop_reason": None}],
                  "usage": {"prompt_tokens": len(ids), "completion_tokens": len(output_ids),
                            "total_tokens": len(ids) + len(output_ids)}}
        if body.get("prompt_logprobs") is not None and self.supports_prompt_logprobs:
            top = int(body["prompt_logprobs"])
            _, rows = self.model.prompt_logprobs(inputs, top, logits=self.logprobs_mode.endswith("logits"))
            answer["prompt_logprobs"] = [None] + [self._prompt_logprob(ids[p], rows[p], top) for p in range(1,
                                                                                                            len(ids))]
            self._damage_logprobs(answer["prompt_logprobs"],
                                  lambda entry, value: [item.__setitem__("logprob", item["logprob"] + value)
                                                        for item in entry.values()])
        message = answer["choices"][0]["message"]
        if self.reply_fault == "abort":
            answer["choices"][0]["finish_reason"], message["content"] = "abort", generated[:len(generated) // 2]
        elif self.reply_fault == "null":
            message["content"] = None
        elif self.reply_fault == "empty":
            message["content"] = ""
        elif self.reply_fault == "reasoning":
            message["reasoning"], message["content"] = generated, ""
        if body.get("return_token_ids"):
            answer["prompt_token_ids"] = ids
            answer["choices"][0]["token_ids"] = output_ids
        return answer

    def _prompt_logprob(self, token: int, row: dict, top: int) -> dict:
        """vLLM's entry of one prompt position: the token's own (with its rank), then the ``top``
        most likely tokens, each keyed by its id."""
        ranked = [i for i, _ in row["top"]]
        rank = ranked.index(token) + 1 if token in ranked else len(ranked) + 1
        if rank > 1 and row["logprob"] >= row["top"][0][1]:  # ties aside
            rank = 1
        entry = {str(token): {"logprob": row["logprob"], "rank": rank,
                              "decoded_token": self.model.tokenizer.decode([token])}}
        for place, (candidate, value) in enumerate(row["top"][:top], start=1):
            entry.setdefault(str(candidate), {"logprob": value, "rank": place,
                                              "decoded_token": self.model.tokenizer.decode([candidate])})
        return entry


class _EngineHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802
        server: EngineServer = self.server.owner
        path = self.path.split("?")[0].rstrip("/")
        routes = {"/v1/models": server.models, "/health": dict}
        routes.update({"/model_info": server.model_info, "/get_model_info": server.model_info,
                       "/server_info": server.server_info, "/get_server_info": server.server_info}
                      if server.engine == "sglang" else {"/version": lambda: {"version": server.version}})
        if path not in routes:
            self._send(404, {"detail": "Not Found"})
            return
        if server.dead():
            self.close_connection = True  # a crashed server: no answer
            return
        if server.hang:
            time.sleep(server.hang)  # a hung node: its health probe too
        if server.starting:
            self._send(503, {"detail": "the model is loading"})
            return
        if self._refused_without_key(server, path):
            return
        self._send(200, routes[path]())

    def do_POST(self) -> None:  # noqa: N802
        server: EngineServer = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        path = self.path.split("?")[0].rstrip("/")
        route = {"sglang": {"/generate": server.sglang_generate},
                 "vllm": {"/v1/chat/completions": server.vllm_chat}}[server.engine].get(path)
        if route is None:
            self._send(404, {"detail": "Not Found"})
            return
        if self._refused_without_key(server, path):
            return
        if server.starting:
            self._send(503, {"detail": "the model is loading"})
            return
        if not server._admit(path, body):
            self.close_connection = True  # the server died: no answer
            return
        if server.hang:
            time.sleep(server.hang)
        if server.fails(body):
            self._send(500, {"error": {"message": "Internal Server Error: the processor failed", "code": 500}})
            return
        try:
            self._send(200, route(body))
        except RequestRefused as refused:
            self._send(refused.status, refused.payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _refused_without_key(self, server: EngineServer, path: str) -> bool:
        """--api-key: SGLang guards every endpoint but /health (utils/auth.py), vLLM /v1/... (its
        AuthenticationMiddleware's GUARDED_PREFIX)."""
        guarded = path.startswith("/v1") if server.engine == "vllm" else not path.startswith("/health")
        if server.api_key and guarded and self.headers.get("Authorization") != f"Bearer {server.api_key}":
            self._send(401, {"error": "Unauthorized"})
            return True
        return False


# SGLang's settings on an H100 where the command line names none (model_override_base.py 305-311: fa3;
# server_args: chunked prefill on, one token per page, no auto-truncation), as /server_info reports them.
SGLANG_H100_FLAGS = {"attention_backend": "fa3", "chunked_prefill_size": 8192, "page_size": 1,
                     "allow_auto_truncate": False, "enable_mis": False}


def _vllm_error(message: str, kind: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _data_url_payload(url: str) -> bytes:
    if not url.startswith("data:"):
        raise RequestRefused(400, {"error": {"message": f"the loopback server takes data URLs only, got {url[:40]!r}"}})
    return url.split(",", 1)[1]


def data_url_image(url: str):
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(_data_url_payload(url))))
    image.load()
    return image.convert("RGB")


def hf_messages(messages: list[dict]) -> tuple[list[dict], list, list[list]]:
    """OpenAI chat messages as transformers' chat format, with the decoded images and videos, in order."""
    converted, images, videos = [], [], []
    for message in messages:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        hf_parts = []
        for part in parts:
            if part["type"] == "text":
                hf_parts.append({"type": "text", "text": part["text"]})
            elif part["type"] == "image_url":
                images.append(data_url_image(part["image_url"]["url"]))
                hf_parts.append({"type": "image"})
            elif part["type"] == "video_url":
                # vLLM's VideoMediaIO.load_base64 for video/jpeg: comma-separated base64 frames, each opened by PIL.
                frames = _data_url_payload(part["video_url"]["url"]).split(",")
                videos.append([data_url_image(f"data:image/png;base64,{frame}") for frame in frames])
                hf_parts.append({"type": "video"})
            else:
                raise RequestRefused(400,
                                     _vllm_error(f"unknown content part type {part['type']!r}", "Bad Request", 400))
        converted.append({"role": message["role"], "content": hf_parts})
    return converted, images, videos


def _video_metadata(count: int, timing: dict) -> dict:
    """The metadata vLLM 0.33.0 builds for pre-extracted frames (vllm/multimodal/media/video.py,
    ``VideoMediaIO.load_base64``), with its checks: fps (default 1), frames_indices (integers, one
    per frame; default 0..n-1), total_num_frames (an integer, at least n; default n), duration."""
    fps = float(timing.get("fps", 1.0))
    indices = timing.get("frames_indices", list(range(count)))
    total = timing.get("total_num_frames", count)
    if not (isinstance(indices, list) and all(isinstance(i, int) for i in indices)) or len(indices) != count:
        raise RequestRefused(400, _vllm_error("frames_indices must be a list of integers, one per frame sent",
                                              "BadRequestError", 400))
    if not isinstance(total, int) or total < count:
        raise RequestRefused(400, _vllm_error("total_num_frames must be a positive integer, at least the number "
                                              "of frames sent", "BadRequestError", 400))
    return {"fps": fps, "frames_indices": indices, "total_num_frames": total,
            "duration": timing.get("duration", total / fps)}


# What SGLang's model gateway keeps of a /generate body: the fields of its GenerateRequest and
# SamplingParams types, which it re-serializes to the worker (sgl-model-gateway/src/protocols/
# generate.rs and sampling_params.rs; routers/http/router.rs send_typed_request); anything else
# (return_prompt_token_ids) is dropped.
GATEWAY_GENERATE_FIELDS = frozenset({
    "text", "model", "input_ids", "input_embeds", "image_data", "video_data", "audio_data", "sampling_params",
    "return_logprob", "logprob_start_len", "top_logprobs_num", "token_ids_logprob", "return_text_in_logprobs",
    "stream", "log_metrics", "return_hidden_states", "return_routed_experts", "modalities", "session_params",
    "lora_path", "lora_id", "custom_logit_processor", "bootstrap_host", "bootstrap_port", "bootstrap_room",
    "bootstrap_pair_key", "data_parallel_rank", "background", "conversation_id", "priority", "extra_key", "no_logs",
    "custom_labels", "return_bytes", "return_entropy", "rid"})
GATEWAY_SAMPLING_FIELDS = frozenset({
    "temperature", "max_new_tokens", "top_p", "top_k", "frequency_penalty", "presence_penalty", "repetition_penalty",
    "stop", "ignore_eos", "skip_special_tokens", "json_schema", "regex", "ebnf", "min_p", "min_new_tokens",
    "stop_token_ids", "no_stop_trim", "n", "sampling_seed"})
# The routes each router passes on: GET path -> the worker's path; POST paths.
ROUTER_ROUTES = {
    # sgl-model-gateway's server (public routes and /generate): /v1/models, /get_model_info and
    # /get_server_info from the first healthy worker (proxy_get_request, to its /model_info and
    # /server_info), no /model_info or /server_info of its own.
    "sglang-gateway": ({"/v1/models": "/v1/models", "/get_model_info": "/model_info",
                        "/get_server_info": "/server_info", "/health": "/health"}, ("/generate",)),
    # A vLLM data-parallel deployment (--data-parallel-size, multi-node with --headless) has one API
    # server, vLLM's own: the routes the backend uses, as they are.
    "vllm-dp": ({"/v1/models": "/v1/models", "/version": "/version", "/health": "/health"}, ("/v1/chat/completions",)),
}


class RouterProxy(_Loopback):
    """A router in front of ``upstreams`` (running ``EngineServer``s), as ``kind`` passes requests
    (``ROUTER_ROUTES``): GETs to the first upstream, each POST to the next upstream in turn (the
    worst case for prefix sharing); an upstream that does not answer gets a 502 back, as a router
    answers. ``posts`` records (upstream index, body sent on) per POST. A context manager."""

    def __init__(self, kind: str, upstreams: list[EngineServer]):
        self.kind, self.upstreams = kind, upstreams
        self.gets, self.post_paths = ROUTER_ROUTES[kind]
        self.posts: list[tuple[int, dict]] = []
        self._turn = 0
        self._lock = threading.Lock()
        self._listen(_ProxyHandler)

    def forward(self, method: str, path: str, body: dict | None, headers: dict) -> tuple[int, bytes]:
        import httpx

        if method == "GET":
            upstream, path = 0, self.gets[path]
        else:
            if self.kind == "sglang-gateway":
                body = {k: v for k, v in body.items() if k in GATEWAY_GENERATE_FIELDS}
                if isinstance(body.get("sampling_params"), dict):
                    body["sampling_params"] = {k: v for k, v in body["sampling_params"].items()
                                               if k in GATEWAY_SAMPLING_FIELDS}
            with self._lock:
                upstream = self._turn % len(self.upstreams)
                self._turn += 1
                self.posts.append((upstream, body))
        forwarded = {k: v for k, v in headers.items() if k.lower() == "authorization"}
        try:
            response = httpx.request(method, f"{self.upstreams[upstream].base_url}{path}", json=body, headers=forwarded,
                                     timeout=120)
        except httpx.TransportError as error:
            return 502, json.dumps({"error": {"message": f"call_upstream_request_failed: {error}"}}).encode()
        return response.status_code, response.content


class _ProxyHandler(_Handler):
    def do_GET(self) -> None:  # noqa: N802
        self._route("GET", None)

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST", json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"))

    def _route(self, method: str, body: dict | None) -> None:
        proxy: RouterProxy = self.server.owner
        path = self.path.split("?")[0].rstrip("/")
        if (path not in proxy.gets) if method == "GET" else (path not in proxy.post_paths):
            self._send(404, {"detail": "Not Found"})
            return
        status, content = proxy.forward(method, path, body, dict(self.headers.items()))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)
