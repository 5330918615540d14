"""ActPlan-1K's release: the layout of its ``annotation`` folder, the ``action(args)`` steps of
plan text (gold plans and model output are split alike), every instance loaded and checked from it,
and the checks on the task's settings. The protocol is in ``lmms_egoplan.actplan.task``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lmms_egoplan.actplan.classifier_config import CLASSIFIER_WEIGHTS
from lmms_egoplan.catalogue import entry
from lmms_egoplan.core.devices import device_problem
from lmms_egoplan.core.embeddings import sentence_model_problem
from lmms_egoplan.core.errors import DatasetProblems, InputError
from lmms_egoplan.core.files import inside_root, read_text
from lmms_egoplan.core.media import IMAGES_DECODED_AT_LOAD, image_problems
from lmms_egoplan.core.settings import SettingsError, setting_name

ENV_PREFIX = entry("actplan").env_prefix  # settings are overridden by environment variables ACTPLAN_<SETTING>
GOLD_CHOICES = ("first", "best")  # which gold plan a prediction is scored against; the first is the default

# ---------------------------------------------------------------------------------------------
# Release layout
# ---------------------------------------------------------------------------------------------

ANNOTATION_FOLDER = "annotation"
NORMAL, COUNTERFACTUAL = "normal", "counterfactual"
SPLITS = (NORMAL, COUNTERFACTUAL)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_SAMPLE_FOLDER = re.compile(r"sample_(\d+)")
_GOLD_FILE = re.compile(r"plan_gold_(\d+)\.txt")
_PLAN_FILE = re.compile(r"plan_(.+)\.txt")
# ".../<activity>/<problem>/sample_<k>" in instance ids and the release's pair files.
_PROBLEM_IN_PATH = re.compile(r"(?:^|/)(\d+)/sample_\d+/?$")


class ActPlanDataError(InputError):
    """The ActPlan-1K release folder is missing or incomplete."""


def split_of_problem(problem: int) -> str:
    """Problem 0 is the Behavior-100 activity; higher indices are its counterfactual variants."""
    return NORMAL if problem == 0 else COUNTERFACTUAL


def split_of_path(path: str) -> str | None:
    """The split of an instance named by a path ending in ``<problem>/sample_<k>`` (None otherwise)."""
    found = _PROBLEM_IN_PATH.search(path.replace("\\", "/"))
    return split_of_problem(int(found.group(1))) if found else None


def annotation_root(data_root: str | Path) -> Path:
    """The release's ``annotation`` folder: ``data_root/annotation``, or ``data_root`` itself."""
    root = Path(data_root).expanduser()
    if not root.is_dir():
        raise ActPlanDataError(f"ActPlan-1K data folder not found: {root}; set {setting_name(ENV_PREFIX, 'data_root')} "
                               f"(actplan-score: --data_root) to the release folder holding {ANNOTATION_FOLDER}/")
    return root / ANNOTATION_FOLDER if (root / ANNOTATION_FOLDER).is_dir() else root


def _numbered(paths: Iterable[Path], pattern: re.Pattern) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in paths if (m := pattern.fullmatch(p.name))]
    return sorted(found)


def gold_plan_files(sample_folder: Path) -> list[Path]:
    """``plan_gold_<n>.txt`` files in number order (``first`` = the lowest number)."""
    return [path for _, path in _numbered(sample_folder.glob("plan_gold_*.txt"), _GOLD_FILE)]


def candidate_plan_files(sample_folder: Path) -> dict[str, Path]:
    """The VLM plans shipped with an instance, ``plan_<model>.txt``, by model name."""
    plans = {}
    for path in sorted(sample_folder.glob("plan_*.txt")):
        if not _GOLD_FILE.fullmatch(path.name):
            plans[_PLAN_FILE.fullmatch(path.name).group(1)] = path
    return plans


def _image_order(path: Path):
    return (0, int(path.stem), path.name) if path.stem.isdigit() else (1, 0, path.name)


def image_files(sample_folder: Path) -> list[Path]:
    """The scene images, in frame-number order."""
    images = [p for p in sample_folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
    return sorted(images, key=_image_order)


def load_instances(data_root: str | Path, *, allow_outside: bool = False,
                   images_decoded: int = IMAGES_DECODED_AT_LOAD) -> list[dict]:
    """Every instance of the release under ``data_root``, in (scene, activity, problem, sample) order.

    Every problem of the release is listed in one ActPlanDataError naming the instance folder and the
    file: an instance without images, gold plan or task description, a gold plan without a step, a
    file that is not UTF-8, a folder or file that leads out of ``data_root`` through a symbolic link
    (unless ``allow_outside``), a scene image missing or unusable (every image's first and last bytes;
    ``images_decoded`` of them, spread over the release, decoded in full).
    """
    root = annotation_root(data_root)
    instances = []
    problems = DatasetProblems(f"the ActPlan-1K release under {root}", ActPlanDataError)
    for scene in sorted(p for p in root.iterdir() if p.is_dir()):
        for activity in sorted(p for p in scene.iterdir() if p.is_dir()):
            problem_folders = sorted((int(p.name), p) for p in activity.iterdir() if p.is_dir() and p.name.isdigit())
            for problem, problem_folder in problem_folders:
                samples = _numbered((p for p in problem_folder.iterdir() if p.is_dir()), _SAMPLE_FOLDER)
                description = None  # its samples share it: what is wrong with it is said once
                with problems.collected():
                    description = _description(root, problem_folder, problem, allow_outside) if samples else None
                for sample, folder in samples:
                    with problems.collected():
                        instances.append(_instance(root, scene, activity, problem, sample, folder, description,
                                                   allow_outside))
    unusable = image_problems([path for instance in instances for path in instance["image_paths"]], images_decoded)
    for instance in instances:
        if broken := [unusable[Path(path)] for path in instance["image_paths"] if Path(path) in unusable]:
            problems.add(f"{instance['folder']}: {broken[0]}" + (f" (and {len(broken) - 1} more of its images)"
                                                                 if len(broken) > 1 else ""))
    problems.raise_if_any()
    if not instances:
        raise ActPlanDataError(f"no ActPlan-1K instances under {root}: expected "
                               f"{ANNOTATION_FOLDER}/<scene>/<activity>/<problem>/sample_<k>/ folders; check "
                               f"{setting_name(ENV_PREFIX, 'data_root')} (actplan-score: --data_root)")
    return instances


def _description(root: Path, problem_folder: Path, problem: int, allow_outside: bool) -> str:
    """A problem's task description, which its sample folders share; what keeps it from being one raises
    ActPlanDataError, naming the file."""
    path = problem_folder / f"task_description_{problem}.txt"
    if not path.is_file():
        raise ActPlanDataError(f"{problem_folder}: no task description ({path.name}"
                               f"{', a folder' if path.is_dir() else ''}): its samples have no task to plan")
    inside_root(path, root, where=f"ActPlan-1K problem {problem_folder.relative_to(root).as_posix()}: {path.name}",
                setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"), allow=allow_outside,
                error_class=ActPlanDataError)
    description = read_text(path, ActPlanDataError).strip()
    if not description:  # the model would plan a task it is not told
        raise ActPlanDataError(f"{problem_folder}: its task description {path} is empty")
    return description


def _instance(root: Path, scene: Path, activity: Path, problem: int, sample: int, folder: Path,
              description: str | None, allow_outside: bool) -> dict:
    """An instance folder's doc (``description``: its problem's, None where that has a problem of its own, said
    once); the first thing that keeps it from being one raises ActPlanDataError."""
    images, golds = image_files(folder), gold_plan_files(folder)
    parts = (("images (*.png / *.jpg)", images), ("gold plan (plan_gold_<n>.txt)", golds))
    missing = [what for what, ok in parts if not ok]
    if missing:
        raise ActPlanDataError(f"{folder}: no {', no '.join(missing)}")
    if folders := [path.name for path in golds if not path.is_file()]:
        raise ActPlanDataError(f"{folder}: {', '.join(folders)} is a folder, not a gold plan file")
    for path in (folder, *images, *golds):
        inside_root(path, root, where=f"ActPlan-1K instance {folder.relative_to(root).as_posix()}: "
                                      f"{path.relative_to(folder.parent).as_posix()}",
                    setting=setting_name(ENV_PREFIX, "allow_paths_outside_root"), allow=allow_outside,
                    error_class=ActPlanDataError)
    plans = [gold_steps(read_text(path, ActPlanDataError)) for path in golds]
    if empty := [path.name for path, steps in zip(golds, plans) if not steps]:
        raise ActPlanDataError(f"{folder}: gold plan without a step {', '.join(empty)}")
    return {
        "instance_id": folder.relative_to(root).as_posix(),
        "scene": scene.name,
        "activity": activity.name,
        "problem": problem,
        "sample": sample,
        "split": split_of_problem(problem),
        "folder": str(folder),
        "description": description,
        "image_paths": [str(path) for path in images],
        "gold_files": [path.name for path in golds],
        "gold_plans": plans,
    }


# ---------------------------------------------------------------------------------------------
# Plan text: action(args) steps
# ---------------------------------------------------------------------------------------------

# ``action(arg, ...)``: the name touches the parenthesis (so prose such as "the kitchen (left)" is not a step).
# Words that start the line and are joined to the name by single spaces are part of it: "walk to(kitchen)" is one
# step written out of form, never the fragment "to(kitchen)". Only at the line's start, so that a plan of
# space-joined steps keeps an annotation between them apart ("walk_to(a) wait grab(b)"). Arguments may be empty
# ("wait()") or hold one level of parentheses ("next_to(toilet)"); unless blank, they hold more than commas. Each
# part matches one way only, and word runs only from the line's start: linear time on any line.
_NESTED = r"\([^()\n]*\)"
STEP = re.compile(rf"(?<![\w-])((?:^(?:\w[\w-]* )+)?[A-Za-z][\w-]*)"
                  rf"\((\s*|[\s,]*(?:[^()\s,]|{_NESTED})(?:[^()\n]|{_NESTED})*)\)")
# The task descriptions' format placeholder ("... the planning steps described with action(object)"): an answer
# that repeats it, or the description's sentence, names no step (``plans.parse_plan``).
FORMAT_PLACEHOLDER = re.compile(r"(?:^|\s)action\(object\)$", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^\s*(?:[-*+\u2022]\s+|\(?\d+\s*[.):]\s*|step\s*\d+\s*[:.)-]?\s*)", re.IGNORECASE)
_DECORATION = re.compile(r"[`*]")
# What may surround steps on a line that is "in the required form".
_SEPARATOR = r"[\s,;.>\u2192-]"
_SEPARATORS = re.compile(f"{_SEPARATOR}*")
_TRIMMED = re.compile(f"{_SEPARATOR}*(.*?){_SEPARATOR}*", re.DOTALL)
# Blanks just inside a nested argument's parentheses (those next to commas go as the commas are re-joined).
_BLANKS_INSIDE_PARENTHESES = re.compile(r"(?<=\()\s+|(?<!\s)\s+(?=\))")


@dataclass(frozen=True)
class PlanLine:
    """A non-blank line of plan text: as written, and its steps once list markers and decoration are gone."""

    text: str  # stripped
    cleaned: str
    steps: list[str]  # canonical (``_canonical_step``)

    @property
    def only_steps(self) -> bool:
        """The line holds steps and nothing else but separators."""
        return bool(self.steps) and _SEPARATORS.fullmatch(STEP.sub("", self.cleaned)) is not None

    @property
    def in_form(self) -> bool:
        """Only steps, each named by one token (``walk to(kitchen)`` is a step, out of form)."""
        return self.only_steps and not any(" " in step.partition("(")[0] for step in self.steps)


def _canonical_step(action: str, args: str) -> str:
    """Arguments re-joined with ", " at every depth: ``place_on_top(mousetrap3,floor, next_to( toilet ))`` reads
    ``place_on_top(mousetrap3, floor, next_to(toilet))``."""
    joined = ", ".join(arg.strip() for arg in args.split(","))
    return f"{action}({_BLANKS_INSIDE_PARENTHESES.sub('', joined)})"


def plan_lines(text: str) -> list[PlanLine]:
    """The non-blank lines of plan text (numbered lists, bullets, code fences, inline sequences such
    as ``walk_to(a) grab(b)``), each with its steps; code-fence lines are left out."""
    lines = []
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            continue
        cleaned = _LIST_MARKER.sub("", _DECORATION.sub("", raw), count=1).strip()
        if cleaned:
            lines.append(PlanLine(raw.strip(), cleaned, [_canonical_step(*found) for found in STEP.findall(cleaned)]))
    return lines


def gold_steps(text: str) -> list[str]:
    """A gold plan's steps, its lines split as model output is (``plan_lines``).

    A line holding only steps gives them, in form or not, as a model's output gives them (several on a
    line, as ``finetuning_data.jsonl`` writes plans, are split). Other text is an annotated step, not a
    format error: a line with several steps gives them and the text between them; any other line
    (``wait``, an unclosed ``place_inside(carton, snack_food``) is one step as written. So the release's
    one-step-per-line gold files give their lines.
    """
    steps = []
    for line in plan_lines(text):
        if len(line.steps) < 2 and not line.only_steps:
            steps.append(line.text)
        else:
            steps += _steps_and_text_between(line.cleaned)
    return steps


def _steps_and_text_between(line: str) -> list[str]:
    pieces = STEP.split(line)  # text, action, args, text, action, args, ..., text
    texts = [_TRIMMED.fullmatch(text).group(1) for text in pieces[::3]]
    steps = [_canonical_step(action, args) for action, args in zip(pieces[1::3], pieces[2::3])]
    return [piece for text, step in zip(texts, [*steps, ""]) for piece in (text, step) if piece]


# ---------------------------------------------------------------------------------------------
# Settings checks
# ---------------------------------------------------------------------------------------------


def match_threshold_problem(threshold: float) -> str | None:
    """What is wrong with a step-match threshold (it is a cosine similarity in (0, 1]), or None."""
    return None if 0 < threshold <= 1 else f"expected a cosine in (0, 1], got {threshold}"


def check_settings(settings, task: str) -> None:
    """Values of an ``actplan.settings.ActPlanSettings`` that neither the type check nor the declared choices
    and ranges catch, reported with the setting's variable name and YAML key."""

    def fail(field: str, problem: str):
        raise SettingsError(f"task {task}: {setting_name(ENV_PREFIX, field)}: {problem}")

    if not settings.data_root:
        fail("data_root", "set it to the ActPlan-1K release folder (the one holding annotation/)")
    if problem := match_threshold_problem(settings.match_threshold):
        fail("match_threshold", problem)
    for field in ("embedding_model", "bleurt_checkpoint", "bleurt_base"):
        value = getattr(settings, field)
        if value and not Path(value).expanduser().exists():
            fail(field, f"not found: {value}")
    if settings.embedding_model and (problem := sentence_model_problem(settings.embedding_model)):
        fail("embedding_model", problem)
    checkpoint = Path(settings.bleurt_checkpoint).expanduser() if settings.bleurt_checkpoint else None
    if checkpoint is not None:  # found now, not at aggregation after the paid model run
        if checkpoint.is_dir() and not (checkpoint / CLASSIFIER_WEIGHTS).is_file():
            fail("bleurt_checkpoint", f"{checkpoint} is not a plan-classifier folder (no {CLASSIFIER_WEIGHTS}); train "
                                      f"one with `lmms-egoplan actplan-train-bleurt`")
        if checkpoint.is_file() and not settings.bleurt_base:
            fail("bleurt_base", f"{checkpoint} is a state-dict file (the release's format): set this to the BLEURT "
                                f"base checkpoint folder it was fine-tuned from")
    if problem := device_problem(settings.scoring_device, here=False):  # checked where the data is, run elsewhere
        fail("scoring_device", problem)
