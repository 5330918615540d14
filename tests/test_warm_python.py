"""The warm Python the end-to-end tier forks its lmms-eval and lm-eval runs from (``demo/kit/warm_python.py``): a
forked run behaves as the same command in a plain process (``subprocess.run``, the oracle) in what a run can see:
its arguments, environment, working directory, output, exit status, atexit handlers, threads, signals; it was forked
(torch already imported) with nothing of lmms-eval or the suite imported; a run whose import-time environment
differs runs in a plain process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from lmms_egoplan.demo.kit.warm_python import WARM_PYTHON_VARIABLE, run_python, start_python

PROBE = r"""
import json, os, sys, threading, atexit, time
suite_or_harness = sorted(m for m in sys.modules if m.split(".")[0] in ("lmms_eval", "lm_eval", "lmms_egoplan"))
seen = {"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "variable": os.environ.get("PROBE_VARIABLE"),
        "suite_or_harness": suite_or_harness}
print(json.dumps(seen), flush=True)
print("to stderr", file=sys.stderr, flush=True)
threading.Thread(target=lambda: time.sleep(0.5) or print("thread joined", flush=True)).start()  # after the end
atexit.register(print, "atexit ran")
ending = sys.argv[1]
if ending == "status":
    sys.exit(7)
if ending == "message":
    sys.exit("a message")
if ending == "error":
    raise ValueError("broken")
if ending == "interrupt":
    raise KeyboardInterrupt
"""


@contextmanager
def warm_python_in(folder: Path, *prelude: Path):
    """A warm Python listening in ``folder`` (with ``prelude``, if given): the environment of runs that fork from it."""
    from lmms_egoplan.demo.kit import warm_python

    server = subprocess.Popen([sys.executable, warm_python.__file__, str(folder / "socket"), *map(str, prelude)])
    try:
        yield {**os.environ, WARM_PYTHON_VARIABLE: str(folder / "socket")}
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """The environment of runs that fork from a warm Python (started here, ended after the module)."""
    with warm_python_in(tmp_path_factory.mktemp("warm")) as environment:
        yield environment


@pytest.mark.parametrize("ending", ["normal", "status", "message", "error", "interrupt"])
@pytest.mark.parametrize("stderr_apart", [False, True])
def test_a_forked_run_is_seen_as_the_same_command_in_a_plain_process(warm, tmp_path, ending, stderr_apart):
    command = [sys.executable, "-c", PROBE, ending, "second argument"]
    env = {**warm, "PROBE_VARIABLE": f"value {ending}"}
    forked = run_python(command, env=env, cwd=tmp_path, timeout=300, stderr_apart=stderr_apart)
    plain = subprocess.run(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True, timeout=300,
                           stderr=subprocess.PIPE if stderr_apart else subprocess.STDOUT)
    assert (forked.returncode, forked.stdout, forked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert '"suite_or_harness": []' in forked.stdout and "atexit ran" in forked.stdout
    assert "thread joined" in forked.stdout and f"value {ending}" in forked.stdout


def test_runs_fork_with_torch_imported_each_its_own_draws_and_python_m_runs_a_module(warm, tmp_path):
    probe = "import sys, random; print({'torch', 'sentence_transformers'} <= set(sys.modules), random.random())"
    draws = [run_python([sys.executable, "-c", probe], env=warm, timeout=300).stdout.split() for _ in range(2)]
    assert [loaded for loaded, _ in draws] == ["True", "True"] and draws[0][1] != draws[1][1]
    (tmp_path / "probe_module.py").write_text("import sys, os; print(sys.argv[0] == os.path.abspath('probe_module.py'),"
                                              " sys.argv[1:], sys.path[0] == os.getcwd(), __name__)")
    ran = run_python([sys.executable, "-m", "probe_module", "x"], env=warm, cwd=tmp_path, timeout=300)
    assert (ran.returncode, ran.stdout) == (0, "True ['x'] True __main__\n")


def test_a_run_of_this_interpreter_by_another_name_forks_and_another_venvs_does_not(warm, tmp_path):
    """Console scripts' ``#!`` lines name the venv's ``python3`` where pytest ran as ``python`` (CI): the demo's runs
    under ``lmms-egoplan smoke`` all started plain before (2026-11-28). A venv on the same base interpreter is another
    Python (its own site-packages): it starts plain."""
    probe = "import sys; print('torch' in sys.modules, sys.executable)"
    here = Path(sys.executable)
    other_name = next(path for path in sorted(here.parent.glob("python*"))
                      if path.name != here.name and os.path.realpath(path) == os.path.realpath(here))
    assert run_python([str(other_name), "-c", probe], env=warm, timeout=300).stdout == f"True {other_name}\n"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=300)
    another_venv = tmp_path / "venv" / "bin" / here.name
    assert os.path.realpath(another_venv) == os.path.realpath(here)
    ran = run_python([str(another_venv), "-c", "import sys; print('torch' in sys.modules, sys.prefix)"], env=warm,
                     timeout=300)
    assert ran.stdout == f"False {tmp_path / 'venv'}\n"


def test_a_run_whose_import_time_environment_differs_runs_in_a_plain_process(warm):
    probe = "import sys; print('torch' in sys.modules)"
    assert run_python([sys.executable, "-c", probe], env=warm, timeout=300).stdout == "True\n"
    assert run_python([sys.executable, "-c", probe], env={**warm, "HF_HOME": "/elsewhere"}, timeout=300).stdout \
        == "False\n"
    assert run_python([sys.executable, "-c", probe], env={**warm, WARM_PYTHON_VARIABLE: ""}, timeout=300).stdout \
        == "False\n"
    # huggingface_hub reads XDG_CACHE_HOME when imported; no pre-imported module reads XDG_CONFIG_HOME (the settings)
    assert run_python([sys.executable, "-c", probe], env={**warm, "XDG_CACHE_HOME": "/elsewhere"},
                      timeout=300).stdout == "False\n"
    assert run_python([sys.executable, "-c", probe], env={**warm, "XDG_CONFIG_HOME": "/elsewhere"},
                      timeout=300).stdout == "True\n"


@pytest.fixture(scope="module")
def warm_with_prelude(tmp_path_factory):
    """The environment of runs that fork from a warm Python started with a prelude, as the end-to-end tier's is (its
    task index memo): the prelude records the process it ran in, and whether torch was imported by then."""
    folder = tmp_path_factory.mktemp("warm-with-prelude")
    prelude = folder / "prelude.py"
    prelude.write_text("import builtins, os, sys\nbuiltins.PRELUDE_RAN = os.getpid(), 'torch' in sys.modules\n")
    with warm_python_in(folder, prelude) as environment:
        yield environment


@pytest.mark.parametrize("ending", ["normal", "status", "error"])
def test_a_refused_run_starts_plain_with_the_warm_pythons_prelude_first(warm_with_prelude, tmp_path, ending):
    """The end-to-end tier's prelude (its task index memo) runs before every run of its warm Python, those it refuses
    (another ``HF_HOME``: they start plain) too; such a run is otherwise the same command in a plain process."""
    env = {**warm_with_prelude, "PROBE_VARIABLE": ending}
    probe = "import builtins, os; ran = getattr(builtins, 'PRELUDE_RAN', None); print(ran == (os.getpid(), "
    forked = run_python([sys.executable, "-c", probe + "True))"], env=env, cwd=tmp_path, timeout=300)
    refused = run_python([sys.executable, "-c", probe + "False))"], env={**env, "HF_HOME": str(tmp_path)},
                         cwd=tmp_path, timeout=300)
    assert (forked.stdout, refused.stdout) == ("True\n", "True\n")
    command = [sys.executable, "-c", PROBE, ending, "second argument"]
    as_refused = run_python(command, env={**env, "HF_HOME": str(tmp_path)}, cwd=tmp_path, timeout=300,
                            stderr_apart=True)
    plain = subprocess.run(command, env={**env, "HF_HOME": str(tmp_path)}, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert (as_refused.returncode, as_refused.stdout, as_refused.stderr) == \
        (plain.returncode, plain.stdout, plain.stderr)


def test_a_caller_that_imported_transformers_pipelines_or_scikit_learn_forks_its_runs(warm):
    """Importing transformers' pipelines sets ``TORCHINDUCTOR_CACHE_DIR`` in the importing process (through torch's
    inductor), scikit-learn ``KMP_DUPLICATE_LIB_OK`` and ``KMP_INIT_AT_FORK``: the end-to-end tier's test processes
    hold them from their test modules' imports, and their runs all started plain before (2026-11-27). A run holding
    another inductor folder starts plain; the KMP_ variables are read by no runtime a pip torch loads (libgomp)."""
    probe = "import os, sys; print('torch' in sys.modules, os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    importer = ("import json, os, sklearn, transformers.pipelines; "
                "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('TORCHINDUCTOR', 'KMP_'))}))")
    imported = subprocess.run([sys.executable, "-c", importer],
                              env=warm, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=300)
    set_by_imports = json.loads(imported.stdout.splitlines()[-1])
    assert set(set_by_imports) == {"TORCHINDUCTOR_CACHE_DIR", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"}
    folder = set_by_imports["TORCHINDUCTOR_CACHE_DIR"]
    assert run_python([sys.executable, "-c", probe], env={**warm, "TORCHINDUCTOR_CACHE_DIR": folder},
                      timeout=300).stdout == f"True {folder}\n"
    assert run_python([sys.executable, "-c", probe], env={**warm, **set_by_imports}, timeout=300).stdout \
        == f"True {folder}\n"
    assert run_python([sys.executable, "-c", probe], env={**warm, "TORCHINDUCTOR_CACHE_DIR": "/elsewhere"},
                      timeout=300).stdout == "False /elsewhere\n"


def test_a_run_with_its_own_pythonpath_runs_in_a_plain_process_where_its_sitecustomize_runs(warm, tmp_path):
    """A ``PYTHONPATH`` acts when an interpreter starts (a ``sitecustomize`` there runs first, as the upstream
    equivalence run's guard does), which a fork would skip: such a run starts as a plain process."""
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "sitecustomize.py").write_text("import builtins\nbuiltins.GUARDED = True\n")
    probe = "import sys, builtins; print('torch' in sys.modules, getattr(builtins, 'GUARDED', False))"
    env = {**warm, "PYTHONPATH": str(tmp_path / "scratch")}
    assert run_python([sys.executable, "-c", probe], env=env, cwd=tmp_path, timeout=300).stdout == "False True\n"


def test_a_run_past_its_timeout_is_killed(warm):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_python([sys.executable, "-c", "import time; print('started', flush=True); time.sleep(600)"], env=warm,
                   timeout=3)
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)])
def test_a_started_run_is_signalled_and_waited_for_as_a_process(warm, tmp_path, signum, status):
    log = tmp_path / "log"
    with log.open("w") as output:
        process = start_python([sys.executable, "-c", "import time, sys; print('torch' in sys.modules, flush=True); "
                                "time.sleep(600)"], env=warm, cwd=tmp_path, output=output)
        deadline = time.monotonic() + 120
        while not log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.poll() is None and log.read_text() == "True\n"
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
        process.send_signal(signum)
        assert process.wait(timeout=60) == status == process.returncode


CONSOLE_SCRIPT = r"""#!{python}
import os, sys, time
print(sys.argv[1:], os.getcwd(), os.environ.get("PROBE_VARIABLE"), "torch" in sys.modules, flush=True)
print("to stderr", file=sys.stderr, flush=True)
if sys.argv[1] == "sleep":
    time.sleep(300)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def console_script(tmp_path):
    """An installed console script (``probe-command``) and its stand-in first on a shell's PATH
    (``tests/kit/forked_console_scripts.py``)."""
    from tests.kit.forked_console_scripts import forked_console_scripts

    script = tmp_path / "installed" / "probe-command"
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    return script, forked_console_scripts(tmp_path / "stand-ins", [script])


@pytest.mark.parametrize("refused", [False, True])
def test_a_console_scripts_stand_in_runs_its_code_forked_as_the_script_would_run(warm, console_script, tmp_path,
                                                                                 refused):
    script, stand_ins = console_script
    line = "probe-command 3 'two words'; echo status $?"
    env = {**warm, "PROBE_VARIABLE": "seen", **({"HF_HOME": str(tmp_path / "elsewhere")} if refused else {})}
    ran = [subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**env, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"})
           for folder in (stand_ins, script.parent)]
    forked, plain = ([run.stdout, run.stderr] for run in ran)
    assert forked == [plain[0].replace("False", str(not refused)), plain[1]]
    assert plain == [f"['3', 'two words'] {tmp_path} seen False\nstatus 3\n", "to stderr\n"]


def test_a_console_scripts_stand_in_passes_sigterm_on_and_exits_as_a_shell_reports_it(warm, console_script,
                                                                                    tmp_path):
    _, stand_ins = console_script
    started = subprocess.Popen([str(stand_ins / "probe-command"), "sleep"], env=warm, stdout=subprocess.PIPE,
                               text=True)
    up = started.stdout.readline()
    assert up.startswith("['sleep']") and up.endswith(" True\n"), up  # the run is up, forked (torch imported)
    started.send_signal(signal.SIGTERM)
    assert started.wait(timeout=60) == 128 + signal.SIGTERM


def test_a_sigterm_that_comes_before_the_run_is_known_is_passed_on_once_it_is(tmp_path):
    """The run may be up, and the stand-in signalled, before the stand-in learns the run's pid (the CI failure of
    2026-11-29); here the signal comes as ``_fork`` returns, in a plain process (no warm Python named)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, signal, sys\n"
        "from lmms_egoplan.demo.kit import warm_python\n"
        "real_fork = warm_python._fork\n"
        "def fork_then_signalled(*args):\n"
        "    started = real_fork(*args)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return started\n"
        "warm_python._fork = fork_then_signalled\n"
        "sys.exit(warm_python.run_in_place_of_this_process([sys.executable, '-c', 'import time; time.sleep(60)']))\n")
    env = {key: value for key, value in os.environ.items() if key != WARM_PYTHON_VARIABLE}
    ran = subprocess.run([sys.executable, str(probe)], env=env, timeout=60)
    assert ran.returncode == 128 + signal.SIGTERM  # the run ended by the signal, reported as a shell does
