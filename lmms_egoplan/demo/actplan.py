"""Synthetic ActPlan-1K data in the release's exact layout, a tiny BERT, and the release's LCS.

* ``write_release_dataset``: ``annotation/<scene>/<activity>/<problem>/sample_<k>/`` folders with
  scene images (``demo.kit.media.index_image``: each image encodes a unique number), gold plans,
  VLM plans and task descriptions, plus ``problem<k>.bddl`` files, as the release ships them.
* ``make_activities`` / ``vlm_plan`` / ``model_output``: plausible gold plans (about 24 steps,
  counterfactual ones longer), model plans with the paper's error types, and free-form output.
* ``write_finetuning_data``: rows of ``finetuning_data.jsonl`` and an ``activities.txt`` split.
* ``build_tiny_bert``: a random-weight BLEURT-like checkpoint (``BertForSequenceClassification``
  with one regression output, WordPiece tokenizer) built offline; ``write_classifier_checkpoint``
  puts an untrained plan classifier on top of it.
* ``release_lcs``: the release's recursive LCS, the oracle the fast implementation must equal.
* ``smoke_suite``: ActPlan-1K's share of ``lmms-egoplan smoke``, with its scripted answers
  (``scripted_answers``: exact, partly right and wrong plans, and no plan).
"""

from __future__ import annotations

import json
import random
import re
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import index_image
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, lcs_length, mean
from lmms_egoplan.demo.kit.suite import SmokeSuite

SCRIPTED_TASKS = ("actplan1k", "actplan1k_text_only")  # answered by script alike, with and without images

ACTION_INSTRUCTION = ("Generate admissible procedural plans without natural language using the planning steps "
                      "described with action(object). The available actions include walk_to, place_on_top, grab, "
                      "place_inside, open/close, and switch-on/off.")

_VERBS = ("assembling", "storing", "packing", "putting_away", "sorting", "collecting", "organizing", "filling")
_ITEMS = ("cookie", "cheese", "candle", "bow", "plate", "bowl", "cup", "apple", "orange", "book", "shirt", "sock",
          "towel", "soap", "sponge", "jar", "bottle", "carrot", "broccoli", "milk", "bread", "tile", "toy", "pen",
          "notebook", "pillow", "blanket", "hammer", "lettuce", "pork")
_SOURCES = ("table", "countertop", "floor", "shelf", "sofa", "bed", "chair", "desk")
_CONTAINERS = ("basket", "cabinet", "electric_refrigerator", "carton", "drawer", "dishwasher", "sink", "bag")
_OPENABLE = {"cabinet", "electric_refrigerator", "drawer", "dishwasher"}
_CONDITIONS = (("burnt", "trash_can"), ("dirty", "sink"), ("broken", "trash_can"), ("wet", "dryer"))
SCENES = ("Beechwood_0_int", "Benevolence_1_int", "Ihlen_0_int", "Merom_1_int", "Pomaria_1_int", "Rs_int",
          "Wainscott_0_int")


@dataclass(frozen=True)
class Activity:
    """A synthetic household activity: items to move from a source place into a container."""

    name: str
    items: tuple[str, ...]
    copies: int
    source: str
    container: str
    condition: tuple[str, str]
    located_names: bool = False  # "cookie_on_table_1" rather than "cookie_1", as some gold plans name objects

    def in_scene(self, rng: random.Random) -> "Activity":
        """The activity as loaded in another scene: other places, object counts and names."""
        return replace(self, copies=rng.randint(1, 2), source=f"{rng.choice(_SOURCES)}_{rng.randint(1, 3)}",
                       container=rng.choice((self.container, f"{self.container}_{rng.randint(1, 2)}")),
                       located_names=rng.random() < 0.5)

    @property
    def openable(self) -> bool:
        return self.container.rstrip("_0123456789") in _OPENABLE

    def description(self, problem: int) -> str:
        goal = (f"The task goal is {self.name.replace('_', ' ')}. There are {self.copies} of each of "
                f"{', '.join(self.items)} on the {self.source}. The goal is to put them inside the {self.container} "
                "as shown in the images.")
        if problem:
            goal += f" The {self.items[problem % len(self.items)]}s are {self.condition[0]}."
        return f"{goal}\n{ACTION_INSTRUCTION}\n"

    def gold_plan(self, problem: int, variant: int) -> list[str]:
        """Gold plan ``variant`` (0: one object at a time, 1: grab all copies then place them).

        In a counterfactual problem (> 0) one item is spoilt: each copy is checked and taken to a
        disposal place instead (about 8 more steps, as in the release's counterfactual plans).
        """
        steps = [f"walk_to({self.container})", f"open({self.container})"] if self.openable else []
        spoilt = self.items[problem % len(self.items)] if problem else None
        for item in self.items:
            where = f"_on_{self.source.rstrip('_0123456789')}" if self.located_names else ""
            objects = [f"{item}{where}_{k + 1}" for k in range(self.copies)]
            if item == spoilt:
                state, disposal = self.condition
                steps += [f"walk_to({disposal})", f"open({disposal})"]
                for obj in objects:
                    steps += [f"walk_to({self.source})", f"grab({obj})", f"check({obj}, {state})",
                              f"walk_to({disposal})", f"place_inside({disposal}, {obj})"]
                steps.append(f"close({disposal})")
            elif variant == 0:
                for obj in objects:
                    steps += [f"walk_to({self.source})", f"grab({obj})", f"walk_to({self.container})",
                              f"place_inside({self.container}, {obj})"]
            else:
                steps += [f"walk_to({self.source})", *[f"grab({obj})" for obj in objects], f"walk_to({self.container})",
                          *[f"place_inside({self.container}, {obj})" for obj in objects]]
        if self.openable:
            steps.append(f"close({self.container})")
        return steps


def make_activities(count: int, seed: int = 0) -> list[Activity]:
    rng = random.Random(seed)
    activities, names = [], set()
    while len(activities) < count:
        items = tuple(rng.sample(_ITEMS, rng.randint(3, 5)))
        name = f"{rng.choice(_VERBS)}_{items[0]}s_and_{items[1]}s"
        if name in names:
            continue
        names.add(name)
        activities.append(Activity(name, items, rng.randint(1, 2), rng.choice(_SOURCES), rng.choice(_CONTAINERS),
                                   rng.choice(_CONDITIONS)))
    return activities


# How models rename objects (the paper's "incorrect image understanding" and naming drift).
_RENAMINGS = ((r"_(\d)\b", r"\1"), (r"electric_refrigerator", "refrigerator"), (r"countertop", "counter"),
              (r"\((\w)", r"(the_\1"), (r"_\d\)", ")"))


def vlm_plan(gold: Sequence[str], rng: random.Random, errors: float) -> list[str]:
    """A model-like plan: the gold plan with renamed objects, dropped, swapped and invented steps."""
    pattern, replacement = rng.choice(_RENAMINGS)
    plan = []
    for step in gold:
        draw = rng.random()
        if draw < errors * 0.3:
            continue  # missing action
        if draw < errors * 0.6:
            step = re.sub(pattern, replacement, step)
        plan.append(step)
        if rng.random() < errors * 0.2:
            plan.append(rng.choice(("walk_to(kitchen)", "walk_to(living_room)", "open(door)", "switch_on(light)",
                                    f"grab({rng.choice(_ITEMS)})", f"walk_to({rng.choice(_SOURCES)})")))
    for i in range(len(plan) - 1):
        if rng.random() < errors * 0.1:
            plan[i], plan[i + 1] = plan[i + 1], plan[i]
    return plan


def model_output(steps: Sequence[str], rng: random.Random) -> str:
    """Free-form text around a plan, in the forms models write (lists, fences, prose, bad lines)."""
    lines = list(steps)
    if lines and rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines)), rng.choice(("Walk to the kitchen.", "(brush sweater1)", "grab cup")))
    style = rng.randrange(5)
    if style == 1:
        lines = [f"{i + 1}. {line}" for i, line in enumerate(lines)]
    elif style == 2:
        lines = [f"- {line}" for line in lines]
    elif style == 3:
        lines = ["```", *lines, "```"]
    elif style == 4:
        lines = ["Here is the plan:", "", *lines, "", "This completes the task."]
    return "\n".join(lines) + "\n"


def write_release_dataset(root: str | Path, *, scenes: int = 2, activities: int = 2, counterfactual: int = 1,
                          samples: int = 2, models: Sequence[str] = ("gpt-4v", "gemini"), seed: int = 0) -> Path:
    """An ActPlan-1K release folder under ``root`` (returned); its ``annotation/`` holds the instances.

    Each activity is loaded in ``scenes`` scenes with problem 0 (normal) and ``counterfactual``
    counterfactual problems, each sampled ``samples`` times. Images: 2-5 per instance, frame-numbered
    PNGs whose pixels encode a run-wide counter in folder order.
    """
    rng = random.Random(seed)
    root = Path(root)
    image_number = 0
    for generic in make_activities(activities, seed):
        for scene in SCENES[:scenes]:
            activity = generic.in_scene(rng)
            for problem in range(1 + counterfactual):
                problem_folder = root / "annotation" / scene / activity.name / str(problem)
                problem_folder.mkdir(parents=True, exist_ok=True)
                (problem_folder / f"problem{problem}.bddl").write_text(
                    f"(define (problem {activity.name}_{problem}))\n")
                (problem_folder / f"task_description_{problem}.txt").write_text(activity.description(problem))
                golds = [activity.gold_plan(problem, variant) for variant in (0, 1)]
                for sample in range(samples):
                    folder = problem_folder / f"sample_{sample}"
                    folder.mkdir(exist_ok=True)
                    for frame in sorted(rng.sample(range(1, 400), rng.randint(2, 5))):
                        index_image(image_number).save(folder / f"{frame:05d}.png")
                        image_number += 1
                    for number, gold in enumerate(golds, 1):
                        (folder / f"plan_gold_{number}.txt").write_text("\n".join(gold) + "\n")
                    for model in models:
                        (folder / f"plan_{model}.txt").write_text("\n".join(vlm_plan(golds[0], rng, 0.5)) + "\n")
    return root


def write_finetuning_data(folder: str | Path, *, activities: int = 10, seed: int = 0) -> tuple[Path, Path]:
    """``finetuning_data.jsonl`` + ``activities.txt`` in the release's format; returns both paths.

    Plans are single lines of space-joined steps; VLM plans with few errors are the correct ones.
    Activities are split 60/20/20 into train/val/test.
    """
    rng = random.Random(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows, split_lines = [], []
    chosen = make_activities(activities, seed)
    for index, activity in enumerate(chosen):
        split = "train" if index < 0.6 * len(chosen) else "val" if index < 0.8 * len(chosen) else "test"
        split_lines.append(f"{activity.name}\t{split}")
        for problem in (0, 1):
            golds = [" ".join(activity.gold_plan(problem, variant)) for variant in (0, 1)]
            row = {"path": f"../annotation/{SCENES[0]}/{activity.name}/{problem}/sample_0", "activity": activity.name,
                   "gold_gpt": golds[:1], "gold_gemini": golds[1:] if rng.random() < 0.8 else []}
            for vlm in ("gpt", "gemini"):
                errors = rng.choice((0.0, 0.6))
                plan = " ".join(vlm_plan(activity.gold_plan(problem, 0), rng, errors)) + " "
                row[f"pos_{vlm}"], row[f"neg_{vlm}"] = ([plan], []) if errors == 0 else ([], [plan])
            rows.append(row)
    data_file, activities_file = folder / "finetuning_data.jsonl", folder / "activities.txt"
    data_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    activities_file.write_text("\n".join(split_lines) + "\n")
    return data_file, activities_file


def build_tiny_bert(out_dir: str | Path, *, seed: int = 0, hidden_size: int = 32, num_layers: int = 2) -> Path:
    """A random-weight BLEURT-like checkpoint: ``BertForSequenceClassification`` (1 output, as the
    BLEURT ports) with an uncased WordPiece tokenizer whose vocabulary covers plan text."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    characters = "abcdefghijklmnopqrstuvwxyz0123456789"
    words = sorted({part for name in (*_ITEMS, *_SOURCES, *_CONTAINERS, *_VERBS, "walk_to", "place_inside",
                                      "place_on_top", "switch_on", "kitchen", "trash_can", "dryer")
                    for part in name.split("_")} | {"grab", "open", "close", "check", "the", "is", "of", "and"})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *characters, *"_(),.-",
             *[f"##{c}" for c in characters + "_"], *[w for w in words if len(w) > 1]]
    tokenizer = BertTokenizer(vocab={token: index for index, token in enumerate(dict.fromkeys(vocab))})
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
                        num_attention_heads=2, intermediate_size=2 * hidden_size, max_position_embeddings=512,
                        num_labels=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def release_lcs(candidate: Sequence[str], reference: Sequence[str], encode: Callable[[str], object],
                threshold: float = 0.8) -> int:
    """The LCS of ActPlan-1K's release (HKUST-KnowComp/ActPlan-1K, ``auto_lcs/lcs.py``), same semantics.

    ``encode(step)`` must be ``model.encode(step, convert_to_tensor=True)`` of all-MiniLM-L6-v2
    (a memoised wrapper gives the same values). Steps match when ``util.cos_sim`` of their
    one-sentence embeddings, as a float32 numpy value, is ``>= threshold``; the LCS is the release's
    memoised recursion from the last steps, taking the diagonal on a match and the better of the
    two shorter prefixes otherwise.
    """
    from sentence_transformers import util

    def is_similar(a: str, b: str) -> bool:
        return util.cos_sim(encode(a), encode(b)).cpu().numpy()[0][0] >= threshold

    def lcs(m: int, n: int, dp: np.ndarray) -> int:
        if m == 0 or n == 0:
            return 0
        if dp[m][n] != -1:
            return dp[m][n]
        if is_similar(candidate[m - 1], reference[n - 1]):
            dp[m][n] = 1 + lcs(m - 1, n - 1, dp)
            return dp[m][n]
        dp[m][n] = max(lcs(m, n - 1, dp), lcs(m - 1, n, dp))
        return dp[m][n]

    return int(lcs(len(candidate), len(reference), np.zeros((len(candidate) + 1, len(reference) + 1)) - 1.0))


def write_classifier_checkpoint(out_dir: str | Path, base_dir: str | Path,
                                calibration: Sequence[tuple[str, str]] = (), *,
                                accept_every_plan: bool = False) -> Path:
    """An untrained plan-classifier folder on top of a tiny BERT, as ``actplan-train-bleurt`` writes them.

    With ``calibration`` pairs (gold, generated), the head's bias is set so that about half of
    them are judged correct, which gives tests a classifier whose verdicts vary. With
    ``accept_every_plan`` the head ignores the encoder and judges every pair correct, so that the
    BLEURT accuracy of a run is known beforehand: the share of outputs that hold a plan.
    """
    import torch

    from lmms_egoplan.actplan.classifier import classifier_from_base

    classifier = classifier_from_base(base_dir, device="cpu")
    if accept_every_plan:
        with torch.no_grad():
            classifier.module.mlp.weight.zero_()
            classifier.module.mlp.bias.copy_(torch.tensor([0.0, 1.0]))
    elif calibration:
        classifier.module.eval()
        with torch.no_grad():
            logits = classifier.logits([g for g, _ in calibration], [c for _, c in calibration])
            margins = (logits[:, 1] - logits[:, 0]).sort().values
            classifier.module.mlp.bias[1] -= (margins[(len(margins) - 1) // 2] + margins[len(margins) // 2]) / 2
    return classifier.save(out_dir, {"format": "lmms_egoplan plan classifier", "note": "untrained, for tests"})


# Steps no gold plan of the synthetic release holds, all far from every gold step for the step
# matcher (cosine similarity under 0.3 with all-MiniLM-L6-v2; a match needs 0.8).
UNRELATED_STEPS = ("switch_on(television)", "turn_on(radio)", "feed(dog)", "make(coffee)")
PROSE_LINE = "Then look around the room."
NO_PLAN = "I am not able to plan this task."


@dataclass(frozen=True)
class ScriptedPlan:
    """A scripted output: its text and what it holds by construction."""

    text: str
    steps: list[str]
    plan_lines: int  # non-blank lines from the first to the last step (the whole output without a step)
    format_errors: int  # of those, lines that are not steps


def scripted_plan(kind: str, gold: Sequence[str]) -> ScriptedPlan:
    """The gold plan in a code fence; part of it (every third step dropped) as a numbered list with a
    line of prose inside; unrelated steps as a bulleted list after a heading; prose without a plan."""
    if kind == "exact":
        return ScriptedPlan("```\n" + "\n".join(gold) + "\n```\n", list(gold), len(gold), 0)
    if kind == "partly right":
        kept = [step for i, step in enumerate(gold) if i % 3 != 2]
        lines = [f"{i + 1}. {step}" for i, step in enumerate(kept)]
        lines.insert(len(lines) // 2, PROSE_LINE)
        return ScriptedPlan("\n".join(lines) + "\n", kept, len(lines), 1)
    if kind == "wrong":
        return ScriptedPlan("Here is the plan:\n\n" + "".join(f"- {step}\n" for step in UNRELATED_STEPS),
                            list(UNRELATED_STEPS), len(UNRELATED_STEPS), 0)
    return ScriptedPlan(NO_PLAN + "\n", [], 1, 1)


SCRIPTED_KINDS = ("exact", "partly right", "wrong", "no plan")


def scripted_answers(data: Path, classifier: Path | None) -> ScriptedAnswers:
    """Each instance answered with one kind of ``SCRIPTED_KINDS`` in turn (the same with and without
    images). LCS from a plain DP over the scripted and first gold steps (the unrelated steps match no
    gold step, the others are gold steps); with a ``classifier`` (the demo's accepts every plan), BLEURT
    accuracy the share of outputs with a plan; format errors, plan length and no-plan rate by construction."""
    from lmms_egoplan.actplan.data import load_instances

    docs = load_instances(data)
    plans = [scripted_plan(SCRIPTED_KINDS[i % len(SCRIPTED_KINDS)], doc["gold_plans"][0]) for i, doc in enumerate(docs)]
    lcs = [lcs_length(plan.steps, doc["gold_plans"][0]) for plan, doc in zip(plans, docs)]
    norm_lcs = [length / max(len(plan.steps), len(doc["gold_plans"][0])) for length, plan, doc in zip(lcs, plans, docs)]
    accepted = [float(bool(plan.steps)) for plan in plans]

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        answered = [i for i, doc in enumerate(docs) if doc["description"] not in failed]
        kept = [plans[i] for i in answered]
        metrics = {"format_error_rate": sum(p.format_errors for p in kept) / sum(p.plan_lines for p in kept),
                   "plan_length": mean([len(p.steps) for p in kept]),
                   "no_plan_rate": mean([float(not p.steps) for p in kept]),
                   "failed_requests": len(docs) - len(answered)}
        for suffix, chosen in (("", answered), *((f"_{split}", [i for i in answered if docs[i]["split"] == split])
                                                 for split in ("normal", "counterfactual"))):
            metrics |= {f"lcs{suffix}": mean([lcs[i] for i in chosen]),
                        f"norm_lcs{suffix}": mean([norm_lcs[i] for i in chosen])}
            if classifier:
                metrics[f"bleurt_accuracy{suffix}"] = mean([accepted[i] for i in chosen])
        return {task: metrics for task in SCRIPTED_TASKS}

    answers = {doc["description"]: plan.text for doc, plan in zip(docs, plans)}
    return ScriptedAnswers(tasks=SCRIPTED_TASKS, answers=answers, expected=expected, env=_settings(data, classifier))


def _settings(data: Path, classifier: Path | None) -> dict[str, str]:
    return {"ACTPLAN_DATA_ROOT": str(data), "ACTPLAN_SCORING_DEVICE": "cpu",
            **({"ACTPLAN_BLEURT_CHECKPOINT": str(classifier)} if classifier else {})}


def smoke_suite(workdir: Path, resources: ExitStack) -> SmokeSuite:
    """Both ActPlan-1K tasks on a small synthetic release (two scenes, a normal and a counterfactual
    problem in each), with a BLEURT classifier that accepts every plan; answered by script too."""
    data = write_release_dataset(workdir / "release", scenes=2, activities=1, samples=1)
    classifier = write_classifier_checkpoint(workdir / "classifier", build_tiny_bert(workdir / "tiny-bert"),
                                             accept_every_plan=True)
    return SmokeSuite(env=_settings(data, classifier),
                      # A random model writes no plan: 1,024 new tokens per instance would only slow the demo down.
                      cli_args=("--gen_kwargs", "max_new_tokens=48"), scripted=scripted_answers(data, classifier))
