"""RoboVQA in ``lmms-egoplan report`` and the demo's table: per question type the suite's default score (yes / no
accuracy for the binary types, smoothed sentence BLEU for the others, 0-100) with its 95 % interval from the logged
samples, the macro and micro means over the types, and beside them each lineage preset's overall value (micro, as
the lineages average); a run fills the columns of the protocol it ran (the row's notes name a preset other than the
default). Published rows: MiMo-Embodied's Table 2, its starred rows in the MiMo lineage's column, RoboMamba's Table 1
in the RoboMamba lineage's, and the rows whose source names no scorer (MiMo's unstarred ones, PhysBrain 1.5's,
ACE-Brain-0's, ThinkAct's and Fast-ThinkAct's) in a column of their own that no run fills (tasks/robovqa/README.md,
Published results)."""

from __future__ import annotations

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
from lmms_egoplan.report.metric_roles import PERCENT, SCORE_0_100
from lmms_egoplan.robovqa.data import BINARY_TYPES, QUESTION_TYPES
from lmms_egoplan.robovqa.settings import RoboVQASettings
from lmms_egoplan.robovqa.sources import task_of

_TASKS = tuple(task_of(kind) for kind in QUESTION_TYPES)

FACE = ReportFace(
    tables=(
        TableLayout("robovqa", "RoboVQA: the protocol's scores", "per question type (the official tags)",
                    {"robovqa": "frames, prompt, decoding and scorer of ROBOVQA_PROTOCOL (notes: a lineage preset)"},
                    # the binary types' default score is 0 or 100 a question: a proportion
                    (*(Column(kind.replace("_", " ").capitalize(), "score", task=task_of(kind),
                              proportion=kind in BINARY_TYPES) for kind in QUESTION_TYPES),
                     Column("Default, macro", "score", task="robovqa", group_mean=GroupMean(_TASKS, MACRO)),
                     Column("Default, micro", "micro_score", task="robovqa", group_mean=GroupMean(_TASKS, MICRO)),
                     Column("MiMo score", "mimo_score", task="robovqa", published="mimo_score", interval=False),
                     Column("PhysBrain BLEU", "physbrain_bleu", task="robovqa", interval=False),
                     Column("RoboMamba BLEU-4", "robomamba_bleu4", task="robovqa", interval=False),
                     Column("MultiNet exact match", "multinet_exact_match", task="robovqa", interval=False),
                     # published only: rows whose source does not say how they were scored
                     Column("Scorer not stated", "unstated_score", task="robovqa", interval=False),
                     count_column("Yes / no unread", "unextracted"),
                     count_column("Samples", "predictions")),
                    notes=("Default: yes / no accuracy on the binary types and smoothed sentence BLEU on the others "
                           "(0-100); each lineage column is that lineage's scorer, filled only by a run of its preset "
                           "(ROBOVQA_PROTOCOL), never comparable with another's",),
                    main="Default, macro", scoring={"robovqa": GENERATIVE}),
    ),
    published=published_rows(__package__),
    protocol=protocol_defaults(RoboVQASettings, ("data_source", "protocol", "multinet_scorer")),
    # the lineages' 0-1 means in percent, as MiMo prints its score; the default's and PhysBrain's are 0-100 already
    units=(("score", SCORE_0_100), ("micro_score", SCORE_0_100), ("physbrain_bleu", SCORE_0_100),
           ("mimo_*", PERCENT), ("robomamba_*", PERCENT), ("multinet_exact_match", PERCENT),
           ("multinet_similarity", PERCENT), ("unstated_score", SCORE_0_100)),
    bookkeeping=("unextracted", "multinet_invalid"),
)
