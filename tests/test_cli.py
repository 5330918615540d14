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
