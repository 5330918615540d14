"""RoboVQA's three layouts give the same typed questions; the tags are read as the official notebook reads them;
damaged inputs stop before the model, naming the file, record and field."""

import json

import pytest

from lmms_egoplan.demo.kit.media import read_index
from lmms_egoplan.demo.robovqa import EPISODE_FRAMES, EPISODES, build_fixture
from lmms_egoplan.robovqa import task
from lmms_egoplan.robovqa.data import (
    DATA_SOURCES,
    QUESTION_TYPES,
    RoboVQADataError,
    fetch_question_answer,
    load_type,
    question_type,
)
from lmms_egoplan.robovqa.settings import RoboVQASettings


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("robovqa"))


def questions(fixture, source):
    settings = RoboVQASettings(data_source=source, root=str(fixture.layout(source)))
    return sorted((doc["question_type"], doc["tag"], doc["question"], doc["answer"])
                  for kind in QUESTION_TYPES for doc in load_type(settings, kind).docs)


def notebook_fetch_question_answer(text):
    """data_loading_and_eval.ipynb @93f1831 (Task utils), transcribed for the comparison: Tasks.text_to_dict, then
    Task.get_splits('A:') (find_next_tag, get_splits_from_positions, _remove_tags) per task."""
    import re

    split = re.split(r"(<task[:\w]*>)", text, flags=re.IGNORECASE)[1:]
    tasks_dict, i = {}, 0
    while i < len(split) - 1:
        tag, body = split[i].strip(), split[i + 1].lstrip()
        if body:
            tasks_dict.setdefault(tag, []).append(body)
        i += 2
    results = []
    for tag, tasks in tasks_dict.items():
        for body in tasks:
            position, splits = 0, []
            while position < len(body):
                p = body.lower().find("a:", position)
                if p < 0:
                    break
                splits.append((re.sub(r"(</*\w[:\w]*>)", "", body[:p]) if p > 0 else "",
                               re.sub(r"(</*\w[:\w]*>)", "", body[p:len(body)])))
                position = len(body) + 1
            for question, answer in splits or [("", body)]:
                results.append((tag, question.strip(), answer.strip()))
    return results


def test_the_tags_are_split_as_the_official_notebook_splits_them():
    for text in EPISODES.values():
        assert fetch_question_answer(text) == notebook_fetch_question_answer(text)
    assert fetch_question_answer("<task:future_prediction:freeform>\nQ: next? <PRED>A: go\n</PRED>") == \
        [("<task:future_prediction:freeform>", "Q: next?", "A: go")]


def test_every_official_tag_has_its_question_type():
    types = {tag: question_type(tag) for text in EPISODES.values() for tag, _, _ in fetch_question_answer(text)}
    assert len(types) == 10 and set(types.values()) == set(QUESTION_TYPES)
    assert types["<task:immediate_planning_with_context20:freeform>"] == "next_step"
    assert types["<task:affordance:generative:positive:freeform>"] == "generative_affordance"
    assert question_type("<task:made_up:freeform>") is None


def test_the_three_layouts_give_the_same_questions(fixture):
    found = {source: questions(fixture, source) for source in DATA_SOURCES}
    assert len(found["frames16"]) == 2 * 9
    assert found["frames16"] == found["tianli"] == found["tfrecord"]
    assert ("success", "<task:success:discrete:True>", "place the pen in the cup Q: satisfied?", "yes") in \
        found["tfrecord"]


@pytest.mark.parametrize("source", DATA_SOURCES)
@pytest.mark.parametrize("protocol, shown", [("default", 16), ("mimo", 8), ("multinet", 1)])
def test_each_protocol_shows_its_frames_in_every_layout(fixture, source, protocol, shown):
    settings = RoboVQASettings(data_source=source, root=str(fixture.layout(source)), protocol=protocol)
    doc = {**load_type(settings, "success").docs[0], "protocol": protocol, "max_side": None}
    frames = [read_index(frame) for frame in task.doc_to_visual(doc)]
    total = 16 if source == "frames16" else EPISODE_FRAMES
    wanted = task.shown_indices(total, task.PROTOCOLS[protocol].frames)
    if source == "frames16":  # the copy's 16 frames are themselves spread over the video's 20
        spread = task.shown_indices(EPISODE_FRAMES, 16)
        wanted = [spread[index] for index in wanted]
    assert len(frames) == shown and frames == wanted


def test_a_cut_short_shard_names_its_record(fixture, tmp_path):
    shard = fixture.layout("tfrecord") / "val-00000-of-00001"
    (tmp_path / "val-cut").write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(RoboVQADataError, match=r"val-cut, record #1 .*cut short"):
        load_type(RoboVQASettings(data_source="tfrecord", root=str(tmp_path)), "success")


def test_a_shard_or_parquet_file_that_is_not_one_is_named_with_its_file(tmp_path):
    """An HTML page or a Git LFS pointer fetched in place of a shard, a parquet file empty or cut short: the file is
    named, never pyarrow's or the TFRecord reader's own error."""
    (tmp_path / "val-00000-of-00001").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:0\n")
    with pytest.raises(RoboVQADataError, match=r"val-00000-of-00001, record #0 .*not a TFRecord file"):
        load_type(RoboVQASettings(data_source="tfrecord", root=str(tmp_path)), "success")
    for content in (b"", b"PAR1" + bytes(100)):
        (tmp_path / "validation-00000.parquet").write_bytes(content)
        with pytest.raises(RoboVQADataError, match=r"validation-00000.parquet: not a readable parquet file .*fetch it "
                                                   r"again into the folder ROBOVQA_ROOT"):
            load_type(RoboVQASettings(data_source="tianli", root=str(tmp_path)), "success")


def test_an_empty_question_file_or_shard_is_named_never_a_type_without_questions(fixture, tmp_path):
    """A zero-byte qa.jsonl, shard or validation file: the file is named, not "no question of this type"."""
    for source, name in (("frames16", "qa.jsonl"), ("tfrecord", "val-00000-of-00001"),
                         ("tianli", "robovqa_validation.jsonl")):
        root = tmp_path / source
        root.mkdir()
        (root / name).write_bytes(b"")
        with pytest.raises(RoboVQADataError, match=rf"RoboVQA (file|shard) {root / name} holds no (question|record|"
                                                   rf"row) \(it is empty\); fetch it again into the folder "
                                                   rf"ROBOVQA_ROOT \(metadata.root\) names"):
            load_type(RoboVQASettings(data_source=source, root=str(root)), "success")


def test_a_record_without_frames_names_its_field(tmp_path):
    from tfrecord import TFRecordWriter

    writer = TFRecordWriter(str(tmp_path / "val-0"))
    writer.write({}, {"texts": ([EPISODES["episode_a"].encode()], "byte")})
    writer.close()
    with pytest.raises(RoboVQADataError, match=r"val-0, record #0: feature list images is absent"):
        load_type(RoboVQASettings(data_source="tfrecord", root=str(tmp_path)), "success")


def _copy_with(root, tmp_path, change):
    lines = [json.loads(line) for line in (root / "qa.jsonl").read_text().splitlines()]
    change(lines)
    copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
    copy.mkdir()
    (copy / "frames").symlink_to(root / "frames")
    (copy / "qa.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return RoboVQASettings(root=str(copy), allow_paths_outside_root=True)


def test_bad_qa_lines_are_named_together_and_missing_frames_after_them(fixture, tmp_path):
    def damaged(lines):
        lines[0]["question_idx"] = "no tag here"
        lines[2]["answer"] = ""
        lines[3]["answer"] = ["put the cup down"]  # never scored as the text "['put the cup down']"
        lines[4]["question"] = 5

    with pytest.raises(RoboVQADataError) as error:
        load_type(_copy_with(fixture.layout("frames16"), tmp_path, damaged), "next_step")
    assert "qa.jsonl, line 1: field question_idx" in str(error.value)
    assert "qa.jsonl, line 3: the answer is empty" in str(error.value)
    assert "qa.jsonl, line 4: field answer must be text, got ['put the cup down']" in str(error.value)
    assert "qa.jsonl, line 5: field question must be text, got 5" in str(error.value)

    def missing(lines):
        for line in lines:
            if line["id"].startswith("episode_a/"):
                line["frame_paths"] = ["frames/none.jpg"]

    settings = _copy_with(fixture.layout("frames16"), tmp_path, missing)
    with pytest.raises(RoboVQADataError, match=r"image not found: .*none.jpg.*ROBOVQA_SKIP_MISSING"):
        load_type(settings, "next_step")
    skipping = RoboVQASettings(root=settings.root, allow_paths_outside_root=True, skip_missing=True)
    loaded = load_type(skipping, "next_step")
    assert len(loaded.skipped) == 2 and len(loaded.docs) == 2


def test_a_question_a_preset_cannot_rewrite_stops_the_task_before_the_model_naming_it(fixture, tmp_path):
    """physbrain's transform_training_qa raises on a template it does not know: the task's loader builds every
    prompt, so the run stops before the model with the question's item named (not at its request)."""
    from dataclasses import replace

    from lmms_egoplan.contract.benchmark import TaskContext

    def unknown(lines):
        next(line for line in lines if "immediate next step" in line["question"])["question"] = "what now?"

    settings = _copy_with(fixture.layout("frames16"), tmp_path, unknown)
    with pytest.raises(RoboVQADataError, match=r"the physbrain protocol .* cannot write the prompt of 1 question\(s\) "
                                               r"of the RoboVQA data under .*\n  qa.jsonl/episode_\w+/\d+: Unsupported "
                                               r"RoboVQA question template for planning: what now\?\nset "
                                               r"ROBOVQA_PROTOCOL"):
        task.load_docs(TaskContext("robovqa_next_step", replace(settings, protocol="physbrain"),
                                   dataset_name="next_step"))
    assert task.load_docs(TaskContext("robovqa_next_step", settings, dataset_name="next_step")).docs  # default


def test_an_unknown_tag_in_a_tianli_row_is_named(fixture, tmp_path):
    (tmp_path / "validation.jsonl").write_text(json.dumps({"video": "x.mp4", "text": "<task:odd>Q: a? A: b"}) + "\n")
    with pytest.raises(RoboVQADataError, match=r"validation.jsonl, row #0: field text, question #0: tag <task:odd>"):
        load_type(RoboVQASettings(data_source="tianli", root=str(tmp_path)), "success")
    # no "A:": the notebook's split makes the text all answer; the error says what is missing, not "empty question"
    (tmp_path / "validation.jsonl").write_text(json.dumps({"video": "x.mp4", "text": "<task:planning>Q: next? b"}))
    with pytest.raises(RoboVQADataError, match=r"row #0: field text, question #0: no 'A:' marks where its answer"):
        load_type(RoboVQASettings(data_source="tianli", root=str(tmp_path)), "success")
