"""ActPlan-1K in ``lmms-egoplan report`` and the demo's table: LCS and normalised LCS overall and
per split, BLEURT accuracy, format-error rate and plan length, with images and text only, in the
layout of its Tables 4 and 6, and normal vs counterfactual beside the published normalised LCS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmms_egoplan.actplan.data import SPLITS
from lmms_egoplan.actplan.settings import ActPlanSettings
from lmms_egoplan.report.figures import (
    PUBLISHED_COLOUR,
    bars,
    colour,
    footnote,
    is_horizontal,
    legend_above,
    mark_unscored,
    new_figure,
    no_data,
    run_labels,
    unscored_notes,
    value_axis,
)
from lmms_egoplan.report.layout import (
    GENERATIVE,
    Breakdown,
    Column,
    ReportFace,
    TableLayout,
    percent_column,
    protocol_defaults,
    published_rows,
)
from lmms_egoplan.report.metric_roles import FRACTION, STEPS, Unit
from lmms_egoplan.report.tables import Row, Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

IMAGES, TEXT_ONLY = "images", "text only"  # a row's input


def actplan_splits(table: Table) -> Figure:
    """Normalised LCS on normal vs counterfactual tasks per row (with their 95% intervals) beside the published
    models' overall values (Table 4, grey), and with images vs text only per model."""
    metrics = [column.metric for column in table.layout.columns]
    normal, counterfactual, overall = (metrics.index(m) for m in ("norm_lcs_normal", "norm_lcs_counterfactual",
                                                                  "norm_lcs"))
    rows = table.user_rows
    labels = run_labels(rows)
    figure = new_figure(figsize=(13, 5.5), layout="constrained")
    splits, inputs = figure.subplots(1, 2, width_ratios=(3, 2))
    splits.set_title("ActPlan-1K normalised LCS: normal vs counterfactual", fontsize=10)
    published = [row for row in table.rows if row.published and isinstance(row.values[overall], (int, float))]
    groups = [*labels, *(f"{row.model} (published)" for row in published)]
    user = len(labels)
    padding, by_split = [None] * len(published), {"normal": normal, "counterfactual": counterfactual}
    series = [(name, colour(index), [row.scored(column) for row in rows] + padding)
              for index, (name, column) in enumerate(by_split.items())]
    errors = {name: [row.bounds(column) for row in rows] + padding for name, column in by_split.items()}
    horizontal = is_horizontal(groups)  # many rows: a line each
    if groups:
        bars(splits, groups, series, errors)
        for position, row in enumerate(published, start=user):
            (splits.barh if horizontal else splits.bar)(position, row.values[overall], 0.5, color=PUBLISHED_COLOUR,
                                                        label="published, overall (Table 4, images)")
        if published and user:
            (splits.axhline if horizontal else splits.axvline)(user - 0.5, color=PUBLISHED_COLOUR, linewidth=0.8)
        value_axis(splits, 0, 1, "normalised LCS (0-1)", horizontal=horizontal)
    mark_unscored(splits, [i for i in range(user) if series[0][2][i] is None and series[1][2][i] is None],
                  horizontal=horizontal)
    models = sorted({row.model for row in rows})

    def by_input(text_only: bool) -> list[Row | None]:
        return [next((row for row in rows if row.model == model and (row.input == TEXT_ONLY) == text_only
                      and row.scored(overall) is not None), None) for model in models]

    inputs.set_title(f"ActPlan-1K normalised LCS: {IMAGES} vs {TEXT_ONLY}", fontsize=10)
    chosen = {IMAGES: by_input(False), TEXT_ONLY: by_input(True)}
    by_model = [(name, colour(index), [row and row.scored(overall) for row in chosen[name]])
                for name, index in ((IMAGES, 2), (TEXT_ONLY, 4))]
    if any(v is not None for *_, values in by_model for v in values):
        bars(inputs, models, by_model, {name: [row and row.bounds(overall) for row in found]
                                        for name, found in chosen.items()})
        mark_unscored(inputs, [i for i in range(len(models)) if all(values[i] is None for *_, values in by_model)],
                      horizontal=is_horizontal(models))
        value_axis(inputs, 0, 1, horizontal=is_horizontal(models))
    else:
        no_data(inputs, "no run of yours has a normalised LCS")
    legend_above(figure, columns=3)
    footnote(figure, unscored_notes(table, labels))
    return figure


FACE = ReportFace(
    tables=(TableLayout("actplan1k", "ActPlan-1K: plans", "ActPlan-1K Tables 4 and 6",
                        {"actplan1k": IMAGES, "actplan1k_text_only": TEXT_ONLY, "actplan1k_text_only_lm": TEXT_ONLY},
                        (Column("LCS", "lcs"), Column("LCS normal", "lcs_normal"),
                         Column("LCS counterfactual", "lcs_counterfactual"), Column("Norm. LCS", "norm_lcs"),
                         Column("Norm. LCS normal", "norm_lcs_normal"),
                         Column("Norm. LCS counterfactual", "norm_lcs_counterfactual"),
                         percent_column("BLEURT accuracy", "bleurt_accuracy"),
                         Column("Format-error rate", "format_error_rate", interval=False),
                         Column("No-plan rate", "no_plan_rate", interval=False),
                         Column("Plan length", "plan_length"),
                         Column("Human correctness", "human_correctness", interval=False),
                         Column("Human commonsense", "human_commonsense", interval=False)),
                        figures={"actplan_splits": actplan_splits}, main="Norm. LCS",
                        scoring=dict.fromkeys(("actplan1k", "actplan1k_text_only", "actplan1k_text_only_lm"),
                                              GENERATIVE)),),
    published=published_rows(__package__),
    protocol=protocol_defaults(ActPlanSettings, ("instances", "input_order", "gold_plan", "match_threshold")),
    # The human evaluation (Tables 3 and 6) is published in percent, as the paper prints it.
    units=(("human_*", Unit(1.0, "%", 0.0, 100.0)), ("norm_lcs", FRACTION), ("norm_lcs_*", FRACTION), ("lcs", STEPS),
           ("lcs_*", STEPS), ("plan_length", STEPS)),
    bookkeeping=("no_plan_rate",),
    descriptive=("format_error_rate", "plan_length"),
    breakdowns=(Breakdown(rf"^(.+)_({'|'.join(SPLITS)})$"),),
    no_interval="ActPlan-1K's format-error rate (format-error lines over all plan lines, pooled) and no-plan rate "
                "(a count of outputs, as a share)",
)
