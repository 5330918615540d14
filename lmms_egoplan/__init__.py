"""lmms-egoplan: egocentric embodied-planning benchmarks for lmms-eval."""

__version__ = "0.1.0"

# The benchmark registry installs the judge's rubric look-up (logs re-judge without their benchmark imported).
from lmms_egoplan import registry  # noqa: E402,F401
