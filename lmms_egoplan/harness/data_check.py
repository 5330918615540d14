"""``lmms-egoplan check-data``: each benchmark's data checked as a run would read it, with no model. For each part
of its release (``contract.data.DataPart``), each of its tasks' settings are resolved as the run resolves them
(the task YAML's metadata < the settings file < ``<PREFIX>_<SETTING>`` variables) and its documents are read by
the task's own loader (its spec's ``load_docs``): every record checked, every media file probed (present,
readable, a video read up to the last frame its question shows, so a clip too short for its question is
found), then every document's visuals made as the run makes them (every frame a question reads decoded:
``undecodable``). Samples with unusable media are skipped rather than stopping the load (``skip_missing`` where the
benchmark has it) so that all of them are listed; a loader without it lists every problem in its error.

Counts: a part's records against the count the settings file declares for it (``expected_counts``: a subset,
such as the demo's), else against the release's; a declared subset's line shows the release's count beside it
without failing on it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from lmms_egoplan.catalogue import LMMS_EVAL_TASKS
from lmms_egoplan.contract.benchmark import Benchmark, TaskContext
from lmms_egoplan.contract.data import DataPart
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.settings import resolve_settings
from lmms_egoplan.core.settings_file import SettingsFile, settings_source


@dataclass(frozen=True)
class PartCount:
    part: DataPart
    found: int | None  # None: a task's loader stopped, so its records are not all counted
    expected: int | None  # None: no count known (the release states none, the settings file declares none)
    declared: bool  # the settings file declares ``expected`` (a subset), else it is the release's

    @property
    def matches(self) -> bool:
        return self.found == self.expected or (self.expected is None and self.found is not None)

    def text(self) -> str:
        if self.expected is None:
            of = "the release states no count"
        elif self.declared:
            release = "states none" if self.part.release_count is None else f"has {self.part.release_count:,}"
            of = f"a declared subset; the release {release}"
        else:
            of = "the release's count"
        if self.found is None:
            expected = "" if self.expected is None else f"{self.expected:,} {self.part.unit} expected: "
            return f"{self.part.name}: not counted, a loader stopped ({expected}{of})"
        found = f"{self.found:,}" if self.expected is None else f"{self.found:,} of {self.expected:,}"
        return f"{self.part.name}: {found} {self.part.unit} ({of})"


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


@dataclass
class BenchmarkCheck:
    """What ``check-data`` found of one benchmark: its parts' counts, the samples whose media are missing or
    unusable, and what stopped a loader (a setting, an annotation file, every problem of a loader that lists)."""

    name: str
    counts: list[PartCount] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # What stopped a loader, each problem once with the tasks it stopped: the tasks of a part share their settings
    # and data, so one cause (a missing folder, an unreachable Hub) stops them all.
    stopped: dict[str, list[str]] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [f"{', '.join(tasks)}: {problem}" for problem, tasks in self.stopped.items()]

    @property
    def complete(self) -> bool:
        return not self.missing and not self.problems and all(count.matches for count in self.counts)

    def summary(self) -> str:
        state = "complete" if self.complete else "INCOMPLETE"
        found = [count.text() for count in self.counts]
        found += [f"{_counted(len(self.missing), 'sample')} with missing or unusable media"] if self.missing else []
        if self.stopped:  # the first on the console: where loaders stop at once (no data source), it is the cause
            problem, tasks = next(iter(self.stopped.items()))
            where = tasks[0] if len(tasks) == 1 else f"{tasks[0]} and {_counted(len(tasks) - 1, 'other task')}"
            first = "" if len(self.stopped) == 1 else ", the first"
            found += [f"{_counted(len(self.stopped), 'problem')}{first}: {where}: {problem}"]
        return f"{self.name}: {state}: {'; '.join(found)}"

    def details(self) -> list[str]:
        return [*(f"problem: {problem}" for problem in self.problems), *(f"missing: {item}" for item in self.missing)]


def check_benchmark(benchmark: Benchmark, settings_file: SettingsFile) -> BenchmarkCheck:
    """Every part of ``benchmark``'s data read as its tasks read it."""
    if benchmark.data is None:
        raise ValueError(f"benchmark {benchmark.name} declares no data (Benchmark.data)")
    settings_file.check_counted_parts(benchmark.name, [part.name for part in benchmark.data.parts])
    check = BenchmarkCheck(benchmark.name)
    declared = settings_file.expected_counts.get(benchmark.name, {})
    for part in benchmark.data.parts:
        counted = [_count_task(benchmark, part, task, settings_file, check) for task in part.tasks]
        found = None if None in counted else sum(counted)
        check.counts.append(PartCount(part, found, declared.get(part.name, part.release_count), part.name in declared))
    return check


def _count_task(benchmark: Benchmark, part: DataPart, task: str, settings_file: SettingsFile,
                check: BenchmarkCheck) -> int | None:
    """The records of one task (skipped ones included), its missing media joining ``check.missing``; None, with
    what stopped its loader in ``check.stopped``."""
    config = task_config(benchmark.name, task)
    try:
        settings = resolve_settings(benchmark.settings, task=task, metadata=config.get("metadata"),
                                    env_prefix=benchmark.entry.env_prefix, settings_file=settings_file,
                                    benchmark=benchmark.name)
        if any(setting.name == "skip_missing" for setting in dataclasses.fields(settings)):
            settings = dataclasses.replace(settings, skip_missing=True)
        context = TaskContext(task_name=task, settings=settings, dataset_name=config.get("dataset_name"))
        spec = benchmark.lmms_eval_tasks[part.spec]
        loaded = spec.load_docs(context)
    except (InputError, FileNotFoundError, RuntimeError) as error:
        for problem in getattr(error, "problems", (str(error),)):
            check.stopped.setdefault(problem, []).append(task)
        return None
    check.missing += [f"{task}: {sample}" for sample in loaded.skipped or ()]
    check.missing += [f"{task}: {problem}" for problem in undecodable(spec.doc_to_visual, loaded.docs)]
    return loaded.split_size


def undecodable(doc_to_visual: Callable[[Any], Any] | None, docs: Sequence[Any]) -> list[str]:
    """What keeps each document from being shown to the model: its visuals made as the run makes them (the spec's
    ``doc_to_visual``, what each benchmark declares its questions read: every frame index of a clip decoded, every
    image), so that a clip damaged in its middle, which opens and whose packets read, is found before the model."""
    if doc_to_visual is None:
        return []
    problems = []
    for index, doc in enumerate(docs):
        try:
            doc_to_visual(doc)
        except (InputError, OSError, ValueError, RuntimeError) as error:
            problems.append(f"document {index}: {error}")
    return problems


def task_config(benchmark: str, task: str) -> dict[str, Any]:
    """The YAML config of ``task`` (its includes merged) as lmms-eval reads it, from the benchmark's task folder."""
    from lmms_eval.utils import load_yaml_config

    folder = resources.files(LMMS_EVAL_TASKS) / benchmark
    for path in sorted(folder.iterdir(), key=lambda path: path.name):
        if path.name.endswith(".yaml"):
            config = load_yaml_config(str(path), mode="simple")
            if config.get("task") == task:
                return config
    raise KeyError(f"no task YAML of {benchmark} declares task {task}")


CHECK_REPORT = "lmms-egoplan-check-data.txt"


def check_report_path(settings_file: SettingsFile) -> Path:
    """Where ``check-data`` writes its list by default, never the current folder: the folder ``prepare`` put the
    data in (the one above every benchmark's root it recorded, beside its list of what is needed), else the settings
    file's folder, else the temporary folder."""
    import tempfile

    roots = {Path(record["root"]).parent for record in settings_file.prepared.values()
             if isinstance(record, dict) and record.get("root")}
    if len(roots) == 1:
        return roots.pop() / CHECK_REPORT
    return (settings_file.path.parent if settings_file.path else Path(tempfile.gettempdir())) / CHECK_REPORT


def write_check_report(path: Path, checks: Sequence[BenchmarkCheck], settings_file: SettingsFile) -> Path:
    """Every benchmark's line, then everything missing, one item a line: the full list a summary line counts."""
    from lmms_egoplan.core.files import write_atomically

    lines = [f"# lmms-egoplan check-data, {settings_source(settings_file)}", *(check.summary() for check in checks), ""]
    for check in checks:
        lines += [f"## {check.name}", *(check.details() or ["nothing missing"]), ""]
    return write_atomically(path, "\n".join(lines))
