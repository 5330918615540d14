"""docs/run-all.md, command by command (issue 65 point 8): every `bash` block of the page runs exactly as
printed, in one shell per block and in the page's order, in a folder where a tiny random-weight Qwen2.5-VL sits at
`Qwen/Qwen2.5-VL-7B-Instruct`, on the demo's data; each server launch is stood in for by a loopback server on the
printed port answering as the printed name; each `accelerate launch` is checked (its options are the launcher's, the
lmms-eval command after `-m lmms_eval` is one this test runs in full). The page's section "What the test runs" says
the same to its reader. Its `lmms-eval` and `lmms-egoplan` commands run their console scripts' code forked from the
tier's warm Python, as the tier's other runs (`tests/kit/forked_console_scripts.py`)."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from lmms_egoplan.core.settings_file import SETTINGS_VARIABLE
from lmms_egoplan.demo.kit.judge_server import ChatServer, rating_responder
from lmms_egoplan.demo.kit.lmms_eval_run import OFFLINE_ENV
from lmms_egoplan.demo.kit.settings import DEMO_SETTINGS_FILE, with_demo_settings
from lmms_egoplan.demo.smoke import suites
from tests.kit.forked_console_scripts import forked_console_scripts
from tests.kit.loopback_hub import LoopbackHub
from tests.models.engine_servers import EngineServer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "run-all.md"
MODEL = "Qwen/Qwen2.5-VL-7B-Instruct"
BIN = Path(sys.executable).parent
LAUNCHES = ("vllm serve ", "python -m sglang.launch_server ")
ACCELERATE = "accelerate launch "
PAGE_VARIABLES_OF_THE_TEST = ("DATA",)  # the page's variables the test gives values of its own


def page_blocks() -> list[list[str]]:
    """The page's `bash` blocks, each as its commands: continuation lines joined, comments and blank lines left out."""
    blocks = re.findall(r"^```bash\n(.*?)^```", PAGE.read_text(), flags=re.MULTILINE | re.DOTALL)
    commands = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", "", block)
        commands.append([line.split("  #")[0].strip() for line in joined.splitlines()
                         if line.strip() and not line.lstrip().startswith("#")])
    return commands


def launched(command: str) -> str | None:
    """The server a command launches (`vllm serve ...`, `python -m sglang.launch_server ...`), without the
    variables before it: None for any other command."""
    words = [word for word in shlex.split(command.rstrip().removesuffix("&")) if not re.match(r"^[A-Z_]+=", word)]
    text = " ".join(words) + " "
    return text.strip() if text.startswith(LAUNCHES) else None


def option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def stand_in(command: str, checkpoint: Path) -> ChatServer | EngineServer:
    """A loopback server for a launch line: on its port, answering as its name; a judge where the name is a judge's,
    else an engine computing with the tiny checkpoint."""
    words = shlex.split(launched(command))
    engine = "vllm" if words[0] == "vllm" else "sglang"
    name = words[2] if engine == "vllm" else option(words, "--model-path")
    port = int(option(words, "--port"))
    if name.startswith("Qwen/Qwen3-"):  # the judge
        return ChatServer(rating_responder(lambda call: "1"), model_name=name, port=port)
    assert name == MODEL, f"a launch of neither the judge nor {MODEL}: {command}"
    return EngineServer(engine, checkpoint, served_model_name=option(words, "--served-model-name") or name,
                        port=port)


@pytest.fixture(scope="module")
def workplace(tmp_path_factory, tiny_model):
    """The folder the page's commands run in, the tiny checkpoint at the model's name, and the demo's data with its
    settings file (the judge's settings left out: the runs use the default judge, which the page serves)."""
    root = tmp_path_factory.mktemp("run_all")
    checkpoint = tiny_model("qwen2_5_vl")
    (root / "work" / MODEL).parent.mkdir(parents=True)
    (root / "work" / MODEL).symlink_to(checkpoint, target_is_directory=True)
    settings = root / DEMO_SETTINGS_FILE
    with ExitStack() as resources:
        for name, build in suites().items():
            suite = build(root / "demo" / name, resources)
            own_judge = ("_JUDGE_BASE_URL", "_JUDGE_MODEL", "_JUDGE_API_KEY_ENV")
            suite = dataclasses.replace(suite, env={key: value for key, value in suite.env.items()
                                                    if not key.endswith(own_judge)})
            with_demo_settings(settings, name, suite)
        yield root, checkpoint, settings


def environment(root: Path, settings: Path, variables: dict[str, str]) -> dict[str, str]:
    forked = forked_console_scripts(root / "forked-bin", [BIN / "lmms-eval", BIN / "lmms-egoplan"])
    path = os.pathsep.join([str(forked), str(BIN), os.environ["PATH"]])
    return {**os.environ, **OFFLINE_ENV, **variables, "PATH": path, "DATA": str(root / "data"),
            SETTINGS_VARIABLE: str(settings)}


def run_block(commands: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    script = "set -e\n" + "\n".join(commands) + "\n"
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def page_variables(block: list[str]) -> dict[str, str]:
    """The first block's `export NAME=VALUE` lines, the test's own values for the ones it chooses."""
    found = {}
    for command in block:
        assert command.startswith("export "), f"the page's first block sets variables only: {command}"
        found.update(word.split("=", 1) for word in shlex.split(command)[1:])
    return {name: value for name, value in found.items() if name not in PAGE_VARIABLES_OF_THE_TEST}


def test_every_command_of_the_run_all_page_runs_as_printed_on_the_demos_data(workplace):
    root, checkpoint, settings = workplace
    first, *blocks = page_blocks()
    env = environment(root, settings, page_variables(first))
    ran = []
    for block in blocks:
        runnable = [command for command in block if launched(command) is None and not command.startswith(ACCELERATE)
                    and ACCELERATE not in command]
        if not runnable:
            continue  # launches and accelerate only: the next test
        with ExitStack() as servers:
            stood_in = [servers.enter_context(stand_in(command, checkpoint)) for command in block if launched(command)]
            block_env = env
            if runnable[0].startswith("lmms-egoplan prepare"):
                hub = servers.enter_context(LoopbackHub())
                hub.add_the_suites_datasets(root / "hub")
                block_env = {**env, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
                             SETTINGS_VARIABLE: str(root / "prepared-settings.yaml")}
            done = run_block(runnable, root / "work", block_env)
        assert done.returncode == 0, f"{runnable}\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
        for server in stood_in:  # each launch's server was the one the block's commands asked
            asked = server.requests if isinstance(server, EngineServer) else server.calls
            assert asked, f"nothing asked the server of {block}"
        ran += runnable
    assert [command.split()[0] for command in ran if not command.startswith(("lmms-eval", "lmms-egoplan"))] == \
        ["export"]  # path (b)'s judge: every other command the page runs is the suite's or lmms-eval's
    logged = {path.name.split("_samples_")[1].removesuffix(".jsonl")
              for path in (root / "work" / "logs").rglob("*_samples_*.jsonl")}
    assert {"egoplan_val", "egoplan_test", "actplan1k", "egoplan_bench2", "egointent"} <= logged
    report = (root / "work" / "report" / "report.md").read_text()
    assert "not judged" not in report  # path (a)'s run shows the rejudged scores
    assert (root / "data" / "lmms-egoplan-needed.md").is_file()


def test_the_accelerate_launches_take_the_launchers_options_and_a_command_run_in_full():
    blocks = page_blocks()
    launches = [command for block in blocks for command in block if ACCELERATE in command]
    run_in_full = {" ".join(shlex.split(command)[1:]) for block in blocks for command in block
                   if command.startswith("lmms-eval ")}
    assert len(launches) == 2
    listed = subprocess.run([str(BIN / "accelerate"), "launch", "--help"], capture_output=True, text=True,
                            timeout=300).stdout
    for command in launches:
        words = [word for word in shlex.split(command) if not re.match(r"^[A-Z_]+=", word)]
        module = words.index("-m")
        assert words[module + 1] == "lmms_eval"
        for word in words[2:module]:
            assert not word.startswith("--") or f"{word} " in listed, f"accelerate launch has no {word}"
        assert " ".join(words[module + 2:]) in run_in_full, command
