"""Bad input through the real lmms-eval CLI: bad settings, unusable frames and clips (a frame only decoding finds
damaged among them), unwritable outputs, a chat template without visual placeholders, media outside the data root, a
misspelt task or model_arg, a missing annotation folder: exit status 1 and the suite's error on the last line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmms_egoplan.core.documentation import doc_page
from tests.e2e.runs import broken_copy, egoplan_run, first_epic_frame, png_bytes, truncate


# Settings: one CLI run shows the exit status and last line of a settings error (a value of the wrong type,
# tests/e2e/test_failed_runs.py, which also shows the model never starts loading); every kind of settings
# error is named in process (tests/harness/test_benchmark_task.py). Media: one run per kind of damage
# through the CLI below; each damage's name in process (tests/egoplan/test_protocol.py).
def test_an_unusable_frame_is_named_at_load_or_skipped_and_counted(egoplan_data, tmp_path):
    data = broken_copy(egoplan_data, tmp_path)
    frame = first_epic_frame(data)
    truncate(frame, 0.6)
    stopped = egoplan_run(data, tmp_path / "stopped")
    assert stopped.returncode == 1 and stopped.results is None
    assert "truncated" in stopped.log and str(frame) in stopped.log and "EGOPLAN_EPIC_FRAMES_ROOT" in stopped.log
    skipped = egoplan_run(data, tmp_path / "skipped", skip_missing="true")
    assert skipped.returncode == 0 and skipped.metric("egoplan_val", "skipped_samples") == 1


@pytest.mark.parametrize("decoded_in", ["", ",prefetch_processes=1"], ids=["a thread", "a worker process"])
def test_a_frame_only_decoding_finds_damaged_stops_the_run_naming_it_on_the_last_line(decoded_in, egoplan_data,
                                                                                      tiny_model, tmp_path):
    """Its first and last bytes intact and left out of the frames decoded at load (none here): PIL, as
    lmms-eval sets it, would decode it to grey and the run would score it. The suite's strict decoder
    stops the run when the frame is read, with frames decoded ahead (visual_prefetch) in a thread or in a worker
    process (prefetch_processes), the error last (the progress bar used to be drawn below it)."""
    from lmms_egoplan.demo.kit.media import index_image, with_random_image_data

    data = broken_copy(egoplan_data, tmp_path)
    frame = first_epic_frame(data)
    frame.write_bytes(with_random_image_data(png_bytes(index_image(7)), redo_crc=True))  # read by content, as PIL does
    run = egoplan_run(data, tmp_path / "out", model="egoplan_hf",
                      model_args=f"pretrained={tiny_model('qwen2_vl')},visual_prefetch=2{decoded_in}",
                      images_decoded_at_load="0")
    assert run.returncode == 1 and run.results is None, run.log[-3000:]
    last_line = run.log.rstrip().splitlines()[-1]
    assert last_line.startswith("lmms-egoplan: error: EgoPlan sample ") and last_line.endswith(
        f"cannot decode image {frame}: broken data stream when reading image file; check EGOPLAN_EPIC_FRAMES_ROOT "
        f"(metadata.epic_frames_root) (a run with --use_cache resumes from the requests already scored)")


def test_a_clip_cut_short_is_named_at_load_or_skipped_and_counted(egoplan_data, tmp_path):
    """The hardest damage to see: its index comes first, so it opens; only its packets show the loss."""
    from lmms_egoplan.demo.kit.media import write_video

    data = broken_copy(egoplan_data, tmp_path)
    clip = data.clips_dir / "106.mp4"
    record = next(r for r in data.records() if r["sample_id"] == 106)
    start = record["task_progress_metadata"][0]["start_frame"]
    write_video(clip, first_index=start, num_frames=record["current_observation_frame"] - start + 1, faststart=True)
    truncate(clip, 0.5)
    run = egoplan_run(data, tmp_path / "out", visual_source="clips")
    assert run.returncode == 1 and "sample 106" in run.log and str(clip) in run.log and "EGOPLAN_CLIPS_DIR" in run.log
    assert "Running loglikelihood requests" not in run.log
    assert "cut short" in run.log or "damaged packet" in run.log  # the packets stop early, or the last one is damaged
    skipped = egoplan_run(data, tmp_path / "skipped", visual_source="clips", skip_missing="true")
    assert skipped.returncode == 0 and skipped.metric("egoplan_val", "skipped_samples") == 1


def test_an_output_path_that_cannot_be_written_fails_before_any_model_call(egoplan_data, tmp_path):
    blocker = tmp_path / "some_file"
    blocker.write_text("not a folder")
    run = egoplan_run(egoplan_data, tmp_path / "cwd", extra_args=["--output_path", str(blocker / "out")])
    assert run.returncode == 1 and f"--output_path {blocker / 'out'}: cannot write into" in run.log
    assert "Running loglikelihood requests" not in run.log


def test_a_chat_template_without_visual_placeholders_names_the_model_and_the_model_arg(egoplan_data, tiny_model,
                                                                                       tmp_path):
    template = tmp_path / "text-only.jinja"
    template.write_text("{% for m in messages %}{{ m['role'] }}: {% for p in m['content'] %}{% if p['type'] "
                        "== 'text' %}"
                        "{{ p['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endfor %}{% if add_generation_prompt "
                        "%}assistant: "
                        "{% endif %}")
    checkpoint = tiny_model("qwen2_vl")
    run = egoplan_run(egoplan_data, tmp_path / "out", model="egoplan_hf",
                      model_args=f"pretrained={checkpoint},chat_template={template}")
    assert run.returncode == 1
    assert f"{checkpoint}: the chat template renders 0 video placeholder(s)" in run.log
    assert "pass chat_template=<path" in run.log


def test_a_record_whose_media_leaves_the_data_root_stops_the_run_naming_it_last(egoplan_data, tmp_path):
    data = broken_copy(egoplan_data, tmp_path)
    records = data.records()
    records[4]["video_id"] = "../../../../etc/passwd"
    data.validation_file.write_text(json.dumps(records))
    run = egoplan_run(data, tmp_path / "out")
    assert run.returncode == 1 and run.results is None
    assert run.log.splitlines()[-1].startswith(f"lmms-egoplan: error: EgoPlan sample {records[4]['sample_id']}: field "
                                               f"video_id '../../../../etc/passwd' climbs out of it with '..'")


def test_a_task_that_is_not_found_in_a_run_of_the_suite_exits_1(tmp_path):
    """lmms-eval's own message (the suite's suggestions were dropped, docs/upstream/README.md), the exit status 1."""
    from lmms_egoplan.demo.kit.lmms_eval_run import run_lmms_eval

    run = run_lmms_eval(model="dummy", model_args="pretrained=unused", tasks=["egoplan_vall"], output_dir=tmp_path,
                        check=False)
    assert run.returncode == 1
    assert run.log.splitlines()[-1].startswith("lmms-egoplan: error: ValueError: Tasks not found: egoplan_vall.")


def test_an_unknown_model_arg_names_the_closest_one_on_the_last_line(egoplan_data, tiny_model, tmp_path):
    run = egoplan_run(egoplan_data, tmp_path, model="egoplan_hf",
                      model_args=f"pretrained={tiny_model('qwen2_vl')},max_frame=8")
    assert run.returncode == 1
    assert run.log.splitlines()[-1] == ("lmms-egoplan: error: egoplan_hf: unknown model_args max_frame (did you mean "
                                        f"max_frames?); every model_arg is in {doc_page('backend.md')}")


def test_a_missing_annotation_folder_is_named_on_the_last_line_and_lmms_evals_traceback_kept_in_a_file(
        egoplan_data, tmp_path):
    run = egoplan_run(egoplan_data, tmp_path, annotation_dir=str(tmp_path / "no_such_folder"))
    assert run.returncode == 1 and "Traceback" not in run.log
    [named] = [line for line in run.log.splitlines() if line.startswith("lmms-egoplan: lmms-eval's traceback")]
    trace = Path(named.rpartition(" is in ")[2])
    assert trace.parent == tmp_path  # in the run's output folder, nothing left outside it
    assert trace.read_text().startswith("Traceback") and "EgoPlan_validation.json not found" in trace.read_text()
    last = run.log.splitlines()[-1]
    assert last.startswith(f"lmms-egoplan: error: EgoPlan annotation file EgoPlan_validation.json not "
                           f"found: the folder "
                           f"{tmp_path / 'no_such_folder'}, named by EGOPLAN_ANNOTATION_DIR")
