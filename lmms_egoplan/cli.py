"""``lmms-egoplan``: the suite's own commands (the evaluations themselves run through ``lmms-eval``)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def _fail(command: str, message: str) -> int:
    """A usage or input error: one line naming what to fix, no traceback, exit status 2."""
    print(f"lmms-egoplan {command}: {message}", file=sys.stderr)
    return 2


def _smoke(args: argparse.Namespace) -> int:
    from lmms_egoplan.smoke import run_smoke

    workdir = args.workdir or tempfile.mkdtemp(prefix="lmms-egoplan-smoke-")
    return 1 if run_smoke(workdir, arch=args.arch, only=args.benchmark) else 0


def _rejudge(args: argparse.Namespace) -> int:
    import dataclasses

    from lmms_egoplan.harness import resolve_settings
    from lmms_egoplan.judge import Judge, JudgeSettings
    from lmms_egoplan.judged_task import rejudge_samples
    from lmms_egoplan.smoke import format_table, format_value

    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(JudgeSettings) if hasattr(args, f.name)}
    settings = resolve_settings(JudgeSettings, task="rejudge", metadata=given, env_prefix="", environ={})
    scores = rejudge_samples(args.samples, Judge.from_settings(settings), args.output)
    print(format_table([(task, metric, format_value(value)) for task, row in scores.items()
                        for metric, value in row.items() if isinstance(value, (int, float))]))
    print(f"Judge: {settings.judge_backend}:{settings.judge_model}; audit trails and scores in {args.output}")
    return 0


def _egointent_check(args: argparse.Namespace) -> int:
    from lmms_egoplan.egointent import EgoIntentSettings, describe_steps, load_steps, step_docs

    settings = EgoIntentSettings(annotations=args.annotations, video_root=args.video_root,
                                 sample_fps=args.sample_fps, max_frames=args.max_frames)
    settings.check_sampling(name=lambda field: "--" + field.replace("_", "-"))
    docs = step_docs(load_steps(settings.annotations, settings.video_root), settings)
    print(describe_steps(docs, settings))
    return 0


def _actplan_score(args: argparse.Namespace) -> int:
    import json

    from lmms_egoplan import actplan
    from lmms_egoplan.metrics import step_matcher

    if not args.data_root and not args.pairs:
        return _fail("actplan-score", "give --data-root (release layout) and/or --pairs (JSONL)")
    if args.pairs and args.gold not in actplan.GOLD_CHOICES:
        return _fail("actplan-score", f"--gold {args.gold} names a release file; with --pairs use first or best")
    plans, notes = [], []
    if args.data_root:
        plans, notes = actplan.candidates_from_release(args.data_root, args.model, gold=args.gold, steps=args.steps)
    for path in args.pairs or []:
        plans += actplan.candidates_from_jsonl(path, steps=args.steps)
    if not plans:
        return _fail("actplan-score", "no plans to score" + "".join(f"\n  {note}" for note in notes))
    matcher = step_matcher(args.embedding_model, threshold=args.threshold, device=args.device, batch_size=args.batch_size)
    scores = actplan.score_lcs([(p.prediction, p.gold) for p in plans], matcher,
                               args.gold if args.gold in actplan.GOLD_CHOICES else "first")
    print(actplan.format_summary(actplan.summarize(plans, scores)))
    for note in notes:
        print(f"note: {note}")
    if args.output:
        with open(args.output, "w") as out:
            for plan, score in zip(plans, scores):
                out.write(json.dumps({"model": plan.model, "instance_id": plan.instance_id, "split": plan.split,
                                      "lcs": score.lcs, "norm_lcs": score.norm_lcs, "gold_index": score.gold_index,
                                      "prediction_steps": len(plan.prediction), "format_errors": plan.parsed.format_errors,
                                      "plan_lines": plan.parsed.plan_lines}) + "\n")
    return 0


def _actplan_train_bleurt(args: argparse.Namespace) -> int:
    from lmms_egoplan import bleurt

    if args.preset not in bleurt.PRESET_LEARNING_RATES:
        return _fail("actplan-train-bleurt", f"--preset must be one of {', '.join(bleurt.PRESET_LEARNING_RATES)}")
    config = bleurt.TrainingConfig(
        learning_rate=args.learning_rate or bleurt.PRESET_LEARNING_RATES[args.preset], batch_size=args.batch_size,
        epochs=args.epochs, max_length=args.max_length, select_by=args.select_by, seed=args.seed)
    report = bleurt.train_classifier(args.data, args.activities, args.base, args.output, config, device=args.device)
    print(bleurt.format_report(report))
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

    score = commands.add_parser(
        "actplan-score", help="ActPlan-1K: LCS / normalised LCS of plans against gold plans, per model and split",
        description="Score plans outside the harness: the VLM plans shipped in the ActPlan-1K release "
                    "(plan_<model>.txt beside the gold plans), the release's auto_lcs pair files, or the "
                    "<task>_plans.jsonl files written next to lmms-eval results.")
    score.add_argument("--data-root", help="release folder (holding annotation/): score its plan_<model>.txt files")
    score.add_argument("--model", action="append", help="with --data-root: model name of plan_<model>.txt (repeatable; default: all)")
    score.add_argument("--pairs", action="append", metavar="JSONL",
                       help="rows with 'candidate' and 'reference' (or 'references') texts (repeatable)")
    score.add_argument("--gold", default="first",
                       help="first (default, as the paper), best, or a release gold file name such as plan_gold_2.txt")
    score.add_argument("--steps", choices=("parsed", "lines"), default="parsed",
                       help="parsed: action(args) steps of the plan (default); lines: the release's text.split('\\n'), "
                            "trailing empty line included, to reproduce its numbers exactly")
    score.add_argument("--threshold", type=float, default=0.8, help="cosine similarity for two steps to match (default 0.8)")
    score.add_argument("--embedding-model", help="sentence-transformers folder (default: bundled all-MiniLM-L6-v2)")
    score.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    score.add_argument("--batch-size", type=int, default=256, help="embedding batch size")
    score.add_argument("--output", help="write per-plan values to this JSONL file")
    score.set_defaults(handler=_actplan_score)

    train = commands.add_parser(
        "actplan-train-bleurt", help="ActPlan-1K: fine-tune the BLEURT plan classifier (paper §4.2.2, Table 5)")
    train.add_argument("--data", required=True, help="the release's bleu-cls/data/finetuning_data.jsonl")
    train.add_argument("--activities", required=True, help="the release's bleu-cls/data/activities.txt (train/val/test)")
    train.add_argument("--base", required=True, help="BLEURT checkpoint folder to start from (PyTorch, BERT-based)")
    train.add_argument("--output", required=True, help="folder for the best checkpoint, training_log.jsonl, metrics.json")
    train.add_argument("--preset", default="bleurt",
                       help="learning rate as the paper: bleurt (BERT-large, default) 5e-6, bleurt-base 1e-6")
    train.add_argument("--learning-rate", type=float, help="overrides the preset's learning rate")
    train.add_argument("--batch-size", type=int, default=12)
    train.add_argument("--epochs", type=int, default=70)
    train.add_argument("--max-length", type=int, default=512, help="tokens per pair (release: 512)")
    train.add_argument("--select-by", choices=("accuracy", "loss"), default="accuracy",
                       help="keep the epoch with the best validation accuracy (paper) or loss (release code)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto", help="cpu, cuda or auto (default)")
    train.set_defaults(handler=_actplan_train_bleurt)
    return parser


def main(argv: list[str] | None = None) -> int:
    from lmms_egoplan.errors import InputError

    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (InputError, FileNotFoundError) as error:  # bad data, settings or paths: what to fix, no traceback
        return _fail(args.command, str(error))


if __name__ == "__main__":
    sys.exit(main())
