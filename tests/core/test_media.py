"""core/media: frame plans, frame and video decoding (forward decode or seek), images, timing."""

from unittest import mock

import pytest

from lmms_egoplan.core import media
from lmms_egoplan.fixtures import media as synthetic


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
    assert folder.problems([1, 2, 3]) == [(folder.frame_path(3), f"image not found: {folder.frame_path(3)}")]
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
