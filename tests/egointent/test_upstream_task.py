"""The EgoIntent pull request for lmms-eval (docs/upstream/31-egointent-task.patch), held to the suite in process: its
converter reads the demo's release as the suite does (and a longer clip too) and lists what the suite lists as
problems; its task, loaded from the diff, plans and decodes the suite's frames (capped or not), sends the suite's
prompt, reads every answer shape of the suite's answer tests as the suite does, asks the judge the suite's prompts
and reads its ratings alike. The whole task through lmms-eval's CLI against the suite's, with a judge:
tests/e2e/test_upstream_equivalence.py."""

from __future__ import annotations

import json

import pytest

from lmms_egoplan.demo.egointent import FIELDS, write_release
from lmms_egoplan.egointent import task
from lmms_egoplan.egointent.data import DIMENSIONS, RELEASE, load_samples
from lmms_egoplan.egointent.protocol import EgoIntentSettings, parse_judge_rating
from tests.e2e.upstream_patches import PATCHES
from tests.egointent import test_protocol as suite_tests
from tests.egointent.test_release import damage_annotations, damage_media, damaged_copy, edit_steps
from tests.kit.upstream_module import added_module

PATCH = PATCHES / "31-egointent-task.patch"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstream")
    return tuple(added_module(PATCH, f"lmms_eval/tasks/egointent/{name}.py", folder)
                 for name in ("utils", "egointent_to_jsonl"))


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release(tmp_path_factory.mktemp("egointent") / "EgoIntent")


def both(upstream, root, **settings) -> list[tuple[dict, dict]]:
    """(lmms-eval's row, the suite's doc) of every step of ``root``."""
    rows, docs = upstream[1].convert(root), load_samples(EgoIntentSettings(annotations=root, **settings)).docs
    assert [row["sample_id"] for row in rows] == [doc["step_id"] for doc in docs]
    return list(zip(rows, docs))


@pytest.mark.parametrize("max_frames", [32, None])
def test_its_converter_and_frames_are_the_suites(upstream, release, max_frames, monkeypatch):
    utils = upstream[0]
    monkeypatch.setenv("EGOINTENT_MAX_FRAMES", "none" if max_frames is None else str(max_frames))
    pairs = both(upstream, release, max_frames=max_frames)
    assert len(pairs) == 15 and {row["scenario"] for row, _ in pairs} == {"kitchen", "yard", "bedroom"}
    for row, doc in pairs:
        assert [row[key] for key in ("environment", "scenario", "event")] == [doc["environment"], doc["scenario"],
                                                                              doc["event"]]
        assert [row[utils.REFERENCES[field]] for field in FIELDS] == [doc[field] for field in FIELDS]
        assert utils.frame_plan(row) == (doc["frame_indices"], doc["frames_capped"]), row["sample_id"]
        assert utils.clip_path(row) == doc["video"]
    capped = sum(utils.frame_plan(row)[1] for row, _ in pairs)
    assert capped == (3 if max_frames else 0)
    row, doc = pairs[3]  # 8 s, capped at 32 frames by default
    frames = [frame.tobytes() for frame in task.doc_to_visual(doc)]
    assert [frame.tobytes() for frame in utils.egointent_doc_to_visual(row)] == frames


def test_a_clip_longer_than_its_window_shows_the_window_ending_at_its_end_as_in_the_suite(upstream, release, tmp_path):
    root = damaged_copy(release, tmp_path)
    edit_steps(root / "indoor" / "kitchen" / "boil_noodles" / RELEASE.label_file,
               lambda steps: steps[3].update({RELEASE.start: steps[3][RELEASE.start] + 1.0}))
    for row, doc in both(upstream, root):
        assert upstream[0].frame_plan(row) == (doc["frame_indices"], doc["frames_capped"]), row["sample_id"]


def test_its_converter_lists_every_problem_the_suite_lists(upstream, release, tmp_path):
    root = damaged_copy(release, tmp_path)
    damage_media(root), damage_annotations(root)
    with pytest.raises(ValueError) as caught:
        upstream[1].convert(root)
    message = str(caught.value)
    assert message.startswith(f"6 problem(s) in the EgoIntent release {root}"), message
    for found in ("boil_noodles/step_label.json: step 3 (#3), fields start_time, obs_end_time: must be numbers",
                  "boil_noodles/step_label.json: step 4 (#4), field step_id: used by 2 steps of this event",
                  "rake_leaves/step_label.json: cannot be read as JSON", "step 2 (#2), clip step2.mp4: missing",
                  "make_bed/step_label.json: step 1 (#1), clip step1.mp4: shorter (0.120 s) than its window "
                  "obs_end_time - start_time (1.320 s)",
                  "make_bed/step_label.json: step 2 (#2), clip step2.mp4: missing or empty"):
        assert found in message, (found, message)


def test_it_sends_the_suites_prompt_and_judge_prompts_and_reads_answers_and_ratings_alike(upstream, release):
    utils = upstream[0]
    row, doc = both(upstream, release)[0]
    assert utils.egointent_doc_to_text(row) == task.doc_to_text(doc)
    assert (utils.SYSTEM_PROMPT, utils.USER_PROMPT) == task.prompt_turns(doc)
    assert json.loads(utils.egointent_doc_to_target(row)) == json.loads(task.doc_to_target(doc))
    for dimension in DIMENSIONS:
        sent = task.judge_request(doc, dimension, "lift the lid").messages
        assert utils.judge_messages(row, dimension.field, "lift the lid") == [dict(message) for message in sent]
    for mark in suite_tests.test_answers_are_read_from_json_or_labelled_lines_amid_prose.pytestmark:
        for answer, _ in mark.args[1]:
            assert utils.parse_answer(answer) == task.parse_answer(answer), answer
            assert utils.ends_unfinished(answer) == task.ends_unfinished(answer)
    for text in ("Close in meaning. Rating: [[8]]", "<think>maybe [[2]]</think>Rating: [[7]]", "Rating: [6]",
                 "Rating: [[7.5]]", "Rating: [[11]]", "<think>never ends [[3]]", "no rating", "Rating: [[10.0]]"):
        try:
            rating = parse_judge_rating(text)
        except ValueError:
            rating = None
        assert utils.parse_rating(text) == rating, text
