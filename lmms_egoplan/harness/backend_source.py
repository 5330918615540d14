"""What a run can learn of an lmms-eval backend from its source alone, before anything of it is imported.

lmms-eval's registry names each backend by its class path (``MODEL_REGISTRY_V2.resolve``); importing the
class runs its module's imports (``decord`` for ``qwen2_vl``, ``llava_hf``, ...), which may fail or take long.
A suite task that the backend cannot serve is refused first, from the class's source (``computes_loglikelihood``):
the module files are found (``importlib.util.find_spec``) and parsed, never run. ``needs`` says what the backend
needs beyond its name on a machine without a CUDA GPU, for the hints that name it.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from functools import lru_cache

from lmms_egoplan.core.python_source import parse_python

# Base classes followed through their modules' imports, at most this deep (lmms-eval's chain is 2 or 3).
_MOST_BASES = 6


@dataclass(frozen=True)
class SourceClass:
    module: str  # its module's name
    tree: ast.Module  # its module, parsed
    definition: ast.ClassDef


def refuses_every_call(definition: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a method's body (docstrings left out) only raises, asserts False or passes: lmms-eval's backends
    without ``loglikelihood`` keep the method so (e.g. ``Qwen2_VL``, ``VLLM``)."""
    statements = [s for s in definition.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]

    def refuses(statement: ast.stmt) -> bool:
        return isinstance(statement, (ast.Raise, ast.Pass)) or (
            isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Constant) and not statement.test.value)

    return all(map(refuses, statements))


def computes_loglikelihood(class_path: str) -> bool | None:
    """Whether the class at ``class_path`` (``module.Class``) implements ``loglikelihood``, from its source and its
    base classes' (an abstract method counts as none); None where the source cannot tell (the class is then
    imported and asked, ``backend_choice.computes_loglikelihood``)."""
    method = _method(class_path, "loglikelihood")
    if method is None:
        return None
    if any(_name_of(decorator).endswith("abstractmethod") for decorator in method.decorator_list):
        return False
    return not refuses_every_call(method)


def needs(*class_paths: str) -> str:
    """What the backends at ``class_paths`` need beyond ``--model`` on a machine without a CUDA GPU, as a phrase to
    follow "needs" ("" where nothing): the CPU in their model_args where their ``device``/``device_map`` default
    elsewhere, and the packages their modules import that are not installed here."""
    placement, missing = {}, {}
    for class_path in class_paths:
        # The suite's backends choose the CPU themselves where there is no GPU; lmms-eval's default to CUDA (or,
        # as device_map=auto, move inputs to "cuda").
        if not class_path.startswith("lmms_egoplan."):
            placement.update({f"{name}=cpu": None for name, default in _init_defaults(class_path).items()
                              if name in ("device", "device_map") and default != "cpu"})
        missing.update(dict.fromkeys(_missing_imports(class_path)))
    parts = [f"{','.join(placement)} in its --model_args on a machine without a CUDA GPU"] if placement else []
    if missing:
        parts.append(f"{' and '.join(missing)}, which it imports and this environment lacks (pip install "
                     f"{' '.join(missing)})")
    return ", and ".join(parts)


def _method(class_path: str, name: str, depth: int = 0) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    found = source_class(class_path)
    if found is None or depth > _MOST_BASES:
        return None
    for statement in found.definition.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == name:
            return statement
    for base in _base_paths(found):
        method = _method(base, name, depth + 1) if base else None
        if method is not None:
            return method
    return None


def _init_defaults(class_path: str, depth: int = 0) -> dict[str, object]:
    """{parameter: default} of the ``__init__`` the class runs (its own or its nearest base's); literal defaults
    only (others: None)."""
    found = source_class(class_path)
    if found is None or depth > _MOST_BASES:
        return {}
    for statement in found.definition.body:
        if isinstance(statement, ast.FunctionDef) and statement.name == "__init__":
            arguments = statement.args
            positional = arguments.posonlyargs + arguments.args
            defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
            pairs = [*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]
            return {argument.arg: _literal(default) for argument, default in pairs}
    for base in _base_paths(found):
        if base and (defaults := _init_defaults(base, depth + 1)):
            return defaults
    return {}


def _missing_imports(class_path: str, depth: int = 0) -> list[str]:
    """Top-level packages the class's module and its bases' modules import unconditionally that are not installed."""
    found = source_class(class_path)
    if found is None or depth > _MOST_BASES:
        return []
    names = []
    for statement in found.tree.body:  # module level only: imports inside functions or try blocks are optional
        if isinstance(statement, ast.Import):
            names += [alias.name.split(".")[0] for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names.append(statement.module.split(".")[0])
    missing = [name for name in dict.fromkeys(names) if not _installed(name)]
    for base in _base_paths(found):
        missing += [name for name in (_missing_imports(base, depth + 1) if base else []) if name not in missing]
    return missing


@lru_cache(maxsize=None)
def source_class(class_path: str) -> SourceClass | None:
    """The class definition at ``class_path``, parsed from its module's file without running it; None where there
    is no such source file or class."""
    module, _, name = class_path.rpartition(".")
    try:
        spec = importlib.util.find_spec(module)
        with open(spec.origin, encoding="utf-8") as file:  # ty: spec None -> AttributeError below
            tree = parse_python(file.read())
    except (ImportError, ValueError, AttributeError, TypeError, OSError, SyntaxError):
        return None
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            return SourceClass(module, tree, statement)
    return None


def _base_paths(found: SourceClass) -> list[str | None]:
    """Each base class's path, through the module's imports (None where the source cannot say)."""
    objects, modules = {}, {}
    for statement in found.tree.body:
        if isinstance(statement, ast.ImportFrom):
            origin = _absolute(found.module, statement.module or "", statement.level)
            objects.update({alias.asname or alias.name: f"{origin}.{alias.name}" for alias in statement.names})
        elif isinstance(statement, ast.Import):
            modules.update({alias.asname or alias.name: alias.name for alias in statement.names})
        elif isinstance(statement, ast.ClassDef):
            objects[statement.name] = f"{found.module}.{statement.name}"
    paths = []
    for base in found.definition.bases:
        name = _name_of(base)
        module, _, attribute = name.rpartition(".")
        paths.append(objects.get(name) or (f"{modules[module]}.{attribute}" if module in modules else None))
    return paths


def _absolute(module: str, imported: str, level: int) -> str:
    if not level:
        return imported
    package = module.split(".")[:-level]
    return ".".join([*package, imported] if imported else package)


def _name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    try:
        return ast.unparse(node)
    except (AttributeError, ValueError):
        return ""


def _literal(node: ast.expr | None) -> object:
    try:
        return ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
