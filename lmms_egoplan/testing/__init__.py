"""Offline test helpers (tiny checkpoints, synthetic media)."""
