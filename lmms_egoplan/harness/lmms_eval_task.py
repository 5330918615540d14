"""How this suite plugs into lmms-eval 0.7.x.

* ``SuiteTask``: the adapter. The class a task YAML's ``class:`` names is a subclass that sets the benchmark and
  the task spec it holds; its docs come from the benchmark's loader, and it builds requests in the form the
  chosen backend speaks (lmms-eval's plain form for "simple" backends, chat messages for "chat" backends such as
  ``openai`` or ``vllm``).
* ``SuiteInstance``: lmms-eval's request with the suite's request options declared.
* ``run_file``: where a task writes the files of a run beside lmms-eval's results file.

Workarounds of lmms-eval bugs live in ``lmms_egoplan.compat``, not here.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from lmms_eval.api.instance import Instance
from lmms_eval.api.task import ConfigurableMessagesTask, ConfigurableTask
from loguru import logger

from lmms_egoplan.compat.durability import missing_dependency_hint
from lmms_egoplan.compat.results import run_datetime_str
from lmms_egoplan.compat.switches import BACKEND_CHOSEN, SUITE_USED, switch_on
from lmms_egoplan.compat.tasks import bind_class_task_to_backend, unretried_process_results
from lmms_egoplan.contract.benchmark import Benchmark, Metric, TaskSpec
from lmms_egoplan.core import request_options
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.failed_requests import failed_request
from lmms_egoplan.core.run_state import RUN
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.harness import backend_source
from lmms_egoplan.harness.failed_requests import FAILED_REQUEST_MARK, FAILED_REQUESTS, failed_request_count
from lmms_egoplan.harness.judged import Judging, record_task_judgements
from lmms_egoplan.harness.task_setup import LM_EVAL_CONFIG_SOURCE, TaskSetup

_GENERATIVE_OUTPUT_TYPES = ("generate_until", "generate_until_multi_round", "generate_until_agentic")
_LIKELIHOOD_OUTPUT_TYPES = ("loglikelihood", "multiple_choice")


class SuiteTask(ConfigurableMessagesTask):
    """The lmms-eval adapter: a task of the suite, as lmms-eval builds it from the YAML whose ``class:`` names a
    subclass. A subclass sets ``BENCHMARK`` (the benchmark's value, ``contract.benchmark.Benchmark``) and ``SPEC``
    (what the task does, ``contract.benchmark.TaskSpec``) and nothing else: the adapter holds both (``setup``,
    ``harness.task_setup.TaskSetup``) and, for a judged spec, the judge (``judging``, ``harness.judged.Judging``).

    The effective settings are written back into the task config's ``metadata`` so that the results file records
    what was run. Requests take the form the chosen backend speaks (lmms-eval's plain form for "simple" backends,
    chat messages for "chat" backends such as ``openai`` or ``vllm``); those of a spec with ``request_options``
    carry them (``SuiteInstance``) and, before any model call, a backend that cannot honour a value that changes
    scores is refused (one that places visuals its own way is warned of). A failed model request is never scored.
    """

    BENCHMARK: ClassVar[Benchmark]
    SPEC: ClassVar[TaskSpec]

    @staticmethod
    def registered_aggregation(name: str) -> Callable:
        from lmms_eval.api.registry import get_aggregation

        return get_aggregation(name)

    def __init__(self, config: Mapping[str, Any], **kwargs):
        if LM_EVAL_CONFIG_SOURCE in (config.get("metadata") or {}):
            raise InputError(
                f"task {config['task']} is an lmms-eval task (it shows the model images and videos; run it with "
                f"lmms-eval); lm-eval cannot run it. The suite's lm-eval tasks, the text-only baselines, are in the "
                f"checkout's lm_eval_tasks/ folder, installed as {resources.files('lmms_egoplan.lm_eval_tasks')}: "
                f"lm_eval --include_path <checkout>/lm_eval_tasks (--tasks list names them)"
            )
        switch_on(SUITE_USED)
        self._chat_backend = False
        self._backend: str | None = None  # the run's --model, canonical (``_bind_to_backend``)
        self.setup = TaskSetup(self, self.BENCHMARK, self.SPEC, self.registered_aggregation)
        harness_config = self.setup.harness_config(config)
        self.settings = self.setup.settings
        self.judging = Judging(self, record_outcome=record_task_judgements) if self.SPEC.judged else None
        super().__init__(config=harness_config, **kwargs)
        self.setup.bind()

    def _prepare_model_specific_config(self):
        # lmms-eval calls this before the data loads and after its model-specific generation_kwargs
        # (a --gen_kwargs on the command line still overrides what the spec sets).
        super()._prepare_model_specific_config()
        if self.SPEC.configure is not None:
            preset = self.SPEC.configure(self.setup.context, self.config)
            if preset is not None:
                self.lmms_eval_specific_kwargs = preset

    def _prepare_metric_and_aggregation(self) -> None:
        super()._prepare_metric_and_aggregation()
        self._count_failed_requests()

    def override_metric(self, metric_name: str) -> None:
        # --predict_only replaces every metric by "bypass": failed requests are still counted.
        super().override_metric(metric_name)
        self._count_failed_requests()

    @property
    def generative(self) -> bool:
        return self.OUTPUT_TYPE in _GENERATIVE_OUTPUT_TYPES

    def _count_failed_requests(self) -> None:
        if self.generative and not self.setup.has_metric(FAILED_REQUESTS):
            self.setup.add_metric(Metric(FAILED_REQUESTS, failed_request_count, higher_is_better=False,
                                         with_context=True))

    def run_file(self, args: Any, kind: str, suffix: str = ".jsonl") -> Path:
        """Where this task writes a file of this run (``run_file``)."""
        return run_file(args, self.config.task, kind, suffix)

    def evaluated_model(self, args: Any) -> str:
        """The evaluated model as the results folder names it (``run_model_name``)."""
        return run_model_name(args)

    def process_results(self, doc, results, full_docs=None):
        # A failed model request is no answer: not parsed, judged or scored, only counted
        # (harness.failed_requests); every other metric leaves the sample out.
        failure = self.failed_request(results)
        counted = {FAILED_REQUESTS: float(failure is not None)} if self.generative else {}
        if self.predict_only:
            # lmms-eval replaced the task's metrics by "bypass": the outputs are logged, nothing is scored
            # (its own scoring of the output type would need labels, which a test split may lack).
            # The value is what the sample log shows under "bypass" (lmms-eval reports every other key as a metric).
            logged = {FAILED_REQUEST_MARK: failure} if failure else self.logged_predictions(doc, results)
            return {**{metric: logged for metric in self._metric_fn_list if metric != FAILED_REQUESTS}, **counted}
        if failure is not None:
            failed = self.judging.failed_request_scores(failure) if self.judging is not None else {}
            return self.setup.finished_scores({**failed, **counted})
        scores = unretried_process_results(ConfigurableTask.process_results)(self, doc, results, full_docs)
        return self.setup.finished_scores({**scores, **counted})

    def failed_request(self, results) -> str | None:
        """Why a document's responses are no answer (``core.failed_requests``), or None."""
        if not self.generative:
            return None
        return next(filter(None, (failed_request(result, self._backend) for result in results)), None)

    def logged_predictions(self, doc, results) -> Any:
        """What a ``--predict_only`` run logs per sample besides the outputs (under "bypass"): a judged task's
        judge items (``harness.judged.Judging.logged_items``), nothing otherwise."""
        return self.judging.logged_items(doc, results) if self.judging is not None else None

    @property
    def predict_only(self) -> bool:
        """``--predict_only``: lmms-eval's ``override_metric("bypass")`` removed the task's scoring."""
        return self.config.process_results is None and "bypass" in self._metric_fn_list

    def download(self, dataset_kwargs=None) -> None:
        if self.judging is not None:
            self.judging.check_settings()  # a run must not read data, let alone generate, with a judge that cannot work
        split, self.dataset = self.setup.load()
        if self.config.process_docs is not None:
            self.dataset[split] = self.config.process_docs(self.dataset[split])
        # Docs hold paths, not decoded media, so nothing needs stripping for post-processing.
        self.dataset_no_image = self.dataset

    def build_all_requests(self, **kwargs) -> None:
        self._bind_to_backend(getattr(self, "args", None))
        if (request_options.SCORED_SPAN, request_options.ANSWER_AND_END_OF_TURN) in \
                [(option, value) for _, option, value in self.requested_options()]:
            RUN.turn_end_tasks.add(self.config.task)  # the results and samples say which token that was
        super().build_all_requests(**kwargs)

    def check_before_the_model(self, cli_args) -> None:
        """What this task can check of the run before the model loads (lmms-eval builds it after;
        ``compat.tasks.check_suite_tasks_before_the_model`` calls this first): the backend can
        serve it, the output folder is free, and the judge answers."""
        self._bind_to_backend(cli_args)

    def _bind_to_backend(self, cli_args) -> None:
        """Settle the request form (lmms-eval's plain form, or chat messages for chat backends) from
        the CLI arguments lmms-eval hands every task, before requests are built; claim the output
        folder (before any model call)."""
        claim_output_folder(cli_args)
        bind_class_task_to_backend(self, cli_args)
        if self.judging is not None and not getattr(cli_args, "predict_only", False):  # predicting only judges nothing
            self.judging.check_answers()
        model = getattr(cli_args, "model", None)
        if not isinstance(model, str):
            return
        from lmms_eval.models import MODEL_REGISTRY_V2

        force_simple = bool(getattr(cli_args, "force_simple", False))
        resolved = MODEL_REGISTRY_V2.resolve(model, force_simple=force_simple)
        self._backend, self._chat_backend = resolved.model_id, resolved.model_type == "chat"
        if self._chat_backend:
            simple = MODEL_REGISTRY_V2.resolve(model, force_simple=True)
            scores = simple.model_type == "simple" and \
                backend_source.computes_loglikelihood(simple.class_path) is not False
            self._check_backend_scores(model, "lmms-eval's chat implementation of it only generates",
                                       [resolved.class_path, *([simple.class_path] if scores else [])])
            return
        # Refused from its source before its module is imported (an import can fail, or take a minute).
        if backend_source.computes_loglikelihood(resolved.class_path) is False:
            self._check_backend_scores(model, f"lmms-eval's {resolved.class_name} does not implement loglikelihood",
                                       [resolved.class_path])
        model_class = backend_class(model, force_simple)
        switch_on(BACKEND_CHOSEN, backend=model_class)
        if not computes_loglikelihood(model_class):
            self._check_backend_scores(model, f"lmms-eval's {model_class.__name__} does not implement loglikelihood",
                                       [f"{model_class.__module__}.{model_class.__qualname__}"])
        self._check_backend_honours_options(model_class, model)

    def _check_backend_scores(self, model: str, why: str, class_paths: list[str]) -> None:
        """Refuse a backend without loglikelihood for a task that ranks candidates by it, naming those that can, and
        the ways with this backend that work: ``class_paths``, its class for the generative variant, then its
        simple implementation where that one scores (``--force_simple``); what they need on a CPU-only machine."""
        if self.OUTPUT_TYPE not in _LIKELIHOOD_OUTPUT_TYPES:
            return
        variant = self.SPEC.generative_variant
        ways = [f"run the generative task {variant} with --model {model}"] if variant else []
        if len(class_paths) > 1:
            ways.append(self._simple_backend_hint(model))
        needs = backend_source.needs(*([class_paths[0]] if variant else []), *class_paths[1:])
        raise SettingsError(
            f"task {self.config.task} ranks its candidate answers by likelihood, which --model {model} does not "
            f"compute ({why}); run it with --model egoplan_hf (transformers, in this process) or --model "
            f"egoplan_server (an SGLang / vLLM server)" + "".join(f", or {way}" for way in ways)
            + (f"; --model {model} needs {needs}" if needs else ""))

    def _simple_backend_hint(self, model: str) -> str:
        """How this task runs on lmms-eval's simple implementation of ``model``: ``--force_simple``, with lmms-eval's
        conventions for the options that backend does not honour (the answer's tokens only, for one)."""
        conventions = [f"{setting_name(self.setup.env_prefix, name)} set to {option.convention!r}"
                       for name, option, _ in self.requested_options() if option.binding]
        return (f"add --force_simple for lmms-eval's simple implementation of {model}, which scores by "
                f"lmms-eval's conventions" + (f": with {' and '.join(conventions)}" if conventions else ""))

    def requested_options(self) -> list[tuple[str, request_options.RequestOption, str]]:
        """(setting, option, value) of every option the task's requests carry: those whose value is
        not lmms-eval's convention, for this task's output type."""
        generative = self.generative
        chosen = [(name, option, getattr(self.settings, name)) for name, option in self.SPEC.request_options.items()]
        return [(name, option, value) for name, option, value in chosen
                if value != option.convention and not (generative and option.likelihood_only)]

    def _check_backend_honours_options(self, model_class: type, model: str) -> None:
        for name, option, value in self.requested_options():
            if option.honoured_by(model_class, value):
                continue
            setting = setting_name(self.setup.env_prefix, name)
            if not option.binding:
                logger.warning(f"task {self.config.task} asks for {option.name} {value!r} ({setting}), which backend "
                               f"{model!r} does not declare it honours: it follows its own convention")
                continue
            raise SettingsError(
                f"task {self.config.task} asks for {option.name} {value!r} (its official evaluation does), which "
                f"backend {model!r} cannot honour; use --model egoplan_hf, or set {setting} to "
                f"{option.convention!r} (lmms-eval's convention)"
            )

    def construct_requests(self, doc_id: int, ctx: str, **kwargs):
        if not self._chat_backend:
            requests = ConfigurableTask.construct_requests(self, doc_id, ctx, **kwargs)
            requested = self.requested_options()
            if not requested:
                return requests
            if isinstance(requests, list):
                requests = [SuiteInstance.of(request) for request in requests]
            else:
                requests = SuiteInstance.of(requests)
            for _, option, value in requested:
                option.mark(requests, value)
            return requests
        # A task scored by likelihood never gets here: _bind_to_backend refused the chat backend.
        return ConfigurableMessagesTask.construct_requests(self, doc_id, ctx, **kwargs)

    def _build_user_turn(self, visuals, text: str) -> list:
        """A chat backend's user turn: the visuals before or after the text, as the task orders them."""
        order = request_options.INPUT_ORDER
        setting = next((name for name, option in self.SPEC.request_options.items() if option is order), None)
        if setting is None or getattr(self.settings, setting) == order.convention:
            return super()._build_user_turn(visuals, text)
        return [{"role": "user", "content": [{"type": "text", "text": text},
                                             *(self._visual_to_content(v) for v in visuals or [])]}]


@dataclass
class SuiteInstance(Instance):
    """lmms-eval's request with what the task asks of the backend beyond lmms-eval's request arguments, declared:
    ``request_options`` ({option name: value}, ``core.request_options``; proposed upstream as a field of
    ``Instance``, docs/upstream.md)."""

    request_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, request: Instance) -> SuiteInstance:
        """``request`` (as lmms-eval's task built it), with no option asked for yet."""
        return cls(**{f.name: getattr(request, f.name) for f in fields(Instance) if f.init})


def run_stamp(args: Any = None) -> str:
    """One date-time per run (``RUN.stamp``), as lmms-eval writes it in its file names: the one of
    this run's results file (``compat.results.run_datetime_str``), else the time of the first call
    (``--timezone`` honoured)."""
    if RUN.stamp is None:
        stamp = run_datetime_str(args)
        if stamp is None:
            from lmms_eval.utils import get_datetime_str

            timezone = getattr(args, "timezone", None)
            stamp = get_datetime_str(timezone=timezone) if timezone else get_datetime_str()
        RUN.stamp = stamp.replace(":", "-")
    return RUN.stamp


def claim_output_folder(args: Any) -> None:
    """Before any model call: the folder this run writes into (``<output_path>/<model>``) is
    writable, and no other run writes the files of the same date-time into it.

    lmms-eval names a run's results and samples files by the second it started, as this suite
    names its side files: two runs started in the same second with the same ``--output_path`` and
    model would overwrite each other's files. Rank 0 (the one that writes) creates
    ``<date-time>.lmms_egoplan.lock`` there for the run's lifetime; a run that finds it refuses to
    start, with an InputError saying what to change. Once per process.
    """
    output_path = getattr(args, "output_path", None)
    if not output_path or os.environ.get("RANK", "0") != "0":
        return
    from lmms_eval.utils import sanitize_model_name

    folder = Path(output_path) / sanitize_model_name(run_model_name(args))
    if folder in RUN.claimed_folders:
        return
    stamp = run_stamp(args)
    lock = folder / f"{stamp}.lmms_egoplan.lock"
    taken = InputError(f"another run (its lock {lock}, or its files {stamp}_*) writes the files of the same date-time "
                       f"({stamp}) into "
                       f"{folder}: its results, samples and side files would overwrite this run's. Start this run "
                       f"a second later, or give it another --output_path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        raise taken from None
    except OSError as error:
        raise InputError(f"--output_path {output_path}: cannot write into {folder} ({error}); "
                         f"give a writable folder") from None
    with os.fdopen(descriptor, "w") as file:
        file.write(f"{os.getpid()}\n")
    # A run of the same second that has finished (it wrote its files, then removed its lock) is there
    # by its files: a slow start can reach this point after such a run has ended.
    if any(path != lock for path in folder.glob(f"{stamp}_*")):
        lock.unlink(missing_ok=True)
        raise taken
    RUN.claimed_folders.add(folder)
    atexit.register(lock.unlink, missing_ok=True)


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
    file_name = f"{run_stamp(args)}_{kind}_{task}{suffix}"
    output_path = getattr(args, "output_path", None)
    if not output_path:
        return Path.cwd() / kind / file_name
    from lmms_eval.utils import sanitize_model_name

    return Path(output_path) / sanitize_model_name(run_model_name(args)) / file_name


def backend_class(model: str, force_simple: bool) -> type:
    """lmms-eval's class of ``--model``, imported; an import that fails names the backend and what to install."""
    from lmms_eval.models import MODEL_REGISTRY_V2

    try:
        return MODEL_REGISTRY_V2.get_model_class(model, force_simple=force_simple)
    except ImportError as error:
        raise SettingsError(f"--model {model}: lmms-eval cannot import this backend ({type(error).__name__}: "
                            f"{error}){missing_dependency_hint(error)}") from None


def computes_loglikelihood(model_class: type) -> bool:
    """Whether a backend class (imported) implements ``loglikelihood``: lmms-eval's backends without it keep the
    method with a body that only raises, asserts False or passes (e.g. ``Qwen2_VL``, ``VLLM``); the same
    read of a class's source before its import: ``backend_source.computes_loglikelihood``."""
    import ast
    import inspect
    import textwrap

    method = getattr(model_class, "loglikelihood", None)
    if method is None or getattr(method, "__isabstractmethod__", False):
        return False
    try:
        definition = ast.parse(textwrap.dedent(inspect.getsource(method))).body[0]
    except (OSError, TypeError, SyntaxError):  # no source to read: trust the class
        return True
    return not backend_source.refuses_every_call(definition)
