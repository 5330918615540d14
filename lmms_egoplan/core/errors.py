"""The error users can fix themselves: bad data, settings or paths, and the list of every problem
of a dataset that a benchmark loader raises as one of them.

Every benchmark's data errors, the settings errors and the judge set-up errors derive from
``InputError``, so that a command line can report any of them in one line (what to fix, no
traceback) while real bugs still surface as tracebacks.
"""

from __future__ import annotations

import collections
import contextlib
from typing import Callable, Iterator, Sequence, TypeVar

Item = TypeVar("Item")


class InputError(ValueError):
    """Bad input: the message names the file, field or setting to fix."""


class DatasetProblems:
    """Every problem a benchmark loader finds in its dataset, annotations and media alike, raised
    together as one ``error_class`` (``raise_if_any``), so that a user fixes them in one round
    rather than one per run. Each problem names its file, record and field (or the media file and
    the setting that points at it).

    A loader checks each record inside ``with problems.collected():``, where the first problem of the
    record (an ``error_class`` raised by a check) is recorded and the loader goes on with the next
    record; media problems found later join with ``add``.
    """

    LISTED = 20  # the problems an error spells out; the rest are counted

    def __init__(self, what: str, error_class: type[InputError] = InputError):
        self.what = what  # "the EgoPlan data": what the problems are in, for the error's first line
        self.error_class = error_class
        self.found: list[str] = []

    def add(self, problem: str) -> None:
        self.found.append(problem)

    @contextlib.contextmanager
    def collected(self) -> Iterator[None]:
        """Run the block; an ``error_class`` it raises is recorded as a problem instead, and the block ends."""
        try:
            yield
        except self.error_class as error:
            self.add(str(error))

    def without_repeats(self, items: Sequence[Item], key: Callable[[Item], object], *, where: str, field: str,
                        why: str) -> list[Item]:
        """``items`` less those whose ``key`` (the value of ``field``, an id) another item has too; one
        problem names ``where`` and every repeated value, and ``why`` each record needs its own."""
        counts = collections.Counter(map(key, items))
        if repeated := [value for value, count in counts.items() if count > 1]:
            self.add(f"{where}: {field}(s) {', '.join(map(repr, repeated))} appear more than once; each record needs "
                     f"its own ({why})")
        return [item for item in items if counts[key(item)] == 1]

    def unusable_media(self, unusable: Sequence, *, skip: bool, label: str, skip_setting: str,
                       samples: str = "questions", media: str = "media") -> set:
        """The ids of the samples in ``unusable`` (``core.media.MissingMedia``), left out where ``skip``; otherwise
        each is a problem of the data, raised now with every other one and ``skip_setting``'s advice. ``label`` (the
        benchmark's name) begins each problem; ``samples`` and ``media`` say what is skipped ("the questions whose
        clips are unusable")."""
        if not skip:
            for sample in unusable:
                self.add(f"{label} {sample}")
        self.raise_if_any(f"Set {skip_setting} to true to skip the {samples} whose {media} are unusable instead (they "
                          f"are counted in the skipped_samples metric)" if unusable and not skip else "")
        return {sample.sample_id for sample in unusable}

    def raise_if_any(self, advice: str = "") -> None:
        """Raise one ``error_class`` listing every problem found (the first ``LISTED``, then how many
        more), ``advice`` last; one problem is the error's message as it is. The error's ``problems`` holds them all."""
        if not self.found:
            return
        ending = f". {advice}" if advice else ""
        if len(self.found) == 1:
            error = self.error_class(f"{self.found[0]}{ending}")
        else:
            listed = ";\n  ".join(self.found[:self.LISTED])
            more = f";\n  ... and {len(self.found) - self.LISTED} more" if len(self.found) > self.LISTED else ""
            error = self.error_class(f"{len(self.found)} problems in {self.what}:\n  {listed}{more}{ending}")
        error.problems = tuple(self.found)  # every one, for whoever lists them all (``lmms-egoplan check-data``)
        raise error


class StorageError(OSError):
    """Something paid for or produced could not be written (a full disk, a quota, a folder that cannot
    be written): the message names the file or database, how much was not stored, and what is kept."""
