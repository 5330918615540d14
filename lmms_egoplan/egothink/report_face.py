"""EgoThink in ``lmms-egoplan report`` and the demo's table: the twelve dimensions, the six
capabilities and the average in the layout of its Table 3 (then the mean over the questions), and each dimension's
score beside the published models' (the paper's Table 3 and later reports, each row with the judge its source used)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmms_egoplan.egothink.data import CAPABILITIES
from lmms_egoplan.egothink.protocol import EgoThinkSettings
from lmms_egoplan.report.figures import (
    NOTE_COLOUR,
    PUBLISHED_COLOUR,
    bars,
    colour,
    footnote,
    legend_above,
    new_figure,
    run_labels,
    unscored_notes,
)
from lmms_egoplan.report.layout import (
    GENERATIVE,
    JUDGE_COUNTS,
    MACRO,
    MICRO,
    Column,
    GroupMean,
    ReportFace,
    TableLayout,
    protocol_defaults,
    published_rows,
)
from lmms_egoplan.report.metric_roles import SCORE_0_100
from lmms_egoplan.report.tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DIMENSIONS = [name for names in CAPABILITIES.values() for name in names]


def egothink_dimensions(table: Table) -> Figure:
    """Per-dimension scores: your runs as bars with their 95% intervals; the published models (Table 3 and later
    reports that give the dimension) as grey dots, one per model, over a grey band spanning their range."""
    rows = table.user_rows
    labels = run_labels(rows)
    figure = new_figure(figsize=(13, 5.5), layout="constrained")
    axes = figure.subplots()
    published = [row for row in table.rows if row.published]
    for position in range(len(DIMENSIONS)):
        values = [row.values[position] for row in published if isinstance(row.values[position], (int, float))]
        if values:
            axes.fill_between([position - 0.45, position + 0.45], min(values), max(values), color=PUBLISHED_COLOUR,
                              alpha=0.25, linewidth=0, label="published models: range (judges differ, see the table)")
            axes.scatter([position] * len(values), values, s=10, color=PUBLISHED_COLOUR, zorder=3,
                         label="published models: one dot each")
    series = [(label, colour(index), [row.scored(i) for i in range(len(DIMENSIONS))])
              for index, (label, row) in enumerate(zip(labels, rows))]
    bars(axes, DIMENSIONS, series, {label: [row.bounds(i) for i in range(len(DIMENSIONS))]
                                     for label, row in zip(labels, rows)})
    if not any(v is not None for *_, values in series for v in values):
        axes.text(0.5, 0.95, "no data from your runs", transform=axes.transAxes, ha="center", va="top",
                  color=NOTE_COLOUR)
    axes.set_ylim(0, 100)
    axes.set_title("EgoThink per-dimension scores: your runs and the published models (grey)", fontsize=10)
    axes.set_ylabel("score (0-100)")
    legend_above(figure)
    footnote(figure, unscored_notes(table, labels))
    return figure


def _dimensions_mean(names: list[str], weighting: str = MACRO) -> GroupMean:
    """A group's mean of its dimensions' scores (unweighted, or ``MICRO``: each weighted by its questions), its
    interval from their logged judgements."""
    return GroupMean(tuple(f"{{task}}_{name}" for name in names), weighting, member_metric="score")


# The dimensions first (the figure draws the first twelve columns), then the capabilities and the averages: the
# paper's over the twelve dimensions, and the mean over the questions some later reports print as their average.
COLUMNS = (
    *(Column(name.capitalize(), "score", task=f"{{task}}_{name}", published=name, digits=1) for name in DIMENSIONS),
    *(Column(f"{name.capitalize()} (capability)", "score", task=f"{{task}}_capability_{name}",
             published=f"capability_{name}", digits=1, group_mean=_dimensions_mean(names))
      for name, names in CAPABILITIES.items()),
    Column("Average", "score", published="average", digits=1, group_mean=_dimensions_mean(DIMENSIONS)),
    Column("Mean over questions", "micro_score", published="average_over_questions", digits=1,
           group_mean=_dimensions_mean(DIMENSIONS, MICRO)),
    # a published single EgoThink value whose source does not say which mean it is (EgoTools' Table 2)
    Column("Average, mean not stated", "average_not_stated", digits=1, interval=False),
    *JUDGE_COUNTS,
)
FACE = ReportFace(
    tables=(TableLayout("ego_think", "EgoThink: judge scores (0-100)", "EgoThink Table 3",
                        {"ego_think": "image", "ego_think_blind": "text only"}, COLUMNS,
                        figures={"egothink_dimensions": egothink_dimensions}, judged=True,
                        main="Average", scoring=dict.fromkeys(("ego_think", "ego_think_blind"), GENERATIVE)),),
    published=published_rows(__package__),
    protocol=protocol_defaults(EgoThinkSettings, ("prompt_preset", "decoding")),
    units=(("score", SCORE_0_100), ("micro_score", SCORE_0_100), ("average_not_stated", SCORE_0_100)),
)
