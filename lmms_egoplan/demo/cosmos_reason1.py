"""Synthetic Cosmos-Reason1 data in the official layout, for tests and the offline demo.

``<root>/<part>/<part>_benchmark_qa_pairs.json`` and ``<root>/<part>/clips/`` for the six embodied-reasoning
sources and the three common-sense categories, with the release's variations: ``qa_pairs`` as a list and as one
dict, ``correct_answer`` where ``answer`` is absent, an AV clip stored only under its camera-suffixed name, and two
RoboVQA items sharing a clip (the official reader keeps only the later one); and the same questions in the
PAI-Bench-U Hub layout (``PAI-Bench-U/data/test-00000-of-00001.parquet``, ``videos/<part>/<clip>.mp4``, the part
in ``subcategory``). Every frame's pixels encode its
index (``demo.kit.media.read_index``), so a test can check which frames a model was shown.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from lmms_egoplan.core.settings import env_var
from lmms_egoplan.cosmos_reason1.data import (
    AV_CAMERA_SUFFIX,
    CS_CATEGORIES,
    ENV_PREFIX,
    ER_SOURCES,
    PAIBENCH_U_EMBEDDED_INSTRUCTION,
    qa_file,
)
from lmms_egoplan.demo.kit.lmms_eval_run import EvalRun
from lmms_egoplan.demo.kit.media import write_video
from lmms_egoplan.demo.kit.scripted import Expected, ScriptedAnswers, mean
from lmms_egoplan.demo.kit.suite import SmokeSuite

CLIP_FPS = 8
CLIP_FRAMES = 12  # 1.5 s: six frames at the protocol's 4 fps
_OPTIONS = ["pick up the cup", "open the drawer", "turn left", "stop the car", "push the block", "wait"]


@dataclass(frozen=True)
class CosmosReason1Fixture:
    root: Path

    @property
    def paibench_u_root(self) -> Path:
        return self.root / "PAI-Bench-U"

    def items(self, part: str) -> list[dict]:
        return json.loads(qa_file(self.root, part).read_text())

    def questions(self) -> list[tuple[str, dict]]:
        """(part, QA pair) for every question, in the files' order."""
        return [(part, pair) for part in (*ER_SOURCES, *CS_CATEGORIES) for item in self.items(part)
                for pair in (item["qa_pairs"] if isinstance(item["qa_pairs"], list) else [item["qa_pairs"]])]

    def env(self, **settings) -> dict[str, str]:
        """``COSMOS_REASON1_*`` variables pointing the tasks at the layout, plus any extra settings."""
        values = {"root": self.root, "paibench_u_root": self.paibench_u_root, **settings}
        return {env_var(ENV_PREFIX, name): str(value) for name, value in values.items()}


def _pair(part: str, number: int, key: str = "answer") -> dict:
    """A QA pair whose question names it ("[part #n]"), options in lower case, the right letter cycling."""
    letters = "ABCD"[: 3 + number % 2]
    options = {letter: _OPTIONS[(number + i) % len(_OPTIONS)] for i, letter in enumerate(letters)}
    return {"question": f"[{part} #{number}] What should the agent do next?", "index2ans": options,
            key: letters[number % len(letters)]}


def _items(part: str) -> list[dict]:
    """Three items: a list of two QA pairs, one pair as a dict, one pair with correct_answer (RoboVQA's third
    shares the first one's clip)."""
    third_clip = "clip_0" if part == "robovqa" else "clip_2"
    return [{"video": "clips/clip_0.mp4", "qa_pairs": [_pair(part, 0), _pair(part, 1)]},
            {"video": "clips/clip_1.mp4", "qa_pairs": _pair(part, 2)},
            {"video": f"clips/{third_clip}.mp4", "qa_pairs": [_pair(part, 3, key="correct_answer")]}]


def build_fixture(root: str | Path) -> CosmosReason1Fixture:
    """Write the layout under ``root`` (idempotent: an existing complete one is reused)."""
    root = Path(root)
    fixture, done = CosmosReason1Fixture(root), root / ".complete"
    if done.is_file():
        return fixture
    shutil.rmtree(root, ignore_errors=True)
    for part in (*ER_SOURCES, *CS_CATEGORIES):
        items = _items(part)
        path = qa_file(root, part)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(items, indent=1))
        for clip in sorted({item["video"] for item in items}):
            name = Path(clip)
            stored = name.with_name(f"{name.stem}{AV_CAMERA_SUFFIX}{name.suffix}") if part == "av" else name
            write_video(root / part / stored, num_frames=CLIP_FRAMES, fps=CLIP_FPS)
    write_paibench_u(fixture)
    done.touch()
    return fixture


def write_paibench_u(fixture: CosmosReason1Fixture) -> None:
    """The official layout's questions as PAI-Bench-U rows (the subcategory "Other Physics" and "BridgeData V2" as
    labels, not part names; RoboVQA's questions with the answer instruction some Hub rows embed), each clip linked to
    ``videos/<part>/<clip>.mp4``."""
    from datasets import Dataset

    labels = {"other_physics": "Other Physics", "bridgev2": "BridgeData V2"}
    rows = []
    for part in (*ER_SOURCES, *CS_CATEGORIES):
        for item in fixture.items(part):
            clip = Path(item["video"]).name
            stored = next((fixture.root / part / "clips").glob(f"{Path(clip).stem}*.mp4"))
            target = fixture.paibench_u_root / "videos" / part / clip
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.hardlink_to(stored)
            for pair in item["qa_pairs"] if isinstance(item["qa_pairs"], list) else [item["qa_pairs"]]:
                options = {letter: pair["index2ans"].get(letter) for letter in "ABCD"}
                embedded = f"\n{PAIBENCH_U_EMBEDDED_INSTRUCTION}" if part == "robovqa" else ""
                rows.append({"question": pair["question"] + embedded, "index2ans": options,
                             "answer": pair.get("answer", pair.get("correct_answer")),
                             "video_path": f"videos/{part}/{clip}", "category": "ER" if part in ER_SOURCES else "CS",
                             "subcategory": labels.get(part, part)})
    path = fixture.paibench_u_root / "data" / "test-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(path))


# How the scripted model answers in turn (official_reasoning), and what each parser reads of it: the official one
# the first capital inside the first <answer> tag, the robust one what a person reads.
SCRIPTED_STYLES = ("tagged", "think names another", "untagged letter", "tag in words", "lowercase tag",
                   "option text only", "wrong", "empty")


def scripted_answer(pair: dict, style: str) -> tuple[str, str, str]:
    """(answer, the letter the official parser reads, the letter the robust parser reads); "" for none."""
    gold = pair.get("answer", pair.get("correct_answer"))
    letters = list(pair["index2ans"])
    wrong = letters[(letters.index(gold) + 1) % len(letters)]
    return {
        "tagged": (f"<think>the clip shows it.</think> <answer>{gold}</answer>", gold, gold),
        "think names another": (f"<think>Option {wrong} looks right at first.</think>\n<answer>{gold}</answer>",
                                gold, gold),
        "untagged letter": (gold, "", gold),  # no answer tag: the official parser reads nothing
        "tag in words": (f"<answer>The answer is {gold}</answer>", "T", gold),  # the first capital is The's
        "lowercase tag": (f"<answer>{gold.lower()}</answer>", "", gold),
        "option text only": (f"<answer>{pair['index2ans'][gold]}</answer>", "", gold),
        "wrong": (f"<think>hard to say.</think><answer>{wrong}</answer>", wrong, wrong),
        "empty": ("", "", ""),
    }[style]


def _read(fixture: CosmosReason1Fixture) -> dict[str, tuple[str, str, str, str, str]]:
    """question -> (part, gold, answer, official letter, robust letter), the styles cycling over the questions."""
    read = {}
    for number, (part, pair) in enumerate(fixture.questions()):
        answer = scripted_answer(pair, SCRIPTED_STYLES[number % len(SCRIPTED_STYLES)])
        read[pair["question"]] = (part, pair.get("answer", pair.get("correct_answer")), *answer)
    return read


def _scores(rows: list[tuple]) -> dict[str, float]:
    right = {parser: [float(row[column] != "" and row[column].lower() == row[1].lower()) for row in rows]
             for parser, column in (("official", 3), ("robust", 4))}
    return {"accuracy_official": mean(right["official"]), "accuracy_robust": mean(right["robust"]),
            "unparseable_official": sum(row[3] == "" for row in rows),
            "unparseable_robust": sum(row[4] == "" for row in rows),
            "disagreements": sum(row[3] != row[4] for row in rows), "predictions": len(rows)}


def _task(part: str) -> str:
    return f"cosmos_reason1_{part}" if part in ER_SOURCES else f"cosmos_reason1_cs_{part}"


def _means(parts: dict[str, dict[str, float]], members: tuple[str, ...]) -> dict[str, float]:
    """A group's means over ``members``' accuracies: macro (``accuracy_*``), micro (``micro_*``, the pooled
    questions') and over the members that are embodied-reasoning sources other than AV (``no_av_*``)."""
    five = [part for part in members if part in ER_SOURCES and part != "av"]
    means = {}
    for parser in ("official", "robust"):
        weights = [parts[part]["predictions"] for part in members]
        means[f"accuracy_{parser}"] = mean([parts[part][f"accuracy_{parser}"] for part in members])
        means[f"micro_{parser}"] = sum(parts[part][f"accuracy_{parser}"] * weight
                                       for part, weight in zip(members, weights)) / sum(weights)
        if five:
            means[f"no_av_{parser}"] = mean([parts[part][f"accuracy_{parser}"] for part in five])
    return means


NOT_RETRIED = {"empty_answer_retried": 0, "empty_after_retries": 0}


def scripted_answers(fixture: CosmosReason1Fixture) -> ScriptedAnswers:
    """``cosmos_reason1`` answered in the eight styles; each value the run reports follows from what each parser
    reads of each style (``scripted_answer``), computed here without the parsers."""
    read = _read(fixture)

    def expected(run: EvalRun, failed: frozenset[str] = frozenset()) -> Expected:
        rows = [row for question, row in read.items() if question not in failed]
        every = (*ER_SOURCES, *CS_CATEGORIES)
        parts = {part: _scores([row for row in rows if row[0] == part]) for part in every}
        values: Expected = {}  # the groups, then their parts
        for group, members in (("cosmos_reason1_er", tuple(ER_SOURCES)), ("cosmos_reason1_cs", tuple(CS_CATEGORIES)),
                               ("cosmos_reason1", every)):
            pooled = _scores([row for row in rows if row[0] in members])
            asked = sum(row[0] in members for row in read.values())
            # lmms-eval's openai backend asks once: no answer generated again
            values[group] = {**pooled, **_means(parts, members), "skipped_samples": 0,
                             "failed_requests": asked - pooled["predictions"], **NOT_RETRIED}
        for part, scores in parts.items():
            asked = sum(row[0] == part for row in read.values())
            values[_task(part)] = {**scores, **_means(parts, (part,)), "skipped_samples": 0,
                                   "failed_requests": asked - scores["predictions"], **NOT_RETRIED}
        return values

    answers = {question: row[2] for question, row in read.items()}
    return ScriptedAnswers(tasks=("cosmos_reason1",), answers=answers, expected=expected, env=fixture.env())


def smoke_suite(workdir: Path, resources: contextlib.ExitStack) -> SmokeSuite:
    """Cosmos-Reason1's share of ``lmms-egoplan smoke``: the group on the official layout's synthetic data, and
    answered by script."""
    fixture = build_fixture(workdir)
    # The letter prompt for the tiny random model, which never writes an <answer> tag, and no retries: the official
    # 10 would generate an answer the official parser reads nothing of (no capital letter: some architectures' random
    # answers) 10 more times with up to 3,584 new tokens, which measures nothing here (the retries are tested against
    # a loopback vLLM server: tests/e2e/test_cosmos_reason1.py).
    return SmokeSuite(env=fixture.env(prompt="official_letter", max_retries=0),
                      cli_args=("--gen_kwargs", "max_new_tokens=16"),
                      scripted=scripted_answers(fixture))
