"""``lmms-egoplan prepare``: each benchmark's data under one root folder, as its ``Benchmark.data`` declares it
(``contract.data``). What its authors publish on the Hub is fetched (``core.hub_download``: resumable, the
revision resolved and recorded); what needs a licence or an external tool is listed, item by item, with the
exact commands of the official downloaders (``<root>/lmms-egoplan-needed.md``, each list of ids in a file of its
own); last, the settings file a run reads (``core.settings_file``) gets each benchmark's settings, the judge's,
and what was fetched. Run it again after any of the listed steps: it fetches only what is not there yet and lists
what is still missing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from lmms_egoplan.catalogue import CATALOGUE
from lmms_egoplan.contract.benchmark import Benchmark
from lmms_egoplan.contract.data import DataPlan, HubDataset, Needed
from lmms_egoplan.core.files import write_atomically
from lmms_egoplan.core.hub_download import HubFetchError, dataset_revision, fetch_dataset, hub_size
from lmms_egoplan.core.settings_file import SettingsFile, read_settings_file, write_settings_file

NEEDED_FILE = "lmms-egoplan-needed.md"


@dataclass
class Prepared:
    """What ``prepare`` did for one benchmark: its plan, the Hub datasets fetched (repository -> record) and those
    that could not be (repository -> why)."""

    name: str
    plan: DataPlan
    fetched: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def outstanding(self) -> list[Needed]:
        return [needed for needed in self.plan.needed if needed.present < max(len(needed.items), 1)]

    def summary(self) -> str:
        fetched = [f"{repo} at {record['revision'][:12]} ({hub_size(record['size'])})"
                   for repo, record in self.fetched.items()]
        still = [f"{needed.title}: {len(needed.items) - needed.present} of {len(needed.items)} {needed.unit} to get"
                 if needed.items and needed.list_file else f"{needed.title}: to get" for needed in self.outstanding]
        parts = ([f"fetched {', '.join(fetched)}"] if fetched else []) + [f"FAILED to fetch {repo} (said above)"
                                                                           for repo in self.failed] + still
        return f"{self.name}: " + ("; ".join(parts) if parts else "nothing to fetch") + (
            "" if still or self.failed else " -- in place")


def prepare(benchmarks: Sequence[Benchmark], root: Path, settings_path: Path, *, judge: Mapping[str, Any],
            say: Callable[[str], None] = print) -> list[Prepared]:
    """Prepare ``benchmarks`` under ``root`` (one folder each, its catalogue name), then write the list of what
    they still need and the settings file at ``settings_path`` (kept where it exists, every benchmark's block
    included, and read before anything is fetched: the benchmarks prepared here replace their blocks, ``judge`` the
    judge settings it gives; a Hub dataset not fetched this time keeps the revision recorded before)."""
    root = Path(root).expanduser().resolve()
    names = [benchmark.name for benchmark in benchmarks]
    earlier = (read_settings_file(settings_path, [row.name for row in CATALOGUE]) if Path(settings_path).is_file()
               else SettingsFile())
    done = [_prepare_one(benchmark, root / benchmark.name, say) for benchmark in benchmarks]
    needed_file = write_needed(root / NEEDED_FILE, done)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    prepared = {each.name: _prepared_record(each, root / each.name, stamp, earlier.prepared.get(each.name))
                for each in done}
    update = SettingsFile(Path(settings_path), {each.name: dict(each.plan.settings) for each in done}, dict(judge),
                          prepared=prepared)
    write_settings_file(settings_path, earlier.merged(update), writer=f"lmms-egoplan prepare {' '.join(names)}")
    for each in done:
        say(each.summary())
    say(f"What is still needed, with the commands: {needed_file}")
    say(f"Settings file (a run reads it; see docs/data.md): {settings_path}")
    return done


def _prepared_record(done: Prepared, folder: Path, stamp: str, earlier: Any) -> dict[str, Any]:
    """The settings file's record of what ``prepare`` fetched for one benchmark: the Hub datasets fetched now, and
    those fetched before and not now (the Hub unreachable) with the revision recorded then."""
    kept = earlier.get("hub", {}) if isinstance(earlier, dict) else {}
    hub = {**{repo: record for repo, record in kept.items() if repo not in done.fetched}, **done.fetched}
    return {"root": str(folder), "at": stamp, **({"hub": hub} if hub else {})}


def _prepare_one(benchmark: Benchmark, folder: Path, say: Callable[[str], None]) -> Prepared:
    """One benchmark: its Hub datasets fetched (each failure said and recorded), then its plan."""
    if benchmark.data is None:
        raise ValueError(f"benchmark {benchmark.name} declares no data (Benchmark.data)")
    fetched, failed, folders = {}, {}, {}
    for hub in benchmark.data.hub:
        folders[hub.repo_id] = folder / hub.folder
        try:
            fetched[hub.repo_id] = _fetch(hub, folder / hub.folder, say)
        except HubFetchError as error:
            failed[hub.repo_id] = str(error)
            say(f"{benchmark.name}: {error}")
    return Prepared(benchmark.name, benchmark.data.plan(folder, folders), fetched, failed)


def _fetch(hub: HubDataset, folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """One Hub dataset fetched (the user's token, where it is gated, as huggingface_hub finds it: ``HF_TOKEN`` or
    ``hf auth login``), its size said first."""
    _, files, size = dataset_revision(hub.repo_id, revision=hub.revision, allow_patterns=hub.allow_patterns)
    gated = ", gated: with your token" if hub.gated else ""
    say(f"Fetching {hub.repo_id} ({files} files, {hub_size(size)}{gated}) into {folder} ...")
    got = fetch_dataset(hub.repo_id, folder, revision=hub.revision, allow_patterns=hub.allow_patterns)
    if got.replaced:
        say(f"{hub.repo_id}: {len(got.replaced)} files in {folder} differed from the Hub's (their hash), fetched "
            f"again: {', '.join(got.replaced)}")
    return {"revision": got.revision, "folder": str(got.folder), "files": got.files, "size": got.size}


def needed_text(done: Sequence[Prepared], folder_of: Callable[[str], Path]) -> str:
    """The list of what the benchmarks still need, as Markdown: per benchmark and item, why prepare could not fetch
    it, how many, their size where the source publishes it, the list's file, and the commands."""
    lines = ["# What the benchmarks still need", "",
             "Written by `lmms-egoplan prepare`; run it again after these steps: it lists what is still missing.", ""]
    for each in done:
        lines += [f"## {each.name}", ""]
        lines += [f"- The Hub dataset {repo} could not be fetched: {why}" for repo, why in each.failed.items()]
        for needed in each.plan.needed:
            lines += [f"### {needed.title}", "", f"- Why: {needed.why}"]
            if needed.items:
                listed = f" (listed in {folder_of(each.name) / needed.list_file})" if needed.list_file else ""
                lines.append(f"- {len(needed.items)} {needed.unit}{listed}, {needed.present} already in place")
                lines += [] if needed.list_file else [f"  - {item}" for item in needed.items]
            lines += [f"- Size: {needed.size}"] if needed.size else []
            lines += ["", "```bash", *needed.commands, "```", "", *([f"Then {needed.then}", ""] if needed.then else [])]
        lines += [f"- {note}" for note in each.plan.notes]
        lines += [] if each.plan.needed or each.failed else ["Nothing to get by hand."]
        lines.append("")
    return "\n".join(lines)


def write_needed(path: Path, done: Sequence[Prepared]) -> Path:
    """The needed list at ``path`` and each item list beside it (``<root>/<benchmark>/<list_file>``)."""
    for each in done:
        for needed in each.plan.needed:
            if needed.list_file:
                write_atomically(path.parent / each.name / needed.list_file, "".join(f"{item}\n"
                                                                                      for item in needed.items))
    return write_atomically(path, needed_text(done, lambda name: path.parent / name))
