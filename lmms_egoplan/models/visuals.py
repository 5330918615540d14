"""A request's visuals in the form a transformers processor takes them.

``doc_to_visual(doc)`` returns a list that may mix PIL images, PIL frames tagged as one clip
(``media.as_video_frames``), nested lists of frames, and paths to image or video files. Each
item becomes either an image or a video, in the task's order; videos go to the model as videos
where the processor has a video input, and as a sequence of images otherwise. A video keeps when
each of its frames was shown (``media.FrameTime``: tagged by the task, or read from the video
file), and the processor gets that timing (``video_metadata``).
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

from PIL import Image

from lmms_egoplan.core.media import (
    FrameTime,
    VideoFile,
    fit_within,
    fitted_size,
    frame_time,
    frame_times,
    group_visuals,
    load_image,
    uniform_indices,
)

Key = TypeVar("Key")
Decoded = TypeVar("Decoded")

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
# The frame rate transformers' processors assume for frames that carry none (``VideoMetadata.
# sampled_fps``; the Qwen3-VL and SmolVLM processors): what a video without times gets in egoplan_hf.
UNTIMED_VIDEO_FPS = 24.0


class UnsupportedVisualError(ValueError):
    """A visual this backend or the loaded model cannot take."""


@dataclass(frozen=True)
class VisualLimits:
    """How much of each visual reaches the model (None: no limit)."""

    max_frames: int = 32
    image_max_side: int | None = None
    image_max_pixels: int | None = None
    video_max_side: int | None = None
    video_max_pixels: int | None = None

    def __post_init__(self):
        if self.max_frames < 1:
            raise ValueError(f"max_frames must be at least 1, got {self.max_frames}")


@dataclass
class Video:
    """A video's frames, in time order, and when each was shown (None: not known)."""

    frames: list[Image.Image]
    times: list[FrameTime] | None = None

    def metadata(self) -> dict:
        """The video's ``VideoMetadata`` for a transformers processor, so that each architecture
        reads the frames' real timing in its own way (docs/backend.md, Time).

        ``fps`` is the source's frame rate and ``frames_indices`` each frame's source frame
        number from the start of the footage, so ``frames_indices / fps`` are the frames' times
        (Qwen3-VL and SmolVLM write them into the prompt). ``total_num_frames`` is how many source
        frames the clip would hold at its sampling rate, so that transformers' ``sampled_fps``
        (``len(frames_indices) / total_num_frames * fps``) is the rate between the first and the
        last frame (Qwen2.5-VL's seconds per temporal patch); frames of one instant (a still shown
        n times) count as n consecutive source frames. Without times: transformers' own default
        (no frame rate: processors assume ``UNTIMED_VIDEO_FPS``).
        """
        count = len(self.frames)
        if self.times is None:
            return {"total_num_frames": count, "fps": None, "frames_indices": list(range(count))}
        fps = self.times[0].source_fps
        indices = [round(time.seconds * fps) for time in self.times]
        span = indices[-1] - indices[0]
        return {"fps": fps, "frames_indices": indices, "duration": self.times[-1].seconds,
                "total_num_frames": count * span / (count - 1) if count > 1 and span > 0 else count}


@dataclass
class ModelVisuals:
    """Chat content parts (placeholders, in order) and the media they stand for."""

    parts: list[dict] = field(default_factory=list)
    images: list[Image.Image] = field(default_factory=list)
    videos: list[Video] = field(default_factory=list)


def prepare_visuals(visuals: Sequence | None, *, limits: VisualLimits, video_native: bool,
                    takes_images: bool, model_name: str, videos_with_images: bool = True) -> ModelVisuals:
    """Turn ``doc_to_visual(doc)`` output into the model's input form (see the module docstring).

    ``videos_with_images`` False: the processor cannot take videos and images in one prompt (SmolVLM's
    video output overwrites the images'), so a request holding both gets its videos as frames."""
    prepared = ModelVisuals()
    for item in group_visuals(list(visuals or [])):
        video = _as_video(item, limits, model_name)
        if video is None:
            image = _as_image(item, model_name)
            _require_images(takes_images, model_name, type(item).__name__)
            prepared.parts.append({"type": "image"})
            prepared.images.append(fit_within(image, limits.image_max_side, limits.image_max_pixels))
            continue
        _require_images(takes_images, model_name, "video")
        video.frames = [fit_within(f, limits.video_max_side, limits.video_max_pixels) for f in video.frames]
        if video_native:
            prepared.parts.append({"type": "video"})
            prepared.videos.append(video)
        else:  # a sequence of images: the model is given no time
            prepared.parts.extend({"type": "image"} for _ in video.frames)
            prepared.images.extend(video.frames)
    if prepared.videos and prepared.images and not videos_with_images:
        return _videos_as_frames(prepared)
    return prepared


def limits_below_the_plan(visuals: Sequence | None, limits: VisualLimits, backend: str) -> list[tuple[str, str]]:
    """What ``limits`` (the backend's model_args) change of the visuals a task planned for one request, as (the
    setting, a sentence naming the task's plan and the setting): a clip of more frames than ``max_frames`` (the
    backend keeps ``max_frames`` of them), images or frames larger than a side or pixel cap (the backend downscales
    them). Reads the frames the task built (lists and PIL images); a file's frames are the backend's own choice."""
    changes = []
    for item in group_visuals(list(visuals or [])):
        if isinstance(item, (list, tuple)):
            if len(item) > limits.max_frames:
                changes.append(("max_frames", f"its plan shows {len(item)} frames per clip; {backend} model_args "
                                              f"max_frames={limits.max_frames} keeps {limits.max_frames} of them "
                                              f"(raise max_frames to {len(item)})"))
            frames, side, pixels, kind = item, limits.video_max_side, limits.video_max_pixels, "video"
        elif isinstance(item, Image.Image):
            frames, side, pixels, kind = [item], limits.image_max_side, limits.image_max_pixels, "image"
        else:
            continue
        largest = max((frame.size for frame in frames if isinstance(frame, Image.Image)),
                      key=lambda size: size[0] * size[1], default=None)
        if largest is not None and fitted_size(largest, side, pixels) != tuple(largest):
            setting = " and ".join(f"{kind}_{name}={value}" for name, value in (("max_side", side),
                                                                                  ("max_pixels", pixels)) if value)
            changes.append((setting, f"its plan gives {kind} frames of {largest[0]}x{largest[1]} pixels; {backend} "
                                     f"model_args {setting} downscales them (unset it, or raise it above the plan)"))
    return changes


def _videos_as_frames(prepared: ModelVisuals) -> ModelVisuals:
    """``prepared`` with each video replaced by its frames as images, in place of the video."""
    images, videos = iter(prepared.images), iter(prepared.videos)
    flat = ModelVisuals()
    for part in prepared.parts:
        frames = next(videos).frames if part["type"] == "video" else [next(images)]
        flat.parts.extend({"type": "image"} for _ in frames)
        flat.images.extend(frames)
    return flat


def _as_video(item, limits: VisualLimits, model_name: str) -> Video | None:
    """``item`` as a video if it is one (a frame list, or a video file: frames timed by the
    container), at most ``limits.max_frames`` frames of it spread uniformly; else None."""
    if isinstance(item, (list, tuple)):
        frames = [_rgb(frame) for frame in item]
        if not frames:
            raise UnsupportedVisualError(f"{model_name}: a video without frames (an empty frame list)")
        times = [frame_time(frame) for frame in frames]
        if any(time is None for time in times) != all(time is None for time in times):
            raise UnsupportedVisualError(f"{model_name}: some frames of a video are tagged with their time and "
                                         f"others are not; tag all of them (media.as_video_frames) or none")
        kept = uniform_indices(0, len(frames) - 1, min(len(frames), limits.max_frames))
        return Video([frames[i] for i in kept], None if times[0] is None else [times[i] for i in kept])
    if isinstance(item, (str, os.PathLike)) and Path(item).suffix.lower() not in IMAGE_SUFFIXES:
        with VideoFile(item) as video:
            last = video.info.num_frames - 1
            indices = uniform_indices(0, last, min(limits.max_frames, last + 1))
            return Video(video.frames(indices), frame_times(indices, 0, video.info.fps))
    return None


def _as_image(item, model_name: str) -> Image.Image:
    if isinstance(item, Image.Image):
        return _rgb(item)
    if isinstance(item, (str, os.PathLike)):
        return load_image(item)
    raise UnsupportedVisualError(
        f"{model_name}: cannot take a visual of type {type(item).__name__} ({str(item)[:80]!r}); "
        f"doc_to_visual may return PIL images, lists of PIL frames (a video) and image or video file paths"
    )


def _rgb(image) -> Image.Image:
    if not isinstance(image, Image.Image):
        raise UnsupportedVisualError(f"a video frame must be a PIL image, got {type(image).__name__}")
    return image if image.mode == "RGB" else image.convert("RGB")


def _require_images(takes_images: bool, model_name: str, what: str) -> None:
    if not takes_images:
        raise UnsupportedVisualError(
            f"{model_name} is a text-only model (no image processor), but the request has a {what} visual"
        )


def decode_ahead(decode: Callable[[Key], Decoded], keys: Sequence[Key], ahead: int) -> Iterator[Decoded]:
    """``decode(key)`` for each key, in order, with the next ``ahead`` keys decoded in a background
    thread while the caller works on the current one (``ahead`` 0: each decoded when reached).

    At most ``ahead`` decoded keys wait beyond the current one (bounded memory); a decoding error is
    raised when its key is reached, after every key before it was handed out, as without prefetch.
    """
    if ahead < 1:
        yield from map(decode, keys)
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="egoplan_hf-visuals")
    remaining = iter(keys)
    pending = collections.deque(pool.submit(decode, key) for key in itertools.islice(remaining, ahead + 1))
    try:
        while pending:
            yield pending.popleft().result()
            pending.extend(pool.submit(decode, key) for key in itertools.islice(remaining, 1))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def decode_ahead_in_processes(decode: Callable[[Key], Decoded], keys: Sequence[Key], ahead: int, processes: int,
                              pin_memory: bool = False) -> Iterator[Decoded]:
    """``decode_ahead`` with the decoding in ``processes`` worker processes instead of a thread: a thread shares
    the interpreter lock with the caller, and ``egoplan_hf``'s preparation (video decoding, the processor) holds it
    for most of its time (measured: a Python thread beside it ran at 40 % of its speed alone), so that the thread
    that should keep the GPU fed waits for it. torch's ``DataLoader`` runs them: forked workers (``decode``'s state
    is inherited, nothing of it pickled, as its own workers run beside a model on a GPU), results back in key order
    through shared memory (tensors are not copied through a pipe), ``pin_memory``: pinned by its thread in this
    process (a worker must not touch CUDA). A worker runs torch on one thread, as the DataLoader sets it (more would
    start an OpenMP pool in a forked child, which GNU OpenMP deadlocks on): a batch's preparation took 1.5 to 1.7
    times as long as on 2 threads (Qwen2.5-VL-7B's frames, measured on 2 cores), so more processes, not threads,
    keep up with a fast model. A decoding error is raised here, itself (not the DataLoader's rewrapping,
    which turns an error whose constructor takes two arguments into a RuntimeError), when its key is reached.
    ``decode``'s result must pickle; keep what travels back small (no decoded frames once they are pixel values)."""
    from torch.utils.data import DataLoader

    loader = DataLoader(_Decoding(decode, keys), batch_size=None, num_workers=processes, collate_fn=_as_decoded,
                        prefetch_factor=max(1, -(-ahead // processes)), pin_memory=pin_memory,
                        multiprocessing_context="fork")
    for decoded in loader:
        if isinstance(decoded, _DecodingFailed):
            raise decoded.error
        yield decoded


@dataclass
class _DecodingFailed:
    """A worker's decoding error, sent back as a result."""

    error: Exception

    def pin_memory(self) -> _DecodingFailed:
        return self


class _Decoding:
    """The keys as a map-style dataset whose items are decoded keys (``decode_ahead_in_processes``)."""

    def __init__(self, decode: Callable[[Key], Decoded], keys: Sequence[Key]):
        self.decode, self.keys = decode, keys

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, index: int) -> Decoded | _DecodingFailed:
        try:
            return self.decode(self.keys[index])
        except Exception as error:
            try:  # what cannot be rebuilt from its pickle would never arrive: its message does
                pickle.loads(pickle.dumps(error))
            except Exception:
                error = RuntimeError(f"{type(error).__name__}: {error}")
            return _DecodingFailed(error)


def _as_decoded(item: Decoded) -> Decoded:
    return item  # no collation: each item is one decoded key
