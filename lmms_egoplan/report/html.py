"""``report.html``: one self-contained page (tables, and figures embedded as inline SVG)."""

from __future__ import annotations

import html
import io

from matplotlib.figure import Figure

from lmms_egoplan.report.tables import JUDGE_COLUMN, Table, header, row_cells

# The page never scrolls sideways: a table wider than the window scrolls inside its own box, figures
# shrink to the page's width. Numbers stay on one line; the text columns wrap.
_STYLE = ("body{font-family:sans-serif;margin:2em auto;padding:0 2em;max-width:1600px;box-sizing:border-box}"
          ".table-box{overflow-x:auto;max-width:100%}"
          "table{border-collapse:collapse;font-size:12px}"
          "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap;vertical-align:top}"
          "th{background:#eee;white-space:normal;min-width:5em}td:nth-child(-n+5),th{text-align:left}"
          "td:nth-child(1){white-space:normal;min-width:15em}td:nth-child(4){white-space:normal;min-width:7em}"
          "td:last-child,td.wrap{white-space:normal;min-width:15em;text-align:left}"
          "tr.published{color:#666}tr.published td{background:#f6f6f6}"
          "figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:13px}")


def figure_bytes(figure: Figure, file_format: str) -> bytes:
    """The figure as a PNG or SVG file; the bounding box grows to hold every label (none clipped)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=file_format, dpi=120, bbox_inches="tight", pad_inches=0.1)
    return buffer.getvalue()


def svg_text(figure: Figure) -> str:
    text = figure_bytes(figure, "svg").decode("utf-8")
    return text[text.index("<svg"):]  # inline: without the XML declaration and doctype


def html_table(table: Table) -> str:
    names = header(table)
    lines = [f'<div class="table-box"><table id="table-{table.name}"><tr>'
             + "".join(f"<th>{html.escape(h)}</th>" for h in names) + "</tr>"]
    wrapped = [' class="wrap"' if name == JUDGE_COLUMN else "" for name in names]  # text that wraps
    for row in table.rows:
        css = ' class="published"' if row.published else ""
        lines.append(f"<tr{css}>" + "".join(f"<td{wrap}>{html.escape(cell)}</td>"
                                            for wrap, cell in zip(wrapped, row_cells(table, row))) + "</tr>")
    return "\n".join(lines) + "\n</table></div>"


def html_page(title: str, preamble: list[str], sections: list[tuple[Table, dict[str, Figure]]]) -> str:
    body = [f"<h1>{html.escape(title)}</h1>", *(f"<p>{html.escape(line)}</p>" for line in preamble)]
    for table, figures in sections:
        body += [f"<h2>{html.escape(table.layout.title)}</h2>",
                 f"<p>Layout of {html.escape(table.layout.source)}.</p>",
                 *(f"<p>{html.escape(note)}</p>" for note in table.layout.notes), html_table(table)]
        body += [f'<figure id="figure-{name}">{svg_text(figure)}<figcaption>also as {html.escape(name)}.png and '
                 f'{html.escape(name)}.svg beside this page</figcaption></figure>'
                 for name, figure in figures.items()]
    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
