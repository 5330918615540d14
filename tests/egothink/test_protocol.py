"""EgoThink: the release and Hub data loaders, the twelve dimensions and six capabilities, the task YAMLs
(all twelve tasks through the lmms-eval CLI: tests/e2e/test_egothink.py)."""

import ast
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from lmms_egoplan.demo.egothink import write_hub_copy, write_release
from lmms_egoplan.egothink.data import (
    CAPABILITIES,
    DIMENSIONS,
    EgoThinkDataError,
    load_hub_dimension,
    load_release_dimension,
)


def load_tasks(names: list[str]) -> dict:
    """The tasks as lmms-eval builds them from this suite's YAMLs (settings from the environment)."""
    from lmms_eval.tasks import TaskManager, get_task_dict

    tasks_folder = Path(__file__).parents[2] / "tasks"
    return get_task_dict(names, TaskManager(include_path=str(tasks_folder), include_defaults=False))


def offline_judge_env(data: Path, tmp_path: Path) -> dict:
    """Questions from a local release; a judge that is loaded only when asked to judge."""
    return {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data), "EGOTHINK_JUDGE_BACKEND": "hf",
            "EGOTHINK_JUDGE_MODEL": str(tmp_path / "no-such-model"), "EGOTHINK_JUDGE_CACHE_DIR": "none",
            "EGOTHINK_JUDGE_PREFLIGHT": "false"}


def test_the_capability_map_is_the_one_the_task_groups_average():
    """CAPABILITIES (the report's columns, rejudge's groups) lists what the YAML groups include, in order."""
    import yaml

    folder = Path(__file__).resolve().parents[2] / "tasks" / "egothink"
    configs = (yaml.safe_load(path.read_text()) for path in folder.glob("*.yaml"))
    groups = {config["group"]: config["task"] for config in configs if "group" in config}
    assert groups.pop("ego_think") == [f"ego_think_capability_{capability}" for capability in CAPABILITIES]
    assert groups == {f"ego_think_capability_{capability}": [f"ego_think_{name}" for name in names]
                      for capability, names in CAPABILITIES.items()}
    assert [name for names in CAPABILITIES.values() for name in names] == [d.name for d in DIMENSIONS.values()]


def test_release_loader_reads_every_dimension_and_names_missing_images(tmp_path):
    data = write_release(tmp_path, per_dimension=3)
    for dimension in DIMENSIONS.values():
        docs = load_release_dimension(data, dimension)
        assert [d["id"] for d in docs] == [f"{dimension.hub_config}/{i}" for i in range(3)]
        assert all(Path(d["image"]).is_file() and d["dimension"] == dimension.name for d in docs)
    assert (data / "Forecast" / "annotations.json").is_file()  # the official folder name is accepted
    counting = data / "Reasoning" / "counting"
    missing = counting / "images" / "2.jpg"
    missing.unlink()
    with pytest.raises(EgoThinkDataError,
                       match=rf"{counting / 'annotations.json'}, record 1: field image_path '2.jpg': "
                             rf"image not found: {missing}\. Check EGOTHINK_DATA_ROOT"):
        load_release_dimension(data, DIMENSIONS["Reasoning_counting"])
    shutil.rmtree(data / "Planning")
    with pytest.raises(EgoThinkDataError, match=r"no annotations.json in .*Planning/navigation; set EGOTHINK_DATA_ROOT "
                                                r"\(metadata.data_root\) to the release's data folder"):
        load_release_dimension(data, DIMENSIONS["Planning_navigation"])


def test_every_problem_of_a_dimension_is_listed_in_one_error_naming_file_record_and_field(tmp_path):
    """Bad fields (an image_path of numbers among them) and an image that is not one, in one error."""
    data = write_release(tmp_path, per_dimension=4)
    annotations = data / "Activity" / "annotations.json"
    records = json.loads(annotations.read_text())
    del records[1]["answer"]
    records[0]["question"] = "  "
    records[2]["image_path"] = [5]
    annotations.write_text(json.dumps(records))
    (data / "Activity" / "images" / records[3]["image_path"][0]).write_text("<html>not found</html>\n")
    with pytest.raises(EgoThinkDataError) as error:
        load_release_dimension(data, DIMENSIONS["Activity"])
    assert str(error.value).splitlines() == [
        f"4 problems in EgoThink activity ({annotations}):",
        f"  {annotations}, record 0: field 'question' must be text that is not blank, got '  ';",
        f"  {annotations}, record 1: field 'answer' must be text that is not blank, got None;",
        f"  {annotations}, record 2: field image_path must be a list whose first item is the image's file name, "
        "got [5];",
        f"  {annotations}, record 3: field image_path '4.jpg': not an image file (it starts with bytes "
        f"3c 68 74 6d 6c 3e 6e 6f 74 20 66 6f, as no JPEG, PNG, GIF, BMP, WebP or TIFF file does): "
        f"{data / 'Activity' / 'images' / '4.jpg'}. Check EGOTHINK_DATA_ROOT (metadata.data_root)"]
    for empty in ("[]", ""):
        annotations.write_text(empty)
        with pytest.raises(EgoThinkDataError, match=rf"EgoThink annotation file {annotations}"):
            load_release_dimension(data, DIMENSIONS["Activity"])


def test_hub_loader_reads_the_hub_shaped_dataset_and_stores_its_images_once(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    hub = write_hub_copy(tmp_path / "hub", per_dimension=2)
    release = write_release(tmp_path / "release", per_dimension=2)
    for dimension in (DIMENSIONS["Object_existence"], DIMENSIONS["Planning_assistance"]):
        docs = load_hub_dimension(str(hub), dimension, image_cache=tmp_path / "images")
        strip = lambda d: {k: v for k, v in d.items() if k != "image"}  # noqa: E731
        assert list(map(strip, docs)) == list(map(strip, load_release_dimension(release, dimension)))
        images = [Path(d["image"]) for d in docs]
        assert all(p.is_file() and p.is_relative_to(tmp_path / "images") for p in images)
        stamps = [p.stat().st_mtime_ns for p in images]
        again = load_hub_dimension(str(hub), dimension, image_cache=tmp_path / "images")
        assert [Path(d["image"]).stat().st_mtime_ns for d in again] == stamps


def test_hub_rows_without_a_question_or_reference_are_named_with_repository_config_and_row(tmp_path, monkeypatch):
    """A reference that is None or blank would reach the judge as "None" or be judged against: named, not read."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    hub = write_hub_copy(tmp_path / "hub", per_dimension=2)
    dimension = DIMENSIONS["Object_existence"]
    shard = hub / dimension.hub_config / "test-00000-of-00001.parquet"
    rows = datasets.Dataset.from_parquet(str(shard)).to_list()
    rows[0]["answer"], rows[1]["question"] = None, ""
    rows.append({**rows[1], "question": "Is there a cup?", "image": None})  # a row without its image
    datasets.Dataset.from_list(rows, features=datasets.Dataset.from_parquet(str(shard)).features).to_parquet(str(shard))
    with pytest.raises(EgoThinkDataError) as error:
        load_hub_dimension(str(hub), dimension, image_cache=tmp_path / "images")
    assert f"{hub}, config {dimension.hub_config}, row 0: field 'answer' must be text that is not blank, got None" \
        in str(error.value)
    assert "row 1: field 'question' must be text that is not blank, got ''" in str(error.value)
    assert "row 2: field image holds no image" in str(error.value)


def test_a_hub_dataset_that_does_not_load_is_named_with_the_way_out_its_cause_calls_for(tmp_path, monkeypatch):
    """A repository holding a loading script (what datasets 4 refuses) points at the parquet branch; any other cause
    at the repository and revision settings, never at the parquet branch."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    scripted = tmp_path / "EgoThink"
    scripted.mkdir()
    (scripted / "EgoThink.py").write_text("import datasets\n")
    with pytest.raises(EgoThinkDataError, match=r"could not load config 'Object_existence' of .*EgoThink \(revision "
                                                r"default\): RuntimeError: Dataset scripts are no longer supported.*"
                                                r"This datasets version refuses the repository's loading script: set "
                                                r"EGOTHINK_HUB_REVISION \(metadata.hub_revision\) to "
                                                r"refs/convert/parquet"):
        load_hub_dimension(str(scripted), DIMENSIONS["Object_existence"], image_cache=tmp_path / "images")
    hub = write_hub_copy(tmp_path / "hub", per_dimension=1)
    (hub / "Object_existence").rename(hub / "renamed")
    with pytest.raises(EgoThinkDataError, match=r"could not load config 'Object_existence' .*\. Check "
                                                r"EGOTHINK_HUB_REPO \(metadata.hub_repo\) and EGOTHINK_HUB_REVISION") \
            as error:
        load_hub_dimension(str(hub), DIMENSIONS["Object_existence"], image_cache=tmp_path / "images")
    assert "refs/convert/parquet" not in str(error.value)


def test_an_image_cache_that_cannot_be_a_folder_is_named_with_its_setting(tmp_path, monkeypatch):
    import datasets

    from lmms_egoplan.core.errors import StorageError

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    hub = write_hub_copy(tmp_path / "hub", per_dimension=1)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(StorageError, match=r"EGOTHINK_IMAGE_CACHE \(metadata.image_cache\) .*a-file.*: cannot make "
                                           r"this folder"):
        load_hub_dimension(str(hub), DIMENSIONS["Object_existence"], image_cache=tmp_path / "a-file")


def _store_images(folder, barrier, count):
    from lmms_egoplan.egothink.data import _stored_image

    barrier.wait()
    for index in range(count):
        _stored_image({"bytes": bytes([index]) * 50_000, "path": f"{index}.png"}, folder, index)


def test_ranks_storing_the_same_hub_images_at_once_do_not_collide(tmp_path):
    """Each rank of a multi-GPU run loads the Hub dataset and stores its images in one folder."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(4)
    ranks = [context.Process(target=_store_images, args=(tmp_path, barrier, 60)) for _ in range(4)]
    for rank in ranks:
        rank.start()
    for rank in ranks:
        rank.join(60)
    assert [rank.exitcode for rank in ranks] == [0] * 4
    stored = sorted(tmp_path.iterdir())
    assert len(stored) == 60 and not [p for p in stored if p.name.startswith(".")]  # no temporary file left
    assert all(p.read_bytes() == bytes([int(p.name.split("-")[0])]) * 50_000 for p in stored)


def test_an_unusable_judge_stops_the_task_before_its_data_loads(tmp_path, monkeypatch):
    from lmms_egoplan.core.settings import SettingsError

    for name, value in {"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(tmp_path / "no-data-here"),
                        "EGOTHINK_JUDGE_API_KEY_ENV": "EGOTHINK_UNSET_KEY"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("EGOTHINK_UNSET_KEY", raising=False)
    with pytest.raises(SettingsError,
                       match="ego_think_counting: the judge's API key variable EGOTHINK_UNSET_KEY is not set"
                             r".* name another variable with EGOTHINK_JUDGE_API_KEY_ENV \(metadata"):
        load_tasks(["ego_think_counting"])


@pytest.mark.parametrize("decoding, sampling", [
    (None, {"do_sample": False, "temperature": 0.0}),  # greedy, the default
    ("official_llava", {"do_sample": True, "temperature": 0.2, "num_beams": 1}),
    ("official_pandagpt", {"do_sample": True, "temperature": 0.1, "top_p": 0.01}),
])
def test_requests_carry_the_chosen_decoding_and_the_token_limits(decoding, sampling, tmp_path, monkeypatch):
    data = write_release(tmp_path / "data", per_dimension=1)
    for name, value in offline_judge_env(data, tmp_path).items():
        monkeypatch.setenv(name, value)
    if decoding:
        monkeypatch.setenv("EGOTHINK_DECODING", decoding)
    tasks = load_tasks(["ego_think_counting", "ego_think_navigation"])
    for name, max_new_tokens in (("ego_think_counting", 30), ("ego_think_navigation", 300)):
        task = tasks[name]
        task.build_all_requests(limit=1)
        generation = task.instances[0].args[1]
        assert generation == {"until": [], "max_new_tokens": max_new_tokens, **sampling}
        assert task.config.metadata["decoding"] == (decoding or "greedy")  # recorded in the results file


def test_an_unknown_decoding_stops_the_task_before_its_data_loads(tmp_path, monkeypatch):
    from lmms_egoplan.core.settings import SettingsError

    for name, value in {**offline_judge_env(tmp_path / "no-data-here", tmp_path), "EGOTHINK_DECODING": "beam"}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError,
                       match=r"ego_think_counting: EGOTHINK_DECODING \(metadata.decoding\) must be one of "
                             "greedy, official_llava, official_pandagpt, got 'beam'"):
        load_tasks(["ego_think_counting"])


def test_the_hooks_and_metrics_come_from_the_task_spec_and_a_yaml_that_sets_one_too_is_refused(tmp_path, monkeypatch):
    from lmms_eval.tasks import TaskManager, get_task_dict

    from lmms_egoplan.core.errors import InputError
    from lmms_egoplan.egothink import task as egothink

    for name, value in offline_judge_env(write_release(tmp_path / "data"), tmp_path).items():
        monkeypatch.setenv(name, value)
    built = load_tasks(["ego_think_counting"])["ego_think_counting"]
    assert built.config.process_results.func is egothink.process_results  # the task's context bound
    assert built.config.process_results.keywords["context"] is built.compiled.context
    assert built.config.doc_to_visual is egothink.doc_to_visual and built.config.doc_to_target == "answer"
    # Every metric is in the config lmms-eval builds the task from, the failed model requests' count included.
    assert [(m["metric"], m["higher_is_better"]) for m in built.config.metric_list] == [
        ("score", True), ("judged", True), ("failed", False), ("micro_score", True), ("failed_requests", False)]
    assert {m["metric"]: m["aggregation"].keywords["context"] for m in built.config.metric_list} == dict.fromkeys(
        ("score", "judged", "failed", "micro_score", "failed_requests"), built.compiled.context)
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "mine.yaml").write_text("task: my_ego_think\ndataset_name: Reasoning_counting\n"
                                      "class: !function lmms_egoplan.harness.lmms_eval_task.SuiteTask\n"
                                      "benchmark: !function lmms_egoplan.egothink.benchmark.EGOTHINK\n"
                                      "task_spec: dimension\n"
                                      "test_split: test\n"
                                      "output_type: generate_until\ndoc_to_target: question\n")
    with pytest.raises(InputError, match=r"task my_ego_think: doc_to_target come from its benchmark's task spec "
                                         r"\(lmms_egoplan.egothink.task\); remove them from its YAML"):
        get_task_dict(["my_ego_think"], TaskManager(include_path=str(folder), include_defaults=False))


@pytest.mark.parametrize("settings, message", [
    ({"source": "local"},
     r"source is local but EGOTHINK_DATA_ROOT \(metadata.data_root\) \(the release's data folder\)"),
    ({"source": "s3"}, r"EGOTHINK_SOURCE \(metadata.source\) must be 'hub' or 'local', got 's3'"),
])
def test_source_settings_are_named_as_users_set_them(settings, message):
    from lmms_egoplan.contract.benchmark import TaskContext
    from lmms_egoplan.core.settings import SettingsError
    from lmms_egoplan.egothink.protocol import EgoThinkSettings
    from lmms_egoplan.egothink.task import load_docs

    with pytest.raises(SettingsError, match="task ego_think_counting: " + message):
        load_docs(TaskContext("ego_think_counting", EgoThinkSettings(**settings), dataset_name="Reasoning_counting"))


def test_a_judge_that_cannot_load_fails_the_judgements_instead_of_the_run(tmp_path, monkeypatch):
    from lmms_egoplan.egothink.task import process_results
    from lmms_egoplan.judge import factory

    loads = []
    transformers_backend = factory.TransformersBackend
    monkeypatch.setattr(factory, "TransformersBackend",
                        lambda *a, **k: loads.append(a) or transformers_backend(*a, **k))
    data = write_release(tmp_path / "data", per_dimension=2)
    for name, value in offline_judge_env(data, tmp_path).items():
        monkeypatch.setenv(name, value)
    task = load_tasks(["ego_think_counting"])["ego_think_counting"]
    items = [process_results(doc, ["Two."], None)["score"] for doc in task.dataset["test"]]
    aggregate = task.aggregation()
    # Reported as failed judgements (the logged answers can be re-judged later), not an exception
    # that would end lmms-eval before it writes the generations.
    assert (aggregate["judged"](items, args=None), aggregate["failed"](items, args=None)) == (0, 2)
    score = aggregate["score"](items, args=None)
    assert score != score  # NaN, never a silent zero
    assert len(loads) == 1, "the judge that failed to load was loaded again for another metric"


# The official judge prompt, held by the SHA-256 of its exact strings: AdaCheng/EgoThink@fbafe8f,
# judge_prompts.jsonl, the record "single-math-v2" (its "system_prompt" and "prompt_template", as json.loads
# reads them; the template names the reference {ref_answer_1}, the suite {reference}).
OFFICIAL_SINGLE_MATH_V2_SHA256 = {
    "system_prompt": "75357d685f238b6afd7738be9786fdafde641eb6ca9a3be7471939715a68a4de",
    "prompt_template": "ed38861d0f82d2d0d5b6db7b95a3856a02498065174b821e4e2895c3187641bc",
}


def official_form(prompt: str) -> str:
    """The suite's judge template under the official placeholder names: the only difference allowed."""
    assert prompt.count("{reference}") == 1
    return prompt.replace("{reference}", "{ref_answer_1}")


def test_the_judge_prompt_is_the_official_single_math_v2_to_the_character():
    """Any change of one character of the judge prompt (whitespace included) or of its system turn fails here."""
    from lmms_egoplan.egothink import protocol as egothink_protocol

    def sha256(text):
        return hashlib.sha256(text.encode()).hexdigest()

    assert sha256(egothink_protocol.JUDGE_SYSTEM_PROMPT) == OFFICIAL_SINGLE_MATH_V2_SHA256["system_prompt"]
    assert sha256(official_form(egothink_protocol.JUDGE_PROMPT)) == OFFICIAL_SINGLE_MATH_V2_SHA256["prompt_template"]
    # What the judge receives is that template filled in, after that system turn.
    system, user = egothink_protocol.judge_request({"id": "q1", "question": "Q?", "answer": "R"}, "A").messages
    assert system == {"role": "system", "content": egothink_protocol.JUDGE_SYSTEM_PROMPT}
    assert user == {"role": "user", "content": official_form(egothink_protocol.JUDGE_PROMPT).format(
        question="Q?", ref_answer_1="R", answer="A")}


def official_rating(judgment: str) -> float:
    """AdaCheng/EgoThink@fbafe8f common.py lines 35-36 and 177-186 (run_judge_single, output format "[[rating]]"),
    transcribed: the first [[x]], else the first [x], read by ast.literal_eval; -1 when there is none."""
    one_score_pattern, one_score_pattern_backup = re.compile(r"\[\[(\d+\.?\d*)\]\]"), re.compile(r"\[(\d+\.?\d*)\]")
    match = re.search(one_score_pattern, judgment) or re.search(one_score_pattern_backup, judgment)
    return ast.literal_eval(match.groups()[0]) if match else -1


@pytest.mark.parametrize("judgment", [
    "Correct. Rating: [[1]]", "Rating: [[0.5]].", "Rating: [[0]]", "[[1.0]]", "[[1.]]", "[[0.50]]",
    "first [0.5], then Rating: [[1]]",  # a double bracket anywhere wins over an earlier single one
    "Rating: [[0]] ... corrected: [[1]]", "Rating: [0.5]", "Rating: [1] and [0]",
    "Rating: [[ 1 ]]", "Rating: [[.5]]", "Rating: [[-1]]", "Rating: [[1/2]]", "Rating: 1", "$ERROR$", "",
    'the format "[[rating]]", for example: "Rating: [[0.5]]". Rating: [[1]]',  # an echoed example is read first
    "Rating: [[10]]", "Rating: [[0.8]]", "Rating: [[2]]", "Rating: [7]",  # off the 0 / 0.5 / 1 scale
])
def test_the_rating_is_read_as_the_official_parser_reads_it_and_kept_only_on_the_papers_scale(judgment):
    """Where the official parser reads 0, 0.5 or 1 the suite reads the same; where it reads nothing (-1, a judgement
    show_result.py drops) or a number off the paper's scale (which it averaged in: Fidelity, Rating) the
    judgement fails."""
    from lmms_egoplan.egothink.protocol import RUBRIC

    official = official_rating(judgment)
    if official in (0, 0.5, 1):
        assert RUBRIC.parse_rating(judgment) == official
    else:
        with pytest.raises(ValueError):
            RUBRIC.parse_rating(judgment)


def test_the_groups_average_their_dimensions_unweighted_as_the_papers_average():
    """Table 3's Average is the mean of the twelve dimension scores, each capability the mean of its dimensions, not
    weighted by questions or judgements; rejudge (``group_scores``) and the group YAMLs (lmms-eval's own aggregation,
    tests/kit/group_means.py) report the same. Object (existence 90, 50 judged; attribute 60, 10; affordance 30, 10) is
    (90 + 60 + 30) / 3 = 60, not the judged-weighted (4500 + 600 + 300) / 70; Activity 40 alone; the other eight
    dimensions 20 each, 5 judged: the Average (90 + 60 + 30 + 40 + 8 * 20) / 12 = 380 / 12, not the mean of the six
    capabilities (60 + 40 + 4 * 20) / 6 = 30."""
    from lmms_egoplan.egothink.protocol import group_scores
    from tests.kit.group_means import group_metrics

    dimensions = [name for members in CAPABILITIES.values() for name in members]

    scores = dict.fromkeys(dimensions, 20.0) | {"existence": 90.0, "attribute": 60.0, "affordance": 30.0,
                                                "activity": 40.0}
    judged = dict.fromkeys(dimensions, 5) | {"existence": 50, "attribute": 10, "affordance": 10}
    rows = {f"ego_think_{name}": {"score": scores[name], "judged": judged[name], "failed": 1} for name in dimensions}
    rejudged = group_scores(rows)
    reported = group_metrics("egothink", "ego_think", {task: {"score": row["score"]} for task, row in rows.items()},
                             {task: row["judged"] + row["failed"] for task, row in rows.items()})
    for groups in (rejudged, reported):
        assert groups["ego_think"]["score"] == pytest.approx(380 / 12)
        assert groups["ego_think_capability_object"]["score"] == pytest.approx(60.0)
        assert groups["ego_think_capability_activity"]["score"] == pytest.approx(40.0)
        assert groups["ego_think_capability_planning"]["score"] == pytest.approx(20.0)
    assert rejudged["ego_think"]["judged"] == 50 + 10 + 10 + 9 * 5 and rejudged["ego_think"]["failed"] == 12


def test_a_dimension_scores_its_mean_rating_times_100_over_the_judgements_that_gave_one():
    """Judge answers rated 1, 0.5 and 0, and one without a rating: (1 + 0.5 + 0) / 3 x 100 = 50, the failed judgement
    counted, not averaged in (show_result.py drops a -1)."""
    from lmms_egoplan.egothink import task
    from lmms_egoplan.egothink.protocol import RUBRIC, RUBRIC_NAME
    from lmms_egoplan.judge.protocol import Judgement
    from lmms_egoplan.judge.rubrics import item_requests, score_judged

    outputs = ["Correct. Rating: [[1]]", "Partly. Rating: [[0.5]]", "Wrong. Rating: [[0]]", "I cannot rate this."]
    items = [task.process_results({"id": f"q{i}", "question": "What is in my hand?", "answer": "a cup"}, ["a mug"],
                                  None)["score"] for i in range(len(outputs))]
    judgements = {}
    for item, output in zip(items, outputs):
        [request] = item_requests([item])
        try:
            rating, error = RUBRIC.parse_rating(output), None
        except ValueError as problem:
            rating, error = None, str(problem)
        judgements[request.id] = Judgement(request.id, "judge", request.messages, output, rating, error, False, 1)
    scored = score_judged(items, judgements, {RUBRIC_NAME: RUBRIC}, judge_model="judge")
    assert scored.score == pytest.approx(50.0)
    assert (scored.results.judged, scored.results.failed) == (3, 1)


def test_the_judge_rates_the_answer_without_a_thinking_models_drafts():
    """lmms-eval strips only <think> and <analysis> blocks; Kimi-VL-Thinking's ◁think▷ ones reach the task."""
    from lmms_egoplan.egothink.task import process_results

    doc = {"id": "q1", "question": "How many cups are on the table?", "answer": "Two."}
    item = process_results(doc, ["◁think▷Three? No, the third is a bowl.◁/think▷Two."], None)["score"]
    shown = item["judge_parts"][""]["judge_messages"][-1]["content"]
    assert "[The Start of Assistant's Answer]\nTwo.\n[The End of Assistant's Answer]" in shown
    assert "Three" not in shown
