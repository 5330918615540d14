import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def checkpoint_cache(tmp_path_factory) -> Path:
    """Where tiny checkpoints are built: once per session, or kept in LMMS_EGOPLAN_TEST_CACHE."""
    kept = os.environ.get("LMMS_EGOPLAN_TEST_CACHE")
    return Path(kept) if kept else tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_model(checkpoint_cache):
    """``tiny_model(arch, **size)`` -> directory of a tiny random-weight checkpoint (cached)."""
    from lmms_egoplan.testing.checkpoints import tiny_checkpoint

    return lambda arch, **kwargs: tiny_checkpoint(arch, checkpoint_cache, **kwargs)
