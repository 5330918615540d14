"""What users and harnesses see of the suite, read as they read it, and the snapshots it is compared to.

Issue 50 moves the package's internals; nothing a user sees may change. The snapshots in
``user_surface/`` (one readable JSON file per kind) were taken from main at 5a0c717, before the first
move. The readers below go through the user's doors: the task YAML folders as lmms-eval and lm-eval
index and build them (``LMMS_EVAL_PLUGINS=lmms_egoplan``; lm-eval's ``--include_path``), lmms-eval's
model registry, the ``lmms-egoplan`` console script's parser, docs/running.md, the environment the
package reads, the files a run writes. The few internal look-ups that cannot be avoided are each one
small function marked "INTERNAL", to re-point when the code they name moves.

``LMMS_EGOPLAN_UPDATE_SNAPSHOTS=1`` rewrites the snapshots instead of comparing (an intended change:
say so in CHANGELOG.md).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib.util
import json
import os
import re
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

SNAPSHOTS = Path(__file__).parent / "user_surface"
UPDATE_VARIABLE = "LMMS_EGOPLAN_UPDATE_SNAPSHOTS"
CHECKOUT = Path(__file__).resolve().parents[2]
MASKED = "<masked>"


def compare_with_snapshot(kind: str, found: Any) -> None:
    """``found`` equals the snapshot ``user_surface/<kind>.json``, else a failure with the diff and how to
    accept the change; with LMMS_EGOPLAN_UPDATE_SNAPSHOTS=1 the snapshot is rewritten instead."""
    __tracebackhide__ = True  # the failure is the diff, not this function's code
    path = SNAPSHOTS / f"{kind}.json"
    text = json.dumps(found, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if os.environ.get(UPDATE_VARIABLE) == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8") if path.exists() else ""
    if text != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), text.splitlines(), f"{path.name} (snapshot)",
                                              f"{path.name} (now)", lineterm="", n=2))
        raise AssertionError(f"What users see changed ({kind}):\n{diff}\n\nIf the change is intended, rewrite the "
                             f"snapshot with {UPDATE_VARIABLE}=1 and the same pytest command, and say so in "
                             f"CHANGELOG.md.")


# --- the package, where lmms-eval and lm-eval find it ------------------------------------------------


def package_folder() -> Path:
    return Path(importlib.util.find_spec("lmms_egoplan").submodule_search_locations[0])


def lmms_eval_task_folder() -> str:
    """The folder lmms-eval adds to its include path for ``LMMS_EVAL_PLUGINS=lmms_egoplan``
    (``lmms_eval/__main__.py:cli_evaluate_single`` finds ``<plugin>.tasks`` so)."""
    return importlib.util.find_spec("lmms_egoplan.tasks").submodule_search_locations[0]


def lm_eval_task_folder() -> str:
    """The folder docs/running.md tells lm-eval users to pass with ``--include_path``."""
    return importlib.util.find_spec("lmms_egoplan.lm_eval_tasks").submodule_search_locations[0]


def task_index(harness: str) -> dict[str, str]:
    """name -> kind (task, group, tag) of every name the harness's index holds from the suite's folder."""
    if harness == "lmms_eval":
        from lmms_eval.tasks import TaskManager

        manager = TaskManager(include_path=lmms_eval_task_folder(), include_defaults=False)
    else:
        from lm_eval.tasks import TaskManager

        manager = TaskManager(include_path=lm_eval_task_folder(), include_defaults=False)
    return {name: index_kind(entry) for name, entry in manager.task_index.items()}


def index_kind(entry) -> str:
    """What an index entry is: task, group or tag (lmms-eval's ``type``, lm-eval's ``kind``; a YAML task whose
    ``class:`` the harness imports counts as a task)."""
    kind = entry["type"] if isinstance(entry, dict) else entry.kind.name.lower()
    return "task" if kind.endswith("task") else kind


# --- settings a built task records, metrics, and the environment read while building -----------------

# Metadata values that are not defaults: the judge's reply names its served model and fingerprint; where the
# documents came from (``data_read_from``) names the test's data files and their hashes.
MASKED_KEYS = ("judge_served_model", "judge_system_fingerprint", "data_read_from")


def recorded_settings(metadata: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A built task's config metadata, with the values the test set masked (the data paths, the loopback judge's
    address and model: a setting whose value is that of a ``<PREFIX>_<SETTING>`` variable in ``env``) and those of
    the judge's reply; the rest are the defaults a user gets (the judge's prompt hash of each rubric among them)."""
    def set_by_test(key: str, value: Any) -> bool:
        return any(name.endswith(f"_{key.upper()}") and given.lower() == str(value).lower()
                   for name, given in env.items())

    return {key: MASKED if key in MASKED_KEYS or set_by_test(key, value) else without_install_folder(jsonable(value))
            for key, value in metadata.items()}


def without_install_folder(value: Any) -> Any:
    """A path into the suite's task folders (lm-eval's ``config_source``) from the folder lm-eval was given."""
    if isinstance(value, str):
        for name, folder in (("<lmms_egoplan.tasks>", lmms_eval_task_folder()),
                             ("<lmms_egoplan.lm_eval_tasks>", lm_eval_task_folder())):
            value = value.replace(folder, name)
    return value


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def demo_environment(root: Path, resources: ExitStack) -> dict[str, str]:
    """INTERNAL (the demo's own look-up, ``lmms_egoplan.demo.smoke.suites``): the settings pointing every
    benchmark's tasks at the demo's synthetic data and loopback judges, as ``lmms-egoplan smoke`` builds them."""
    from lmms_egoplan.demo.smoke import suites

    return {key: value for name, build in suites().items() for key, value in build(root / name, resources).env.items()}


@contextmanager
def environment_reads() -> Iterator[set[str]]:
    """The names of the environment variables the package's own code reads (``os.environ[...]``, ``.get``,
    ``in``) while the block runs; reads by lmms-eval, lm-eval or libraries, and the package's scans of every
    variable (the secrets it keeps out of logs: names ending in API_KEY, _TOKEN, _SECRET), are not counted."""
    environ_class = type(os.environ)
    original = environ_class.__getitem__
    package = str(package_folder())
    # os and _collections_abc (frozen modules in Python 3.11: "<frozen os>") stand between a read and its reader
    library = {os.__file__, sys.modules["_collections_abc"].__file__, "<frozen os>", "<frozen _collections_abc>"}
    names: set[str] = set()

    def recording(self, key):
        frame, scanning = sys._getframe(1), False
        while frame and frame.f_code.co_filename in library:
            scanning = scanning or frame.f_code.co_name == "__iter__"  # a scan of every variable (secrets), not a read
            frame = frame.f_back
        if frame and frame.f_code.co_filename.startswith(package) and not scanning:
            names.add(key)
        return original(self, key)

    environ_class.__getitem__ = recording
    try:
        yield names
    finally:
        environ_class.__getitem__ = original


def environment_names_in_code() -> list[str]:
    """The environment variables the package's code names where it reads one: a string (or a module constant
    holding one) given to ``os.environ[...]``, ``environ.get``, ``os.getenv``."""
    found = set()
    for path in package_folder().rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                     for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                key = node.slice
            elif isinstance(node, ast.Call) and node.args and re.search(r"(environ\.get|getenv)$",
                                                                        ast.unparse(node.func)):
                key = node.args[0]
            else:
                continue
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.add(key.value)
            elif isinstance(key, ast.Name) and key.id in constants:
                found.add(constants[key.id])
    return sorted(found)


# --- the lmms-egoplan command -------------------------------------------------------------------------


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each ``lmms-egoplan`` subcommand's parser, as the console script builds it for ``lmms-egoplan <command>``
    (it adds a command's arguments only when that command is named): "" is the top-level parser."""
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts", name="lmms-egoplan")
    main = script.load()
    original = argparse.ArgumentParser.parse_args

    def parsed(argv):
        argparse.ArgumentParser.parse_args = lambda self, *args, **kwargs: (_ for _ in ()).throw(_Parsed(self))
        try:
            main(argv)
        except _Parsed as caught:
            return caught.parser
        finally:
            argparse.ArgumentParser.parse_args = original
        raise AssertionError(f"lmms-egoplan {argv} did not parse its arguments")

    top = parsed([])
    (commands,) = [action for action in top._actions if isinstance(action, argparse._SubParsersAction)]
    found = {"": top}
    for name in commands.choices:
        (subcommands,) = [a for a in parsed([name])._actions if isinstance(a, argparse._SubParsersAction)]
        found[name] = subcommands.choices[name]
    return found


def stated_default(help_text: str | None) -> str | None:
    """What a flag's help says its default is: the text of its "(default: ...)", parentheses balanced."""
    start = (help_text or "").find("(default: ")
    if start < 0:
        return None
    depth, position = 0, start
    for position, character in enumerate(help_text[start:], start):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0:
            break
    return help_text[start + len("(default: "):position]


def flags(parser: argparse.ArgumentParser) -> dict[str, dict]:
    """A parser's arguments: name -> how it is given and its default."""
    found = {}
    for action in parser._actions:
        if isinstance(action, (argparse._SubParsersAction, argparse._HelpAction)):
            continue
        name = ", ".join(action.option_strings) or action.dest
        found[name] = jsonable({
            "action": type(action).__name__, "default": action.default, "nargs": action.nargs,
            "required": action.required, "choices": list(action.choices) if action.choices else None,
            "type": getattr(action.type, "__name__", None), "stated_default": stated_default(action.help)})
    return found


# --- exit statuses --------------------------------------------------------------------------------------


def documented_exit_statuses() -> list[list[str]]:
    """docs/running.md's exit-status table: [status, when] per row."""
    text = (CHECKOUT / "docs" / "running.md").read_text(encoding="utf-8")
    table = text[text.index("**Exit status**"):]
    rows = []
    for line in table.splitlines()[1:]:
        if rows and not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if cells and cells[0].isdigit():
            rows.append(cells[:2])
    return rows


def exit_status_constants() -> dict[str, int]:
    """INTERNAL (re-point after the move): the constants behind the documented statuses 1 and 4 (2 is argparse's
    and the comma check's, 3 the ``judge_failed_exit_status`` setting's default, in the settings snapshot)."""
    from lmms_egoplan.compat import durability
    from lmms_egoplan.harness import failed_requests

    return {"failed run": durability._FAILED_RUN_EXIT_STATUS,
            "failed model requests": failed_requests.FAILED_REQUESTS_EXIT_STATUS}


# --- results files and the files beside them ----------------------------------------------------------

DATE_TIME = re.compile(r"\d{8}_\d{6}(\.\d+)?|\d{4}-\d{2}-\d{2}T\d{2}[-:]\d{2}[-:]\d{2}(\.\d+)?")


def masked_file_name(name: str) -> str:
    """A file name with its date-time masked."""
    return DATE_TIME.sub("<date-time>", name)


def run_structure(folder: Path, varying: tuple[str, ...]) -> dict[str, Any]:
    """What a run's output folder holds, its values masked: the files (date-time and the model's folder masked),
    the results file's tasks, groups, metric names, versions and recorded settings, the keys of each JSON-lines
    file (two levels deep). ``varying``: strings (the work folder, the loopback judge's address) whose values
    are masked in the recorded settings, which are otherwise the defaults."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    found: dict[str, Any] = {"files": sorted({masked_file_name(path.name) for path in files}), "jsonl keys": {}}
    for path in files:
        # lmms-eval names its results file <date-time>_results.json, lm-eval results_<date-time>.json
        if masked_file_name(path.name) in ("<date-time>_results.json", "results_<date-time>.json"):
            found["results"] = results_structure(json.loads(path.read_text(encoding="utf-8")), varying)
        elif path.suffix == ".jsonl":
            keys = found["jsonl keys"].setdefault(masked_file_name(path.name), set())
            for line in path.read_text(encoding="utf-8").splitlines():
                record = json.loads(line)
                keys.update(record)
                keys.update(f"{key}.{inner}" for key, value in record.items() if isinstance(value, dict)
                            for inner in value)
    found["jsonl keys"] = {name: sorted(keys) for name, keys in found["jsonl keys"].items()}
    return found


def results_structure(results: Mapping[str, Any], varying: tuple[str, ...]) -> dict[str, Any]:
    """A results file's keys, and the values of those that name tasks, groups, metrics, versions and settings;
    the others vary from run to run or with the machine (times, library versions, git hashes, the model's path,
    the synthetic data's counts, scores): only their presence is compared."""
    def settings(metadata: Mapping[str, Any]) -> dict[str, Any]:
        return {key: MASKED if key in MASKED_KEYS or any(part in str(value) for part in varying)
                else without_install_folder(jsonable(value)) for key, value in metadata.items()}

    return {"keys": sorted(results),
            "metrics": {task: sorted(metrics) for task, metrics in results["results"].items()},
            "groups": {group: sorted(metrics) for group, metrics in results.get("groups", {}).items()},
            "group_subtasks": results.get("group_subtasks", {}), "versions": results.get("versions", {}),
            "higher_is_better": results.get("higher_is_better", {}),
            "recorded settings": {task: settings(config.get("metadata") or {})
                                  for task, config in results.get("configs", {}).items()}}
