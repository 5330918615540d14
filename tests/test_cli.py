"""``lmms-egoplan``: the installed command answers ``--help`` (the console script, in a subprocess, as a
user types it), and so does every subcommand (through ``main``, the function the script calls)."""

import subprocess
import sys
from pathlib import Path

import pytest

from lmms_egoplan.cli import COMMANDS, main

COMMAND = Path(sys.executable).parent / "lmms-egoplan"


def test_top_level_help_lists_every_subcommand_with_its_help_text():
    shown = subprocess.run([str(COMMAND), "--help"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and not shown.stderr, shown.stderr
    assert shown.stdout.startswith("usage: lmms-egoplan")
    flat = " ".join(shown.stdout.split())  # argparse wraps the help texts
    for name, (help_text, _) in COMMANDS.items():
        assert f" {name} " in flat and " ".join(help_text.split()) in flat, name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_subcommand_answers_help_with_its_arguments(name, capsys):
    with pytest.raises(SystemExit) as exited:
        main([name, "--help"])
    shown = capsys.readouterr()
    assert exited.value.code == 0 and not shown.err, shown.err
    assert shown.out.startswith(f"usage: lmms-egoplan {name}")
    assert "-h, --help" in shown.out and shown.out.count("\n  --") >= 1  # its own options are listed


# Prints the heavy libraries a subcommand's --help loaded (help must answer at once: 0.4-0.6 s measured on a
# loaded two-core machine, most of it the interpreter and the suite's registry; lmms-egoplan --help alike).
HELP_IMPORTS = """
import sys
from lmms_egoplan.cli import main
try:
    main([sys.argv[1], "--help"])
except SystemExit:
    pass
heavy = {"torch", "lmms_eval", "transformers", "lm_eval", "numpy", "matplotlib", "openai", "sklearn"}
print("LOADED", sorted({m.split(".")[0] for m in sys.modules} & heavy))
"""


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_loads_neither_torch_nor_a_harness(name):
    shown = subprocess.run([sys.executable, "-c", HELP_IMPORTS, name], capture_output=True, text=True, timeout=120)
    assert shown.stdout.splitlines()[-1] == "LOADED []", (name, shown.stderr[-2000:])


def test_the_benchmarks_commands_come_from_their_folders_through_the_registry():
    from lmms_egoplan import suite

    benchmarks = suite.commands()
    assert list(COMMANDS) == ["smoke", "report", "rejudge", "judge-agreement",
                              *benchmarks]  # none of the suite's is hidden
    assert all(COMMANDS[name] == command for name, command in benchmarks.items())


def test_version_names_the_suite_and_the_harnesses_it_runs_on():
    shown = subprocess.run([str(COMMAND), "--version"], capture_output=True, text=True, timeout=120)
    from importlib.metadata import version

    assert shown.returncode == 0 and shown.stdout.strip() == (
        f"lmms-egoplan {version('lmms-egoplan')} (lmms-eval {version('lmms-eval')}, lm-eval {version('lm-eval')}, "
        f"transformers {version('transformers')}, torch {version('torch')})")


def test_a_bad_argument_is_one_line_naming_the_choices_not_a_traceback(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["smoke", "--arch", "foo"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in error
    assert error.splitlines()[-1].startswith("lmms-egoplan smoke: error: argument --arch: invalid choice: 'foo' "
                                             "(choose from")
