"""How this suite plugs into lmms-eval 0.7.x.

* ``SuiteTask``: the adapter. The class a task YAML's ``class:`` names is a subclass that sets the benchmark and
  the task spec it holds; its docs come from the benchmark's loader, and it builds requests in the form the
  chosen backend speaks (lmms-eval's plain form for "simple" backends, chat messages for "chat" backends such as
  ``openai`` or ``vllm``).
* ``SuiteInstance``: lmms-eval's request with the suite's request options declared.

One job per module around it: where a task writes the files of a run and their stamp (``run_files``), which backend
the run uses and the refusal of one that cannot serve the task (``backend_choice``), the output folder claimed before
any model call (``output_folder``); a judged task's judge (``judged``) is loaded only for a judged spec.

Workarounds of lmms-eval bugs live in ``lmms_egoplan.compat``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

from lmms_eval.api.instance import Instance
from lmms_eval.api.task import ConfigurableMessagesTask, ConfigurableTask

from lmms_egoplan.compat.switches import SUITE_USED, switch_on
from lmms_egoplan.compat.tasks import bind_class_task_to_backend, unretried_process_results
from lmms_egoplan.contract.benchmark import Benchmark, Metric, TaskSpec
from lmms_egoplan.core import request_options
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.failed_requests import failed_request
from lmms_egoplan.core.run_state import RUN
from lmms_egoplan.harness.backend_choice import refuse_what_cannot_serve, resolve_backend
from lmms_egoplan.harness.failed_requests import FAILED_REQUEST_MARK, FAILED_REQUESTS, failed_request_count
from lmms_egoplan.harness.output_folder import claim_output_folder
from lmms_egoplan.harness.run_files import run_file, run_model_name
from lmms_egoplan.harness.task_setup import LM_EVAL_CONFIG_SOURCE, TaskSetup

_GENERATIVE_OUTPUT_TYPES = ("generate_until", "generate_until_multi_round", "generate_until_agentic")


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
    It implements ``contract.adapter.ChecksBeforeTheModel``, the call compat makes on it before the model loads
    (structurally: a Protocol base would lengthen the MRO of every class a YAML names).
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
        self.judging = judging(self) if self.SPEC.judged else None
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
        ``compat.tasks.check_suite_tasks_before_the_model`` calls this first, through
        ``contract.adapter.ChecksBeforeTheModel``): the backend can serve it, the output folder is free, and the
        judge answers."""
        self._bind_to_backend(cli_args)

    def _bind_to_backend(self, cli_args) -> None:
        """Settle the request form (lmms-eval's plain form, or chat messages for chat backends) from
        the CLI arguments lmms-eval hands every task, before requests are built; claim the output
        folder (before any model call)."""
        claim_output_folder(cli_args)
        bind_class_task_to_backend(self, cli_args)
        if self.judging is not None and not getattr(cli_args, "predict_only", False):  # predicting only judges nothing
            self.judging.check_answers()
        resolved = resolve_backend(cli_args)
        if resolved is None:
            return
        self._backend, self._chat_backend = resolved.model_id, resolved.model_type == "chat"
        refuse_what_cannot_serve(self, cli_args, resolved)

    def requested_options(self) -> list[tuple[str, request_options.RequestOption, str]]:
        """(setting, option, value) of every option the task's requests carry: those whose value is
        not lmms-eval's convention, for this task's output type."""
        generative = self.generative
        chosen = [(name, option, getattr(self.settings, name)) for name, option in self.SPEC.request_options.items()]
        return [(name, option, value) for name, option, value in chosen
                if value != option.convention and not (generative and option.likelihood_only)]

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


def judging(task: SuiteTask) -> Any:
    """A judged task's judge (``harness.judged.Judging``), its outcomes setting the run's exit status; the judge's
    modules are loaded only for a judged task."""
    from lmms_egoplan.harness.judged import Judging, record_task_judgements

    return Judging(task, record_outcome=record_task_judgements)
