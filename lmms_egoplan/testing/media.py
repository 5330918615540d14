"""Synthetic media in the benchmarks' on-disk layouts, whose pixels say which frame they are.

Every frame carries its own index as a 4x4 grid of dark/bright blocks (16 bits), large
enough to survive JPEG and H.264 compression, so a test can decode which frame a model
was given and check it against the protocol (e.g. never past the observation frame).
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image

from lmms_egoplan.core.media import EPIC_FRAME_TEMPLATE

GRID = 4
DARK, BRIGHT = 40, 215
DEFAULT_SIZE = (64, 64)  # (width, height)


def index_image(index: int, size: tuple[int, int] = DEFAULT_SIZE) -> Image.Image:
    """An RGB image whose block pattern encodes ``index`` (0 <= index < 65536)."""
    if not 0 <= index < 2 ** (GRID * GRID):
        raise ValueError(f"index {index} does not fit in {GRID * GRID} bits")
    width, height = size
    bits = [(index >> bit) & 1 for bit in range(GRID * GRID)]
    cells = np.array([BRIGHT if b else DARK for b in bits], dtype=np.uint8).reshape(GRID, GRID)
    pixels = np.kron(cells, np.ones((height // GRID, width // GRID), dtype=np.uint8))
    pixels = np.pad(pixels, ((0, height - pixels.shape[0]), (0, width - pixels.shape[1])), mode="edge")
    return Image.fromarray(np.stack([pixels] * 3, axis=-1))


def read_index(image: Image.Image) -> int:
    """The index encoded by ``index_image`` (the image may have been resized or compressed)."""
    gray = np.asarray(image.convert("L"), dtype=np.float32)
    height, width = gray.shape
    index = 0
    for bit in range(GRID * GRID):
        row, col = divmod(bit, GRID)
        # Sample the middle half of each cell: compression blurs the cell borders.
        y0, y1 = int((row + 0.25) * height / GRID), int((row + 0.75) * height / GRID)
        x0, x1 = int((col + 0.25) * width / GRID), int((col + 0.75) * width / GRID)
        if gray[y0:y1, x0:x1].mean() > (DARK + BRIGHT) / 2:
            index |= 1 << bit
    return index


def write_video(path: str | os.PathLike, num_frames: int, fps: int | Fraction = 30,
                size: tuple[int, int] = DEFAULT_SIZE, keyframe_interval: int = 12, first_index: int = 0,
                faststart: bool = False) -> Path:
    """An H.264 mp4 whose frame ``i`` shows ``index_image(first_index + i)``; short GOPs exercise seeking.

    ``fps`` may be fractional (``Fraction(30000, 1001)``); ``first_index`` > 0 makes a clip cut
    from a longer source whose frames keep their source numbers. ``faststart``: the index (moov)
    before the frames, as streaming copies have it; cut short, such a file still opens.
    """
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", options={"movflags": "faststart"} if faststart else {}) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"g": str(keyframe_interval), "crf": "18", "bf": "0"}
        for index in range(num_frames):
            frame = av.VideoFrame.from_image(index_image(first_index + index, size))
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def write_frame_folder(folder: str | os.PathLike, numbers: Iterable[int],
                       size: tuple[int, int] = DEFAULT_SIZE, template: str = EPIC_FRAME_TEMPLATE) -> Path:
    """JPEG frames ``template.format(n)`` showing ``index_image(n)`` for each frame number."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for number in numbers:
        index_image(number, size).save(folder / template.format(number), quality=90)
    return folder


def write_image(path: str | os.PathLike, seed: int = 0, size: tuple[int, int] = DEFAULT_SIZE) -> Path:
    """A deterministic noise image (JPEG or PNG by suffix)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path
