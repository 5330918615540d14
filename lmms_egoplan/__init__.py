"""lmms-egoplan: egocentric embodied-planning benchmarks for lmms-eval."""

__version__ = "0.1.0"

