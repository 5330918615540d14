"""Frames from videos, frame folders and images: the one place this suite decodes media.

Every request of a video benchmark pays for decoding, so readers open a file once and
serve a whole batch of frame indices from it: sorted targets, one forward decode where
targets are close, a keyframe seek where the next target is far ahead.
"""

from __future__ import annotations

import io
import itertools
import math
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TypeVar

from PIL import Image, ImageFile

# Targets further apart than this are reached by seeking to a keyframe instead of decoding
# every frame in between (a typical GOP is 1-2 s, i.e. 30-60 frames at 30 fps).
SEEK_GAP_FRAMES = 48

EPIC_FRAME_TEMPLATE = "frame_{:010d}.jpg"

# Frames that belong to one video carry this key in ``Image.info`` (value: a clip name). To
# lmms-eval's own backends they are ordinary images in a flat list; this suite's backend
# regroups them and hands each clip to the model as a video where the architecture has one.
VIDEO_CLIP_KEY = "lmms_egoplan.video_clip"
# A clip's frames also carry when each was shown (a ``FrameTime``), so that the suite's backend
# can give the model the frames' real timing; lmms-eval's own backends ignore it.
FRAME_TIME_KEY = "lmms_egoplan.frame_time"


class FrameTime(NamedTuple):
    """When a frame of a clip was shown: ``seconds`` from the start of the footage the task shows
    (e.g. the start of a task's first action, or of a step; a video file: its first frame), read at ``source_fps``,
    the frame rate the frame's number counts in."""

    seconds: float
    source_fps: float


def frame_times(numbers: Sequence[int], start: int, fps: float) -> list[FrameTime]:
    """The times of frames numbered ``numbers`` in a source counting ``fps`` frames per second,
    from its frame ``start``."""
    return [FrameTime((number - start) / fps, fps) for number in numbers]


class MediaError(FileNotFoundError):
    """A video, frame folder, frame or image is missing or unreadable.

    ``path`` is the offending file; the message says what was being read and, where the
    caller knows it, which setting points at it.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        super().__init__(message)
        self.path = None if path is None else str(path)


@dataclass(frozen=True)
class ImageFormat:
    """An image format the suite reads: the bytes a file of it starts with, and the bytes a complete
    one ends with (None: no fixed ending)."""

    name: str
    starts: tuple[bytes, ...]
    ending: bytes | None = None

    def begins(self, head: bytes) -> bool:
        return head.startswith(self.starts) and (self.name != "WebP" or head[8:12] == b"WEBP")


# JPEG: start-of-image then a marker, and the end-of-image marker (maybe followed by padding); PNG: the
# signature, and the IEND chunk with its CRC. Datasets ship JPEG and PNG; the others are formats PIL reads.
IMAGE_FORMATS = (ImageFormat("JPEG", (b"\xff\xd8\xff",), b"\xff\xd9"),
                 ImageFormat("PNG", (b"\x89PNG\r\n\x1a\n",), b"IEND\xaeB`\x82"),
                 ImageFormat("GIF", (b"GIF87a", b"GIF89a")), ImageFormat("BMP", (b"BM",)),
                 ImageFormat("WebP", (b"RIFF",)), ImageFormat("TIFF", (b"II*\x00", b"MM\x00*")))
_HEAD_BYTES = 12


def image_file_problem(path: str | os.PathLike) -> str | None:
    """What makes an image file unusable that a look at its first and last bytes shows (missing,
    empty, not an image of a format the suite reads, a JPEG or PNG cut short), or None: cheap enough
    for every image of a run before it starts. A file whose content is of another format than its
    name says (a PNG named .jpg) is read, by its content, as PIL reads it."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return f"image not found: {path}"
    except OSError as error:
        return f"cannot read image {path}: {error}"
    try:  # raw descriptor reads: this runs for every frame of a run
        size = os.fstat(descriptor).st_size
        if size == 0:
            return f"image is empty (0 bytes): {path}"
        head = os.pread(descriptor, _HEAD_BYTES, 0)
        tail = os.pread(descriptor, 64, max(0, size - 64)).rstrip(b"\x00")
    except OSError as error:
        return f"cannot read image {path}: {error}"
    finally:
        os.close(descriptor)
    kind = next((kind for kind in IMAGE_FORMATS if kind.begins(head)), None)
    if kind is None:
        names = [kind.name for kind in IMAGE_FORMATS]
        return (f"not an image file (it starts with bytes {head.hex(' ')}, as no {', '.join(names[:-1])} or "
                f"{names[-1]} file does): {path}")
    if kind.ending is not None and not tail.endswith(kind.ending):
        return f"image is truncated (it does not end as a {kind.name} file does): {path}"
    return None


def load_image(path: str | os.PathLike) -> Image.Image:
    """An RGB image from disk, decoded strictly (``decode_strictly``): a file that is missing, empty,
    not an image, cut short or damaged raises MediaError naming it. The one decoder of every image a
    suite task reads."""
    if problem := image_file_problem(path):
        raise MediaError(problem, path)
    try:
        with open(path, "rb") as file:
            data = file.read()
        return decode_strictly(data).convert("RGB")
    except (OSError, SyntaxError, ValueError, struct.error, Image.DecompressionBombError) as error:
        raise MediaError(f"cannot decode image {path}: {error}", path) from error


def decode_strictly(data: bytes) -> Image.Image:
    """The image held in ``data``, its pixels decoded as PIL decodes them with
    ``ImageFile.LOAD_TRUNCATED_IMAGES`` off, whatever that switch is set to; a PNG's chunks are
    checked against their CRCs too (PIL skips the image data's). Raises OSError (or SyntaxError,
    ValueError) for data that is cut short or damaged.

    lmms-eval turns the switch on for the whole process when it is imported (``lmms_eval/api/task.py``),
    so that PIL fills what it cannot decode with grey and carries on; flipping it off around a decode
    would change how lmms-eval's own tasks, maybe decoding in other threads, read their images. So this
    is ``ImageFile.load``'s decoding loop with the switch's answers fixed: data that ends before the
    decoder is done, or a decoder error, raises. Formats whose plugin decodes in a ``load`` of its own
    (WebP, TIFF) are left to it. ``ImageFile.Parser`` is no way round: it hands formats with a read
    function of their own (JPEG, PNG) to ``load``.
    """
    if data.startswith(b"\x89PNG") and (problem := png_chunk_problem(data)):
        raise OSError(problem)
    image = Image.open(io.BytesIO(data))
    if type(image).load is not ImageFile.ImageFile.load or not image.tile:
        image.load()
        return image
    fp = image.fp
    read = getattr(image, "load_read", fp.read)
    seek = getattr(image, "load_seek", fp.seek)
    image.load_prepare()
    # In file order, less consecutive tiles that differ only by their offset, as ImageFile.load reads them.
    tiles = [list(same)[-1] for _, same in itertools.groupby(sorted(image.tile, key=lambda tile: tile[2]),
                                                             lambda tile: (tile[0], tile[1], tile[3]))]
    for number, (decoder_name, extents, offset, args) in enumerate(tiles):
        seek(offset)
        following = tiles[number + 1][2] if number + 1 < len(tiles) else offset
        decoder = Image._getdecoder(image.mode, decoder_name, args, image.decoderconfig)
        try:
            decoder.setimage(image.im, extents)
            if decoder.pulls_fd:
                decoder.setfd(fp)
                error = decoder.decode(b"")[1]
            else:
                error = _push_to(decoder, read, fp, len(data), getattr(image, "tile_prefix", b""),
                                 following - offset if following > offset else image.decodermaxblock)
        finally:
            decoder.cleanup()
        if error < 0:
            raise ImageFile._get_oserror(error, encoder=False)
    image.tile = []
    image.load_end()
    return image


def _push_to(decoder, read: Callable[[int], bytes], fp, size: int, prefix: bytes, block: int) -> int:
    """Feed ``decoder`` from ``read`` until it is done; its error code. Data that ends first raises,
    also where a format's read function would pretend the data ended (JPEG's adds an end-of-image
    marker when the switch is on)."""
    buffer = prefix
    while True:
        try:
            chunk = b"" if fp.tell() >= size else read(block)
        except (IndexError, struct.error):
            chunk = b""
        if not chunk:
            raise OSError(f"image file is truncated ({len(buffer)} bytes not processed)")
        buffer += chunk
        consumed, error = decoder.decode(buffer)
        if consumed < 0:
            return error
        buffer = buffer[consumed:]


def png_chunk_problem(data: bytes) -> str | None:
    """What breaks the chunk structure of PNG ``data`` (a chunk that runs past the end, fails its CRC,
    or no IEND chunk), or None. Random bytes in the image data keep the file's start and end intact
    and decode, leniently, to grey: the CRCs find them without decoding."""
    view, position = memoryview(data), 8
    while position + 12 <= len(data):
        length = int.from_bytes(view[position:position + 4], "big")
        kind, end = bytes(view[position + 4:position + 8]), position + 12 + length
        if end > len(data):
            return f"PNG chunk {kind!r} at byte {position} runs past the end of the file"
        if zlib.crc32(view[position + 4:end - 4]) != int.from_bytes(view[end - 4:end], "big"):
            return f"PNG chunk {kind!r} at byte {position} is damaged (its CRC does not match)"
        if kind == b"IEND":
            return None
        position = end
    return "PNG file without its IEND chunk (cut short?)"


# Images decoded in full before a run by default (the setting ``images_decoded_at_load`` of each benchmark
# that reads images): a sample spread over the data, which finds what is wrong with a whole dataset (a format
# that does not decode, files damaged alike) in a fraction of a second; speed/bench_media_check.py measures it.
IMAGES_DECODED_AT_LOAD = 64


def image_problems(paths: Iterable[str | os.PathLike], decoded: int) -> dict[Path, str]:
    """What is wrong with each of the image files at ``paths``, by path (only those with a problem),
    checked before a run: every file's first and last bytes (``image_file_problem``), and a full
    strict decode (``load_image``) of ``decoded`` of those that pass, spread evenly over them in order
    (all of them where ``decoded`` is at least their number), which finds what only decoding shows."""
    paths = list(dict.fromkeys(Path(path) for path in paths))
    problems = {path: problem for path in paths if (problem := image_file_problem(path))}
    intact = [path for path in paths if path not in problems]
    if decoded >= len(intact):
        sample = intact
    else:
        sample = [intact[i] for i in uniform_indices(0, len(intact) - 1, decoded)] if decoded > 0 else []
    for path in dict.fromkeys(sample):
        try:
            load_image(path)
        except MediaError as error:
            problems[path] = str(error)
    return problems


def fit_within(image: Image.Image, max_side: int | None, max_pixels: int | None = None) -> Image.Image:
    """Downscale so the longer side is at most ``max_side`` and the area at most ``max_pixels``
    (aspect kept; either limit may be None); never upscale."""
    size = fitted_size(image.size, max_side, max_pixels)
    return image if size == image.size else image.resize(size, Image.BICUBIC)


def short_side_limit(size: tuple[int, int], short_side: int | None, max_side: int | None = None) -> int | None:
    """The ``max_side`` that gives frames of ``size`` (width, height) at most ``short_side`` pixels on their shorter
    side (as Ego4D's downscaled ``v1_288p`` copies, 288), within ``max_side`` too; ``max_side`` where the frames are
    that small already, the size is unknown (0) or ``short_side`` is None."""
    if not short_side or min(size) <= short_side:
        return max_side
    limit = math.floor(max(size) * short_side / min(size) + 1e-6)
    return min(limit, max_side) if max_side else limit


def fitted_size(size: tuple[int, int], max_side: int | None, max_pixels: int | None = None) -> tuple[int, int]:
    """The (width, height) ``fit_within`` gives an image of ``size``: ``size`` itself where it fits."""
    scale = 1.0
    if max_side:
        scale = min(scale, max_side / max(size))
    if max_pixels:
        scale = min(scale, math.sqrt(max_pixels / (size[0] * size[1])))
    if scale >= 1.0:
        return tuple(size)
    # floor (with float slack) keeps both limits true limits: rounding up could exceed max_pixels.
    return tuple(max(1, math.floor(side * scale + 1e-6)) for side in size)


def uniform_indices(first: int, last: int, count: int) -> list[int]:
    """``count`` frame indices spread evenly over ``[first, last]``, both ends included.

    With fewer frames than ``count`` in the range, indices repeat rather than leave the range:
    models expect a fixed number of frames, and no index may pass ``last``.
    """
    if count < 1:
        raise ValueError(f"frame count must be at least 1, got {count}")
    if last < first:
        raise ValueError(f"empty frame range [{first}, {last}]")
    if count == 1:
        return [last]
    step = (last - first) / (count - 1)
    return [min(last, first + math.floor(i * step + 0.5)) for i in range(count)]


# Times closer than this many seconds count as the same time (far below a frame's duration):
# float seconds cannot fall exactly on a frame boundary such as 100 x 1001 / 30000 s.
TIME_TOLERANCE = 1e-6


def frame_at(seconds: float, fps: float) -> int:
    """Index of the frame on screen at ``seconds`` (the last frame starting at or before it)."""
    return math.floor(seconds * fps + 1e-6)


def last_frame_before(seconds: float, fps: float) -> int:
    """Index of the last frame that starts strictly before ``seconds`` (-1 if none does).

    A frame starting within ``TIME_TOLERANCE`` of ``seconds`` counts as starting at it, so a
    time that falls on a frame boundary (as well as floats can say) excludes that frame.
    """
    return math.ceil((seconds - TIME_TOLERANCE) * fps) - 1


def as_video_frames(frames: Sequence[Image.Image], clip: str,
                    times: Sequence[FrameTime] | None = None) -> list[Image.Image]:
    """Tag ``frames`` (in time order) as one video clip named ``clip``, each with its time if
    ``times`` are given; returns them as a list. An image object given twice (a frame shown at two
    positions) is copied, so that each position carries its own time."""
    if times is not None and len(times) != len(frames):
        raise ValueError(f"clip {clip!r}: {len(frames)} frames but {len(times)} times")
    tagged: list[Image.Image] = []
    seen: set[int] = set()
    for position, frame in enumerate(frames):
        frame = frame.copy() if id(frame) in seen else frame
        seen.add(id(frame))
        frame.info[VIDEO_CLIP_KEY] = clip
        if times is not None:
            frame.info[FRAME_TIME_KEY] = FrameTime(*times[position])
        tagged.append(frame)
    return tagged


def frame_time(frame: Image.Image) -> FrameTime | None:
    """The time a clip's frame was tagged with (``as_video_frames``), or None."""
    return frame.info.get(FRAME_TIME_KEY)


def group_visuals(visuals: Sequence) -> list:
    """Regroup a flat visual list: consecutive frames of one tagged clip become a list (a video).

    Untagged images and anything else (e.g. a video path) pass through one by one, in order.
    """
    grouped: list = []
    current_clip = None
    for visual in visuals:
        clip = visual.info.get(VIDEO_CLIP_KEY) if isinstance(visual, Image.Image) else None
        if clip is not None and clip == current_clip:
            grouped[-1].append(visual)
        elif clip is not None:
            grouped.append([visual])
        else:
            grouped.append(visual)
        current_clip = clip
    return grouped


class FrameFolder:
    """A folder of extracted frames, e.g. EPIC-KITCHENS ``rgb_frames/<video_id>/frame_%010d.jpg``.

    Frame numbers are the numbers in the file names (EPIC-KITCHENS counts from 1).
    """

    def __init__(self, folder: str | os.PathLike, template: str = EPIC_FRAME_TEMPLATE):
        self.folder = Path(folder)
        self.template = template
        if not self.folder.is_dir():
            raise MediaError(f"frame folder not found: {self.folder}", self.folder)

    def frame_path(self, number: int) -> Path:
        return self.folder / self.template.format(number)

    def frames(self, numbers: Sequence[int], max_side: int | None = None) -> list[Image.Image]:
        """The frames numbered ``numbers`` (any order, repeats allowed), as RGB images; each file is
        read once (a repeated number gives the same image object)."""
        loaded = {n: fit_within(load_image(self.frame_path(n)), max_side) for n in dict.fromkeys(numbers)}
        return [loaded[number] for number in numbers]


@dataclass(frozen=True)
class VideoInfo:
    fps: float
    num_frames: int
    duration: float  # seconds
    size: tuple[int, int] = (0, 0)  # (width, height) of a frame as the stream declares it


class VideoFile:
    """A video file decoded with PyAV; frame ``i`` is the frame shown at ``i / fps`` seconds.

    Use as a context manager, or call ``close()``; one instance serves many ``frames`` calls.
    """

    def __init__(self, path: str | os.PathLike):
        import av  # imported here so that image-only users never load FFmpeg

        self.path = Path(path)
        if not self.path.is_file():
            raise MediaError(f"video not found: {self.path}", self.path)
        if self.path.stat().st_size == 0:  # FFmpeg calls it "Invalid data": say what it is
            raise MediaError(f"video is empty (0 bytes): {self.path}", self.path)
        try:
            self._container = av.open(str(self.path))
            self._stream = self._container.streams.video[0]
        except (av.error.FFmpegError, IndexError) as error:
            raise MediaError(f"cannot read video {self.path}: {error}", self.path) from error
        self._stream.thread_type = "AUTO"
        stream = self._stream
        fps = float(stream.average_rate or stream.guessed_rate or 0)
        if fps <= 0:
            raise MediaError(f"video {self.path} reports no frame rate", self.path)
        if stream.duration is not None:
            duration = float(stream.duration * stream.time_base)
        else:
            duration = float(self._container.duration or 0) / 1_000_000
        num_frames = stream.frames or int(round(duration * fps))
        self.info = VideoInfo(fps=fps, num_frames=num_frames, duration=duration,
                              size=(stream.codec_context.width, stream.codec_context.height))
        self._start = stream.start_time or 0

    def __enter__(self) -> "VideoFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._container.close()

    def index_at(self, seconds: float) -> int:
        """Index of the frame on screen at ``seconds`` (the last frame starting at or before it)."""
        return frame_at(seconds, self.info.fps)

    def _frame_index(self, frame) -> int:
        return round(float((frame.pts - self._start) * self._stream.time_base) * self.info.fps)

    def last_stored_frame(self, up_to: int) -> int:
        """The index of the last frame the file holds data for, read up to frame ``up_to`` (then
        ``up_to``) without decoding: reading packets costs about 1% of decoding frames, and finds a
        file cut short after its index (an interrupted copy or download), which opens fine. A damaged
        packet or unreadable data raises MediaError naming the video."""
        import av

        last = -1
        try:
            for packet in self._container.demux(self._stream):
                if packet.is_corrupt:
                    raise MediaError(f"video {self.path} has a damaged packet near frame {max(last, 0)}", self.path)
                if packet.pts is not None:
                    last = max(last, self._frame_index(packet))
                    if last >= up_to:
                        return up_to
        except av.error.FFmpegError as error:
            raise MediaError(f"cannot read video {self.path}: {error}", self.path) from None
        return last

    def frames(self, indices: Sequence[int], max_side: int | None = None) -> list[Image.Image]:
        """The frames at ``indices`` (any order, repeats allowed), as RGB images.

        An index past the end of the video raises MediaError naming the video and its length.
        """
        wanted = sorted(set(indices))
        if not wanted:
            return []
        outside = [i for i in (wanted[0], wanted[-1]) if not 0 <= i < self.info.num_frames]
        if outside:
            raise MediaError(
                f"frame {outside[0]} requested from {self.path}, which has frames 0..{self.info.num_frames - 1}",
                self.path,
            )
        decoded: dict[int, Image.Image] = {}
        frames = None  # decode iterator, positioned just after ``previous``
        previous = None  # (index, frame) of the last decoded frame
        for target in wanted:
            if previous is not None and previous[0] == target:
                decoded[target] = fit_within(previous[1].to_image(), max_side)
                continue
            if previous is None or not 0 < target - previous[0] <= SEEK_GAP_FRAMES:
                self._seek_before(target)
                frames, previous = self._decoded(), None
            chosen = None
            for frame in frames:
                index = self._frame_index(frame)
                if index > target:
                    # Variable frame timing: the frame on screen at the target is the one before.
                    chosen = previous
                    previous = (index, frame)
                    break
                previous = (index, frame)
                if index == target:
                    chosen = previous
                    break
            if chosen is None:
                raise MediaError(
                    f"frame {target} of {self.path} could not be decoded "
                    f"(last decoded frame: {previous[0] if previous else 'none'})",
                    self.path,
                )
            decoded[target] = fit_within(chosen[1].to_image(), max_side)
        return [decoded[i] for i in indices]

    def _decoded(self):
        """The stream's frames from the current position; a decoding error raises MediaError naming the video."""
        import av

        try:
            yield from self._container.decode(self._stream)
        except av.error.FFmpegError as error:
            raise MediaError(f"cannot decode {self.path}: {error}", self.path) from None

    def _seek_before(self, index: int) -> None:
        pts = self._start + int(index / self.info.fps / self._stream.time_base)
        self._container.seek(pts, stream=self._stream, backward=True, any_frame=False)


Item = TypeVar("Item")


def last_declared_frame(video: VideoFile, _item: object = None) -> tuple[int, str]:
    """``video_problems``' ``last_frame`` of a protocol whose frames span the whole clip (its last frame shown: a
    spread of ``linspace(0, total - 1, n)``): the clip's last declared frame."""
    return video.info.num_frames - 1, "its last frame (the last one shown)"


def video_problems(path: str | os.PathLike, items: Sequence[Item],
                   last_frame: Callable[[VideoFile, Item], tuple[int, str]]) -> list[tuple[Item, str]]:
    """What keeps each of ``items`` from reading the last frame it needs from the video at ``path``:
    the video missing or not opening (every item), a frame past its end, or data that stops before it
    (a copy cut short after its index opens fine). ``last_frame(video, item)`` gives the item's last
    file index and how to name that frame in a message ("frame 10000"). The video is opened once and
    its packets are read, without decoding, up to the furthest frame asked for. Items that can read
    their frames are left out."""
    try:
        with VideoFile(path) as video:
            count = video.info.num_frames
            wanted = [(item, *last_frame(video, item)) for item in items]
            if not wanted:
                return []
            stored = video.last_stored_frame(up_to=min(max(index for _, index, _ in wanted), count - 1))
            problems = []
            for item, index, name in wanted:
                if index >= count:
                    problems.append((item, f"{name} (file index {index}) is past the end of {path} "
                                           f"({count} frames at {video.info.fps:g} fps)"))
                elif index > stored:
                    problems.append((item, f"{path} holds frames up to file index {stored} of the {count} it "
                                           f"declares (cut short?); this sample needs {index}"))
            return problems
    except MediaError as error:
        return [(item, str(error)) for item in items]


@dataclass(frozen=True)
class MissingMedia:
    """A sample whose media cannot be read: left out where the user asked to skip such samples,
    otherwise the run stops naming it."""

    sample_id: Any
    path: str
    message: str  # what is missing, and the setting that points at it

    def __str__(self) -> str:
        return f"sample {self.sample_id}: {self.message}"


@dataclass
class LoadedSamples:
    """A benchmark's docs, and the samples left out for missing media."""

    docs: list[dict]
    skipped: list[MissingMedia]
