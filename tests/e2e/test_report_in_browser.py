"""The report page in headless Chromium: it fits 1,400 pixels, each table's main score is its second
column and in view with every "not scored" reason, every figure renders, and model names, settings and
paths holding markup stay text. CI installs Chromium (.ci/run), where a missing one fails
the test (LMMS_EGOPLAN_REQUIRE_CHROMIUM=1); elsewhere it is skipped, saying how to install one."""
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from lmms_egoplan.report import write_report
from tests.report.test_report import FACES, egoplan_run, write_lmms_eval_run, write_results_tree

# Markup that would change the page if it were read as markup: each marks the body when it runs.
SCRIPT = "<script>document.body.setAttribute('data-marked','by-script')</script>"
IMAGE = "<img src=x onerror=\"document.body.setAttribute('data-marked','by-image')\">"


@pytest.fixture
def results_tree(tmp_path):
    root = write_results_tree(tmp_path / "results")
    hostile = root / "<i>runs</i>"  # a folder holding a file that cannot be read: named with its path
    egoplan_run(hostile, model_path=SCRIPT, settings={"note": IMAGE})
    egoplan_run(root / "plain", model_path=SCRIPT, settings={"note": "plain"})  # rows labelled with the note
    (hostile / "20250101_000000_results.json").write_text(json.dumps({"results": {}, "config": IMAGE}))
    write_lmms_eval_run(root / "unscored", "20260101_150000", {  # scores that measure nothing, and why
        "egointent": {"overall": 0.0, "local_intent": 0.0, "global_intent": 0.0, "next_step_plan": 0.0,
                      "judged": 0, "failed": 0, "incomplete_answers": 4},
        "egoplan_val_gen": {"accuracy": 0.0, "predictions": 8, "unparseable": 8.0},
        "actplan1k": {"lcs": 0.0, "norm_lcs": 0.0, "plan_length": 0.0, "no_plan_rate": 1.0}},
        n_samples={task: {"original": 4, "effective": 4} for task in ("egointent", "actplan1k")},
        model_path="/ckpt/unscored-model")
    return root


def chromium_or_skip() -> None:
    from lmms_egoplan.report import screenshots

    try:
        screenshots.find_chromium()
    except FileNotFoundError as missing:
        if os.environ.get("LMMS_EGOPLAN_REQUIRE_CHROMIUM") == "1":
            pytest.fail(f"{missing} (LMMS_EGOPLAN_REQUIRE_CHROMIUM=1: CI installs it)")
        pytest.skip(str(missing))


def test_in_a_browser_the_page_fits_1400_pixels_every_figure_renders_and_markup_stays_text(results_tree, tmp_path,
                                                                                            capsys):
    """The screenshots are what a developer looks at (python -m lmms_egoplan.report.screenshots, run here)."""
    from PIL import Image

    from lmms_egoplan.report import screenshots

    chromium_or_skip()
    report = write_report([results_tree], tmp_path / "report", FACES)
    assert screenshots.main([str(tmp_path / "report"), "--output", str(tmp_path / "shots")]) == 0
    printed = capsys.readouterr().out
    shots = [Path(line) for line in printed.splitlines() if line.endswith(".png")]
    size = re.search(r"^report\.html at 1400 px: (\d+) x (\d+) px, no horizontal scrolling$", printed, re.MULTILINE)
    assert size and int(size[1]) <= 1400 < int(size[2]), printed  # no sideways scrolling; every table and figure below
    assert "every main score and 'not scored' reason in view" in printed
    figures = sorted(path.stem for path in report.files if path.suffix == ".svg")
    assert [shot.name for shot in shots] == ["report.png", "report-unrolled.png", *(f"{name}.png" for name in figures)]
    for shot in shots:
        with Image.open(shot) as image:
            assert len(image.convert("L").getcolors(256)) > 10, shot  # drawn, not a blank page
    with Image.open(shots[1]) as unrolled:  # every column of the widest table (EgoThink's 19 columns and notes)
        assert unrolled.width > 1400

    # each table's main score right after the model's name, and in view with every "not scored" reason
    with tempfile.TemporaryDirectory() as profile:
        layout = screenshots.page_layout(report.html, 1400, screenshots.find_chromium(), Path(profile))
    assert layout["page"] <= 1400 == layout["window"]
    mains = {f"table-{table.key}": face.heading(table.columns[table.main_column]) for face in FACES
             for table in face.tables}
    assert {table["id"]: table["main"] for table in layout["tables"]} == mains
    assert mains["table-ego_think"] == "Average (0-100)" and mains["table-egointent"] == "Overall (0-100)"
    assert all(table["right"] <= table["edge"] for table in layout["tables"]), layout["tables"]
    assert {reason["text"] for reason in layout["reasons"]} >= {
        "not scored: 8 of 8 answers unparseable", "not scored: 0 judged: 4 of 4 answers incomplete",
        "not scored: no plan in 4 of 4 outputs"}
    assert all(reason["right"] <= reason["edge"] for reason in layout["reasons"]), layout["reasons"]

    with tempfile.TemporaryDirectory() as profile:
        dom = screenshots.rendered_dom(report.html, 1400, screenshots.find_chromium(), Path(profile))
    assert "data-marked=" not in dom and "<img" not in dom  # no script ran, no image was made
    assert "&lt;script&gt;document.body.setAttribute('data-marked','by-script')&lt;/script&gt;" in dom  # shown as text
    assert "(note &lt;img src=x onerror=" in dom and "&lt;i&gt;runs&lt;/i&gt;/20250101_000000_results.json" in dom


# After load: every table box scrolled to its right end; where each model cell then stands against its box's left
# edge, and whether the box scrolled at all.
_SCROLL_PROBE = ("<script>window.addEventListener('load',()=>{const found=[];"
                 "for(const box of document.querySelectorAll('.table-box')){const start=box.scrollLeft;"
                 "box.scrollLeft=box.scrollWidth;const cell=box.querySelector('td.model');"
                 "found.push((box.scrollLeft>start?'scrolled:':'fits:')+Math.round(cell.getBoundingClientRect().left"
                 "-box.getBoundingClientRect().left))}document.body.setAttribute('data-model-left',found.join(','))})"
                 "</script>")


def test_a_wide_tables_model_column_stays_in_view_as_it_scrolls_and_the_contents_link_every_table(
        results_tree, tmp_path, monkeypatch, capsys):
    """A published row's one value may sit thousands of pixels to the right: its model's name stays beside it. The
    screenshot tool takes a report folder named relative to the working folder, and refuses a window narrower than
    headless Chromium lays pages out at."""
    from lmms_egoplan.report import screenshots

    chromium_or_skip()
    report = write_report([results_tree], tmp_path / "report", FACES)
    page = report.html.read_text(encoding="utf-8")
    probe = tmp_path / "report" / "probe.html"
    probe.write_text(page.replace("</body>", _SCROLL_PROBE + "</body>"), encoding="utf-8")
    with tempfile.TemporaryDirectory() as profile:
        dom = screenshots.rendered_dom(probe, 1400, screenshots.find_chromium(), Path(profile))
    found = re.search(r'data-model-left="([^"]*)"', dom)[1].split(",")
    scrolled = [int(item.split(":")[1]) for item in found if item.startswith("scrolled:")]
    assert scrolled and all(abs(left) <= 1 for left in scrolled), found
    sections = re.findall(r'<h2 id="section-([\w-]+)">', page)
    assert sections and re.findall(r'<li><a href="#section-([\w-]+)">', page) == sections
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page

    probe.unlink()
    monkeypatch.chdir(tmp_path)
    assert screenshots.main(["report", "--output", "shots"]) == 0 and (tmp_path / "shots" / "report.png").is_file()
    with pytest.raises(SystemExit) as refused:
        screenshots.main(["report", "--width", "390"])
    assert refused.value.code == 2 and "headless Chromium lays pages out at least 500 px wide; got 390" in \
        capsys.readouterr().err
