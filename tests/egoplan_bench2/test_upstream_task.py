"""The EgoPlan-Bench2 pull requests for lmms-eval (docs/upstream/), held to the suite in process: 23's test in
lmms-eval's test tree reads every answer shape of the suite's parser tests; 27's task (the egoplan_bench2 variants of
egoplan2/), loaded from its diff with what it imports (egoplan2's parser as 23 fixes it, 37's media readers), shows the
suite's frames and writes its prompt in both data layouts and both frame samplings (its task variants), and its
`accuracy` reads answers as the suite's official parser. The whole task through lmms-eval's CLI against the suite's:
tests/e2e/test_upstream_equivalence.py."""

import ast
import hashlib
import random
import sys

import pytest

from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.demo.egoplan_bench2 import SCRIPTED_STYLES, build_fixture, scripted_answer
from lmms_egoplan.egoplan_bench2 import data, settings, task
from lmms_egoplan.egoplan_bench2.parsing import official_letter
from tests.e2e.upstream_patches import PATCHES, added_file
from tests.egoplan_bench2.test_answer_parsers import OFFICIAL, ROBUST
from tests.kit.upstream_module import added_module, changed_module

FIX = PATCHES / "23-egoplan2-official-parser.patch"
TASK = PATCHES / "27-egoplan-bench2-task.patch"
DECODER = PATCHES / "37-video-frames-at.patch"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    return build_fixture(tmp_path_factory.mktemp("egoplan_bench2"))


@pytest.fixture
def upstream(fixture, tmp_path, monkeypatch):
    """27's ``egoplan_bench2_utils.py``, loaded from its diff with what it imports (egoplan2's ``utils.py`` as 23 fixes
    it, 37's frame decoder and media files in lmms-eval's ``_task_utils``) and the media folders pointing at the
    fixture's layouts."""
    for name, value in fixture.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(sys.modules, "lmms_eval.tasks.egoplan2.utils", changed_module(
        FIX, "lmms_eval/tasks/egoplan2/utils.py", tmp_path))
    monkeypatch.setitem(sys.modules, "lmms_eval.tasks._task_utils.video_loader", changed_module(
        DECODER, "lmms_eval/tasks/_task_utils/video_loader.py", tmp_path))
    monkeypatch.setitem(sys.modules, "lmms_eval.tasks._task_utils.media_files", added_module(
        DECODER, "lmms_eval/tasks/_task_utils/media_files.py", tmp_path))
    return added_module(TASK, "lmms_eval/tasks/egoplan2/egoplan_bench2_utils.py", tmp_path)


def test_the_fixs_test_reads_every_answer_shape_of_the_suites_parser_tests():
    test = ast.parse(added_file(FIX, "test/eval/test_egoplan2_official_parser.py"))
    [answers] = [ast.literal_eval(node.value) for node in test.body
                 if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["ANSWERS"]]
    fixture_records = [{"golden_choice_idx": gold, "answer": "attach stopwatch"} for gold in "ABCD"]
    scripted = {scripted_answer(record, style)[0] for record in fixture_records for style in SCRIPTED_STYLES}
    shapes = {response for response, _ in (*OFFICIAL, *ROBUST)} | scripted
    assert shapes - set(answers) == set()


def pixels(images) -> list[str]:
    return [hashlib.sha256(image.convert("RGB").tobytes()).hexdigest() for image in images]


@pytest.mark.parametrize("source", ["official", "seed_bench_r1"])
@pytest.mark.parametrize("sampling", ["keyframes", "clip"])
def test_the_upstream_task_shows_the_suites_frames_and_writes_its_prompt(upstream, fixture, monkeypatch, source,
                                                                         sampling):
    chosen = fixture.env(data_source=source, frame_sampling=sampling)
    for name, value in chosen.items():
        monkeypatch.setenv(name, value)
    suite_docs = data.load_samples(resolve_settings(settings.EgoPlanBench2Settings, task="egoplan_bench2",
                                                    metadata={}, env_prefix="EGOPLAN2", environ=chosen)).docs
    records = fixture.records() if source == "official" else fixture.package_records()
    # The variants' frame counts: egoplan_bench2(_seed_bench_r1) eval.py's keyframes, egoplan_bench2_clip LongVA's
    count = {"keyframes": upstream.KEYFRAMES, "clip": upstream.CLIP_FRAMES}[sampling]
    upstream_docs = [upstream._question(record, count) for record in records]
    assert [doc["sample_id"] for doc in upstream_docs] == [doc["sample_id"] for doc in suite_docs]
    for ours, theirs in zip(upstream_docs, suite_docs):
        assert pixels(upstream.egoplan_bench2_doc_to_visual(ours)) == pixels(task.doc_to_visual(theirs))
        assert upstream.egoplan_bench2_doc_to_text(ours) == task.doc_to_text(theirs)


def test_the_upstream_accuracy_reads_answers_as_the_suites_official_parser(upstream, fixture):
    words = ["The", "answer", "Answer:", "is", "option", "A", "B", "C", "D", "a", "b", "(C)", "Based", "<answer>",
             "</answer>", "<think>", "</think>", "I", "choose", "place", "oven", "tray", "operate", ".", "D.", "\n"]
    rng = random.Random(0)
    answers = [response for response, _ in (*OFFICIAL, *ROBUST)] + [
        " ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(3000)]
    doc = upstream._question(fixture.records()[0], upstream.KEYFRAMES)
    for answer in answers:
        scores = upstream.egoplan_bench2_process_results(doc, [answer])
        assert scores["accuracy"] == float(official_letter(answer) == doc["golden_choice_idx"]), answer
        assert scores["unparseable"] == float(official_letter(answer) is None), answer
