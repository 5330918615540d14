"""A real OpenAI-compatible chat-completions server on 127.0.0.1, scripted per test.

``ChatServer(responder)`` listens on a random loopback port and answers
``POST <base_url>/chat/completions`` (any path ending so, which also covers Azure's
``/openai/deployments/<name>/chat/completions``) with whatever ``responder(call)`` returns: a
``Reply`` with the text, or an HTTP error status, after an optional delay. It records every
call (``calls``) and the most calls it had in flight at once (``max_in_flight``).

The same server plays two parts:

* a **judge** for ``lmms_egoplan.judge`` (``judge_base_url=server.base_url``)::

      with ChatServer(rating_responder(hash_rating)) as judge: ...

* a chat **model** for lmms-eval's ``openai`` backend, answering generation requests::

      with ChatServer(lambda call: Reply("the answer")) as model:
          run_lmms_eval(model="openai", model_args=f"model=fake,base_url={model.base_url},api_key=unused", ...)

Responders are plain functions of a ``ChatCall``; the helpers below compose the usual
scripts (fail the first attempt, answer slowly, hang past the client's timeout).
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Sequence

from lmms_egoplan.judge.engine import PREFLIGHT_MESSAGES


@dataclass(frozen=True)
class ChatCall:
    """One chat-completions request as the server received it."""

    path: str
    body: dict
    headers: dict[str, str]  # lower-case names
    attempt: int  # how many earlier calls carried the same messages (0 = first)
    received: float  # time.monotonic() on arrival

    @property
    def messages(self) -> list[dict]:
        return self.body.get("messages", [])

    @property
    def text(self) -> str:
        """The text of the last user message (text parts joined for multimodal content)."""
        user = [m for m in self.messages if m.get("role") == "user"]
        content = user[-1].get("content", "") if user else ""
        if isinstance(content, list):
            return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
        return content


@dataclass(frozen=True)
class Reply:
    """What the server does with a call: answer ``text`` (status 200) or fail with ``status``."""

    text: str = ""
    status: int = 200
    delay: float = 0.0  # seconds to wait before replying
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None  # the model the answer says it comes from (default: the one requested)
    body: str | None = None  # send this body (as text/html) instead of a chat completion: a broken proxy


Responder = Callable[[ChatCall], Reply]


class ChatServer:
    """The server; use it as a context manager (or ``start()`` / ``close()``).

    The judge's preflight request (``lmms_egoplan.judge.engine.PREFLIGHT_MESSAGES``, sent when a
    judged task loads) is answered "OK" and counted in ``preflight_calls``, not in ``calls``;
    with ``answer_preflight=False`` it goes to the responder like any call.
    """

    def __init__(self, responder: Responder, *, model_name: str = "loopback-judge", answer_preflight: bool = True):
        self.responder = responder
        self.model_name = model_name
        self.answer_preflight = answer_preflight
        self.preflight_calls = 0
        self._lock = threading.Lock()
        self._calls: list[ChatCall] = []
        self._attempts: dict[str, int] = {}
        self._in_flight = 0
        self.max_in_flight = 0
        self._closing = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def calls(self) -> list[ChatCall]:
        with self._lock:
            return list(self._calls)

    def reset(self) -> None:
        """Forget the recorded calls and the concurrency peak (attempt counts too)."""
        with self._lock:
            self._calls.clear()
            self._attempts.clear()
            self.max_in_flight = 0

    def start(self) -> "ChatServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes replies that are still waiting out their delay
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _begin(self, path: str, body: dict, headers: dict[str, str]) -> ChatCall:
        key = hashlib.sha256(json.dumps(body.get("messages"), sort_keys=True).encode()).hexdigest()
        with self._lock:
            call = ChatCall(path, body, headers, self._attempts.get(key, 0), time.monotonic())
            self._attempts[key] = call.attempt + 1
            self._calls.append(call)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        return call

    def _end(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _wait(self, seconds: float) -> None:
        self._closing.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512  # many clients connect at once; a full backlog would stall them


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; with Nagle's algorithm on, the body would wait
        # for the client's delayed ACK (~40 ms per call on keep-alive connections).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        server: ChatServer = self.server.owner
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if not self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if server.answer_preflight and body.get("messages") == list(PREFLIGHT_MESSAGES):
            with server._lock:
                server.preflight_calls += 1
            self._send(200, _completion("preflight", body.get("model") or server.model_name, "OK"))
            return
        call = server._begin(self.path, body, {k.lower(): v for k, v in self.headers.items()})
        try:
            reply = server.responder(call)
            if reply.delay:
                server._wait(reply.delay)
            if reply.body is not None:
                self._send(reply.status, reply.body, reply.headers)
                return
            if reply.status != 200:
                self._send(reply.status, {"error": {"message": reply.text or f"scripted status {reply.status}",
                                                    "type": "scripted_error"}}, reply.headers)
                return
            self._send(200, _completion(f"chatcmpl-{len(server.calls)}",
                                        reply.model or body.get("model") or server.model_name, reply.text,
                                        len(call.text.split())), reply.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout) before the reply
        finally:
            server._end()

    def do_GET(self) -> None:  # noqa: N802
        server: ChatServer = self.server.owner
        self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})

    def _send(self, status: int, payload: dict | str, headers: dict[str, str] | None = None) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html" if isinstance(payload, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass  # keep test output clean


def _completion(completion_id: str, model: str, text: str, prompt_tokens: int = 0) -> dict:
    return {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(text.split()),
                      "total_tokens": prompt_tokens + len(text.split())}}


# ---------------------------------------------------------------------------------------------
# Responders
# ---------------------------------------------------------------------------------------------


def hashed_rating(scale: Sequence[str]) -> Callable[[ChatCall], str]:
    """A deterministic rating from ``scale`` per prompt, so scores vary but can be recomputed."""
    return lambda call: scale[int(hashlib.sha256(call.text.encode()).hexdigest(), 16) % len(scale)]


# EgoThink's 0 / 0.5 / 1 scale.
hash_rating = hashed_rating(("0", "0.5", "1"))


def loopback_judge_settings(env_prefix: str, rating: Callable[[ChatCall], str], workdir: Path,
                            resources: ExitStack) -> dict[str, str]:
    """Start a loopback judge rating with ``rating`` (stopped with ``resources``) and return the
    ``<env_prefix>_JUDGE_*`` settings that point a judged benchmark at it, with a cache in ``workdir``."""
    judge = resources.enter_context(ChatServer(rating_responder(rating)))
    settings = {"base_url": judge.base_url, "model": "loopback-judge", "api_key_env": "",
                "cache_dir": str(Path(workdir) / "judge-cache")}
    return {f"{env_prefix}_JUDGE_{name.upper()}": value for name, value in settings.items()}


def rating_responder(rating: Callable[[ChatCall], str], *, delay: float = 0.0) -> Responder:
    """A judge that explains itself briefly, then rates in FastChat's ``[[rating]]`` format."""
    return lambda call: Reply(f"The answer was compared with the reference. Rating: [[{rating(call)}]]", delay=delay)


def fail_first(status: int, then: Responder, *, times: int = 1) -> Responder:
    """Fail the first ``times`` attempts of every prompt with HTTP ``status``, then answer."""
    return lambda call: Reply(status=status) if call.attempt < times else then(call)


def hang(seconds: float) -> Responder:
    """Never answer in time: wait ``seconds`` (longer than the client's timeout) first."""
    return lambda call: Reply("too late. Rating: [[1]]", delay=seconds)
