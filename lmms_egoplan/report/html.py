"""``report.html``: one self-contained page (tables, and figures embedded as inline SVG)."""

from __future__ import annotations

import html
import io

from matplotlib.figure import Figure

from lmms_egoplan.report.tables import JUDGE_COLUMN, Row, Table, cell_text, run_text, value_order

# The page never scrolls sideways: a table wider than the window scrolls inside its own box, its model column staying
# in view; figures shrink to the page's width, down to a width their labels stay readable at (narrower, they scroll
# in their own box). Each table starts with the model and its main score (visible in any window); numbers stay on
# one line, the text columns wrap; a row's judge and notes are footnotes below its table, marked beside the model's
# name. A contents list links every table.
_STYLE = ("body{font-family:sans-serif;margin:2em auto;padding:0 2em;max-width:1600px;box-sizing:border-box}"
          ".table-box{overflow-x:auto;max-width:100%}"
          "table{border-collapse:collapse;font-size:12px}"
          "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap;vertical-align:top}"
          "th{background:#eee;white-space:normal;min-width:4em;text-align:left}"
          "td.text{white-space:normal;text-align:left;min-width:7em}"
          "td.source{white-space:normal;text-align:left;min-width:18em}"
          "td.model{white-space:normal;text-align:left;min-width:14em;max-width:22em}th span{white-space:nowrap}"
          "td.model,th:first-child{position:sticky;left:0;z-index:1}td.model{background:#fff}"
          "td.model sup{font-size:10px;white-space:nowrap}td.main,th.main{font-weight:bold}"
          "tr.published{color:#666}tr.published td{background:#f6f6f6}"
          "ol.notes{font-size:12px;color:#333;margin:0.5em 0 1em;padding-left:2.5em}ol.notes li{margin:1px 0}"
          "figure{margin:1em 0;overflow-x:auto}figure svg{max-width:100%;min-width:560px;height:auto}"
          "figcaption{color:#555;font-size:13px}nav li{margin:2px 0}")


def figure_bytes(figure: Figure, file_format: str) -> bytes:
    """The figure as a PNG or SVG file; the bounding box grows to hold every label (none clipped)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=file_format, dpi=120, bbox_inches="tight", pad_inches=0.1)
    return buffer.getvalue()


def svg_text(figure: Figure) -> str:
    text = figure_bytes(figure, "svg").decode("utf-8")
    return text[text.index("<svg"):]  # inline: without the XML declaration and doctype


_MAIN, _PUBLISHED = ' class="main"', ' class="published"'


def _heading(text: str) -> str:
    """A column's header, its unit ("(0-100)") kept on one line."""
    name, bracket, unit = text.rpartition(" (")
    return f"{html.escape(name)} <span>({html.escape(unit)}</span>" if bracket else html.escape(text)


def row_footnotes(table: Table, row: Row) -> list[str]:
    """What the page says of a row below its table: its judge (a judged table's), then its notes."""
    return [*([f"{JUDGE_COLUMN}: {row.judge}"] if table.layout.judged and row.judge else []), *row.notes]


def html_table(table: Table) -> str:
    """The table: model, main score, task, input, the other values, source and run; the judge and notes
    as numbered footnotes below it (a text shared by rows is one footnote)."""
    order = value_order(table)
    headings = [table.face.heading(column) for column in table.layout.columns]
    names = ["model", headings[order[0]], "task", "input", *(headings[i] for i in order[1:]), "source", "run"]
    lines = [f'<div class="table-box"><table id="table-{table.name}"><tr>'
             + "".join(f"<th{_MAIN if i == 1 else ''}>{_heading(h)}</th>" for i, h in enumerate(names)) + "</tr>"]
    footnotes: dict[str, int] = {}
    for row in table.rows:
        marks = [footnotes.setdefault(text, len(footnotes) + 1) for text in row_footnotes(table, row)]
        model = html.escape(row.model) + (" <sup>" + " ".join(
            f'<a href="#note-{table.name}-{n}">[{n}]</a>' for n in dict.fromkeys(marks)) + "</sup>" if marks else "")
        values = [cell_text(*cell) for cell in zip(row.values, table.layout.columns, row.intervals,
                                                   row.unscored or [None] * len(row.values))]
        cells = [f'<td class="model">{model}</td>', f"<td{_MAIN}>{html.escape(values[order[0]])}</td>",
                 *(f'<td class="text">{html.escape(text)}</td>' for text in (row.task, row.input)),
                 *(f"<td>{html.escape(values[i])}</td>" for i in order[1:]),
                 f'<td class="source">{html.escape(row.source)}</td>',
                 f"<td>{html.escape(run_text(row))}</td>"]
        lines.append(f"<tr{_PUBLISHED if row.published else ''}>" + "".join(cells) + "</tr>")
    lines.append("</table></div>")
    if footnotes:
        lines.append(f'<ol class="notes" id="notes-{table.name}">' + "".join(
            f'<li id="note-{table.name}-{n}">{html.escape(text)}</li>' for text, n in footnotes.items()) + "</ol>")
    return "\n".join(lines)


def html_page(title: str, preamble: list[str], sections: list[tuple[Table, dict[str, Figure]]]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(line)}</p>" for line in preamble),
            "<nav><p>Tables:</p><ul>" + "".join(f'<li><a href="#section-{table.name}">'
                                                f"{html.escape(table.layout.title)}</a></li>"
                                                for table, _ in sections) + "</ul></nav>"]
    for table, figures in sections:
        body += [f'<h2 id="section-{table.name}">{html.escape(table.layout.title)}</h2>',
                 f"<p>Layout of {html.escape(table.layout.source)}.</p>",
                 *(f"<p>{html.escape(note)}</p>" for note in table.layout.notes), html_table(table)]
        body += [f'<figure id="figure-{name}">{svg_text(figure)}<figcaption>also as {html.escape(name)}.png and '
                 f'{html.escape(name)}.svg beside this page</figcaption></figure>'
                 for name, figure in figures.items()]
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
