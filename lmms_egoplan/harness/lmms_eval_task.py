"""How this suite plugs into lmms-eval 0.7.x.

* ``SuiteTask``: the adapter, the class every task YAML's ``class:`` names. The YAML names the benchmark and the
  task spec it runs (``benchmark:``, ``task_spec:``); the adapter compiles them with the YAML into lmms-eval's config
  (``compiled_task``), and it builds requests in the form the chosen backend speaks (lmms-eval's plain form for
  "simple" backends, chat messages for "chat" backends such as ``openai`` or ``vllm``).
* ``SuiteInstance``: lmms-eval's request with the suite's request options declared.

One job per module around it: where a task writes the files of a run and their stamp (``run_files``), which backend
the run uses and the refusal of one that cannot serve the task (``backend_choice``), the output folder claimed before
any model call (``output_folder``); a judged task's judge (``judged``) is loaded only for a judged spec.

Workarounds of lmms-eval bugs live in ``lmms_egoplan.compat``, not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from importlib import resources
from typing import Any, Mapping

from lmms_eval.api.instance import Instance
from lmms_eval.api.task import ConfigurableMessagesTask, ConfigurableTask

from lmms_egoplan.compat.switches import SUITE_USED, switch_on
from lmms_egoplan.compat.tasks import bind_class_task_to_backend, unretried_process_results
from lmms_egoplan.core import request_options
from lmms_egoplan.core.errors import InputError
from lmms_egoplan.core.failed_requests import failed_request
from lmms_egoplan.core.request_facts import RetriedAnswer, retries_of
from lmms_egoplan.core.run import SuiteRun, hand_over, run_of
from lmms_egoplan.harness.backend_choice import refuse_what_cannot_serve, resolve_backend
from lmms_egoplan.harness.compiled_task import (
    GENERATIVE_OUTPUT_TYPES,
    LM_EVAL_CONFIG_SOURCE,
    compile_task,
    named_task,
)
from lmms_egoplan.harness.failed_requests import FAILED_REQUEST_MARK, FAILED_REQUESTS, FAILED_REQUESTS_METRIC
from lmms_egoplan.harness.output_folder import claim_output_folder
from lmms_egoplan.harness.run_files import LmmsEvalRunFiles


class SuiteTask(ConfigurableMessagesTask):
    """The lmms-eval adapter: a task of the suite, as lmms-eval builds it from the YAML whose ``class:`` names it.
    The YAML names ``benchmark`` (the benchmark's value, ``contract.benchmark.Benchmark``, by ``!function``) and
    ``task_spec`` (one of its ``lmms_eval_tasks``, what the task does: ``contract.benchmark.TaskSpec``), kept as
    ``benchmark`` and ``spec``: the adapter compiles both with the YAML's config into lmms-eval's (``compiled``,
    ``harness.compiled_task.CompiledTask``), hands it to lmms-eval's constructor once, and keeps a judged spec's
    judge (``judging``, ``harness.judged.Judging``).

    The effective settings are written into the task config's ``metadata`` so that the results file records
    what was run. Requests take the form the chosen backend speaks (lmms-eval's plain form for "simple" backends,
    chat messages for "chat" backends such as ``openai`` or ``vllm``); those of a spec with ``request_options``
    carry them (``SuiteInstance``) and, before any model call, a backend that cannot honour a value that changes
    scores is refused (one that places visuals its own way is warned of). A failed model request is never scored.
    It implements ``contract.adapter.ChecksBeforeTheModel``, the call compat makes on it before the model loads, and
    ``KeysItsAnswers``, what its answers depend on (structurally: a Protocol base would lengthen the MRO of every
    class a YAML names).
    """

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
        self._evaluation_run = False  # whether the wrapper of lmms-eval's simple_evaluate handed it its run
        generative = config.get("output_type") in GENERATIVE_OUTPUT_TYPES
        self.benchmark, self.spec = named_task(config, "lmms_eval_tasks")
        run = SuiteRun()  # its own, until it joins the run of the evaluation that builds it (``join_run``)
        self.compiled = compile_task(self.benchmark, self.spec, config,
                                     run_files=lambda task_name: LmmsEvalRunFiles(task_name, run),
                                     counted=(FAILED_REQUESTS_METRIC,) if generative else (),
                                     record_judgements=record_task_judgements_lazily)
        self.compiled.context.run = run
        self.settings = self.compiled.settings
        self.judging = self.compiled.judging
        super().__init__(config=self.compiled.config, **kwargs)

    def _prepare_model_specific_config(self):
        # lmms-eval chooses the inference-prompt preset by model here, in its constructor; the spec's configuration
        # names another.
        super()._prepare_model_specific_config()
        if self.compiled.configuration.prompt_preset is not None:
            self.lmms_eval_specific_kwargs = self.compiled.configuration.prompt_preset

    def aggregation(self) -> dict:
        # --predict_only replaces every metric by "bypass" (lmms-eval's override_metric): failed requests still count.
        if self.generative and self.predict_only:
            return {**super().aggregation(), FAILED_REQUESTS: self.compiled.aggregations[FAILED_REQUESTS]}
        return super().aggregation()

    def higher_is_better(self) -> dict:
        if self.generative and self.predict_only:
            return {**super().higher_is_better(), FAILED_REQUESTS: FAILED_REQUESTS_METRIC.higher_is_better}
        return super().higher_is_better()

    @property
    def generative(self) -> bool:
        return self.OUTPUT_TYPE in GENERATIVE_OUTPUT_TYPES

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
            return {**{metric: logged for metric in self._metric_fn_list}, **counted}
        if failure is not None:
            judged = self.compiled.judged_metrics
            failed = self.judging.failed_request_scores(failure, judged) if self.judging is not None else {}
            return self.compiled.finished_scores({**failed, **counted}, predict_only=False)
        scores = unretried_process_results(ConfigurableTask.process_results)(self, doc, results, full_docs)
        return self.compiled.finished_scores({**scores, **counted}, predict_only=False)

    def failed_request(self, results) -> str | None:
        """Why a document's responses are no answer (``core.failed_requests``), or None."""
        if not self.generative:
            return None
        return next(filter(None, (failed_request(result, self._backend) for result in results)), None)

    def logged_predictions(self, doc, results) -> Any:
        """What a ``--predict_only`` run logs per sample besides the outputs (under "bypass"): a judged task's
        judge items (``harness.judged.Judging.logged_items``), nothing otherwise."""
        return self.judging.logged_items(doc, results, self.compiled.scoring) if self.judging is not None else None

    @property
    def predict_only(self) -> bool:
        """``--predict_only``: lmms-eval's ``override_metric("bypass")`` removed the task's scoring."""
        return self.config.process_results is None and "bypass" in self._metric_fn_list

    def download(self, dataset_kwargs=None) -> None:
        # lmms-eval asks for the data in its constructor; the documents were read when the task was compiled.
        self.dataset = self.compiled.dataset
        if self.config.process_docs is not None:
            self.dataset[self.compiled.split] = self.config.process_docs(self.dataset[self.compiled.split])
        # Docs hold paths, not decoded media, so nothing needs stripping for post-processing.
        self.dataset_no_image = self.dataset

    @property
    def run(self) -> SuiteRun:
        """The run this task takes part in (``core.run.SuiteRun``), as its hooks get it (``TaskContext.run``)."""
        return self.compiled.context.run

    def join_run(self, run: SuiteRun) -> None:
        """Keep this task's facts of the run (its files' date-time, its judges, failed requests, exit reasons) on the
        evaluation's ``run`` (``contract.adapter.JoinsARun``: compat's ``simple_evaluate`` wrapper hands it over)."""
        self._evaluation_run = True
        self._use_run(run)

    def _use_run(self, run: SuiteRun) -> None:
        self.compiled.context.run = self.compiled.context.run_files.run = run

    def _share_run_without_a_wrapper(self, cli_args) -> None:
        """Where no wrapper made the evaluation's run (``LMMS_EVAL_PLUGINS`` unset, the tasks found through
        ``--include_path``), the suite's tasks of one evaluation share the run kept on the CLI arguments lmms-eval
        hands each of them: one claim of the output folder, one set of judges."""
        if self._evaluation_run or cli_args is None:
            return
        shared = run_of(cli_args)
        if shared is None:
            hand_over(self.run, cli_args)
        else:
            self._use_run(shared)

    def build_all_requests(self, **kwargs) -> None:
        self._bind_to_backend(getattr(self, "args", None))
        if (request_options.SCORED_SPAN, request_options.ANSWER_AND_END_OF_TURN) in \
                [(option, value) for _, option, value in self.requested_options()]:
            self.run.turn_end_tasks.add(self.config.task)  # the results and samples say which token that was
        super().build_all_requests(**kwargs)

    def apply_filters(self):
        # lmms-eval hands process_results only the answers' text: an answer its backend asked again carries its
        # request's record (core.request_facts) to the task's scoring.
        filtered = super().apply_filters()
        for request in self._instances:
            retries = retries_of(request)
            if retries.retries:
                request.filtered_resps = {key: RetriedAnswer(answer, retries) if isinstance(answer, str) else answer
                                          for key, answer in request.filtered_resps.items()}
        return filtered

    def answer_identity(self) -> dict:
        """What the model's answers depend on (``contract.adapter.KeysItsAnswers``), from the config as lmms-eval
        holds it."""
        return self.compiled.answer_identity(self.dump_config())

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
        self._share_run_without_a_wrapper(cli_args)
        claim_output_folder(self.run, cli_args)
        bind_class_task_to_backend(self, cli_args)
        if self.judging is not None and not getattr(cli_args, "predict_only", False):  # predicting only judges nothing
            self.judging.check_answers()
        resolved = resolve_backend(cli_args)
        if resolved is None:
            return
        self._backend, self._chat_backend = resolved.model_id, resolved.model_type == "chat"
        refuse_what_cannot_serve(self, cli_args, resolved)
        if self.spec.on_backend is not None:
            self.spec.on_backend(self.compiled.context, resolved.model_id, self._chat_backend)

    def requested_options(self) -> list[tuple[str, request_options.RequestOption, str]]:
        """(setting, option, value) of every option the task's requests carry: those whose value is
        not lmms-eval's convention, for this task's output type."""
        generative = self.generative
        chosen = [(name, option, getattr(self.settings, name)) for name, option in self.spec.request_options.items()]
        return [(name, option, value) for name, option, value in chosen if value != option.convention
                and not (option.likelihood_only if generative else option.generation_only)]

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
        setting = next((name for name, option in self.spec.request_options.items() if option is order), None)
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


def record_task_judgements_lazily(*outcome: Any) -> None:
    """A judged task's judgements once made set the run's exit status (``harness.judged.record_task_judgements``,
    imported only when a judge has judged)."""
    from lmms_egoplan.harness.judged import record_task_judgements

    record_task_judgements(*outcome)
