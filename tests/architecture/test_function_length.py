"""No function in the package is longer than 80 lines, counted from its ``def`` line to its last line (decorators
left out, docstring and comments in): a longer one is split into named steps. Tests are not held to it: a test reads
as one scenario from setup to the last assertion."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lmms_egoplan"
MOST_LINES = 80


def function_lengths(source: str) -> list[tuple[str, int, int]]:
    """(name, def line, lines) of every function and method in ``source``, nested ones too."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_count_runs_from_the_def_line_to_the_last_line():
    source = "@decorator\ndef f(\n    a,\n):\n    '''doc'''\n\n    # why\n    return a\n"
    assert function_lengths(source) == [("f", 2, 7)]


def test_no_function_in_the_package_is_longer_than_80_lines():
    too_long = [f"{path.relative_to(PACKAGE.parent)}:{line} {name} ({lines} lines)"
                for path in sorted(PACKAGE.rglob("*.py"))
                for name, line, lines in function_lengths(path.read_text(encoding="utf-8"))
                if lines > MOST_LINES]
    assert not too_long, "split these into named steps:\n" + "\n".join(too_long)
