"""Which of lmms-eval's backends an lmms-eval run of a suite task uses (``--model``, resolved as lmms-eval resolves
it), and, before the model loads, the refusal of one that cannot serve the task: a backend without loglikelihood for
a task that ranks candidates by it (naming the ways that work), one that cannot honour a request option that changes
scores (one that places visuals its own way is warned of). ``task``: the lmms-eval adapter,
``harness.lmms_eval_task.SuiteTask``."""

from __future__ import annotations

from typing import Any

from loguru import logger

from lmms_egoplan.compat.durability import missing_dependency_hint
from lmms_egoplan.compat.switches import BACKEND_CHOSEN, switch_on
from lmms_egoplan.core.python_source import parse_python
from lmms_egoplan.core.settings import SettingsError, setting_name
from lmms_egoplan.harness import backend_source

LIKELIHOOD_OUTPUT_TYPES = ("loglikelihood", "multiple_choice")


def resolve_backend(cli_args: Any) -> Any | None:
    """lmms-eval's resolution of the run's ``--model`` (``model_id``, ``model_type``, ``class_path``, ...); None
    when the arguments name no model."""
    model = getattr(cli_args, "model", None)
    if not isinstance(model, str):
        return None
    from lmms_eval.models import MODEL_REGISTRY_V2

    return MODEL_REGISTRY_V2.resolve(model, force_simple=bool(getattr(cli_args, "force_simple", False)))


def refuse_what_cannot_serve(task: Any, cli_args: Any, resolved: Any) -> None:
    """Refuse the run's backend (``resolved``) where it cannot serve ``task``; a simple one is imported (its source
    read first: an import can fail, or take a minute) and handed to the workarounds (``BACKEND_CHOSEN``)."""
    model = cli_args.model
    force_simple = bool(getattr(cli_args, "force_simple", False))
    if resolved.model_type == "chat":
        from lmms_eval.models import MODEL_REGISTRY_V2

        simple = MODEL_REGISTRY_V2.resolve(model, force_simple=True)
        scores = simple.model_type == "simple" and \
            backend_source.computes_loglikelihood(simple.class_path) is not False
        check_backend_scores(task, model, "lmms-eval's chat implementation of it only generates",
                             [resolved.class_path, *([simple.class_path] if scores else [])])
        return
    # Refused from its source before its module is imported (an import can fail, or take a minute).
    if backend_source.computes_loglikelihood(resolved.class_path) is False:
        check_backend_scores(task, model, f"lmms-eval's {resolved.class_name} does not implement loglikelihood",
                             [resolved.class_path])
    model_class = backend_class(model, force_simple)
    switch_on(BACKEND_CHOSEN, backend=model_class)
    if not computes_loglikelihood(model_class):
        check_backend_scores(task, model, f"lmms-eval's {model_class.__name__} does not implement loglikelihood",
                             [f"{model_class.__module__}.{model_class.__qualname__}"])
    check_backend_honours_options(task, model_class, model)


def check_backend_scores(task: Any, model: str, why: str, class_paths: list[str]) -> None:
    """Refuse a backend without loglikelihood for a task that ranks candidates by it, naming those that can, and
    the ways with this backend that work: ``class_paths``, its class for the generative variant, then its
    simple implementation where that one scores (``--force_simple``); what they need on a CPU-only machine."""
    if task.OUTPUT_TYPE not in LIKELIHOOD_OUTPUT_TYPES:
        return
    variant = task.spec.generative_variant
    ways = [f"run the generative task {variant} with --model {model}"] if variant else []
    if len(class_paths) > 1:
        ways.append(simple_backend_hint(task, model))
    needs = backend_source.needs(*([class_paths[0]] if variant else []), *class_paths[1:])
    raise SettingsError(
        f"task {task.config.task} ranks its candidate answers by likelihood, which --model {model} does not "
        f"compute ({why}); run it with --model egoplan_hf (transformers, in this process) or --model "
        f"egoplan_server (an SGLang / vLLM server)" + "".join(f", or {way}" for way in ways)
        + (f"; --model {model} needs {needs}" if needs else ""))


def simple_backend_hint(task: Any, model: str) -> str:
    """How ``task`` runs on lmms-eval's simple implementation of ``model``: ``--force_simple``, with lmms-eval's
    conventions for the options that backend does not honour (the answer's tokens only, for one)."""
    conventions = [f"{setting_name(task.benchmark.entry.env_prefix, name)} set to {option.convention!r}"
                   for name, option, _ in task.requested_options() if option.binding]
    return (f"add --force_simple for lmms-eval's simple implementation of {model}, which scores by "
            f"lmms-eval's conventions" + (f": with {' and '.join(conventions)}" if conventions else ""))


def check_backend_honours_options(task: Any, model_class: type, model: str) -> None:
    """Refuse a backend that cannot honour request options of ``task`` that change scores, naming all of them at
    once; warn of one that follows its own convention for an option that does not."""
    refused = []
    for name, option, value in task.requested_options():
        if option.honoured_by(model_class, value) or option.said_by_task:
            continue
        setting = setting_name(task.benchmark.entry.env_prefix, name)
        if option.binding:
            refused.append((option, value, setting))
            continue
        logger.warning(f"task {task.config.task} asks for {option.name} {value!r} ({setting}), which backend "
                       f"{model!r} does not declare it honours: it follows its own convention")
    if refused:
        asked = " and ".join(f"{option.name} {value!r}" for option, value, _ in refused)
        conventions = " and ".join(f"{setting} to {option.convention!r}" for option, _, setting in refused)
        raise SettingsError(
            f"task {task.config.task} asks for {asked} (its official evaluation does), which backend {model!r} "
            f"cannot honour; use --model egoplan_hf, or set {conventions} (lmms-eval's convention"
            f"{'s' if len(refused) > 1 else ''})")


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
    import inspect
    import textwrap

    method = getattr(model_class, "loglikelihood", None)
    if method is None or getattr(method, "__isabstractmethod__", False):
        return False
    try:
        definition = parse_python(textwrap.dedent(inspect.getsource(method))).body[0]
    except (OSError, TypeError, SyntaxError):  # no source to read: trust the class
        return True
    return not backend_source.refuses_every_call(definition)
