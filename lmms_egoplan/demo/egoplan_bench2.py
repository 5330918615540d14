"""Synthetic EgoPlan-Bench2 data in both of its layouts, for tests and the offline demo.

* the official release: ``EgoPlan-Bench2.json`` and Ego4D videos ``<ego4d>/<video uid>.mp4`` at 30 fps;
* the TencentARC/SEED-Bench-R1 package: ``annotations/validation_L3.jsonl``, a progress clip per
  question (its source frames ``task_start_frame..current_observation_frame``) and the observation
  image (``demo.kit.seed_bench_r1``); the question whose task has nothing done yet has no clip.

The same questions in both, over four domains and five scenarios, the right letter cycling A-D. Every
frame's pixels encode its source frame number (``demo.kit.media.read_index``), so a test can check
which frames a model was shown.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.settings import env_var
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import write_video
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.demo.kit.seed_bench_r1 import with_package_media, write_level
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.egoplan_bench2.data import ENV_PREFIX, SEED_BENCH_R1_LEVEL, video_uid

EGO4D_FPS = 30
EGO4D_VIDEOS = {"5a7c0e21-6f0b-4d35-9b1e-0c2f6a3e9d41": 330, "c94e8b12-2d7a-4f60-8e35-7b1d0a5c6f28": 330,
                "e03f5d77-91c4-4b8a-a6d2-3f8e1c7b2a90": 330}

_ACTIONS = ["open oven", "place oven tray", "close oven", "operate oven", "detach stopwatch", "set stopwatch",
            "attach stopwatch", "cut dough", "wash brush", "tighten bolt", "lift hood", "water plant",
            "dig soil", "shuffle cards", "deal cards", "sweep floor", "fold towel", "rinse cup"]
# (video, n, domain, scenario, task goal, task start, observation, completed actions)
_QUESTIONS = [
    (0, 1, "Hobbies", "baking", "bake pastry in the oven and set a stopwatch", 0, 120, 4),
    (0, 2, "Hobbies", "baking", "cut the dough into pieces", 130, 251, 3),
    (0, 3, "Daily life", "cleaning", "clean the kitchen floor", 260, 329, 2),
    (1, 1, "Work", "car repair", "replace the car battery", 10, 200, 6),
    (1, 2, "Work", "car repair", "check the engine oil", 205, 205, 0),
    (1, 3, "Daily life", "cooking", "rinse the cups after dinner", 210, 300, 3),
    (2, 1, "Recreation", "playing cards", "deal a round of cards", 5, 95, 2),
    (2, 2, "Hobbies", "gardening", "plant flowers in the garden", 100, 280, 5),
]
QUESTION_LINE = ("Considering the progress shown in the video and my current observation in the last frame, "
                 "what action should I take next in order to {}?")


@dataclass(frozen=True)
class EgoPlanBench2Fixture:
    root: Path
    annotation_dir: Path
    ego4d_root: Path
    package_root: Path

    @property
    def annotation_file(self) -> Path:
        return self.annotation_dir / "EgoPlan-Bench2.json"

    def records(self) -> list[dict]:
        return json.loads(self.annotation_file.read_text())

    def package_records(self) -> list[dict]:
        path = self.package_root / "annotations" / f"validation_L{SEED_BENCH_R1_LEVEL}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def env(self, **settings) -> dict[str, str]:
        """``EGOPLAN2_*`` variables pointing the tasks at the official layout (``data_source=seed_bench_r1``:
        the package), plus any extra settings."""
        values = {"annotation_dir": self.annotation_dir, "ego4d_videos_root": self.ego4d_root,
                  "seed_bench_r1_root": self.package_root, **settings}
        return {env_var(ENV_PREFIX, name): str(value) for name, value in values.items()}


def build_fixture(root: str | Path) -> EgoPlanBench2Fixture:
    """Write both layouts under ``root`` (idempotent: an existing complete one is reused)."""
    root = Path(root)
    fixture = EgoPlanBench2Fixture(root=root, annotation_dir=root / "annotations",
                                   ego4d_root=root / "Ego4D" / "v1_288p", package_root=root / "SEED-Bench-R1")
    done = root / ".complete"
    if done.is_file():
        return fixture
    shutil.rmtree(root, ignore_errors=True)
    for uid, count in EGO4D_VIDEOS.items():
        write_video(fixture.ego4d_root / f"{uid}.mp4", num_frames=count, fps=EGO4D_FPS)
    records = [release_record(position, *question) for position, question in enumerate(_QUESTIONS)]
    fixture.annotation_dir.mkdir(parents=True, exist_ok=True)
    fixture.annotation_file.write_text(json.dumps(records, indent=1))
    write_level(fixture.package_root, SEED_BENCH_R1_LEVEL, [package_record(fixture.package_root, r) for r in records])
    done.touch()
    return fixture


def release_record(position: int, video: int, number: int, domain: str, scenario: str, goal: str, start: int,
                   observation: int, completed: int) -> dict:
    """A record of ``EgoPlan-Bench2.json``: ``completed`` actions between the task's start and the
    observation, the right candidate at letter ``position % 4``."""
    uid = list(EGO4D_VIDEOS)[video]
    step = (observation - start) // max(completed, 1)
    actions = [{"narration_text": _ACTIONS[(position + i) % len(_ACTIONS)], "start_frame": start + i * step,
                "stop_frame": start + i * step + step // 2} for i in range(completed)]
    answer = _ACTIONS[(position * 3 + 7) % len(_ACTIONS)]
    others = [action for action in _ACTIONS if action != answer][position * 2: position * 2 + 3]
    golden = position % 4
    choices = others[:golden] + [answer] + others[golden:]
    return {"sample_id": f"{uid}_{number}", "domain": domain, "scenario": scenario, "task_goal": goal,
            **{f"choice_{letter}": choice for letter, choice in zip("abcd", choices)},
            "golden_choice_idx": "ABCD"[golden], "answer": answer, "task_start_frame": start,
            "current_observation_frame": observation, "task_progress_metadata": actions}


def package_record(package_root: Path, record: dict) -> dict:
    """The package's Level-3 record of a release record: its fields less the observation's frame number
    (the package's clip and image replace it; the one public listing of the package's fields,
    LiuJunhua02/TwiFF's README, has none), the template's question, the level, and its media (no clip
    when nothing is done yet)."""
    first = record["task_start_frame"] if record["task_progress_metadata"] else None
    fields = {key: value for key, value in record.items() if key != "current_observation_frame"}
    return with_package_media(package_root, {**fields, "video_id": video_uid(record["sample_id"]),
                                             "question": QUESTION_LINE.format(record["task_goal"]), "task_level": "L3"},
                              video_source="Ego4D", first=first, observation=record["current_observation_frame"])


# How the scripted model answers the questions, in turn, and what each parser reads of it: the official
# parser takes the first capital A-D anywhere (after removing its answer prefixes), the robust one
# what a person reads.
SCRIPTED_STYLES = ("letter", "reasoning, then Answer:", "answer tag", "candidate text", "wrong letter", "unreadable")


def scripted_answer(record: dict, style: str) -> tuple[str, str | None, str | None]:
    """(answer, the letter the official parser reads, the letter the robust parser reads)."""
    gold = record["golden_choice_idx"]
    wrong = "ABCD"[("ABCD".index(gold) + 1) % 4]
    return {
        "letter": (gold, gold, gold),
        # "Answer:" is removed, then the first capital A-D is the B of "Based".
        "reasoning, then Answer:": (f"Based on the video, the task is half done.\n\nAnswer: {gold}", "B", gold),
        # The first capital A-D is the one the reasoning names; the tag holds the answer.
        "answer tag": (f"<think>Option {wrong} looks plausible at first.</think><answer>{gold}</answer>", wrong, gold),
        # The candidate's text holds no capital A-D.
        "candidate text": (f"i would {record['answer']} next.", None, gold),
        "wrong letter": (f"The answer is {wrong}", wrong, wrong),
        "unreadable": ("i cannot tell from these frames.", None, None),
    }[style]


def scripted_answers(fixture: EgoPlanBench2Fixture) -> ScriptedAnswers:
    """``egoplan_bench2`` answered in the six styles; each value the run reports follows from what each
    parser reads of each style (``scripted_answer``), computed here without the parsers."""
    every_record = fixture.records()
    read = {record["sample_id"]: scripted_answer(record, SCRIPTED_STYLES[i % len(SCRIPTED_STYLES)])
            for i, record in enumerate(every_record)}
    # The options block names a question: the prompt holds it, the answer is keyed by it.
    keys = {record["sample_id"]: "\n".join(f"{letter}. {record[f'choice_{letter.lower()}']}" for letter in "ABCD")
            for record in every_record}
    answers = {keys[record["sample_id"]]: read[record["sample_id"]][0] for record in every_record}

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        records = [r for r in every_record if keys[r["sample_id"]] not in failed]  # the answered ones
        letters = [read[r["sample_id"]] for r in records]
        right = {parser: {r["sample_id"]: float(read[r["sample_id"]][column] == r["golden_choice_idx"])
                          for r in records}
                 for parser, column in (("official", 1), ("robust", 2))}
        # The default parser, the official one, decides accuracy, unparseable and the breakdowns.
        metrics = {"accuracy": mean(list(right["official"].values())), "predictions": len(records),
                   "skipped_samples": 0, "unparseable": sum(read_letters[1] is None for read_letters in letters),
                   "failed_requests": len(every_record) - len(records)}
        for parser, column in (("official", 1), ("robust", 2)):
            metrics[f"accuracy_{parser}"] = mean(list(right[parser].values()))
            metrics[f"unparseable_{parser}"] = sum(read_letters[column] is None for read_letters in letters)
        for field in ("domain", "scenario"):
            for value in {r[field] for r in records}:
                members = [r["sample_id"] for r in records if r[field] == value]
                label = value.lower().replace(" ", "_")
                metrics[f"accuracy_{field}_{label}"] = mean([right["official"][i] for i in members])
                metrics[f"n_{field}_{label}"] = len(members)
        return {"egoplan_bench2": metrics}

    return ScriptedAnswers(tasks=("egoplan_bench2",), answers=answers, expected=expected, env=fixture.env())


def smoke_suite(workdir: Path, resources: contextlib.ExitStack) -> SmokeSuite:
    """EgoPlan-Bench2's share of ``lmms-egoplan smoke``: both tasks on the official layout's synthetic
    data, and the generative one answered by script."""
    fixture = build_fixture(workdir)
    return SmokeSuite(env=fixture.env(), cli_args=("--gen_kwargs", "max_new_tokens=16"),
                      scripted=scripted_answers(fixture))
