"""``lmms-egoplan``: the suite's own commands (the evaluations themselves run through ``lmms-eval``)."""

from __future__ import annotations

import argparse
import sys
import tempfile


def _smoke(args: argparse.Namespace) -> int:
    from lmms_egoplan.smoke import run_smoke

    workdir = args.workdir or tempfile.mkdtemp(prefix="lmms-egoplan-smoke-")
    return 1 if run_smoke(workdir, arch=args.arch, only=args.benchmark) else 0


def build_parser() -> argparse.ArgumentParser:
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
