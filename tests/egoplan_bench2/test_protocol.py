"""EgoPlan-Bench2: both data sources, the visual input for image and video models, the official
prompt, scoring under both parsers with the breakdowns, the likelihood diagnostic, bad input, and the
defects of lmms-eval's built-in `egoplan2`, each shown on lmms-eval's own code."""

import importlib.util
import json
import random
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from unittest import mock

import lmms_eval
import numpy as np
import pytest
import yaml
from lmms_eval.utils import load_yaml_config
from PIL import Image

from lmms_egoplan.contract.benchmark import TaskContext
from lmms_egoplan.core import media
from lmms_egoplan.core.candidate_ranking import CandidateLossError
from lmms_egoplan.core.request_options import ANSWER_AND_END_OF_TURN, LOSS_MEAN, NONZERO_LOSS_TOKENS, SCORED_SPAN
from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.demo.egoplan_bench2 import EGO4D_VIDEOS, build_fixture
from lmms_egoplan.demo.kit.media import read_index, write_video
from lmms_egoplan.egoplan_bench2 import data, settings, task
from lmms_egoplan.models.visuals import VisualLimits, prepare_visuals

TASKS = Path(__file__).resolve().parents[2] / "tasks" / "egoplan_bench2"
FPS = 30  # the fixture's Ego4D videos, as the release's v1_288p copies


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("egoplan_bench2"))


def settings_for(fixture, **overrides):
    return resolve_settings(settings.EgoPlanBench2Settings, task="egoplan_bench2_test_case", metadata={},
                            env_prefix="EGOPLAN2", environ=fixture.env(**overrides))


def load(fixture, **overrides):
    return data.load_samples(settings_for(fixture, **overrides))


def official_keyframes(record: dict, count: int = 8) -> list[int]:
    """eval.py line 63, the official expression itself."""
    return np.linspace(record["task_start_frame"], record["current_observation_frame"], count, endpoint=True,
                       dtype=int).tolist()


def shown(doc):
    """(clip frame numbers or None, separate images' frame numbers): what the pixels of the doc's
    visuals say, grouped as the suite's backend groups them."""
    visuals = task.doc_to_visual(doc)
    assert all(isinstance(v, Image.Image) for v in visuals)  # lmms-eval's backends: a flat list of images
    grouped = media.group_visuals(visuals)
    clips = [item for item in grouped if isinstance(item, list)]
    assert len(clips) <= 1 and (not clips or grouped[0] is clips[0])
    return ([read_index(frame) for frame in clips[0]] if clips else None,
            [read_index(item) for item in grouped if not isinstance(item, list)])


# --- Data -------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["official", "seed_bench_r1"])
def test_docs_keep_the_questions_in_order_with_their_choices_gold_domain_and_scenario(fixture, source):
    loaded = load(fixture, data_source=source)
    records = fixture.records()
    assert loaded.skipped == [] and [d["sample_id"] for d in loaded.docs] == [r["sample_id"] for r in records]
    for doc, record in zip(loaded.docs, records):
        assert task.doc_to_choice(doc) == [record[f"choice_{x}"] for x in "abcd"]
        assert task.doc_to_choice(doc)[task.doc_to_target(doc)] == record["answer"]
        assert (doc["domain"], doc["scenario"], doc["task_goal"]) == (record["domain"], record["scenario"],
                                                                      record["task_goal"])
    if source == "official":  # the video eval.py opens: the sample id up to its first "_"
        assert [Path(d["video"]).name for d in loaded.docs] == [r["sample_id"].split("_")[0] + ".mp4" for r in records]
    else:  # the package's records carry no observation frame number: nothing needs one
        assert all("current_observation_frame" not in record for record in fixture.package_records())


# --- Visual input -----------------------------------------------------------------------------


def test_image_models_get_the_eight_official_keyframes_as_separate_images(fixture):
    for doc, record in zip(load(fixture).docs, fixture.records()):
        assert shown(doc) == (None, official_keyframes(record))  # the last one is the observation
    sample = fixture.records()[0]  # the release README's example: frames 0 .. 656
    assert official_keyframes({**sample, "current_observation_frame": 656}) == [0, 93, 187, 281, 374, 468, 562, 656]


def test_video_models_get_the_clip_with_each_frames_real_time(fixture):
    """``clip``: 32 frames over [start, observation] as LongVA samples the cut clip (its
    ``np.linspace(0, total - 1, 32, dtype=int)``, shifted to the clip's first frame), timed from the
    task's start at 30 fps; a video model gets them as one video with those times."""
    for doc, record in zip(load(fixture, frame_sampling="clip").docs, fixture.records()):
        start, observation = record["task_start_frame"], record["current_observation_frame"]
        cut_clip = (start + np.linspace(0, observation - start, 32, dtype=int)).tolist()
        assert shown(doc) == (cut_clip, [])
        video = prepare_visuals(task.doc_to_visual(doc), limits=VisualLimits(), video_native=True, takes_images=True,
                                model_name="m").videos[0]
        assert [time.seconds for time in video.times] == pytest.approx([(n - start) / FPS for n in cut_clip])
    assert shown(load(fixture, frame_sampling="clip",
                      num_frames=5).docs[0])[0] == official_keyframes(fixture.records()[0], 5)


def test_the_clip_frames_are_longvas_samples_of_the_cut_clip_for_any_task_span():
    """eval.py ``cut_video_clip`` writes the frames start..observation (``range(start, end + 1)``) and LongVA's
    ``load_video`` samples ``np.linspace(0, total_frame_num - 1, 32, dtype=int)`` of the cut clip
    (models/LongVA/inference.py@5be8155 lines 294-309): the frames ``shown_frames`` gives from the task's start, for
    spans short and long and starts near 0 and deep in a video (the keyframes' 8 too)."""
    rng = random.Random(0)
    for _ in range(3000):
        start = rng.choice([0, 1, rng.randint(0, 600_000)])
        total_frame_num = rng.choice([rng.randint(2, 60), rng.randint(2, 20_000)])  # the cut clip's frames
        for count in (32, 8):
            sampled = np.linspace(0, total_frame_num - 1, count, dtype=int).tolist()
            assert data.shown_frames(start, start + total_frame_num - 1, count) == [start + i for i in sampled]


@pytest.mark.parametrize("sampling", ["keyframes", "clip"])
def test_the_seed_bench_r1_package_shows_the_same_frames_its_observation_an_image_of_its_own(fixture, sampling):
    """The package's clip spans the task progress: the plan's frames are placed in it by position; the
    last, the observation, is the package's image, shown after the clip; a question with nothing done
    yet has no clip and shows its observation image in every place."""
    official = load(fixture, frame_sampling=sampling).docs
    for doc, release in zip(load(fixture, data_source="seed_bench_r1", frame_sampling=sampling).docs, official):
        assert doc["media_kind"] == "seed_bench_r1" and release["media_kind"] == "ego4d_video"
        clip, images = shown(doc)
        frames = release["frame_numbers"]
        if sampling == "keyframes":
            assert (clip, images) == (None, frames)
        else:
            assert (clip, images) == (frames[:-1], [frames[-1]])
        if doc["video"] is None:
            assert len(set(frames)) == 1 and Path(doc["observation_image"]).is_file()
    if sampling == "clip":  # a video model: the clip as a video timed by its container, then the image
        package = load(fixture, data_source="seed_bench_r1", frame_sampling=sampling).docs[0]
        video = prepare_visuals(task.doc_to_visual(package), limits=VisualLimits(), video_native=True,
                                takes_images=True, model_name="m")
        assert video.parts == [{"type": "video"}, {"type": "image"}]
        start = fixture.records()[0]["task_start_frame"]
        assert [time.seconds for time in video.videos[0].times] == pytest.approx(
            [(n - start) / FPS for n in official[0]["frame_numbers"][:-1]])


def test_frame_numbers_are_read_at_the_annotation_rate_whatever_the_files_rate(fixture, tmp_path):
    """A copy of the videos re-encoded at 60 fps: annotation frame n (30 fps) is file frame 2n."""
    for uid, count in EGO4D_VIDEOS.items():
        write_video(tmp_path / f"{uid}.mp4", num_frames=2 * count, fps=60)
    for doc in load(fixture, ego4d_videos_root=tmp_path).docs:
        assert shown(doc)[1] == [2 * n for n in doc["frame_numbers"]]


def test_frames_are_decoded_once_for_the_four_candidates_of_the_likelihood_variant(fixture):
    doc = load(fixture).docs[1]
    task._visuals.cache_clear()
    with mock.patch.object(media, "VideoFile", wraps=media.VideoFile) as opened:
        calls = [task.doc_to_visual(doc) for _ in range(4)]
    assert opened.call_count == 1 and all(c == calls[0] and c is not calls[0] for c in calls[1:])


def test_max_side_bounds_the_frame_resolution(fixture):
    for source in ("official", "seed_bench_r1"):
        doc = load(fixture, data_source=source, max_side=32).docs[0]
        assert all(max(image.size) == 32 for image in task.doc_to_visual(doc))


def test_ego4d_frames_are_read_at_the_short_side_of_the_official_copies(fixture):
    """eval.py reads the Ego4D v1_288p copies; prepare fetches the full-scale videos, whose frames ego4d_short_side
    (288) brings to that size: the fixture's 64 px frames stand for full scale at a short side of 48. The package's
    clips and images keep their size."""
    def sizes(source, **overrides):
        task._visuals.cache_clear()
        return {image.size for image in task.doc_to_visual(load(fixture, data_source=source, **overrides).docs[0])}

    assert sizes("official") == {(64, 64)} and sizes("official", ego4d_short_side=48) == {(48, 48)}
    assert sizes("seed_bench_r1", ego4d_short_side=48) == sizes("seed_bench_r1")


# --- Prompt -----------------------------------------------------------------------------------

# eval.py lines 24-33, transcribed.
EVAL_PY_QA_TEMPLATE = """
Select the best answer to the following multiple-choice question based on the video. Respond with only the letter (A, B, C, or D) of the correct option.

Considering the progress shown in the video and my current observation in the last frame, what action should I take next in order to {}?

A. {}
B. {}
C. {}
D. {}
"""  # noqa: E501 (verbatim)


def test_the_prompt_is_the_official_template_and_the_likelihood_variant_asks_its_question_line(fixture):
    doc = load(fixture).docs[0]
    choices = task.doc_to_choice(doc)
    assert task.doc_to_text(doc) == EVAL_PY_QA_TEMPLATE.format(doc["task_goal"], *choices)
    assert task.doc_to_text(doc, {"pre_prompt": "<", "post_prompt": ">"}) == f"<{task.doc_to_text(doc)}>"
    question = task.doc_to_text_likelihood(doc)
    assert question in task.doc_to_text(doc) and question.endswith(f"in order to {doc['task_goal']}?")
    assert not any(choice in question for choice in choices)


def test_the_official_parser_gets_the_raw_answer_lmms_eval_would_strip_its_reasoning_blocks(fixture, monkeypatch):
    """lmms-eval's CLI strips <think> blocks by default; the task's own setting wins over the CLI's,
    so ``eval.py``'s parser sees what the model wrote."""
    from lmms_eval.api.reasoning import parse_reasoning_tags_config
    from lmms_eval.evaluator import parse_reasoning_tags_config as used_by_the_evaluator

    config = make_task(fixture, monkeypatch, "egoplan_bench2.yaml").config
    cli_default = '[["<think>", "</think>"], ["<analysis>", "</analysis>"]]'
    assert used_by_the_evaluator is parse_reasoning_tags_config
    assert parse_reasoning_tags_config(cli_value=cli_default, task_value=config.reasoning_tags) is None
    assert parse_reasoning_tags_config(cli_value=cli_default,
                                       task_value=None) is not None  # what a task without it gets


def test_the_data_and_parsing_modules_import_without_lmms_eval():
    code = ("import sys, lmms_egoplan.egoplan_bench2, lmms_egoplan.egoplan_bench2.data, "
            "lmms_egoplan.egoplan_bench2.parsing; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'lmms_eval', 'torch', 'transformers', "
            "'datasets'}))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


# --- Scoring ----------------------------------------------------------------------------------


def test_both_parsers_are_scored_the_setting_choosing_accuracy_and_unread_answers_counted_wrong(fixture):
    doc = load(fixture).docs[1]  # gold B, Hobbies / baking
    official, robust = settings.EgoPlanBench2Settings(), settings.EgoPlanBench2Settings(parser="robust")
    assert official.parser == "official"  # the default: eval.py's reading, as the paper's numbers were read
    # "Based ..." is read as B by the official parser, "Answer: D" by the robust one
    answer = "Based on the video, the tray is in.\n\nAnswer: D"
    scores = task.process_generation_results(doc, [answer], TaskContext("egoplan_bench2", robust))
    assert (scores["accuracy"], scores["accuracy_robust"], scores["accuracy_official"]) == (0.0, 0.0, 1.0)
    assert (scores["unparseable_robust"], scores["unparseable_official"]) == (0.0, 0.0)
    assert scores["predictions"] == {"sample_id": doc["sample_id"], "gold": "B", "label": "D", "parser": "robust",
                                     "letters": {"official": "B", "robust": "D"}, "domain": "Hobbies",
                                     "scenario": "baking"}
    scored_officially = task.process_generation_results(doc, [answer], TaskContext("egoplan_bench2", official, None))
    assert scored_officially["accuracy"] == 1.0
    # unparseable is the chosen parser's: an answer only the robust parser reads
    named = f"i would {task.doc_to_choice(doc)[2].lower()}"
    assert task.process_generation_results(doc, [named], TaskContext("egoplan_bench2", robust))["unparseable"] == 0.0
    assert task.process_generation_results(doc, [named], TaskContext("egoplan_bench2", official))["unparseable"] == 1.0
    unread = task.process_generation_results(doc, ["i would wait and see"],
                                          TaskContext("egoplan_bench2", robust))
    assert (unread["accuracy"], unread["unparseable_robust"], unread["unparseable_official"]) == (0.0, 1.0, 1.0)
    assert unread["predictions"]["label"] is None
    # each breakdown's accuracy and count, for the question's domain and scenario only
    assert {key for key in scores if key.startswith(("accuracy_d", "accuracy_s", "n_"))} == {
        "accuracy_domain_hobbies", "accuracy_scenario_baking", "n_domain_hobbies", "n_scenario_baking"}
    assert scores["accuracy_domain_hobbies"] == scores["accuracy"] and scores["n_scenario_baking"] == 1


def test_the_likelihood_variant_ranks_by_the_lowest_mean_loss_ties_to_the_first(fixture):
    doc = load(fixture).docs[3]  # gold D
    scores = task.process_likelihood_results(doc, [(2.0, False), [1.5, False], (3.0, False), (0.25, True)], None)
    assert scores["accuracy"] == 1.0 and scores["predictions"]["label"] == "D"
    assert scores["predictions"]["candidate_losses"] == {"A": 2.0, "B": 1.5, "C": 3.0, "D": 0.25}
    assert task.process_likelihood_results(doc, [(1.0, False)] * 4, None)["predictions"]["label"] == "A"


@pytest.mark.parametrize("position", range(4))
def test_a_nan_candidate_loss_stops_the_likelihood_variant_naming_the_question_wherever_it_stands(fixture, position):
    """min() over [nan, 1, 2, 3] picks A (the gold of a question whose gold is A): a failed score ranked."""
    doc = load(fixture).docs[0]
    losses = [1.0, 2.0, 3.0, 4.0]
    losses[position] = float("nan")
    with pytest.raises(CandidateLossError, match=rf"EgoPlan-Bench2 question {doc['sample_id']}: .*nan"):
        task.process_likelihood_results(doc, [(loss, False) for loss in losses], None)


def make_task(fixture, monkeypatch, yaml_name, **settings):
    for name, value in fixture.env(**settings).items():
        monkeypatch.setenv(name, value)
    config = load_yaml_config(str(TASKS / yaml_name))
    return config["class"](config=config)


def test_each_domain_and_scenario_of_the_data_gets_an_accuracy_and_a_count(fixture, monkeypatch):
    built = make_task(fixture, monkeypatch, "egoplan_bench2.yaml")
    records = fixture.records()
    breakdowns = {f"{field}_{record[field].lower().replace(' ', '_')}" for record in records
                  for field in ("domain", "scenario")}
    assert len([b for b in breakdowns if b.startswith("domain_")]) == 4
    for breakdown in breakdowns:
        assert {f"accuracy_{breakdown}", f"n_{breakdown}"} <= set(built.aggregation())
    assert {"skipped_samples", "unparseable_official"} <= set(built.aggregation())
    assert len(built.eval_docs) == len(records)


def test_the_likelihood_variant_scores_the_official_span_and_refuses_backends_that_cannot(fixture, monkeypatch):
    built = make_task(fixture, monkeypatch, "egoplan_bench2_likelihood.yaml")
    with pytest.raises(SettingsError, match=r"backend 'dummy' cannot honour.*EGOPLAN2_SCORED_TOKENS .*and "
                                             r"EGOPLAN2_LOSS_MEAN .* to 'every_scored_token'"):
        built._bind_to_backend(Namespace(model="dummy"))
    built._bind_to_backend(Namespace(model="egoplan_hf"))
    requests = built.construct_requests(doc_id=0, ctx="Next?", metadata={
        "task": "egoplan_bench2_likelihood", "doc_id": 0, "repeats": 1, "split": "test"})
    assert len(requests) == 4 and {SCORED_SPAN.of(request) for request in requests} == {ANSWER_AND_END_OF_TURN}
    assert {LOSS_MEAN.of(request) for request in requests} == {NONZERO_LOSS_TOKENS}  # as egoplan_val
    make_task(fixture, monkeypatch, "egoplan_bench2.yaml")._bind_to_backend(Namespace(model="dummy"))  # generation


# --- Bad input --------------------------------------------------------------------------------


def write_release(tmp_path, records) -> Path:
    path = tmp_path / "EgoPlan-Bench2.json"
    path.write_text(json.dumps(records))
    return path


def test_a_domain_the_paper_does_not_name_is_warned_and_scored_on_its_own(fixture, tmp_path):
    """A renamed or misspelt domain gets a breakdown of its own, which the report's domain table (the paper's four
    domains) does not show: the task says so when it loads."""
    from loguru import logger

    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.egoplan_bench2 import task as bench2_task

    records = fixture.records()
    records[1]["domain"] = "Sports"
    annotation = write_release(tmp_path, records)
    context = TaskContext("egoplan_bench2", settings_for(fixture, annotation_file=str(annotation)))
    lines = []
    sink = logger.add(lines.append, format="{message}")
    try:
        docs = bench2_task.load_docs(context).docs
    finally:
        logger.remove(sink)
    warned = [line for line in lines if "domains the paper does not name" in line]
    assert len(warned) == 1 and "'Sports': 1" in warned[0] and "Daily life, Hobbies, Recreation, Work" in warned[0]
    assert "accuracy_domain_sports" in {metric.name for metric in bench2_task.breakdown_metrics(context, docs)}


def test_two_scenarios_of_one_metric_name_are_named(fixture, tmp_path):
    """"Cooking food" and "cooking-food" would be scored as one accuracy_scenario_cooking_food: named at load."""
    records = fixture.records()
    records[1]["scenario"], records[2]["scenario"] = "Cooking food", "cooking-food"
    with pytest.raises(data.EgoPlanBench2DataError, match=r"scenarios 'Cooking food', 'cooking-food' share the metric "
                                                          r"name label 'cooking_food'; rename one"):
        load(fixture, annotation_file=write_release(tmp_path, records))


@pytest.mark.parametrize("damage, message", [
    (lambda r: r.pop("task_start_frame"), r"record #2 \(sample_id '.*_3'\): missing field\(s\) task_start_frame"),
    (lambda r: r.update(golden_choice_idx="E"), r"record #2 .*golden_choice_idx must be one of A, B, C, D, got 'E'"),
    (lambda r: r.update(current_observation_frame=r["task_start_frame"] - 1),
     r"record #2 .*comes before task_start_frame"),
    (lambda r: r.update(domain=""), r"record #2 .*domain must be a non-empty string"),
    (lambda r: r.update(sample_id=7), r"record #2 .*sample_id must be a string '<video uid>_<n>'"),
])
def test_a_bad_record_is_named_with_its_file_position_sample_and_field(fixture, tmp_path, damage, message):
    records = fixture.records()
    damage(records[2])
    path = write_release(tmp_path, records)
    with pytest.raises(data.EgoPlanBench2DataError, match=rf"EgoPlan-Bench2 annotation file {path}, {message}"):
        load(fixture, annotation_file=path)


def test_a_duplicate_sample_id_and_a_path_out_of_the_video_folder_are_refused(fixture, tmp_path):
    records = fixture.records()
    records[5]["sample_id"] = records[1]["sample_id"]
    with pytest.raises(data.EgoPlanBench2DataError, match=r"sample_id\(s\) '.*_2' appear more than once"):
        load(fixture, annotation_file=write_release(tmp_path, records))
    records = fixture.records()
    records[0]["sample_id"] = "../elsewhere_1"
    with pytest.raises(data.EgoPlanBench2DataError, match=r"record #0 .*field sample_id climbs out of it.*"
                                                          r"EGOPLAN2_ALLOW_PATHS_OUTSIDE_ROOT"):
        load(fixture, annotation_file=write_release(tmp_path, records))


def test_missing_media_stop_the_run_naming_sample_path_and_setting_or_are_skipped_and_counted(fixture, tmp_path):
    """One error lists every problem of the data, a record's field beside the media."""
    root = tmp_path / "copy"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    uid = list(EGO4D_VIDEOS)[1]
    (copy.ego4d_root / f"{uid}.mp4").unlink()  # questions 4, 5, 6
    records = copy.records()
    records[0]["current_observation_frame"] = 400  # past the end of its 330-frame video
    copy.annotation_file.write_text(json.dumps([*records, {**records[1], "sample_id": "x_9", "domain": 3}]))
    with pytest.raises(data.EgoPlanBench2DataError) as error:
        load(copy)
    message = str(error.value)
    assert message.startswith("5 problems in the EgoPlan-Bench2 data:")
    assert f"{copy.annotation_file}, record #8 (sample_id 'x_9'): domain must be a non-empty string, got 3" in message
    assert f"sample {records[0]['sample_id']}: observation frame 400 (file index 400) is past the end of" in message
    assert all(f"sample {records[i]['sample_id']}: video not found: {copy.ego4d_root / f'{uid}.mp4'}" in message
               for i in (3, 4, 5))
    assert "EGOPLAN2_EGO4D_VIDEOS_ROOT" in message and message.endswith("counted in the skipped_samples metric)")
    copy.annotation_file.write_text(json.dumps(records))
    loaded = load(copy, skip_missing="true")
    assert [s.sample_id for s in loaded.skipped] == [records[i]["sample_id"] for i in (0, 3, 4, 5)]
    assert f"video not found: {copy.ego4d_root / f'{uid}.mp4'}" in str(loaded.skipped[1])
    assert [d["sample_id"] for d in loaded.docs] == [records[i]["sample_id"] for i in (1, 2, 6, 7)]


def test_the_package_source_names_missing_files_and_fields(fixture, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    record = fixture.records()[0]  # its clip rewritten with its index first, then cut short: it still opens
    clip = copy.package_root / "videos" / "Ego4D" / f"{record['sample_id']}.mp4"
    write_video(clip, num_frames=record["current_observation_frame"] - record["task_start_frame"] + 1, fps=FPS,
                first_index=record["task_start_frame"], faststart=True)
    clip.write_bytes(clip.read_bytes()[:clip.stat().st_size // 2])
    with pytest.raises(data.EgoPlanBench2DataError,
                       match=rf"sample {record['sample_id']}: .*(cut short|damaged packet).*"
                                                          r"EGOPLAN2_SEED_BENCH_R1_ROOT"):
        load(copy, data_source="seed_bench_r1")
    clip.unlink()
    image = next((copy.package_root / "images" / "Ego4D").glob("*_2.png"))
    image.unlink()
    with pytest.raises(data.EgoPlanBench2DataError, match=rf"(?s)2 problems .*progress video not found: {clip}.*"
                                                          rf"image not found: {image}"):  # the missing clip too
        load(copy, data_source="seed_bench_r1")
    assert len(load(copy, data_source="seed_bench_r1", skip_missing="true").skipped) == 2
    with pytest.raises(data.EgoPlanBench2DataError,
                       match=rf"progress video not found: {clip}.*EGOPLAN2_SEED_BENCH_R1_ROOT"):
        load(copy, data_source="seed_bench_r1")
    level = copy.package_root / "annotations" / "validation_L3.jsonl"
    lines = level.read_text().splitlines()
    record = json.loads(lines[3])
    del record["current_observation_basename"]
    level.write_text("\n".join([*lines[:3], json.dumps(record), *lines[4:]]) + "\n")
    with pytest.raises(data.EgoPlanBench2DataError, match=rf"{level}:4 \(sample_id .*\): current_observation_basename "
                                                          r"must be a non-empty string"):
        load(copy, data_source="seed_bench_r1")
    level.write_text("\n")  # an empty level: no question read, never a smaller benchmark without a word
    with pytest.raises(data.EgoPlanBench2DataError, match=rf"{level} holds no record \(empty or blank\); fetch it "
                                                          r"again into the package that EGOPLAN2_SEED_BENCH_R1_ROOT"):
        load(copy, data_source="seed_bench_r1")
    level.unlink()
    with pytest.raises(data.EgoPlanBench2DataError, match=r"validation_L3.jsonl; set EGOPLAN2_SEED_BENCH_R1_ROOT"):
        load(copy, data_source="seed_bench_r1")


def test_an_observation_image_only_decoding_finds_damaged_is_named_or_skipped_and_counted(fixture, tmp_path):
    """The package's images are decoded strictly when the task loads (a sample of them:
    images_decoded_at_load; here all); with skip_missing the question is left out and counted."""
    from lmms_egoplan.demo.kit.media import with_random_image_data

    root = tmp_path / "copy"
    shutil.copytree(fixture.root, root)
    copy = build_fixture(root)
    record = copy.package_records()[5]
    image = copy.package_root / "images" / record["video_source"] / record["current_observation_basename"]
    image.write_bytes(with_random_image_data(image.read_bytes(), redo_crc=True))
    with pytest.raises(data.EgoPlanBench2DataError,
                       match=rf"EgoPlan-Bench2 sample {record['sample_id']}: cannot decode "
                                                          rf"image {image}: broken data stream.*SKIP_MISSING"):
        load(copy, data_source="seed_bench_r1")
    loaded = load(copy, data_source="seed_bench_r1", skip_missing="true")
    assert [skipped.sample_id for skipped in loaded.skipped] == [record["sample_id"]] and len(loaded.docs) == 7
    assert len(load(copy, data_source="seed_bench_r1", images_decoded_at_load="0").docs) == 8  # headers only


def test_settings_that_cannot_work_are_named(fixture):
    with pytest.raises(SettingsError, match="EGOPLAN2_EGO4D_VIDEOS_ROOT .* is not set"):
        load(fixture, ego4d_videos_root="")
    with pytest.raises(SettingsError, match="EGOPLAN2_SEED_BENCH_R1_ROOT .* is not set"):
        load(fixture, data_source="seed_bench_r1", seed_bench_r1_root="")
    with pytest.raises(SettingsError, match="EGOPLAN2_DATA_SOURCE .*official, seed_bench_r1"):
        load(fixture, data_source="hub")
    with pytest.raises(SettingsError, match="EGOPLAN2_PARSER .*robust, official"):
        load(fixture, parser="strict")
    with pytest.raises(SettingsError, match=r"EGOPLAN2_NUM_FRAMES .* must be at least 2"):
        load(fixture, num_frames=1)


# --- lmms-eval's built-in egoplan2 (0.7.3), on its own code -----------------------------------

LMMS_EVAL_EGOPLAN2 = Path(lmms_eval.__file__).parent / "tasks" / "egoplan2"


@pytest.fixture(scope="module")
def builtin():
    """lmms-eval's own ``egoplan2/utils.py`` and task YAML, as installed."""
    spec = importlib.util.spec_from_file_location("lmms_eval_egoplan2_utils", LMMS_EVAL_EGOPLAN2 / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    return utils, yaml.load((LMMS_EVAL_EGOPLAN2 / "egoplan2.yaml").read_text(), Loader=loader)


def test_builtin_egoplan2s_parser_is_a_truncated_copy_that_reads_answer_d_as_a(builtin):
    utils, _ = builtin
    from lmms_egoplan.egoplan_bench2.parsing import OFFICIAL_ANSWER_PREFIXES, official_letter, robust_letter

    # Its prefix list stops after the two fused strings: "Answer:", "Option:", "The correct answer" and
    # "The correct option" are gone, so the A of "Answer" is read before the letter that follows it.
    with_answer = ["Answer: D", "Answer:B", "Answer: (C) operate oven", "Final Answer: D"]
    assert [utils.extract_characters_regex(answer) for answer in with_answer] == ["A"] * 4
    assert [official_letter(answer) for answer in with_answer] == ["D", "B", "C", "D"]
    assert [robust_letter(answer, ["x", "y", "operate oven", "z"]) for answer in with_answer] == ["D", "B", "C", "D"]
    kept = {"Answer:", "Option:", "The correct answer", "The correct option"}
    assert kept <= set(OFFICIAL_ANSWER_PREFIXES)  # ... which the official parser removes
    assert utils.extract_characters_regex("Answer: A D") == "A" and official_letter("Answer: A D") == "A"


def test_builtin_egoplan2_reports_one_number_no_unparseable_count_no_domain_or_scenario(builtin):
    utils, _ = builtin
    docs = [{"sample_id": f"v_{i}", "domain": domain, "ground_truth": "B"}
            for i, domain in enumerate(["Hobbies", "Work", "Hobbies", "Daily life"])]
    results = [utils.egoplan2_process_results(doc, [answer])
               for doc, answer in zip(docs, ["B", "i cannot tell", "B", "not sure"])]
    assert all(set(result) == {"egoplan2_mcq_accuracy"} for result in results)  # nothing but the item
    assert all(set(result["egoplan2_mcq_accuracy"]) == {"sample_id", "pred_answer",
                                                        "ground_truth"} for result in results)
    accuracy = utils.egoplan2_aggregate_results([result["egoplan2_mcq_accuracy"] for result in results])
    assert accuracy == 0.5  # one float: two unread answers are wrong, uncounted; no domain in the items
    assert "scenario" not in utils.egoplan2_features  # its data has no scenario to break down by


def test_builtin_egoplan2s_prompt_settings_are_dead_code_and_its_data_is_a_third_party_copy(builtin):
    utils, config = builtin
    doc = {"formatted_question": "Which action next?\nA. x\nB. y\nC. z\nD. w"}
    for kwargs in config["lmms_eval_specific_kwargs"].values():  # default, gpt4v, xcomposer2_4khd
        assert utils.egoplan2_doc_to_text(doc, kwargs) == doc["formatted_question"]  # pre / post prompt ignored
    assert config["lmms_eval_specific_kwargs"]["default"]["post_prompt"]  # a prompt it never sends
    # Not the authors' release (qiulu66/EgoPlan-Bench2) nor their package (TencentARC/SEED-Bench-R1).
    assert (config["dataset_path"], config["test_split"]) == ("nv-njb/egoplan-bench2", "train")
    assert config["task"] == "egoplan2" and not any(t.startswith("egoplan2") for t in task_names())


def task_names() -> set[str]:
    names = set()
    for path in TASKS.glob("*.yaml"):
        names.add(yaml.safe_load(path.read_text().replace("!function", ""))["task"])
    return names
