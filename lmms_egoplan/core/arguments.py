"""Command-line arguments that several of the suite's commands share (argparse)."""

from __future__ import annotations

import argparse


def allow_paths_outside_root_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--allow_paths_outside_root``: the command's counterpart of the settings of that name."""
    parser.add_argument("--allow_paths_outside_root", action="store_true",
                        help=f"read {what} that lead out of the data folder (absolute paths, '..', symbolic links); "
                             "refused by default")


def positive_int(text: str) -> int:
    """An option's whole number of at least 1 (a batch size, a count to list), refused by argparse otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def torch_device(text: str) -> str:
    """An option's torch device (auto, cpu, cuda, cuda:<n>), refused before any model loads where it names none or
    none that is here (``devices.device_problem``)."""
    from lmms_egoplan.core.devices import device_problem

    if problem := device_problem(text):
        raise argparse.ArgumentTypeError(problem)
    return text
