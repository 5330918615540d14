"""EgoPlan-Bench in ``lmms-egoplan report`` and the demo's table: Val in the layout of the journal
version's Tables 1 and 3 (accuracy, in-domain EpicKitchens, out-of-domain Ego4D), Test with its
predictions and leaderboard file (Table 4's published accuracies), and the breakdowns of its
Figures 7-8 (accuracy by task-progress length and by goal-answer similarity level)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from lmms_egoplan.egoplan.data import CHOICE_LETTERS, SIMILARITY_LEVELS
from lmms_egoplan.egoplan.settings import EgoPlanSettings
from lmms_egoplan.report.figures import (
    accuracy_bars,
    footnote,
    legend_above,
    new_figure,
    run_labels,
    unscored_notes,
)
from lmms_egoplan.report.layout import (
    GENERATIVE,
    LIKELIHOOD,
    SUBMISSION,
    Breakdown,
    Column,
    ReportFace,
    TableLayout,
    count_column,
    percent_column,
    protocol_defaults,
    published_rows,
)
from lmms_egoplan.report.metric_roles import natural_order
from lmms_egoplan.report.tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_PROGRESS = re.compile(r"^accuracy_progress_\d+_(?:\d+|plus)$")


def reported_progress_bins(metrics: dict) -> list[str]:
    """The task-progress bins a run reports (by default ``0_4``, ``5_9``, ``10_14``, ``15_plus``: the
    progress_length_bins setting), in order."""
    return [key.removeprefix("accuracy_progress_") for key in natural_order(metrics) if _PROGRESS.match(key)]


def egoplan_breakdowns(table: Table) -> Figure:
    """Accuracy by task-progress length and by goal-answer similarity level (the paper's Figures 7-8):
    one bar per run and bin with its sample count and 95% interval, and the chance line."""
    labels = run_labels(table.user_rows)
    figure = new_figure(figsize=(12, 5), layout="constrained")
    drawn = [(label, row) for label, row in zip(labels, table.user_rows)
             if row.run.metrics.get(row.task, {}).get("accuracy") is not None and not any(row.unscored)]
    all_metrics = {k: v for _, row in drawn for k, v in row.run.metrics[row.task].items()}
    for axes, (title, name, bins) in zip(figure.subplots(1, 2), (
            ("by task-progress length (actions so far)", "progress", reported_progress_bins(all_metrics)),
            ("by goal-answer similarity level", "similarity", list(SIMILARITY_LEVELS)))):
        axes.set_title(f"EgoPlan-Bench Val accuracy {title}", fontsize=10)
        accuracy_bars(axes, drawn, name, bins, [b.replace("_plus", "+").replace("_", "-") for b in bins],
                      candidates=len(CHOICE_LETTERS), empty="no run reports these bins")
    legend_above(figure, columns=2)
    footnote(figure, unscored_notes(table, labels))
    return figure


FACE = ReportFace(
    tables=(
        TableLayout("egoplan_val", "EgoPlan-Bench Val: accuracy (%)", "EgoPlan-Bench journal Tables 1 and 3",
                    {"egoplan_val": "video, likelihood ranking", "egoplan_val_gen": "video, generated letter",
                     "egoplan_val_blind": "text only", "egoplan_val_narrated": "text only, narrated progress"},
                    (percent_column("Accuracy", "accuracy"),
                     percent_column("In-domain, EpicKitchens", "accuracy_epic_kitchens"),
                     percent_column("Out-of-domain, Ego4D", "accuracy_ego4d"),
                     count_column("Samples", "predictions"),
                     count_column("Unparseable (generated letter)", "unparseable")),
                    figures={"egoplan_breakdowns": egoplan_breakdowns},
                    scoring={"egoplan_val": LIKELIHOOD, "egoplan_val_gen": GENERATIVE}),
        TableLayout("egoplan_test", "EgoPlan-Bench Test: predictions and leaderboard file",
                    "EgoPlan-Bench journal Table 4",
                    {"egoplan_test": "video, likelihood ranking", "egoplan_test_blind": "text only"},
                    (count_column("Predictions", "predictions"),
                     Column("Accuracy (published)", "accuracy", published="accuracy", interval=False),
                     Column("Submission file", SUBMISSION, interval=False)),
                    scoring={"egoplan_test": LIKELIHOOD}),
    ),
    published=published_rows(__package__),
    protocol=protocol_defaults(EgoPlanSettings, ("data_source", "frame_sampling", "num_frames", "scored_tokens",
                                                 "loss_mean")),
    breakdowns=(Breakdown(r"^(?:accuracy_)?(progress)_(.+)$"),
                Breakdown(r"^(?:accuracy_)?(similarity)_(.+)$", levels=SIMILARITY_LEVELS)),
)
