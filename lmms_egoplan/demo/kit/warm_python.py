"""A warm Python: one process that has imported the heavy third-party modules every lmms-eval / lm-eval run imports
(torch, torchvision, transformers and its pipelines through evaluate, datasets, accelerate, sentence-transformers:
some 15 s of CPU a process) and forks a fresh process per run, which then runs the real command line
(``python -m MODULE ARGS`` or ``python -c CODE ARGS``) with its own arguments, environment, working directory, stdin,
stdout, stderr, exit status, atexit handlers and signals, as ``subprocess.run`` (``run_python``) or
``subprocess.Popen`` (``start_python``) would.

Nothing of lmms_eval, lm_eval or lmms_egoplan is imported before the fork (their import-time behaviour depends on the
run's environment). A run whose environment differs from the warm process's in a variable that the pre-imported
modules read when imported (``IMPORT_TIME_VARIABLES``), or whose interpreter is another one, is refused, and
starts as a plain process instead.

Started as a script (``python warm_python.py SOCKET [PRELUDE]``: this file imports nothing but the standard library at
its top) by whoever runs many such processes: the end-to-end tests (``tests/e2e/conftest.py``) name its socket in
``WARM_PYTHON_VARIABLE``, which the runs they start inherit (the demo's runs, under ``lmms-egoplan smoke``, too).
``PRELUDE``, a Python file, runs in each forked run before its command (the end-to-end tier's: ``tests/e2e/
task_index_memo.py``), and in each run it refused, which then starts as ``python warm_python.py --plain PRELUDE -m
MODULE ARGS`` (a plain interpreter, its own imports, the prelude, then the command as ``become_the_run`` runs it);
the demo names none.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

WARM_PYTHON_VARIABLE = "LMMS_EGOPLAN_WARM_PYTHON"  # the socket of a warm Python that runs may fork from
# Prefixes of the variables the pre-imported modules (or the interpreter) read when imported or started. Of the XDG_
# ones only XDG_CACHE_HOME (huggingface_hub's default cache): a user's XDG_CONFIG_HOME (the settings file) forks.
IMPORT_TIME_VARIABLES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS", "TORCH", "PYTORCH", "CUDA", "NCCL", "OMP_",
                         "KMP_", "MKL", "OPENBLAS", "NUMEXPR", "NUMPY", "PYTHON", "LD_", "DATASETS", "EVALUATE",
                         "ACCELERATE", "USE_", "XDG_CACHE_HOME", "HOME", "TMP", "TEMP", "LANG", "LC_", "TZ", "SKLEARN",
                         "SCIPY")
REFUSED = -1  # the pid a warm Python answers for a run it does not start
PLAIN = "--plain"  # ``python warm_python.py --plain PRELUDE -m|-c ...``: a refused run, in a plain process
_WAIT_FOR_START = 300.0  # seconds a first run waits for the warm Python to finish its imports


def import_time_environment(environ, prefixes: tuple[str, ...]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if name.startswith(prefixes)}


def _import_time_prefixes() -> tuple[str, ...]:
    """``IMPORT_TIME_VARIABLES`` of this warm Python, less ``KMP_`` where no Intel or LLVM OpenMP runtime is loaded,
    the only readers of those (a pip torch on Linux loads GNU's libgomp): scikit-learn and joblib set two of them
    when imported, which a test process that imported them hands on to its runs (all refused before, 2026-11-27)."""
    try:
        loaded = Path("/proc/self/maps").read_text()
    except OSError:  # not Linux: keep them
        return IMPORT_TIME_VARIABLES
    if re.search(r"/libi?omp[0-9]*[.-]", loaded):  # libiomp5, libomp (not libgomp)
        return IMPORT_TIME_VARIABLES
    return tuple(prefix for prefix in IMPORT_TIME_VARIABLES if prefix != "KMP_")


def run_python(command: list[str], *, env: dict[str, str] | None = None, cwd=None, timeout: float | None = None,
               stderr_apart: bool = False) -> subprocess.CompletedProcess:
    """``subprocess.run(command, env=env, cwd=cwd, stdout=PIPE, stderr=STDOUT, text=True, timeout=timeout)`` (with
    ``stderr_apart``: ``stderr=PIPE``), forked from the warm Python named in the environment's
    ``WARM_PYTHON_VARIABLE`` where that one can run it."""
    env = dict(os.environ if env is None else env)
    pipes = [os.pipe() for _ in range(2 if stderr_apart else 1)]
    forked = _fork(command, env, cwd, [pipes[0][1], pipes[-1][1]])
    for _, write_end in pipes:
        os.close(write_end)
    readers = [open(read_end, "rb", buffering=0) for read_end, _ in pipes]
    if forked is None:
        for reader in readers:
            reader.close()
        return subprocess.run(_plain(command, env), env=env, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE if stderr_apart else subprocess.STDOUT, text=True, timeout=timeout)
    outputs = _read_until_closed(readers, forked.pid, command, timeout)
    returncode = forked.wait()
    texts = [data.decode().replace("\r\n", "\n").replace("\r", "\n") for data in outputs]  # subprocess's text mode
    return subprocess.CompletedProcess(command, returncode, texts[0], texts[1] if stderr_apart else None)


def start_python(command: list[str], *, env: dict[str, str], cwd, output) -> subprocess.Popen | ForkedProcess:
    """``subprocess.Popen(command, env=env, cwd=cwd, stdout=output, stderr=STDOUT)``, forked from the warm Python
    named in ``env`` where that one can run it: the process (``poll``, ``wait``, ``send_signal``, ``returncode``)."""
    forked = _fork(command, env, cwd, [output.fileno(), output.fileno()])
    return forked or subprocess.Popen(_plain(command, env), env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT)


def run_in_place_of_this_process(command: list[str]) -> int:
    """``command`` with this process's stdin, stdout, stderr, folder and environment, forked from the warm Python
    named in the environment where that one can run it, else as a child; its exit status, a death by a signal as a
    shell reports it (128 + the signal). SIGINT and SIGTERM sent to this process are passed on to it."""
    # The handlers come first: the run may be up (and be signalled) before this process learns its pid.
    started, early = [], []

    def pass_on(received, _):
        (started[0].send_signal if started else early.append)(received)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, pass_on)
    process = _fork(command, dict(os.environ), os.getcwd(), [1, 2]) or subprocess.Popen(_plain(command, os.environ))
    started.append(process)
    for received in early:
        process.send_signal(received)
    status = process.wait()
    return 128 - status if status < 0 else status


class ForkedProcess:
    """A run forked from a warm Python, seen as ``subprocess.Popen`` sees its child. Its exit status comes from the
    warm Python's keeper of the run, over ``connection``."""

    def __init__(self, args: list[str], pid: int, connection: socket.socket, received: bytes):
        self.args, self.pid, self.returncode = args, pid, None
        self._connection, self._received = connection, received

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None and (b"\n" in self._received or _ready(self._connection, timeout)):
            while b"\n" not in self._received:
                chunk = self._connection.recv(64)
                if not chunk:
                    raise ConnectionError(f"the warm Python's keeper of run {self.pid} ended without its status")
                self._received += chunk
            self.returncode = int(self._received.split(b"\n")[0])
            self._connection.close()
        return self.returncode


def _ready(connection: socket.socket, timeout: float | None) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(connection, selectors.EVENT_READ)
        return bool(selector.select(timeout))


def _fork(command: list[str], env: dict[str, str], cwd, fds: list[int]) -> ForkedProcess | None:
    """The run forked from the warm Python named in ``env``, its stdout and stderr ``fds``; None where none is named,
    it failed to start, or it refuses the run (another interpreter, another import-time environment)."""
    warm = env.get(WARM_PYTHON_VARIABLE)
    if not warm or not same_interpreter(command[0], sys.executable) or command[1:2] not in (["-m"], ["-c"]):
        return None
    connection = _connect(Path(warm))
    if connection is None:
        return None
    request = json.dumps({"executable": command[0], "argv": command[1:], "env": env,
                          "cwd": str(Path(cwd or os.getcwd()).resolve())}).encode()
    socket.send_fds(connection, [struct.pack("!I", len(request))], [0, *fds])
    connection.sendall(request)
    received = b""
    while b"\n" not in received:
        chunk = connection.recv(64)
        if not chunk:
            raise ConnectionError(f"the warm Python {warm} ended without answering")
        received += chunk
    pid, _, rest = received.partition(b"\n")
    if int(pid) == REFUSED:
        connection.close()
        return None
    return ForkedProcess(command, int(pid), connection, rest)


def _plain(command: list[str], env) -> list[str]:
    """How a run the warm Python named in ``env`` did not fork starts: with that warm Python's prelude first
    (``PLAIN``), where it names one and the run is ``python -m`` / ``python -c``; else as ``command`` is."""
    warm = env.get(WARM_PYTHON_VARIABLE)
    if not warm or command[1:2] not in (["-m"], ["-c"]):
        return command
    try:
        prelude = Path(f"{warm}.prelude").read_text()
    except OSError:  # none named, or no warm Python there
        return command
    return [command[0], os.path.abspath(__file__), PLAIN, prelude, *command[1:]]


def same_interpreter(executable: str, other: str) -> bool:
    """Whether two interpreter paths start the same Python: the same file under two names in one folder (a venv's
    ``python`` and ``python3``, which console scripts' ``#!`` lines name) is; the same base interpreter in another
    venv is not (a venv is found from the folder of the path it is started by, not of the file it resolves to)."""
    if executable == other:
        return True
    try:
        return os.path.realpath(executable) == os.path.realpath(other) \
            and os.path.samefile(os.path.dirname(executable), os.path.dirname(other))
    except OSError:  # a path that does not exist starts nothing of this one
        return False


def _connect(path: Path) -> socket.socket | None:
    """A connection to the warm Python at ``path`` once it is listening; None if it failed to start."""
    deadline = time.monotonic() + _WAIT_FOR_START
    while not path.exists():
        if Path(f"{path}.failed").exists() or time.monotonic() > deadline:
            return None
        time.sleep(0.1)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(str(path))
    return connection


def _read_until_closed(readers: list, pid: int, command: list[str], timeout: float | None) -> list[bytes]:
    """All the run writes to each reader's pipe, until every one is closed; kills the run past ``timeout``, as
    ``subprocess.run`` does."""
    chunks = {reader: [] for reader in readers}
    deadline = None if timeout is None else time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for reader in readers:
            selector.register(reader, selectors.EVENT_READ)
        while selector.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            ready = selector.select(left) if left is None or left > 0 else []
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(command, timeout, output=b"".join(chunks[readers[0]]))
            for key, _ in ready:
                chunk = key.fileobj.read(65536)
                if chunk:
                    chunks[key.fileobj].append(chunk)
                else:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
    return [b"".join(chunks[reader]) for reader in readers]


def serve(path: Path, prelude: str | None = None) -> dict:
    """Import the heavy third-party modules, listen on ``path``, fork a keeper per request; returns the request in
    the forked run. ``prelude`` is named beside the socket (``<path>.prelude``) for the runs it refuses."""
    before = dict(os.environ)
    if prelude is not None:
        Path(f"{path}.prelude").write_text(os.path.abspath(prelude))
    try:  # what every run imports: torch, transformers and its pipelines (through lmms-eval's metrics' evaluate), ...
        import accelerate  # noqa: F401
        import datasets  # noqa: F401
        import evaluate  # noqa: F401
        import numpy  # noqa: F401
        import PIL.Image  # noqa: F401
        import sentence_transformers  # noqa: F401  EgoPlan's similarity levels, ActPlan-1K's step matcher
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        import transformers.pipelines  # noqa: F401
    except BaseException:
        import traceback

        Path(f"{path}.failed").write_text(traceback.format_exc())
        raise
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(f"{path}.binding")
    listener.listen(64)
    os.rename(f"{path}.binding", path)  # clients wait for this name: it appears listening
    listener.settimeout(5)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # keepers are reaped by the kernel
    prefixes = _import_time_prefixes()
    # What the imports wrote into the environment (torch: TORCHINDUCTOR_CACHE_DIR) a fresh process would have too.
    started = _Started(prefixes, import_time_environment(before, prefixes),
                       {name: value for name, value in os.environ.items() if before.get(name) != value},
                       Path(f"{path}.refused"))
    while os.getppid() == parent:  # ends with whoever started it
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            continue
        connection.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return _keep_one_run(connection, started)
        connection.close()
    sys.exit(0)


@dataclass(frozen=True)
class _Started:
    """How the warm Python started: the import-time variables it reads (``prefixes``) and their values before its
    imports (``environment``), what its imports set (``set_by_imports``); ``refusals``: a line per run it refused."""

    prefixes: tuple[str, ...]
    environment: dict[str, str]
    set_by_imports: dict[str, str]
    refusals: Path

    def differences(self, run_env: dict[str, str]) -> list[str]:
        """The import-time variables in which a plain process under ``run_env`` would import the pre-imported modules
        otherwise than the warm Python did, but for those its imports set (transformers' pipelines, through torch's
        inductor: ``TORCHINDUCTOR_CACHE_DIR``) where the run holds the value they set (its caller imported them)."""
        own = import_time_environment({name: value for name, value in run_env.items()
                                       if self.set_by_imports.get(name) != value}, self.prefixes)
        return sorted(name for name in own.keys() | self.environment.keys()
                      if own.get(name) != self.environment.get(name))


def _keep_one_run(connection: socket.socket, started: _Started) -> dict:
    """In the keeper: read the request, fork the run, answer its pid and then its exit status; returns the request
    in the run."""
    header, fds, _, _ = socket.recv_fds(connection, 4, 3)
    (length,) = struct.unpack("!I", header)
    payload = b""
    while len(payload) < length:
        payload += connection.recv(length - len(payload))
    request = json.loads(payload)
    differences = ["another interpreter"] if not same_interpreter(request["executable"], sys.executable) else \
        started.differences(request["env"])
    if differences:
        with started.refusals.open("a") as refusals:  # seen by whoever started the warm Python
            command = " ".join(request["argv"][:2]).replace("\n", "\\n")  # -c CODE: one line a refusal
            refusals.write(f"{command[:200]}: {', '.join(differences)}\n")
        connection.sendall(f"{REFUSED}\n".encode())
        os._exit(0)
    run = os.fork()
    if run == 0:
        connection.close()
        return {**request, "env": {**request["env"], **started.set_by_imports}, "fds": fds}
    for fd in fds:
        os.close(fd)
    try:
        connection.sendall(f"{run}\n".encode())
        _, status = os.waitpid(run, 0)
        connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:  # the client may have gone (a timeout): the run is reaped either way
        os._exit(0)


def become_the_run(request: dict, prelude: str | None = None) -> None:
    """In the forked run: take the request's streams, folder, environment and arguments, run the ``prelude`` file if
    one is named, then the command line in a fresh ``__main__``; its end (an exception, ``sys.exit``, atexit) is the
    interpreter's, as in any process."""
    import random
    import runpy
    import types

    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
    for fd in set(request["fds"]) - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.executable = request["executable"]  # the name it was started by, as a plain process has it
    random.seed()  # each process its own draws, as a fresh interpreter would have
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    flag, target, *arguments = request["argv"]
    try:
        if prelude is not None:
            runpy.run_path(prelude, run_name="__warm_python_prelude__")
        if flag == "-m":
            sys.path[0] = os.getcwd()
            sys.argv = ["-m", *arguments]
            runpy._run_module_as_main(target, alter_argv=True)  # what ``python -m`` itself calls
        else:
            sys.path[0] = ""
            sys.argv = ["-c", *arguments]
            exec(compile(target, "<string>", "exec"), main.__dict__)
        status = 0
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except BaseException as error:
        error.__traceback__ = error.__traceback__.tb_next  # from the command's frames on, as Python prints it
        sys.excepthook(type(error), error, error.__traceback__)
        status = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    _end_as_the_interpreter_does(status)


def _exit_status(code) -> int:
    """The status ``sys.exit(code)`` leaves (the interpreter's ``handle_system_exit``)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def _end_as_the_interpreter_does(status: int) -> None:
    """What the interpreter does at exit that a program can see: wait for its non-daemon threads, run the atexit
    handlers, flush stdout and stderr; then exit without tearing down thousands of modules one by one (3-4 s
    with torch and transformers loaded, and nothing a run can see). A run ended by Ctrl-C ends by SIGINT, as
    Python's own."""
    import atexit
    import threading

    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed stream or pipe
            pass
    if status == -signal.SIGINT:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(status & 0xFF)


if __name__ == "__main__":
    if sys.argv[1] == PLAIN:  # a refused run: this interpreter's own imports, then the prelude and the command
        become_the_run({"argv": sys.argv[3:], "env": dict(os.environ), "cwd": os.getcwd(), "fds": [],
                        "executable": sys.executable}, prelude=sys.argv[2])
    prelude_file = sys.argv[2] if len(sys.argv) > 2 else None
    become_the_run(serve(Path(sys.argv[1]), prelude_file), prelude=prelude_file)
