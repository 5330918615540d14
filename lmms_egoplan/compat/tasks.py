"""lmms-eval workarounds about a run's tasks: finding the suite's tasks, building and checking the suite's
tasks before the model loads, and what lmms-eval does not give a suite task (its model, an unretried
``process_results``). Guards and the switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable, Mapping, NamedTuple

from lmms_egoplan.compat import SUITE_BACKENDS, SUITE_PLUGIN, affected_release, switched_off
from lmms_egoplan.compat.durability import (
    RunStopped,
    join_response_cache,
    keep_responses_by_default,
    resume_sampled_runs,
)
from lmms_egoplan.compat.replacements import add_layer, has_layer, note_in_place
from lmms_egoplan.contract.adapter import ChecksBeforeTheModel, JoinsARun
from lmms_egoplan.core.run import SuiteRun, hand_over


def enable_plugin_task_discovery() -> bool:
    """Make ``LMMS_EVAL_PLUGINS=<pkg>`` index ``<pkg>.tasks`` as lmms-eval documents.

    Bug: ``lmms_eval/__main__.py:cli_evaluate_single`` builds its ``TaskManager`` first and only
    then appends the plugin task folders to ``args.include_path``, which nothing reads afterwards:
    ``--tasks <plugin task>`` fails with "Tasks not found". Fix: ``TaskManager.__init__`` adds the
    plugin folders itself (de-duplicated, so a lmms-eval that passes them is unaffected).
    Returns whether the workaround is in place.
    Retired by docs/upstream/02-plugin-tasks.patch.
    """
    if switched_off(_PLUGIN_TASKS):
        return False
    if has_layer(_PLUGIN_TASKS, *_TASK_MANAGER_INIT):
        return True
    if not affected_release():
        return False

    def include_plugin_folders(init, self, verbosity="INFO", include_path=None, include_defaults=True, model_name=None):
        paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
        for folder in plugin_task_folders():
            if folder not in paths:
                paths.append(folder)
        init(self, verbosity, paths or None, include_defaults, model_name)

    add_layer(_PLUGIN_TASKS, *_TASK_MANAGER_INIT, include_plugin_folders)
    return True


_PLUGIN_TASKS = "tasks.enable_plugin_task_discovery"
_TASK_MANAGER_INIT = ("lmms_eval.tasks", "TaskManager.__init__")


def plugin_task_folders(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Task folders of the packages listed in ``LMMS_EVAL_PLUGINS`` (those that have one)."""
    folders = []
    for plugin in filter(None, (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))):
        spec = importlib.util.find_spec(f"{plugin}.tasks")
        if spec is not None and spec.submodule_search_locations:
            folders.append(list(spec.submodule_search_locations)[0])
    return folders


def check_suite_tasks_before_the_model() -> bool:
    """Build the suite's tasks of a run, and check what they can check, before lmms-eval loads the model.

    Gap: ``lmms_eval/evaluator.py:simple_evaluate`` builds the model (``get_model(...)
    .create_from_arg_string``) before the tasks (``get_task_dict``): a misspelt setting, a missing
    annotation file or video, a backend that cannot score a task or a judge that does not answer is
    found only once the weights are in memory, minutes into a run of a 72B model on several GPUs.
    Fix: in a run that uses the suite, ``simple_evaluate`` first builds the suite's tasks it names
    with lmms-eval's own ``get_task_dict`` (settings resolved, records and media checked, judge
    settings checked) and asks each what depends on the run (``check_before_the_model(cli_args)``:
    the backend can serve it and honours its request options, the output folder is free, the judge
    answers; a declared interface, ``contract.adapter.ChecksBeforeTheModel``); lmms-eval's own
    ``get_task_dict`` call of that run then gets these task objects, built once, and builds the other tasks as
    before. The call is one run of the suite: its facts are kept on a ``core.run.SuiteRun`` made for it, which its
    suite tasks, its backend, its response cache and its results writer are handed (``_evaluate_as_one_run``).
    Returns whether the workaround is in place.
    Retired by docs/upstream/05-tasks-before-the-model.patch (the reordering; the task hook stays the suite's).
    """
    import inspect

    from lmms_eval import evaluator

    if switched_off(_TASKS_FIRST):
        return False
    if has_layer(_TASKS_FIRST, *_SIMPLE_EVALUATE):
        return True
    if not affected_release():
        return False
    signature = inspect.signature(evaluator.simple_evaluate)

    def tasks_first(simple_evaluate, *args, **kwargs):
        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        call = arguments.arguments
        stamp = call["datetime_str"]  # the date-time of the call's results files names the suite's side files too
        run = SuiteRun(stamp=stamp.replace(":", "-") if isinstance(stamp, str) else None)
        prebuilt = _suite_tasks_checked(run, call["model"], call["tasks"], call["task_manager"],
                                        call["force_simple"], call["cli_args"])
        if prebuilt:
            call["use_cache"] = keep_responses_by_default(run, call["use_cache"], call["cli_args"])
            resume_sampled_runs(run, [call[seed] for seed in ("random_seed", "numpy_random_seed",
                                                              "torch_random_seed", "fewshot_random_seed")])
        elif call["model"] not in SUITE_BACKENDS:
            return simple_evaluate(*args, **kwargs)
        # A suite backend on lmms-eval's own tasks is a run of the suite too: its protocol changes are recorded.
        if call["evaluation_tracker"] is not None:  # the CLI's results writer, which writes after the call returns
            hand_over(run, call["evaluation_tracker"])
        return _evaluate_as_one_run(simple_evaluate, arguments, run, prebuilt or _Prebuilt(set(), {}))

    add_layer(_TASKS_FIRST, *_SIMPLE_EVALUATE, tasks_first)
    return True


def _evaluate_as_one_run(simple_evaluate: Callable, arguments: Any, run: SuiteRun, prebuilt: _Prebuilt) -> Any:
    """lmms-eval's ``simple_evaluate`` call (its bound ``arguments``), with the suite's ``prebuilt`` tasks and
    ``run`` handed to what the call builds: its backend and response cache, as ``simple_evaluate`` hands them to
    ``evaluate``; a stop (SIGTERM, Ctrl-C) that passes carries ``run``, so that it says what the run kept."""
    from lmms_eval import evaluator

    build_tasks, run_evaluation = evaluator.get_task_dict, evaluator.evaluate

    def get_task_dict(task_name_list, task_manager=None, task_type="simple"):
        others = [task for task in task_name_list if not (isinstance(task, str) and task in prebuilt.names)]
        built = build_tasks(others, task_manager, task_type) if others else {}
        _joined(run, built)  # the suite's adapter in a folder of its own (--include_path) joins too
        return {**prebuilt.tasks, **built}

    def evaluate(*args, **kwargs):  # simple_evaluate names each argument
        if isinstance(kwargs.get("lm"), JoinsARun):
            kwargs["lm"].join_run(run)
        if kwargs.get("response_cache") is not None:
            join_response_cache(run, kwargs["response_cache"])
        return run_evaluation(*args, **kwargs)

    evaluator.get_task_dict, evaluator.evaluate = get_task_dict, evaluate  # for this call only
    try:
        return simple_evaluate(*arguments.args, **arguments.kwargs)
    except (RunStopped, KeyboardInterrupt) as stopped:  # SIGTERM's, Ctrl-C's
        stopped.run = run
        raise
    finally:
        evaluator.get_task_dict, evaluator.evaluate = build_tasks, run_evaluation


_TASKS_FIRST = "tasks.check_suite_tasks_before_the_model"
_SIMPLE_EVALUATE = ("lmms_eval.evaluator", "simple_evaluate")


def _suite_task_names(task_manager: Any) -> set[str]:
    """Task and group names the run's task index has from the suite's task folder, and its tags of only those: read
    from the index lmms-eval built (reading the folder's YAML files again cost each run some 0.3 s)."""
    spec = importlib.util.find_spec(f"{SUITE_PLUGIN}.tasks")
    if not spec or not spec.submodule_search_locations:
        return set()
    inside = os.path.join(os.path.realpath(list(spec.submodule_search_locations)[0]), "")
    index = task_manager.task_index
    folders = {os.path.dirname(entry["yaml_path"]) for entry in index.values() if isinstance(entry["yaml_path"], str)}
    # resolved once per folder (a few hundred), not per file (some two thousand): 0.04 s instead of 0.13 s
    resolved = {folder: os.path.join(os.path.realpath(folder), "") for folder in folders}
    names = {name for name, entry in index.items() if isinstance(entry["yaml_path"], str)
             and resolved[os.path.dirname(entry["yaml_path"])].startswith(inside)}
    return names | {name for name, entry in index.items() if entry["type"] == "tag" and set(entry["task"]) <= names}


class _Prebuilt(NamedTuple):
    names: set[str]  # the suite's task and group names the run named
    tasks: dict  # what lmms-eval's get_task_dict built of them


def _suite_tasks_checked(run: SuiteRun, model: Any, tasks: Any, task_manager: Any, force_simple: bool,
                         cli_args: Any) -> _Prebuilt | None:
    """The suite's tasks among ``tasks``, built, joined to ``run`` and checked
    (``check_suite_tasks_before_the_model``); None where the run names none, or passes a model object (it is loaded
    already)."""
    if not isinstance(model, str) or not isinstance(tasks, list) or task_manager is None:
        return None
    suite_tasks = _suite_task_names(task_manager)
    names = {task for task in tasks if isinstance(task, str) and task in suite_tasks}
    if not names:
        return None
    from lmms_eval.models import MODEL_REGISTRY_V2
    from lmms_eval.tasks import get_task_dict

    task_type = MODEL_REGISTRY_V2.resolve(model, force_simple=bool(force_simple)).model_type
    built = get_task_dict(sorted(names, key=tasks.index), task_manager, task_type)
    for task in _joined(run, built):
        if isinstance(task, ChecksBeforeTheModel):
            task.check_before_the_model(cli_args)
    return _Prebuilt(names, built)


def _joined(run: SuiteRun, task_dict: Mapping) -> list:
    """The tasks of ``task_dict`` (groups flattened), those that join a run joined to ``run``."""
    tasks = _leaf_tasks(task_dict)
    for task in tasks:
        if isinstance(task, JoinsARun):
            task.join_run(run)
    return tasks


def _leaf_tasks(task_dict: Mapping) -> list:
    leaves = []
    for value in task_dict.values():
        leaves += _leaf_tasks(value) if isinstance(value, Mapping) else [value]
    return leaves


def unretried_process_results(method: Callable) -> Callable:
    """``ConfigurableTask.process_results`` without the retry lmms-eval wraps it in.

    Bug: ``lmms_eval/api/task.py`` decorates ``ConfigurableTask.process_results`` with tenacity's
    ``@retry`` (5 tries, 2 s apart), so a deterministic scoring error costs 8 s per document and
    surfaces as a ``RetryError`` that hides its cause. Fix: the suite's tasks call the undecorated
    function, so a scoring error surfaces at once, by name. Other tasks keep lmms-eval's retry.
    No patch retires it: suite policy (docs/upstream/README.md; 07 keeps the retry).
    """
    wrapped = getattr(method, "__wrapped__", None)
    if not (hasattr(method, "retry") and wrapped is not None and affected_release()) \
            or switched_off("tasks.unretried_process_results"):
        return method
    note_in_place("tasks.unretried_process_results")
    return wrapped


def bind_class_task_to_backend(task: Any, cli_args: Any) -> None:
    """Give a ``class:`` task the model name lmms-eval did not give it, before requests are built.

    Bug: ``lmms_eval/tasks/__init__.py:TaskManager._load_individual_task_or_group`` constructs
    ``class:`` tasks as ``config["class"](config=config)``, without ``model_name``, while YAML tasks
    get it: model-specific ``lmms_eval_specific_kwargs`` presets never apply to them. Fix: learn
    the model from the CLI arguments lmms-eval hands every task (``task.args``) and prepare the
    model-specific config then; a task that already has its model name is left as it is.
    Retired by docs/upstream/06-class-task-model-name.patch.
    """
    model = getattr(cli_args, "model", None)
    if not isinstance(model, str) or getattr(task, "model_name", None) == model or not affected_release() \
            or switched_off("tasks.bind_class_task_to_backend"):
        return
    note_in_place("tasks.bind_class_task_to_backend")
    task.model_name = model
    task._prepare_model_specific_config()
