"""Synthetic RoboVQA data in the three layouts users download, the same questions in each, for tests and the
offline demo.

Two episodes, each a video of ``EPISODE_FRAMES`` frames whose pixels encode their index
(``demo.kit.media.read_index``) and a tagged text in the official form (every tag of the release: ten, seven
question types). Layouts: ``frames16/`` (``qa.jsonl`` and ``frames/<episode>/<n>.jpg``, 16 frames spread over the
video), ``tianli/`` (``data/validation-00000-of-00001.parquet`` rows ``uid``, ``video``, ``text``, and
``videos/<episode>.mp4``), ``tfrecord/val-00000-of-00001`` (a SequenceExample per episode written by the
``tfrecord`` package: feature lists ``images``, a JPEG per frame, and ``texts``)."""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.settings import env_var
from lmms_egoplan.demo.kit.media import index_image, write_video
from lmms_egoplan.robovqa.data import ENV_PREFIX, FRAMES16, TFRECORD, TIANLI, fetch_question_answer

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


def _jpeg(index: int) -> bytes:
    buffer = io.BytesIO()
    index_image(index).save(buffer, format="JPEG", quality=95)
    return buffer.getvalue()


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
        writer.write({}, {"images": ([_jpeg(i) for i in range(EPISODE_FRAMES)], "byte"),
                          "texts": ([text.encode()], "byte")})
        shown = np.linspace(0, EPISODE_FRAMES - 1, FRAMES16_COUNT, dtype=int).tolist()
        paths = []
        for index in shown:
            path = root / FRAMES16 / "frames" / episode / f"{index:04d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_jpeg(index))
            paths.append(str(path.relative_to(root / FRAMES16)))
        for number, (tag, question, answer) in enumerate(fetch_question_answer(text)):
            lines.append({"id": f"{episode}/{number}", "question_idx": f"{episode} {tag}", "question": question,
                          "answer": answer.removeprefix("A:").strip(), "frame_paths": paths})
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
    from lmms_egoplan.robovqa.data import BINARY_TYPES, answer_text, question_type

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

    from lmms_egoplan.robovqa.data import BINARY_TYPES

    if kind not in BINARY_TYPES:
        return float(sacrebleu.sentence_bleu(answer, [reference]).score), 0.0
    first = answer.lower().strip(" .")
    read = first if first in ("yes", "no") else None
    return 100.0 * (read == reference), float(read is None)


def scripted_answers(fixture: RoboVQAFixture):
    """``robovqa`` answered by script on the official TFRecord layout under the default protocol; every value the run
    reports follows from the answers and the references (``_default_score``)."""
    from lmms_egoplan.demo.kit.scripted import ScriptedAnswers, mean
    from lmms_egoplan.robovqa.data import QUESTION_TYPES

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
                           expected=expected, env=fixture.env("tfrecord"))


def smoke_suite(workdir: Path, resources):
    """RoboVQA's share of ``lmms-egoplan smoke``: the group on the 16-frame layout's synthetic data, and answered
    by script on the official TFRecord layout."""
    from lmms_egoplan.demo.kit.suite import SmokeSuite

    fixture = build_fixture(workdir)
    return SmokeSuite(env=fixture.env(FRAMES16), cli_args=("--gen_kwargs", "max_new_tokens=16"),
                      scripted=scripted_answers(fixture))
