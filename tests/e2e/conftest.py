"""The end-to-end tier: every test in this folder goes through the real lmms-eval / lm_eval CLI (marked e2e by the
root conftest)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def egoplan_data(tmp_path_factory):
    from lmms_egoplan.demo.egoplan import build_fixture

    return build_fixture(tmp_path_factory.mktemp("egoplan"))
