"""Screenshots of a report as a browser shows it (headless Chromium), to look at before shipping.

    python -m lmms_egoplan.report.screenshots REPORT_DIR [--output DIR] [--width 1400]

Writes into ``--output`` (default ``REPORT_DIR/screenshots``) ``report.png``, the whole of
``report.html`` in a window ``--width`` pixels wide (a wide table scrolls in its own box there),
``report-unrolled.png``, the page with every table unrolled (the window as wide as the widest
table: every column of every table shows), and ``<figure>.png`` for each ``<figure>.svg`` as the
browser renders it; prints the page's size and exits 1 if the page is wider than the window (it
would scroll sideways) or a table's main score or a "not scored" reason is out of view. Needs a
Chromium (``chromium`` on the PATH, Debian's package; or ``--chromium PATH``). Nothing is fetched:
the report is one self-contained page.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Headless, offline and quiet: no sandbox (containers), no GPU, no background traffic, no first-run UI.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars")
_MEASURE = ("<script>window.addEventListener('load',()=>{const e=document.documentElement;"
            "document.body.setAttribute('data-page-size',e.scrollWidth+'x'+e.scrollHeight)})</script>")


@dataclass(frozen=True)
class PageSize:
    width: int
    height: int


def find_chromium(given: str | None = None) -> str:
    found = given or next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    if not found:
        raise FileNotFoundError(f"no Chromium found (tried {', '.join(CHROMIUM_NAMES)}): install one "
                                "(Debian: apt-get install chromium) or pass --chromium")
    return found


def _chromium(chromium: str, profile: Path, window: tuple[int, int], *args: str) -> str:
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={window[0]},{window[1]}", *args]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if completed.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({completed.returncode}):\n{completed.stderr[-2000:]}")
    return completed.stdout


# Tables out of their scroll boxes, the page as wide as its widest table.
_UNROLLED = ("<style>.table-box{overflow:visible!important;max-width:none!important}"
             "body{width:max-content;max-width:none}</style>")


def rendered_dom(html: Path, width: int, chromium: str, profile: Path) -> str:
    """The page's document as the browser holds it once loaded and its scripts (if any) have run, serialised."""
    return _chromium(chromium, profile, (width, 900), "--virtual-time-budget=5000", "--dump-dom", html.as_uri())


def page_size(html: Path, width: int, chromium: str, profile: Path) -> PageSize:
    """The page's scroll width and height in a window ``width`` pixels wide."""
    with tempfile.TemporaryDirectory() as scratch:
        measured = Path(scratch) / html.name  # a copy with a measuring script; the report stays as written
        measured.write_text(html.read_text(encoding="utf-8").replace("</body>", _MEASURE + "</body>"), encoding="utf-8")
        dom = rendered_dom(measured, width, chromium, profile)
    match = re.search(r'data-page-size="(\d+)x(\d+)"', dom)
    if not match:
        raise RuntimeError(f"could not measure {html} (no size in the rendered page)")
    return PageSize(int(match.group(1)), int(match.group(2)))


# Where the page shows each table's second column (its main score, report.html's layout) and each "not scored"
# footnote, against the right edge of what the window shows of them (a table's own box scrolls sideways).
_LAYOUT = ("<script>window.addEventListener('load',()=>{const w=document.documentElement.clientWidth;"
           "const right=e=>e.getBoundingClientRect().right;const out={page:document.documentElement.scrollWidth,"
           "window:w,tables:[],reasons:[]};for(const t of document.querySelectorAll('table')){"
           "const edge=Math.min(w,right(t.closest('.table-box')||t));const second=[...t.rows].map(r=>r.cells[1]);"
           "out.tables.push({id:t.id,main:second[0].textContent,right:Math.max(...second.map(right)),edge:edge})}"
           "for(const li of document.querySelectorAll('ol.notes li')){if(li.textContent.startsWith('not scored')){"
           "const r=document.createRange();r.selectNodeContents(li);"
           "out.reasons.push({text:li.textContent,right:r.getBoundingClientRect().right,edge:w})}}"
           "document.body.setAttribute('data-layout',JSON.stringify(out))})</script>")


def page_layout(html: Path, width: int, chromium: str, profile: Path) -> dict:
    """Where a window ``width`` pixels wide shows report.html's parts: ``page`` (its scroll width),
    ``tables`` (each table's id, the header of its second column, the main score's, and that column's
    right edge beside the ``edge`` of what the window shows of the table), ``reasons`` (each "not scored"
    footnote's text and right edge beside the window's)."""
    import html as html_text
    import json

    with tempfile.TemporaryDirectory() as scratch:
        measured = Path(scratch) / html.name
        measured.write_text(html.read_text(encoding="utf-8").replace("</body>", _LAYOUT + "</body>"), encoding="utf-8")
        dom = rendered_dom(measured, width, chromium, profile)
    match = re.search(r'data-layout="([^"]*)"', dom)
    if not match:
        raise RuntimeError(f"could not measure {html} (no layout in the rendered page)")
    return json.loads(html_text.unescape(match.group(1)))


def svg_size(svg: Path) -> tuple[int, int]:
    """An SVG's width and height in CSS pixels (matplotlib writes them in pt)."""
    head = svg.read_text(encoding="utf-8")[:2000]
    width, height = (float(re.search(rf'{name}="([\d.]+)pt"', head).group(1)) * 4 / 3 for name in ("width", "height"))
    return round(width) + 16, round(height) + 16


def take_screenshots(report_dir: str | Path, output: str | Path | None = None, *, width: int = 1400,
                     chromium: str | None = None) -> tuple[PageSize, list[Path]]:
    """Screenshot ``report.html`` (whole page) and every figure's SVG; returns the page size and the PNGs."""
    report_dir = Path(report_dir).resolve()  # a file URI names an absolute path
    output = Path(output).resolve() if output else report_dir / "screenshots"
    output.mkdir(parents=True, exist_ok=True)
    chromium = find_chromium(chromium)
    html = report_dir / "report.html"
    if not html.is_file():
        raise FileNotFoundError(f"{html} not found: write a report first (lmms-egoplan report ... --output "
                                f"{report_dir})")
    shots = []
    with tempfile.TemporaryDirectory() as profile:
        size = page_size(html, width, chromium, Path(profile))
        shots.append(output / "report.png")
        _chromium(chromium, Path(profile), (width, size.height), f"--screenshot={shots[-1]}", html.as_uri())
        unrolled = output / "report-unrolled.html"  # beside the screenshots: the report folder stays as written
        unrolled.write_text(html.read_text(encoding="utf-8").replace("</head>", _UNROLLED + "</head>"),
                            encoding="utf-8")
        full = page_size(unrolled, width, chromium, Path(profile))
        shots.append(output / "report-unrolled.png")
        _chromium(chromium, Path(profile), (max(width, full.width), full.height), f"--screenshot={shots[-1]}",
                  unrolled.as_uri())
        unrolled.unlink()
        for svg in sorted(report_dir.glob("*.svg")):
            shots.append(output / f"{svg.stem}.png")
            _chromium(chromium, Path(profile), svg_size(svg), f"--screenshot={shots[-1]}", svg.as_uri())
    return size, shots


# Headless Chromium lays a page out at least this wide, whatever --window-size says: a narrower window would be
# a crop of this layout, its sideways scrolling misreported.
NARROWEST_WINDOW = 500


def _window_width(text: str) -> int:
    width = int(text)
    if width < NARROWEST_WINDOW:
        raise argparse.ArgumentTypeError(f"headless Chromium lays pages out at least {NARROWEST_WINDOW} px wide; "
                                         f"got {width}")
    return width


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lmms_egoplan.report.screenshots",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("report_dir", help="a folder written by lmms-egoplan report (report.html, *.svg)")
    parser.add_argument("--output", help="where the PNGs go (default: REPORT_DIR/screenshots)")
    parser.add_argument("--width", type=_window_width, default=1400,
                        help=f"browser window width in pixels, at least {NARROWEST_WINDOW} (default 1400)")
    parser.add_argument("--chromium", help="the Chromium executable (default: found on the PATH)")
    args = parser.parse_args(argv)
    size, shots = take_screenshots(args.report_dir, args.output, width=args.width, chromium=args.chromium)
    for shot in shots:
        print(shot)
    fits = size.width <= args.width
    print(f"report.html at {args.width} px: {size.width} x {size.height} px, "
          + ("no horizontal scrolling" if fits else f"SCROLLS SIDEWAYS ({size.width - args.width} px too wide)"))
    with tempfile.TemporaryDirectory() as profile:
        layout = page_layout(Path(args.report_dir) / "report.html", args.width, find_chromium(args.chromium),
                             Path(profile))
    hidden = [f"{part.get('id', 'a not-scored footnote')}: {part.get('main') or part.get('text')}"
              for part in (*layout["tables"], *layout["reasons"]) if part["right"] > part["edge"]]
    print("every main score and 'not scored' reason in view" if not hidden
          else "OUT OF VIEW without scrolling sideways: " + "; ".join(hidden))
    return 0 if fits and not hidden else 1


if __name__ == "__main__":
    sys.exit(main())
