"""Prove that an upstream pull request's lmms-eval task scores as the suite's task does, on the same data and backend.

    python docs/upstream/equivalence.py BENCHMARK --model M --model_args A [--limit N] [--workdir DIR]

For the benchmark's declaration (``BENCHMARKS``, at the end): the suite's settings are resolved as its tasks resolve
them (defaults < task YAML ``metadata`` < ``<PREFIX>_<SETTING>`` variables) and handed to lmms-eval's task in the
variables it reads; a scratch copy of the installed lmms-eval (never the environment's own) gets the benchmark's
patches of this folder, in order; then two runs of the real ``lmms-eval`` CLI, at the same time, each carrying all
the benchmark's tasks with ``--log_samples``:

* **lmms-eval's side**: ``python -m lmms_eval`` importing the patched scratch copy (``PYTHONPATH``), in a process that
  cannot import the suite: a ``sitecustomize`` of its own refuses every ``lmms_egoplan`` module (the suite's
  ``lmms_eval.models`` entry point is registered in the environment: lmms-eval tries to load it, logs a warning and
  goes on) and writes at exit which modules were refused and that none was imported, and where lmms-eval came from;
* **the suite's side**: the released lmms-eval of the environment with ``LMMS_EVAL_PLUGINS=lmms_egoplan``.

Each request the backend receives is captured on both sides (the declaration's capture kind, ``CAPTURES``; ``chat``:
a recording proxy in front of an OpenAI-compatible server that both runs reach through lmms-eval's ``openai``
backend; ``likelihood``: a recorder each side's process runs, which keeps every loglikelihood request its backend
answers, e.g. lmms-eval's Qwen backends on one side and the suite's ``egoplan_hf`` on the other). Then, per task
pair: the prompts, the images each request carried (decoded pixels) and its parameters, every per-sample value of the
samples files and every aggregate of the results files are compared; a difference that the declaration names as
deliberate (an lmms-eval convention, named in the pull request's text) is printed as such.
Exit status 0 only when nothing else differs; 1 when something does; 2 for a usage or data error.

Adding a benchmark: ``declare(Benchmark(...))`` at the end of this file (its task pairs, patches, capture kind, the
suite's settings both read, the deliberate differences), and its run on the demo's data in ``EQUIVALENCE_RUNS`` of
tests/e2e/test_upstream_equivalence.py. Adding a capture kind: a ``Capture`` subclass in ``CAPTURES``; the ``Request``
it returns is attributed to a logged sample by its ``text`` (the sample's ``input``).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import dataclasses
import fnmatch
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # a checkout: the suite and the patch tests' scratch copies (tests/e2e/upstream_patches)
    sys.path.insert(0, str(ROOT))

from lmms_egoplan.core.errors import InputError  # noqa: E402
from lmms_egoplan.core.settings import env_var, resolve_settings  # noqa: E402
from lmms_egoplan.demo.kit.judge_server import ChatCall, ChatServer, Reply  # noqa: E402
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun, run_lmms_eval  # noqa: E402
from lmms_egoplan.demo.kit.scripted import reported_metrics  # noqa: E402
from tests.e2e.upstream_patches import PATCHES, git_apply, scratch_lmms_eval  # noqa: E402

UPSTREAM, SUITE = "lmms-eval", "suite"
SIDES = (UPSTREAM, SUITE)
# What lmms-eval logs of every sample besides the task's own values: compared elsewhere (input: the prompt) or
# bookkeeping of the run (hashes, token counts).
SAMPLE_BOOKKEEPING = frozenset({"doc_id", "doc_hash", "token_counts", "input", "doc"})
PROOF_VARIABLE = "LMMS_EGOPLAN_EQUIVALENCE_PROOF"


class EquivalenceError(Exception):
    """The comparison cannot be run as asked (a setting lmms-eval's task lacks, a backend the capture cannot
    reach, a run that failed); the message says what to change."""


# =====================================================================================================
# Declarations: a benchmark is its upstream and suite task names, its patches, its capture kind, the settings both
# read, and the differences that are lmms-eval conventions
# =====================================================================================================


@dataclass(frozen=True)
class Difference:
    """A deliberate difference between the two tasks: an lmms-eval convention the upstream task follows (named in
    the pull request's text). ``covers``: ``fnmatch`` patterns over the compared items it explains, each
    ``<kind>:<name>`` with kind ``aggregate``, ``sample``, ``request`` or ``prompt`` (``aggregate:n_*``)."""

    name: str
    why: str
    covers: tuple[str, ...]

    def explains(self, item: str) -> bool:
        return any(fnmatch.fnmatchcase(item, pattern) for pattern in self.covers)


@dataclass(frozen=True)
class TaskPair:
    """An upstream task and the suite's task it must score as."""

    upstream: str
    suite: str
    differences: tuple[Difference, ...] = ()
    tolerance: float = 1e-9  # floats (per-sample values, aggregates) equal within this, absolute or relative
    # Where the two tasks log one value in two forms (the suite's judge items, whose ratings are in its audit trail,
    # and lmms-eval's ratings; plans the suite scores at aggregation and lmms-eval per sample):
    # ``(logged samples, the side's run) -> samples`` puts both in one form before they are compared; each says in
    # its docstring what it reads.
    sample_view: Callable[[list[dict], SideRun], list[dict]] | None = None
    group: bool = False  # a task group: it logs no samples, its aggregates are compared
    # Named on the command line; False for a task or group a named group holds (named too, it would run twice)
    named: bool = True

    def upstream_aggregates(self, metrics: Mapping) -> dict:
        # lmms-eval writes [] for a value a task logs per sample without aggregating it: not an aggregate.
        return {name: value for name, value in metrics.items() if value != []}


@dataclass(frozen=True)
class JudgeRoute:
    """How each side reaches a judged benchmark's judge: the suite's setting naming the judge's server (its variable
    is set on the suite's side) and the variable lmms-eval's ``llm_judge`` reads it from on the other. Each side's
    judge requests go through a recording proxy of its own to that server, and the judge prompts both sides sent are
    compared (each distinct prompt once: the suite's judge engine asks an identical prompt once per run)."""

    suite_setting: str  # e.g. judge_base_url
    upstream_variable: str  # e.g. OPENAI_API_URL


@dataclass(frozen=True)
class SuiteSettings:
    """The suite's settings of a benchmark and how lmms-eval's task reads them.

    ``shared``: the settings lmms-eval's task reads too, each from the variable ``upstream_variables`` names (default:
    the suite's own ``<PREFIX>_<SETTING>``); ``unscored``: settings of the suite alone that change no request and no
    score (checks, logging); any other setting must be at its default, or lmms-eval's task would score something
    else."""

    settings_class: type
    env_prefix: str
    task_yaml: str  # the suite's task YAML whose metadata block the settings read (path from the checkout's root)
    shared: tuple[str, ...]
    unscored: tuple[str, ...] = ()
    upstream_variables: Mapping[str, str] = field(default_factory=dict)
    # How lmms-eval's task spells a setting's value, where not as ``str`` (None: ""): {setting: value -> text}
    upstream_values: Mapping[str, Callable[[Any], str]] = field(default_factory=dict)
    # Settings lmms-eval's task fixes in its YAML (a task variant, not a variable): the suite's must hold these values
    # for the two to score alike, {setting: value}
    fixed: Mapping[str, Any] = field(default_factory=dict)
    judge: JudgeRoute | None = None  # a judged benchmark: how each side reaches its judge (its requests recorded)


@dataclass(frozen=True)
class Benchmark:
    name: str
    patches: tuple[str, ...]  # file names in docs/upstream/, applied in this order to the scratch copy
    tasks: tuple[TaskPair, ...]
    capture: str  # a key of CAPTURES
    settings: SuiteSettings | tuple[SuiteSettings, ...]  # several: benchmarks run together (``together``)
    # (model, model_args) -> {side: (model, model_args)}: a benchmark whose sides use different backends
    # (the likelihood tasks: lmms-eval's Qwen backends against egoplan_hf); default: the same for both.
    backends: Callable[[str, str], Mapping[str, tuple[str, str]]] | None = None
    # What lmms-eval's task needs in the patched copy before it runs (a converter writing the task's data file from
    # the release the settings name): ``(scratch copy, lmms-eval side's environment) -> None`` each.
    prepare: tuple[Callable[[Path, Mapping[str, str]], None], ...] = ()

    @property
    def all_settings(self) -> tuple[SuiteSettings, ...]:
        return self.settings if isinstance(self.settings, tuple) else (self.settings,)

    def sides(self, model: str, model_args: str) -> dict[str, tuple[str, str]]:
        chosen = self.backends(model, model_args) if self.backends else {}
        return {side: tuple(chosen.get(side, (model, model_args))) for side in SIDES}


# =====================================================================================================
# Captured requests
# =====================================================================================================


@dataclass(frozen=True)
class Request:
    """One request a backend received: its prompt text (attributes it to a sample: the sample's ``input``), the
    images it carried (digests of their decoded pixels, in order) and its other parameters (JSON text)."""

    text: str
    images: tuple[str, ...] = ()
    parameters: str = ""


def image_digest(image_bytes: bytes) -> str:
    """A short digest of an image's decoded pixels (mode, size, RGB bytes): equal pixels, equal digests, whatever
    the encoding."""
    from PIL import Image

    with Image.open(io.BytesIO(image_bytes)) as image:
        pixels = image.convert("RGB")
        return hashlib.sha256(f"{pixels.size}".encode() + pixels.tobytes()).hexdigest()[:16]


class Capture:
    """How the requests each side's backend receives are captured. ``prepare(side, model, model_args)`` returns the
    side's (model, model_args, extra environment), ``requests(side)`` what it captured; used as a context manager
    around both runs. A new kind subclasses this and joins ``CAPTURES``."""

    def __init__(self, workdir: Path):
        self.workdir = workdir

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def prepare(self, side: str, model: str, model_args: str) -> tuple[str, str, dict[str, str]]:
        raise NotImplementedError

    def requests(self, side: str) -> list[Request]:
        raise NotImplementedError


def model_arguments(model_args: str) -> dict[str, str]:
    """``--model_args`` as lmms-eval splits them (``key=value`` pairs, comma-separated)."""
    pairs = [pair.split("=", 1) for pair in model_args.split(",") if pair.strip()]
    return {key.strip(): value.strip() for key, value in pairs}


class ChatCapture(Capture):
    """Generative tasks on lmms-eval's ``openai`` backend: each side's requests go through a recording proxy of its
    own (a loopback OpenAI-compatible server) that forwards them to the model's ``base_url`` and its answers back;
    the proxy keeps every chat request, images included. A request both sides send is answered once and both get
    that answer, so that a model whose answers vary from call to call (batching on a server) cannot make two equal
    requests score differently."""

    BACKENDS = ("openai", "async_openai")

    def __enter__(self) -> "ChatCapture":
        self._stack = contextlib.ExitStack()
        self._proxies: dict[str, ChatServer] = {}
        self._answers: dict[str, Reply] = {}
        self._lock = threading.Lock()
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def prepare(self, side: str, model: str, model_args: str) -> tuple[str, str, dict[str, str]]:
        arguments = model_arguments(model_args)
        if model not in self.BACKENDS or not arguments.get("base_url"):
            raise EquivalenceError(f"the chat capture needs --model {' or '.join(self.BACKENDS)} with base_url=<an "
                                   f"OpenAI-compatible server> in --model_args (got --model {model} --model_args "
                                   f"{model_args})")
        proxy = self._stack.enter_context(ChatServer(self._answered_once(forwarding(arguments["base_url"])),
                                                     model_name=arguments.get("model_version", "proxied")))
        self._proxies[side] = proxy
        return model, ",".join(f"{key}={proxy.base_url if key == 'base_url' else value}"
                               for key, value in arguments.items()), {}

    def _answered_once(self, forward: Callable[[ChatCall], Reply]) -> Callable[[ChatCall], Reply]:
        def respond(call: ChatCall) -> Reply:
            key = hashlib.sha256(json.dumps(call.body, sort_keys=True).encode()).hexdigest()
            with self._lock:
                known = self._answers.get(key)
            if known is None:
                known = forward(call)
                with self._lock:
                    known = self._answers.setdefault(key, known) if known.status == 200 else known
            return known
        return respond

    def requests(self, side: str) -> list[Request]:
        return [chat_request(call) for call in self._proxies[side].calls]


def forwarding(base_url: str) -> Callable[[ChatCall], Reply]:
    """A responder that sends the call on to ``base_url`` and hands its answer (or its error status) back."""
    def respond(call: ChatCall) -> Reply:
        headers = {"Content-Type": "application/json",
                   **({"Authorization": call.headers["authorization"]} if "authorization" in call.headers else {})}
        request = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", json.dumps(call.body).encode(),
                                         headers)
        try:
            with urllib.request.urlopen(request, timeout=3600) as response:
                return Reply(json.load(response)["choices"][0]["message"].get("content") or "")
        except urllib.error.HTTPError as error:
            return Reply(error.read().decode(errors="replace"), status=error.code,
                         headers={"x-should-retry": "false"})
    return respond


def chat_request(call: ChatCall) -> Request:
    """The request a chat call carried: its prompt (the system turns' text, then the last user turn's, a blank line
    between them: the text lmms-eval logs as the sample's input for a task that sends a system prompt), its images'
    digests, its other parameters."""
    users = [message for message in call.messages if message.get("role") == "user"]
    content = users[-1].get("content", "") if users else ""
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    images = []
    for part in parts:
        if part.get("type") == "image_url":
            url = part["image_url"]["url"]
            images.append(image_digest(base64.b64decode(url.split(",", 1)[1])) if url.startswith("data:") else url)
    others = [message for message in call.messages if message is not users[-1]] if users else call.messages
    parameters = {key: value for key, value in call.body.items() if key != "messages"}
    systems = [message_text(message) for message in call.messages if message.get("role") == "system"]
    return Request("\n\n".join([*systems, call.text]), tuple(images),
                   json.dumps({**parameters, "other_messages": others}, sort_keys=True))


def message_text(message: Mapping) -> str:
    content = message.get("content", "")
    return content if isinstance(content, str) else "\n".join(part.get("text", "") for part in content
                                                               if part.get("type") == "text")


# Run at the start of each side's lmms-eval process (lmms-eval's side: by GUARD; the suite's: by a sitecustomize of its
# own), where a capture names it (HOOK_VARIABLE): every loglikelihood request a backend answers, with the images its
# doc_to_visual gives (digests of their decoded pixels, as image_digest's), appended to RECORD_VARIABLE's file. It
# imports nothing of the suite.
HOOK_VARIABLE, RECORD_VARIABLE = "LMMS_EGOPLAN_EQUIVALENCE_HOOK", "LMMS_EGOPLAN_EQUIVALENCE_RECORD"
LIKELIHOOD_RECORDER = '''
import hashlib, importlib.util, json, os, sys, threading, types

# lmms-eval's Qwen backends import decord (for videos) at module level; the compared tasks give images only.
if importlib.util.find_spec("decord") is None:
    def _no_video(*args, **kwargs):
        raise RuntimeError("decord is not installed: docs/upstream/equivalence.py compares image tasks only")
    sys.modules["decord"] = types.SimpleNamespace(VideoReader=_no_video, cpu=_no_video)

import lmms_eval.api.model

_inside = threading.local()


def _digest(image):
    pixels = image.convert("RGB")
    return hashlib.sha256(f"{pixels.size}".encode() + pixels.tobytes()).hexdigest()[:16]


def _recording(loglikelihood):
    def recorded(self, requests):
        if getattr(_inside, "active", False):  # a subclass calling its parent's: recorded once, by the outer one
            return loglikelihood(self, requests)
        _inside.active = True
        try:
            results = loglikelihood(self, requests)
        finally:
            _inside.active = False
        with open(os.environ["LMMS_EGOPLAN_EQUIVALENCE_RECORD"], "a") as file:
            for request, result in zip(requests, results):
                context, continuation, doc_to_visual, doc_id, task, split = request.args
                visuals = doc_to_visual(self.task_dict[task][split][doc_id]) or []
                record = {"context": context, "continuation": continuation, "images": [_digest(v) for v in visuals],
                          "result": list(result)}
                file.write(json.dumps(record) + "\\n")
        return results
    return recorded


def _wrap_loglikelihood(cls, **kwargs):
    super(lmms_eval.api.model.lmms, cls).__init_subclass__(**kwargs)
    if "loglikelihood" in cls.__dict__:
        cls.loglikelihood = _recording(cls.__dict__["loglikelihood"])


lmms_eval.api.model.lmms.__init_subclass__ = classmethod(_wrap_loglikelihood)
'''


class LikelihoodCapture(Capture):
    """Likelihood tasks on transformers backends in lmms-eval's own process (lmms-eval's Qwen backends, the suite's
    egoplan_hf): each side's process runs ``LIKELIHOOD_RECORDER``, which keeps every loglikelihood request its backend
    answers, its context, its continuation and the images it carried."""

    def __enter__(self) -> "LikelihoodCapture":
        self.recorder = self.workdir / "likelihood_recorder.py"
        self.recorder.write_text(LIKELIHOOD_RECORDER)
        # The suite's side runs no GUARD: a sitecustomize of its own runs the recorder.
        hook = self.workdir / "suite-hook"
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "sitecustomize.py").write_text(f"import os, runpy\n\nrunpy.run_path(os.environ[{HOOK_VARIABLE!r}])\n")
        self.suite_hook = hook
        return self

    def record(self, side: str) -> Path:
        return self.workdir / f"{side}-likelihood-requests.jsonl"

    def prepare(self, side: str, model: str, model_args: str) -> tuple[str, str, dict[str, str]]:
        env = {HOOK_VARIABLE: str(self.recorder), RECORD_VARIABLE: str(self.record(side))}
        if side == SUITE:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.suite_hook), os.environ.get("PYTHONPATH")]))
        return model, model_args, env

    def requests(self, side: str) -> list[Request]:
        path = self.record(side)
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return [Request(record["context"], tuple(record["images"]),
                        json.dumps({"continuation": record["continuation"]})) for record in records]


CAPTURES: dict[str, type[Capture]] = {"chat": ChatCapture, "likelihood": LikelihoodCapture}


# =====================================================================================================
# The two runs
# =====================================================================================================

# Installed as the lmms-eval side's sitecustomize: refuse the suite's modules, and prove it at exit.
GUARD = '''
import atexit, json, os, sys

REFUSED = []


class KeepTheSuiteOut:
    """docs/upstream/equivalence.py: lmms-eval's side of the comparison may not import the suite."""

    def find_spec(self, name, path=None, target=None):
        if name == "lmms_egoplan" or name.startswith("lmms_egoplan."):
            REFUSED.append(name)
            raise ModuleNotFoundError(f"{name} is kept out of lmms-eval's side (docs/upstream/equivalence.py)",
                                      name=name)
        return None


sys.meta_path.insert(0, KeepTheSuiteOut())
if os.environ.get("LMMS_EGOPLAN_EQUIVALENCE_HOOK"):  # a capture's recorder (Capture, LIKELIHOOD_RECORDER)
    import runpy

    runpy.run_path(os.environ["LMMS_EGOPLAN_EQUIVALENCE_HOOK"])


@atexit.register
def prove():
    lmms_eval = sys.modules.get("lmms_eval")
    proof = {"refused": REFUSED, "lmms_eval": getattr(lmms_eval, "__file__", None),
             "imported": sorted(name for name in sys.modules if name.split(".")[0] == "lmms_egoplan"),
             "argv": sys.argv}
    with open(f"{os.environ['LMMS_EGOPLAN_EQUIVALENCE_PROOF']}.{os.getpid()}.json", "w") as file:
        json.dump(proof, file)
'''


@dataclass
class SideRun:
    side: str
    run: EvalRun
    requests: list[Request]
    proofs: list[dict] = field(default_factory=list)  # lmms-eval's side: what its guard wrote
    environ: Mapping[str, str] = field(default_factory=dict)  # the run's environment (the settings it read)
    # the messages each judge received from this side, by the suite's settings prefix of its benchmark
    judge_prompts: dict[str, list[list[dict]]] = field(default_factory=dict)


class JudgeRecorder:
    """A recording proxy per side in front of each judged benchmark's judge (``SuiteSettings.judge``): the judge's
    server is the one the suite's settings name (handed to lmms-eval's side in ``JudgeRoute.upstream_variable`` as
    any shared setting); each side is pointed at its own proxy instead. The suite's connection test before the
    model (``judge.engine.PREFLIGHT_MESSAGES``) is answered by the proxy, not recorded."""

    def __init__(self, settings: Sequence[SuiteSettings], environment: Mapping[str, str]):
        self.routes = [(declared.env_prefix, declared.judge) for declared in settings if declared.judge]
        self.environment = environment
        self._proxies: dict[tuple[str, str], ChatServer] = {}

    def __enter__(self) -> "JudgeRecorder":
        self._stack = contextlib.ExitStack()
        for prefix, route in self.routes:
            for side in SIDES:
                self._proxies[prefix, side] = self._stack.enter_context(
                    ChatServer(forwarding(self.environment[route.upstream_variable])))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def variables(self, side: str) -> dict[str, str]:
        """Where ``side`` reaches each judge: its proxy."""
        return {(route.upstream_variable if side == UPSTREAM else env_var(prefix, route.suite_setting)):
                self._proxies[prefix, side].base_url for prefix, route in self.routes}

    def prompts(self, side: str) -> dict[str, list[list[dict]]]:
        return {prefix: [call.messages for call in self._proxies[prefix, side].calls] for prefix, _ in self.routes}


def patched_lmms_eval(patches: Sequence[str], folder: Path) -> Path:
    """A scratch copy of the installed lmms-eval with ``patches`` (of this folder) applied in order."""
    scratch = scratch_lmms_eval(folder)
    for name in patches:
        applied = git_apply(PATCHES / name, scratch)
        if applied.returncode != 0:
            raise EquivalenceError(f"{name} does not apply to the installed lmms-eval: {applied.stderr.strip()}")
    return scratch


def upstream_environment(scratch: Path, workdir: Path) -> dict[str, str]:
    """``PYTHONPATH``: the guard, then the patched copy; the suite's plugin variable left out."""
    guard = workdir / "guard"
    guard.mkdir(parents=True, exist_ok=True)
    (guard / "sitecustomize.py").write_text(GUARD)
    return {"PYTHONPATH": os.pathsep.join([str(guard), str(scratch)]), PROOF_VARIABLE: str(workdir / "proof")}


def run_both(benchmark: Benchmark, model: str, model_args: str, limit: int | None, workdir: Path,
             environ: Mapping[str, str], settings: Mapping[str, str]) -> dict[str, SideRun]:
    """Both sides' runs, at the same time, each with every task of the benchmark, in ``environ`` (lmms-eval's side:
    with the suite's ``settings`` as its task reads them); their captured requests."""
    scratch = patched_lmms_eval(benchmark.patches, workdir / "lmms-eval")
    for prepare in benchmark.prepare:
        prepare(scratch, {**environ, **settings, **upstream_environment(scratch, workdir)})
    extra = ["--limit", str(limit)] if limit else []
    with CAPTURES[benchmark.capture](workdir) as capture, JudgeRecorder(benchmark.all_settings, settings) as judges:
        plans = {}
        for side, (side_model, side_args) in benchmark.sides(model, model_args).items():
            side_model, side_args, env = capture.prepare(side, side_model, side_args)
            upstream = side == UPSTREAM
            own = {**settings, **upstream_environment(scratch, workdir)} if upstream else {}
            plans[side] = dict(model=side_model, model_args=side_args, output_dir=workdir / side, extra_args=extra,
                               tasks=[pair.upstream if upstream else pair.suite for pair in benchmark.tasks
                                      if pair.named],
                               env=side_environment(environ, env, {**own, **judges.variables(side)}),
                               use_plugin=not upstream, check=False)
        with concurrent.futures.ThreadPoolExecutor(len(plans)) as pool:
            runs = {side: pool.submit(run_lmms_eval, **plan) for side, plan in plans.items()}
            runs = {side: future.result() for side, future in runs.items()}
        sides = {side: SideRun(side, run, capture.requests(side), judge_prompts=judges.prompts(side),
                               environ=plans[side]["env"]) for side, run in runs.items()}
    sides[UPSTREAM].proofs = guard_proofs(workdir)
    for side in sides.values():
        if side.run.results is None or side.run.returncode not in finished_statuses(benchmark, side):
            raise EquivalenceError(f"the {side.side} run failed (exit status {side.run.returncode}): "
                                   f"{' '.join(side.run.command)}\n{side.run.log_tail(40)}")
    return sides


def side_environment(environ: Mapping[str, str], captured: Mapping[str, str], side: Mapping[str, str]) -> dict:
    """A side's environment: ``environ``, the capture's variables, the side's own; ``PYTHONPATH`` joined in that
    order of precedence (the lmms-eval side's guard and scratch copy first, then the capture's folders)."""
    paths = [value for value in (side.get("PYTHONPATH"), captured.get("PYTHONPATH")) if value]
    joined = {"PYTHONPATH": os.pathsep.join(paths)} if paths else {}
    return {**environ, **captured, **side, **joined}


def finished_statuses(benchmark: Benchmark, side: SideRun) -> set[int]:
    """The exit statuses of a side's finished run: 0, and for the suite's judged tasks the status it exits with when
    some judgements failed (``judge_failed_exit_status``; they are compared like every other value)."""
    from lmms_egoplan.judge.settings import JudgeSettings

    judged = side.side == SUITE and any(declared.judge for declared in benchmark.all_settings)
    return {0, JudgeSettings().judge_failed_exit_status} if judged else {0}


def guard_proofs(workdir: Path) -> list[dict]:
    """What the lmms-eval side's guard wrote at exit, one proof per process of that side (the CLI's, and any it
    started)."""
    return [json.loads(path.read_text()) for path in sorted(workdir.glob("proof.*.json"))]


# =====================================================================================================
# The suite's settings, handed to lmms-eval's task
# =====================================================================================================


def yaml_metadata(path: Path) -> dict:
    """The ``metadata`` block of a task YAML (its ``!function`` tags and ``include`` not followed)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return (yaml.load(path.read_text(), Loader=Loader) or {}).get("metadata") or {}


def upstream_settings(declared: SuiteSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """The suite's resolved settings as the variables lmms-eval's task reads (a setting left at None: unset); a
    setting the suite alone has that is not at its default is an EquivalenceError naming it."""
    metadata = yaml_metadata(ROOT / declared.task_yaml)
    resolved = resolve_settings(declared.settings_class, task=Path(declared.task_yaml).stem, metadata=metadata,
                                env_prefix=declared.env_prefix, environ=environ)
    # The task's own defaults (its YAML's metadata included: a per-task annotation file is no change)
    defaults = resolve_settings(declared.settings_class, task=Path(declared.task_yaml).stem, metadata=metadata,
                                env_prefix=declared.env_prefix, environ={})
    route = {declared.judge.suite_setting: declared.judge.upstream_variable} if declared.judge else {}
    shared = (*declared.shared, *route)
    unfixed = [f"{env_var(declared.env_prefix, name)}={value}" for name, value in declared.fixed.items()
               if getattr(resolved, name) != value]
    if unfixed:
        raise EquivalenceError(f"lmms-eval's task fixes what the suite sets with {', '.join(unfixed)}: set "
                               f"{'those' if len(unfixed) > 1 else 'it'} to compare the two")
    changed = [item.name for item in dataclasses.fields(resolved)
               if item.name not in (*shared, *declared.unscored, *declared.fixed)
               and getattr(resolved, item.name) != getattr(defaults, item.name)]
    if changed:
        raise EquivalenceError("lmms-eval's task has no setting " + ", ".join(
            f"{env_var(declared.env_prefix, name)} (here {getattr(resolved, name)!r}, the suite's default "
            f"{getattr(defaults, name)!r})" for name in changed) + ": unset it to compare the two")
    variables = {}
    for name in shared:
        variable = {**declared.upstream_variables, **route}.get(name, env_var(declared.env_prefix, name))
        value = getattr(resolved, name)
        spelt = declared.upstream_values.get(name, lambda value: "" if value is None else str(value))
        variables[variable] = spelt(value)
    return variables


# =====================================================================================================
# Comparing
# =====================================================================================================


def values_equal(a: Any, b: Any, tolerance: float) -> bool:
    """Equal, floats within ``tolerance`` (absolute or relative), lists and dicts element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, str) and isinstance(b, str) and a != b:  # lmms-eval logs a loglikelihood's loss as text
        a, b = _number(a), _number(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y, tolerance) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[key], b[key], tolerance) for key in a)
    return a == b


def _number(text: str) -> float | str:
    """``text`` as a float where it is one (``"6.3546"``), else itself."""
    try:
        return float(text)
    except ValueError:
        return text


@dataclass
class Report:
    """What one task pair's comparison found: lines that agree, differences that are deliberate, the others."""

    pair: TaskPair
    equal: list[str] = field(default_factory=list)
    deliberate: dict[str, list[str]] = field(default_factory=dict)  # difference name -> what it covered
    differing: list[str] = field(default_factory=list)

    def differs(self, item: str, detail: str) -> None:
        """``item`` (``<kind>:<name>``) differs: deliberately if a declared difference explains it."""
        for difference in self.pair.differences:
            if difference.explains(item):
                self.deliberate.setdefault(difference.name, []).append(f"{item}: {detail}")
                return
        self.differing.append(f"{item}: {detail}")


def compare_pair(pair: TaskPair, upstream: SideRun, suite: SideRun) -> Report:
    report = Report(pair)
    if pair.group:
        compare_aggregates(report, upstream.run.results, suite.run.results)
        return report
    samples = {UPSTREAM: upstream.run.samples(pair.upstream), SUITE: suite.run.samples(pair.suite)}
    if pair.sample_view:
        samples = {side: pair.sample_view(samples[side], run) for side, run in ((UPSTREAM, upstream), (SUITE, suite))}
    if [s["doc_id"] for s in samples[UPSTREAM]] != [s["doc_id"] for s in samples[SUITE]]:
        report.differing.append(f"samples: lmms-eval logged {len(samples[UPSTREAM])}, the suite "
                                f"{len(samples[SUITE])} (doc ids differ)")
        return report
    compare_prompts_and_requests(report, samples, {UPSTREAM: upstream.requests, SUITE: suite.requests})
    compare_sample_values(report, samples)
    compare_aggregates(report, upstream.run.results, suite.run.results)
    return report


def requests_by_prompt(requests: Sequence[Request]) -> dict[str, list[Request]]:
    found: dict[str, list[Request]] = {}
    for request in requests:
        found.setdefault(request.text, []).append(request)
    return found


def compare_prompts_and_requests(report: Report, samples: Mapping[str, list[dict]],
                                 requests: Mapping[str, Sequence[Request]]) -> None:
    """Each sample's prompt, and the requests that carried it: their images and parameters (the requests of samples
    that share a prompt, e.g. one instruction for every clip, compared together, once)."""
    by_prompt = {side: requests_by_prompt(requests[side]) for side in SIDES}
    prompts_equal, images, carried, compared = 0, 0, 0, set()
    for upstream, suite in zip(samples[UPSTREAM], samples[SUITE]):
        doc = f"doc {upstream['doc_id']}"
        if upstream.get("input") != suite.get("input"):
            report.differs("prompt:input", f"{doc}: lmms-eval {upstream.get('input')!r} | suite {suite.get('input')!r}")
            continue
        prompts_equal += 1
        if upstream["input"] in compared:
            continue
        compared.add(upstream["input"])
        sent = {side: sorted(by_prompt[side].get(sample["input"], []), key=lambda r: (r.images, r.parameters))
                for side, sample in ((UPSTREAM, upstream), (SUITE, suite))}
        if not sent[UPSTREAM] or len(sent[UPSTREAM]) != len(sent[SUITE]):
            report.differs("request:count", f"{doc}: lmms-eval sent {len(sent[UPSTREAM])} request(s), the suite "
                                            f"{len(sent[SUITE])}")
            continue
        for ours, theirs in zip(sent[UPSTREAM], sent[SUITE]):
            if ours.images != theirs.images:
                report.differs("request:images", f"{doc}: lmms-eval {len(ours.images)} image(s) {ours.images} | "
                                                 f"suite {len(theirs.images)} {theirs.images}")
            elif ours.parameters != theirs.parameters:
                report.differs("request:parameters", f"{doc}: lmms-eval {ours.parameters} | suite {theirs.parameters}")
            else:
                carried, images = carried + 1, images + len(ours.images)
    report.equal.append(f"prompts: {prompts_equal} of {len(samples[SUITE])} equal")
    report.equal.append(f"requests: {carried} equal in their images ({images} in all, pixel for pixel) and "
                        f"parameters")


def compare_sample_values(report: Report, samples: Mapping[str, list[dict]]) -> None:
    """Every value each samples file logs for a sample, besides lmms-eval's bookkeeping."""
    equal: dict[str, int] = {}
    for upstream, suite in zip(samples[UPSTREAM], samples[SUITE]):
        for name in sorted((upstream.keys() | suite.keys()) - SAMPLE_BOOKKEEPING):
            doc = f"doc {upstream['doc_id']}"
            if name not in upstream or name not in suite:
                side = UPSTREAM if name in upstream else SUITE
                report.differs(f"sample:{name}", f"{doc}: logged by {side} only")
            elif values_equal(upstream[name], suite[name], report.pair.tolerance):
                equal[name] = equal.get(name, 0) + 1
            else:
                report.differs(f"sample:{name}", f"{doc}: lmms-eval {upstream[name]!r} | suite {suite[name]!r}")
    report.equal.append(f"per-sample values equal: {', '.join(f'{name} ({count})' for name, count in equal.items())}")


def compare_aggregates(report: Report, upstream: Mapping, suite: Mapping) -> None:
    """Every aggregate of the two results files."""
    ours = report.pair.upstream_aggregates(reported_metrics(upstream).get(report.pair.upstream, {}))
    theirs = reported_metrics(suite).get(report.pair.suite, {})
    equal = []
    for name in sorted(ours.keys() | theirs.keys()):
        if name not in ours or name not in theirs:
            side, value = (UPSTREAM, ours[name]) if name in ours else (SUITE, theirs[name])
            report.differs(f"aggregate:{name}", f"reported by {side} only ({value!r})")
        elif values_equal(ours[name], theirs[name], report.pair.tolerance):
            value = ours[name]
            equal.append(f"{name} {value:.6g}" if isinstance(value, (int, float)) else f"{name} {value!r}")
        else:
            report.differs(f"aggregate:{name}", f"lmms-eval {ours[name]!r} | suite {theirs[name]!r}")
    report.equal.append(f"aggregates equal: {', '.join(equal)}")


# =====================================================================================================
# Printing, and the command
# =====================================================================================================


def proof_lines(proofs: Sequence[dict], scratch: Path) -> tuple[list[str], bool]:
    """What the lmms-eval side's guard proves (its CLI process imported lmms-eval from the patched copy; no process
    of that side imported a module of the suite), and whether it proves it."""
    cli = [proof for proof in proofs if proof["argv"][:1] and proof["argv"][0].endswith("lmms_eval/__main__.py")]
    if len(cli) != 1:
        return [f"lmms-eval side: {len(cli)} proof(s) of its CLI process written (the process did not exit "
                f"normally?)"], False
    imported = sorted({name for proof in proofs for name in proof["imported"]})
    refused = sorted({name for proof in proofs for name in proof["refused"]})
    origin = cli[0].get("lmms_eval") or ""
    proven = not imported and origin.startswith(str(scratch))
    return [f"lmms-eval side: lmms_eval imported from the patched copy {origin}",
            f"lmms-eval side ({len(proofs)} process(es)): lmms_egoplan modules imported: {imported or 'none'}; "
            f"refused: {refused or 'none'} (the suite's entry point, which lmms-eval tries to load)"], proven


def judge_prompt_lines(sides: Mapping[str, SideRun]) -> tuple[list[str], bool]:
    """The judge prompts each side sent (``JudgeRecorder``), compared as sets: the suite's engine asks an identical
    prompt once per run, lmms-eval's ``llm_judge`` once per sample that needs it."""
    lines, same = [], True
    for prefix in sides[SUITE].judge_prompts:
        sent = {side: sides[side].judge_prompts[prefix] for side in SIDES}
        distinct = {side: {json.dumps(messages, sort_keys=True) for messages in sent[side]} for side in SIDES}
        if distinct[UPSTREAM] == distinct[SUITE]:
            lines.append(f"judge ({prefix}): the same {len(distinct[SUITE])} distinct prompts on both sides "
                         f"(lmms-eval's llm_judge sent {len(sent[UPSTREAM])} requests, the suite's judge engine "
                         f"{len(sent[SUITE])}: it asks an identical prompt once)")
            continue
        same = False
        for side, other in ((UPSTREAM, SUITE), (SUITE, UPSTREAM)):
            alone = sorted(distinct[side] - distinct[other])
            if alone:
                lines.append(f"judge ({prefix}): {len(alone)} prompt(s) sent by {side} only, e.g. {alone[0][:300]}")
    return lines, same


def print_report(report: Report, out=sys.stdout) -> None:
    pair = report.pair
    print(f"\n== {pair.upstream} (lmms-eval, patched) against {pair.suite} (the suite)", file=out)
    for line in report.equal:
        print(textwrap.fill(line, 118, initial_indent="  equal       ", subsequent_indent=" " * 14), file=out)
    for difference in pair.differences:
        covered = report.deliberate.get(difference.name, [])
        print(textwrap.fill(f"{difference.name}: {difference.why} ({len(covered)} item(s) in this run)", 118,
                            initial_indent="  deliberate  ", subsequent_indent=" " * 14), file=out)
        for line in covered[:6]:
            print(f"{' ' * 16}{line[:200]}", file=out)
        if len(covered) > 6:
            print(f"{' ' * 16}... and {len(covered) - 6} more", file=out)
    for line in report.differing:
        print(f"  DIFFERS     {line[:400]}", file=out)


def compare(benchmark: Benchmark, model: str, model_args: str, limit: int | None, workdir: Path,
            environ: Mapping[str, str] = os.environ, out=sys.stdout) -> bool:
    """Run both sides of ``benchmark`` and print the comparison; True when nothing but the declared deliberate
    differences differs."""
    settings = {name: value for declared in benchmark.all_settings
                for name, value in upstream_settings(declared, environ).items()}
    sides = run_both(benchmark, model, model_args, limit, workdir, environ, settings)
    lines, proven = proof_lines(sides[UPSTREAM].proofs, workdir / "lmms-eval")
    judged, judged_equal = judge_prompt_lines(sides)
    chosen = benchmark.sides(model, model_args)
    backends = ", ".join(f"{side}: --model {side_model}" for side, (side_model, _) in chosen.items())
    print(f"{benchmark.name}: lmms-eval with {', '.join(benchmark.patches)} against the suite ({backends})", file=out)
    for line in lines:
        print(("  " if proven else "  DIFFERS     ") + line, file=out)
    for line in judged:
        print(("  " if judged_equal else "  DIFFERS     ") + line, file=out)
    reports = [compare_pair(pair, sides[UPSTREAM], sides[SUITE]) for pair in benchmark.tasks]
    for report in reports:
        print_report(report, out)
    same = proven and judged_equal and not any(report.differing for report in reports)
    print(f"\n{benchmark.name}: " + ("equal but for the deliberate differences above" if same else
                                     "DIFFERENT (lines marked DIFFERS)"), file=out)
    return same


@contextlib.contextmanager
def working_folder(chosen: str | None) -> Iterator[Path]:
    if chosen:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        yield Path(chosen)
        return
    folder = Path(tempfile.mkdtemp(prefix="equivalence-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] = os.environ, out=sys.stdout) -> int:
    """The command; ``environ``: the environment whose settings both sides read (and their runs get), ``out``: where
    the comparison is printed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benchmark", nargs="+", choices=sorted(BENCHMARKS),
                        help="one benchmark, or several compared in one run per side")
    parser.add_argument("--model", required=True, help="the lmms-eval backend both sides use")
    parser.add_argument("--model_args", default="", help="its --model_args")
    parser.add_argument("--limit", type=int, default=None, help="the first N samples of every task")
    parser.add_argument("--workdir", default=None, help="keep the runs, the scratch copy and the logs here "
                                                        "(default: a temporary folder, removed)")
    arguments = parser.parse_args(argv)
    try:
        with working_folder(arguments.workdir) as workdir:
            same = compare(together(*(BENCHMARKS[name] for name in arguments.benchmark)), arguments.model,
                           arguments.model_args, arguments.limit, workdir, environ, out)
    except (EquivalenceError, InputError) as error:  # InputError: the suite's settings (SettingsError)
        print(f"equivalence.py: {error}", file=sys.stderr)
        return 2
    return 0 if same else 1


# =====================================================================================================
# The benchmarks
# =====================================================================================================

BENCHMARKS: dict[str, Benchmark] = {}


def declare(benchmark: Benchmark) -> Benchmark:
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def together(*benchmarks: Benchmark) -> Benchmark:
    """Several benchmarks compared in one run per side (one lmms-eval start-up each): their tasks, their patches in
    order (each once), their settings and preparations. They must share a capture and backends."""
    if len(benchmarks) == 1:
        return benchmarks[0]
    if len({benchmark.capture for benchmark in benchmarks}) > 1 or any(b.backends for b in benchmarks):
        raise EquivalenceError(f"{', '.join(b.name for b in benchmarks)} cannot share a run: their captures or "
                               f"backends differ; compare them one at a time")
    return Benchmark(name="+".join(b.name for b in benchmarks),
                     patches=tuple(dict.fromkeys(patch for b in benchmarks for patch in b.patches)),
                     tasks=tuple(pair for b in benchmarks for pair in b.tasks), capture=benchmarks[0].capture,
                     settings=tuple(declared for b in benchmarks for declared in b.all_settings),
                     prepare=tuple(prepare for b in benchmarks for prepare in b.prepare))


def suite_bookkeeping(*names: str) -> Difference:
    """The suite's own per-sample records and counts (``predictions``, ``failed_requests``, ...), which lmms-eval's
    tasks do not keep: lmms-eval logs each sample's answer (``filtered_resps``) and counts a task's samples itself."""
    return Difference("the suite's bookkeeping", "per-sample records and counts of the suite's own (the logged "
                      "letters, failed requests, skipped samples, a count per breakdown); lmms-eval logs each "
                      "sample's answer and its task's sample count", tuple(f"{kind}:{name}" for name in names
                                                                         for kind in ("sample", "aggregate")))


# lmms-eval's egothink and egoplan_bench2 read their questions from the Hub only (no variable changes the data): a
# comparison on a copy points the scratch copy's YAML at the copy the suite reads (the harness's own variables, which
# no task reads).
DATASET_COPY, DATASET_COPY_REVISION = "EQUIVALENCE_DATASET_COPY", "EQUIVALENCE_DATASET_COPY_REVISION"


def dataset_copy(template: str) -> Callable[[Path, Mapping[str, str]], None]:
    """A preparation: the scratch copy's ``template`` (a path in it) names the dataset copy DATASET_COPY names (and
    its revision) instead of the Hub dataset, when set."""
    def prepare(scratch: Path, environment: Mapping[str, str]) -> None:
        if not environment.get(DATASET_COPY):
            return
        path, revision = scratch / template, environment.get(DATASET_COPY_REVISION)
        text = re.sub(r"(?m)^dataset_path: .*$", f"dataset_path: {environment[DATASET_COPY]}", path.read_text())
        if revision:
            text = text.replace("dataset_kwargs:\n", f"dataset_kwargs:\n  revision: {revision}\n")
        path.write_text(text)
    return prepare


# EgoPlan-Bench2 (PR d, 27): the official evaluation, eval.py's reading and lmms-eval's extract_mcq_answer, the
# paper's domains.
def _egoplan_bench2() -> Benchmark:
    from lmms_egoplan.egoplan_bench2.data import ENV_PREFIX
    from lmms_egoplan.egoplan_bench2.settings import EgoPlanBench2Settings

    return Benchmark(
        name="egoplan_bench2",
        patches=("23-egoplan2-official-parser.patch", "37-video-frames-at.patch", "27-egoplan-bench2-task.patch"),
        capture="chat",
        tasks=(TaskPair("egoplan_bench2", "egoplan_bench2",
                        differences=(
                            suite_bookkeeping("predictions", "failed_requests", "skipped_samples", "n_domain_*",
                                              "n_scenario_*"),
                            Difference("gold answer logged as its letter", "lmms-eval's generative tasks log "
                                       "the gold answer as the data writes it (golden_choice_idx, A-D); the suite's "
                                       "task logs its position, 0-3, as its likelihood variant needs it",
                                       ("sample:target",)),
                            Difference("every domain on every question", "27 logs each domain's accuracy on every "
                                       "question, None outside its own domain, so that lmms-eval's results file "
                                       "reports the question count as the task's `samples` (it takes the item count "
                                       "of the last metric); the suite logs a question's own domain only",
                                       ("sample:accuracy_domain_*",)),
                            Difference("scenarios in the logged documents", "27 keeps lmms-eval's metric list fixed "
                                       "in its YAML (no metric holding a mapping): a question's scenario is in its "
                                       "logged document; the suite adds an accuracy per scenario it finds",
                                       ("sample:accuracy_scenario_*", "aggregate:accuracy_scenario_*")),
                            Difference("the second reading", "27's `accuracy` and `unparseable` are eval.py's "
                                       "reading, fixed in its YAML (no parser variable), and `accuracy_mcq_extract` / "
                                       "`unparseable_mcq_extract` lmms-eval's extract_mcq_answer; the suite reads "
                                       "`accuracy` as its `parser` says (the comparison sets it to official), reports "
                                       "each reading under its name as well, and its second reading is its own robust "
                                       "parser",
                                       tuple(f"{kind}:{name}" for kind in ("sample", "aggregate")
                                             for name in ("accuracy_official*", "unparseable_official*",
                                                          "accuracy_robust*", "unparseable_robust*",
                                                          "accuracy_mcq_extract*", "unparseable_mcq_extract*"))))),),
        settings=SuiteSettings(
            EgoPlanBench2Settings, ENV_PREFIX, "tasks/egoplan_bench2/egoplan_bench2.yaml",
            # The media's folders (the questions: the Hub dataset's copy the suite reads); the data source and the
            # frames are 27's task variants (egoplan_bench2 compares the release's keyframes), so the suite's must be
            # at their defaults, as its annotation rate (30 fps, fixed)
            shared=("annotation_dir", "ego4d_videos_root", "seed_bench_r1_root"),
            unscored=("images_decoded_at_load", "allow_paths_outside_root", "scored_tokens", "loss_mean"),
            upstream_variables={"annotation_dir": DATASET_COPY},
            fixed={"parser": "official", "annotation_file": "EgoPlan-Bench2.json"}),
        prepare=(dataset_copy("lmms_eval/tasks/egoplan2/egoplan_bench2.yaml"),))


declare(_egoplan_bench2())


def converted(script: str, variable: str) -> Callable[[Path, Mapping[str, str]], None]:
    """A preparation: lmms-eval's converter ``script`` (a path in the patched copy) writes the task's data file from
    the release the variable ``variable`` names into the folder lmms-eval's side runs in, as the task's README tells a
    user to (never into the package)."""
    def prepare(scratch: Path, environment: Mapping[str, str]) -> None:
        run_folder = scratch.parent / UPSTREAM
        run_folder.mkdir(parents=True, exist_ok=True)
        completed = subprocess.run([sys.executable, str(scratch / script), environment[variable]],
                                   env=dict(environment), capture_output=True, text=True, cwd=run_folder)
        if completed.returncode != 0:
            raise EquivalenceError(f"{script} could not convert {environment[variable]}: "
                                   f"{(completed.stderr or completed.stdout)[-3000:]}")
    return prepare


def audit_ratings(run: EvalRun, task: str) -> dict[str, float | None]:
    """The suite's judgements of a task by request id (its audit trail beside the results): the rating, or None for
    a failed judgement."""
    trails = sorted(run.output_dir.rglob(f"*_judgements_{task}.jsonl"), key=lambda path: path.stat().st_mtime)
    if not trails:
        raise EquivalenceError(f"the suite's run wrote no judgements of {task} under {run.output_dir}")
    rows = [json.loads(line) for line in trails[-1].read_text().splitlines() if line.strip()]
    return {row["id"]: row["rating"] for row in rows}


def judged_ratings(item: dict, ratings: Mapping[str, float | None]) -> dict[str, float | None]:
    """A suite judge item's ratings by part: a fixed rating (a missing field), else its judgement's (None: failed)."""
    return {name: part["fixed_rating"] if "fixed_rating" in part else ratings[part["judge_request_id"]]
            for name, part in item["judge_parts"].items()}


def actplan_samples(samples: list[dict], side: SideRun) -> list[dict]:
    """Each plan's LCS and normalised LCS: lmms-eval's task logs them; the suite logs the parsed plans and scores them
    all at once in its aggregation, so they are scored here by the suite's own code (its step matcher, as its settings
    say); a split's metric for that split's plans, None for the others' (as lmms-eval's task logs it)."""
    if side.side == UPSTREAM:
        return samples
    from lmms_egoplan.actplan.plans import score_lcs
    from lmms_egoplan.actplan.task import configured_matcher

    settings = _actplan_settings(side.environ)
    first = [sample["lcs"] for sample in samples]
    scores = score_lcs([(item["prediction"], item["gold"]) for item in first], configured_matcher(settings),
                        settings.gold_plan)
    viewed = []
    for sample, score in zip(samples, scores):
        view = {}
        for name, value in sample.items():
            family = next((f for f in ("norm_lcs", "lcs") if name.startswith(f)), None)
            if family is None or not isinstance(value, dict) or "scope" not in value:
                view[name] = value
            else:
                in_scope = value["scope"] in ("all", value["split"])
                view[name] = {"lcs": score.lcs, "norm_lcs": score.norm_lcs}[family] if in_scope else None
        viewed.append(view)
    return viewed


def _actplan_settings(environ: Mapping[str, str]):
    """The suite's ActPlan-1K settings in the environment its run read."""
    from lmms_egoplan.actplan.data import ENV_PREFIX
    from lmms_egoplan.actplan.settings import ActPlanSettings

    path = ROOT / "tasks/actplan/_default_template_yaml"
    return resolve_settings(ActPlanSettings, task="actplan1k", metadata=yaml_metadata(path), env_prefix=ENV_PREFIX,
                            environ=environ)


def egothink_samples(task: str) -> Callable[[list[dict], SideRun], list[dict]]:
    """Each answer's rating (None: a failed judgement) and its judged / failed counts: lmms-eval's task logs the
    rating with the judge's output; the suite logs its judge item (the request; its rating is in the audit trail of
    ``task``)."""
    def view(samples: list[dict], side: SideRun) -> list[dict]:
        from lmms_egoplan.judge.rubrics import is_judge_parts_item

        if side.side == UPSTREAM:
            return [{**sample, "score": sample["score"]["rating"]} for sample in samples]
        ratings, viewed = audit_ratings(side.run, task), []
        for sample in samples:
            view = dict(sample)
            for name, value in sample.items():
                if is_judge_parts_item(value):
                    [rating] = judged_ratings(value, ratings).values()
                    counted = {"judged": int(rating is not None), "failed": int(rating is None)}
                    view[name] = counted.get(name, rating)
            viewed.append(view)
        return viewed
    return view


# EgoThink (PR f, 30; its judge code is 24's): the paper's prompts, greedy decoding, Table 7's judge through llm_judge,
# the dimensions, the six capabilities and the 12-dimension Average as groups.
def _egothink() -> Benchmark:
    from lmms_egoplan.egothink.data import CAPABILITIES, ENV_PREFIX
    from lmms_egoplan.egothink.protocol import EgoThinkSettings

    bookkeeping = suite_bookkeeping("failed_requests")
    media = Difference("images logged by file name", "the suite's documents name their image files (the Hub images "
                       "stored once in its image cache), which lmms-eval logs as input_media; lmms-eval's task holds "
                       "the dataset's decoded images, which it does not log; the images themselves are compared pixel "
                       "for pixel in the requests", ("sample:input_media",))
    rating_rule = Difference("the authors' rating rule", "lmms-eval's egothink (24) reads a rating as the authors' "
                             "common.py does: the judge asked again, up to 3 times, until its output holds [[x]] (or "
                             "[x]), any number taken; the suite asks once and takes only the prompt's 0, 0.5 or 1 (any "
                             "other is a failed judgement, never scored); a judge that rates on the scale scores alike",
                             ())
    question_mean = Difference("the suite's mean over the questions", "micro_score, each dimension's score again, "
                               "which the suite's groups average over the questions for the later reports that print "
                               "that mean (PhysBrain's); the pull request keeps the paper's Average over the twelve "
                               "dimensions", ("sample:micro_score", "aggregate:micro_score"))
    dimensions = [name for names in CAPABILITIES.values() for name in names]
    groups = [("egothink_paper", "ego_think"), *((f"egothink_paper_capability_{capability}",
                                                 f"ego_think_capability_{capability}") for capability in CAPABILITIES)]
    return Benchmark(
        name="egothink", capture="chat",
        patches=("36-llm-judge-base-url.patch", "24-egothink-llm-judge.patch", "30-egothink-paper-protocol.patch"),
        tasks=(*(TaskPair(f"egothink_paper_{name}", f"ego_think_{name}",
                          differences=(bookkeeping, media, rating_rule, question_mean),
                          sample_view=egothink_samples(f"ego_think_{name}"), named=False) for name in dimensions),
               *(TaskPair(upstream, suite, differences=(bookkeeping, question_mean), group=True,
                          named=upstream == "egothink_paper") for upstream, suite in groups)),
        settings=SuiteSettings(
            EgoThinkSettings, ENV_PREFIX, "tasks/egothink/_default_template_yaml",
            shared=("hub_repo", "hub_revision", "judge_model"),
            unscored=("data_root", "image_cache", "images_decoded_at_load", "allow_paths_outside_root",
                      "judge_revision", "judge_api_key_env", "judge_api_version", "judge_concurrency", "judge_timeout",
                      "judge_retries", "judge_backoff", "judge_cache_dir", "judge_preflight",
                      "judge_failed_exit_status"),
            upstream_variables={"hub_repo": DATASET_COPY, "hub_revision": DATASET_COPY_REVISION,
                                "judge_model": "MODEL_VERSION"},
            judge=JudgeRoute("judge_base_url", "EGOTHINK_API_URL")),
        prepare=(dataset_copy("lmms_eval/tasks/egothink/_default_template_yaml"),))


declare(_egothink())


# ActPlan-1K (PR h, 32, on 37's media readers): the release converted, the action(object) parser, LCS at 0.8; no
# BLEURT (the authors publish no classifier), so the suite's must have none set.
def _actplan() -> Benchmark:
    from lmms_egoplan.actplan.data import ENV_PREFIX
    from lmms_egoplan.actplan.settings import ActPlanSettings

    bookkeeping = suite_bookkeeping("failed_requests")
    media = Difference("media logged as the data names them", "lmms-eval logs the image paths of each doc "
                       "(input_media) as the doc holds them: the converter's, relative to the release folder "
                       "(ACTPLAN_DATA_ROOT), the suite's absolute; the images themselves are compared pixel for pixel "
                       "in the requests", ("sample:input_media",))
    # The embedding model is lmms-eval's task metadata (all-MiniLM-L6-v2, the suite's default): not a shared setting.
    return Benchmark(
        name="actplan1k", patches=("37-video-frames-at.patch", "32-actplan1k-tasks.patch"), capture="chat",
        tasks=tuple(TaskPair(task, task, sample_view=actplan_samples, differences=(bookkeeping, media))
                    for task in ("actplan1k", "actplan1k_text_only")),
        settings=SuiteSettings(
            ActPlanSettings, ENV_PREFIX, "tasks/actplan/_default_template_yaml",
            shared=("data_root",),
            unscored=("embedding_batch_size", "bleurt_batch_size", "images_decoded_at_load",
                      "allow_paths_outside_root")),
        prepare=(converted("lmms_eval/tasks/actplan1k/actplan1k_to_jsonl.py", "ACTPLAN_DATA_ROOT"),))


declare(_actplan())


# EgoPlan-Bench (PR c, 25: loglikelihood on lmms-eval's Qwen backends; PR e, 28: the tasks). The likelihood tasks run on
# lmms-eval's Qwen backends and, on the suite's side, on egoplan_hf with the same checkpoint, loaded as lmms-eval's
# backend loads it (dtype), shown the clip as lmms-eval's backends show a frame list (videos_as_frames: images, no
# time), with lmms-eval's system prompt; lmms-eval's side gets the checkpoint's own pixel bounds.
QWEN_DTYPES = {"qwen2_vl": "auto", "qwen2_5_vl": "bfloat16", "qwen3_vl": "bfloat16"}  # as each backend loads it
QWEN_SYSTEM_PROMPT = "You are a helpful assistant."  # the Qwen backends' default system_prompt


# 28's tasks read the release's files from the folder lmms-eval runs in (their data_files): a comparison copies them
# there from the folder the suite reads them in (the harness's own variable, which no task reads).
RELEASE_FOLDER = "EQUIVALENCE_RELEASE_FOLDER"


def release_files_in_run_folder(*names: str) -> Callable[[Path, Mapping[str, str]], None]:
    """A preparation: the release's files ``names`` from the folder RELEASE_FOLDER names into the folder lmms-eval's
    side runs in, as the task's README tells a user to put them (never into the package)."""
    def prepare(scratch: Path, environment: Mapping[str, str]) -> None:
        run_folder = scratch.parent / UPSTREAM
        run_folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            source = Path(environment.get(RELEASE_FOLDER, "")) / name
            if not source.is_file():
                raise EquivalenceError(f"the suite's annotation_dir holds no {name} ({source}) for lmms-eval's side")
            shutil.copyfile(source, run_folder / name)
    return prepare


def _egoplan_settings(task_yaml: str, fixed: Mapping[str, Any] | None = None) -> SuiteSettings:
    from lmms_egoplan.egoplan.data import ENV_PREFIX
    from lmms_egoplan.egoplan.settings import EgoPlanSettings

    # unscored: checks (images decoded at load, paths outside the roots), the suite's own breakdowns (bins,
    # similarity model), the roots of sources not read (clips, the SEED-Bench-R1 package), and the EPIC frame rate,
    # which only times a video's frames (here shown as images).
    return SuiteSettings(EgoPlanSettings, ENV_PREFIX, task_yaml,
                         shared=("annotation_dir", "epic_frames_root", "ego4d_videos_root"),
                         unscored=("images_decoded_at_load", "allow_paths_outside_root", "progress_length_bins",
                                   "similarity_model", "clips_dir", "seed_bench_r1_root", "epic_annotation_fps"),
                         upstream_variables={"annotation_dir": RELEASE_FOLDER}, fixed=fixed or {})


def _egoplan_backends(model: str, model_args: str) -> dict[str, tuple[str, str]]:
    """lmms-eval's Qwen backend as given (with the checkpoint's pixel bounds), and egoplan_hf loading what it loads."""
    arguments = model_arguments(model_args)
    if model not in QWEN_DTYPES or not arguments.get("pretrained"):
        raise EquivalenceError(f"egoplan compares lmms-eval's {', '.join(QWEN_DTYPES)} backends with the suite's "
                               f"egoplan_hf: --model one of them, --model_args pretrained=<checkpoint>,... (got "
                               f"--model {model} --model_args {model_args})")
    from transformers import AutoImageProcessor

    size = AutoImageProcessor.from_pretrained(arguments["pretrained"]).size
    bounds = {"min_pixels": str(size["shortest_edge"]), "max_pixels": str(size["longest_edge"])}
    if any(arguments.get(name, value) != value for name, value in bounds.items()):
        raise EquivalenceError(f"egoplan_hf resizes images within the checkpoint's own pixel bounds; pass them to "
                               f"lmms-eval's {model} too, or leave them out: {bounds}")
    suite = {"pretrained": arguments["pretrained"], "dtype": QWEN_DTYPES[model], "videos_as_frames": "true",
             "system_prompt": arguments.get("system_prompt", QWEN_SYSTEM_PROMPT),
             **{name: arguments[name] for name in ("device", "attn_implementation") if name in arguments}}
    return {UPSTREAM: (model, ",".join(f"{key}={value}" for key, value in {**arguments, **bounds}.items())),
            SUITE: ("egoplan_hf", ",".join(f"{key}={value}" for key, value in suite.items()))}


EGOPLAN_ANALYSIS = Difference(
    "the suite's analysis breakdowns", "accuracy by task-progress length and by goal-answer similarity level (the "
    "paper's Figures 7-8; the similarity needs a sentence-embedding model) is the suite's; the pull request reports "
    "the paper's Table 3 breakdown, per video source",
    tuple(f"{kind}:accuracy_{by}_*" for kind in ("sample", "aggregate") for by in ("progress", "similarity")))
EGOPLAN_BOOKKEEPING = suite_bookkeeping("predictions", "skipped_samples", "failed_requests", "n_*")
EGOPLAN_EVERY_SOURCE = Difference(
    "every video source on every question", "28 logs each video source's accuracy on every question, None outside "
    "its own source, so that lmms-eval's results file reports the question count as the task's `samples` (it takes "
    "the item count of the last metric); the suite logs a question's own source only",
    ("sample:accuracy_epic_kitchens", "sample:accuracy_ego4d"))
EGOPLAN_MCQ_READING = Difference(
    "lmms-eval's letter reading", "28's egoplan_val_mc reads the answer's letter with lmms-eval's shared "
    "extract_mcq_answer; the suite's egoplan_val_gen with its robust reading (EgoPlan-Bench2's), which also reads a "
    "candidate's text and never takes the article \"a\" for a letter: the two score an answer alike only where both "
    "read the same letter", tuple(f"{kind}:{name}" for kind in ("sample", "aggregate")
                                  for name in ("accuracy", "accuracy_epic_kitchens", "accuracy_ego4d", "unparseable")))
EGOPLAN_END_OF_TURN = Difference(
    "the end-of-turn token, recorded", "egoplan_hf records in each sample the token that closes the scored answer "
    "(<|im_end|>, the chat template's); lmms-eval's Qwen backends score the same token without recording it",
    ("sample:lmms_egoplan_end_of_turn",))


def _egoplan() -> Benchmark:
    return Benchmark(
        name="egoplan", capture="likelihood", backends=_egoplan_backends,
        patches=("01-loglikelihood-results.patch", "25-qwen-vl-loglikelihood.patch", "37-video-frames-at.patch",
                 "28-egoplan-bench-tasks.patch"),
        # Each candidate's loss within 1e-4 (the two backends' float rounding); every choice, accuracy equal.
        tasks=(TaskPair("egoplan_val_mcppl", "egoplan_val", (EGOPLAN_BOOKKEEPING, EGOPLAN_ANALYSIS,
                                                              EGOPLAN_END_OF_TURN, EGOPLAN_EVERY_SOURCE),
                        tolerance=1e-4),
               TaskPair("egoplan_test_mcppl", "egoplan_test", (EGOPLAN_BOOKKEEPING, EGOPLAN_END_OF_TURN),
                        tolerance=1e-4)),
        # lmms-eval's loglikelihood is the mean over every scored token (25), the suite's default the official division
        settings=_egoplan_settings("tasks/egoplan/egoplan_val.yaml", fixed={"loss_mean": "every_scored_token"}),
        prepare=(release_files_in_run_folder("EgoPlan_validation.json", "EgoPlan_test.json"),))


def _egoplan_gen() -> Benchmark:
    return Benchmark(
        name="egoplan_gen", capture="chat",
        patches=("37-video-frames-at.patch", "28-egoplan-bench-tasks.patch"),
        tasks=(TaskPair("egoplan_val_mc", "egoplan_val_gen", (EGOPLAN_BOOKKEEPING, EGOPLAN_ANALYSIS,
                                                              EGOPLAN_EVERY_SOURCE, EGOPLAN_MCQ_READING)),),
        settings=_egoplan_settings("tasks/egoplan/egoplan_val_gen.yaml"),
        prepare=(release_files_in_run_folder("EgoPlan_validation.json"),))


declare(_egoplan())
declare(_egoplan_gen())


if __name__ == "__main__":
    sys.exit(main())
