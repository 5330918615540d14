"""The import graph of lmms_egoplan (function-local imports included) has no cycle, and the judge
package stands below lmms-eval and the benchmarks."""

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lmms_egoplan"
JUDGE = "lmms_egoplan.judge"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Every module ``path`` imports, wherever the import statement stands."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import submodule` imports the submodule.
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:  # Tarjan
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph[module]:
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between lmms_egoplan's modules and folders (``testing/``, ``judge/``, ...): a folder
    is one node, so that two folders importing each other is a cycle too."""
    def node(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        folders.setdefault(node(module), set()).update(node(t) for t in targets if node(t) != node(module))
    return folders


def in_judge(module: str) -> bool:
    return module == JUDGE or module.startswith(JUDGE + ".")


def test_no_import_cycle_runs_through_the_judge_package():
    graph = import_graph()
    assert any(m.startswith(JUDGE + ".") for m in graph)
    assert [c for c in cycles(graph) + cycles(folder_graph(graph)) if any(map(in_judge, c))] == []


def test_no_import_cycle_anywhere():
    graph = import_graph()
    assert cycles(graph) + cycles(folder_graph(graph)) == []


def test_the_judge_package_imports_neither_lmms_eval_nor_a_benchmark():
    graph = import_graph()
    for module, targets in graph.items():
        if in_judge(module):
            outside = {t for t in targets if t.split(".")[0] in ("lmms_eval", "lmms_egoplan")
                       and not in_judge(t) and not t.startswith("lmms_egoplan.core")}
            assert outside == set(), module


def test_every_judge_module_imports_alone_in_a_fresh_interpreter_without_loading_lmms_eval():
    judge_modules = sorted(filter(in_judge, import_graph()))
    for module in judge_modules:
        loaded = subprocess.run(
            [sys.executable, "-c", f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"],
            capture_output=True, text=True, check=True).stdout
        assert not {"'lmms_eval'", "'openai'", "'torch'", "'transformers'"} & set(loaded.strip("[]\n").split(", ")), module
