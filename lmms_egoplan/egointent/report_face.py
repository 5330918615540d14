"""EgoIntent in ``lmms-egoplan report`` and the demo's table: Local Intent, Procedural Intent,
Next-Plan, overall, indoor and outdoor in the layout of arXiv v1's Table 3, beside two published
blocks (the authors' leaderboard and Table 3, which use different judges or prompts: ``NOTES``), and
the overall score per scenario and model in the shape of its Figure 7."""

from __future__ import annotations

import math
from statistics import mean
from typing import TYPE_CHECKING

from lmms_egoplan.egointent.data import DIMENSIONS, ENVIRONMENTS, FIELDS, FORMER_FIELDS, SCENARIO
from lmms_egoplan.egointent.protocol import EgoIntentSettings
from lmms_egoplan.report.figures import footnote, new_figure, no_data, run_labels, unscored_notes
from lmms_egoplan.report.layout import (
    GENERATIVE,
    JUDGE_COUNTS,
    Breakdown,
    Column,
    ReportFace,
    TableLayout,
    count_column,
    protocol_defaults,
    published_rows,
)
from lmms_egoplan.report.metric_roles import SCORE_0_100
from lmms_egoplan.report.tables import Row, Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SCENARIO_PREFIX = f"{SCENARIO}_"  # of a scenario's metric (data.scenario_metric)


def egointent_scenarios(table: Table) -> Figure:
    """Scenario x model heatmap of the overall score, ordered as the paper's Figure 7: models by
    overall score from top to bottom, scenarios by their mean over models from lowest to highest.
    Cells without a score (not judged, or no step of that scenario) are grey and say "no value"."""
    def overall(row: Row) -> float:
        value = row.run.metrics[row.task].get("overall")
        return value if isinstance(value, (int, float)) and not math.isnan(value) else -math.inf

    labels = run_labels(table.user_rows)
    unscored = unscored_notes(table, labels)
    drawn = sorted([(label, row) for label, row in zip(labels, table.user_rows) if not any(row.unscored)],
                   key=lambda drawn_row: -overall(drawn_row[1]))
    scenarios = sorted({key.removeprefix(SCENARIO_PREFIX) for _, row in drawn
                        for key in row.run.metrics.get(row.task, {}) if key.startswith(SCENARIO_PREFIX)})

    def score(row: Row, scenario: str) -> float:
        value = row.run.metrics[row.task].get(f"{SCENARIO_PREFIX}{scenario}")
        return value if isinstance(value, (int, float)) else math.nan

    label_width = max((len(label) for label, _ in drawn), default=10) * 0.075
    figure = new_figure(figsize=(max(7.0, 2.5 + label_width + 0.8 * len(scenarios)), 2.6 + 0.45 * max(len(drawn), 1)),
                    layout="constrained")
    axes = figure.subplots()
    axes.set_title("EgoIntent overall score by scenario", fontsize=10)
    if not scenarios:
        no_data(axes, "no run reports scenario scores")
        footnote(figure, unscored)
        return figure
    scenarios.sort(key=lambda name: (mean([v for _, row in drawn if not math.isnan(v := score(row, name))]
                                          or [math.inf]), name))
    cells = [[score(row, name) for name in scenarios] for _, row in drawn]
    image = axes.imshow(cells, cmap="Blues", aspect="auto", vmin=0, vmax=100)
    axes.set_facecolor("#e6e6e6")  # NaN cells are transparent: this grey shows through
    axes.set_xticks(range(len(scenarios)), scenarios, rotation=45, ha="right")
    axes.set_yticks(range(len(drawn)), [label for label, _ in drawn])
    for i, line in enumerate(cells):
        for j, value in enumerate(line):
            axes.text(j, i, "no value" if math.isnan(value) else f"{value:.1f}", ha="center", va="center", fontsize=8,
                      color="white" if value > 60 else "black")
    figure.colorbar(image, ax=axes, label="overall score (0-100)", shrink=0.9)
    footnote(figure, unscored)
    return figure


# What the table says beside its rows: the published blocks' sources and why they differ (the numbers are
# checked against published_results.json by tests/report/test_report.py).
NOTES = (
    "Two published blocks: the authors' leaderboard (YePan2/EgoIntent, results/leaderboard.md at e6cf8e9, "
    "2026-08-10; its judge is not named) and arXiv 2603.12147v1's Table 3 (judge: a Qwen3 model). They use "
    "different judges or judge prompts, neither prompt public: for the models in both, Overall differs by up to "
    "19.4 points (Qwen3.5-Plus: 33.31 in v1, 52.71 on the leaderboard) and a single dimension by up to 25.9. "
    "Compare a run with the block whose judge it used; no block was re-computed.",
    "Only arXiv v1 reports Indoor / Outdoor; the suite reports them for every run. The leaderboard's "
    "Procedural column is v1's Global intent (renamed by the authors).",
    "A field missing from an answer scores 0 in this suite, as on the leaderboard (\"Missing predictions "
    "receive zero\"); the metric missing_fields counts them.",
)

FACE = ReportFace(
    tables=(TableLayout("egointent", "EgoIntent: judge scores (0-100)", "EgoIntent Table 3 (arXiv v1)",
                        {"egointent": "video"},
                        (*(Column(dimension.label, dimension.field, former_metrics=dimension.former_fields)
                           for dimension in DIMENSIONS), Column("Overall", "overall"),
                         *(Column(environment.capitalize(), environment) for environment in ENVIRONMENTS),
                         *JUDGE_COUNTS, count_column("Incomplete answers", "incomplete_answers"),
                         # clips that max_frames held below sample_fps: shown fewer frames than the protocol's rate
                         count_column("Clips capped at max_frames", "capped_samples")),
                        figures={"egointent_scenarios": egointent_scenarios}, judged=True, notes=NOTES,
                        main="Overall", scoring={"egointent": GENERATIVE}),),
    published=published_rows(__package__),
    protocol=protocol_defaults(EgoIntentSettings, ("definitions", "show_step_id", "sample_fps", "max_frames",
                                                   "longer_clips", "video_input")),
    # Every score is a judge's mean rating x 100: the three fields, overall, per environment and scenario.
    units=tuple((metric, SCORE_0_100) for metric in ("overall", *FIELDS, *FORMER_FIELDS, *ENVIRONMENTS,
                                                     f"{SCENARIO_PREFIX}*")),
    bookkeeping=("incomplete_answers", "missing_fields", "cut_answers", "capped_samples"),
    breakdowns=(Breakdown(rf"^({SCENARIO})_(.+)$"),),
)
