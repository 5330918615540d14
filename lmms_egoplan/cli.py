"""``lmms-egoplan``: the suite's own commands (the evaluations themselves run through ``lmms-eval``)."""

from __future__ import annotations

import argparse
import sys
import tempfile

from lmms_egoplan import suite
from lmms_egoplan.core.arguments import positive_int

# `lmms-egoplan --help`'s description: plain text, as a terminal shows it.
DESCRIPTION = "lmms-egoplan: the suite's own commands (the evaluations themselves run through lmms-eval)."
# Where the --judge_* options are described at length, as a path of the checkout (no path of this machine).
JUDGES_PAGE = "docs/judges.md (in the checkout; installed with the package as lmms_egoplan/docs/judges.md)"
# Where a run finds its settings file (core.settings_file), as --help says it (no path of this machine).
SETTINGS_FILE_DEFAULT = "the file LMMS_EGOPLAN_SETTINGS names, else ~/.config/lmms-egoplan/settings.yaml"


class _Parser(argparse.ArgumentParser):
    """An option spelled with hyphens where the command spells it with underscores (``--all-runs``, the suite's
    spelling before issue 57) is taken as that option; ``--help`` shows the underscore spelling only."""

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self._current_spellings(args), namespace)

    def _current_spellings(self, args: list[str]) -> list[str]:
        known, spelled = set(self._option_string_actions), []
        commands = next((action.choices for action in self._actions
                         if isinstance(action, argparse._SubParsersAction)), {})
        for position, arg in enumerate(args):
            if arg == "--":
                return spelled + args[position:]
            if isinstance(commands.get(arg), _Parser):  # the rest is the command's (whatever argparse's dispatch)
                return [*spelled, arg, *commands[arg]._current_spellings(args[position + 1:])]
            name, equals, value = arg.partition("=")
            current = "--" + name[2:].replace("-", "_")
            spelled.append(current + equals + value if name.startswith("--") and name not in known
                           and current in known else arg)
        return spelled


def _fail(command: str, message: str) -> int:
    """A usage or input error: one line naming what to fix, no traceback, exit status 2."""
    print(f"lmms-egoplan {command}: {message}", file=sys.stderr)
    return 2


def _literal(text: str) -> str:
    """A help text shown as written: argparse %-formats help strings ("95%" would break --help)."""
    return text.replace("%", "%%")


def _smoke(args: argparse.Namespace) -> int:
    from lmms_egoplan.core.files import make_folder
    from lmms_egoplan.demo.smoke import run_smoke

    workdir = make_folder(args.workdir, "--workdir") if args.workdir else tempfile.mkdtemp(prefix="lmms-egoplan-smoke-")
    return 1 if run_smoke(workdir, arch=args.arch, only=args.benchmark) else 0


def _report(args: argparse.Namespace) -> int:
    from lmms_egoplan.report import write_report

    report = write_report(args.results, args.output, suite.report_faces(), all_runs=args.all_runs)
    for line in report.lines:
        print(line)
    tables, figures = (sum(path.suffix == suffix for path in report.files) for suffix in (".csv", ".png"))
    print(f"Report: {report.markdown} (and {report.html.name}; beside them {tables} CSV "
          f"{'table' if tables == 1 else 'tables'} and {figures} {'figure' if figures == 1 else 'figures'}, PNG and "
          f"SVG)")
    return 0


def _judge_settings(args: argparse.Namespace, recorded: dict | None = None):
    """The judge settings the command line gives (``--judge_*``), over ``recorded`` (a run's judge); a value that
    does not fit is named as the user gave it: its option, else as the run recorded it."""
    import dataclasses
    import typing

    from lmms_egoplan.core.settings import SettingsError, coerce_setting, value_problems
    from lmms_egoplan.judge.settings import JudgeSettings

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(JudgeSettings) if hasattr(args, f.name)}
    types = typing.get_type_hints(JudgeSettings)

    def named(setting: str) -> str:
        return f"--{setting}" if setting in given else f"{setting} (as the run recorded it)"

    settings = JudgeSettings(**{name: coerce_setting(value, types[name], named(name))
                                for name, value in {**(recorded or {}), **given}.items()})
    if problems := value_problems(settings, named):
        raise SettingsError("; ".join(problems))
    return settings


def _rejudge(args: argparse.Namespace) -> int:
    from lmms_egoplan.core.files import make_folder
    from lmms_egoplan.core.text_tables import format_table, format_value
    from lmms_egoplan.harness.rejudge import answering_judge, read_logged_items, recorded_judge, rejudge_samples

    # First: a folder without samples says so before the key is asked for, an output that cannot be written before
    # the judge is.
    logged = read_logged_items(args.samples, suite.rubrics())
    make_folder(args.output, "--output")
    for problem in (problem for problems in logged.unusable.values() for problem in problems):
        print(f"lmms-egoplan rejudge: skipped {problem}", file=sys.stderr)
    # Each task with the judge its run recorded, but for the settings given here.
    settings = {task: _judge_settings(args, recorded_judge(logged, task)) for task in logged.columns}
    judges = {each: answering_judge(each) for each in dict.fromkeys(settings.values())}
    scores = rejudge_samples(logged, {task: judges[each] for task, each in settings.items()}, args.output,
                             group_scores=suite.group_scores, settings=settings)
    rows = [(task, metric, format_value(value)) for task, row in scores.items()
            for metric, value in row.items() if isinstance(value, (int, float)) or value is None]
    print(format_table(("task", "metric", "value"), rows))
    print(f"Judge: {', '.join(judge.model for judge in judges.values())}; audit trails and scores in {args.output}")
    unusable = sum(len(rows) for rows in logged.unusable.values())
    if unusable:
        print(f"lmms-egoplan rejudge: {unusable} logged rows could not be used (each named above: file:line); "
              f"the scores cover the others", file=sys.stderr)
    failed = {task: scores[task].get("failed", 0) for task in logged.columns if scores[task].get("failed", 0)}
    status = max((settings[task].judge_failed_exit_status for task in failed), default=0)
    if failed and status:
        cached = ("the others come from the judge cache" if all(settings[task].judge_cache_dir for task in failed)
                  else "with --judge_cache_dir none every judgement is asked again")
        print(f"lmms-egoplan rejudge: {sum(failed.values())} judgements failed and are left out of the scores; run "
              f"the same command again to ask for them ({cached})", file=sys.stderr)
        return status
    return 0


def _judge_agreement(args: argparse.Namespace) -> int:
    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.core.files import make_folder
    from lmms_egoplan.harness.agreement import agreements, second_opinions
    from lmms_egoplan.harness.rejudge import answering_judge, read_logged_items, recorded_judge
    from lmms_egoplan.judge.agreement import most_disagreed
    from lmms_egoplan.report.agreement import agreement_table, disagreement_lines, write_agreement

    logged = read_logged_items(args.samples, suite.rubrics())
    output = make_folder(args.output, "--output")  # before the second judge is asked
    for problem in (problem for problems in logged.unusable.values() for problem in problems):
        print(f"lmms-egoplan judge-agreement: skipped {problem}", file=sys.stderr)
    first = " / ".join(dict.fromkeys(f"{judge.get('judge_backend', 'openai')}:{judge['judge_model']}"
                                     if judge.get("judge_model") else "not recorded"
                                     for judge in map(lambda task: recorded_judge(logged, task), logged.columns)))
    # The second judge's answers go to a cache of its own (the run's cache and audit trails are only read).
    settings = _judge_settings(args, {"judge_cache_dir": str(output / "judge-cache")})
    judge = answering_judge(settings)
    found = second_opinions(logged, judge, output)
    if all(pair.fixed for pair in found.pairs):  # none, or only answers scored without a judge
        raise InputError(f"no answer in {', '.join(map(str, args.samples))} was rated by both judges "
                         f"({found.first_failed} without a rating of the run's judge, {found.second_failed} without "
                         f"one of {judge.model})")
    rows, disagreed = agreements(found), most_disagreed(found.pairs, args.top)
    files = write_agreement(rows, disagreed, first, judge.model, output)
    print(agreement_table(rows, first, judge.model))
    print(f"The {len(disagreed)} answers the two judges disagree on most (rating by the run's judge vs the second; the "
          f"answer judged):", *disagreement_lines(disagreed), sep="\n")
    print(f"Left out: {found.first_failed} answers without a rating of the run's judge, {found.second_failed} without "
          f"one of the second judge. Written: {', '.join(path.name for path in files)}; the second judge's audit "
          f"trails and cache ({settings.judge_cache_dir}) in {output}")
    if found.second_failed and settings.judge_failed_exit_status:
        print(f"lmms-egoplan judge-agreement: {found.second_failed} judgements of the second judge failed and are "
              f"left out; run the same command again to ask for them (the others come from its cache)", file=sys.stderr)
        return settings.judge_failed_exit_status
    return 0


def _prepared_benchmarks(names: list[str]) -> list:
    """The benchmarks ``names`` (``all``: every one that declares its data), each once, in the suite's order."""
    known = [entry for entry in suite.BENCHMARKS if entry.data is not None]
    chosen = {entry.name for entry in known} if "all" in names else set(names)
    return [entry for entry in known if entry.name in chosen]


def _settings_file_to_write(args: argparse.Namespace):
    from pathlib import Path

    from lmms_egoplan.core.settings_file import default_settings_path, settings_path

    return Path(args.settings).expanduser() if args.settings else settings_path() or default_settings_path()


def _prepare(args: argparse.Namespace) -> int:
    import dataclasses
    from pathlib import Path

    from lmms_egoplan.core.files import make_folder, output_file
    from lmms_egoplan.harness.data_preparation import prepare
    from lmms_egoplan.judge.settings import JudgeSettings

    given = [f.name for f in dataclasses.fields(JudgeSettings) if hasattr(args, f.name)]
    checked = _judge_settings(args)  # a judge setting of the wrong type stops here, naming it
    judge = {name: str(value) if isinstance(value, Path) else value  # as the YAML writes it
             for name, value in ((name, getattr(checked, name)) for name in given)}
    # Both folders before anything is fetched: what is fetched goes in one, the settings file that points at it in
    # the other.
    settings_file = output_file(_settings_file_to_write(args), "--settings")
    done = prepare(_prepared_benchmarks(args.benchmark), make_folder(Path(args.root).expanduser(), "--root"),
                   settings_file, judge=judge)
    failed = [repo for each in done for repo in each.failed]
    if failed:
        print(f"lmms-egoplan prepare: {', '.join(failed)} could not be fetched (said above); run the same command "
              f"again once that is fixed: it keeps what was fetched", file=sys.stderr)
    return 1 if failed else 0


def _check_data(args: argparse.Namespace) -> int:
    from pathlib import Path

    from loguru import logger

    from lmms_egoplan.core.files import output_file
    from lmms_egoplan.core.settings_file import read_settings_file, run_settings_file, settings_source
    from lmms_egoplan.harness.data_check import check_benchmark, check_report_path, write_check_report

    logger.remove()  # the loaders' notes on what they read and skip: the summary and the report say it all
    logger.add(sys.stderr, level="ERROR")

    names = [entry.name for entry in suite.BENCHMARKS]
    settings_file = (read_settings_file(Path(args.settings).expanduser(), names) if args.settings
                     else run_settings_file(names))
    # before the data are read, which can take long
    report = (output_file(args.output, "--output") if args.output
              else output_file(check_report_path(settings_file), "the check report's file (--output)"))
    print(f"Reading the data as a run would, with {settings_source(settings_file)}", flush=True)
    checks = []
    for entry in _prepared_benchmarks(args.benchmark or ["all"]):
        checks.append(check_benchmark(entry, settings_file))
        print(checks[-1].summary(), flush=True)
    report = write_check_report(report, checks, settings_file)
    incomplete = [check.name for check in checks if not check.complete]
    print(f"Everything found missing, one item a line: {report}")
    if incomplete:
        print(f"lmms-egoplan check-data: incomplete: {', '.join(incomplete)}", file=sys.stderr)
    return 1 if incomplete else 0


def _data_benchmark_choices() -> list[str]:
    return [entry.name for entry in suite.BENCHMARKS if entry.data is not None]


def _data_benchmark(name: str) -> str:
    if name not in [*_data_benchmark_choices(), "all"]:
        raise argparse.ArgumentTypeError(f"invalid choice: {name!r} (choose from "
                                         f"{', '.join(map(repr, [*_data_benchmark_choices(), 'all']))})")
    return name


def _prepare_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("benchmark", nargs="+", choices=[*_data_benchmark_choices(), "all"], metavar="BENCHMARK",
                         help=f"{', '.join(_data_benchmark_choices())}, or all")
    command.add_argument("--root", required=True, help="the folder the data goes in, one folder per benchmark")
    command.add_argument("--settings", help=f"the settings file to write (default: {SETTINGS_FILE_DEFAULT})")
    _judge_options(command, "not written: a run takes its task's, ")
    command.set_defaults(handler=_prepare)


def _check_data_arguments(command: argparse.ArgumentParser) -> None:
    # No choices=: argparse (3.11) checks an empty list against them; each name is checked by its type instead.
    command.add_argument("benchmark", nargs="*", type=_data_benchmark, metavar="BENCHMARK",
                         help=f"{', '.join(_data_benchmark_choices())}, or all (default: all)")
    command.add_argument("--settings", help=f"the settings file to read (default: {SETTINGS_FILE_DEFAULT})")
    command.add_argument("--output", help="the file everything found missing is written to (default: "
                                          "lmms-egoplan-check-data.txt in the folder prepare put the data in, else "
                                          "beside the settings file, else in the temporary folder)")
    command.set_defaults(handler=_check_data)


def _smoke_arguments(smoke: argparse.ArgumentParser) -> None:
    from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES
    from lmms_egoplan.demo.smoke import DEFAULT_ARCH

    smoke.add_argument("--workdir", help="where fixtures, checkpoints and logs go (default: a new temp folder)")
    smoke.add_argument("--arch", default=DEFAULT_ARCH, choices=ARCHITECTURES, metavar="ARCH",
                       help=f"tiny checkpoint architecture: {', '.join(ARCHITECTURES)} (default: {DEFAULT_ARCH}); a "
                            f"text-only one runs the text-only baselines through lm-eval and says what it leaves out")
    smoke.add_argument("--benchmark", action="append", choices=[entry.name for entry in suite.BENCHMARKS],
                       help="run only this benchmark's tasks (repeatable; default: all)")
    smoke.set_defaults(handler=_smoke)


def _judge_options(command: argparse.ArgumentParser, defaults: str, **own_defaults: str) -> None:
    """The ``--judge_*`` settings (docs/judges.md), each with what it does; ``defaults``: where a setting not given
    comes from, before the suite's default (``own_defaults``: the command's own, by setting)."""
    import dataclasses

    from lmms_egoplan.judge.settings import SETTING_HELP, JudgeSettings

    command.description = (f"{command.description.rstrip('.')}. The --judge_* options set the judge; {JUDGES_PAGE} "
                           f"describes them.")
    for setting in dataclasses.fields(JudgeSettings):
        shown = "empty" if setting.default == "" else setting.default
        default = own_defaults.get(setting.name, f"{defaults}{shown}")
        command.add_argument(f"--{setting.name}", default=argparse.SUPPRESS,
                             help=_literal(f"{SETTING_HELP[setting.name]} (default: {default})"))


def _rejudge_arguments(rejudge: argparse.ArgumentParser) -> None:
    rejudge.add_argument("samples", nargs="+",
                         help="samples files (<date>_samples_<task>.jsonl) or folders holding them")
    rejudge.add_argument("--output", required=True, help="folder for the new audit trails and scores")
    _judge_options(rejudge, "the run's, as its results file records it, else ")
    rejudge.set_defaults(handler=_rejudge)


def _judge_agreement_arguments(agreement: argparse.ArgumentParser) -> None:
    agreement.add_argument("samples", nargs="+", help="a finished run's samples files (<date>_samples_<task>.jsonl, "
                                                      "its audit trails <date>_judgements_<task>.jsonl beside them) or "
                                                      "folders holding them")
    agreement.add_argument("--output", required=True,
                           help="folder for the tables, the figure, the second judge's audit trails and its cache "
                                "(judge-cache/, unless --judge_cache_dir)")
    agreement.add_argument("--top", type=positive_int, default=10,
                           help="how many of the answers the judges disagree on most to list (default: 10)")
    _judge_options(agreement, "", judge_cache_dir="<output>/judge-cache, a cache of its own")
    agreement.set_defaults(handler=_judge_agreement)


def _report_arguments(report: argparse.ArgumentParser) -> None:
    report.add_argument("results", nargs="+", help="results files or folders holding them, at any depth "
                                                   "(lmms-eval <date>_results.json, lm-eval results_<date-time>.json; "
                                                   "rejudge's <date>_rejudged.json in place of the judged scores of "
                                                   "the run it names)")
    report.add_argument("--output", required=True, help="folder for report.md, report.html, the CSVs and figures")
    report.add_argument("--all_runs", action="store_true",
                        help="every run of a model and task (default: the latest)")
    report.set_defaults(handler=_report)


# name -> (help, how to add its arguments): the suite's, then the benchmarks' (suite.commands).
# Only the command being run gets its arguments (and imports what they need), so that
# `lmms-egoplan --help` answers at once.
COMMANDS = {
    "smoke": ("offline demo: every task through lmms-eval on a tiny random model and synthetic data, then the "
              "generative ones with scripted answers whose every value is checked", _smoke_arguments),
    "report": ("the results in each paper's table layout beside the published rows, with 95% intervals, "
               "breakdown figures and one HTML page", _report_arguments),
    "rejudge": ("re-score logged model outputs (lmms-eval --log_samples files) with the run's judge or another, "
                "without running the model", _rejudge_arguments),
    "judge-agreement": ("rate a finished run's answers with a second judge and measure how far the two agree (scores "
                        "with 95% intervals, exact agreement, weighted kappa, the answers they disagree on most)",
                        _judge_agreement_arguments),
    "prepare": ("fetch each benchmark's data that needs no licence (its authors' Hub datasets), list what needs one "
                "or an external tool with the exact commands, and write the settings file a run reads",
                _prepare_arguments),
    "check-data": ("check, with no model, that each benchmark's data is complete as a run reads it: record counts, "
                   "every media file readable, clips long enough", _check_data_arguments),
    **suite.commands(),
}


def versions() -> str:
    """The suite's version and those of the harnesses and libraries that decide its numbers."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    others = ", ".join(f"{name} {installed(name)}" for name in ("lmms-eval", "lm-eval", "transformers", "torch"))
    return f"lmms-egoplan {installed('lmms-egoplan')} ({others})"


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names gets its arguments (all of them without)."""
    requested = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    parser = _Parser(prog="lmms-egoplan", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=versions())
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_arguments) in COMMANDS.items():
        command = commands.add_parser(name, help=_literal(help_text), description=help_text)
        if argv is None or name == requested:
            add_arguments(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    from lmms_egoplan.core.errors import InputError, StorageError

    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return args.handler(args)
    except (InputError, FileNotFoundError) as error:  # bad data, settings or paths: what to fix, no traceback
        return _fail(args.command, str(error))
    except StorageError as error:  # a full disk: what was not written, where, what is kept
        print(f"lmms-egoplan {args.command}: {error}", file=sys.stderr)
        return 1
    except (PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as error:
        # a path that cannot be read or written where a command found it: which, and why (no traceback)
        return _fail(args.command, f"{error.filename}: {error.strerror}" if error.filename else str(error))


if __name__ == "__main__":
    sys.exit(main())
