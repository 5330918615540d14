"""The report's figures (matplotlib, Agg): each function returns a Figure, or None without data."""

from __future__ import annotations

import math
import re
from statistics import mean

import matplotlib

matplotlib.use("Agg")  # files only: no display is needed, or wanted on a server

from matplotlib.figure import Figure  # noqa: E402

from lmms_egoplan.report.intervals import interval  # noqa: E402
from lmms_egoplan.report.layout import ACTPLAN_TEXT, EGOTHINK_CAPABILITIES  # noqa: E402
from lmms_egoplan.report.tables import Row, Table  # noqa: E402
from lmms_egoplan.tables import natural_order  # noqa: E402

SIMILARITY_LEVELS = ("low", "medium", "high")
_PROGRESS = re.compile(r"^accuracy_progress_\d+_(?:\d+|plus)$")


def _label(row: Row) -> str:
    return f"{row.model} · {row.task}" + (f" · {row.run.stamp:%m-%d %H:%M}" if row.run else "")


def progress_bins(metrics: dict) -> list[str]:
    """The task-progress bins a run reports (``0_4``, ``5_9``, ..., ``15_plus``), in order."""
    return [key.removeprefix("accuracy_progress_") for key in natural_order(metrics) if _PROGRESS.match(key)]


def _grouped_bars(axes, groups: list[str], series: dict[str, list[float | None]],
                  errors: dict[str, list[tuple[float, float] | None]] | None = None,
                  counts: dict[str, list[int | None]] | None = None) -> None:
    """One bar per (group, series); missing values draw no bar. Error bars from (low, high), n above."""
    width = 0.8 / max(len(series), 1)
    for index, (name, values) in enumerate(series.items()):
        for position, value in enumerate(values):
            if value is None:
                continue
            x = position - 0.4 + width * (index + 0.5)
            axes.bar(x, value, width, color=f"C{index % 10}", label=name if position == next(
                i for i, v in enumerate(values) if v is not None) else None)
            bounds = (errors or {}).get(name, [None] * len(values))[position]
            if bounds:
                axes.errorbar(x, value, yerr=[[value - bounds[0]], [bounds[1] - value]], color="black", capsize=3)
            count = (counts or {}).get(name, [None] * len(values))[position]
            if count is not None:
                axes.annotate(f"n={count}", (x, bounds[1] if bounds else value), ha="center", va="bottom", fontsize=7)
    long_labels = sum(map(len, groups)) > 60  # model names side by side would overlap
    axes.set_xticks(range(len(groups)), groups, rotation=20 if long_labels else 0, ha="right" if long_labels else "center",
                    fontsize=7 if long_labels else None)
    axes.legend(fontsize=7)


def egoplan_breakdowns(table: Table) -> Figure | None:
    """Accuracy by task-progress length and by goal-answer similarity level (the paper's Figures 7-8),
    one bar per run and bin, with its sample count and 95% interval."""
    rows = [row for row in table.user_rows if row.run.metrics.get(row.task, {}).get("accuracy") is not None]
    if not rows:
        return None
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    for axes, (title, name, bins) in zip(figure.subplots(1, 2), (
            ("by task-progress length (actions so far)", "progress",
             progress_bins({k: v for row in rows for k, v in row.run.metrics[row.task].items()})),
            ("by goal-answer similarity level", "similarity", list(SIMILARITY_LEVELS)))):
        series, errors, counts = {}, {}, {}
        for row in rows:
            metrics = row.run.metrics[row.task]
            values, bounds, sizes = [], [], []
            for bin_name in bins:
                value = metrics.get(f"accuracy_{name}_{bin_name}")
                found = interval(row.run, row.task, f"accuracy_{name}_{bin_name}", proportion=True) if value is not None else None
                values.append(None if value is None else value * 100)
                bounds.append((found.low * 100, found.high * 100) if found else None)
                sizes.append(metrics.get(f"n_{name}_{bin_name}"))
            series[_label(row)], errors[_label(row)], counts[_label(row)] = values, bounds, sizes
        _grouped_bars(axes, [b.replace("_plus", "+").replace("_", "-") for b in bins], series, errors, counts)
        axes.set_title(f"EgoPlan-Bench Val accuracy {title}")
        axes.set_ylabel("accuracy (%)")
    return figure


def egothink_dimensions(table: Table) -> Figure:
    """Per-dimension scores, one bar per model (the user's rows, then the published ones)."""
    dimensions = [name for names in EGOTHINK_CAPABILITIES.values() for name in names]
    figure = Figure(figsize=(14, 5), layout="constrained")
    axes = figure.subplots()
    series = {(_label(row) if row.run else f"{row.model} (published)"): row.values[:len(dimensions)]
              for row in table.rows}
    _grouped_bars(axes, dimensions, series)
    axes.legend(fontsize=6, ncol=3)
    axes.set_title("EgoThink per-dimension scores")
    axes.set_ylabel("score (0-100)")
    return figure


def egointent_scenarios(table: Table) -> Figure | None:
    """Scenario x model heatmap of the overall score, ordered as the paper's Figure 7: models by
    overall score from top to bottom, scenarios by their mean over models from lowest to highest."""
    rows = sorted(table.user_rows, key=lambda row: -row.run.metrics[row.task].get("overall", float("-inf")))
    scenarios = {key.removeprefix("scenario_") for row in rows
                 for key in row.run.metrics.get(row.task, {}) if key.startswith("scenario_")}
    if not scenarios:
        return None

    def score(row: Row, scenario: str) -> float:
        return row.run.metrics[row.task].get(f"scenario_{scenario}", float("nan"))

    scenarios = sorted(scenarios, key=lambda name: (mean(v for row in rows if not math.isnan(v := score(row, name))), name))
    cells = [[score(row, name) for name in scenarios] for row in rows]
    figure = Figure(figsize=(max(6, len(scenarios) * 0.9), 1.5 + 0.5 * len(rows)), layout="constrained")
    axes = figure.subplots()
    image = axes.imshow(cells, cmap="Blues", aspect="auto", vmin=0, vmax=100)
    axes.set_xticks(range(len(scenarios)), scenarios, rotation=45, ha="right")
    axes.set_yticks(range(len(rows)), [_label(row) for row in rows])
    for i, line in enumerate(cells):
        for j, value in enumerate(line):
            axes.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=8)
    figure.colorbar(image, ax=axes, label="overall score (0-100)")
    axes.set_title("EgoIntent overall score by scenario")
    return figure


def actplan_splits(table: Table) -> Figure:
    """Normalised LCS on normal vs counterfactual tasks per row, and with images vs text only per model."""
    headers = [column.header for column in table.benchmark.columns]
    rows = table.user_rows
    figure = Figure(figsize=(12, 4.5), layout="constrained")
    splits, inputs = figure.subplots(1, 2)
    normal, counterfactual = headers.index("Norm. LCS normal"), headers.index("Norm. LCS counterfactual")
    _grouped_bars(splits, [_label(row) for row in rows], {
        "normal": [row.values[normal] for row in rows], "counterfactual": [row.values[counterfactual] for row in rows]})
    splits.set_title("ActPlan-1K normalised LCS: normal vs counterfactual")
    splits.set_ylim(0, 1)
    splits.tick_params(axis="x", labelsize=7)
    overall = headers.index("Norm. LCS")
    models = sorted({row.model for row in rows})

    def by_input(text_only: bool) -> list[float | None]:
        return [next((row.values[overall] for row in rows if row.model == model
                      and (row.input == ACTPLAN_TEXT) == text_only), None) for model in models]

    _grouped_bars(inputs, models, {"images": by_input(False), "text only": by_input(True)})
    inputs.set_title("ActPlan-1K normalised LCS: images vs text only")
    inputs.set_ylim(0, 1)
    inputs.tick_params(axis="x", labelsize=7)
    return figure


FIGURES = {
    "egoplan_val": [("egoplan_breakdowns", egoplan_breakdowns)],
    "ego_think": [("egothink_dimensions", egothink_dimensions)],
    "egointent": [("egointent_scenarios", egointent_scenarios)],
    "actplan1k": [("actplan_splits", actplan_splits)],
}


def table_figures(table: Table) -> dict[str, Figure]:
    """The figures of a table, by file stem."""
    return {name: figure for name, draw in FIGURES.get(table.name, []) if (figure := draw(table)) is not None}
