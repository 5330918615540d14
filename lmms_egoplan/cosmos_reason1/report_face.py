"""Cosmos-Reason1 in ``lmms-egoplan report`` and the demo's table, in the layout of the paper's tables (arXiv
2503.15558: the embodied-reasoning table, a column per source, and the physical-common-sense table, a column per
category): per source and category the official parser's accuracy with its 95 % interval (exact binomial, from the
logged samples), the embodied-reasoning and common-sense means both macro (the paper's) and micro (the PAI-Bench
leaderboard's), the five-source macro without AV (MiMo-Embodied's report's), the overall micro mean, each with its
95 % interval from its parts' logged samples (micro: exact binomial over the pooled questions; macro: stratified
bootstrap); the robust reading and the answers the two read differently beside them. The columns in the paper's order
(Table 8's sources, Table 7's categories); report.html shows the embodied-reasoning macro mean, the score model
reports publish, beside the model's name."""

from __future__ import annotations

from lmms_egoplan.cosmos_reason1.data import CS_CATEGORIES, ER_SOURCES
from lmms_egoplan.cosmos_reason1.settings import CosmosReason1Settings
from lmms_egoplan.cosmos_reason1.sources import task_of
from lmms_egoplan.report.layout import (
    GENERATIVE,
    MACRO,
    MICRO,
    Column,
    GroupMean,
    ReportFace,
    TableLayout,
    count_column,
    protocol_defaults,
    published_rows,
)
from lmms_egoplan.report.metric_roles import PERCENT

# The paper's column orders (arXiv 2503.15558, Table 8: the sources; Table 7: the categories, which
# CS_CATEGORIES already follows); ER_SOURCES stays alphabetical for the code that iterates it.
PAPER_SOURCES = ("bridgev2", "robovqa", "agibot", "holoassist", "av", "robofail")

_TITLES = {"av": "AV", "agibot": "AgiBot", "bridgev2": "BridgeData V2", "holoassist": "HoloAssist",
           "robofail": "RoboFail", "robovqa": "RoboVQA", "space": "Space", "time": "Time",
           "other_physics": "Other physics"}


def _part_column(part: str) -> Column:
    return Column(_TITLES[part], "accuracy_official", task=task_of(part), published=f"accuracy_{part}",
                  proportion=True)


# Each group's parts (lmms-eval averages the nested cosmos_reason1 over its nine parts).
_GROUP_PARTS = {"cosmos_reason1_er": ER_SOURCES, "cosmos_reason1_cs": CS_CATEGORIES,
                "cosmos_reason1": (*ER_SOURCES, *CS_CATEGORIES)}


def _mean_column(header: str, metric: str, group: str, published: str) -> Column:
    """A group's mean of 0 / 1 per question: ``micro_*`` over its parts' questions pooled, the others (``accuracy_*``,
    ``no_av_*``, the parts that report it) of its parts' accuracies; its 95 % interval from its parts' logged samples
    (``report.intervals.group_interval``)."""
    weighting = MICRO if metric.startswith("micro_") else MACRO
    return Column(header, metric, task=group, published=published, proportion=True,
                  group_mean=GroupMean(tuple(map(task_of, _GROUP_PARTS[group])), weighting))


FACE = ReportFace(
    tables=(
        TableLayout("cosmos_reason1", "Cosmos-Reason1: accuracy (%), official parser",
                    "the paper's embodied-reasoning and physical-common-sense tables (arXiv 2503.15558)",
                    {"cosmos_reason1": "video, the prompt COSMOS_REASON1_PROMPT sets (notes: any departure)"},
                    (*(_part_column(part) for part in PAPER_SOURCES),
                     _mean_column("ER macro", "accuracy_official", "cosmos_reason1_er", "er_macro"),
                     _mean_column("ER micro", "micro_official", "cosmos_reason1_er", "er_micro"),
                     _mean_column("ER macro without AV", "no_av_official", "cosmos_reason1_er", "er_no_av_macro"),
                     *(_part_column(part) for part in CS_CATEGORIES),
                     _mean_column("CS macro", "accuracy_official", "cosmos_reason1_cs", "cs_macro"),
                     _mean_column("CS micro", "micro_official", "cosmos_reason1_cs", "cs_micro"),
                     _mean_column("Overall micro", "micro_official", "cosmos_reason1", "overall_micro"),
                     _mean_column("Overall micro, robust parser", "micro_robust", "cosmos_reason1",
                                  "overall_micro_robust"),
                     # published only: reports that print one "Cosmos" value without saying which mean it is
                     Column("Cosmos, mean not stated", "unstated_mean", task="cosmos_reason1", interval=False),
                     count_column("Read differently", "disagreements"),
                     count_column("Unparseable, official parser", "unparseable_official"),
                     count_column("Unparseable, robust parser", "unparseable_robust"),
                     count_column("Samples", "predictions")),
                    notes=("ER macro is the paper's mean over the six sources, ER micro the PAI-Bench leaderboard's "
                           "mean over questions; BridgeData V2's clips rebuilt before nvidia-cosmos/cosmos-reason1 "
                           "f8ec02d do not match their questions (tasks/cosmos_reason1/README.md, Fidelity)",
                           "A published row fills the columns of its source's averaging only (the paper: macro; the "
                           "PAI-Bench leaderboard: micro; MiMo-Embodied: the five sources without AV), with its "
                           "own prompt and decoding (its notes); one that prints a single 'Cosmos' value without "
                           "saying which mean it is (Hy-Embodied-VLM-1.0's README, PhysBrain 1.5's page) fills "
                           "'Cosmos, mean not stated', which no run fills",
                           "The paper's per-source values are means over runs or over fewer questions than the release "
                           "holds (not whole percents on sources of 100 questions: AgiBot 49.4, AV 55.6); a run here "
                           "is one run over the questions it read"),
                    main="ER macro", scoring={"cosmos_reason1": GENERATIVE}),
    ),
    published=published_rows(__package__),
    protocol=protocol_defaults(CosmosReason1Settings, ("data_source", "prompt", "robovqa_items", "fps", "max_frames",
                                                       "max_retries", "frame_timing", "frame_pixels")),
    # means of 0 / 1 per question, as the accuracies; a published mean that does not say which, in percent as printed
    units=(("micro_*", PERCENT), ("no_av_*", PERCENT), ("unstated_mean", PERCENT)),
    bookkeeping=("unparseable_official", "unparseable_robust", "disagreements"),
)
