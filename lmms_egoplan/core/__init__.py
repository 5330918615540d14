"""The suite's core, below the benchmarks: settings, errors, files, media, statistics, sentence
embeddings, devices, plain-text tables and the options a task asks of a backend. It names no
benchmark and imports nothing of the suite outside itself (tests/architecture/test_imports.py)."""
