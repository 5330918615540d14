"""Every link of every Markdown file of the repository resolves: files and folders exist (inside the
repository), anchors name a heading (GitHub's slugs) or an ``<a id>`` of the file they point into.
Web addresses are not fetched (no network here): they are only required to be absolute."""

import ast
import re
import unicodedata
from pathlib import Path

import pytest

from lmms_egoplan.catalogue import CATALOGUE

ROOT = Path(__file__).resolve().parents[2]
_SKIPPED_PARTS = {"build", "dist", "node_modules", "__pycache__"}

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", re.MULTILINE)
_HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]+)\"", re.IGNORECASE)
_HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files(root: Path = ROOT) -> list[Path]:
    """The repository's Markdown files (hidden folders such as .venv and .git, and build output, left out)."""
    return sorted(path for path in root.rglob("*.md") if not any(
        part.startswith(".") or part in _SKIPPED_PARTS or part.endswith(".egg-info")
        for part in path.relative_to(root).parts[:-1]))


def _prose(text: str) -> str:
    """The text without code blocks and code spans (a link written there is an example, not a link)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation other than - and _ dropped,
    spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found, seen = set(), {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        base = slug(heading)
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found | set(_HTML_ANCHOR.findall(text))


def links(path: Path) -> list[str]:
    text = _prose(path.read_text(encoding="utf-8"))
    return _INLINE_LINK.findall(text) + _REFERENCE.findall(text) + _HTML_TARGET.findall(text)


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """``target: why`` for each link of ``path`` that does not resolve."""
    broken = []
    for target in links(path):
        if _SCHEME.match(target):
            if not re.match(r"^(https?://[^/\s]+\S*|mailto:\S+@\S+)$", target):
                broken.append(f"{target}: not an absolute web or mail address")
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if root.resolve() not in (linked, *linked.parents):
            broken.append(f"{target}: outside the repository")
        elif not linked.exists():
            broken.append(f"{target}: {linked.relative_to(root.resolve())} does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading or <a id> '{anchor}' in {linked.relative_to(root.resolve())}")
    return broken


def test_the_repository_has_its_markdown_files():
    names = {str(path.relative_to(ROOT)) for path in markdown_files()}
    assert {"README.md", "CHANGELOG.md", "docs/backend.md", "docs/judges.md", "docs/upstream.md", "docs/report.md",
            "docs/development.md", "docs/running.md",
            *(f"tasks/{row.name}/README.md" for row in CATALOGUE)} <= names  # each benchmark's, as the catalogue lists


def test_the_readmes_table_of_benchmarks_is_the_catalogues():
    """The README's table lists the benchmarks of the catalogue, in its order, each by its title and task README."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| \[([^\]]+)\]\(tasks/(\w+)/README\.md\) \|", readme, re.MULTILINE)
    assert rows == [(row.title, row.name) for row in CATALOGUE]


def test_the_readme_stays_a_users_page_of_at_most_300_lines():
    """Set-up, running and data; everything else lives in docs/, linked (issue 42)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move reference material to docs/ and link it"


@pytest.mark.parametrize("path", markdown_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_and_anchor_resolves(path):
    assert broken_links(path) == []


def test_the_checker_finds_what_it_must(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Backend: egoplan_hf\n\n## Text-only baselines (lm-eval)\n\n## Notes\n\n## Notes\n\n"
        '<a id="architectures"></a>**Architectures.** ...\n\n```\n# not a heading\n```\n')
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/guide.md#backend-egoplan_hf) [ok](docs/guide.md#text-only-baselines-lm-eval) "
        "[ok](docs/guide.md#notes-1) [ok](docs/guide.md#architectures) [ok](#title) [ok](https://example.org/x)\n"
        "# Title\n"
        "[bad](docs/guide.md#not-a-heading) [bad](docs/missing.md) [bad](#nowhere) [bad](../outside.md)\n"
        "`[not a link](nowhere.md)`\n\n[ref]: docs/gone.md\n")
    assert broken_links(page, tmp_path) == [
        "docs/guide.md#not-a-heading: no heading or <a id> 'not-a-heading' in docs/guide.md",
        "docs/missing.md: docs/missing.md does not exist", "#nowhere: no heading or <a id> 'nowhere' in README.md",
        "../outside.md: outside the repository", "docs/gone.md: docs/gone.md does not exist"]


_TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def test_every_exit_status_row_names_tests_that_exist_and_run_the_real_cli():
    """docs/running.md's exit-status table: each row names the tests (file::function) that show it, each
    in the end-to-end tier, tests/e2e/ (it runs the real lmms-eval CLI)."""
    text = (ROOT / "docs" / "running.md").read_text(encoding="utf-8")
    table = text[text.index("**Exit status**"):text.index("**Checked before the model loads.**")]
    rows = [line for line in table.splitlines() if re.match(r"^\| (0|1|3|4|143) \|", line)]
    assert {row.split("|")[1].strip() for row in rows} == {"0", "1", "3", "4", "143"}  # 2: no longer (issue 75)
    for row in rows:
        assert _named_tests(row, end_to_end=True), row


def _named_tests(row: str, *, end_to_end: bool) -> list[tuple[str, str]]:
    """The tests (``file::function``) a documentation row names; each must exist, and be in the
    end-to-end tier (tests/e2e/, the real CLI) where ``end_to_end``."""
    named = _TEST_REFERENCE.findall(row)
    for file, test in named:
        path = ROOT / file
        assert path.is_file(), f"{file} does not exist"
        functions = {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
                     if isinstance(node, ast.FunctionDef)}
        assert test in functions, f"{file}::{test} does not exist"
        assert not end_to_end or file.startswith("tests/e2e/"), f"{file}::{test} is not an end-to-end test"
    return named


def test_every_reliability_row_names_tests_that_exist_and_cli_rows_run_the_real_cli():
    """docs/reliability.md: each row of its tables names the tests that show it (file::function), which
    exist; a row marked *CLI* names at least one end-to-end test (tests/e2e/: the real lmms-eval CLI)."""
    text = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines()
            if line.startswith("| ") and not line.startswith(("| case ", "| --- "))]
    assert rows, "docs/reliability.md has no rows"
    for row in rows:
        named = _named_tests(row, end_to_end=False)
        assert named, f"names no test: {row}"
        if "*CLI*" in row:
            assert any(file.startswith("tests/e2e/") for file, _ in named), f"*CLI* but no end-to-end test: {row}"
