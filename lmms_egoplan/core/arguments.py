"""Command-line arguments that several of the suite's commands share (argparse)."""

from __future__ import annotations

import argparse


def allow_paths_outside_root_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--allow_paths_outside_root``: the command's counterpart of the settings of that name."""
    parser.add_argument("--allow_paths_outside_root", action="store_true",
                        help=f"read {what} that lead out of the data folder (absolute paths, '..', symbolic links); "
                             "refused by default")
