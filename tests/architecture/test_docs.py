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


# --- What the pages say of the code: settings, model_args, data sources, report tables -----------------------------

_NO_VALUE = {"", "—", "-", "(none)", "none", "empty", "(required)"}
_NO_DEFAULT = object()  # a cell of words (a default described, not written as a value): not compared


def _section(text: str, heading: str) -> str:
    """From ``heading`` (a line of its own) to the next heading of its level or above."""
    start = text.index(f"\n{heading}\n")
    level = heading.split(" ")[0]
    prose = _FENCE.sub(lambda block: re.sub(r"[^\n]", " ", block.group()), text)  # a comment in a block: no heading
    ends = [match.start() for match in re.finditer(r"^#{1,%d} " % len(level), prose[start + 1:], re.MULTILINE)]
    return text[start:start + 1 + ends[1]] if len(ends) > 1 else text[start:]


def documented_settings(section: str) -> dict[str, tuple[str, str]]:
    """``{setting: (its default cell, its whole row)}`` of the tables in ``section`` whose first column names
    settings in code spans (several in one cell: ``a`` / ``b`` with defaults ``x`` / ``y``)."""
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not re.fullmatch(r"`[\w*]+`(?:(?:, | / )`[\w*]+`)*", cells[0]):
            continue
        names = re.findall(r"`([\w*]+)`", cells[0])
        defaults = cells[1].split(" / ") if cells[1].count(" / ") == len(names) - 1 else [""] * len(names)
        rows.update((name, (default.strip(), line)) for name, default in zip(names, defaults))
    return rows


def _documented_value(cell: str):
    """The value a default cell writes (a code span, a number, true / false, a mark of no value), else _NO_DEFAULT."""
    text = cell.strip()
    if text.lower() in _NO_VALUE:
        return None
    if re.fullmatch(r"`[^`]*`", text):
        text = text[1:-1]
    elif not re.fullmatch(r"-?\d+(?:\.\d+)?|true|false", text):
        return _NO_DEFAULT
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _same_default(documented, default) -> bool:
    if default in ("", None) or documented is None:
        return default in ("", None) and documented is None
    if isinstance(default, bool) or isinstance(documented, bool):
        return documented == default
    if isinstance(default, (int, float)):
        return float(documented) == float(default)
    return documented == str(default)


def setting_problems(readme: str, settings_class: type, judges_page: str) -> list[str]:
    """What a benchmark README's Settings section gets wrong of ``settings_class``: a setting missing or unknown,
    a default that is not the code's, an allowed value not named; the judge's settings may be left to
    docs/judges.md (linked), whose table must then hold each of them with its default."""
    import dataclasses

    fields = {field.name: field for field in dataclasses.fields(settings_class)}
    rows = documented_settings(_section(readme, "### Settings"))
    judge_rows = documented_settings(judges_page)
    problems = [f"{name}: documented, not a setting" for name in rows if name not in fields and "*" not in name]
    for name, field in fields.items():
        judged_elsewhere = name.startswith("judge_") and name not in rows and "judges.md" in _section(
            readme, "### Settings")
        cell, row = (judge_rows if judged_elsewhere else rows).get(name, (None, None))
        if row is None:
            problems.append(f"{name}: not documented" + (" in docs/judges.md" if judged_elsewhere else ""))
            continue
        documented = _documented_value(cell)
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        if documented is not _NO_DEFAULT and not _same_default(documented, default):
            problems.append(f"{name}: documented default {cell!r}, the code's {default!r}")
        problems += [f"{name}: allowed value {choice!r} not named" for choice in field.metadata.get("choices", ())
                     if f"`{choice}`" not in row]
    return problems


@pytest.mark.parametrize("name", [row.name for row in CATALOGUE])
def test_each_benchmarks_readme_documents_its_settings_with_the_codes_defaults_and_choices(name):
    from lmms_egoplan.suite import benchmark

    readme = (ROOT / "tasks" / name / "README.md").read_text(encoding="utf-8")
    judges_page = (ROOT / "docs" / "judges.md").read_text(encoding="utf-8")
    assert setting_problems(readme, benchmark(name).settings, judges_page) == []


def test_the_settings_checker_finds_what_it_must():
    import dataclasses

    from lmms_egoplan.core.settings import setting

    @dataclasses.dataclass
    class Settings:
        frames: int = setting(8, minimum=1)
        source: str = setting("hub", choices=("hub", "local"))
        root: str = ""
        judge_model: str = "judge"
        judge_timeout: float = 120.0

    readme = ("# B\n\n### Settings\n\nJudge: [docs/judges.md](../../docs/judges.md).\n\n"
              "| setting | default | meaning |\n"
              "| --- | --- | --- |\n| `frames` | `16` | frames |\n| `source` | `hub` | `hub` only |\n"
              "| `gone` | `1` | no longer |\n\n### Next\n\n| `root` | — | after the section |\n")
    judges = "| `judge_model` / `judge_timeout` | `judge` / `60` | the judge |\n"
    assert setting_problems(readme, Settings, judges) == [
        "gone: documented, not a setting", "frames: documented default '`16`', the code's 8",
        "source: allowed value 'local' not named", "root: not documented",
        "judge_timeout: documented default '`60`', the code's 120.0"]


def _model_args_table(page: str, heading: str) -> str:
    """The first ``| model_args |`` table after ``heading``."""
    table = page[page.index(heading):]
    table = table[table.index("| model_args"):]
    return table[:table.index("\n\n")]


@pytest.mark.parametrize("backend, heading", [("egoplan_hf", "# Backend: egoplan_hf"),
                                              ("egoplan_server", "## Inference servers: egoplan_server")])
def test_the_backends_model_args_tables_are_their_signatures(backend, heading):
    """docs/backend.md's table of each suite backend names every model_arg it takes and none it does not
    (lmms-eval's own ``batch_size`` / ``max_batch_size``, passed to every backend, are its flags; a table row
    ``image_max_*`` stands for the names it matches)."""
    import fnmatch
    import inspect

    from lmms_egoplan.models.egoplan_hf import EgoPlanHF
    from lmms_egoplan.models.egoplan_server import EgoPlanServer

    cls = {"egoplan_hf": EgoPlanHF, "egoplan_server": EgoPlanServer}[backend]
    taken = {parameter.name for parameter in inspect.signature(cls.__init__).parameters.values()
             if parameter.kind is parameter.POSITIONAL_OR_KEYWORD} - {"self", "batch_size", "max_batch_size"}
    table = _model_args_table((ROOT / "docs" / "backend.md").read_text(encoding="utf-8"), heading)
    rows = {name for line in table.splitlines()[2:] for name in re.findall(r"`([\w*]+)`", line.split("|")[1])}
    assert {name for name in rows if "*" not in name} - taken == set()
    named = set(re.findall(r"`([\w*]+)`", table))  # a refused one (egoplan_server's api_key) in another's row
    assert {name for name in taken if not any(fnmatch.fnmatch(name, pattern) for pattern in named)} == set()


def test_the_data_pages_prepare_table_lists_every_benchmark_and_its_hub_datasets():
    """docs/data.md's table of what ``prepare`` fetches and lists: a row per benchmark, the catalogue's order,
    each naming every Hub dataset its ``DataSources`` fetches."""
    from lmms_egoplan.suite import benchmark

    page = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*)$", _section(page, "## prepare"), re.MULTILINE))
    assert list(rows) == [row.name for row in CATALOGUE]
    for name, row in rows.items():
        assert [hub.repo_id for hub in benchmark(name).data.hub if f"`{hub.repo_id}`" not in row] == [], name


def test_the_report_page_names_every_benchmarks_table_and_main_score():
    """docs/report.md's account of report.md and report.html names each benchmark's table (by its title) and each
    table's main score is there too."""
    page = (ROOT / "docs" / "report.md").read_text(encoding="utf-8")
    files = page[page.index("- `report.md`:"):page.index("Every file is written")]
    html = files[files.index("- `report.html`:"):]
    for text in files[:files.index("- a CSV per table")], html:  # EgoPlan-Bench, not EgoPlan-Bench2's
        assert [row.title for row in CATALOGUE if not re.search(rf"{re.escape(row.title)}(?![\w-])", text)] == []


_RUN = re.compile(r"(?:\blmms-eval|-m lmms_eval)\s.*?--tasks\s+(\S+)")


def suite_task_names() -> set[str]:
    """Every task and group the suite's lmms-eval YAMLs declare, members of groups included."""
    return {name for path in (ROOT / "tasks").glob("*/*yaml")
            for name in re.findall(r"^(?:task|group): (\w+)$", path.read_text(encoding="utf-8"), re.MULTILINE)}


def runs_without_the_plugin(text: str, suite_tasks: set[str]) -> list[str]:
    """The command lines of ``text``'s code blocks that run a suite task before the page has set
    ``LMMS_EVAL_PLUGINS=lmms_egoplan`` (in that line, or above it on the page), unless their block names an
    include path: lmms-eval finds the suite's tasks through one or the other, else "Tasks not found"."""
    found, plugin_set = [], False
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        by_path = re.search(r"--include[_-]path", block)
        for line in block.replace("\\\n", " ").splitlines():
            plugin_set = plugin_set or "LMMS_EVAL_PLUGINS=lmms_egoplan" in line
            run = _RUN.search(line)
            if run and not plugin_set and not by_path and suite_tasks & set(run.group(1).split(",")):
                found.append(" ".join(line.split())[:100])
    return found


_USER_PAGES = [path for path in markdown_files() if path.parent.name != "upstream" and path.name != "upstream.md"
               and (path.name == "README.md" or path.parent.name == "docs")]  # upstream.md: lmms-eval alone


@pytest.mark.parametrize("path", _USER_PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_documented_run_of_a_suite_task_has_the_plugin_variable_set(path):
    assert runs_without_the_plugin(path.read_text(encoding="utf-8"), suite_task_names()) == []


def test_the_plugin_checker_finds_what_it_must():
    page = ("```bash\nlmms-eval --model m --tasks seedbench,egoplan_val \\\n  --log_samples\n```\n"
            "```bash\nlmms-eval --include_path configs --tasks egoplan_val\n```\n"
            "```bash\nexport LMMS_EVAL_PLUGINS=lmms_egoplan\n```\n"
            "```bash\nlmms-eval --model m --tasks ego_think\n```\n")
    assert runs_without_the_plugin(page, {"egoplan_val", "ego_think"}) == [
        "lmms-eval --model m --tasks seedbench,egoplan_val --log_samples"]


@pytest.mark.parametrize("name", [row.name for row in CATALOGUE])
def test_each_benchmarks_readme_gives_gpu_commands_for_its_own_tasks(name):
    """Its Running on a GPU section runs its tasks (names its YAMLs declare) through lmms-eval."""
    section = _section((ROOT / "tasks" / name / "README.md").read_text(encoding="utf-8"), "### Running on a GPU")
    named = {task for tasks in _RUN.findall(section.replace("\\\n", " ")) for task in tasks.split(",")}
    assert named and named <= suite_task_names(), named
