"""EgoIntent's ``lmms-egoplan`` commands (``COMMANDS``, merged into the CLI through the registry):
``egointent-check``. What a command needs beyond argparse is imported when it runs, so that
``--help`` answers at once."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmms_egoplan.core.arguments import allow_paths_outside_root_argument


def _check(args: argparse.Namespace) -> int:
    from lmms_egoplan.egointent.data import annotation_problems, describe_steps, load_steps, step_docs
    from lmms_egoplan.egointent.task import EgoIntentSettings

    settings = EgoIntentSettings(annotations=args.annotations, video_root=args.video_root,
                                 sample_fps=args.sample_fps, max_frames=args.max_frames)
    settings.check_sampling(name=lambda field: "--" + field.replace("_", "-"))
    problems = annotation_problems(settings.annotations)
    steps = load_steps(settings.annotations, settings.video_root, allow_outside=args.allow_paths_outside_root,
                       dataset_problems=problems)
    docs = step_docs(steps, settings, problems)
    problems.raise_if_any()
    print(describe_steps(docs, settings))
    return 0


def _frame_cap(text: str) -> int | None:
    from lmms_egoplan.core.settings import SettingsError, coerce_setting

    try:
        return coerce_setting(text, int | None, "--max-frames")
    except SettingsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("annotations", type=Path, help="the annotation file (.json list or .jsonl)")
    check.add_argument("--video-root", type=Path, help="where video paths and video_uids resolve "
                                                       "(default: the annotation file's folder)")
    check.add_argument("--sample-fps", type=float, default=6.0, help="frames sampled per second (default: 6)")
    check.add_argument("--max-frames", type=_frame_cap, default=32, help="frame cap per clip, or none (default: 32)")
    allow_paths_outside_root_argument(check, "videos")
    check.set_defaults(handler=_check)


# name -> (help, how to add its arguments), as lmms_egoplan.cli.COMMANDS
COMMANDS = {
    "egointent-check": ("validate EgoIntent annotations in the local format (and their videos) and "
                        "summarise the steps and frame plans", _check_arguments),
}
