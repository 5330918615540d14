"""The end-to-end tier's prelude to each run it forks from its warm Python (``conftest.warm_python``): each lmms-eval
run indexes lmms-eval's own 1,927 installed task YAMLs, and each lm-eval run lm-eval's 14,683, with the pure-Python
YAML parser (5-8 s and about 17 s of CPU a run on this machine: most of the tier's time). Here a YAML file under the
harness's own installed task folder, unchanged, is parsed once for the tier: its parsed config, stored by the first
run that parsed it, is served to the runs after it. Everything else is the harness's: which files it reads, what it
makes of each config (kinds, groups, tags, the warnings it logs), every YAML outside its folder (the suite's, a test's)
and every load that resolves functions. The folder changed (any file's size or time) drops the memo.

The memo lies in ``MEMO_FOLDER_VARIABLE``'s folder, a file per harness folder (a run of a scratch lmms-eval keeps its
own); ``LMMS_EGOPLAN_E2E_FRESH_INDEX=1`` turns it off for a tier (conftest). The warm Python runs it before the runs
it forks and before those it refuses (a run of another ``HF_HOME``, ``PYTHONPATH``), which start plain. Imports
nothing of either harness: the functions are wrapped when the run imports their modules.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.abc
import importlib.machinery
import os
import pickle
import sys
from pathlib import Path

MEMO_FOLDER_VARIABLE = "LMMS_EGOPLAN_E2E_TASK_INDEX_MEMO"


class ParsedYamlMemo:
    """Parsed configs of the YAML files under ``task_folder``, kept in ``memo_file`` (written atomically at the run's
    end when the run parsed any the file lacked)."""

    def __init__(self, task_folder: Path, memo_file: Path):
        self.task_folder = f"{task_folder.resolve()}{os.sep}"
        self.memo_file = memo_file
        self.signature = _folder_signature(task_folder)
        self.configs: dict[tuple, bytes] = {}
        self.parsed, self.served = 0, 0
        try:
            stored = pickle.loads(memo_file.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError):
            stored = None
        if isinstance(stored, dict) and stored.get("signature") == self.signature:
            self.configs = stored["configs"]
        atexit.register(self.save)

    def wrap(self, load, key_of):
        """``load`` serving each memoised call (``memo``: this memo, counting the calls it ``parsed`` and ``served``;
        lmms-eval's includes go through it too): ``key_of(args, kwargs)`` is the call's key, None for a call to pass
        through (a load that resolves functions); a file outside the folder passes too."""

        def memoised(*args, **kwargs):
            key = key_of(args, kwargs)
            if key is None or not key[0].startswith(self.task_folder):
                return load(*args, **kwargs)
            if key in self.configs:
                self.served += 1
                return pickle.loads(self.configs[key])
            config = load(*args, **kwargs)  # an exception passes, unstored: the next run parses the file again
            self.configs[key] = pickle.dumps(config)
            self.parsed += 1
            return config

        memoised.memo = self
        return memoised

    def save(self) -> None:
        if not self.parsed:
            return
        partial = self.memo_file.with_name(f"{self.memo_file.name}.{os.getpid()}.partial")
        partial.write_bytes(pickle.dumps({"signature": self.signature, "configs": self.configs}))
        os.replace(partial, self.memo_file)


def _folder_signature(folder: Path) -> list[tuple[str, int, int]]:
    files = []
    for root, _, names in os.walk(folder):
        for name in names:
            if name.endswith((".yaml", ".yml")):
                stat = os.stat(os.path.join(root, name))
                files.append((os.path.join(root, name), stat.st_size, stat.st_mtime_ns))
    return sorted(files)


def _lmms_eval_key(args, kwargs):
    """``lmms_eval.utils.load_yaml_config(yaml_path=None, yaml_config=None, yaml_dir=None, mode="full")``: the task
    index's loads are ``mode="simple"`` of a path (``!function`` tags ignored)."""
    names = ("yaml_path", "yaml_config", "yaml_dir", "mode")
    call = {**dict(zip(names, args)), **kwargs}
    if call.get("mode", "full") != "simple" or call.get("yaml_config") is not None or call.get("yaml_dir") is not None:
        return None
    return (os.path.abspath(call["yaml_path"]), "simple")


def _lm_eval_key(args, kwargs):
    """``lm_eval.tasks._yaml_loader.load_yaml(path, *, resolve_func=True, recursive=True, _seen=None)`` as the task
    index calls it: ``resolve_func=False``."""
    if kwargs.get("resolve_func", True) or kwargs.get("_seen") is not None or len(args) != 1:
        return None
    return (str(Path(args[0]).expanduser().resolve()), "unresolved", kwargs.get("recursive", True))


class _WrapWhenImported(importlib.abc.MetaPathFinder):
    """Wraps a module's function once the run imports the module (``patches``: module name -> what to do to it)."""

    def __init__(self, patches):
        self.patches = patches

    def find_spec(self, name, path, target=None):
        if name not in self.patches:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_patch(module):
            exec_module(module)
            self.patches.pop(name)(module)

        spec.loader.exec_module = exec_then_patch
        return spec


def _memoise_lmms_eval(utils_module) -> None:
    folder = Path(utils_module.__file__).parent / "tasks"
    memo = ParsedYamlMemo(folder, _memo_file("lmms_eval", folder))
    utils_module.load_yaml_config = memo.wrap(utils_module.load_yaml_config, _lmms_eval_key)


def _memoise_lm_eval(index_module) -> None:
    folder = Path(index_module.__file__).parent
    memo = ParsedYamlMemo(folder, _memo_file("lm_eval", folder))
    index_module.load_yaml = memo.wrap(index_module.load_yaml, _lm_eval_key)


def _memo_file(harness: str, folder: Path) -> Path:
    """The memo of ``harness``'s task ``folder``: one file each, so that runs of two copies do not drop each other's."""
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    return Path(os.environ[MEMO_FOLDER_VARIABLE]) / f"{harness}-{digest}.pickle"


if os.environ.get(MEMO_FOLDER_VARIABLE):
    sys.meta_path.insert(0, _WrapWhenImported({"lmms_eval.utils": _memoise_lmms_eval,
                                               "lm_eval.tasks._index": _memoise_lm_eval}))
