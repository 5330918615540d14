"""EgoIntent: the flat annotation format, pre-outcome frame sampling, answer parsing and judging
(the authors' release layout: test_release.py; the task through the lmms-eval CLI: tests/e2e/test_egointent.py)."""

import hashlib
import itertools
import json
import math
import statistics
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmms_egoplan.contract.benchmark import TaskContext
from lmms_egoplan.core.media import VIDEO_CLIP_KEY
from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.demo.egointent import (
    VIDEOS,
    judge_rating,
    step_records,
    write_dataset,
)
from lmms_egoplan.demo.kit.judge_server import ChatServer, Reply
from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.egointent import protocol as egointent_protocol
from lmms_egoplan.egointent import task as egointent
from lmms_egoplan.egointent.data import (
    DIMENSIONS,
    FIELDS,
    EgoIntentDataError,
    clip_frame_indices,
    load_samples,
    read_flat,
    scenario_metric,
)
from lmms_egoplan.egointent.protocol import EgoIntentSettings, parse_judge_rating
from lmms_egoplan.egointent.task import doc_to_visual, parse_answer
from lmms_egoplan.judge.engine import Judge
from lmms_egoplan.judge.protocol import JudgeRequest
from lmms_egoplan.judge.providers.openai_compatible import OpenAIChatBackend
from lmms_egoplan.judge.rubrics import FixedRating, item_requests, judge_parts_item, score_judged

FPS_OF = {video.name: video.fps for video in VIDEOS}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("egointent") / "data")


@pytest.fixture(scope="module")
def docs(dataset):
    return dataset_docs(dataset)


def dataset_docs(dataset: Path, **settings) -> list[dict]:
    """The task's documents for the synthetic data (either layout), in order (lmms-eval logs only their index)."""
    return load_samples(EgoIntentSettings(annotations=dataset, **settings)).docs


def video_fps(doc) -> Fraction:
    """The exact frame rate of a synthetic video (float fps cannot say 30000/1001)."""
    return FPS_OF[Path(doc["video"]).stem]


def judge_env(judge, cache_dir, annotations):
    return {"EGOINTENT_ANNOTATIONS": str(annotations), "EGOINTENT_JUDGE_BASE_URL": judge.base_url,
            "EGOINTENT_JUDGE_MODEL": "loopback-judge", "EGOINTENT_JUDGE_CACHE_DIR": str(cache_dir),
            "EGOINTENT_JUDGE_BACKOFF": "0.01"}


# ---------------------------------------------------------------------------------------------
# The pre-outcome clip: no frame at or after the truncation time, ever
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fps", [Fraction(30), Fraction(30000, 1001), Fraction(25), Fraction(24000, 1001),
                                 Fraction(60000, 1001)], ids=["30", "29.97", "25", "23.976", "59.94"])
def test_no_frame_starts_at_or_after_the_truncation_time_on_or_between_frame_boundaries(fps):
    checked = 0
    for k in range(1, 400):
        for frames in (k, k + 0.5, k + 0.999, k + 0.001):
            for nudge in (0.0, 1e-9, -1e-9):
                end = float(frames / fps) + nudge
                indices = clip_frame_indices(max(0.0, end - 3.0), end, float(fps), 10_000, sample_fps=6, max_frames=32)
                assert all(Fraction(i) / fps < Fraction(end) for i in indices), (fps, end, indices)
                # ... and nothing more than that is dropped: the next frame starts at the truncation time
                # (a frame on the boundary, as well as floats can tell) or after it.
                assert Fraction(indices[-1] + 1) / fps >= Fraction(end) - Fraction(2, 10**6)
                checked += 1
    assert checked == 399 * 12


@pytest.mark.parametrize("max_frames", [32, 1000])
def test_frames_are_sampled_at_6_fps_and_a_long_clip_is_subsampled_uniformly_to_the_cap(max_frames):
    # 30 FPS, step from frame 30 to a truncation on the boundary of frame 270: frames 30..269, 8 s.
    indices = clip_frame_indices(1.0, 9.0, 30.0, 300, sample_fps=6, max_frames=max_frames)
    assert indices[0] == 30 and indices[-1] == 269
    gaps = {b - a for a, b in itertools.pairwise(indices)}
    if max_frames == 32:
        assert len(indices) == 32 and gaps <= {7, 8}  # 239 / 31 = 7.7: uniform over the clip
    else:
        assert len(indices) == 48 and gaps <= {5, 6}  # 239 / 47 = 5.09 frames: at most 6 FPS
    # A clip shorter than one sampling interval gives the last frame before the truncation.
    assert clip_frame_indices(3.34, 3.45, 30.0, 300, sample_fps=6, max_frames=32) == [103]
    # No cap (the paper's rule): 6 FPS however long the step.
    assert clip_frame_indices(1.0, 9.0, 30.0, 300, sample_fps=6, max_frames=None) == clip_frame_indices(
        1.0, 9.0, 30.0, 300, sample_fps=6, max_frames=1000)


def test_the_steps_sampled_below_6_fps_for_the_cap_are_counted_and_none_lifts_the_cap(dataset, docs):
    """A step is capped when its clip holds more frames at 6 FPS than max_frames: 32 frames cover
    31 / 6 = 5.17 s. The results count them (capped_samples); max_frames none samples every step at 6 FPS."""
    def at_6_fps(doc):
        span = (doc["frame_indices"][-1] - doc["frame_indices"][0]) / doc["video_fps"]
        return math.floor(span * 6 + 1e-9) + 1

    assert [doc["frames_capped"] for doc in docs] == [len(doc["frame_indices"]) < at_6_fps(doc) for doc in docs]
    assert sum(doc["frames_capped"] for doc in docs) == 3
    assert all(len(doc["frame_indices"]) == 32 for doc in docs if doc["frames_capped"])
    values = egointent.process_results(next(d for d in docs if d["frames_capped"]), ['{"local_intent": "x"}'], None)
    assert values["capped_samples"] == 1 and egointent.capped_samples([1, 0, 1]) == 2
    uncapped = load_samples(resolve_settings(EgoIntentSettings, task="egointent",
                                             metadata={"annotations": str(dataset)}, env_prefix="EGOINTENT",
                                             environ={"EGOINTENT_MAX_FRAMES": "none"})).docs
    assert not any(doc["frames_capped"] for doc in uncapped)
    assert max(len(doc["frame_indices"]) for doc in uncapped) == 58  # 9.6 s at 25 fps


def test_decoded_frames_show_only_pre_outcome_content_at_30_29_97_and_25_fps(docs):
    assert {video_fps(d) for d in docs} == {Fraction(30), Fraction(30000, 1001), Fraction(25)}
    for doc in docs:
        frames = doc_to_visual(doc)
        shown = [read_index(frame) for frame in frames]  # the frame's own index, hence its timestamp
        assert shown == doc["frame_indices"]
        assert all(Fraction(i) / video_fps(doc) < Fraction(doc["clip_end"]) for i in shown), doc["step_id"]
        # The first frame is the one on screen at the step start (a start on a frame boundary, as
        # well as floats can say, starts with that frame).
        at_start = Fraction(doc["clip_start"]) * video_fps(doc) + Fraction(1, 10**6)
        assert shown[0] <= at_start < shown[0] + 1 or len(shown) == 1
        # One clip, tagged as a video for video-native backends.
        assert {frame.info[VIDEO_CLIP_KEY] for frame in frames} == {f"egointent:{doc['step_id']}"}
    assert max(len(d["frame_indices"]) for d in docs) == 32


def test_the_clip_goes_as_separate_images_when_video_input_is_off(dataset):
    doc = dataset_docs(dataset, video_input=False, frame_max_side=32)[0]
    frames = doc_to_visual(doc)
    assert len(frames) > 1 and all(VIDEO_CLIP_KEY not in f.info and max(f.size) == 32 for f in frames)


# ---------------------------------------------------------------------------------------------
# The local format and its validation
# ---------------------------------------------------------------------------------------------


def test_json_and_jsonl_files_and_video_paths_or_uids_load_alike(dataset, tmp_path):
    steps, problems = read_flat(dataset)
    assert not problems and [s.step_id for s in steps] == [r["step_id"] for r in step_records()]
    assert {s.video for s in steps} == {dataset.parent / "kitchen_0001.mp4", dataset.parent / "videos/yard_0002.mp4",
                                        dataset.parent / "bedroom_0003.mp4"}
    as_list = tmp_path / "steps.json"
    as_list.write_text(json.dumps(step_records()))
    assert read_flat(as_list, video_root=dataset.parent) == (steps, [])


def test_a_flat_file_of_arxiv_v1_with_global_intent_is_read_as_procedural_intent(dataset, tmp_path):
    records = [{("global_intent" if key == "procedural_intent" else key): value for key, value in record.items()}
               for record in step_records()]
    old = tmp_path / "v1.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in records))
    steps, problems = read_flat(old, video_root=dataset.parent)
    assert not problems and [s.references for s in steps] == [s.references for s in read_flat(dataset)[0]]
    both = tmp_path / "both.json"
    both.write_text(json.dumps([{**step_records()[0], "global_intent": "x"}]))
    assert read_flat(both, video_root=dataset.parent)[1] == [
        "record 1 (step_id 'step_0000'): fields procedural_intent and global_intent: one reference under its name and "
        "its former name; keep procedural_intent"]


def test_every_bad_record_and_missing_video_is_reported_in_one_error_with_its_field(dataset, tmp_path):
    good = step_records()[0]
    bad = [
        {k: v for k, v in good.items() if k != "procedural_intent"},
        {**good, "step_id": "late", "step_start": 5.0, "truncation_time": 4.0},
        {**good, "step_id": "gone", "video_uid": "no_such_video"},
        {**good, "step_id": "roof", "environment": "rooftop"},
        {**good, "step_id": "blank", "next_step_plan": "  "},
        {**good, "step_id": "when", "truncation_time": "soon"},
        good, good,
        {**good, "step_id": "yard", "scenario": "Kitchen", "environment": "outdoor"},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in bad))
    with pytest.raises(EgoIntentDataError) as caught:
        load_samples(EgoIntentSettings(annotations=path, video_root=dataset.parent))
    message = str(caught.value)
    for expected in [
        f"8 problems in the EgoIntent annotations {path}",
        "record 1 (step_id 'step_0000'): field procedural_intent: missing",
        "record 2 (step_id 'late'): field truncation_time: 4 s must be after step_start (5 s)",
        "record 4 (step_id 'roof'): field environment: must be one of indoor, outdoor, got 'rooftop'",
        "record 5 (step_id 'blank'): field next_step_plan: must be a non-empty string",
        "record 6 (step_id 'when'): field truncation_time: must be a number of seconds >= 0, got 'soon'",
        "record 8 (step_id 'step_0000'): step_id 'step_0000' is used by an earlier record",
        "scenario 'Kitchen' is filed as both indoor and outdoor",
        # the media problem in the same error, after the annotation problems
        (f"record 3 (step_id 'gone'): video not found: {dataset.parent / 'no_such_video.mp4'} (field video_uid under "
         f"video_root {dataset.parent}; setting EGOINTENT_VIDEO_ROOT (metadata.video_root))"),
        "Set EGOINTENT_SKIP_MISSING (metadata.skip_missing) to true to skip the 1 step(s)",
    ]:
        assert expected in message


def test_a_zero_byte_video_is_listed_in_the_same_error_as_the_records_problems(dataset, tmp_path):
    """Not in a second round once the records are fixed: the task collects both into one error."""
    import shutil

    shutil.copytree(dataset.parent, tmp_path / "copy")
    annotations = tmp_path / "copy" / dataset.name
    records = [json.loads(line) for line in annotations.read_text().splitlines()]
    del records[0]["local_intent"]
    annotations.write_text("".join(json.dumps(record) + "\n" for record in records))
    video = tmp_path / "copy" / "bedroom_0003.mp4"
    video.write_bytes(b"")
    with pytest.raises(EgoIntentDataError) as caught:
        egointent.load_docs(TaskContext("egointent", EgoIntentSettings(annotations=annotations)))
    message = str(caught.value)
    assert message.startswith(f"6 problems in the EgoIntent annotations "
                              f"{annotations}")  # a record; 5 steps of the video
    assert f"{annotations.name}, record 1 (step_id '{records[0]['step_id']}'): field local_intent: missing" in message
    assert f"video is empty (0 bytes): {video}" in message


def test_a_truncation_time_past_the_end_of_its_video_is_an_error(dataset, tmp_path):
    record = {**step_records()[0], "truncation_time": 12.0}  # the video lasts 10 s
    path = tmp_path / "late.json"
    path.write_text(json.dumps([record]))
    with pytest.raises(EgoIntentDataError, match=r"truncation_time 12 s is past the end of the video "
                                                 r"\(.*kitchen_0001.mp4: 300 frames at 30 fps, 10.000 s\)"):
        load_samples(EgoIntentSettings(annotations=path, video_root=dataset.parent))


def test_the_data_is_a_required_setting_and_sampling_settings_are_checked(tmp_path):
    with pytest.raises(SettingsError, match=r"task egointent: set EGOINTENT_ANNOTATIONS \(metadata.annotations\) to "
                                            r"the EgoIntent release folder"):
        egointent.load_docs(TaskContext("egointent", EgoIntentSettings()))
    missing = EgoIntentSettings(annotations=tmp_path / "missing.jsonl")
    with pytest.raises(EgoIntentDataError, match="EgoIntent data not found: .*missing.jsonl; point "
                                                 "EGOINTENT_ANNOTATIONS"):
        egointent.load_docs(TaskContext("egointent", missing))
    with pytest.raises(SettingsError) as caught:
        resolve_settings(EgoIntentSettings, task="egointent", metadata={"annotations": str(tmp_path / "a.jsonl")},
                         env_prefix="EGOINTENT", environ={"EGOINTENT_SAMPLE_FPS": "0", "EGOINTENT_MAX_FRAMES": "0"})
    assert str(caught.value) == ("task egointent: EGOINTENT_SAMPLE_FPS (metadata.sample_fps) must be greater than 0, "
                                 "got 0.0; EGOINTENT_MAX_FRAMES (metadata.max_frames) must be at least 1, got 0")


def test_scenarios_get_distinct_metric_names():
    assert scenario_metric("Living room") == "scenario_living_room"
    assert scenario_metric("Garage / Workshop") == "scenario_garage_workshop"


# ---------------------------------------------------------------------------------------------
# Answers and judge outputs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, expected", [
    ('{"local_intent": "flatten it", "procedural_intent": "tidy up", "next_step_plan": "fold it"}',
     {"local_intent": "flatten it", "procedural_intent": "tidy up", "next_step_plan": "fold it"}),
    ('Here you go:\n```json\n{"Local Intent": "a", "procedural-intent": "b", "next step plan": "c"}\n```\nThanks!',
     {"local_intent": "a", "procedural_intent": "b", "next_step_plan": "c"}),
    ("**Local Intent:** grip the lid\n**Procedural Intent** - open the jar\n\nNext-Plan: pour it\n\nI hope this helps.",
     {"local_intent": "grip the lid", "procedural_intent": "open the jar", "next_step_plan": "pour it"}),
    ("1. Local intent (What): ready the drill\n2. Procedural intent (Why): mount the wheel\n",
     {"local_intent": "ready the drill", "procedural_intent": "mount the wheel"}),
    # arXiv v1's name for Procedural Intent, as models prompted before the rename (or told by v1) write it
    ('{"local_intent": "a", "global_intent": "b"}\n', {"local_intent": "a", "procedural_intent": "b"}),
    ("**Global intent** - open the jar\nNext-step plan: pour it", {"procedural_intent": "open the jar",
                                                                     "next_step_plan": "pour it"}),
    ("### Next step\nclimb the\nladder\n\nThat is all.", {"next_step_plan": "climb the ladder"}),
    ("{'local_intent': 'x', 'next_step_plan': 'y'}", {"local_intent": "x", "next_step_plan": "y"}),
    ('{"answers": [{"step": 1}, {"procedural_intent": "g"}]}', {"procedural_intent": "g"}),
    ('{"text": "I think {\'local_intent\': \'q\'} fits"}', {"local_intent": "q"}),
    # Neither a JSON object nor a dict literal (literal_eval: unhashable key): read on, never crash.
    ('{{"local_intent": "a"}}', {"local_intent": "a"}),
    ("x {[1]: 2} local intent: a", {}),
    ("x {[1]: 2}\nLocal intent: a", {"local_intent": "a"}),
    ('{"local_intent": "...", "procedural_intent": "N/A", "next_step_plan": ""}', {}),
    ("The person is in a kitchen.", {}),
    # A thinking model's drafts are not its answer (Kimi-VL-Thinking's markers, which lmms-eval does not strip)
    ('◁think▷Local intent: grab it? {"next_step": "x"}◁/think▷{"local_intent": "lift the lid", "next_step": "stir"}',
     {"local_intent": "lift the lid", "next_step_plan": "stir"}),
    ("<thinking>Local intent: open the jar\nNext step: pour</thinking>\nNext step: close the jar",
     {"next_step_plan": "close the jar"}),
    ("◁think▷Local intent: maybe grab the", {}),  # cut inside its thinking
])
def test_answers_are_read_from_json_or_labelled_lines_amid_prose(answer, expected):
    assert parse_answer(answer) == expected


@pytest.mark.parametrize("answer", [
    "{" * 900 + "}" * 900,  # took 17.9 s when every "}" was tried for every "{"
    "{" * 1800,
    "{}" * 900,
    "{[" * 450 + "]}" * 450,
    '{"a": ' * 300,
    "{'a': " * 300 + "1" + "}" * 300,
    "{x} local intent: {y} " * 80,
])
def test_degenerate_answers_are_read_in_linear_time(answer, monkeypatch):
    """literal_eval sees each character at most once, so a long degenerate answer cannot stall the run."""
    import ast

    evaluated = []
    literal_eval = ast.literal_eval
    monkeypatch.setattr(ast, "literal_eval", lambda text: evaluated.append(text) or literal_eval(text))
    assert "local_intent" not in parse_answer(answer)
    assert sum(map(len, evaluated)) <= len(answer)


def test_judge_ratings_are_integers_0_to_10_after_any_thinking():
    assert parse_judge_rating("<think>perhaps [[2]]</think>Close in meaning. Rating: [[8]]") == 8.0
    assert parse_judge_rating("◁think▷perhaps [[2]]◁/think▷Close in meaning. Rating: [[8]]") == 8.0  # version 2
    for text, reason in [("Rating: [[7.5]]", "not one of 0, 1"), ("Rating: [[11]]", "not one of"),
                         ("<think>so long", "reasoning never ended"), ("◁think▷so long [[3]]", "reasoning never ended"),
                         ("Fine.", "no \\[\\[rating\\]\\]")]:
        with pytest.raises(ValueError, match=reason):
            parse_judge_rating(text)


def test_missing_fields_score_zero_without_a_judge_call_and_present_ones_are_judged_against_their_reference():
    doc = {"step_id": "s7", "environment": "outdoor", "scenario": "Yard", "local_intent": "steady the ladder",
           "procedural_intent": "reach the branch safely", "next_step_plan": "climb the ladder", "frames_capped": False,
           "plausible_next_steps": ["fetch the saw"], "judge_sees_plausible_next_steps": True, "definitions": "release"}
    values = egointent.process_results(doc, ['{"local_intent": "hold the ladder still"}'], None)
    parts = values["overall"]["judge_parts"]
    assert parts["procedural_intent"] == parts["next_step_plan"] == {"fixed_rating": 0.0,
                                                                  "fixed_reason": "the answer has no such field"}
    system, user = parts["local_intent"]["judge_messages"]
    assert system == {"role": "system", "content": egointent_protocol.JUDGE_SYSTEM}
    assert "Reference: steady the ladder\nPrediction: hold the ladder still" in user["content"]
    assert "Dimension: Local Intent, the actor's immediate goal in the current micro-step" in user["content"]
    assert parts["local_intent"]["judge_request_id"] == "s7/local_intent"
    assert values["outdoor"] is values["scenario_yard"] is values["overall"]
    assert values["local_intent"]["judge_parts"].keys() == {"local_intent"}
    assert (values["incomplete_answers"], values["missing_fields"], values["capped_samples"]) == (1, 2, 0)
    assert "indoor" not in values
    one_missing = egointent.process_results(
        doc, ['{"local_intent": "hold the ladder still", "procedural_intent": "reach the branch"}'], None)
    assert (one_missing["incomplete_answers"], one_missing["missing_fields"]) == (1, 1)


# The authors' prediction prompts, held by the SHA-256 of each file as published: YePan2/EgoIntent@3528dc9,
# prompts/benchmark_prediction_system.txt and prompts/benchmark_prediction_user.txt (each ends with a newline).
OFFICIAL_PROMPT_SHA256 = {"system": "1ed38740763de641459988d21c915d7d83db75a446713d957ccdb218a11d9684",
                          "user": "123b6e421325a886d0599e3bb7c8f75f2909908aa2768eb520261e228151b212"}
# The prompt of task versions 1-3 (definitions: v1, show_step_id: true), as it was sent.
VERSION_3_PROMPT = (
    "This egocentric (first-person) video clip shows one step of a person's activity. It ends before the outcome of "
    "the step becomes visible.\nStep id: s7\n\nInfer the person's intent at this step and answer three questions:\n"
    "1. Local Intent: What is the person trying to accomplish in this step? Give the immediate goal, not a "
    "description of the visible motion.\n2. Procedural Intent: Why is this step needed? Give the role this step "
    "plays in the person's overall activity.\n3. Next-Plan: What will the person most likely do right after this "
    "step?\n\nAnswer with one JSON object and nothing else: {\"local_intent\": \"...\", \"procedural_intent\": "
    "\"...\", \"next_step_plan\": \"...\"}")


def prompt_doc(**settings) -> dict:
    return {"step_id": "s7", "definitions": "release", "show_step_id": False, **settings}


def test_the_default_prompt_is_the_authors_published_one_verbatim_with_no_step_id():
    system, user = egointent.prompt_turns(prompt_doc())
    assert hashlib.sha256(f"{system}\n".encode()).hexdigest() == OFFICIAL_PROMPT_SHA256["system"]
    assert hashlib.sha256(f"{user}\n".encode()).hexdigest() == OFFICIAL_PROMPT_SHA256["user"]
    assert egointent.doc_to_text(prompt_doc()) == f"{system}\n\n{user}" and "s7" not in system + user
    # The authors' JSON key for the Next-Plan is read as the field next_step_plan.
    assert parse_answer('{"local_intent": "a", "procedural_intent": "b", "next_step": "c"}') == {
        "local_intent": "a", "procedural_intent": "b", "next_step_plan": "c"}


@pytest.mark.parametrize("backend", ["egoplan_hf", "egoplan_server", "llava_hf"])
def test_the_authors_system_message_is_a_system_turn_where_the_backend_sends_one_else_it_leads_the_text(
        backend, tmp_path, monkeypatch):
    """The task as lmms-eval builds it for ``--model <backend>`` (its choice of ``lmms_eval_specific_kwargs`` by model
    name, which a ``class:`` task gets when it is bound to the run's backend): the suite's backends get the user
    message as the text and the system message as the request's system turn (YePan2/EgoIntent@3528dc9
    prompts/README.md: "as the system message"); lmms-eval's plain models, which send no system turn of a task's, get
    it at the head of the text. Under v1 there is none."""
    from lmms_eval.tasks import TaskManager, get_task_dict

    from lmms_egoplan.compat.tasks import bind_class_task_to_backend
    from lmms_egoplan.core.request_options import SYSTEM_PROMPT

    annotations = write_dataset(tmp_path / "data")
    with ChatServer(lambda call: Reply("Rating: [[5]]")) as judge:
        for name, value in judge_env(judge, tmp_path / "cache", annotations).items():
            monkeypatch.setenv(name, value)
        folder = Path(__file__).parents[2] / "tasks" / "egointent"
        for definitions, system in (("release", egointent_protocol.RELEASE_SYSTEM), ("v1", "")):
            monkeypatch.setenv("EGOINTENT_DEFINITIONS", definitions)
            task = get_task_dict(["egointent"], TaskManager(include_path=str(folder), include_defaults=False,
                                                            model_name=backend))["egointent"]
            bind_class_task_to_backend(task, SimpleNamespace(model=backend))
            task.build_all_requests(limit=1)
            request = task.instances[0]
            user = egointent.prompt_turns({"step_id": "", "definitions": definitions, "show_step_id": False})[1]
            suite_backend = backend.startswith("egoplan_")
            assert request.args[0] == (user if suite_backend or not system else f"{system}\n\n{user}"), definitions
            marked = getattr(request, "request_options", {}).get(SYSTEM_PROMPT.name)
            assert marked == (system or None), definitions


def test_an_echo_of_either_prompts_output_format_is_no_answer():
    """The authors' format block ("string" placeholders) and v1's ("...") read as no field, so nothing is judged
    and every field counts as missing."""
    authors_format = egointent_protocol.RELEASE_SYSTEM.rsplit("REQUIRED OUTPUT FORMAT", 1)[1]
    assert '"string"' in authors_format and parse_answer(authors_format) == {}
    v1_format = egointent.V1_PROMPT.rsplit("nothing else: ", 1)[1].replace("{{", "{").replace("}}", "}")
    assert parse_answer(v1_format) == {}
    assert parse_answer('{"local_intent": "String the beads", "procedural_intent": "string", "next_step": "x"}') == {
        "local_intent": "String the beads", "next_step_plan": "x"}


def test_the_step_id_is_shown_only_where_the_setting_asks_and_v1_keeps_version_3s_prompt():
    system, user = egointent.prompt_turns(prompt_doc(show_step_id=True))
    assert user.startswith("Step id: s7\n\n") and user.endswith(egointent_protocol.RELEASE_USER)
    assert egointent.prompt_turns(prompt_doc(definitions="v1", show_step_id=True)) == ("", VERSION_3_PROMPT)
    assert egointent.prompt_turns(prompt_doc(definitions="v1")) == ("", VERSION_3_PROMPT.replace("Step id: s7\n", ""))


def test_the_judge_follows_the_definitions_setting_and_each_prompt_has_its_own_identity():
    from lmms_egoplan.egointent.benchmark import EGOINTENT
    from lmms_egoplan.judge.rubrics import load_rubric

    doc = {"step_id": "s7", "next_step_plan": "climb the ladder", "plausible_next_steps": [],
           "judge_sees_plausible_next_steps": False}
    release = egointent.judge_request({**doc, "definitions": "release"}, DIMENSIONS[2], "keep climbing")
    v1 = egointent.judge_request({**doc, "definitions": "v1"}, DIMENSIONS[2], "keep climbing")
    release_text, v1_text = release.messages[-1]["content"], v1.messages[-1]["content"]
    # The release allows the immediate continuation of an unfinished action; v1's judge marked it down.
    assert "its immediate continuation is such an action" in release_text
    assert "the current step instead of the next one" not in release_text
    assert "the current step instead of the next one" in v1_text
    assert "Dimension: Next-Plan, the action most likely to begin right after the current step is completed" in v1_text
    # v1's judge keeps the identity (rubric name and prompt hash) of versions 1-3; the release's has its own.
    assert egointent_protocol.RUBRIC_NAMES == {"release": "egointent_release", "v1": "egointent"}
    assert load_rubric("egointent", EGOINTENT.rubrics).prompt_hash == "ec9c4e681602dc98"
    assert load_rubric("egointent_release", EGOINTENT.rubrics).prompt_hash not in ("ec9c4e681602dc98", "")


def test_an_incomplete_answer_that_ends_unfinished_is_counted_as_cut_at_the_token_limit():
    doc = {"step_id": "s7", "environment": "indoor", "scenario": "Kitchen", "local_intent": "a",
           "procedural_intent": "b",
           "next_step_plan": "c", "frames_capped": False, "plausible_next_steps": [],
           "judge_sees_plausible_next_steps": False, "definitions": "release"}
    complete = '{"local_intent": "x", "procedural_intent": "y", "next_step": "z"}'
    for answer, cut in [("<think>The person reaches for the", 1),  # a thinking model spent its tokens thinking
                        ('◁think▷{"local_intent": "x", "procedural_intent": "y", "next_step": "z"}', 1),
                        ('{"local_intent": "x", "procedural_int', 1), ('```json\n{"local_intent": "x"}', 1),
                        ('{"local_intent": "x"}', 0), ("I cannot tell.", 0), (complete, 0),
                        (complete + " {", 0)]:  # every field written: not incomplete, whatever follows
        values = egointent.process_results(doc, [answer], None)
        assert values["cut_answers"] == cut, answer
    assert egointent.cut_answers([1, 0, 1]) == 2


# ---------------------------------------------------------------------------------------------
# Scripted answers, judge ratings and the audit trail (also of tests/e2e/test_egointent.py)
# ---------------------------------------------------------------------------------------------


def scripted_answer(step_id: str) -> str:
    """Answers in the forms models give: JSON, fenced JSON in prose, labelled lines, a field
    missing, or no fields at all."""
    number = int(step_id.split("_")[1])
    values = {field: f"{field.replace('_', ' ')} guess {number}" for field in FIELDS}
    return [json.dumps(values),
            f"Sure.\n```json\n{json.dumps(values, indent=2)}\n```\nLet me know if you need more.",
            "\n".join(f"**{f.replace('_', ' ').capitalize()}:** {v}" for f, v in values.items()),
            f"Local Intent: {values['local_intent']}\nProcedural Intent: {values['procedural_intent']}\n",
            "I cannot tell what the person is doing."][number % 5]


def sometimes_unrated(call):
    """A 0-10 judge that, for about one prompt in five, writes no rating (a failed judgement)."""
    if int(hashlib.sha256(call.text.encode()).hexdigest(), 16) % 5 == 0:
        return Reply("I cannot judge this without the video.")
    return Reply(f"The prediction is related. Rating: [[{judge_rating(call)}]]")


def audit_trail(output_dir: Path) -> dict[str, dict]:
    """The run's judgements by request id; none (and no file) when nothing was sent to the judge."""
    files = sorted(output_dir.rglob("*_judgements_egointent.jsonl"))
    assert len(files) <= 1, files
    records = [json.loads(line) for line in files[0].read_text().splitlines()] if files else []
    by_id = {r["id"]: r for r in records}
    assert len(by_id) == len(records), "a request was judged twice"
    return by_id


def recomputed(samples: list[dict], docs: list[dict], audit: dict[str, dict]) -> dict[str, float]:
    """Every score metric, recomputed from the logged items, the docs and the audit trail's ratings."""
    def score(subset, fields=FIELDS):
        per_field = []
        for field in fields:
            ratings = []
            for sample in subset:
                part = sample["overall"]["judge_parts"][field]
                rating = part["fixed_rating"] if "fixed_rating" in part else audit[part["judge_request_id"]]["rating"]
                if rating is not None:
                    ratings.append(rating)
            per_field.append(10 * statistics.mean(ratings))
        return statistics.mean(per_field)

    metrics = {"overall": score(samples), **{field: score(samples, [field]) for field in FIELDS}}
    for environment in ("indoor", "outdoor"):
        metrics[environment] = score([s for s in samples if docs[s["doc_id"]]["environment"] == environment])
    for scenario in {docs[s["doc_id"]]["scenario"] for s in samples}:
        metrics[scenario_metric(scenario)] = score([s for s in samples if docs[s["doc_id"]]["scenario"] == scenario])
    return metrics


def test_metrics_aggregated_in_any_order_read_one_judgement_per_field(dataset, tmp_path, monkeypatch):
    """lmms-eval aggregates metrics in the first document's key order (one process) or sorted by
    name (several): breakdowns over subsets may come first, and must neither re-judge nor differ."""
    from lmms_eval.tasks import TaskManager

    with ChatServer(sometimes_unrated) as judge:
        for name, value in judge_env(judge, tmp_path / "judge-cache", dataset).items():
            monkeypatch.setenv(name, value)
        task = TaskManager(include_path=str(Path(__file__).parents[2] / "tasks"),
                           include_defaults=False).load_task_or_group(["egointent"])["egointent"]
        docs = list(task.test_docs())
        samples = [{"doc_id": n, **egointent.process_results(doc, [scripted_answer(doc["step_id"])], None)}
                   for n, doc in enumerate(docs)]
        args = SimpleNamespace(output_path=str(tmp_path / "out"), model_args="pretrained=scripted")
        aggregations = task.aggregation()
        order = ["scenario_yard", "next_step_plan", "indoor", "failed", "overall", "scenario_kitchen", "outdoor",
                 "local_intent", "judged", "procedural_intent", "scenario_bedroom"]
        reported = {metric: aggregations[metric]([s[metric] for s in samples if metric in s], args=args)
                    for metric in order}
    audit = audit_trail(tmp_path / "out")
    assert len(judge.calls) == len(audit) == sum(len(parse_answer(scripted_answer(d["step_id"]))) for d in docs)
    for metric, value in recomputed(samples, docs, audit).items():
        assert reported[metric] == pytest.approx(value), metric
    assert reported["failed"] == sum(r["rating"] is None for r in audit.values()) > 0


def test_the_check_command_validates_a_flat_file_and_summarises_it(dataset, tmp_path, capsys):
    from lmms_egoplan.cli import main

    assert main(["egointent-check", str(dataset)]) == 0
    printed = capsys.readouterr().out
    assert "15 steps in 3 videos" in printed and "3 clips capped at 32 frames" in printed
    assert main(["egointent-check", str(dataset), "--max_frames", "none"]) == 0
    assert "max 58 (no frame cap)" in capsys.readouterr().out
    assert "scenario_yard                        5 steps  (Yard, outdoor)" in printed
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{**step_records()[0], "truncation_time": 0.1}]))
    assert main(["egointent-check", str(bad), "--video_root", str(dataset.parent)]) == 2
    assert "field truncation_time: 0.1 s must be after step_start (0.4 s)" in capsys.readouterr().err
    assert main(["egointent-check", str(dataset), "--max_frames", "0"]) == 2
    assert capsys.readouterr().err == "lmms-egoplan egointent-check: --max_frames must be at least 1, got 0\n"


# ---------------------------------------------------------------------------------------------
# The judge engine's items with several parts (added for EgoIntent, general)
# ---------------------------------------------------------------------------------------------

def judge_and_score(items, judge):
    results = judge.run(item_requests(items), egointent_protocol.RUBRIC.parse_rating, progress=False)
    return score_judged(items, {j.id: j for j in results.judgements},
                        {egointent_protocol.RUBRIC_NAME: egointent_protocol.RUBRIC}, judge_model=results.judge_model)


def test_parts_items_score_each_part_then_average_excluding_failed_judgements(tmp_path):
    def rate(call):  # "rate 7" -> 7; "rate x" -> no rating (a failed judgement)
        word = call.text.split()[-1]
        return Reply(f"Rating: [[{word}]]" if word.isdigit() else "no idea")

    parts = [{"a": JudgeRequest.from_prompt("1/a", "rate 8"), "b": JudgeRequest.from_prompt("1/b", "rate 2")},
             {"a": JudgeRequest.from_prompt("2/a", "rate x"), "b": FixedRating(0.0, "missing")},
             {"a": JudgeRequest.from_prompt("3/a", "rate 5"), "b": JudgeRequest.from_prompt("3/b", "rate 6")}]
    items = [judge_parts_item(p, egointent_protocol.RUBRIC_NAME) for p in parts]  # ratings 0-10, scale 10
    with ChatServer(rate) as server:
        judge = Judge(OpenAIChatBackend("loopback-judge", base_url=server.base_url, api_key_env=""))
        scored = judge_and_score(items + items[:1], judge)  # a repeated item is judged once
        assert len(server.calls) == 5
        single = judge_and_score([judge_parts_item({"": parts[0]["a"]}, egointent_protocol.RUBRIC_NAME)], judge)
    assert scored.part_scores == {"a": pytest.approx(10 * (8 + 5 + 8) / 3),
                                  "b": pytest.approx(10 * (2 + 0 + 6 + 2) / 4)}
    assert scored.score == pytest.approx((scored.part_scores["a"] + scored.part_scores["b"]) / 2)
    assert (scored.results.judged, scored.results.failed) == (4, 1)  # the fixed rating is neither
    assert single.score == 80.0 and single.part_scores == {"": 80.0}
    with pytest.raises(ValueError, match="judge request id '1/a' is used for two different prompts"):
        item_requests([*items, judge_parts_item({"a": JudgeRequest.from_prompt("1/a", "rate 9")}, "x:y")])
