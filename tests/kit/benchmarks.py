"""What the tests know of the suite's benchmarks, read from the catalogue (``lmms_egoplan.catalogue``), never from a
list of their own: a benchmark added to the catalogue is in every such list at once."""

from __future__ import annotations

from typing import Iterable


def benchmark_variables(names: Iterable[str]) -> list[str]:
    """The environment variables of ``names`` that set a benchmark's settings: those of each catalogue row's
    prefix (``<env_prefix>_<SETTING>``), in their order."""
    from lmms_egoplan.catalogue import CATALOGUE

    prefixes = tuple(f"{row.env_prefix}_" for row in CATALOGUE)
    return [name for name in names if name.startswith(prefixes)]
