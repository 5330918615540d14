"""The demo's settings file (``core.settings_file``), written in its work folder as ``lmms-egoplan prepare`` writes
one for the real data: each benchmark's block holds the settings its demo points at its synthetic data (its
``SmokeSuite.env``, ``<PREFIX>_<SETTING>`` variables, as settings), and ``expected_counts`` the records its
tasks' loaders read from that data when it was written (``check-data`` judges the demo's subset by them, and shows
the release's counts beside them). The demo's runs read it; a user re-runs any demo task by hand with it."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Iterator

from loguru import logger

from lmms_egoplan import catalogue
from lmms_egoplan.core.settings_file import SETTINGS_VARIABLE, SettingsFile, read_settings_file, write_settings_file
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.harness.data_check import check_benchmark
from lmms_egoplan.suite import benchmark

DEMO_SETTINGS_FILE = "lmms-egoplan-settings.yaml"


def settings_block(name: str, suite: SmokeSuite) -> dict[str, str]:
    """The settings of benchmark ``name`` that its demo's variables set, by field name."""
    prefix = catalogue.entry(name).env_prefix + "_"
    return {variable[len(prefix):].lower(): value for variable, value in suite.env.items()
            if variable.startswith(prefix)}


def with_demo_settings(path: Path, name: str, suite: SmokeSuite) -> SmokeSuite:
    """Add benchmark ``name``'s block and counts to the demo's settings file at ``path``; ``suite`` with its runs
    pointed at the file (its variables stay: they say the same)."""
    names = [row.name for row in catalogue.CATALOGUE]
    earlier = read_settings_file(path, names) if path.is_file() else SettingsFile(path)
    block = SettingsFile(path, {name: settings_block(name, suite)})
    logger.disable("lmms_egoplan")  # the loaders' lines would break the demo's table-only console
    try:
        checked = check_benchmark(benchmark(name), block)
    finally:
        logger.enable("lmms_egoplan")
    counts = {count.part.name: count.found for count in checked.counts if count.found is not None}
    write_settings_file(path, earlier.merged(dataclasses.replace(block, expected_counts={name: counts})),
                        writer="lmms-egoplan smoke, for its synthetic data")
    return dataclasses.replace(suite, env={**suite.env, SETTINGS_VARIABLE: str(path)})


@contextlib.contextmanager
def users_settings_kept_out() -> Iterator[None]:
    """The demo is hermetic: while it runs, this process (its checks) and the runs it starts read none of the user's
    settings, neither the settings file at the default location nor a ``<PREFIX>_<SETTING>`` variable (its runs are
    pointed at the demo's own file, ``with_demo_settings``); the environment is restored after."""
    prefixes = tuple(f"{row.env_prefix}_".upper() for row in catalogue.CATALOGUE)
    saved = dict(os.environ)
    for variable in [name for name in os.environ if name.upper().startswith(prefixes)]:
        del os.environ[variable]
    os.environ[SETTINGS_VARIABLE] = ""  # none, until a run is pointed at the demo's
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
