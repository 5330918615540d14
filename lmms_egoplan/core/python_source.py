"""Python source read as its syntax tree (lmms-eval's and a backend's code, read without running it), from any thread.

CPython 3.11's syntax-tree builder counts its recursion depth in one counter that every thread of the interpreter
shares, so an ``ast.parse`` in one thread can fail while another thread parses too (a loopback server's, a
library's): ``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905). The source is
fine, and the same parse a moment later succeeds."""

from __future__ import annotations

import ast

_ATTEMPTS = 3


def parse_python(text: str) -> ast.Module:
    """``ast.parse(text)``, parsed again (up to 3 times in all) when the interpreter reports the threads' shared
    counter out of step; a ``SyntaxError`` or any other error is raised at once."""
    for _ in range(_ATTEMPTS - 1):
        try:
            return ast.parse(text)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error):
                raise
    return ast.parse(text)
