import os
from pathlib import Path

import pytest

END_TO_END = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items):
    """The end-to-end tier is a folder: every test under tests/e2e/ is marked ``e2e`` (setup.cfg's
    ``-m "not e2e"`` leaves them to ``pytest -m e2e``), and no test elsewhere is."""
    for item in items:
        if END_TO_END in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def checkpoint_cache(tmp_path_factory) -> Path:
    """Where tiny checkpoints are built: once per test run (the xdist workers of a run share the folder:
    a checkpoint appears by an atomic rename), or kept between runs in LMMS_EGOPLAN_TEST_CACHE."""
    kept = os.environ.get("LMMS_EGOPLAN_TEST_CACHE")
    if kept:
        return Path(kept)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp is <run>/popen-gwN: <run> is the workers' common folder
        shared = tmp_path_factory.getbasetemp().parent / "checkpoints"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("checkpoints")


@pytest.fixture(scope="session")
def tiny_model(checkpoint_cache):
    """``tiny_model(arch, **size)`` -> directory of a tiny random-weight checkpoint (cached)."""
    from lmms_egoplan.fixtures.checkpoints import tiny_checkpoint

    return lambda arch, **kwargs: tiny_checkpoint(arch, checkpoint_cache, **kwargs)


@pytest.fixture(scope="session", autouse=True)
def settings_only_from_the_tests():
    """A benchmark setting in the developer's environment (``EGOPLAN_ANNOTATION_DIR`` pointing at the
    real data, ``EGOTHINK_JUDGE_MODEL``, ...) would reach every task the tests build and every
    lmms-eval subprocess they start: the tests run without them."""
    from lmms_egoplan.actplan import data as actplan_data
    from lmms_egoplan.egointent import data as egointent_data
    from lmms_egoplan.egoplan import data as egoplan_data
    from lmms_egoplan.egoplan_bench2 import data as egoplan_bench2_data
    from lmms_egoplan.egothink import data as egothink_data

    prefixes = tuple(f"{module.ENV_PREFIX}_" for module in (actplan_data, egointent_data, egoplan_data,
                                                             egoplan_bench2_data, egothink_data))
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith(prefixes)]:
            patch.delenv(name)
        yield


# EgoPlan-Val sample 115 (EpicKitchens P01_13) as the release records it: its completed actions' frames
# and its observation frame (texts shortened: no test reads them). Its official 8-frame clip is
# frames 36, 139, 242, 346, 449, 553, 656, 760.
SAMPLE_115_ACTIONS = [(36, 105), (111, 253), (274, 456), (457, 606), (689, 760)]
SAMPLE_115_OBSERVATION = 760


@pytest.fixture
def sample_115() -> dict:
    """Sample 115's record in the release's format (tests/conftest.py says which fields are real)."""
    return {"sample_id": 115, "video_source": "EpicKitchens", "video_id": "P01_13", "task_goal": "store cereal",
            "question": "What action should I take next in order to store cereal?",
            **{f"choice_{letter}": f"candidate {letter}" for letter in "abcd"}, "golden_choice_idx": "A",
            "answer": "candidate a", "current_observation_frame": SAMPLE_115_OBSERVATION,
            "task_progress_metadata": [{"narration_text": f"action {i}", "start_frame": start, "stop_frame": stop}
                                       for i, (start, stop) in enumerate(SAMPLE_115_ACTIONS)]}
