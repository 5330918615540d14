"""ActPlan-1K: release layout loader, plan parsing, task wiring and scoring logic (no models loaded)."""

import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmms_egoplan.actplan import plans as actplan_plans
from lmms_egoplan.actplan import task as actplan
from lmms_egoplan.actplan.data import ActPlanDataError, check_settings, gold_steps, load_instances
from lmms_egoplan.actplan.plans import (
    RELEASE_PAIRING,
    ParsedPlan,
    bleurt_correct,
    candidates_from_jsonl,
    candidates_from_release,
    parse_plan,
    score_lcs,
)
from lmms_egoplan.actplan.settings import ActPlanSettings
from lmms_egoplan.actplan.task import process_results
from lmms_egoplan.contract.benchmark import TaskContext
from lmms_egoplan.core.settings import SettingsError, resolve_settings
from lmms_egoplan.demo.actplan import write_release_dataset
from lmms_egoplan.demo.kit.media import read_index

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    return write_release_dataset(tmp_path_factory.mktemp("actplan") / "ActPlan-1K", scenes=2, activities=2,
                                 counterfactual=2, samples=2)


def test_one_instance_per_sample_folder_with_split_from_the_problem_index(release):
    instances = load_instances(release)
    assert len(instances) == 2 * 2 * 3 * 2  # scenes x activities x problems (0, 1, 2) x samples
    assert [d["instance_id"] for d in instances] == sorted(d["instance_id"] for d in instances)
    for doc in instances:
        scene, activity, problem, sample = doc["instance_id"].split("/")
        assert (doc["scene"], doc["activity"], doc["problem"], f"sample_{doc['sample']}") == (scene, activity,
                                                                                              int(problem), sample)
        assert doc["split"] == ("normal" if problem == "0" else "counterfactual")
        folder = release / "annotation" / doc["instance_id"]
        assert doc["description"] == (folder.parent / f"task_description_{problem}.txt").read_text().strip()
        assert doc["gold_files"] == ["plan_gold_1.txt", "plan_gold_2.txt"]
        assert doc["gold_plans"][0] == (folder / "plan_gold_1.txt").read_text().splitlines()
        assert 2 <= len(doc["image_paths"]) <= 5
    # The annotation folder itself may be given as the data root.
    assert load_instances(release / "annotation") == instances


def test_images_come_in_frame_number_order(release, tmp_path):
    doc = load_instances(release)[0]
    frames = [int(Path(p).stem) for p in doc["image_paths"]]
    assert frames == sorted(frames)
    # The synthetic images encode a counter written in folder (= frame) order.
    indices = [read_index(image) for image in actplan.doc_to_visual(doc)]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)
    assert actplan.doc_to_visual_text_only(doc) == []


@pytest.mark.parametrize("remove, message", [
    ("*.png", "no images"),
    ("plan_gold_*.txt", "no gold plan"),
    ("../task_description_1.txt", "no task description"),
])
def test_an_incomplete_instance_folder_is_named_in_the_error(release, tmp_path, remove, message):
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    folder = copy / "annotation" / load_instances(release)[3]["instance_id"]
    for path in folder.glob(remove):
        path.unlink()
    named = folder.parent if remove.startswith("..") else folder  # a description is its problem's, not a sample's
    with pytest.raises(ActPlanDataError, match=rf"{named}: {message}"):
        load_instances(copy)


def test_a_description_its_samples_share_is_named_once_and_a_gold_plan_folder_is_named(release, tmp_path):
    """A task description that is not UTF-8 is its problem's: one problem, not one per sample folder; a folder named
    plan_gold_1.txt is named as such, never a traceback."""
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    instances = load_instances(release)
    folder = copy / "annotation" / instances[3]["instance_id"]
    shared = sum(Path(i["instance_id"]).parent == Path(instances[3]["instance_id"]).parent for i in instances)
    assert shared > 1  # the fixture's problem has several samples
    description = next(folder.parent.glob("task_description_*.txt"))
    description.write_bytes(b"tidy the \xff room")
    other = copy / "annotation" / instances[0]["instance_id"]
    gold = next(other.glob("plan_gold_*.txt"))
    gold.unlink()
    gold.mkdir()
    with pytest.raises(ActPlanDataError) as caught:
        load_instances(copy)
    assert str(caught.value).count("not UTF-8") == 1 and f"{description}:1: not UTF-8 text" in str(caught.value)
    assert f"{other}: {gold.name} is a folder, not a gold plan file" in str(caught.value)


def test_a_scene_image_with_random_image_data_is_found_before_the_model_and_named(release, tmp_path):
    """Its signature, chunk lengths and IEND intact, its image data random: PIL, as lmms-eval sets it,
    decodes it to grey and a run would score it. Its CRC finds it when the task loads, before the model,
    where it is among the images decoded there (all of them here); damage only decoding finds stops the
    run when the image is read; one error lists it with the release's other problems."""
    from lmms_egoplan.core.media import MediaError
    from lmms_egoplan.demo.kit.media import with_random_image_data

    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    doc = load_instances(copy)[4]
    image = Path(doc["image_paths"][1])
    intact = image.read_bytes()
    image.write_bytes(with_random_image_data(intact))
    with pytest.raises(ActPlanDataError, match=rf"^{re.escape(doc['folder'])}: cannot decode image "
                                               rf"{re.escape(str(image))}: PNG chunk b'IDAT' at byte 33 is damaged"):
        load_instances(copy, images_decoded=1000)
    image.write_bytes(with_random_image_data(intact, redo_crc=True))  # only decoding shows it
    [unchecked] = [d for d in load_instances(copy, images_decoded=0) if d["instance_id"] == doc["instance_id"]]
    with pytest.raises(MediaError, match=rf"cannot decode image {re.escape(str(image))}: broken data stream"):
        actplan.doc_to_visual(unchecked)
    other = copy / "annotation" / load_instances(release)[9]["instance_id"]
    for gold in other.glob("plan_gold_*.txt"):
        gold.unlink()
    with pytest.raises(ActPlanDataError) as error:
        load_instances(copy, images_decoded=1000)  # every image
    assert str(error.value).splitlines() == [
        f"2 problems in the ActPlan-1K release under {copy / 'annotation'}:",
        f"  {other}: no gold plan (plan_gold_<n>.txt);",
        f"  {doc['folder']}: cannot decode image {image}: broken data stream when reading image file"]


def test_empty_release_and_missing_folder_are_errors(tmp_path):
    (tmp_path / "annotation").mkdir()
    with pytest.raises(ActPlanDataError, match=r"no ActPlan-1K instances .*; check ACTPLAN_DATA_ROOT "
                                               r"\(metadata.data_root\) \(actplan-score: --data_root\)"):
        load_instances(tmp_path)
    with pytest.raises(ActPlanDataError, match=r"not found: .*nowhere; set ACTPLAN_DATA_ROOT .* to the release folder"):
        load_instances(tmp_path / "nowhere")


@pytest.mark.parametrize("text, steps, plan_lines, format_errors", [
    ("walk_to(table)\ngrab(cup)\n", ["walk_to(table)", "grab(cup)"], 2, 0),
    ("1. walk_to(table)\n2) grab(cup)\n(3) open(fridge)", ["walk_to(table)", "grab(cup)", "open(fridge)"], 3, 0),
    ("- walk_to(table)\n* grab(cup)\n\u2022 close(fridge)", ["walk_to(table)", "grab(cup)", "close(fridge)"], 3, 0),
    ("```python\nwalk_to(table)\nplace_inside(basket_1,cookie)\n```",
     ["walk_to(table)", "place_inside(basket_1, cookie)"], 2, 0),
    ("Here is the plan:\n\nwalk_to(table)\ngrab(cup)\n\nThis completes the task.", ["walk_to(table)", "grab(cup)"], 2,
     0),
    ("walk_to(table) grab(cup)  place_inside( sink , cup )", ["walk_to(table)", "grab(cup)", "place_inside(sink, cup)"],
     1, 0),
    ("**Step 1:** `switch-on(stove)`.\nStep 2: walk_to(table),", ["switch-on(stove)", "walk_to(table)"], 2, 0),
    # Lines between the first and the last step that are not only steps are format errors.
    ("walk_to(table)\n(brush sweater1)\nWalk to the sink.\ngrab(cup) # then wash it\nopen(tap)",
     ["walk_to(table)", "grab(cup)", "open(tap)"], 5, 3),
    # No step at all: every line is a format error (the open-source VLM output of Appendix F).
    ("1. Walk to the table. 2. Place a cookie on top of the bowl.\n3. Grab a candle from the floor.", [], 2, 2),
    ("", [], 0, 0),
    # Prose before a parenthesis is no step (the name must touch it); empty arguments are one.
    ("Walk to the kitchen (the one on the left) and grab() the cup.", ["grab()"], 1, 1),
    # The descriptions' format placeholder, or their sentence repeated, names no step (and is a format error).
    ("action(object)\naction(object)", [], 2, 2),
    ("Generate admissible procedural plans without natural language using the planning steps described with "
     "action(object).", [], 1, 1),
    ("walk_to(table)\naction(object)\ngrab(cup)", ["walk_to(table)", "grab(cup)"], 3, 1),
])
def test_plan_parsing(text, steps, plan_lines, format_errors):
    assert parse_plan(text) == ParsedPlan(steps, plan_lines, format_errors)


def test_the_release_lines_of_a_plan_leave_out_reasoning_blocks_and_keep_everything_else():
    from lmms_egoplan.actplan.plans import candidate_plan

    def lines(text):
        return candidate_plan("m", "i", None, text, [], "lines").prediction

    assert lines("walk_to(a)\ngrab(b)\n") == ["walk_to(a)", "grab(b)", ""]  # the release's trailing empty step
    assert lines("<think>walk_to(x)\nmaybe</think>\nwalk_to(a)\ngrab(b)") == ["walk_to(a)", "grab(b)"]


@pytest.mark.parametrize("text, steps", [
    # The release's gold files: one step per line, each line a step as written.
    ("walk_to(table)\nplace_inside(basket_1, cookie)\n", ["walk_to(table)", "place_inside(basket_1, cookie)"]),
    ("walk_to(floor)\nwait\nplace_on_top(mousetrap3, floor, next_to(toilet))\nplace_inside(carton, snack_food\n",
     ["walk_to(floor)", "wait", "place_on_top(mousetrap3, floor, next_to(toilet))", "place_inside(carton, snack_food"]),
    # finetuning_data.jsonl: one line of steps joined by spaces, split as model output is.
    ("walk_to(table) grab(cookie) place_inside(basket_1,cookie) ",
     ["walk_to(table)", "grab(cookie)", "place_inside(basket_1, cookie)"]),
    # Text between steps on such a line is an annotated step too, never dropped.
    ("walk_to(floor) wait grab(mop) place_inside(carton, snack_food",
     ["walk_to(floor)", "wait", "grab(mop)", "place_inside(carton, snack_food"]),
    ("1. walk_to(table)\n```\n", ["walk_to(table)"]),
    ("\n  \n```\n```\n", []),
])
def test_gold_plans_are_split_into_steps_as_model_output_is(text, steps):
    assert gold_steps(text) == steps


def test_a_gold_plan_without_a_step_is_named_with_its_file_and_row(release, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"candidate": "grab(x)", "reference": "grab(x)"}) + "\n"
                     + json.dumps({"candidate": "grab(x)", "references": ["grab(x)", "```\n\n```\n"]}) + "\n")
    with pytest.raises(ActPlanDataError, match=rf"{pairs}:2: the gold plan in 'references' item 2 has no step"):
        candidates_from_jsonl(pairs)
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    folder = copy / "annotation" / load_instances(release)[5]["instance_id"]
    (folder / "plan_gold_2.txt").write_text("\n\n")
    with pytest.raises(ActPlanDataError, match=rf"{folder}: gold plan without a step plan_gold_2.txt"):
        load_instances(copy)
    shutil.rmtree(copy)
    shutil.copytree(release, copy)
    description = next(folder.parent.glob("task_description_*.txt"))
    description.write_text(" \n")  # the model would plan a task it is not told
    with pytest.raises(ActPlanDataError, match=rf"(?s){description.parent}: its task description {description} is "
                                               rf"empty"):
        load_instances(copy)


def settings(**overrides):
    return ActPlanSettings(**{"data_root": "/data", **overrides})


def test_the_description_comes_before_the_images_as_the_paper_orders_them_and_after_them_as_a_setting(release,
                                                                                                      monkeypatch):
    """Paper Eq. 4, VLM([T, I1, I2, ...]): egoplan_hf's requests ask for the text first; a chat backend's
    messages hold it first; a backend that does not say it honours the order is named in a warning.
    ``input_order: visuals_first`` gives lmms-eval's usual order (no request option)."""
    from argparse import Namespace

    from lmms_eval.utils import load_yaml_config

    from lmms_egoplan.core.request_options import INPUT_ORDER, TEXT_FIRST, VISUALS_FIRST

    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(release))
    warnings = []
    monkeypatch.setattr("lmms_egoplan.harness.backend_choice.logger", SimpleNamespace(warning=warnings.append))
    for order, content in ((TEXT_FIRST, ["text", "image", "image"]), (VISUALS_FIRST, ["image", "image", "text"])):
        monkeypatch.setenv("ACTPLAN_INPUT_ORDER", order)
        config = load_yaml_config(str(TASKS_DIR / "actplan" / "actplan1k.yaml"))
        task = config["class"](config=config)
        doc = task.eval_docs[0]
        warned = len(warnings)
        task._bind_to_backend(Namespace(model="egoplan_hf"))
        assert len(warnings) == warned
        request = task.construct_requests(doc_id=0, ctx=actplan.doc_to_text(doc), metadata={
            "task": "actplan1k", "doc_id": 0, "repeats": 1, "split": "test"})
        assert INPUT_ORDER.of(request) == order
        assert (INPUT_ORDER.name in getattr(request, "request_options", {})) == (order == TEXT_FIRST)
        turn = task._build_user_turn(actplan.doc_to_visual(doc)[:2], doc["description"])
        assert [part["type"] for part in turn[0]["content"]] == content
        task._bind_to_backend(Namespace(model="dummy"))
        assert len(warnings) - warned == (order == TEXT_FIRST)
    assert "asks for input_order 'text_first' (ACTPLAN_INPUT_ORDER" in warnings[0]
    assert "'dummy' does not declare it honours" in warnings[0]
    text_only = load_yaml_config(str(TASKS_DIR / "actplan" / "actplan1k_text_only.yaml"))
    assert not text_only["class"](config=text_only).requested_options()  # no images, no order


@pytest.mark.parametrize("overrides, message", [
    ({"data_root": ""}, r"ACTPLAN_DATA_ROOT \(metadata.data_root\): set it"),
    ({"match_threshold": 1.5}, r"ACTPLAN_MATCH_THRESHOLD \(metadata.match_threshold\): expected a cosine in \(0, 1\]"),
    ({"bleurt_checkpoint": "/no/such/checkpoint"},
     r"ACTPLAN_BLEURT_CHECKPOINT \(metadata.bleurt_checkpoint\): not found"),
    # A folder that is no model fails before any answer is generated, not at scoring with a transformers traceback.
    ({"embedding_model": "."}, r"ACTPLAN_EMBEDDING_MODEL \(metadata.embedding_model\): \. is no sentence-transformers "
                               r"model folder \(no config.json naming its model_type\)"),
])
def test_bad_settings_name_the_setting(overrides, message):
    with pytest.raises(SettingsError, match=message):
        check_settings(settings(**overrides), "actplan1k")


def test_scoring_settings_that_would_fail_at_aggregation_are_named_at_load(tmp_path):
    """Found before any answer is generated, not when the paid run's plans are scored."""
    with pytest.raises(SettingsError, match=rf"ACTPLAN_BLEURT_CHECKPOINT \(metadata.bleurt_checkpoint\): {tmp_path} is "
                                            r"not a plan-classifier folder \(no plan_classifier.safetensors\)"):
        check_settings(settings(bleurt_checkpoint=str(tmp_path)), "actplan1k")
    state_dict = tmp_path / "best-model.ckpt"
    state_dict.write_bytes(b"")
    with pytest.raises(SettingsError, match=r"ACTPLAN_BLEURT_BASE \(metadata.bleurt_base\): .*best-model.ckpt is a "
                                            r"state-dict file"):
        check_settings(settings(bleurt_checkpoint=str(state_dict)), "actplan1k")
    with pytest.raises(SettingsError, match=r"ACTPLAN_SCORING_DEVICE \(metadata.scoring_device\): 'tpu9' names no "
                                            r"torch device"):
        check_settings(settings(scoring_device="tpu9"), "actplan1k")
    for device in ("cpu", "cuda", "cuda:1", "auto"):  # parsed, not looked for: a GPU box's names pass here too
        check_settings(settings(scoring_device=device), "actplan1k")


@pytest.mark.parametrize("variable, value, message", [
    ("ACTPLAN_GOLD_PLAN", "last", r"ACTPLAN_GOLD_PLAN \(metadata.gold_plan\) must be one of first, best, got 'last'"),
    ("ACTPLAN_INSTANCES", "odd",
     r"ACTPLAN_INSTANCES \(metadata.instances\) must be one of all, normal, counterfactual"),
    ("ACTPLAN_BLEURT_BATCH_SIZE", "0", r"ACTPLAN_BLEURT_BATCH_SIZE \(metadata.bleurt_batch_size\) must be at least 1"),
    ("ACTPLAN_MATCH_THRESHOLDS", "0.5",
     r"ACTPLAN_MATCH_THRESHOLDS names no setting; did you mean ACTPLAN_MATCH_THRESHOLD\?"),
])
def test_settings_out_of_their_choices_and_ranges_or_misspelt_are_named_at_load(variable, value, message):
    with pytest.raises(SettingsError, match=message):
        resolve_settings(ActPlanSettings, task="actplan1k", metadata={}, env_prefix="ACTPLAN",
                         environ={variable: value})


def test_process_results_gives_every_plan_metric_the_plan_and_its_scope(release):
    doc = load_instances(release)[-1]
    assert doc["split"] == "counterfactual"
    output = "Plan:\n1. walk_to(table)\nthen grab the cup\n2. grab(cup)"
    values = process_results(doc, [output], TaskContext("actplan1k", settings()))
    assert set(values) == {"lcs", "norm_lcs", "lcs_normal", "norm_lcs_normal", "lcs_counterfactual",
                           "norm_lcs_counterfactual", "format_error_rate", "plan_length", "no_plan_rate"}
    scored = {"instance_id": doc["instance_id"], "split": "counterfactual", "output": output,
              "prediction": ["walk_to(table)", "grab(cup)"], "gold": doc["gold_plans"]}
    # A per-split metric gets every plan too (the aggregation averages over its scope only).
    for scope, suffix in (("all", ""), ("normal", "_normal"), ("counterfactual", "_counterfactual")):
        assert values[f"lcs{suffix}"] == values[f"norm_lcs{suffix}"] == {**scored, "scope": scope}
    assert values["format_error_rate"] == {"format_errors": 1, "plan_lines": 3}
    assert (values["plan_length"], values["no_plan_rate"]) == (2, 0.0)
    with_bleurt = process_results(doc, [output], TaskContext("actplan1k", settings(bleurt_checkpoint="/ckpt"), None))
    assert {"bleurt_accuracy", "bleurt_accuracy_normal", "bleurt_accuracy_counterfactual"} <= set(with_bleurt)
    # A run over one split reports that split only.
    one_split = process_results(doc, [output], TaskContext("actplan1k", settings(instances="counterfactual",
                                                                                 bleurt_checkpoint="/ckpt"), None))
    assert not any(name.endswith("_normal") for name in one_split) and "bleurt_accuracy_counterfactual" in one_split


def test_a_thinking_models_drafts_are_not_its_plan_and_the_output_is_kept_whole(release):
    doc = load_instances(release)[-1]
    output = "◁think▷Maybe:\n1. open(fridge)\n2. grab(cup)◁/think▷\n1. walk_to(table)\n2. grab(cup)"
    values = process_results(doc, [output], TaskContext("actplan1k", settings()))
    assert values["lcs"]["prediction"] == ["walk_to(table)", "grab(cup)"] and values["lcs"]["output"] == output
    assert values["format_error_rate"] == {"format_errors": 0, "plan_lines": 2}
    # lmms-egoplan actplan-score reads the kept output as the run read it
    from lmms_egoplan.actplan.plans import candidate_plan

    rescored = candidate_plan("m", doc["instance_id"], doc["split"], output, doc["gold_plans"], "parsed")
    assert rescored.prediction == values["lcs"]["prediction"]


def test_format_error_rate_is_pooled_over_lines_and_nan_without_any():
    items = [{"format_errors": 1, "plan_lines": 4}, {"format_errors": 0, "plan_lines": 0},
             {"format_errors": 2, "plan_lines": 6}]
    assert actplan_plans.aggregate_format_error_rate(items) == pytest.approx(0.3)
    assert math.isnan(actplan_plans.aggregate_format_error_rate([{"format_errors": 0, "plan_lines": 0}]))


class ExactMatcher:
    """Steps match when equal (the LCS logic under test does not depend on the embedding model)."""

    def lcs_many(self, pairs):
        from lmms_egoplan.actplan.lcs import lcs_length

        return [lcs_length([[x == y for y in b] for x in a]) for a, b in pairs]


def test_first_gold_plan_or_best_gold_plan():
    prediction = ["a", "b", "c"]
    golds = [["a", "x", "y", "z"], ["a", "b", "c", "d"], ["a", "b", "c", "d", "e"]]
    first, = score_lcs([(prediction, golds)], ExactMatcher(), "first")
    assert (first.lcs, first.norm_lcs, first.gold_index) == (1, 0.25, 0)
    best, = score_lcs([(prediction, golds)], ExactMatcher(), "best")
    assert (best.lcs, best.norm_lcs, best.gold_index) == (3, 0.75, 1)
    empty, = score_lcs([([], golds)], ExactMatcher(), "best")
    assert (empty.lcs, empty.norm_lcs) == (0, 0.0)
    # the best is the highest normalised LCS, not the longest LCS: 1 / max(2, 1) = 0.5 beats 2 / max(2, 5) = 0.4
    shorter, = score_lcs([(["a", "b"], [["a", "b", "c", "d", "e"], ["a"]])], ExactMatcher(), "best")
    assert (shorter.lcs, shorter.norm_lcs, shorter.gold_index) == (1, 0.5, 1)


class KeywordClassifier:
    """Judges a plan correct when it mentions the word "good" (records what it was asked, and how often)."""

    def __init__(self):
        self.asked = []
        self.calls = 0

    def predict(self, references, candidates, batch_size=16):
        self.calls += 1
        self.asked += list(zip(references, candidates))
        return [int("good" in c) for c in candidates]


def test_bleurt_correctness_against_the_first_or_any_gold_plan():
    pairs = [(["walk_to(good)", "grab(cup)"], [["walk_to(x)"], ["walk_to(y)"]]), ([], [["walk_to(x)"]]),
             (["walk_to(bad)"], [["walk_to(x)"]])]
    classifier = KeywordClassifier()
    assert bleurt_correct(pairs, classifier, "first") == [1, 0, 0]
    # Plans are given as the fine-tuning data writes them; a plan without steps is never asked.
    assert classifier.asked == [("walk_to(x)", "walk_to(good) grab(cup)"), ("walk_to(x)", "walk_to(bad)")]
    assert bleurt_correct(pairs, KeywordClassifier(), "best") == [1, 0, 0]


class SameTextClassifier:
    """Judges a plan correct when it is its reference, word for word."""

    def predict(self, references, candidates, batch_size=16):
        return [int(reference == candidate) for reference, candidate in zip(references, candidates)]


def test_bleurt_best_is_correct_where_any_gold_plan_judges_it_correct_wherever_that_plan_stands():
    pairs = [(["walk_to(x)"], [["walk_to(x)"], ["walk_to(y)"]]), (["walk_to(y)"], [["walk_to(x)"], ["walk_to(y)"]]),
             (["walk_to(z)"], [["walk_to(x)"], ["walk_to(y)"]])]
    assert bleurt_correct(pairs, SameTextClassifier(), "best") == [1, 1, 0]
    assert bleurt_correct(pairs, SameTextClassifier(), "first") == [1, 0, 0]


def load_tasks(names):
    from lmms_eval.tasks import TaskManager, get_task_dict

    return get_task_dict(list(names), TaskManager(include_path=str(TASKS_DIR), include_defaults=False))


def test_plan_metrics_keep_the_plans_once_and_classify_each_pair_once_in_any_order(release, monkeypatch, tmp_path):
    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(release))
    checkpoint = tmp_path / "classifier"  # a trained classifier's folder, as the settings check it; replaced below
    checkpoint.mkdir()
    (checkpoint / "plan_classifier.safetensors").write_bytes(b"")
    monkeypatch.setenv("ACTPLAN_BLEURT_CHECKPOINT", str(checkpoint))
    classifier = KeywordClassifier()
    monkeypatch.setattr(actplan, "_classifier", lambda *configuration: classifier)
    monkeypatch.setattr(actplan, "_matcher", lambda settings: ExactMatcher())
    task = load_tasks(["actplan1k"])["actplan1k"]
    docs = list(task.test_docs())
    outputs = [f"walk_to({'good' if i % 3 else 'bad'})\n" + "\n".join(doc["gold_plans"][0][:i % 5])
               for i, doc in enumerate(docs)]
    per_doc = [task.process_results(doc, [output]) for doc, output in zip(docs, outputs)]
    args = SimpleNamespace(output_path=str(tmp_path), model_args="pretrained=org/tiny-model,device=cpu", timezone=None)
    # Per-split metrics first: lmms-eval's order is not fixed (multi-GPU runs sort metric names).
    order = ["bleurt_accuracy_counterfactual", "norm_lcs_normal", "lcs", "bleurt_accuracy", "lcs_counterfactual",
             "bleurt_accuracy_normal", "norm_lcs", "lcs_normal", "norm_lcs_counterfactual"]
    reported = {}
    for metric in order:
        reported[metric] = task.aggregation()[metric]([values[metric] for values in per_doc], args=args)
        if metric == order[0]:
            kept = task.compiled.context.state.plans_file
            rows = [json.loads(line) for line in kept.read_text().splitlines()]
            kept.unlink()  # the plans are written once: no later metric writes them again
    assert not kept.exists()
    assert kept.parent == tmp_path / "org__tiny-model" and kept.name.endswith("_plans_actplan1k.jsonl")
    # Every plan, as lmms-eval hands it to process_results (stripped), with its gold plans.
    assert rows == [{"model": "actplan1k:tiny-model", "instance_id": doc["instance_id"], "split": doc["split"],
                     "candidate": output.strip(), "references": ["\n".join(g) for g in doc["gold_plans"]]}
                    for doc, output in zip(docs, outputs)]
    # One classifier call for the three BLEURT metrics, each plan pair asked once.
    assert classifier.calls == 1 and len(classifier.asked) == len(set(classifier.asked)) == len(docs)
    pairs = [(parse_plan(output).steps, doc["gold_plans"]) for doc, output in zip(docs, outputs)]
    lcs = score_lcs(pairs, ExactMatcher(), "first")
    for scope, suffix in (("all", ""), ("normal", "_normal"), ("counterfactual", "_counterfactual")):
        chosen = [i for i, doc in enumerate(docs) if scope in ("all", doc["split"])]
        assert 0 < len(chosen)
        assert reported[f"lcs{suffix}"] == pytest.approx(sum(lcs[i].lcs for i in chosen) / len(chosen))
        assert reported[f"norm_lcs{suffix}"] == pytest.approx(sum(lcs[i].norm_lcs for i in chosen) / len(chosen))
        assert reported[f"bleurt_accuracy{suffix}"] == pytest.approx(sum(i % 3 != 0 for i in chosen) / len(chosen))


def test_without_an_output_path_the_plans_are_kept_in_the_working_folder(release, monkeypatch, tmp_path):
    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(release))
    monkeypatch.setattr(actplan, "_matcher", lambda settings: ExactMatcher())
    monkeypatch.chdir(tmp_path)
    task = load_tasks(["actplan1k_text_only"])["actplan1k_text_only"]
    docs = list(task.test_docs())[:2]
    items = [task.process_results(doc, ["grab(cup)"])["lcs_normal"] for doc in docs]
    assert task.aggregation()["lcs_normal"](items, args=SimpleNamespace(output_path=None, model_args="")) == 0.0
    plans_file = task.compiled.context.state.plans_file
    assert plans_file.parent == tmp_path / "plans"
    assert ([json.loads(line)["model"] for line in plans_file.read_text().splitlines()]
            == ["actplan1k_text_only"] * 2)


def test_pair_files_of_the_release_and_of_this_suite(tmp_path):
    release_pairs = tmp_path / "gpt-4v_pairs.jsonl"
    release_pairs.write_text("\n".join(json.dumps(row) for row in [
        {"dir": "./annotation/Rs_int/cleaning_oven/0/sample_1", "candidate": "walk_to(oven)\nopen(oven)\n",
         "reference": "walk_to(oven)\n"},
        {"dir": "./annotation/Rs_int/cleaning_oven/2/sample_0", "candidate": "1. walk_to(oven)",
         "reference": "open(oven)\n"},
    ]) + "\n")
    parsed = candidates_from_jsonl(release_pairs)
    assert [(p.model, p.split, p.prediction, p.gold) for p in parsed] == [
        ("gpt-4v_pairs", "normal", ["walk_to(oven)", "open(oven)"], [["walk_to(oven)"]]),
        ("gpt-4v_pairs", "counterfactual", ["walk_to(oven)"], [["open(oven)"]]),
    ]
    # "lines": the release's text.split("\n"), trailing empty step included.
    lines = candidates_from_jsonl(release_pairs, steps="lines")
    assert lines[0].prediction == ["walk_to(oven)", "open(oven)", ""] and lines[0].gold == [["walk_to(oven)", ""]]
    ours = tmp_path / "20261121_101500_plans_actplan1k.jsonl"
    ours.write_text(json.dumps({"instance_id": "S/a/1/sample_0", "split": "counterfactual", "candidate": "grab(x)",
                                "references": ["grab(x)", "grab(y)"]}) + "\n")
    plan, = candidates_from_jsonl(ours, model="m")
    assert (plan.model, plan.split, plan.gold) == ("m", "counterfactual", [["grab(x)"], ["grab(y)"]])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"candidate": "grab(x)"}\n')
    with pytest.raises(ActPlanDataError, match=r"bad.jsonl:1: needs 'candidate' and 'reference'"):
        candidates_from_jsonl(bad)
    bad.write_text('{"candidate": "grab(x)", "reference": "grab(x)"}\n\n{"candidate": "grab(x)", "reference": \n')
    with pytest.raises(ActPlanDataError, match=r"bad.jsonl:3: not JSON"):
        candidates_from_jsonl(bad)
    bad.write_text('["grab(x)", "grab(x)"]\n')
    with pytest.raises(ActPlanDataError, match=r"bad.jsonl:1: expected a JSON object, got list"):
        candidates_from_jsonl(bad)
    bad.write_text('{"candidate": ["grab(x)"], "reference": "grab(x)"}\n')
    with pytest.raises(ActPlanDataError,
                       match=r"bad.jsonl:1: needs 'candidate' and 'reference' \(or 'references'\) texts"):
        candidates_from_jsonl(bad)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        candidates_from_jsonl(tmp_path / "missing.jsonl")


def test_space_joined_gold_plans_score_as_one_step_per_line(tmp_path, monkeypatch, capsys):
    from lmms_egoplan.actplan import lcs as actplan_lcs
    from lmms_egoplan.cli import main
    from lmms_egoplan.demo.actplan import write_finetuning_data

    monkeypatch.setattr(actplan_lcs, "StepMatcher", lambda *args, **kwargs: ExactMatcher())
    data, _ = write_finetuning_data(tmp_path, activities=3)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    # Pairs as finetuning_data.jsonl writes plans (steps joined by spaces), and the same plans one step per line.
    joined = [{"candidate": (row["pos_gpt"] + row["neg_gpt"])[0], "reference": row["gold_gpt"][0]} for row in rows]
    per_line = [{key: "\n".join(re.split(r"(?<=\)) ", text)) for key, text in pair.items()} for pair in joined]
    scores = {}
    for name, pairs in (("joined", joined), ("per_line", per_line)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
        assert main(["actplan-score", "--pairs", str(tmp_path / f"{name}.jsonl"), "--output",
                     str(tmp_path / f"{name}.out")]) == 0
        scores[name] = [json.loads(line)["lcs"] for line in (tmp_path / f"{name}.out").read_text().splitlines()]
    assert scores["joined"] == scores["per_line"] and min(scores["joined"]) > 0


def test_release_pairing_scores_gemini_against_the_second_gold_plan(release, tmp_path, monkeypatch, capsys):
    from lmms_egoplan.actplan import lcs as actplan_lcs
    from lmms_egoplan.cli import main

    docs = {doc["instance_id"]: doc for doc in load_instances(release)}
    plans, notes = candidates_from_release(release, gold=RELEASE_PAIRING)
    assert {plan.model for plan in plans} == {"gemini", "gpt-4v"} and notes == []
    for plan in plans:
        assert plan.gold == [docs[plan.instance_id]["gold_plans"][1 if plan.model == "gemini" else 0]]
    # Through the command: the same pairs, and an instance without the model's gold file is left out.
    copy = tmp_path / "copy"
    shutil.copytree(release, copy)
    next(copy.glob("annotation/*/*/*/sample_0/plan_gold_2.txt")).unlink()
    monkeypatch.setattr(actplan_lcs, "StepMatcher", lambda *args, **kwargs: ExactMatcher())
    output = tmp_path / "scores.jsonl"
    assert main(["actplan-score", "--data_root", str(copy), "--gold", RELEASE_PAIRING, "--output", str(output)]) == 0
    assert "note: 1 instance(s) left out (gemini: no plan_gold_2.txt)" in capsys.readouterr().out
    expected = {(plan.model, plan.instance_id): score.lcs
                for plan, score in zip(plans, score_lcs([(p.prediction, p.gold) for p in plans], ExactMatcher()))}
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert len(rows) == len(plans) - 1 and all(row["lcs"] == expected[row["model"], row["instance_id"]] for row in rows)
    # Pair files carry their own gold plans.
    assert main(["actplan-score", "--pairs", str(output), "--gold", RELEASE_PAIRING]) == 2
    assert f"--gold {RELEASE_PAIRING} picks a release gold file" in capsys.readouterr().err


def test_yaml_tasks_bind_settings_and_differ_only_in_images(release, monkeypatch):
    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(release))
    monkeypatch.setenv("ACTPLAN_INSTANCES", "counterfactual")
    tasks = load_tasks(["actplan1k", "actplan1k_text_only"])
    with_images, text_only = tasks["actplan1k"], tasks["actplan1k_text_only"]
    docs = list(with_images.test_docs())
    assert len(docs) == 16 and {d["split"] for d in docs} == {"counterfactual"}
    assert with_images.config.metadata["instances"] == "counterfactual"  # recorded in the results file
    assert len(with_images.doc_to_visual(docs[0])) == len(docs[0]["image_paths"])
    assert text_only.doc_to_visual(docs[0]) == []
    assert with_images.doc_to_text(docs[0]) == text_only.doc_to_text(docs[0]) == docs[0]["description"]
    assert (with_images.config.generation_kwargs["until"] == []
            and with_images.config.generation_kwargs["temperature"] == 0)
    # process_results and the plan metrics receive the task's context: its settings and the plans of its run.
    context = with_images.config.process_results.keywords["context"]
    assert context.settings.instances == "counterfactual" and context is with_images.compiled.context
    assert isinstance(context.state, actplan.PlansOfTheRun)
    assert with_images.aggregation()["lcs"].keywords["context"] is context
    assert with_images.aggregation()["bleurt_accuracy_normal"].keywords["context"] is context


def test_settings_that_keep_no_instance_stop_the_task_at_load_naming_what_was_read(release, tmp_path, monkeypatch):
    """instances=normal on a release whose only problems are counterfactual: no sample to evaluate, an input error
    naming the folder read and the settings that choose it (never a bare ValueError)."""
    import shutil

    from lmms_eval.utils import load_yaml_config

    from lmms_egoplan.core.errors import InputError

    copy = tmp_path / "ActPlan-1K"
    shutil.copytree(release, copy)
    for normal in [path for path in (copy / "annotation").glob("*/*/0") if path.is_dir()]:
        shutil.rmtree(normal)
    monkeypatch.setenv("ACTPLAN_DATA_ROOT", str(copy))
    monkeypatch.setenv("ACTPLAN_INSTANCES", "normal")
    config = load_yaml_config(str(TASKS_DIR / "actplan" / "actplan1k.yaml"))
    with pytest.raises(InputError, match=rf"task actplan1k: no sample to evaluate in .*{copy.name}.*; check the files "
                                         r"there and the ACTPLAN_\* settings"):
        config["class"](config=config)


def test_the_tasks_of_a_run_share_its_step_matcher_and_classifier_and_the_next_run_builds_its_own(monkeypatch):
    """They were kept for the whole process by their settings: a later evaluation in the process used the models it
    had loaded, whatever their files had become."""
    from lmms_egoplan.actplan import classifier as bleurt
    from lmms_egoplan.actplan import lcs as actplan_lcs
    from lmms_egoplan.core.run import SuiteRun

    built = []
    monkeypatch.setattr(actplan_lcs, "StepMatcher", lambda *args, **kwargs: built.append("matcher") or object())
    monkeypatch.setattr(bleurt, "load_classifier", lambda *args, **kwargs: built.append("classifier") or object())
    settings = ActPlanSettings(bleurt_checkpoint="/ckpt")
    first, second = SuiteRun(), SuiteRun()
    contexts = [TaskContext(task, settings, run=run) for run in (first, first, second)
                for task in ("actplan1k", "actplan1k_text_only")]
    matchers = [actplan._matcher(context) for context in contexts]
    classifiers = [actplan._classifier(context) for context in contexts]
    assert built == ["matcher", "matcher", "classifier", "classifier"]
    assert len({id(m) for m in matchers[:4]}) == 1 and matchers[4] is matchers[5] is not matchers[0]
    assert len({id(c) for c in classifiers[:4]}) == 1 and classifiers[4] is not classifiers[0]
