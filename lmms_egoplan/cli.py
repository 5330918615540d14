"""``lmms-egoplan``: the suite's own commands (the evaluations themselves run through ``lmms-eval``)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def _smoke(args: argparse.Namespace) -> int:
    from lmms_egoplan.smoke import run_smoke

    workdir = args.workdir or tempfile.mkdtemp(prefix="lmms-egoplan-smoke-")
    return 1 if run_smoke(workdir, arch=args.arch, only=args.benchmark) else 0


def _rejudge(args: argparse.Namespace) -> int:
    import dataclasses

    from lmms_egoplan.harness import resolve_settings
    from lmms_egoplan.judge import Judge, JudgeSettings
    from lmms_egoplan.judged_task import rejudge_samples
    from lmms_egoplan.smoke import format_table, result_rows

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(JudgeSettings) if hasattr(args, f.name)}
    try:
        settings = resolve_settings(JudgeSettings, task="rejudge", metadata=given, env_prefix="", environ={})
        scores = rejudge_samples(args.samples, Judge.from_settings(settings), args.output)
    except (ValueError, FileNotFoundError) as error:  # bad settings or paths: say which, no traceback
        print(f"lmms-egoplan rejudge: {error}", file=sys.stderr)
        return 2
    results = {"results": {task: {f"{metric},none": value for metric, value in row.items() if isinstance(value, (int, float))}
                           for task, row in scores.items()}}
    print(format_table(result_rows(results)))
    print(f"Judge: {settings.judge_backend}:{settings.judge_model}; audit trails and scores in {args.output}")
    return 0


def _egointent_check(args: argparse.Namespace) -> int:
    from lmms_egoplan.egointent import (
        EgoIntentDataError,
        EgoIntentSettings,
        describe_steps,
        load_steps,
        step_docs,
    )
    from lmms_egoplan.harness import SettingsError

    settings = EgoIntentSettings(annotations=args.annotations, video_root=args.video_root,
                                 sample_fps=args.sample_fps, max_frames=args.max_frames)
    try:
        settings.check_sampling("options")
        docs = step_docs(load_steps(settings.annotations, settings.video_root), settings)
    except (EgoIntentDataError, SettingsError) as error:
        print(f"lmms-egoplan egointent-check: {error}", file=sys.stderr)
        return 2
    print(describe_steps(docs, settings))
    return 0


def build_parser() -> argparse.ArgumentParser:
    import dataclasses

    from lmms_egoplan.judge import JudgeSettings
    from lmms_egoplan.smoke import DEFAULT_ARCH, SUITES, suite_name

    parser = argparse.ArgumentParser(prog="lmms-egoplan", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    smoke = commands.add_parser(
        "smoke", help="offline demo: every task through lmms-eval on a tiny random model and synthetic data")
    smoke.add_argument("--workdir", help="where fixtures, checkpoints and logs go (default: a new temp folder)")
    smoke.add_argument("--arch", default=DEFAULT_ARCH, help=f"tiny checkpoint architecture (default: {DEFAULT_ARCH})")
    smoke.add_argument("--benchmark", action="append", choices=[suite_name(entry) for entry in SUITES],
                       help="run only this benchmark's tasks (repeatable; default: all)")
    smoke.set_defaults(handler=_smoke)

    rejudge = commands.add_parser(
        "rejudge", help="re-score logged model outputs (lmms-eval --log_samples files) with another judge, "
                        "without running the model")
    rejudge.add_argument("samples", nargs="+", help="samples files (<date>_samples_<task>.jsonl) or folders holding them")
    rejudge.add_argument("--output", required=True, help="folder for the new audit trails and scores")
    for setting in dataclasses.fields(JudgeSettings):
        rejudge.add_argument(f"--{setting.name}", default=argparse.SUPPRESS,
                             help=f"(default: {setting.default}); see README, section Judges")
    rejudge.set_defaults(handler=_rejudge)

    check = commands.add_parser(
        "egointent-check", help="validate EgoIntent annotations in the local format (and their videos) and "
                                "summarise the steps and frame plans")
    check.add_argument("annotations", type=Path, help="the annotation file (.json list or .jsonl)")
    check.add_argument("--video-root", type=Path, help="where video paths and video_uids resolve "
                                                       "(default: the annotation file's folder)")
    check.add_argument("--sample-fps", type=float, default=6.0, help="frames sampled per second (default: 6)")
    check.add_argument("--max-frames", type=int, default=32, help="frame cap per clip (default: 32)")
    check.set_defaults(handler=_egointent_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
