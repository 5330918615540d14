"""Where a published row's stated protocol differs from a run's, beyond its scoring (``tables.published_block``):
frames, thinking mode, parser, judge and item count, each read from both sides in one plain form ("8 frames",
"4 fps", "official", "gpt-4o-2024-11-20", "none", "3355") where its side states it; a field either side leaves
unstated (or states in words this reading does not take) is no difference, and is named as not compared."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

from lmms_egoplan.judge.identity import JudgeIdentity
from lmms_egoplan.report.layout import NOT_STATED
from lmms_egoplan.report.runs import Run

NO_JUDGE = "none"


def _published_frames(text: str) -> str | None:
    """ "8 frames ..." or "4 fps ..." (the rate first, a cap after it does not change the rate compared)."""
    match = re.match(r"(\d+(?:\.\d+)?) (frames|fps)\b", text)
    return f"{float(match.group(1)):g} {match.group(2)}" if match else None


def _published_parser(text: str) -> str | None:
    return "official" if text.startswith("the official parser") else None


def _published_judge(text: str) -> str | None:
    """ "none", or a dated model snapshot ("gpt-4o-2024-11-20 (...)"); a model named without its snapshot is not
    compared (which one judged is not stated)."""
    if text == NO_JUDGE:
        return NO_JUDGE
    match = re.match(r"([\w.-]+-\d{4}-\d{2}-\d{2})\b", text)
    return match.group(1) if match else None


def _published_items(text: str) -> str | None:
    return text if text.isdigit() else None


def _number(value: object) -> float | None:
    """A recorded setting as a number; null, or words a results file was edited to hold, state none."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class RunProtocol:
    """What a run states of a published protocol's fields, for its tasks of one table."""

    run: Run
    tasks: tuple[str, ...]
    judged: bool

    @cached_property
    def recorded(self) -> dict[str, str]:
        """The tasks' merged settings, read once."""
        return self.run.recorded(self.tasks)

    @cached_property
    def statement(self) -> tuple[str | None, ...]:
        """What the run states of each compared field, in ``COMPARED``'s order: runs that state the same compare
        alike, so a table compares each published row once per distinct statement, not once per run row."""
        return tuple(read_run(self) for _, read_run in COMPARED.values())

    def frames(self) -> str | None:
        for name, unit in (("num_frames", "frames"), ("fps", "fps")):
            number = _number(self.recorded.get(name))
            if number is not None:
                return f"{number:g} {unit}"
        return None

    def parser(self) -> str | None:
        return self.recorded.get("parser")

    def judge(self) -> str | None:
        if not self.judged:
            return NO_JUDGE
        identity = JudgeIdentity.from_record(self.recorded)
        return identity.model if identity else None

    def items(self) -> str | None:
        """The questions of the split the run read (n-samples' original: before --limit, which the row notes)."""
        counts = {self.run.original_counts.get(task) for task in self.tasks}
        return str(counts.pop()) if len(counts) == 1 and None not in counts else None


# field -> (how a published row's text reads, how a run states it); thinking: no run here records a thinking mode
COMPARED: Mapping[str, tuple[Callable[[str], str | None], Callable[[RunProtocol], str | None]]] = {
    "frames": (_published_frames, RunProtocol.frames),
    "thinking": (lambda text: None, lambda run: None),
    "parser": (_published_parser, RunProtocol.parser),
    "judge": (_published_judge, RunProtocol.judge),
    "items": (_published_items, RunProtocol.items),
}


@dataclass(frozen=True)
class Difference:
    stated: str  # the published row's field and value: "frames 4 fps", "scoring generative"
    against: str  # what the runs state instead: "the run's 2 fps", "the runs here egoplan_val likelihood"

    def text(self) -> str:
        return f"{self.stated}, {self.against}"


@dataclass(frozen=True)
class Comparison:
    differing: tuple[Difference, ...]
    not_compared: tuple[str, ...]  # "thinking (not stated by the run)"


def compare(protocol: Mapping[str, str], run: RunProtocol) -> Comparison:
    """Where ``protocol`` (a published row's) and ``run`` state a field differently, and which fields one of them
    does not state."""
    differing, not_compared = [], []
    for (name, (read_published, _)), ran in zip(COMPARED.items(), run.statement):
        published = read_published(protocol[name])
        if published is not None and ran is not None:
            differing += [Difference(f"{name} {published}", f"the run's {ran}")] if published != ran else []
            continue
        row_words = protocol[name] != NOT_STATED  # stated, in words not read as a value
        why = [text for missing, text in ((published is None, "the row's words not read as a value" if row_words
                                           else "not stated by the row"), (ran is None, "not stated by the run"))
               if missing]
        not_compared.append(f"{name} ({'not stated by either' if len(why) == 2 and not row_words else '; '.join(why)})")
    return Comparison(tuple(differing), tuple(not_compared))
