"""Python source parsed from any thread (``core.python_source``): CPython 3.11's shared recursion counter can fail a
parse while another thread parses (python/cpython#106905); the parse is asked again, a real error is not."""

import ast

import pytest

from lmms_egoplan.core import python_source


def test_a_parse_the_threads_counter_fails_is_asked_again(monkeypatch):
    calls = []

    def parse(text):
        calls.append(text)
        if len(calls) < 3:
            raise SystemError("AST constructor recursion depth mismatch (before=162, after=42)")
        return ast.Module(body=[], type_ignores=[])

    monkeypatch.setattr(python_source.ast, "parse", parse)
    assert isinstance(python_source.parse_python("x = 1"), ast.Module) and calls == ["x = 1"] * 3


def test_a_counter_failing_every_time_and_other_errors_are_raised(monkeypatch):
    with pytest.raises(SyntaxError):
        python_source.parse_python("def (")
    monkeypatch.setattr(python_source.ast, "parse", lambda text: (_ for _ in ()).throw(
        SystemError("AST constructor recursion depth mismatch (before=1, after=2)")))
    with pytest.raises(SystemError, match="mismatch"):
        python_source.parse_python("x = 1")
    monkeypatch.setattr(python_source.ast, "parse", lambda text: (_ for _ in ()).throw(SystemError("other")))
    with pytest.raises(SystemError, match="other"):
        python_source.parse_python("x = 1")


def test_threads_parsing_at_once_all_get_their_trees():
    import concurrent.futures

    source = "\n".join(f"def f{n}(a):\n    return [a for a in range({n}) if a]" for n in range(300))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        trees = list(pool.map(python_source.parse_python, [source] * 32))
    assert all(len(tree.body) == 300 for tree in trees)
