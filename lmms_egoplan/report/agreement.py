"""``lmms-egoplan judge-agreement``'s outputs: two judges' agreement (``lmms_egoplan.judge.agreement``)
as a printed table, ``judge_agreement.csv``, ``judge_disagreements.csv`` (the answers they disagree on
most, with both judges' answers) and a figure (both scores per group with their 95 % intervals, and the
confusion of the two judges' ratings)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from lmms_egoplan.core.files import write_atomically
from lmms_egoplan.core.text_tables import format_table, format_value
from lmms_egoplan.judge.agreement import KAPPA_WEIGHTS, Agreement, RatingPair
from lmms_egoplan.report.figures import NOTE_COLOUR, colour, legend_above, new_figure
from lmms_egoplan.report.html import figure_bytes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STEM = "judge_agreement"
EXCERPT = 90  # characters a printed line shows of the answer judged (where unknown: the end of its judge prompt)


def agreement_table(agreements: Sequence[Agreement], first: str, second: str) -> str:
    rows = [(row.group, str(row.pairs), str(row.fixed), _score(row.first_score, row.first_interval),
             _score(row.second_score, row.second_interval), _score(row.difference, row.difference_interval, "+.1f"),
             f"{100 * row.exact:.1f}%", format_value(row.kappa, ".3f")) for row in agreements]
    return format_table(("group", "answers", "scored without a judge", f"run's judge {first}",
                         f"second judge {second}", "difference", "exact agreement",
                         f"weighted kappa ({KAPPA_WEIGHTS})"), rows, right={1, 2, 6, 7})


def disagreement_lines(pairs: Sequence[RatingPair]) -> list[str]:
    return [f"  {pair.group} {pair.id}: {pair.first:g} vs {pair.second:g}: " + (
        _flat(pair.answer)[:EXCERPT] if pair.answer else f"...{_flat(pair.prompt)[-EXCERPT:]}") for pair in pairs]


def agreement_csv(agreements: Sequence[Agreement]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["group", "answers", "scored without a judge", "first score", "first 95% low", "first 95% high",
                     "second score",
                     "second 95% low", "second 95% high", "difference (second - first)", "difference 95% low",
                     "difference 95% high", "exact agreement", f"weighted kappa ({KAPPA_WEIGHTS})"])
    for row in agreements:
        writer.writerow([row.group, row.pairs, row.fixed, row.first_score, *row.first_interval, row.second_score,
                         *row.second_interval, row.difference, *row.difference_interval, row.exact,
                         "" if math.isnan(row.kappa) else row.kappa])
    return buffer.getvalue()


def disagreements_csv(pairs: Sequence[RatingPair]) -> str:
    buffer = io.StringIO()
    # every text quoted: a model's answer may hold a carriage return, which the "\n" terminator does not quote
    writer = csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["group", "id", "first rating", "second rating", "answer judged", "judge prompt",
                     "first judge's answer", "second judge's answer"])
    for pair in pairs:
        writer.writerow([pair.group, pair.id, pair.first, pair.second, pair.answer, pair.prompt, pair.first_output,
                         pair.second_output])
    return buffer.getvalue()


def agreement_figure(agreements: Sequence[Agreement], first: str, second: str) -> Figure:
    """Left: each group's score by either judge, with its 95 % interval; right: the overall ratings'
    confusion (the last agreement's), with exact agreement and kappa."""
    figure = new_figure(figsize=(13, 0.55 * len(agreements) + 3), layout="constrained")
    scores, confusion = figure.subplots(1, 2, width_ratios=(3, 2))
    positions = range(len(agreements))
    judges = ((f"run's judge: {first}", -0.15, [a.first_score for a in agreements],
               [a.first_interval for a in agreements]),
              (f"second judge: {second}", 0.15, [a.second_score for a in agreements],
               [a.second_interval for a in agreements]))
    for index, (label, offset, values, intervals) in enumerate(judges):
        low = [value - interval[0] for value, interval in zip(values, intervals)]
        high = [interval[1] - value for value, interval in zip(values, intervals)]
        scores.errorbar(values, [p + offset for p in positions], xerr=[low, high], fmt="o", color=colour(index),
                        capsize=3, label=f"{label} (95% interval)")
    scores.set_yticks(list(positions), [f"{a.group}\n{a.pairs} answers, {100 * a.exact:.0f}% alike, kappa "
                                        f"{format_value(a.kappa, '.2f')}" for a in agreements], fontsize=8)
    scores.invert_yaxis()
    top = max(a.scale * max(a.levels) for a in agreements)  # the best score
    scores.set_xlim(0, top)
    scores.set_xlabel(f"score (0-{top:g})")
    scores.grid(axis="x", alpha=0.3)
    overall = agreements[-1]
    counts = overall.confusion
    image = confusion.imshow(counts, cmap="Blues")
    labels = [f"{level:g}" for level in overall.levels]
    confusion.set_xticks(range(len(labels)), labels)
    confusion.set_yticks(range(len(labels)), labels)
    confusion.set_xlabel("second judge's rating")
    confusion.set_ylabel("run's judge's rating")
    peak = max(max(row) for row in counts) or 1
    for i, row in enumerate(counts):
        for j, count in enumerate(row):
            confusion.text(j, i, str(count), ha="center", va="center", fontsize=8,
                           color="white" if count > peak / 2 else NOTE_COLOUR)
    confusion.set_title(f"{overall.group}: {overall.pairs} answers, {100 * overall.exact:.1f}% rated alike, "
                        f"weighted kappa {format_value(overall.kappa, '.3f')}", fontsize=9)
    figure.colorbar(image, ax=confusion, label="answers", shrink=0.8)
    legend_above(figure, columns=2)
    return figure


def write_agreement(agreements: Sequence[Agreement], disagreed: Sequence[RatingPair], first: str, second: str,
                    output: str | Path) -> list[Path]:
    """The CSVs and the figure (PNG and SVG) in ``output``; returns their paths."""
    output = Path(output)
    files = [write_atomically(output / f"{STEM}.csv", agreement_csv(agreements)),
             write_atomically(output / "judge_disagreements.csv", disagreements_csv(disagreed))]
    figure = agreement_figure(agreements, first, second)
    files += [write_atomically(output / f"{STEM}.{suffix}", figure_bytes(figure, suffix)) for suffix in ("png", "svg")]
    return files


def _score(value: float, interval: tuple[float, float], spec: str = ".1f") -> str:
    return f"{value:{spec}} [{interval[0]:{spec}}, {interval[1]:{spec}}]"


def _flat(text: str) -> str:
    return " ".join(text.split())
