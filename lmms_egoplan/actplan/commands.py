"""ActPlan-1K's ``lmms-egoplan`` commands (``COMMANDS``, merged into the CLI through the registry):
``actplan-score`` (LCS scoring outside the harness) and ``actplan-train-bleurt`` (the BLEURT plan
classifier). What a command needs beyond argparse is imported when it runs, so that ``--help``
answers at once."""

from __future__ import annotations

import argparse

from lmms_egoplan.core.arguments import allow_paths_outside_root_argument, positive_int, torch_device
from lmms_egoplan.core.errors import InputError


def _match_threshold(text: str) -> float:
    from lmms_egoplan.actplan.data import match_threshold_problem

    try:
        threshold = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if problem := match_threshold_problem(threshold):
        raise argparse.ArgumentTypeError(problem)
    return threshold


def _score(args: argparse.Namespace) -> int:
    from lmms_egoplan.actplan import plans as actplan_plans
    from lmms_egoplan.actplan.lcs import StepMatcher
    from lmms_egoplan.core.embeddings import SentenceEncoder
    from lmms_egoplan.core.files import output_file, strict_json, write_atomically

    if not args.data_root and not args.pairs:
        raise InputError("give --data_root (release layout) and/or --pairs (JSONL)")
    if args.pairs and args.gold not in actplan_plans.GOLD_CHOICES:
        raise InputError(f"--gold {args.gold} picks a release gold file; with --pairs use first or best")
    if args.model and not args.data_root:
        raise InputError("--model picks the release's plan_<model>.txt files: it needs --data_root (a --pairs file's "
                         "plans are all scored)")
    if args.output:  # before the plans are scored, which can take long
        output_file(args.output, "--output")
    plans, notes = [], []
    if args.data_root:
        plans, notes = actplan_plans.candidates_from_release(args.data_root, args.model, gold=args.gold,
                                                             steps=args.steps,
                                                             allow_outside=args.allow_paths_outside_root)
    for path in args.pairs or []:
        plans += actplan_plans.candidates_from_jsonl(path, steps=args.steps)
    if not plans:
        raise InputError("no plans to score" + "".join(f"\n  {note}" for note in notes))
    encoder = SentenceEncoder(args.embedding_model, device=args.device, runs="ActPlan-1K's step matcher")
    matcher = StepMatcher(encoder, threshold=args.threshold, batch_size=args.batch_size)
    scores = actplan_plans.score_lcs([(p.prediction, p.gold) for p in plans], matcher,
                                     args.gold if args.gold in actplan_plans.GOLD_CHOICES else "first")
    print(actplan_plans.format_summary(actplan_plans.summarize(plans, scores)))
    for note in notes:
        print(f"note: {note}")
    if args.output:
        write_atomically(args.output, "".join(strict_json({
            "model": plan.model, "instance_id": plan.instance_id, "split": plan.split, "lcs": score.lcs,
            "norm_lcs": score.norm_lcs, "gold_index": score.gold_index, "prediction_steps": len(plan.prediction),
            "format_errors": plan.parsed.format_errors, "plan_lines": plan.parsed.plan_lines}) + "\n"
            for plan, score in zip(plans, scores)))
    return 0


def _train_bleurt(args: argparse.Namespace) -> int:
    from lmms_egoplan.actplan import classifier as bleurt
    from lmms_egoplan.actplan.classifier_config import PRESET_LEARNING_RATES, TrainingConfig

    config = TrainingConfig(
        learning_rate=PRESET_LEARNING_RATES[args.preset] if args.learning_rate is None else args.learning_rate,
        batch_size=args.batch_size,
        epochs=args.epochs, max_length=args.max_length, select_by=args.select_by, seed=args.seed)
    report = bleurt.train_classifier(args.data, args.activities, args.base, args.output, config, device=args.device)
    print(bleurt.format_report(report))
    return 0


def _score_arguments(score: argparse.ArgumentParser) -> None:
    from lmms_egoplan.actplan import lcs as actplan_lcs
    from lmms_egoplan.actplan import plans as actplan_plans

    score.description = ("Score plans outside the harness: the VLM plans shipped in the ActPlan-1K release "
                         "(plan_<model>.txt beside the gold plans), the release's auto_lcs pair files, or the "
                         "plans files (<date-time>_plans_<task>.jsonl) that ActPlan-1K runs write beside "
                         "their results.")
    score.add_argument("--data_root", help="release folder (holding annotation/): score its plan_<model>.txt files")
    score.add_argument("--model", action="append",
                       help="with --data_root: model name of plan_<model>.txt (repeatable; default: all)")
    score.add_argument("--pairs", action="append", metavar="JSONL",
                       help="rows with 'candidate' and 'reference' (or 'references') texts (repeatable)")
    score.add_argument("--gold", default=actplan_plans.GOLD_CHOICES[0],
                       help="first (default), best, a release gold file name such as plan_gold_2.txt, or "
                            f"{actplan_plans.RELEASE_PAIRING}: Gemini plans against plan_gold_2.txt, the "
                            f"others against "
                            "plan_gold_1.txt, as the release's auto_lcs/readme.md")
    score.add_argument("--steps", choices=actplan_plans.STEP_MODES, default=actplan_plans.STEP_MODES[0],
                       help="parsed: action(args) steps of the plan (default); lines: the release's text.split('\\n'), "
                            "trailing empty line included, to reproduce its numbers exactly")
    score.add_argument("--threshold", type=_match_threshold, default=actplan_lcs.DEFAULT_MATCH_THRESHOLD,
                       help=f"cosine similarity for two steps to match, in (0, 1] (default "
                            f"{actplan_lcs.DEFAULT_MATCH_THRESHOLD})")
    score.add_argument("--embedding_model",
                       help="the step matcher's sentence-transformers model folder (default: bundled all-MiniLM-L6-v2)")
    score.add_argument("--device", default="cpu", type=torch_device,
                       help="where the step matcher runs: cpu, cuda or auto (default cpu)")
    score.add_argument("--batch_size", type=positive_int, default=actplan_lcs.DEFAULT_EMBEDDING_BATCH_SIZE,
                       help=f"plan steps embedded per batch (default {actplan_lcs.DEFAULT_EMBEDDING_BATCH_SIZE})")
    score.add_argument("--output", help="write per-plan values to this JSONL file")
    allow_paths_outside_root_argument(score, "instance files")
    score.set_defaults(handler=_score)


def _train_bleurt_arguments(train: argparse.ArgumentParser) -> None:
    from lmms_egoplan.actplan import classifier_config as bleurt

    train.add_argument("--data", required=True,
                       help="the labelled plan pairs: the release's bleu-cls/data/finetuning_data.jsonl")
    train.add_argument("--activities", required=True,
                       help="which activities each split holds: the release's bleu-cls/data/activities.txt "
                            "(train/val/test)")
    train.add_argument("--base", required=True, help="BLEURT checkpoint folder to start from (PyTorch, BERT-based)")
    train.add_argument("--output", required=True,
                       help="folder for the best checkpoint, training_log.jsonl, metrics.json")
    presets = ", ".join(f"{name} {rate:g}" for name, rate in bleurt.PRESET_LEARNING_RATES.items())
    train.add_argument("--preset", choices=bleurt.PRESET_LEARNING_RATES, default=bleurt.DEFAULT_PRESET,
                       help=f"learning rate as the paper: {presets} (default {bleurt.DEFAULT_PRESET}, for "
                            f"BERT-large BLEURT)")
    train.add_argument("--learning_rate", type=float, help="overrides the preset's learning rate")
    defaults = bleurt.TrainingConfig()
    train.add_argument("--batch_size", type=int, default=defaults.batch_size,
                       help=f"training pairs per optimizer step (default {defaults.batch_size})")
    train.add_argument("--epochs", type=int, default=defaults.epochs,
                       help=f"passes over the training pairs (default {defaults.epochs})")
    train.add_argument("--max_length", type=int, default=defaults.max_length,
                       help=f"the most tokens of a plan pair, cut longest-first (default {defaults.max_length}, as the "
                            f"release)")
    train.add_argument("--select_by", choices=bleurt.SELECTION_CRITERIA, default=defaults.select_by,
                       help="keep the epoch with the best validation accuracy (paper, default) or loss (release code)")
    train.add_argument("--seed", type=int, default=defaults.seed,
                       help=f"random seed of the initialisation and the shuffling (default {defaults.seed})")
    train.add_argument("--device", default="auto", type=torch_device,
                       help="where the classifier trains: cpu, cuda or auto (default)")
    train.set_defaults(handler=_train_bleurt)


# name -> (help, how to add its arguments), as lmms_egoplan.cli.COMMANDS
COMMANDS = {
    "actplan-score": ("ActPlan-1K: LCS / normalised LCS of plans against gold plans, per model and split",
                      _score_arguments),
    "actplan-train-bleurt": ("ActPlan-1K: fine-tune the BLEURT plan classifier (paper §4.2.2, Table 5)",
                             _train_bleurt_arguments),
}
