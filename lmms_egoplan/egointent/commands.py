"""EgoIntent's ``lmms-egoplan`` commands (``COMMANDS``, merged into the CLI through the registry):
``egointent-check``. What a command needs beyond argparse is imported when it runs, so that
``--help`` answers at once."""

from __future__ import annotations

import argparse
from pathlib import Path

from lmms_egoplan.core.arguments import allow_paths_outside_root_argument
from lmms_egoplan.core.errors import InputError


def _check(args: argparse.Namespace) -> int:
    from lmms_egoplan.egointent.data import describe_steps, load_samples
    from lmms_egoplan.egointent.protocol import EgoIntentSettings

    settings = EgoIntentSettings(annotations=args.annotations, data_layout=args.data_layout, video_root=args.video_root,
                                 sample_fps=args.sample_fps, max_frames=args.max_frames,
                                 allow_paths_outside_root=args.allow_paths_outside_root, skip_missing=args.skip_missing,
                                 longer_clips=args.longer_clips)
    settings.check_sampling(name=lambda field: "--" + field)
    try:
        loaded = load_samples(settings)
    except InputError as error:  # the loader names the task's settings; this command's are its options
        error.args = (_as_options(str(error)),)
        raise
    print(describe_steps(loaded, settings))
    return 0


def _as_options(message: str) -> str:
    """``message`` with each setting of the task (EGOINTENT_SKIP_MISSING (metadata.skip_missing)) spelled as this
    command's option (--skip_missing), the annotations as its argument."""
    from lmms_egoplan.core.settings import setting_name
    from lmms_egoplan.egointent.data import ENV_PREFIX

    message = message.replace(setting_name(ENV_PREFIX, "annotations"), "the annotations argument")
    for flag in ("skip_missing", "allow_paths_outside_root"):  # switches: given, not set to true
        message = message.replace(f"{setting_name(ENV_PREFIX, flag)} to true", f"--{flag}")
    for option in ("data_layout", "video_root", "sample_fps", "max_frames", "longer_clips", "skip_missing",
                   "allow_paths_outside_root"):
        message = message.replace(setting_name(ENV_PREFIX, option), f"--{option}")
    return message


def _frame_cap(text: str) -> int | None:
    from lmms_egoplan.core.settings import SettingsError, coerce_setting

    try:
        return coerce_setting(text, int | None, "--max_frames")
    except SettingsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _check_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument("annotations", type=Path, help="the release folder as downloaded, or a flat annotation file "
                                                      "(.json list or .jsonl)")
    check.add_argument("--data_layout", default="auto",
                       help="release, flat or auto (default): a folder is the release, a file the flat format")
    check.add_argument("--video_root", type=Path, help="flat format: where video paths and video_uids resolve "
                                                       "(default: the annotation file's folder)")
    check.add_argument("--skip_missing", action="store_true",
                       help="list the steps whose video is missing or unusable instead of failing")
    check.add_argument("--sample_fps", type=float, default=6.0, help="frames sampled per second (default: 6)")
    check.add_argument("--max_frames", type=_frame_cap, default=32, help="frame cap per clip, or none (default: 32)")
    check.add_argument("--longer_clips", default="end", choices=("end", "start", "whole", "error"),
                       help="a clip longer than its window: show the window ending at the clip's end (default), "
                            "the one from its first frame, the whole clip, or list it as a problem")
    allow_paths_outside_root_argument(check, "videos")
    check.set_defaults(handler=_check)


# name -> (help, how to add its arguments), as lmms_egoplan.cli.COMMANDS
COMMANDS = {
    "egointent-check": ("validate the EgoIntent release (or a flat annotation file) and its videos, and "
                        "summarise the steps and frame plans", _check_arguments),
}
