"""Every dotted reference to the package in its docstrings and comments (``harness.run_files.run_file``,
``lmms_egoplan.core.media``, ``data.load_release`` from a module of the same package) names a module, and a name in
it, that exists: a module moved or a function renamed leaves no pointer to nothing behind."""

import ast
import re
from functools import lru_cache
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
PACKAGE = CHECKOUT / "lmms_egoplan"
REFERENCE = re.compile(r"``([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)``")
# ``robovqa.yaml``, ``published_results.json``: files, not names
FILE_SUFFIXES = {"json", "jsonl", "yaml", "yml", "png", "svg", "md", "py", "csv", "html", "txt", "mp4", "parquet"}
# Folders the wheel installs under the package (setup.py), absent from the source tree as modules
INSTALLED_FOLDERS = {"lmms_egoplan.docs"}


def _module_file(dotted: str) -> Path | None:
    path = CHECKOUT.joinpath(*dotted.split("."))
    return next((candidate for candidate in (path.with_suffix(".py"), path / "__init__.py") if candidate.is_file()),
                None)


@lru_cache(maxsize=None)
def _defined_names(path: Path) -> frozenset[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[-1])
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return frozenset(names)


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (from ``lmms_egoplan``) is a module, or a module and a name defined in it (its further
    parts, an attribute's attribute, are not followed)."""
    if dotted in INSTALLED_FOLDERS:
        return True
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _module_file(".".join(parts[:cut]))
        if module is not None:
            rest = parts[cut:]
            return not rest or rest[0] in _defined_names(module) or (module.parent / rest[0]).exists()
    return False


def broken_references(path: Path) -> list[str]:
    """The dotted references of ``path`` to the package that resolve to nothing, as "file:line: reference". A
    reference starts at ``lmms_egoplan``, at a module of the package's top level, or at a module beside ``path``;
    other dotted words (``metadata.skip_missing``, ``lmms_eval.api``) are not the package's."""
    top = {entry.stem for entry in PACKAGE.iterdir() if entry.suffix == ".py" or (entry / "__init__.py").is_file()}
    siblings = {entry.stem for entry in path.parent.iterdir()
                if entry.suffix == ".py" or (entry / "__init__.py").is_file()} if path.parent != PACKAGE else set()
    package = ".".join(path.parent.relative_to(CHECKOUT).parts)
    broken = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for reference in REFERENCE.findall(line):
            first, last = reference.split(".")[0], reference.split(".")[-1]
            if last in FILE_SUFFIXES:
                continue
            if first == "lmms_egoplan":
                candidates = [reference]
            elif first in siblings or first in top:
                candidates = [f"{package}.{reference}"] * (first in siblings) + [f"lmms_egoplan.{reference}"] * (
                    first in top)
            else:
                continue
            if not any(resolves(candidate) for candidate in candidates):
                broken.append(f"{path.relative_to(CHECKOUT)}:{number}: {reference}")
    return broken


def test_every_dotted_reference_to_the_package_names_what_exists():
    broken = [problem for path in sorted(PACKAGE.rglob("*.py")) for problem in broken_references(path)]
    assert broken == []


def test_the_checker_finds_what_it_must():
    assert resolves("lmms_egoplan.harness.run_files.run_file") and resolves("lmms_egoplan.harness")
    assert not resolves("lmms_egoplan.harness.run_file")  # the module is run_files
    assert not resolves("lmms_egoplan.harness.run_files.no_such_function")
    assert not resolves("lmms_egoplan.actplan.ActPlanSettings")  # defined in actplan.settings, not the package
    assert resolves("lmms_egoplan.actplan.settings.ActPlanSettings") and resolves("lmms_egoplan.docs")
