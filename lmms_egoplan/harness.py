"""How this suite plugs into lmms-eval 0.7.x.

* ``BenchmarkTask``: the base of our task classes (YAML ``class:`` key). Its docs come from a
  benchmark loader that reads the official release files from a configurable location, and it
  builds requests in the form the chosen backend speaks (lmms-eval's plain form for "simple"
  backends, chat messages for "chat" backends such as ``openai`` or ``vllm``).
* ``enable_plugin_task_discovery``: lmms-eval 0.7.3 reads ``LMMS_EVAL_PLUGINS`` only after it
  has indexed the tasks, so plugin tasks are never found; this makes the index include them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import os
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping

from lmms_eval.api.task import ConfigurableMessagesTask, ConfigurableTask

from lmms_egoplan.settings import resolve_settings


def enable_plugin_task_discovery() -> None:
    """Make ``LMMS_EVAL_PLUGINS=<pkg>`` index ``<pkg>.tasks`` as lmms-eval documents.

    lmms-eval 0.7.3 appends the plugin task folders to ``--include_path`` only after building
    its TaskManager, so ``--tasks <plugin task>`` fails with "Tasks not found". Adding the
    folders in ``TaskManager.__init__`` (de-duplicated, so a fixed lmms-eval is unaffected)
    restores the documented behaviour. lmms-eval imports this package's model entry point
    before it builds the TaskManager, which is where this is called from.
    """
    from lmms_eval.tasks import TaskManager

    if getattr(TaskManager.__init__, "_includes_plugin_tasks", False):
        return
    original_init = TaskManager.__init__

    @functools.wraps(original_init)
    def __init__(self, verbosity="INFO", include_path=None, include_defaults=True, model_name=None):
        paths = [include_path] if isinstance(include_path, str) else list(include_path or [])
        for folder in plugin_task_folders():
            if folder not in paths:
                paths.append(folder)
        original_init(self, verbosity, paths or None, include_defaults, model_name)

    __init__._includes_plugin_tasks = True
    TaskManager.__init__ = __init__


def plugin_task_folders(environ: Mapping[str, str] = os.environ) -> list[str]:
    """Task folders of the packages listed in ``LMMS_EVAL_PLUGINS`` (those that have one)."""
    folders = []
    for plugin in filter(None, (p.strip() for p in environ.get("LMMS_EVAL_PLUGINS", "").split(","))):
        spec = importlib.util.find_spec(f"{plugin}.tasks")
        if spec is not None and spec.submodule_search_locations:
            folders.append(list(spec.submodule_search_locations)[0])
    return folders


_GENERATIVE_OUTPUT_TYPES = ("generate_until", "generate_until_multi_round", "generate_until_agentic")


class BenchmarkTask(ConfigurableMessagesTask):
    """An lmms-eval task whose documents come from a benchmark loader.

    Subclasses set ``Settings`` (a dataclass of the benchmark's settings), ``ENV_PREFIX``
    (environment overrides are ``<ENV_PREFIX>_<SETTING>``) and implement ``load_docs``.
    The effective settings are written back into the task config's ``metadata`` so that the
    results file records what was run.

    The YAML's ``process_results`` and aggregation functions may declare a ``settings``,
    ``task_name`` and/or ``task`` parameter: the task binds its effective settings, its name and
    itself to them, so per-document scoring and run-level aggregation (e.g. scoring all outputs
    of a run at once) follow the settings and share run state without module globals. Metrics
    whose names come from settings or data, which a YAML cannot list, join with ``add_metric``.
    """

    Settings: ClassVar[type]
    ENV_PREFIX: ClassVar[str]

    def __init__(self, config: Mapping[str, Any], **kwargs):
        config = {key: value for key, value in config.items() if key != "class"}
        metadata = dict(config.get("metadata") or {})
        self.settings = resolve_settings(self.Settings, task=config["task"], metadata=metadata, env_prefix=self.ENV_PREFIX)
        config["metadata"] = {**metadata, **{k: _jsonable(v) for k, v in dataclasses.asdict(self.settings).items()}}
        self._chat_backend = False
        self._context = {"settings": self.settings, "task_name": config["task"], "task": self}
        super().__init__(config=config, **kwargs)
        self.config.process_results = _bind_context(self.config.process_results, self._context)

    def _prepare_metric_and_aggregation(self) -> None:
        super()._prepare_metric_and_aggregation()
        self._aggregation_list = {name: _bind_context(fn, self._context) for name, fn in self._aggregation_list.items()}

    def add_metric(self, name: str, aggregation: str | Callable, *, higher_is_better: bool = True) -> None:
        """Report ``name`` (which ``process_results`` returns for the docs it applies to), aggregated
        by ``aggregation`` (a registered name such as "mean", or a function, context-bound as above)."""
        from lmms_eval.api.registry import get_aggregation

        function = get_aggregation(aggregation) if isinstance(aggregation, str) else aggregation
        self._metric_fn_list[name] = None
        self._metric_fn_kwargs[name] = {}
        self._aggregation_list[name] = _bind_context(function, self._context)
        self._higher_is_better[name] = higher_is_better

    def process_results(self, doc, results, full_docs=None):
        # lmms-eval wraps process_results in a retry (5 tries, 2 s apart, the cause hidden in a
        # RetryError). Scoring is deterministic: a failure should surface at once, by name.
        return ConfigurableTask.process_results.__wrapped__(self, doc, results, full_docs)

    def load_docs(self) -> Iterable[dict]:
        """The evaluation documents, one dict per sample, in the benchmark's order."""
        raise NotImplementedError

    def download(self, dataset_kwargs=None) -> None:
        import datasets

        split = self.config.test_split or self.config.validation_split
        if split is None:
            raise ValueError(f"task {self.config.task}: set test_split (or validation_split) in its YAML")
        docs = list(self.load_docs())
        if not docs:
            raise ValueError(f"task {self.config.task}: the benchmark loader returned no samples")
        self.dataset = datasets.DatasetDict({split: datasets.Dataset.from_list(docs)})
        if self.config.process_docs is not None:
            self.dataset[split] = self.config.process_docs(self.dataset[split])
        # Docs hold paths, not decoded media, so nothing needs stripping for post-processing.
        self.dataset_no_image = self.dataset

    def build_all_requests(self, **kwargs) -> None:
        self._bind_to_backend(getattr(self, "args", None))
        super().build_all_requests(**kwargs)

    def _bind_to_backend(self, cli_args) -> None:
        """Learn the backend from the CLI arguments lmms-eval hands every task before building requests.

        lmms-eval constructs ``class:`` tasks without the model name, so model-specific
        ``lmms_eval_specific_kwargs`` presets and the simple/chat request form are settled here.
        """
        model = getattr(cli_args, "model", None)
        if not isinstance(model, str):
            return
        from lmms_eval.models import MODEL_REGISTRY_V2

        resolved = MODEL_REGISTRY_V2.resolve(model, force_simple=bool(getattr(cli_args, "force_simple", False)))
        self._chat_backend = resolved.model_type == "chat"
        self.model_name = model
        self._prepare_model_specific_config()

    def construct_requests(self, doc_id: int, ctx: str, **kwargs):
        if not self._chat_backend:
            return ConfigurableTask.construct_requests(self, doc_id, ctx, **kwargs)
        if self.OUTPUT_TYPE not in _GENERATIVE_OUTPUT_TYPES:
            raise ValueError(
                f"task {self.config.task} needs {self.OUTPUT_TYPE} scoring, which chat backends do not provide; "
                f"use a backend with loglikelihood (e.g. --model egoplan_hf), or --force_simple where the "
                f"backend has a simple implementation, or the task's generative variant"
            )
        return ConfigurableMessagesTask.construct_requests(self, doc_id, ctx, **kwargs)


def _bind_context(function: Any, context: Mapping[str, Any]) -> Any:
    """``function`` with the entries of ``context`` it declares as parameters bound by keyword."""
    if not callable(function):
        return function
    wanted = {name: value for name, value in context.items() if name in inspect.signature(function).parameters}
    return functools.partial(function, **wanted) if wanted else function


def _jsonable(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


@functools.cache
def run_stamp(timezone: str | None) -> str:
    """One date-time per run, formatted (and in the time zone) as lmms-eval names its files."""
    from lmms_eval.utils import get_datetime_str

    return get_datetime_str(timezone=timezone) if timezone else get_datetime_str()


def run_model_name(args: Any) -> str:
    """The evaluated model as lmms-eval names it in its output folder (from ``pretrained=`` etc.)."""
    from lmms_eval.loggers.evaluation_tracker import GeneralConfigTracker

    model_args = getattr(args, "model_args", "")
    return GeneralConfigTracker._get_model_name(model_args if isinstance(model_args, str) else "")


def run_file(args: Any, task: str, kind: str, suffix: str = ".jsonl") -> Path:
    """Where a task writes a file of this run (judgements, plans, a submission): beside lmms-eval's
    results file, ``<output_path>/<model>/<date-time>_<kind>_<task><suffix>`` (the date-time of
    this process's first such file, in lmms-eval's format and ``--timezone``), so that runs of other
    models or at other times never overwrite it; ``./<kind>/`` without ``--output_path``."""
    file_name = f"{run_stamp(getattr(args, 'timezone', None))}_{kind}_{task}{suffix}"
    output_path = getattr(args, "output_path", None)
    if not output_path:
        return Path.cwd() / kind / file_name
    from lmms_eval.utils import sanitize_model_name

    return Path(output_path) / sanitize_model_name(run_model_name(args)) / file_name


def keep_loglikelihood_results() -> None:
    """Hand ``multiple_choice`` tasks the ``(loss, is_greedy)`` pairs that backends return.

    lmms-eval 0.7.3 passes every model response through ``unwrap_generation_output``, which turns
    anything but text into ``str(response)``: a loglikelihood pair becomes ``"(1.2, False)"`` and
    every multiple_choice task fails in process_results (``too many values to unpack``); a pair
    read back from ``--use_cache`` (a JSON list) meets the same fate. Pairs pass through as tuples;
    everything else is unwrapped as before. Installed before ``lmms_eval.evaluator`` binds the
    name (lmms-eval loads model entry points while importing the evaluator), and patched there
    too when it already has.
    """
    import sys

    from lmms_eval.api import instance

    original = instance.unwrap_generation_output
    if getattr(original, "_keeps_loglikelihood_pairs", False):
        return

    @functools.wraps(original)
    def unwrap_generation_output(output):
        if (isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], bool)
                and isinstance(output[0], (int, float)) and not isinstance(output[0], bool)):
            return tuple(output), None
        return original(output)

    unwrap_generation_output._keeps_loglikelihood_pairs = True
    instance.unwrap_generation_output = unwrap_generation_output
    evaluator = sys.modules.get("lmms_eval.evaluator")
    if evaluator is not None and hasattr(evaluator, "unwrap_generation_output"):
        evaluator.unwrap_generation_output = unwrap_generation_output
