"""The official layout read as the official reader finds it: every QA pair kept (list or dict), ``answer`` falling
back to ``correct_answer``, the AV camera suffix only as a fallback, RoboVQA's overwritten items marked; a part
whose clips are absent is not run; shortfalls and unusable clips named."""

import json

import pytest

from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.cosmos_reason1.data import (
    CS_CATEGORIES,
    ER_SOURCES,
    RELEASE_COUNTS,
    CosmosReason1DataError,
    load_part,
    qa_file,
    shortfall,
)
from lmms_egoplan.cosmos_reason1.settings import CosmosReason1Settings
from lmms_egoplan.demo.cosmos_reason1 import build_fixture
from lmms_egoplan.demo.kit.media import write_video


@pytest.fixture
def fixture(tmp_path):
    return build_fixture(tmp_path / "cosmos")


def settings_of(fixture, **values):
    return resolve_settings(CosmosReason1Settings, task="t", metadata={}, env_prefix="COSMOS_REASON1",
                            environ=fixture.env(**values))


def test_the_release_counts_are_the_papers_1214_questions():
    assert sum(RELEASE_COUNTS.values()) == 1214 and sum(ER_SOURCES.values()) == 610
    assert CS_CATEGORIES == {"space": 80, "time": 298, "other_physics": 226} and ER_SOURCES["robovqa"] == 110


def test_every_qa_pair_is_a_question_whether_listed_or_single_and_correct_answer_is_read(fixture):
    docs = load_part(settings_of(fixture), "holoassist").docs
    assert [doc["item_id"] for doc in docs] == ["holoassist/0/0", "holoassist/0/1", "holoassist/1/0",
                                                "holoassist/2/0"]
    pairs = [pair for item in fixture.items("holoassist") for pair in
             (item["qa_pairs"] if isinstance(item["qa_pairs"], list) else [item["qa_pairs"]])]
    assert [doc["answer"] for doc in docs] == [pair.get("answer", pair.get("correct_answer")) for pair in pairs]
    assert [doc["letters"] for doc in docs] == [list(pair["index2ans"]) for pair in pairs]
    assert docs[0]["video"].endswith("holoassist/clips/clip_0.mp4")


def test_the_av_camera_suffix_is_only_a_fallback(fixture):
    docs = load_part(settings_of(fixture), "av").docs
    assert all(doc["video"].endswith(".camera_front_wide_120fov.mp4") for doc in docs)
    write_video(fixture.root / "av" / "clips" / "clip_0.mp4", num_frames=4, fps=8)  # the name as the item gives it
    docs = load_part(settings_of(fixture), "av").docs
    assert docs[0]["video"].endswith("av/clips/clip_0.mp4") and docs[2]["video"].endswith("120fov.mp4")


def test_robovqa_keeps_every_item_and_the_official_101_setting_drops_the_overwritten_ones(fixture):
    every = load_part(settings_of(fixture), "robovqa").docs
    assert len(every) == 4 and [doc["official_reader_keeps"] for doc in every] == [False, False, True, True]
    official = load_part(settings_of(fixture, robovqa_items="official_101"), "robovqa").docs
    assert [doc["item_id"] for doc in official] == ["robovqa/1/0", "robovqa/2/0"]


def test_a_shortfall_is_named_against_the_releases_count(fixture):
    settings = settings_of(fixture)
    assert shortfall("time", 4, settings) == "4 of the release's 298 questions (294 short)"
    assert shortfall("robovqa", 101, settings_of(fixture, robovqa_items="official_101")) is None
    assert shortfall("av", 100, settings) is None


def test_a_part_without_clips_is_not_run(fixture):
    for clip in (fixture.root / "bridgev2" / "clips").iterdir():
        clip.unlink()
    (fixture.root / "bridgev2" / "clips").rmdir()
    with pytest.raises(CosmosReason1DataError, match="bridgev2: not run: its clips folder .* is absent"):
        load_part(settings_of(fixture), "bridgev2")


def test_a_missing_clip_is_named_or_skipped_and_counted(fixture):
    (fixture.root / "agibot" / "clips" / "clip_1.mp4").unlink()
    with pytest.raises(CosmosReason1DataError, match=r"agibot/1/0.*clip_1.mp4.*COSMOS_REASON1_SKIP_MISSING"):
        load_part(settings_of(fixture), "agibot")
    loaded = load_part(settings_of(fixture, skip_missing="true"), "agibot")
    assert [doc["item_id"] for doc in loaded.docs] == ["agibot/0/0", "agibot/0/1", "agibot/2/0"]
    assert [sample.sample_id for sample in loaded.skipped] == ["agibot/1/0"]


def test_a_clip_cut_short_after_its_index_is_named_at_load_or_skipped_and_counted(fixture):
    """Its index before the frames, a copy cut short still opens and shows its first frame; the frames the protocol
    shows span the clip to its last, so the load reads its data to there (not decoded) and names it, before any model
    call, never mid-run."""
    clip = fixture.root / "agibot" / "clips" / "clip_1.mp4"
    write_video(clip, num_frames=120, fps=30, faststart=True)
    clip.write_bytes(clip.read_bytes()[:clip.stat().st_size // 2])
    with pytest.raises(CosmosReason1DataError, match=r"agibot/1/0: video .*clip_1.mp4 (has a damaged packet near frame "
                                                     r"\d+|holds frames up to file index \d+ of the 120)"):
        load_part(settings_of(fixture), "agibot")
    loaded = load_part(settings_of(fixture, skip_missing="true"), "agibot")
    assert [sample.sample_id for sample in loaded.skipped] == ["agibot/1/0"]


@pytest.mark.parametrize("pair, field", [
    ({"question": "q", "index2ans": {"A": "x", "B": "y"}, "answer": "C"}, "answer"),
    ({"question": "q", "index2ans": {"A": "x"}, "answer": "A"}, "index2ans"),
    ({"question": "", "index2ans": {"A": "x", "B": "y"}, "answer": "A"}, "question"),
    # options the parsers could never name (they read one capital letter)
    ({"question": "q", "index2ans": {"1": "x", "2": "y"}, "answer": "1"}, "index2ans's keys must be the option "
                                                                         "letters, one capital letter each"),
    ({"question": "q", "index2ans": {"a": "x", "AB": "y"}, "answer": "a"}, "index2ans's keys"),
])
def test_a_bad_record_is_named_with_its_file_item_and_field(fixture, pair, field):
    path = qa_file(fixture.root, "space")
    path.write_text(json.dumps([{"video": "clips/clip_0.mp4", "qa_pairs": [pair]}]))
    with pytest.raises(CosmosReason1DataError, match=rf"{path}, item #0, QA pair #0: {field}"):
        load_part(settings_of(fixture), "space")


def test_the_root_must_be_set():
    with pytest.raises(SettingsError, match="COSMOS_REASON1_ROOT"):
        load_part(CosmosReason1Settings(), "av")


def test_the_paibench_u_layout_gives_each_part_the_same_questions(fixture):
    for part in ("av", "robovqa", "bridgev2", "other_physics"):
        official = load_part(settings_of(fixture), part).docs
        hub = load_part(settings_of(fixture, data_source="paibench_u"), part).docs
        fields = ("question", "letters", "options", "answer")
        assert [[doc[f] for f in fields] for doc in hub] == [[doc[f] for f in fields] for doc in official], part
        assert all(doc["video"].startswith(str(fixture.paibench_u_root / "videos" / part)) for doc in hub)


def test_a_run_records_the_files_its_questions_came_from_in_either_layout(fixture):
    """The results' data_read_from and the answers' data identity: the part's QA file, or the PAI-Bench-U parquet
    files (not the QA file of a root that may be set too)."""
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.cosmos_reason1.task import load_docs

    official = load_docs(TaskContext("cosmos_reason1_av", settings_of(fixture), dataset_name="av")).read_from
    assert official == [str(fixture.root / "av" / "av_benchmark_qa_pairs.json")]
    hub = load_docs(TaskContext("cosmos_reason1_av", settings_of(fixture, data_source="paibench_u"),
                                dataset_name="av")).read_from
    assert hub == sorted(str(path) for path in (fixture.paibench_u_root / "data").glob("*.parquet")) and hub


def test_a_paibench_u_row_of_no_known_part_is_named(fixture, tmp_path):
    from datasets import Dataset

    root = tmp_path / "hub"
    (root / "data").mkdir(parents=True)
    Dataset.from_list([{"question": "q", "index2ans": {"A": "x", "B": "y"}, "answer": "A", "video_path": "v.mp4",
                        "subcategory": "Planning"}]).to_parquet(str(root / "data" / "test.parquet"))
    with pytest.raises(CosmosReason1DataError, match=r"test.parquet, row #0: subcategory 'Planning' names none of"):
        load_part(settings_of(fixture, data_source="paibench_u", paibench_u_root=root), "space")


def test_a_paibench_u_file_that_is_no_parquet_or_an_index2ans_that_is_no_mapping_is_named(fixture, tmp_path):
    from datasets import Dataset

    root = tmp_path / "hub"
    (root / "data").mkdir(parents=True)
    (root / "data" / "test.parquet").write_bytes(b"")
    settings = settings_of(fixture, data_source="paibench_u", paibench_u_root=root)
    with pytest.raises(CosmosReason1DataError, match=r"test.parquet: not a readable parquet file .*fetch it again into "
                                                     r"the folder COSMOS_REASON1_PAIBENCH_U_ROOT"):
        load_part(settings, "space")
    Dataset.from_list([{"question": "q", "index2ans": '{"A": "x", "B": "y"}', "answer": "A", "video_path": "v.mp4",
                        "subcategory": "Space"}]).to_parquet(str(root / "data" / "test.parquet"))
    with pytest.raises(CosmosReason1DataError, match=r"test.parquet, row #0: index2ans must map two or more letters"):
        load_part(settings, "space")


def test_a_paibench_u_question_s_embedded_letter_instruction_is_removed_as_lmms_evals_reader_removes_it(fixture):
    """The demo's RoboVQA rows carry lmms-eval's REPLACE_PROMPT in their questions: read, they are the official
    layout's questions, and the official prompt holds no second instruction."""
    from lmms_eval.tasks.physical_ai_understanding.utils import REPLACE_PROMPT, physical_ai_understanding_doc_to_text

    from lmms_egoplan.core.errors import DatasetProblems
    from lmms_egoplan.cosmos_reason1.data import PAIBENCH_U_EMBEDDED_INSTRUCTION, read_paibench_u

    assert PAIBENCH_U_EMBEDDED_INSTRUCTION == REPLACE_PROMPT
    rows = read_paibench_u(fixture.paibench_u_root, DatasetProblems("the data", CosmosReason1DataError))
    official = {doc["question"] for doc in load_part(settings_of(fixture), "robovqa").docs}
    robovqa = [doc for doc in rows if doc["source"] == "robovqa"]
    assert robovqa and {doc["question"] for doc in robovqa} == official
    raw = {"question": f"{robovqa[0]['question']}\n{REPLACE_PROMPT}", "index2ans": {"A": "x", "B": "y"}}
    lmms_eval_text = physical_ai_understanding_doc_to_text(raw, {"post_prompt": "Answer."})
    assert REPLACE_PROMPT not in lmms_eval_text and robovqa[0]["question"] in lmms_eval_text


@pytest.mark.parametrize("escape", ["symlink", "dotdot", "absolute"])
def test_a_clip_outside_the_root_is_refused_unless_allowed(fixture, tmp_path, escape):
    """As the other benchmarks read: a clip a record reaches through a symbolic link, '..' or an absolute path out of
    root is refused, naming the record, the field and the switch; allow_paths_outside_root reads it."""
    outside = tmp_path / "elsewhere" / "clip.mp4"
    outside.parent.mkdir()
    outside.write_bytes((fixture.root / "agibot" / "clips" / "clip_0.mp4").read_bytes())
    items = fixture.items("agibot")
    if escape == "symlink":
        (fixture.root / "agibot" / "clips" / "linked.mp4").symlink_to(outside)
        items[0]["video"] = "clips/linked.mp4"
    else:
        items[0]["video"] = "clips/../../../elsewhere/clip.mp4" if escape == "dotdot" else str(outside)
    qa_file(fixture.root, "agibot").write_text(json.dumps(items))
    why = {"symlink": "leads out of it through a symbolic link", "dotdot": "climbs out of it with '..'",
           "absolute": "is an absolute path"}[escape]
    with pytest.raises(CosmosReason1DataError, match=rf"item #0: field video {why}.*COSMOS_REASON1_ALLOW_PATHS_OUT"):
        load_part(settings_of(fixture), "agibot")
    loaded = load_part(settings_of(fixture, allow_paths_outside_root="true"), "agibot")
    assert loaded.docs[0]["video"].endswith(("clip.mp4", "linked.mp4"))


def test_a_paibench_u_clip_outside_its_root_is_refused(fixture, tmp_path):
    from datasets import Dataset

    root = tmp_path / "hub"
    (root / "data").mkdir(parents=True)
    clip = fixture.paibench_u_root / "videos" / "space"
    Dataset.from_list([{"question": "q", "index2ans": {"A": "x", "B": "y"}, "answer": "A",
                        "video_path": str(next(clip.glob("*.mp4"))), "subcategory": "Space"}]).to_parquet(
        str(root / "data" / "test.parquet"))
    with pytest.raises(CosmosReason1DataError, match=r"test.parquet, row #0: field video_path is an absolute path"):
        load_part(settings_of(fixture, data_source="paibench_u", paibench_u_root=root), "space")


def test_a_repeated_record_is_refused_naming_both(fixture):
    """A QA file listing an item twice would score its questions twice: both records are named, with every other
    problem of the part."""
    items = fixture.items("av")
    qa_file(fixture.root, "av").write_text(json.dumps([*items, items[1]]))
    path = qa_file(fixture.root, "av")
    with pytest.raises(CosmosReason1DataError) as refused:
        load_part(settings_of(fixture), "av")
    assert str(refused.value) == (f"Cosmos-Reason1 QA file {path}, item #{len(items)}, QA pair #0 repeats "
                                  f"Cosmos-Reason1 QA file {path}, item #1, QA pair #0 (the same clip, question, "
                                  f"options and answer): keep one")


def test_a_part_s_error_names_the_problems_of_the_other_parts_present(fixture):
    """A group run stops at its first part with problems: that error names every other present part's problems too
    (check-data, which checks each part, keeps listing each part's own)."""
    (fixture.root / "agibot" / "clips" / "clip_1.mp4").unlink()
    items = fixture.items("av")
    qa_file(fixture.root, "av").write_text(json.dumps([*items, items[0]]))
    with pytest.raises(CosmosReason1DataError) as refused:
        load_part(settings_of(fixture), "agibot")
    message = str(refused.value)
    assert message.startswith("Cosmos-Reason1 sample agibot/1/0") and "clip_1.mp4" in message.splitlines()[0]
    assert "The other parts under" in message and f"av: Cosmos-Reason1 QA file {qa_file(fixture.root, 'av')}, " \
        f"item #{len(items)}, QA pair #0 repeats" in message
    assert len(refused.value.problems) == 1 and "agibot/1/0" in refused.value.problems[0]
