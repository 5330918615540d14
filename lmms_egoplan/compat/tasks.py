"""lmms-eval workarounds about a run's tasks: finding the suite's tasks, saying what to type where a
task is not found or a built-in shadows a suite task, building and checking the suite's tasks before
the model loads, and what lmms-eval does not give a suite task (its model, an unretried
``process_results``). Guards and the switch table: ``lmms_egoplan.compat``."""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable, Mapping, NamedTuple

from loguru import logger

from lmms_egoplan.catalogue import suite_counterparts
from lmms_egoplan.compat import (
    SUITE_BACKENDS,
    SUITE_PLUGIN,
    affected_release,
    lmms_eval_source,
    suite_plugin_enabled,
    switched_off,
)
from lmms_egoplan.compat.durability import (
    RunStopped,
    cli_swallows_evaluation_errors,
    fail_runs_with_failed_tasks,
    join_response_cache,
    keep_responses_by_default,
    resume_sampled_runs,
)
from lmms_egoplan.compat.replacements import add_layer, has_layer, note_in_place
from lmms_egoplan.compat.secrets import keep_api_keys_out_of_the_run_summary
from lmms_egoplan.contract.adapter import ChecksBeforeTheModel, JoinsARun
from lmms_egoplan.core.run import SuiteRun, hand_over


def enable_plugin_task_discovery() -> bool:
    """Make ``LMMS_EVAL_PLUGINS=<pkg>`` index ``<pkg>.tasks`` as lmms-eval documents.

    Bug: ``lmms_eval/__main__.py:cli_evaluate_single`` builds its ``TaskManager`` first and only
    then appends the plugin task folders to ``args.include_path``, which nothing reads afterwards:
    ``--tasks <plugin task>`` fails with "Tasks not found". Fix: ``TaskManager.__init__`` adds the
    plugin folders itself (de-duplicated, so a lmms-eval that passes them is unaffected).
    Returns whether the workaround is in place.
    """
    if switched_off(_PLUGIN_TASKS):
        return False
    if has_layer(_PLUGIN_TASKS, *_TASK_MANAGER_INIT):
        return True
    if not (affected_release() and _plugin_folders_reach_the_index_too_late()):
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

def _plugin_folders_reach_the_index_too_late(task_manager_init: str | None = None,
                                             cli_evaluate_single: str | None = None) -> bool:
    """Behaviour check without indexing every task (seconds): neither the TaskManager reads
    ``LMMS_EVAL_PLUGINS`` nor the CLI adds the plugin folders before it builds the TaskManager."""
    task_manager_init = task_manager_init or lmms_eval_source("lmms_eval.tasks", "TaskManager.__init__")
    cli_evaluate_single = cli_evaluate_single or lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single")
    if "LMMS_EVAL_PLUGINS" in task_manager_init:
        return False
    plugins, index = cli_evaluate_single.find("LMMS_EVAL_PLUGINS"), cli_evaluate_single.find("TaskManager(")
    return plugins < 0 or plugins > index

def plugin_task_folders(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Task folders of the packages listed in ``LMMS_EVAL_PLUGINS`` (those that have one)."""
    folders = []
    for plugin in filter(None, (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))):
        spec = importlib.util.find_spec(f"{plugin}.tasks")
        if spec is not None and spec.submodule_search_locations:
            folders.append(list(spec.submodule_search_locations)[0])
    return folders

def watch_task_selection() -> bool:
    """Learn from the run's ``--tasks`` whether it uses the suite, at the one moment lmms-eval has set
    up its log and built nothing yet, and act for runs that do.

    ``TaskManager.match_tasks`` is the call ``lmms_eval/__main__.py:cli_evaluate_single`` makes with
    the run's task names, after ``cli_evaluate`` has reset every log sink and before
    ``evaluator.simple_evaluate`` builds the model. A run uses the suite when ``LMMS_EVAL_PLUGINS``
    names it, ``--model`` is one of its backends, or a task it names is one of its tasks; then the
    wrapper arms the exit guard again (``fail_runs_with_failed_tasks``: the reset removed it, and a
    backend that fails while it is built would otherwise end the run with status 0), explains the
    tasks not found (``explain_missing_tasks``), points out lmms-eval built-ins that shadow a suite
    task (``hint_suite_counterparts``), has the suite's tasks checked before the model loads
    (``check_suite_tasks_before_the_model``) and the run's summary line printed without its API key
    (``secrets.keep_api_keys_out_of_the_run_summary``). Other runs get lmms-eval's matches unchanged.
    Returns whether the wrapper is in place.
    """
    if has_layer(_WATCH, *_MATCH_TASKS):
        return True
    if not affected_release():
        return False

    def watch(match_tasks, self, task_list):
        matched = match_tasks(self, task_list)
        names = [task_list] if isinstance(task_list, str) else list(task_list)
        suite_tasks = _suite_task_names(self)
        if not (suite_plugin_enabled() or getattr(self, "model_name", None) in SUITE_BACKENDS
                or set(names) & suite_tasks):
            return matched
        fail_runs_with_failed_tasks()
        explain_missing_tasks(names, matched, self.all_tasks, suite_tasks)
        hint_suite_counterparts(names, matched, suite_tasks, _lmms_evals_own(self, names, suite_tasks))
        check_suite_tasks_before_the_model()
        keep_api_keys_out_of_the_run_summary()
        return matched

    add_layer(_WATCH, *_MATCH_TASKS, watch)
    return True

_WATCH = "tasks.watch_task_selection"
_MATCH_TASKS = ("lmms_eval.tasks", "TaskManager.match_tasks")

def explain_missing_tasks(names: list[str], matched: list, indexed: list[str], suite_tasks: set[str]) -> None:
    """Make a run of the suite that names a task lmms-eval cannot find fail, saying what to type.

    Bug: ``lmms_eval/__main__.py:cli_evaluate_single`` logs "Tasks were not found" and raises, and
    ``cli_evaluate`` swallows the error: the run exits 0, without a suggestion for a near miss
    (``egoplan_vall``), and a suite task named without ``LMMS_EVAL_PLUGINS=lmms_egoplan`` gets the
    same answer as a name that exists nowhere. Fix (in a run that uses the suite,
    ``watch_task_selection``): ``TasksNotFoundError`` naming each missing task with the closest
    names of lmms-eval's index and the suite's, and the exact line that sets ``LMMS_EVAL_PLUGINS``
    where a suite task is meant but the variable misses it; the run exits 1
    (``fail_runs_with_failed_tasks``).
    """
    if switched_off("tasks.explain_missing_tasks"):
        return
    missing = [name for name in names if name not in matched and "*" not in name and not os.path.isfile(name)]
    if missing and _cli_swallows_missing_tasks():
        note_in_place("tasks.explain_missing_tasks")
        raise TasksNotFoundError(missing_tasks_message(missing, indexed, suite_tasks))

class TasksNotFoundError(ValueError):
    """``--tasks`` names a task that lmms-eval cannot find (lmms_egoplan.core.errors.InputError is not
    imported here: this module loads with lmms-eval's entry points)."""

def _cli_swallows_missing_tasks(cli_evaluate_single: str | None = None) -> bool:
    cli_evaluate_single = cli_evaluate_single or lmms_eval_source("lmms_eval.__main__", "cli_evaluate_single")
    return "match_tasks(" in cli_evaluate_single and cli_swallows_evaluation_errors()

def _suite_task_folder() -> str | None:
    spec = importlib.util.find_spec(f"{SUITE_PLUGIN}.tasks")
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None

def _suite_task_names(task_manager: Any) -> set[str]:
    """Task, group and tag names of the suite's task folder, indexed as lmms-eval indexes any folder."""
    folder = _suite_task_folder()
    return set(task_manager._get_task_and_group(folder)) if folder else set()

def _lmms_evals_own(task_manager: Any, names: list[str], suite_tasks: set[str]) -> dict[str, str]:
    """The suite's task names of ``names`` that lmms-eval's index gives to a task of its own (a release that carries
    a task of the same name): {name: the YAML lmms-eval runs}."""
    folder = os.path.realpath(_suite_task_folder() or "") + os.sep
    found = {name: task_manager.task_index.get(name, {}).get("yaml_path") for name in names if name in suite_tasks}
    return {name: str(path) for name, path in found.items()
            if isinstance(path, (str, os.PathLike)) and not os.path.realpath(path).startswith(folder)}

def plugin_variable_line(environ: Mapping[str, str] = os.environ) -> str:
    """The shell line that adds the suite to ``LMMS_EVAL_PLUGINS``, keeping the plugins it names."""
    plugins = [p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(",") if p.strip()]
    return f"export LMMS_EVAL_PLUGINS={','.join([*plugins, SUITE_PLUGIN])}"

def missing_tasks_message(missing: list[str], indexed: list[str], suite_tasks: set[str],
                          environ: Mapping[str, str] = os.environ) -> str:
    import difflib

    plugin_missing = not suite_plugin_enabled(environ)
    known = sorted(set(indexed) | suite_tasks)
    problems, needs_plugin = [], False
    for name in missing:
        if name in suite_tasks and plugin_missing:
            problems.append(f"{name} is a task of {SUITE_PLUGIN}, whose tasks lmms-eval indexes only when "
                            f"LMMS_EVAL_PLUGINS names it")
            needs_plugin = True
            continue
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.75)
        if close:
            needs_plugin |= plugin_missing and close[0] in suite_tasks
            problems.append(f"no task named {name}; did you mean {' or '.join(close)}?")
        else:
            problems.append(f"no task named {name} (`lmms-eval --tasks list` lists them)")
    hint = f"; add this line before the command: {plugin_variable_line(environ)}" if needs_plugin else ""
    return f"--tasks: {'; '.join(problems)}{hint}"

def hint_suite_counterparts(names: list[str], matched: list, suite_tasks: set[str],
                            lmms_evals_own: Mapping[str, str] | None = None) -> list[str]:
    """Warn where a run of the suite names an lmms-eval built-in that a suite task implements, and say which
    implementation runs where lmms-eval carries a task of a suite task's own name.

    Bug: lmms-eval's built-in task index wins over include paths without a word
    (``lmms_eval/tasks/__init__.py:TaskManager``), and lmms-eval ships tasks named like the
    papers' benchmarks (``egothink_counting``, ``egoplan``, ``egoplan2``) with protocols of their
    own; a user of the suite who types the paper's name silently runs the built-in. An lmms-eval that carries
    one of the suite's tasks upstream (``docs/upstream/``) runs its own for that name.
    Fix: a warning naming the suite's task for each such name, and one naming lmms-eval's task that runs
    (``lmms_evals_own``: {name: its YAML}) instead of the suite's (the run goes on: the built-in may be what
    the user wants). Returns the warnings.
    """
    lines = []
    note_in_place("tasks.hint_suite_counterparts")
    for name in names:
        counterpart = suite_counterpart(name)
        if name in matched and name not in suite_tasks and counterpart in suite_tasks:
            lines.append(f"lmms-egoplan: --tasks {name} is lmms-eval's built-in task, not the suite's; the suite "
                         f"implements it as its paper defines it as {counterpart} (tasks/ README of its benchmark)")
    for name, path in (lmms_evals_own or {}).items():
        if name in matched:
            lines.append(f"lmms-egoplan: --tasks {name} runs lmms-eval's own task of that name ({path}), not the "
                         f"suite's: lmms-eval's index wins. docs/upstream/README.md lists the suite's tasks sent to "
                         f"lmms-eval, each proven to score as the suite's; a setting only the suite's task reads does "
                         f"nothing there")
    for line in lines:
        logger.warning(line)
    return lines

def suite_counterpart(name: str) -> str | None:
    """The suite's task for an lmms-eval built-in's name (``catalogue.suite_counterparts``), or None."""
    counterparts = suite_counterparts()
    if name in counterparts:
        return counterparts[name]
    for prefix, replacement in counterparts.items():
        if prefix.endswith("_") and name.startswith(prefix):
            return replacement + name[len(prefix):]
    return None

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
    """
    import inspect

    from lmms_eval import evaluator

    if switched_off(_TASKS_FIRST):
        return False
    if has_layer(_TASKS_FIRST, *_SIMPLE_EVALUATE):
        return True
    if not (affected_release() and _builds_the_model_before_the_tasks()):
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
    ``evaluate``; a stop (SIGTERM) that passes carries ``run``, so that it says what the run kept."""
    from lmms_eval import evaluator

    build_tasks, run_evaluation = evaluator.get_task_dict, evaluator.evaluate

    def get_task_dict(task_name_list, task_manager=None, task_type="simple"):
        others = [task for task in task_name_list if not (isinstance(task, str) and task in prebuilt.names)]
        return {**prebuilt.tasks, **(build_tasks(others, task_manager, task_type) if others else {})}

    def evaluate(*args, **kwargs):  # simple_evaluate names each argument
        if isinstance(kwargs.get("lm"), JoinsARun):
            kwargs["lm"].join_run(run)
        if kwargs.get("response_cache") is not None:
            join_response_cache(run, kwargs["response_cache"])
        return run_evaluation(*args, **kwargs)

    evaluator.get_task_dict, evaluator.evaluate = get_task_dict, evaluate  # for this call only
    try:
        return simple_evaluate(*arguments.args, **arguments.kwargs)
    except RunStopped as stopped:
        stopped.run = run
        raise
    finally:
        evaluator.get_task_dict, evaluator.evaluate = build_tasks, run_evaluation

_TASKS_FIRST = "tasks.check_suite_tasks_before_the_model"
_SIMPLE_EVALUATE = ("lmms_eval.evaluator", "simple_evaluate")

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
    for task in _leaf_tasks(built):
        if isinstance(task, JoinsARun):
            task.join_run(run)
        if isinstance(task, ChecksBeforeTheModel):
            task.check_before_the_model(cli_args)
    return _Prebuilt(names, built)

def _leaf_tasks(task_dict: Mapping) -> list:
    leaves = []
    for value in task_dict.values():
        leaves += _leaf_tasks(value) if isinstance(value, Mapping) else [value]
    return leaves

def _builds_the_model_before_the_tasks(simple_evaluate: str | None = None) -> bool:
    simple_evaluate = simple_evaluate or lmms_eval_source("lmms_eval.evaluator", "simple_evaluate")
    model, tasks = simple_evaluate.find(".create_from_arg_string("), simple_evaluate.find("get_task_dict(")
    return 0 <= model < tasks

def unretried_process_results(method: Callable) -> Callable:
    """``ConfigurableTask.process_results`` without the retry lmms-eval wraps it in.

    Bug: ``lmms_eval/api/task.py`` decorates ``ConfigurableTask.process_results`` with tenacity's
    ``@retry`` (5 tries, 2 s apart), so a deterministic scoring error costs 8 s per document and
    surfaces as a ``RetryError`` that hides its cause. Fix: the suite's tasks call the undecorated
    function, so a scoring error surfaces at once, by name. Other tasks keep lmms-eval's retry.
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
    """
    model = getattr(cli_args, "model", None)
    if not isinstance(model, str) or getattr(task, "model_name", None) == model \
            or switched_off("tasks.bind_class_task_to_backend"):
        return
    note_in_place("tasks.bind_class_task_to_backend")
    task.model_name = model
    task._prepare_model_specific_config()
