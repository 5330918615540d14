"""Where a model runs: ``auto`` resolved to the GPU when one is visible, and said."""

from __future__ import annotations


def resolve_device(device: str | None, *, runs: str | None = None) -> str:
    """``auto`` (or None) -> ``cuda`` when a GPU is visible, else ``cpu``; anything else is kept. ``runs``: what
    runs there ("egoplan_hf's model Qwen/Qwen2.5-VL-7B-Instruct"), logged with the device and, where ``auto`` finds
    no GPU, warned about: the run is on the CPU, which a user who asked for ``auto`` on a GPU box did not expect."""
    resolved = device if device not in ("auto", None) else _auto()
    if runs is not None:
        from loguru import logger

        if resolved == "cpu" and device in ("auto", None):
            logger.warning(f"device=auto found no CUDA GPU (torch.cuda.is_available() is False): {runs} runs on the "
                           f"CPU, slowly; check the CUDA driver and CUDA_VISIBLE_DEVICES, or set device=cpu to mean it")
        else:
            logger.info(f"{runs} runs on {describe_device(resolved)}")
    return resolved


def device_problem(device: str, *, here: bool = True) -> str | None:
    """Why ``device`` (a setting's or option's value) cannot run a model, or None: ``auto``, or a torch device that
    is here (``here=False``: that torch can parse, for a setting that may be read on another machine than the one
    that runs it). Said before any model is loaded, never torch's traceback after the work."""
    if device == "auto":
        return None
    import torch

    try:
        named = torch.device(device)
    except RuntimeError as error:
        return f"{device!r} names no torch device ({error}); auto, cpu, cuda or cuda:<n>"
    if not here or named.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return (f"{device!r} names a CUDA device, but torch sees no GPU here (torch.cuda.is_available() is False); "
                f"use cpu or auto")
    count = torch.cuda.device_count()
    if named.index is not None and named.index >= count:
        return f"{device!r}: torch sees {count} GPU(s) here, cuda:0 to cuda:{count - 1}"
    return None


def _auto() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def describe_device(device: str) -> str:
    """``device`` with the GPU's name where it is a CUDA device ("cuda:0 (NVIDIA H100 80GB HBM3)")."""
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return str(device)
