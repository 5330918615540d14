"""Synthetic EgoPlan-Bench data in the official layouts, for tests and the offline demo.

* EPIC-KITCHENS-100 RGB frame folders ``<epic>/<participant>/rgb_frames/<video_id>/frame_%010d.jpg``
  (frame numbers from 1, as EPIC's), Ego4D videos ``<ego4d>/<video_id>.mp4`` at 30 fps (frame
  numbers from 0), pre-cut clips ``<clips>/<sample_id>.mp4`` spanning each sample's task progress;
* ``EgoPlan_validation.json`` (labelled) and ``EgoPlan_test.json`` (no labels) in the release format;
* the validation questions as Levels 1 (EPIC-KITCHENS) and 2 (Ego4D) of the TencentARC/SEED-Bench-R1
  package: per question a progress clip of its source frames from the task's start to the observation
  (none when nothing is done yet) and the observation image, the records without frame numbers
  (``demo.kit.seed_bench_r1``).

Every frame's pixels encode its source frame number (``demo.kit.media.read_index``), so a test can
check which frames a model was shown. Progress lengths cover every default progress bin.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.settings import env_var
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import write_frame_folder, write_video
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.demo.kit.seed_bench_r1 import with_package_media, write_level
from lmms_egoplan.demo.kit.suite import SmokeSuite
from lmms_egoplan.egoplan.data import ENV_PREFIX, SEED_BENCH_R1_LEVELS, epic_frame_folder, task_start_frame

EPIC_VIDEOS = {"P01_13": 400, "P02_03": 400}  # video id -> number of frames (numbered 1..N)
EGO4D_VIDEOS = {"0a1b2c3d-ego4d-video-one": 330, "4e5f6a7b-ego4d-video-two": 330}  # frames 0..N-1
EGO4D_FPS = 30

_ACTIONS = ["take cereal bag", "open cupboard", "put bowl on counter", "pour milk into bowl", "close fridge",
            "wash knife", "cut onion", "turn on tap", "dry hands", "pick up spoon", "stir soup", "open drawer",
            "put lid on pan", "take plate", "rinse cup", "throw peel in bin", "wipe counter"]
_GOALS = ["store cereal", "make a bowl of cereal", "prepare soup", "clean the kitchen counter", "wash the dishes",
          "chop vegetables", "set the table", "cook pasta"]
_QUESTION = ("Considering the progress shown in the video and my current observation in the last frame, "
             "what action should I take next in order to {goal}?")

# (sample_id, video_id, number of completed actions): lengths 0..16 span the bins 0-4 ... 15+.
VALIDATION_SAMPLES = [(101, "P01_13", 0), (102, "P01_13", 3), (103, "P02_03", 6), (104, "P02_03", 11),
                      (105, "0a1b2c3d-ego4d-video-one", 1), (106, "0a1b2c3d-ego4d-video-one", 5),
                      (107, "4e5f6a7b-ego4d-video-two", 16), (108, "4e5f6a7b-ego4d-video-two", 8)]
TEST_SAMPLES = [(201, "P01_13", 4), (202, "0a1b2c3d-ego4d-video-one", 2), (203, "P02_03", 0)]


@dataclass(frozen=True)
class EgoPlanFixture:
    root: Path
    annotation_dir: Path
    epic_root: Path
    ego4d_root: Path
    clips_dir: Path
    package_root: Path

    @property
    def validation_file(self) -> Path:
        return self.annotation_dir / "EgoPlan_validation.json"

    @property
    def test_file(self) -> Path:
        return self.annotation_dir / "EgoPlan_test.json"

    def records(self, split: str = "validation") -> list[dict]:
        path = self.validation_file if split == "validation" else self.test_file
        return json.loads(path.read_text())

    def env(self, **settings) -> dict[str, str]:
        """``EGOPLAN_*`` variables pointing the tasks at this data, plus any extra settings."""
        values = {"annotation_dir": self.annotation_dir, "epic_frames_root": self.epic_root,
                  "ego4d_videos_root": self.ego4d_root, "clips_dir": self.clips_dir,
                  "seed_bench_r1_root": self.package_root, **settings}
        return {env_var(ENV_PREFIX, name): str(value) for name, value in values.items()}


def build_fixture(root: str | Path) -> EgoPlanFixture:
    """Write the synthetic benchmark under ``root`` (idempotent: an existing complete one is reused)."""
    root = Path(root)
    fixture = EgoPlanFixture(root=root, annotation_dir=root / "annotations", epic_root=root / "EPIC-KITCHENS",
                             ego4d_root=root / "Ego4D" / "v1_288p", clips_dir=root / "clips",
                             package_root=root / "SEED-Bench-R1")
    done = root / ".complete"
    if done.is_file():
        return fixture
    shutil.rmtree(root, ignore_errors=True)
    for video_id, count in EPIC_VIDEOS.items():
        write_frame_folder(epic_frame_folder(fixture.epic_root, video_id), range(1, count + 1))
    for video_id, count in EGO4D_VIDEOS.items():
        write_video(fixture.ego4d_root / f"{video_id}.mp4", num_frames=count, fps=EGO4D_FPS)
    validation = [release_record(*sample, labelled=True) for sample in VALIDATION_SAMPLES]
    test = [release_record(*sample, labelled=False) for sample in TEST_SAMPLES]
    for record in validation + test:
        start = task_start_frame(record)
        write_video(fixture.clips_dir / f"{record['sample_id']}.mp4", first_index=start, fps=EGO4D_FPS,
                    num_frames=record["current_observation_frame"] - start + 1)
    fixture.annotation_dir.mkdir(parents=True, exist_ok=True)
    fixture.validation_file.write_text(json.dumps(validation, indent=1))
    fixture.test_file.write_text(json.dumps(test, indent=1))
    for level, source in zip(SEED_BENCH_R1_LEVELS, ("EpicKitchens", "Ego4D")):
        write_level(fixture.package_root, level, [package_record(fixture.package_root, record)
                                                  for record in validation if record["video_source"] == source])
    done.touch()
    return fixture


def release_record(sample_id: int, video_id: str, completed: int, *, labelled: bool) -> dict:
    """One record: ``completed`` actions of 12 frames with gaps, then the observation 6 frames on."""
    first_frame = 1 if video_id in EPIC_VIDEOS else 0
    start = first_frame + 7 * (sample_id % 5)
    actions = []
    for index in range(completed):
        begin = start + 17 * index
        actions.append({"narration_text": _ACTIONS[(sample_id + index) % len(_ACTIONS)],
                        "start_frame": begin, "stop_frame": begin + 12})
    observation = (actions[-1]["stop_frame"] if actions else start) + 6
    answer = _ACTIONS[(sample_id + completed) % len(_ACTIONS)]
    negatives = [a for a in _ACTIONS if a != answer][sample_id % 5: sample_id % 5 + 3]
    golden = sample_id % 4
    choices = negatives[:golden] + [answer] + negatives[golden:]
    goal = _GOALS[sample_id % len(_GOALS)]
    record = {
        "sample_id": sample_id,
        "video_source": "EpicKitchens" if video_id in EPIC_VIDEOS else "Ego4D",
        "video_id": video_id,
        "task_goal": goal,
        "question": _QUESTION.format(goal=goal),
        **{f"choice_{letter}": choice for letter, choice in zip("abcd", choices)},
    }
    if labelled:
        record.update(golden_choice_idx="ABCD"[golden], answer=answer)
    record.update(current_observation_frame=observation, task_progress_metadata=actions)
    return record


def package_record(package_root: Path, record: dict) -> dict:
    """The package's record of a validation record, its media written: without the observation's frame
    number, which the package's clip and image replace."""
    first = task_start_frame(record) if record["task_progress_metadata"] else None
    fields = {key: value for key, value in record.items() if key != "current_observation_frame"}
    return with_package_media(package_root, fields, video_source=record["video_source"], first=first,
                              observation=record["current_observation_frame"])


# How the scripted model answers the validation samples, in turn: right by a stated letter, a bare
# letter or the candidate's text (answer extraction's three ways), a wrong letter, nothing readable.
SCRIPTED_STYLES = ("stated letter", "bare letter", "candidate text", "wrong letter", "unreadable")
_SCRIPTED_RIGHT = {"stated letter", "bare letter", "candidate text"}
# The tasks' default progress bins (egoplan_val.yaml): actions done so far.
_PROGRESS_BINS = {"0_4": range(0, 5), "5_9": range(5, 10), "10_14": range(10, 15), "15_plus": range(15, 10**6)}


def scripted_answer(record: dict, style: str) -> str:
    letters, golden = "ABCD", "ABCD".index(record["golden_choice_idx"])
    return {"stated letter": f"The answer is ({letters[golden]}).", "bare letter": letters[golden],
            "candidate text": f"I would {record['answer']} next.",
            "wrong letter": f"The answer is {letters[(golden + 1) % 4]}.",
            "unreadable": "I cannot tell from these frames."}[style]


def scripted_answers(fixture: EgoPlanFixture) -> ScriptedAnswers:
    """``egoplan_val_gen`` answered in the five styles; its accuracy per source, progress bin and
    similarity level follows from which styles are right (a sample's similarity level is the run's)."""
    every_record = fixture.records("validation")
    styles = {record["sample_id"]: SCRIPTED_STYLES[i % len(SCRIPTED_STYLES)] for i, record in enumerate(every_record)}
    # The options block names a sample: the prompt holds it, the answer is keyed by it.
    keys = {record["sample_id"]: "\n".join(f"{letter}. {record[f'choice_{letter.lower()}']}" for letter in "ABCD")
            for record in every_record}
    answers = {keys[record["sample_id"]]: scripted_answer(record, styles[record["sample_id"]])
               for record in every_record}

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        records = [r for r in every_record if keys[r["sample_id"]] not in failed]  # the answered ones
        right = {r["sample_id"]: float(styles[r["sample_id"]] in _SCRIPTED_RIGHT) for r in records}
        levels = {s["predictions"]["sample_id"]: s["predictions"]["similarity_level"]
                  for s in run.samples("egoplan_val_gen") if "predictions" in s}
        groups = {"epic_kitchens": [r["sample_id"] for r in records if r["video_source"] == "EpicKitchens"],
                  "ego4d": [r["sample_id"] for r in records if r["video_source"] == "Ego4D"]}
        groups.update({f"progress_{name}": [r["sample_id"] for r in records if len(r["task_progress_metadata"]) in span]
                       for name, span in _PROGRESS_BINS.items()})
        groups.update({f"similarity_{level}": [i for i, found in levels.items() if found == level]
                       for level in sorted(set(levels.values()))})
        metrics = {"accuracy": mean(list(right.values())), "predictions": len(records), "skipped_samples": 0,
                   "unparseable": sum(styles[i] == "unreadable" for i in right),
                   "failed_requests": len(every_record) - len(records)}
        for name, members in groups.items():
            metrics |= ({f"accuracy_{name}": mean([right[i] for i in members]), f"n_{name}": len(members)}
                        if members else {})
        return {"egoplan_val_gen": metrics}

    return ScriptedAnswers(tasks=("egoplan_val_gen",), answers=answers, expected=expected, env=fixture.env())


def smoke_suite(workdir: Path, resources: contextlib.ExitStack) -> SmokeSuite:
    """EgoPlan's share of ``lmms-egoplan smoke``: all three tasks on the synthetic data, and the
    generative one answered by script."""
    fixture = build_fixture(workdir)
    return SmokeSuite(env=fixture.env(), scripted=scripted_answers(fixture))
