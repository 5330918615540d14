"""core/media: frame plans, frame and video decoding (forward decode or seek), images, timing."""

from unittest import mock

import pytest

from lmms_egoplan.core import media
from lmms_egoplan.demo.kit import media as synthetic


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    # 300 frames with a keyframe every 12: near targets decode forward, far ones seek.
    return synthetic.write_video(tmp_path_factory.mktemp("video") / "clip.mp4", num_frames=300, fps=30)


def test_index_image_round_trip_survives_jpeg(tmp_path):
    folder = synthetic.write_frame_folder(tmp_path, [1, 777, 65535])
    for number in (1, 777, 65535):
        assert synthetic.read_index(media.load_image(folder / media.EPIC_FRAME_TEMPLATE.format(number))) == number


def test_video_frames_are_the_requested_ones_in_request_order(video):
    indices = [299, 0, 1, 13, 14, 150, 13, 298, 64]
    with media.VideoFile(video) as reader:
        assert reader.info.num_frames == 300 and reader.info.fps == 30
        frames = reader.frames(indices)
    assert [synthetic.read_index(f) for f in frames] == indices


def test_video_reader_is_reusable_across_batches_and_backwards(video):
    with media.VideoFile(video) as reader:
        assert [synthetic.read_index(f) for f in reader.frames([200, 201])] == [200, 201]
        assert [synthetic.read_index(f) for f in reader.frames([5, 250])] == [5, 250]


def test_every_frame_decodes_in_one_pass(video):
    with media.VideoFile(video) as reader:
        assert [synthetic.read_index(f) for f in reader.frames(range(300))] == list(range(300))


def test_folder_frames_are_the_requested_ones_in_request_order_each_file_read_once(tmp_path):
    folder = media.FrameFolder(synthetic.write_frame_folder(tmp_path, range(1, 21)))
    numbers = [20, 3, 3, 17, 1, 20, 3]
    with mock.patch.object(media, "load_image", wraps=media.load_image) as load_image:
        frames = folder.frames(numbers, max_side=16)
    assert [synthetic.read_index(f) for f in frames] == numbers
    assert sorted(call.args[0] for call in load_image.call_args_list) == [folder.frame_path(n) for n in (1, 3, 17, 20)]
    assert all(max(f.size) == 16 for f in frames)


def test_index_at_time_never_rounds_up(video):
    with media.VideoFile(video) as reader:
        assert reader.index_at(1.0) == 30
        assert reader.index_at(1.0 - 1e-3) == 29
        assert reader.index_at(0.0) == 0


def test_frame_past_the_end_names_the_video(video):
    with media.VideoFile(video) as reader, pytest.raises(media.MediaError, match=r"frame 300 .*clip\.mp4.*0\.\.299"):
        reader.frames([10, 300])


def test_a_video_cut_short_after_its_index_is_found_without_decoding(video, tmp_path):
    with media.VideoFile(video) as intact:
        assert intact.last_stored_frame(up_to=120) == 120
        assert intact.last_stored_frame(up_to=10_000) == 299
    clip = synthetic.write_video(tmp_path / "cut.mp4", num_frames=300, fps=30, faststart=True)
    clip.write_bytes(clip.read_bytes()[:clip.stat().st_size // 2])
    with media.VideoFile(clip) as cut:  # opens: the index came first and declares all 300 frames
        assert cut.info.num_frames == 300
        try:
            stored = cut.last_stored_frame(up_to=299)
        except media.MediaError as error:  # or the last packet read is marked damaged
            assert str(clip) in str(error)
        else:
            assert 0 < stored < 200


def test_missing_media_errors_name_the_path(tmp_path):
    with pytest.raises(media.MediaError, match="video not found: .*nope.mp4"):
        media.VideoFile(tmp_path / "nope.mp4")
    with pytest.raises(media.MediaError, match="frame folder not found"):
        media.FrameFolder(tmp_path / "missing")
    folder = media.FrameFolder(synthetic.write_frame_folder(tmp_path / "f", [1, 2]))
    assert media.image_problems(map(folder.frame_path, [1, 2, 3]), decoded=3) == {
        folder.frame_path(3): f"image not found: {folder.frame_path(3)}"}
    with pytest.raises(media.MediaError, match=r"frame_0000000003\.jpg"):
        folder.frames([1, 3])


def test_uniform_indices_stay_in_range_and_include_both_ends():
    assert media.uniform_indices(10, 20, 3) == [10, 15, 20]
    assert media.uniform_indices(0, 2, 5) == [0, 1, 1, 2, 2]
    assert media.uniform_indices(7, 100, 1) == [100]
    for count in range(2, 40):
        picked = media.uniform_indices(3, 57, count)
        assert picked[-1] == 57 and picked[0] == 3 and picked == sorted(picked) and max(picked) <= 57


def test_fit_within_downscales_only():
    image = synthetic.index_image(5, size=(64, 32))
    assert media.fit_within(image, 32).size == (32, 16)
    assert media.fit_within(image, 128).size == (64, 32)


def test_tagged_frames_regroup_into_clips_and_stay_plain_images():
    images = [synthetic.index_image(i) for i in range(6)]
    progress = media.as_video_frames(images[:3], clip="progress")
    other_clip = media.as_video_frames(images[3:5], clip="other")
    flat = [*progress, *other_clip, images[5], "/videos/clip.mp4"]
    assert all(hasattr(v, "size") for v in flat[:-1])  # built-in backends still see a list of images
    assert media.group_visuals(flat) == [images[:3], images[3:5], images[5], "/videos/clip.mp4"]
    assert media.group_visuals(images[5:]) == [images[5]]


# ---------------------------------------------------------------------------------------------
# Images decoded strictly, whatever lmms-eval sets
# ---------------------------------------------------------------------------------------------


def encoded(image, kind: str, **options) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


def photo(seed: int = 0, size=(96, 64)):
    import numpy as np
    from PIL import Image

    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def damaged_variants(seed: int = 0) -> dict[str, bytes]:
    """JPEG and PNG files cut short or with bytes replaced, in the ways copies and downloads damage them."""
    import zlib

    import numpy as np

    rng = np.random.default_rng(seed)
    jpeg, png = encoded(photo(seed), "JPEG"), encoded(photo(seed), "PNG")
    variants = {"jpeg cut in half": jpeg[:len(jpeg) // 2],
                "jpeg cut, its end marker added": jpeg[:len(jpeg) // 2] + b"\xff\xd9",
                "png cut in half": png[:len(png) // 2],
                "png with random image data": synthetic.with_random_image_data(png, seed)}
    for number in range(12):
        flipped = bytearray(jpeg)
        for position in rng.integers(2, len(jpeg) - 2, size=int(rng.integers(1, 12))):
            flipped[position] = int(rng.integers(0, 256))
        variants[f"jpeg with bytes replaced #{number}"] = bytes(flipped)
        start = png.index(b"IDAT") + 4
        length = int.from_bytes(png[start - 8:start - 4], "big")
        data = bytearray(png[start:start + length])
        data[int(rng.integers(0, length))] ^= 0xFF
        crc = zlib.crc32(b"IDAT" + data).to_bytes(4, "big")  # a damage the CRC does not show: the decoder must
        variants[f"png with a byte replaced, CRC "
                 f"redone #{number}"] = png[:start] + bytes(data) + crc + png[start + length + 4:]
    return variants


def test_images_are_decoded_strictly_while_lmms_evals_own_switch_and_decoding_stay_as_it_set_them(tmp_path):
    """lmms-eval turns ImageFile.LOAD_TRUNCATED_IMAGES on when it is imported; the suite's decoder refuses
    what that switch lets through, without ever turning it off: lmms-eval's own tasks, decoding in another
    thread meanwhile, still read the same damaged file as lmms-eval meant them to."""
    import threading

    import lmms_eval.api.task  # noqa: F401  (sets the switch, as in every run)
    from PIL import Image, ImageFile

    assert ImageFile.LOAD_TRUNCATED_IMAGES is True
    damaged = tmp_path / "damaged.png"  # starts and ends as a PNG does, its CRCs right: only decoding shows the damage
    damaged.write_bytes(synthetic.with_random_image_data(encoded(photo(), "PNG"), redo_crc=True))
    assert media.image_file_problem(damaged) is None and media.png_chunk_problem(damaged.read_bytes()) is None
    lenient_reads, stop = [], threading.Event()

    def lmms_eval_task_decoding():
        while not stop.is_set():
            try:
                with Image.open(damaged) as image:
                    lenient_reads.append(image.convert("RGB").size)
            except OSError as error:  # what a decoder that switched the setting off meanwhile would cause
                lenient_reads.append(error)

    other_thread = threading.Thread(target=lmms_eval_task_decoding)
    other_thread.start()
    try:
        for _ in range(200):
            with pytest.raises(media.MediaError, match=rf"cannot decode image {damaged}: broken data stream"):
                media.load_image(damaged)
    finally:
        stop.set()
        other_thread.join()
    assert lenient_reads and set(lenient_reads) == {(96, 64)}
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True


def test_the_strict_decoder_refuses_exactly_what_pil_refuses_with_the_switch_off_and_reads_pixels_as_pil_does(tmp_path):
    """The oracle is PIL itself, in a fresh interpreter where nothing has turned the switch on; the
    suite's decoder runs here, after lmms-eval turned it on. PNGs whose chunk CRCs fail are refused too
    (PIL does not check the image data's)."""
    import json
    import subprocess
    import sys

    import lmms_eval.api.task  # noqa: F401
    from PIL import Image

    files = {}
    for name, data in damaged_variants().items():
        files[name] = tmp_path / f"{len(files)}{'.png' if name.startswith('png') else '.jpg'}"
        files[name].write_bytes(data)
    oracle = subprocess.run([sys.executable, "-c", (
        "import json, sys\nfrom PIL import Image, ImageFile\nassert not "
        "ImageFile.LOAD_TRUNCATED_IMAGES\nverdicts = []\n"
        "for path in sys.argv[1:]:\n    try:\n        Image.open(path).convert('RGB')\n        verdicts.append(True)\n"
        "    except Exception:\n        verdicts.append(False)\nprint(json.dumps(verdicts))"),
                             *map(str, files.values())],
        capture_output=True, text=True, check=True)
    pil_reads = dict(zip(files, json.loads(oracle.stdout)))

    def suite_reads(path) -> bool:
        try:
            media.load_image(path)
        except media.MediaError:
            return False
        return True

    crc_found = {"png with random image data", "png cut in half"}
    assert {name: suite_reads(path) for name, path in files.items()} == {
        name: reads and name not in crc_found for name, reads in pil_reads.items()}
    assert not all(pil_reads.values()) and any(pil_reads.values())  # the variants show both verdicts
    for kind, options in (("JPEG", {}), ("JPEG", {"progressive": True}), ("PNG", {}), ("PNG", {"optimize": True}),
                          ("GIF", {}), ("BMP", {}), ("WEBP", {}), ("TIFF", {})):
        for mode in ("RGB", "P", "L", "RGBA", "I;16"):
            image = photo().convert(mode)
            try:
                data = encoded(image, kind, **options)
            except OSError:  # a mode the format cannot hold
                continue
            path = tmp_path / f"intact.{kind.lower()}"
            path.write_bytes(data)
            with Image.open(path) as reference:
                assert media.load_image(path).tobytes() == reference.convert("RGB").tobytes(), (kind, options, mode)


def test_a_file_that_is_no_image_is_found_by_its_first_bytes_and_one_of_another_format_is_read(tmp_path):
    page = tmp_path / "frame.jpg"
    page.write_text("<html><body>Access denied</body></html>\n")
    assert media.image_file_problem(page) == (f"not an image file (it starts with bytes 3c 68 74 6d 6c 3e 3c 62 6f 64 "
                                              f"79 3e, as no JPEG, PNG, GIF, BMP, WebP or TIFF file does): {page}")
    with pytest.raises(media.MediaError, match="not an image file"):
        media.load_image(page)
    png_named_jpg = tmp_path / "photo.jpg"
    png_named_jpg.write_bytes(encoded(photo(), "PNG"))  # PIL reads by content, as the official scripts do
    assert media.image_file_problem(png_named_jpg) is None and media.load_image(png_named_jpg).size == (96, 64)


def test_the_check_before_a_run_reads_every_header_and_decodes_a_sample_spread_over_the_images(tmp_path):
    paths = []
    for number in range(10):
        paths.append(tmp_path / f"{number}.png")
        paths[-1].write_bytes(encoded(photo(number), "PNG"))
    paths[7].write_bytes(synthetic.with_random_image_data(paths[7].read_bytes()))  # found by decoding only
    paths[2].write_bytes(b"GIF8")  # found by its first bytes
    with mock.patch.object(media, "load_image", wraps=media.load_image) as load_image:
        found = media.image_problems(paths, decoded=3)
    assert [call.args[0] for call in load_image.call_args_list] == [paths[0], paths[5], paths[9]]
    assert list(found) == [paths[2]] and "not an image file" in found[paths[2]]
    assert list(media.image_problems(paths, decoded=0)) == [paths[2]]
    found = media.image_problems([*paths, paths[7]], decoded=10)
    assert list(found) == [paths[2], paths[7]] and "PNG chunk b'IDAT' at byte 33 is damaged" in found[paths[7]]
