"""EgoPlan-Bench2 in ``lmms-egoplan report`` and the demo's table: accuracy overall and per domain
in the layout of the later papers' tables (the RoboBrain 2.0 technical report's Table 4: Daily life,
Hobbies, Recreation, Work, all), with the accuracy under each parser and the unreadable answers each
left beside it; the likelihood diagnostic (``egoplan_bench2_likelihood``, which no paper reports) in
its own row; per-scenario accuracy, with its counts and intervals, in a figure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lmms_egoplan.core.statistics import breakdown_label
from lmms_egoplan.egoplan_bench2.data import CHOICE_LETTERS, DOMAINS
from lmms_egoplan.egoplan_bench2.settings import EgoPlanBench2Settings
from lmms_egoplan.report.figures import (
    PUBLISHED_COLOUR,
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
    Breakdown,
    ReportFace,
    TableLayout,
    count_column,
    percent_column,
    protocol_defaults,
    published_rows,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_DOMAIN_METRICS = {domain: f"accuracy_domain_{breakdown_label(domain)}" for domain in DOMAINS}


def egoplan_bench2_breakdowns(table) -> Figure:
    """Accuracy per domain (your runs as bars with n and 95% intervals, the published models as grey
    dots) and per scenario (every scenario a run reports, with n and intervals), the chance line in both."""
    main = table.layout.main_column  # its accuracy: a run whose other parser read nothing is drawn
    rows = [row for row in table.user_rows if not row.unscored[main]]
    labels = run_labels(table.user_rows)
    labels = [label for label, row in zip(labels, table.user_rows) if row in rows]
    figure = new_figure(figsize=(15, 5.5), layout="constrained")
    by_domain, by_scenario = figure.subplots(1, 2, width_ratios=(1, 3))
    for axes, family, bins, title in (
            (by_domain, "domain", [breakdown_label(d) for d in DOMAINS], "by domain"),
            (by_scenario, "scenario", _reported_scenarios(rows), "by scenario")):
        axes.set_title(f"EgoPlan-Bench2 accuracy {title}", fontsize=10)
        names = list(DOMAINS) if family == "domain" else [b.replace("_", " ") for b in bins]
        accuracy_bars(axes, list(zip(labels, rows)), family, bins, names, candidates=len(CHOICE_LETTERS),
                      empty="no run of yours reports these accuracies")
    columns = [i for i, c in enumerate(table.layout.columns) if c.metric in _DOMAIN_METRICS.values()]
    # the published rows that give domains (several reports print the overall accuracy only)
    published = [row for row in table.rows if row.published and any(row.values[i] is not None for i in columns)]
    for position, domain in enumerate(DOMAINS):
        column = next(i for i, c in enumerate(table.layout.columns) if c.metric == _DOMAIN_METRICS[domain])
        values = [row.values[column] for row in published if isinstance(row.values[column], (int, float))]
        by_domain.scatter([position] * len(values), values, s=10, color=PUBLISHED_COLOUR, zorder=3,
                          label=f"published models ({len(published)}): one dot each")
    legend_above(figure, columns=3)
    footnote(figure, unscored_notes(table, run_labels(table.user_rows)))
    return figure


def _reported_scenarios(rows) -> list[str]:
    """The scenarios the rows report (``accuracy_scenario_<label>``), in name order."""
    return sorted({metric.removeprefix("accuracy_scenario_") for row in rows for metric in row.run.metrics[row.task]
                   if metric.startswith("accuracy_scenario_")})


FACE = ReportFace(
    tables=(
        TableLayout("egoplan_bench2", "EgoPlan-Bench2: accuracy (%)",
                    "the RoboBrain 2.0 technical report's Table 4 (EgoPlan-Bench2 per domain)",
                    {"egoplan_bench2": "video, generated letter",
                     "egoplan_bench2_likelihood": "video, likelihood ranking (diagnostic: no paper reports it)"},
                    (percent_column("Accuracy", "accuracy"),
                     *(percent_column(domain, metric) for domain, metric in _DOMAIN_METRICS.items()),
                     percent_column("Official parser", "accuracy_official"),
                     percent_column("Robust parser", "accuracy_robust"),
                     count_column("Unparseable, official parser", "unparseable_official"),
                     count_column("Unparseable, robust parser", "unparseable_robust"),
                     count_column("Samples", "predictions")),
                    figures={"egoplan_bench2_breakdowns": egoplan_bench2_breakdowns},
                    scoring={"egoplan_bench2": GENERATIVE, "egoplan_bench2_likelihood": LIKELIHOOD}),
    ),
    published=published_rows(__package__),
    protocol=protocol_defaults(EgoPlanBench2Settings, ("data_source", "frame_sampling", "num_frames", "parser",
                                                       "scored_tokens", "loss_mean")),
    bookkeeping=("unparseable_official", "unparseable_robust"),
    breakdowns=(Breakdown(r"^(?:accuracy_)?(domain)_(.+)$"), Breakdown(r"^(?:accuracy_)?(scenario)_(.+)$")),
)
