"""``report.html``: one self-contained page (tables, and figures embedded as inline SVG)."""

from __future__ import annotations

import html
import io

from matplotlib.figure import Figure

from lmms_egoplan.report.tables import Table, cell_text, run_text

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;font-size:13px}"
          "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:nth-child(-n+5),th{text-align:left}"
          "tr.published{color:#555;background:#f6f6f6}figure{margin:1em 0}")


def svg_text(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # inline: without the XML declaration and doctype


def html_table(table: Table) -> str:
    columns = table.benchmark.columns
    header = ["source", "model", "task", "input", "run", *(c.header for c in columns), "notes"]
    lines = [f'<table id="table-{table.name}"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in table.rows:
        cells = [row.source, row.model, row.task, row.input, run_text(row),
                 *(cell_text(v, c, i) for v, c, i in zip(row.values, columns, row.intervals)), "; ".join(row.notes)]
        css = ' class="published"' if row.published else ""
        lines.append(f"<tr{css}>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in cells) + "</tr>")
    return "\n".join(lines) + "\n</table>"


def html_page(title: str, preamble: list[str], sections: list[tuple[Table, dict[str, Figure]]]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(line)}</p>" for line in preamble)]
    for table, figures in sections:
        body += [f"<h2>{html.escape(table.benchmark.title)}</h2>",
                 f"<p>Layout of {html.escape(table.benchmark.source)}.</p>", html_table(table)]
        body += [f'<figure id="figure-{name}">{svg_text(figure)}<figcaption>{html.escape(name)}</figcaption></figure>'
                 for name, figure in figures.items()]
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
