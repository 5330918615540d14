"""Every declared dependency serves: the package imports each one (issue: nothing is declared that
nothing imports)."""

import ast
import configparser
import re
from importlib.metadata import packages_distributions
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]

# Declared for what other packages import at run time, each for a reason stated in setup.cfg.
DECLARED_FOR_OTHERS = {
    # transformers' image and video processors import it; declared to pin a build that loads on CPU.
    "torchvision",
    # lmms-eval 0.7.3's evaluator imports a module of it that its release 4.3 removed; declared to keep a release
    # that has it.
    "filelock",
}


def declared_requirements() -> set[str]:
    config = configparser.ConfigParser()
    config.read(CHECKOUT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    names = (re.match(r"[A-Za-z0-9_.-]+", line.strip()) for line in lines
             if line.strip() and not line.strip().startswith("#"))
    return {_normalized(name.group(0)) for name in names if name}


def imported_top_level_modules() -> set[str]:
    modules = set()
    for source in (CHECKOUT / "lmms_egoplan").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_declared_dependency_is_imported_by_the_package():
    distributions_of = packages_distributions()
    imported = {_normalized(dist) for module in imported_top_level_modules()
                for dist in distributions_of.get(module, ())}
    unused = declared_requirements() - imported - DECLARED_FOR_OTHERS
    assert not unused, f"declared in setup.cfg but imported nowhere in lmms_egoplan/: {sorted(unused)}"
