"""Synthetic RoboVQA data in the three layouts users download, the same questions in each, for tests and the
offline demo.

Two episodes, each a video of ``EPISODE_FRAMES`` frames whose pixels encode their index
(``demo.kit.media.read_index``) and a tagged text in the official form (every tag of the release: ten, seven
question types). Layouts: ``frames16/`` (``qa.jsonl`` and ``frames/<episode>/<n>.jpg``, 16 frames spread over the
video), ``tianli/`` (``data/validation-00000-of-00001.parquet`` rows ``uid``, ``video``, ``text``, and
``videos/<episode>.mp4``), ``tfrecord/val-00000-of-00001`` (a SequenceExample per episode written by the
``tfrecord`` package: feature lists ``images``, a JPEG per frame, and ``texts``).

Each lineage's scorer transcribed from its code (``mimo_transcribed``, ...): what the suite's presets
(``lmms_egoplan.robovqa.scoring``) are checked against, by their tests and by the demo, whose scripted answers go
through every preset's scorer too (``preset_rescorings``)."""

from __future__ import annotations

import io
import json
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.settings import env_var
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import index_image, write_video
from lmms_egoplan.demo.kit.scripted import TOLERANCE, Expected, Rescored, ScriptedAnswers, mean
from lmms_egoplan.robovqa.data import (
    BINARY_TYPES,
    ENV_PREFIX,
    FRAMES16,
    QUESTION_TYPES,
    TFRECORD,
    TIANLI,
    fetch_question_answer,
)

EPISODE_FRAMES = 20
FRAMES16_COUNT = 16


def episode_text(goal: str, step: str, done: bool) -> str:
    """An episode's tagged text as the official shards hold it (one question per tag)."""
    binary = "<PRED>A: <PRED:ANSWER><PRED:DISCRETE><PRED:BINARY>{}</PRED:BINARY></PRED:DISCRETE></PRED:ANSWER>\n</PRED>"
    free = "<PRED>A: {}\n</PRED>"
    return "".join((
        f"<task:affordance:discriminative:discrete:True>\n{step} Q: possible right now? " + binary.format("yes"),
        "<task:future_prediction:freeform>\nQ: what is likely to happen next? " + free.format(step),
        "<task:affordance:generative:positive:freeform>\nQ: what action is possible right now? " + free.format(step),
        f"<task:success:discrete:{done}>\n{step} Q: satisfied? " + binary.format("yes" if done else "no"),
        f"<task:planning:freeform>\ncurrent goal is: {goal} Q: immediate next step? " + free.format(step),
        f"<task:immediate_planning_with_context20:freeform>\ncurrent goal is: {goal}. last 20 steps: 1- {step} "
        "Q: immediate next step? " + free.format(step),
        f"<task:remaining5_planning_with_context20:freeform>\ncurrent goal is: {goal}. last 20 steps: 1- {step} "
        "Q: next 5 steps? " + free.format(f"1- {step} 2- done"),
        "<task:past_description:freeform>\nQ: what just happened? " + free.format(step),
        "<task:affordance:discriminative:discrete:False>\nopen the fridge Q: possible right now? "
        + binary.format("no"),
    ))


EPISODES = {"episode_a": episode_text("please put the chips on the counter", "put packet on the table", False),
            "episode_b": episode_text("tidy the desk", "place the pen in the cup", True)}


@dataclass(frozen=True)
class RoboVQAFixture:
    root: Path

    def layout(self, source: str) -> Path:
        return self.root / source

    def env(self, source: str = FRAMES16, **settings) -> dict[str, str]:
        values = {"data_source": source, "root": self.layout(source), **settings}
        return {env_var(ENV_PREFIX, name): str(value) for name, value in values.items()}


def frame_jpeg(index: int) -> bytes:
    """A frame's JPEG bytes, its index readable back (``kit.media.read_index``)."""
    buffer = io.BytesIO()
    index_image(index).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


def frames16_lines(episode: str, text: str, frame_paths: list[str]) -> list[dict]:
    """The 16-frame copy's ``qa.jsonl`` rows of one episode's tagged ``text``, each naming the episode's frames."""
    return [{"id": f"{episode}/{number}", "question_idx": f"{episode} {tag}", "question": question,
             "answer": answer.removeprefix("A:").strip(), "frame_paths": frame_paths}
            for number, (tag, question, answer) in enumerate(fetch_question_answer(text))]


def build_fixture(root: str | Path) -> RoboVQAFixture:
    """Write the three layouts under ``root`` (idempotent: an existing complete one is reused)."""
    import numpy as np
    from datasets import Dataset
    from tfrecord import TFRecordWriter

    root = Path(root)
    fixture, done = RoboVQAFixture(root), root / ".complete"
    if done.is_file():
        return fixture
    shutil.rmtree(root, ignore_errors=True)
    rows, lines = [], []
    (root / TFRECORD).mkdir(parents=True)
    writer = TFRecordWriter(str(root / TFRECORD / "val-00000-of-00001"))
    for episode, text in EPISODES.items():
        write_video(root / TIANLI / "videos" / f"{episode}.mp4", num_frames=EPISODE_FRAMES, fps=10)
        rows.append({"uid": episode, "video": f"{episode}.mp4", "text": text})
        writer.write({}, {"images": ([frame_jpeg(i) for i in range(EPISODE_FRAMES)], "byte"),
                          "texts": ([text.encode()], "byte")})
        shown = np.linspace(0, EPISODE_FRAMES - 1, FRAMES16_COUNT, dtype=int).tolist()
        paths = []
        for index in shown:
            path = root / FRAMES16 / "frames" / episode / f"{index:04d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(frame_jpeg(index))
            paths.append(str(path.relative_to(root / FRAMES16)))
        lines += frames16_lines(episode, text, paths)
    writer.close()
    (root / TIANLI / "data").mkdir(parents=True)
    Dataset.from_list(rows).to_parquet(str(root / TIANLI / "data" / "validation-00000-of-00001.parquet"))
    (root / FRAMES16 / "qa.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    done.touch()
    return fixture


# How the scripted model answers (the default protocol): per question text, in turn, and what the default scorer
# makes of it is computed in ``scripted_answers`` with sacrebleu and an exact comparison, without the suite's scorer.
BINARY_STYLES = ("Yes.", "no", "Now it is done")  # read yes, read no, read as neither (unextracted)
# a reference of episode a, a part of one, a wrong answer (no empty one: lmms-eval stores no empty answer in its
# response cache, so a resumed run would ask it again; the scorers' tests cover empty answers)
FREE_STYLES = ("put packet on the table", "put the packet", "I cannot tell")


def _scripted_rows() -> list[tuple[str, str, str, str]]:
    """(question type, prompt key, reference, answer) per question of the episodes, the styles cycling over the
    distinct question texts (a text two episodes share gets one answer)."""
    from lmms_egoplan.robovqa.data import answer_text, question_type

    answers: dict[str, str] = {}
    rows = []
    for text in EPISODES.values():
        for tag, question, answer in fetch_question_answer(text):
            kind = question_type(tag)
            styles = BINARY_STYLES if kind in BINARY_TYPES else FREE_STYLES
            key = " ".join(question.split())
            answers.setdefault(key, styles[len(answers) % len(styles)])
            rows.append((kind, key, answer_text(answer), answers[key]))
    return rows


def _default_score(kind: str, reference: str, answer: str) -> tuple[float, float]:
    """(score, unextracted) as the default protocol defines them, computed here by sacrebleu and string tests."""
    import sacrebleu

    if kind not in BINARY_TYPES:
        return float(sacrebleu.sentence_bleu(answer, [reference]).score), 0.0
    first = answer.lower().strip(" .")
    read = first if first in ("yes", "no") else None
    return 100.0 * (read == reference), float(read is None)


def scripted_answers(fixture: RoboVQAFixture) -> ScriptedAnswers:
    """``robovqa`` answered by script on the official TFRecord layout under the default protocol; every value the run
    reports follows from the answers and the references (``_default_score``); the logged answers go through each
    preset's scorer too (``preset_rescorings``)."""
    rows = _scripted_rows()

    def scores(of: list[tuple[str, str, str, str]], failed: frozenset[str]) -> dict[str, float]:
        """The default's values over the answered questions of ``of``; the failed ones counted."""
        answered = [row for row in of if row[1] not in failed]
        scored = [_default_score(kind, reference, answer) for kind, _, reference, answer in answered]
        ratio = [len(answer.split()) / max(1, len(reference.split())) for _, _, reference, answer in answered]
        return {"score": mean([s for s, _ in scored]), "micro_score": mean([s for s, _ in scored]),
                "unextracted": sum(u for _, u in scored), "length_ratio": mean(ratio), "predictions": len(answered),
                "skipped_samples": 0, "failed_requests": len(of) - len(answered)}

    def expected(run, failed=frozenset()):
        tasks = {f"robovqa_{kind}": scores([row for row in rows if row[0] == kind], failed) for kind in QUESTION_TYPES}
        group = {**scores(rows, failed), "score": mean([values["score"] for values in tasks.values()])}
        return {"robovqa": group, **tasks}

    return ScriptedAnswers(tasks=("robovqa",), answers={key: answer for _, key, _, answer in rows},
                           expected=expected, env=fixture.env("tfrecord"), rescorings=preset_rescorings)


# The presets' metrics that count answers (totals); every other is a mean over the answers.
COUNTED = ("multinet_invalid",)
# float32 sentence embeddings of a text encoded alone and in a batch differ in their last bits
SIMILARITY_TOLERANCE = 1e-6


def _by_task(per_type: dict[str, list[dict[str, float]]]) -> Expected:
    """Per task the metrics' means (counts' totals) over its answers' values, and over all answers for the group
    (micro, as the group averages every preset's metric)."""
    def aggregate(values: list[dict[str, float]]) -> dict[str, float]:
        return {name: (sum if name in COUNTED else mean)([scores[name] for scores in values]) for name in values[0]}

    pooled = [scores for values in per_type.values() for scores in values]
    return {"robovqa": aggregate(pooled),
            **{f"robovqa_{kind}": aggregate(values) for kind, values in per_type.items() if values}}


def _as_results_file(values: Expected) -> dict:
    """Values per task and group in a results file's form (``scripted.reported_metrics`` reads them back)."""
    def metrics(task: str) -> dict[str, float]:
        return {f"{name},none": value for name, value in values[task].items()}

    return {"groups": {"robovqa": metrics("robovqa")},
            "results": {task: metrics(task) for task in values if task != "robovqa"}}


def preset_rescorings(run: EvalRun, failed: frozenset[str] = frozenset()) -> list[Rescored]:
    """The scripted run's logged answers through each preset's scorer (``lmms_egoplan.robovqa.task.PROTOCOLS``),
    which one run under the default protocol cannot apply, and the values the script implies: the transcriptions of
    the lineages' code (``lineage_scores``) over the script's answers and the episodes' references."""
    from lmms_egoplan.core.embeddings import SentenceEncoder
    from lmms_egoplan.robovqa.scoring import MULTINET_SCRIPT
    from lmms_egoplan.robovqa.task import PROTOCOLS

    encoder, sentence_model = SentenceEncoder(), minilm()
    # a failed request's logged sample holds its count alone, no predictions record
    logged = {kind: [(sample["filtered_resps"], sample["predictions"]) for sample in run.samples(f"robovqa_{kind}")
                     if "predictions" in sample] for kind in QUESTION_TYPES}
    scripted = [row for row in _scripted_rows() if row[1] not in failed]
    rescorings = []
    with warnings.catch_warnings():  # NLTK's warning of n-gram orders without overlap: the lineages score them so
        warnings.simplefilter("ignore", UserWarning)
        for protocol in (name for name in PROTOCOLS if name != "default"):
            scored = PROTOCOLS[protocol].scored
            reported = _by_task({kind: [scored(answer, {"answer": record["reference"], "tag": record["tag"],
                                                        "question_type": record["question_type"],
                                                        "multinet_scorer": MULTINET_SCRIPT}, lambda: encoder)
                                        for answer, record in pairs] for kind, pairs in logged.items()})
            expected = _by_task({kind: [lineage_scores(protocol, answer, reference, kind, sentence_model)
                                        for of, _, reference, answer in scripted if of == kind]
                                 for kind in QUESTION_TYPES})
            rescorings.append(Rescored(protocol, _as_results_file(reported), expected,
                                       SIMILARITY_TOLERANCE if protocol == "multinet" else TOLERANCE))
    return rescorings


# =============================================================================================
# Each lineage's scorer, transcribed from its code (independent of lmms_egoplan.robovqa.scoring)
# =============================================================================================


def mimo_transcribed(prediction_raw, gold_answer):
    """XiaomiMiMo/MiMo-Embodied @0bee4b6: lmms_eval/tasks/robovqa/robovqa.yaml's filter (AfterThinkFilter,
    lmms_eval/tasks/_task_utils/eval_utils.py extract_after_think_content), then lmms_eval/tasks/robovqa/utils.py
    robovqa_process_results and get_bleu_score, transcribed."""
    from nltk.translate.bleu_score import sentence_bleu

    last_think_end = prediction_raw.rfind("</think>")
    if last_think_end != -1:
        prediction_raw = prediction_raw[last_think_end + len("</think>"):].strip()
    prediction = prediction_raw.strip()
    prediction = re.sub(r"<think>.*?</think>", "", prediction, flags=re.DOTALL | re.MULTILINE)
    prediction = re.sub(r"<[^>]+>", "", prediction)
    prediction = re.sub(r"\n+", " ", prediction)
    prediction = prediction.strip()
    pred = prediction.replace("\n", "").lower()
    gt = gold_answer.replace("\n", "").lower()
    if gt in ["yes", "no"]:
        pred = re.sub(r"\b\w*yes\w*\b", "yes", pred)
        pred = re.sub(r"\b\w*no\w*\b", "no", pred)
    candidate, reference = pred.split(" "), [gt.split(" ")]
    ref_len = len(reference[0])
    if ref_len <= 1:
        weights_list = [(1.00, 0.00, 0.00, 0.00)] * 4
    elif ref_len == 2:
        weights_list = [(1.00, 0.00, 0.00, 0.00)] + [(0.50, 0.50, 0.00, 0.00)] * 3
    elif ref_len == 3:
        weights_list = [(1.00, 0.00, 0.00, 0.00), (0.50, 0.50, 0.00, 0.00)] + [(0.33, 0.33, 0.33, 0.00)] * 2
    else:
        weights_list = [(1.00, 0.00, 0.00, 0.00), (0.50, 0.50, 0.00, 0.00), (0.33, 0.33, 0.33, 0.00),
                        (0.25, 0.25, 0.25, 0.25)]
    bleu_scores = [sentence_bleu(reference, candidate, weights=w) for w in weights_list]
    return sum(bleu_scores) / 4, *bleu_scores


def physbrain_transcribed(raw_output_text, gt_answer):
    """DeepCybo-PhysAI/PhysBrainEvalKit @c95d9ee benchmark/robovqa.py process_raw_output (not thinking),
    transcribed."""
    import sacrebleu

    predicted_text = str(raw_output_text).strip().lower()
    if predicted_text.endswith("."):
        predicted_text = predicted_text[:-1]
    predicted_text = predicted_text.replace("<", "").replace(">", "")
    try:
        return sacrebleu.sentence_bleu(predicted_text, [gt_answer], tokenize="intl").score
    except Exception:
        return 0.0


def robomamba_transcribed(answer, gold_value):
    """lmzpai/roboMamba @d383bbb src/test.py judge_robovqa, transcribed (the answer as written to its result file:
    newlines replaced by spaces; jieba's cut joined back, the identity); ``gold_value``: its
    ``conversations[1]['value']``."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    result = re.sub(r"<\|.*?\|>", " ", answer.strip().replace("\n", " "))
    result = re.sub(r"<.*?>", " ", result)
    result = result.replace("A:", " ").replace(":", " ").replace("(", " ").replace(")", " ")
    ans = result.strip()
    gt = gold_value.split(":")[1].strip()
    return [max(sentence_bleu([ans[:len(gt) - lenth].split()], gt.split(),
                              smoothing_function=SmoothingFunction().method4, weights=w) for lenth in range(-5, 5))
            for w in ((1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1))]


def multinet_normalize_transcribed(text):
    """ManifoldRG/MultiNet RoboVQAModule ``_normalize_text``, transcribed."""
    if not isinstance(text, str):
        return ""
    text = re.sub(r"[^\w\s]", "", text.lower())
    return " ".join(text.split())


def multinet_script_normalize_transcribed(text):
    """ManifoldRG/MultiNet @d6fe80e src/v1/modules/Magma/scripts/robovqa_single_inference.py ``_normalize_text``,
    transcribed."""
    if not isinstance(text, str):
        return ""
    text = re.sub(r"[^\w\s]", "", text.lower())
    text = " ".join(text.split())
    numbers = "zero one two three four five six seven eight nine".split()
    int_numbers = [str(i) for i in range(10)]
    if text in int_numbers:
        text = numbers[int(text)]
    return text


def sentence_similarity(first: str, second: str, model) -> float:
    """The cosine of ``model``'s (all-MiniLM-L6-v2's, loaded by sentence-transformers) embeddings of the two texts,
    each encoded alone, by sentence-transformers' own ``util.cos_sim`` (MultiNet's similarity)."""
    from sentence_transformers import util

    return float(util.cos_sim(model.encode(first), model.encode(second))[0][0])


def minilm():
    """all-MiniLM-L6-v2, loaded by sentence-transformers (as MultiNet loads it; not through the suite's encoder)."""
    from sentence_transformers import SentenceTransformer

    from lmms_egoplan.core.embeddings import default_sentence_model

    return SentenceTransformer(default_sentence_model())


def lineage_scores(protocol: str, answer: str, reference: str, kind: str, sentence_model=None,
                   multinet_scorer: str = "script") -> dict[str, float]:
    """A preset's metrics of one answer, by the transcriptions of its lineage's code (``sentence_model``: MultiNet's
    all-MiniLM-L6-v2, ``minilm()``; ``multinet_scorer``: its open-weight script's or its API module's)."""
    if protocol == "mimo":
        return dict(zip(("mimo_score", "mimo_bleu1", "mimo_bleu2", "mimo_bleu3", "mimo_bleu4"),
                        mimo_transcribed(answer, reference)))
    if protocol == "physbrain":  # transform_training_qa's reference: a final "." dropped, yes / no lower-cased
        gold = reference.strip().rstrip(".").rstrip()
        return {"physbrain_bleu": physbrain_transcribed(answer, gold.lower() if kind in BINARY_TYPES else gold)}
    if protocol == "robomamba":  # its gold value taken as the notebook's answer, "A: " and the reference
        return {f"robomamba_bleu{n}": value
                for n, value in enumerate(robomamba_transcribed(answer, f"A: {reference}"), 1)}
    if not answer.strip():  # an invalid answer: 0 and 0, counted
        return {"multinet_exact_match": 0.0, "multinet_similarity": 0.0, "multinet_invalid": 1.0}
    if multinet_scorer == "module":
        exact = multinet_normalize_transcribed(answer) == multinet_normalize_transcribed(reference)
        similarity = sentence_similarity(answer, reference, sentence_model)
    else:  # the script: the stripped response parsed (_validate_outputs_and_parse), then against the label as read
        predicted = multinet_script_normalize_transcribed(answer.strip())
        exact, similarity = predicted == reference, sentence_similarity(predicted, reference, sentence_model)
    return {"multinet_exact_match": float(exact), "multinet_similarity": similarity, "multinet_invalid": 0.0}


def smoke_suite(workdir: Path, resources):
    """RoboVQA's share of ``lmms-egoplan smoke``: the group on the 16-frame layout's synthetic data, and answered
    by script on the official TFRecord layout."""
    from lmms_egoplan.demo.kit.suite import SmokeSuite

    fixture = build_fixture(workdir)
    return SmokeSuite(env=fixture.env(FRAMES16), cli_args=("--gen_kwargs", "max_new_tokens=16"),
                      scripted=scripted_answers(fixture))
