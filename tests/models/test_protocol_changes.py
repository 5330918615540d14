"""A backend setting below a task's frame plan is named, never silent (issue 65, point 5): which of ``max_frames``
and the pixel caps cut or downscale the frames a task planned (``visuals.limits_below_the_plan``), warned once per
task and setting and recorded for the results (``DocRequests``); and the device a model runs on is said, with a
warning where ``device=auto`` finds no GPU (``core.devices.resolve_device``)."""

from types import SimpleNamespace

import pytest
from loguru import logger
from PIL import Image

from lmms_egoplan.core import devices
from lmms_egoplan.core.run import SuiteRun
from lmms_egoplan.models.doc_requests import DocRequests
from lmms_egoplan.models.visuals import VisualLimits, limits_below_the_plan, prepare_visuals


def clip(count: int, size=(64, 48)) -> list[Image.Image]:
    return [Image.new("RGB", size) for _ in range(count)]


@pytest.fixture
def logged():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(message.record["message"]), level="INFO", format="{message}")
    yield lines
    logger.remove(sink)


def test_a_clip_longer_than_max_frames_and_frames_larger_than_a_cap_are_named_with_the_plan_and_the_setting():
    changes = dict(limits_below_the_plan([clip(32)], VisualLimits(max_frames=8, video_max_pixels=1000), "egoplan_hf"))
    assert set(changes) == {"max_frames", "video_max_pixels=1000"}
    assert "its plan shows 32 frames per clip; egoplan_hf model_args max_frames=8 keeps 8 of them" in \
        changes["max_frames"]
    assert "64x48" in changes["video_max_pixels=1000"]
    # What the warning says is what prepare_visuals does.
    prepared = prepare_visuals([clip(32)], limits=VisualLimits(max_frames=8, video_max_pixels=1000), video_native=True,
                               takes_images=True, model_name="m")
    assert len(prepared.videos[0].frames) == 8 and prepared.videos[0].frames[0].size != (64, 48)


def test_a_plan_within_the_limits_and_a_cap_above_the_images_change_nothing():
    limits = VisualLimits(max_frames=32, image_max_side=64, video_max_pixels=64 * 48)
    assert limits_below_the_plan([clip(32), Image.new("RGB", (64, 10)), "clip.mp4"], limits, "egoplan_hf") == []
    assert [setting for setting, _ in limits_below_the_plan([Image.new("RGB", (65, 10))], limits, "x")] == \
        ["image_max_side=64"]


def test_each_task_is_warned_once_per_setting_and_the_change_recorded(logged):
    backend = SimpleNamespace(limits=VisualLimits(max_frames=4), backend_name="egoplan_server", run=SuiteRun())
    for task in ("egointent", "egointent", "egointent", "other"):
        DocRequests._warn_of_limits_below_the_plan(backend, task, [clip(16)])
    warnings = [line for line in logged if "max_frames=4" in line]
    assert [line.split(":")[0] for line in warnings] == ["egointent", "other"]
    assert set(backend.run.protocol_changes) == {"egointent", "other"}
    assert "16 frames" in backend.run.protocol_changes["egointent"]["max_frames"]


def test_the_device_is_said_and_auto_without_a_gpu_warns_that_the_model_runs_on_the_cpu(logged, monkeypatch):
    monkeypatch.setattr(devices, "_auto", lambda: "cpu")
    assert devices.resolve_device("auto", runs="egoplan_hf's model m") == "cpu"
    assert len(logged) == 1 and "device=auto found no CUDA GPU" in logged[0] and "runs on the CPU" in logged[0]
    logged.clear()
    assert devices.resolve_device("cpu", runs="egoplan_hf's model m") == "cpu"
    assert logged == ["egoplan_hf's model m runs on cpu"]
    logged.clear()
    assert devices.resolve_device("auto") == "cpu" and logged == []  # nothing said where nothing runs
