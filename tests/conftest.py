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


@pytest.fixture(scope="session", autouse=True)
def settings_only_from_the_tests():
    """A benchmark setting in the developer's environment (``EGOPLAN_ANNOTATION_DIR`` pointing at the
    real data, ``EGOTHINK_JUDGE_MODEL``, ...) would reach every task the tests build and every
    lmms-eval subprocess they start: the tests run without them."""
    from lmms_egoplan import actplan_data, egointent_data, egoplan_data, egothink_data

    prefixes = tuple(f"{module.ENV_PREFIX}_" for module in (actplan_data, egointent_data, egoplan_data, egothink_data))
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith(prefixes)]:
            patch.delenv(name)
        yield
