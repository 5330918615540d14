import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

END_TO_END = Path(__file__).parent / "e2e"


def pytest_configure(config):
    """Ctrl-C as at a terminal: pytest started in a script's background has SIGINT ignored, which the runs its tests
    start (and a warm Python they fork from) would inherit; the tests that send them SIGINT expect a terminal's."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    share_the_cores()


def share_the_cores() -> None:
    """Under xdist, each worker and every process it starts compute on the worker's share of the cores
    (``OMP_NUM_THREADS``: torch's OpenMP runtime reads it when it loads, in the worker and in each run the tests start).
    By default every process takes a thread per core, so that ``-n 2`` on 2 cores ran four or more threads whose waits
    spin (GNU libgomp): the likelihood tests took 2.4-2.9x as long (92 -> 32 s at -n 2, 2026-11-29). A value the
    user set is kept."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    share = max(1, cores // int(workers))
    os.environ["OMP_NUM_THREADS"] = str(share)
    if "torch" in sys.modules:  # loaded already (a plugin's import): its thread pool is sized
        sys.modules["torch"].set_num_threads(share)


# The end-to-end modules that take longest on CI's machine (2 cores, `-n 2`), longest first (seconds measured
# 2026-11-28: 711, 342, 257, 188, 184, 167, 133, 120). xdist hands a module to the worker that asks next, so a long
# one handed out last kept the other worker idle: 121 s of the tier's 1,554. Handed out first, by the same timings
# the workers end at 1,435 and 1,440 s (setup.cfg's --no-loadscope-reorder keeps this order).
LONGEST_FIRST = ("test_upstream_patches.py", "test_demo.py", "test_run_all.py", "test_upstream_equivalence.py",
                 "test_wheel.py", "test_resume.py", "test_egoplan_hf.py", "test_user_surface.py")


def pytest_collection_modifyitems(config, items):
    """The end-to-end tier is a folder: every test under tests/e2e/ is marked ``e2e`` (setup.cfg's
    ``-m "not e2e"`` leaves them to ``pytest -m e2e``), and no test elsewhere is. Under xdist (a worker's
    collection is the order modules are handed out in), modules go in the order that balances two workers: the
    end-to-end tier's longest first, then the others with the most tests first (xdist's own order), each module's
    tests together and in their order; a run without workers keeps the order it was given."""
    for item in items:
        if END_TO_END in item.path.parents:
            item.add_marker(pytest.mark.e2e)
    if not hasattr(config, "workerinput"):
        return
    tests_of = Counter(item.path for item in items)  # a Counter keeps the order in which modules first appear
    first_seen = {path: index for index, path in enumerate(tests_of)}

    def module_order(item) -> tuple:
        listed = item.path.name in LONGEST_FIRST and END_TO_END in item.path.parents
        rank = LONGEST_FIRST.index(item.path.name) if listed else len(LONGEST_FIRST)
        return rank, -tests_of[item.path], first_seen[item.path]

    items.sort(key=module_order)


class SmallDisk:
    """A real filesystem of a few hundred kilobytes (tmpfs) mounted on ``path``, to fill up: what a
    full disk does to a run. ``fill(leave)`` takes all its space but ``leave`` bytes; ``free()`` gives it back."""

    def __init__(self, path: Path, size: str):
        import subprocess

        path.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path)], check=True)
        self.path = path
        self._filler = path / ".filler"

    def fill(self, leave: int = 0) -> None:
        """Take every byte but ``leave`` (in whole pages of 4 KiB: tmpfs allocates pages)."""
        with open(self._filler, "ab", buffering=0) as filler:
            try:
                while filler.write(b"\0" * 65536):
                    pass
            except OSError:  # no space left
                pass
        if leave:
            os.truncate(self._filler, max(0, self._filler.stat().st_size - leave))

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        import subprocess

        subprocess.run(["umount", "--lazy", str(self.path)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(size="512k")`` -> a SmallDisk under tmp_path; needs root (CI runs as root: there
    it never skips), which a developer's machine may not give."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small disk (tmpfs) needs root")
    disks = []

    def mount(size: str = "512k") -> SmallDisk:
        disks.append(SmallDisk(tmp_path / f"disk{len(disks)}", size))
        return disks[-1]

    yield mount
    for disk in disks:
        disk.unmount()


def _run_folder(tmp_path_factory, name: str) -> Path:
    """A folder the xdist workers of one test run share (or kept between runs in LMMS_EGOPLAN_TEST_CACHE)."""
    kept = os.environ.get("LMMS_EGOPLAN_TEST_CACHE")
    if kept:
        return Path(kept) / name if name != "checkpoints" else Path(kept)
    if os.environ.get("PYTEST_XDIST_WORKER"):  # basetemp is <run>/popen-gwN: <run> is the workers' common folder
        shared = tmp_path_factory.getbasetemp().parent / name
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp(name)


@pytest.fixture(scope="session")
def checkpoint_cache(tmp_path_factory) -> Path:
    """Where tiny checkpoints are built: once per test run (the xdist workers of a run share the folder:
    a checkpoint appears by an atomic rename), or kept between runs in LMMS_EGOPLAN_TEST_CACHE."""
    return _run_folder(tmp_path_factory, "checkpoints")


@pytest.fixture(scope="session", autouse=True)
def embeddings_of_this_test_run(tmp_path_factory):
    """The sentence-embedding store (``core.embeddings.EmbeddingStore``) of every test and lmms-eval subprocess of
    this test run: one folder its workers share, never the developer's own."""
    from lmms_egoplan.core.embeddings import EMBEDDING_CACHE_VARIABLE

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(EMBEDDING_CACHE_VARIABLE, str(_run_folder(tmp_path_factory, "embeddings")))
        yield


@pytest.fixture(scope="session")
def tiny_model(checkpoint_cache):
    """``tiny_model(arch, **size)`` -> directory of a tiny random-weight checkpoint (cached)."""
    from lmms_egoplan.demo.kit.checkpoints import tiny_checkpoint

    return lambda arch, **kwargs: tiny_checkpoint(arch, checkpoint_cache, **kwargs)


@pytest.fixture(scope="session", autouse=True)
def settings_only_from_the_tests():
    """A benchmark setting in the developer's environment (``EGOPLAN_ANNOTATION_DIR`` pointing at the
    real data, ``EGOTHINK_JUDGE_MODEL``, ...) would reach every task the tests build and every
    lmms-eval subprocess they start: the tests run without them. Which variables those are is read from the
    catalogue (each row's ``env_prefix``), so a new benchmark's are cleared too. Nor do they read the developer's
    settings file (``LMMS_EGOPLAN_SETTINGS`` empty: none; a test names its own)."""
    from lmms_egoplan.core.settings_file import SETTINGS_VARIABLE
    from tests.kit.benchmarks import benchmark_variables

    with pytest.MonkeyPatch.context() as patch:
        for name in benchmark_variables(list(os.environ)):
            patch.delenv(name)
        patch.setenv(SETTINGS_VARIABLE, "")
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
