"""Pixels sent to the device as the processor's uint8 values and normalised there (issue 78 point 3).

A Qwen-VL processor resizes each image or frame as uint8 (torchvision's resize of a uint8 tensor rounds back to
uint8), lays the values out in patches, and only then rescales and normalises them in float32, one channel at a time
(``rescale_and_normalize``: ``(x - mean / rescale_factor) / (std / rescale_factor)``, the factor folded into the mean
and the standard deviation). Asked for neither (``do_rescale`` and ``do_normalize`` off), it returns the same patches as
uint8: a quarter of float32's bytes, half of bfloat16's. ``DevicePixels`` normalises them on the device with the
processor's own mean, standard deviation and factor in that order of operations, so the model gets the values the
processor would have given, bit for bit in float32 (then cast to the model's dtype, as the host cast them before).
Other architectures' processors (their resizing, cropping and patch layouts not checked against this) keep
normalising on the host.
"""

from __future__ import annotations

from typing import Mapping, MutableMapping

import torch

# Architectures whose processors lay out patches as (patches, channels x temporal patch x patch x patch), channels
# outermost, from uint8 resized values (Qwen2VLImageProcessor / Qwen2VLVideoProcessor and Qwen3-VL's video processor).
PATCHED_UINT8 = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_vl"})
# Each pixel input, and the processor part whose mean, standard deviation and factor normalise it.
PIXEL_INPUTS = {"pixel_values": "image_processor", "pixel_values_videos": "video_processor"}
RAW_VALUES = {"do_rescale": False, "do_normalize": False}  # the processor's keyword arguments for uint8 patches


class DevicePixels:
    """Normalises a processor's uint8 patches where they are used (``normalised``), from the processor's constants."""

    def __init__(self, processor, dtype: torch.dtype):
        # Per pixel input: (mean / rescale_factor, std / rescale_factor) in float32, as the processor folds them.
        self.constants = {}
        for key, part in PIXEL_INPUTS.items():
            settings = getattr(processor, part, None)
            if settings is not None:
                factor = 1.0 / settings.rescale_factor
                self.constants[key] = (torch.tensor(settings.image_mean) * factor,
                                       torch.tensor(settings.image_std) * factor)
        self.dtype = dtype
        self._on_devices: dict[tuple[str, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def for_model(cls, model_type: str, processor, dtype: torch.dtype) -> DevicePixels | None:
        """For a ``PATCHED_UINT8`` architecture whose processor rescales and normalises every pixel input it makes
        (else None: the host does, as the processor is set)."""
        parts = [getattr(processor, name) for name in PIXEL_INPUTS.values() if getattr(processor, name, None)]
        if model_type not in PATCHED_UINT8 or not parts or not all(part.do_rescale and part.do_normalize
                                                                    for part in parts):
            return None
        return cls(processor, dtype)

    def on_host(self, inputs: MutableMapping) -> MutableMapping:
        """``inputs`` (asked of the processor with ``RAW_VALUES``) with any pixel input that did not come back as
        uint8 (a processor without torchvision's backend) normalised here as the device would, so that either way
        the model gets the same values."""
        for key in self.constants:
            if key in inputs and inputs[key].dtype != torch.uint8:
                inputs[key] = self._normalise(key, inputs[key])
        return inputs

    def normalised(self, inputs: Mapping) -> dict:
        """A copy of ``inputs`` (on the device) with their uint8 pixel inputs normalised there, in the model's dtype."""
        return {key: self._normalise(key, value) if key in self.constants and value.dtype == torch.uint8 else value
                for key, value in inputs.items()}

    def _normalise(self, key: str, patches: torch.Tensor) -> torch.Tensor:
        where = (key, patches.device)
        if where not in self._on_devices:  # copied once per device: a small copy per batch would wait on the host
            self._on_devices[where] = tuple(value.to(patches.device)[:, None] for value in self.constants[key])
        mean, std = self._on_devices[where]
        by_channel = patches.to(torch.float32).reshape(patches.shape[0], len(mean), -1)
        return ((by_channel - mean) / std).reshape(patches.shape).to(self.dtype)
