"""The ActPlan-1K pull request for lmms-eval (docs/upstream/32-actplan1k-tasks.patch), held to the suite in process: its
converter reads the demo's release as the suite does; its tasks, loaded from the diff, send the suite's prompt and
images, parse every plan shape of the suite's parser tests (and model-like outputs) as the suite does, and score
plans with the suite's LCS (it has no BLEURT: the authors publish no classifier). The whole tasks through lmms-eval's
CLI against the suite's: tests/e2e/test_upstream_equivalence.py."""

from __future__ import annotations

import random
import sys

import pytest

from lmms_egoplan.actplan import task
from lmms_egoplan.actplan.data import gold_steps, load_instances
from lmms_egoplan.actplan.lcs import StepMatcher
from lmms_egoplan.actplan.plans import parse_plan
from lmms_egoplan.core.embeddings import default_sentence_model
from lmms_egoplan.demo.actplan import model_output, vlm_plan, write_release_dataset
from tests.actplan import test_plan_steps as step_tests
from tests.actplan import test_protocol as suite_tests
from tests.e2e.upstream_patches import PATCHES, added_file
from tests.kit.upstream_module import added_module

PATCH = PATCHES / "32-actplan1k-tasks.patch"
READERS = PATCHES / "37-video-frames-at.patch"  # the media readers 32 needs, in lmms-eval's _task_utils


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    folder = tmp_path_factory.mktemp("upstream")
    template = "_default_template_yaml"  # utils reads the embedding model from it, beside itself
    (folder / template).write_text(added_file(PATCH, f"lmms_eval/tasks/actplan1k/{template}"))
    with pytest.MonkeyPatch.context() as patch:  # the released lmms-eval lacks 37's module: loaded from its diff
        patch.setitem(sys.modules, "lmms_eval.tasks._task_utils.media_files",
                      added_module(READERS, "lmms_eval/tasks/_task_utils/media_files.py", folder))
        utils = added_module(PATCH, "lmms_eval/tasks/actplan1k/utils.py", folder)
    utils.EMBEDDING_MODEL = default_sentence_model()  # all-MiniLM-L6-v2, offline (the task's default: the Hub's)
    return utils, added_module(PATCH, "lmms_eval/tasks/actplan1k/actplan1k_to_jsonl.py", folder)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_release_dataset(tmp_path_factory.mktemp("actplan") / "ActPlan-1K")


def test_its_converter_reads_the_release_as_the_suite_and_its_tasks_send_the_suites_prompt_and_images(upstream,
                                                                                                      release):
    utils, converter = upstream
    rows, docs = converter.convert(release), load_instances(release)
    assert [row["instance_id"] for row in rows] == [doc["instance_id"] for doc in docs] and len(rows) == 16
    for row, doc in zip(rows, docs):
        assert (row["split"], row["description"]) == (doc["split"], doc["description"])
        assert [utils.gold_steps(plan) for plan in row["gold_plans"]] == doc["gold_plans"]
        assert utils.actplan1k_doc_to_text(row, {"pre_prompt": "P: "}) == task.doc_to_text(doc, {"pre_prompt": "P: "})
        assert utils.actplan1k_doc_to_target(row) == task.doc_to_target(doc)
    images = [image.tobytes() for image in task.doc_to_visual(docs[0])]
    assert [image.tobytes() for image in utils.actplan1k_doc_to_visual(rows[0])] == images
    content = utils.actplan1k_doc_to_messages(rows[0])[0]["content"]
    assert content[0] == {"type": "text", "text": docs[0]["description"]}  # the description first (Eq. 4)
    assert [part["url"].tobytes() for part in content[1:]] == images


def test_it_parses_plans_and_gold_plans_as_the_suite(upstream, release):
    utils = upstream[0]
    outputs = [text for mark in suite_tests.test_plan_parsing.pytestmark for text, *_ in mark.args[1]]
    outputs += [line for line, *_ in (*step_tests.STEP_LINES, *step_tests.PROSE_LINES)]
    rng = random.Random(0)
    outputs += [model_output(vlm_plan(doc["gold_plans"][0], rng, 0.5), rng) for doc in load_instances(release)]
    for text in outputs:
        parsed = parse_plan(text)
        assert utils.parse_plan(text) == (parsed.steps, parsed.plan_lines, parsed.format_errors), text
    for mark in suite_tests.test_gold_plans_are_split_into_steps_as_model_output_is.pytestmark:
        for text, _ in mark.args[1]:
            assert utils.gold_steps(text) == gold_steps(text), text
    for text in outputs:
        assert utils.gold_steps(text) == gold_steps(text), text


def scored_plan(utils, row: dict, doc: dict, rng: random.Random) -> tuple[str, dict]:
    """A model-like plan for the instance (the gold plan with errors, in free-form text) and the task's values."""
    output = model_output(vlm_plan(doc["gold_plans"][0], rng, rng.choice((0.0, 0.5, 1.0))), rng)
    return output, utils.actplan1k_process_results(row, [output])


def test_it_scores_plans_with_the_suites_lcs(upstream, tmp_path):
    """On a smaller release (4 instances): the task encodes each distinct step alone, as the release does."""
    utils, converter = upstream
    release = write_release_dataset(tmp_path / "ActPlan-1K", scenes=2, activities=1, samples=1)
    matcher, rng = StepMatcher(), random.Random(1)
    for row, doc in zip(converter.convert(release), load_instances(release)):
        output, scores = scored_plan(utils, row, doc, rng)
        plan, gold = parse_plan(output).steps, doc["gold_plans"][0]
        lcs = matcher.lcs(plan, gold)
        assert (scores["lcs"], scores[f"lcs_{doc['split']}"]) == (lcs, lcs)
        assert scores["norm_lcs"] == lcs / max(len(plan), len(gold))
        assert not [name for name in scores if "bleurt" in name]
