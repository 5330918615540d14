"""Where a model runs: ``auto`` resolved to the GPU when one is visible."""

from __future__ import annotations


def resolve_device(device: str | None) -> str:
    """``auto`` (or None) -> ``cuda`` when a GPU is visible, else ``cpu``; anything else is kept."""
    if device not in ("auto", None):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"

