"""The report page in headless Chromium: it fits 1,400 pixels and every figure renders."""
import pytest

from lmms_egoplan.report import write_report
from tests.report.test_report import FACES, write_results_tree


@pytest.fixture
def results_tree(tmp_path):
    return write_results_tree(tmp_path / "results")


def test_in_a_browser_the_page_fits_1400_pixels_and_every_figure_renders(results_tree, tmp_path):
    """Headless Chromium, where one is installed (Debian: apt-get install chromium); the screenshots
    are what a developer looks at (python -m lmms_egoplan.report.screenshots)."""
    from PIL import Image

    from lmms_egoplan.report import screenshots

    try:
        screenshots.find_chromium()
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    report = write_report([results_tree], tmp_path / "report", FACES)
    size, shots = screenshots.take_screenshots(tmp_path / "report", tmp_path / "shots", width=1400)
    assert size.width <= 1400 and size.height > 1400  # no sideways scrolling; every table and figure below
    figures = sorted(path.stem for path in report.files if path.suffix == ".svg")
    assert [shot.name for shot in shots] == ["report.png", "report-unrolled.png", *(f"{name}.png" for name in figures)]
    for shot in shots:
        with Image.open(shot) as image:
            assert len(set(image.convert("L").getdata())) > 10, shot  # drawn, not a blank page
    with Image.open(shots[1]) as unrolled:  # every column of the widest table (EgoThink's 19 columns and notes)
        assert unrolled.width > 1400
    assert screenshots.main([str(tmp_path / "report"), "--output", str(tmp_path / "again")]) == 0
