"""Fixtures of the harness tests: the suite's lmms-eval workarounds switched on as a run of the suite switches them."""

import pytest


@pytest.fixture
def runs_name_the_suite(monkeypatch):
    """The test's runs name the suite (``LMMS_EVAL_PLUGINS``): the workarounds in place act on them, on lmms-eval's
    own tasks and backends too (a run that names nothing of the suite is lmms-eval's own)."""
    monkeypatch.setenv("LMMS_EVAL_PLUGINS", "lmms_egoplan")


@pytest.fixture
def switch_on(runs_name_the_suite):
    """``switch_on(workaround, ...)``: put the suite's workarounds in place, as a run that uses the suite does, for the
    test's runs, which name the suite (``runs_name_the_suite``). Where
    tests/e2e/test_upstream_patches.py switched one off (``LMMS_EGOPLAN_COMPAT_OFF``) it stays off, and lmms-eval,
    patched with docs/upstream/'s fix, must do the job alone; elsewhere each must be in place."""
    from lmms_egoplan.compat import switched_off

    def switch(*workarounds):
        for workaround in workarounds:
            name = f"{workaround.__module__.rsplit('.', 1)[-1]}.{workaround.__name__}"
            assert workaround() or switched_off(name), f"{name} is not in place"

    return switch


@pytest.fixture(autouse=True)
def unwrap_generation_output_restored_under_both_names(monkeypatch):
    """A test that puts ``unwrap_generation_output`` back to lmms-eval's own replaces it in ``lmms_eval.api.instance``
    only; the suite's wrapper then rebinds ``lmms_eval.evaluator``'s name too, which monkeypatch would not restore."""
    from lmms_eval import evaluator
    from lmms_eval.api import instance

    monkeypatch.setattr(instance, "unwrap_generation_output", instance.unwrap_generation_output)
    monkeypatch.setattr(evaluator, "unwrap_generation_output", evaluator.unwrap_generation_output)
