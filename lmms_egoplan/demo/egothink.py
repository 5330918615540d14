"""Synthetic EgoThink data in the release's layouts, and EgoThink's share of the offline demo.

* ``write_release(root)``: ``<root>/<Capability>/<dimension>/annotations.json`` + ``images/``
  for all twelve dimensions (``Activity/``, ``Forecast/`` without a dimension folder, as the
  official release), records in the release's format.
* ``write_hub_copy(root)``: a local Hugging Face dataset folder with the Hub dataset's shape
  (one config per dimension, split ``test``, columns image / question / answer), loadable with
  ``datasets.load_dataset(root, config)`` like ``EgoThink/EgoThink``.
* ``smoke_suite``: the release layout plus a loopback judge, for ``lmms-egoplan smoke``.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path
from typing import Mapping

from lmms_egoplan.demo.kit.judge_server import hash_rating, loopback_judge_settings
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import write_image
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.egothink.data import CAPABILITIES, DIMENSIONS, Dimension

QUESTIONS = ("What am I holding in my left hand?", "Is there a cup on my right?", "What will I do next?",
             "How many plates are in front of me?", "How do I get to the door?")
ANSWERS = ("A knife.", "Yes.", "Open the fridge.", "Two.", "Turn left and walk forward to the end.")


def synthetic_records(dimension: Dimension, count: int) -> list[dict]:
    """``count`` records of one dimension in the release's annotation format."""
    return [{"source_dataset": "ego4d", "image_path": [f"{i + 1}.jpg"],
             "question": f"[{dimension.name} {i}] {QUESTIONS[i % len(QUESTIONS)]}",
             "answer": ANSWERS[(i + len(dimension.name)) % len(ANSWERS)]} for i in range(count)]


def write_release(root: str | Path, per_dimension: int = 2, counts: Mapping[str, int] | None = None) -> Path:
    """The release's data folder with ``per_dimension`` questions (and images) per dimension, or the number ``counts``
    gives a dimension it names (the release's activity and forecasting have twice the others' questions)."""
    root = Path(root)
    for number, dimension in enumerate(DIMENSIONS.values()):
        folder = root / dimension.release_dirs[0]
        records = synthetic_records(dimension, (counts or {}).get(dimension.name, per_dimension))
        for index, record in enumerate(records):
            write_image(folder / "images" / record["image_path"][0], seed=100 * number + index)
        (folder / "annotations.json").write_text(json.dumps(records, indent=2))
    return root


def write_hub_copy(root: str | Path, per_dimension: int = 2) -> Path:
    """A local dataset folder shaped like the Hub dataset (image bytes embedded in parquet)."""
    import tempfile

    import datasets

    root = Path(root)
    features = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"),
                                  "answer": datasets.Value("string")})
    configs = []
    with tempfile.TemporaryDirectory() as scratch:
        for number, dimension in enumerate(DIMENSIONS.values()):
            records = synthetic_records(dimension, per_dimension)
            images = [{"bytes": write_image(Path(scratch) / f"{number}-{i}.png", seed=100 * number + i).read_bytes(),
                       "path": f"{i}.png"} for i in range(len(records))]
            table = datasets.Dataset.from_dict(
                {"image": images, "question": [r["question"] for r in records],
                 "answer": [r["answer"] for r in records]}, features=features)
            table.to_parquet(str(root / dimension.hub_config / "test-00000-of-00001.parquet"))
            configs.append(f"- config_name: {dimension.hub_config}\n  data_files:\n"
                           f"  - split: test\n    path: {dimension.hub_config}/*.parquet")
    (root / "README.md").write_text("---\nconfigs:\n" + "\n".join(configs) + "\n---\n")
    return root


# The scripted model's answers, in turn, and the rating the scripted judge gives each (0 / 0.5 / 1).
SCRIPTED_RATINGS = {"reference": "1", "partly right": "0.5", "wrong": "0"}
WRONG_ANSWER = "I cannot see that in the image."
# Where the judge prompt (EgoThink's Table 7 prompt) holds the reference and the answer.
_JUDGED_PAIR = re.compile(r"\[The Start of Reference Answer\]\n(.*?)\n\[The End of Reference Answer\].*"
                          r"\[The Start of Assistant's Answer\]\n(.*?)\n\[The End of Assistant's Answer\]", re.DOTALL)


def scripted_answer(reference: str, kind: str) -> str:
    return {"reference": reference, "partly right": f"Perhaps: {reference.lower()}", "wrong": WRONG_ANSWER}[kind]


def scripted_answers(data_root: Path, per_dimension: int) -> ScriptedAnswers:
    """Every question answered with its reference, partly or wrongly, in turn; the judge rates them
    1, 0.5 and 0. Each dimension's score is its mean rating x 100, each capability's the mean of its
    dimensions', the average the mean of the twelve."""
    kinds = list(SCRIPTED_RATINGS)
    answers, ratings, questions, count = {}, {}, {}, 0  # questions: each dimension's (question, rating)
    for dimension in DIMENSIONS.values():
        for record in synthetic_records(dimension, per_dimension):
            kind = kinds[count % len(kinds)]
            count += 1
            answer = scripted_answer(record["answer"], kind)
            answers[record["question"]] = answer
            ratings[(record["answer"], answer)] = SCRIPTED_RATINGS[kind]
            questions.setdefault(dimension, []).append((record["question"], float(SCRIPTED_RATINGS[kind])))

    def rating(prompt: str) -> str | None:
        pair = _JUDGED_PAIR.search(prompt)
        return ratings.get((pair.group(1), pair.group(2))) if pair else None

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        # Each dimension: the mean rating x 100 of its answered questions, how many, how many failed.
        scores = {d: ([r for q, r in asked if q not in failed], sum(q in failed for q, _ in asked))
                  for d, asked in questions.items()}
        values = {f"ego_think_{d.name}": {"score": 100 * mean(rated), "micro_score": 100 * mean(rated),
                                          "judged": len(rated), "failed": 0,
                                          "failed_requests": lost} for d, (rated, lost) in scores.items()}
        groups = {f"ego_think_capability_{capability}": [d for d in scores if d.name in names]
                  for capability, names in CAPABILITIES.items()}
        groups["ego_think"] = list(scores)
        for group, members in groups.items():
            # micro_score: each dimension weighted by its questions, as lmms-eval weighs a group's members by size
            values[group] = {"score": mean([100 * mean(scores[d][0]) for d in members]),
                             "micro_score": sum(100 * mean(scores[d][0]) * len(questions[d]) for d in members)
                             / sum(len(questions[d]) for d in members),
                             "judged": sum(len(scores[d][0]) for d in members), "failed": 0,
                             "failed_requests": sum(scores[d][1] for d in members)}
        return values

    return ScriptedAnswers(tasks=("ego_think",), answers=answers, expected=expected, ratings=rating,
                           judge_prefix="EGOTHINK",
                           env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data_root)})


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """All EgoThink tasks on synthetic release data, judged by a loopback judge; answered by script too."""
    per_dimension = 2
    data_root = write_release(Path(workdir) / "data", per_dimension)
    return SmokeSuite(
        env={"EGOTHINK_SOURCE": "local", "EGOTHINK_DATA_ROOT": str(data_root),
             **loopback_judge_settings("EGOTHINK", hash_rating, workdir, resources)},
        scripted=scripted_answers(data_root, per_dimension),
    )
