"""The import graph of lmms_egoplan (function-local imports and string imports -- "module:attribute"
references and module names imported by importlib -- included) has no cycle, and the layers hold:
the core below everything, the judge below lmms-eval and the benchmarks, the report's toolkit below
the benchmarks (whose report faces use it), nothing importing upwards. What is shared names no
benchmark: a benchmark is its folder, its catalogue row and its line in the suite."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from lmms_egoplan.catalogue import CATALOGUE as CATALOGUE_ROWS

PACKAGE = Path(__file__).resolve().parents[2] / "lmms_egoplan"
JUDGE = "lmms_egoplan.judge"
CATALOGUE = "lmms_egoplan.catalogue"
STRING_IMPORT = re.compile(r"(lmms_egoplan(?:\.\w+)*)(?::\w+)?")
BENCHMARKS = tuple(row.name for row in CATALOGUE_ROWS)  # the catalogue's, never a list of our own
# A benchmark named in text: the first word of its name in any spelling (an underscore anywhere in it, any case):
# EgoPlan, ego_think, ActPlan-1K, ... (not the suite's own name, lmms_egoplan, nor its backends, egoplan_hf and
# egoplan_server, which are no benchmark).
STEMS = sorted({name.split("_")[0] for name in BENCHMARKS}, key=len, reverse=True)
BENCHMARK_MENTION = re.compile(r"(?<![\w-])(" + "|".join("_?".join(map(re.escape, stem)) for stem in STEMS)
                               + r")(?!_hf\b|_server\b)", re.IGNORECASE)
# Each folder's layer: a module imports only from its own layer's folder or from lower layers.
# The demo (its kit, its module per benchmark, ``smoke``) is a wing above the product: only the CLI imports it.
# The contract between a benchmark and the adapters (``contract/``) is a floor of its own, below the workarounds
# (which call a task through it) and the harness adapters.
LAYERS = {"catalogue": 0, "core": 0, "judge": 1, "contract": 2, "compat": 3, "harness": 4, "models": 5, "report": 4,
          **{name: 5 for name in BENCHMARKS}, "suite": 6, "": 6, "demo": 7, "cli": 8}


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
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and name != CATALOGUE:
            found.update(string_imports(node.value, modules))  # the catalogue's are old logs' references, data
    return found


def string_imports(text: str, modules: set[str]) -> set[str]:
    """The modules a string names as a whole: "lmms_egoplan.x.y" or "lmms_egoplan.x.y:attribute"."""
    match = STRING_IMPORT.fullmatch(text.strip())
    if match is None:
        return set()
    name = match.group(1)
    while name not in modules and "." in name:  # "package.module.attribute": the module
        name = name.rpartition(".")[0]
    return {name} if name in modules and name != "lmms_egoplan" else set()  # "lmms_egoplan.video_clip": a key


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
    """The graph between lmms_egoplan's modules and folders (``fixtures/``, ``judge/``, ...): a folder
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
                       and not in_judge(t) and not t.startswith(("lmms_egoplan.core", CATALOGUE))}
            assert outside == set(), module


def test_every_judge_module_imports_alone_in_a_fresh_interpreter_without_loading_lmms_eval():
    judge_modules = sorted(filter(in_judge, import_graph()))
    for module in judge_modules:
        loaded = subprocess.run(
            [sys.executable, "-c", f"import sys, {module}; print(sorted({{m.split('.')[0] for m in sys.modules}}))"],
            capture_output=True, text=True, check=True).stdout
        top_level = set(loaded.strip("[]\n").split(", "))
        assert not {"'lmms_eval'", "'openai'", "'torch'", "'transformers'"} & top_level, module


def folder(module: str) -> str:
    """The top-level module or folder of lmms_egoplan a module is in ("" for the package itself)."""
    return module.split(".")[1] if "." in module else ""


def layer(module: str) -> int:
    return LAYERS[folder(module)]


def test_no_string_names_suite_code_outside_the_catalogue():
    """Code is reached by imports a reader can follow, not by "module:attribute" strings (the catalogue's
    legacy rubric references are what old logs carry, data)."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    named = sorted((module_name(path), node.value) for path in paths for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)
                   and module_name(path) != CATALOGUE and string_imports(node.value, modules))
    assert named == []


def test_no_suite_module_is_imported_by_name():
    """One import by name stays, of no suite module: the workarounds' wrapper imports the lmms-eval module it replaces
    a function of (the module named in its table)."""
    calls = sorted(str(path.relative_to(PACKAGE.parent)) for path in sorted(PACKAGE.rglob("*.py"))
                   for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
                   and ast.unparse(node.func) in ("importlib.import_module", "import_module", "__import__"))
    assert calls == ["lmms_egoplan/compat/replacements.py"]


def test_the_suite_lists_every_benchmark_by_plain_import():
    graph = import_graph()
    assert {f"lmms_egoplan.{name}.benchmark" for name in BENCHMARKS} <= graph["lmms_egoplan.suite"]


def test_no_module_imports_from_a_layer_above_its_own():
    graph = import_graph()
    assert set(LAYERS) >= {folder(module) for module in graph}, "a new folder needs a layer"
    upward = sorted((module, target) for module, targets in graph.items() for target in targets
                    if target in graph and layer(target) > layer(module))
    assert upward == []
    sideways = sorted((module, target) for module, targets in graph.items() for target in targets if target in graph
                      and layer(target) == layer(module) and folder(module) != folder(target)
                      and {folder(module), folder(target)} & set(BENCHMARKS))
    assert sideways == [], "a benchmark imports another (or its layer's shared code)"


def test_the_demo_is_a_wing_only_the_cli_imports():
    graph = import_graph()
    importers = {module for module, targets in graph.items() if folder(module) not in ("demo", "cli")
                 and any(folder(target) == "demo" for target in targets if target.startswith("lmms_egoplan."))}
    assert importers == set()
    assert not (PACKAGE / "fixtures").exists()
    assert {f"lmms_egoplan.demo.{name}" for name in BENCHMARKS} <= set(graph)


def test_the_core_imports_nothing_of_the_suite_outside_itself():
    for module, targets in import_graph().items():
        if module.startswith("lmms_egoplan.core"):
            assert {t for t in targets
                    if t.startswith("lmms_egoplan") and not t.startswith("lmms_egoplan.core")} == set()


def test_the_report_imports_nothing_of_the_harness():
    """The report reads runs' files; what it shares with the adapters (e.g. ``contract.judged.PREDICT_ONLY_ITEMS``)
    lies on a floor below both (issue 75)."""
    graph = import_graph()
    assert sorted((module, target) for module, targets in graph.items() if folder(module) == "report"
                  for target in targets if folder(target) in ("harness", "models")) == []


# What names no benchmark, not even in a string: a new benchmark needs nothing of them (the suite
# hands its report face and commands to the report and the CLI; the demo imports its benchmarks' modules).
SHARED = ("core", "judge", "contract", "harness", "report", "demo/kit", "demo/smoke.py", "cli.py")


def named_benchmarks(path: Path) -> list[str]:
    strings = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
               and isinstance(node.value, str)]
    return sorted({match.group(0) for text in strings for match in BENCHMARK_MENTION.finditer(text)})


def test_no_shared_code_names_a_benchmark_not_even_in_a_string():
    paths = [path for name in SHARED
             for path in ([PACKAGE / name] if name.endswith(".py") else sorted((PACKAGE / name).rglob("*.py")))]
    assert {"lmms_egoplan/report/tables.py", "lmms_egoplan/demo/smoke.py", "lmms_egoplan/cli.py"} <= {
        str(path.relative_to(PACKAGE.parent)) for path in paths}
    for path in paths:
        assert named_benchmarks(path) == [], path.relative_to(PACKAGE)


def test_the_guard_sees_benchmarks_in_any_spelling_but_not_the_backends_or_the_suite(tmp_path):
    source = tmp_path / "module.py"
    source.write_text('"""EgoPlan-Bench, ego_think, EgoIntent and ActPlan-1K: actplan1k, egoplan_val."""\n'
                      'NAMES = ("egoplan_hf", "egoplan_server", "lmms_egoplan.report", "lmms-egoplan report")\n')
    assert named_benchmarks(source) == ["ActPlan", "EgoIntent", "EgoPlan", "actplan", "ego_think", "egoplan"]


def calls_in(tree: ast.AST) -> list[str]:
    """The names called in ``tree`` (``a.b(...)``: "a.b")."""
    return [ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)]


def calls(path: Path) -> list[str]:
    return calls_in(ast.parse(path.read_text()))


def test_lmms_eval_is_patched_in_compat_and_switched_on_from_switch_on_alone():
    """Only ``compat/`` replaces an lmms-eval function (``add_layer``), and a workaround that does is called from
    ``compat.switches.switch_on`` or from the layers of another workaround it switched on, in ``compat/``: no
    adapter, backend or benchmark switches one on."""
    patchers = {node.name: path for path in sorted((PACKAGE / "compat").glob("*.py"))
                for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.FunctionDef) and "add_layer" in calls_in(node)}
    assert {"score_llava_hf_with_its_images", "keep_loglikelihood_results",
            "fail_runs_with_failed_tasks"} <= set(patchers)
    modules = sorted(PACKAGE.rglob("*.py"))
    callers = sorted({(str(path.relative_to(PACKAGE.parent)), name) for path in modules for name in calls(path)
                      if patchers.get(name.rpartition(".")[2], path) != path})
    assert all(path.startswith("lmms_egoplan/compat/") for path, _ in callers), callers
    assert "lmms_egoplan/compat/switches.py" in {path for path, _ in callers}
    adders = {str(path.relative_to(PACKAGE.parent)) for path in modules if "add_layer" in calls(path)}
    assert adders and all(path.startswith("lmms_egoplan/compat/") for path in adders), adders
