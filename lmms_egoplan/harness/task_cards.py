"""Each task's card: what it computes, written from its YAML and the spec the YAML names, into one generated file per
benchmark folder (``tasks/<benchmark>/task_cards.md``, ``lm_eval_tasks/<benchmark>/task_cards.md``), a section per
task and group. One file per folder, not one per task: the tasks of one spec (a benchmark's dimensions or data
parts, a dozen YAMLs that differ in ``dataset_name``) read side by side, and the hand-written README holds no
generated text.

A card says the task's protocol (output type, split, dataset part, decoding and prompt preset under the default
settings), its hooks (the spec's functions by dotted name, at the moment the harness calls them), its metrics (each
aggregation and whether higher is better; those the documents decide named by the function that decides them) and
its settings (name, variable, default, the YAML's value and what each changes, from the comment beside its field).
``python -m lmms_egoplan.harness.task_cards`` writes them; ``tests/harness/test_task_cards.py`` fails when one is not
current."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import io
import json
import tokenize
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping

from lmms_egoplan.contract.benchmark import Benchmark, Judged, Metric, TaskContext, TaskSpec
from lmms_egoplan.core.settings import env_var, resolve_settings
from lmms_egoplan.harness.compiled_task import (
    BENCHMARK_KEY,
    GENERATIVE_OUTPUT_TYPES,
    SKIPPED_SAMPLES,
    TASK_SPEC_KEY,
    named_task,
)
from lmms_egoplan.harness.failed_requests import FAILED_REQUESTS_METRIC

CARDS_FILE = "task_cards.md"
# The two harnesses' task trees (installed packages; a checkout's tasks/ and lm_eval_tasks/): the field of a
# Benchmark naming their specs, and the one generative-task metric the adapter adds.
HARNESSES = {"lmms_egoplan.tasks": ("lmms-eval", "lmms_eval_tasks", (FAILED_REQUESTS_METRIC,)),
             "lmms_egoplan.lm_eval_tasks": ("lm-eval", "lm_eval_baselines", ())}
# The hooks of a spec, by the moment the harness calls them.
HOOK_MOMENTS = (
    ("the task is built", ("configure", "judge_rubric", "run_state", "load_docs", "not_scored",
                           "metrics_of_the_data")),
    ("the run's backend is resolved, before the model loads", ("on_backend",)),
    ("each document's requests are built", ("doc_to_visual", "doc_to_text", "doc_to_messages", "doc_to_choice",
                                            "doc_to_target")),
    ("each document's answers are scored", ("process_results",)),
)


def dotted(value: Any) -> str:
    """A function by its dotted name (a partial one with its bound arguments); any other value as written."""
    if isinstance(value, functools.partial):
        bound = [*map(repr, value.args), *(f"{key}={item!r}" for key, item in value.keywords.items())]
        return f"{dotted(value.func)[:-1]}({', '.join(bound)})`"
    if callable(value) and hasattr(value, "__qualname__"):
        return f"`{value.__module__}.{value.__qualname__}`"
    return f"`{value!r}`"


def type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def first_line(value: Any) -> str:
    """The first paragraph of a function's docstring, on one line, as a table cell."""
    value = value.func if isinstance(value, functools.partial) else value
    doc = inspect.getdoc(value) if callable(value) else None
    return as_cell(" ".join(doc.split("\n\n")[0].split())) if doc else ""


def as_cell(text: str) -> str:
    """Prose as a Markdown table cell: a ``|`` escaped, and ``<`` ``>`` outside code spans too (``<root>/...`` would
    render as an HTML tag, and vanish)."""
    parts = text.replace("|", "\\|").split("`")
    return "`".join(part if index % 2 else part.replace("<", "&lt;").replace(">", "&gt;")
                    for index, part in enumerate(parts))


def load_yaml(path: Path) -> dict:
    """A YAML as the harness loads it: includes merged, ``!function`` values imported."""
    from lmms_eval.utils import load_yaml_config

    return load_yaml_config(str(path), mode="full")


def field_comments(settings: type) -> dict[str, str]:
    """What each setting changes: the comment lines above its field and the comment beside it, in the classes of
    the settings' dataclass (its bases included)."""
    comments: dict[str, str] = {}
    for cls in reversed(settings.__mro__):
        if not dataclasses.is_dataclass(cls) or cls is object:
            continue
        lines, _ = inspect.getsourcelines(cls)
        tokens = tokenize.generate_tokens(io.StringIO("".join(lines)).readline)
        by_line = {token.start[0]: token.string.lstrip("# ").strip() for token in tokens
                   if token.type == tokenize.COMMENT}
        above: list[str] = []
        for number, line in enumerate(lines, start=1):
            stripped = line.strip()
            if stripped.startswith("#"):
                above.append(by_line.get(number, ""))
                continue
            name = stripped.split(":", 1)[0]
            if name.isidentifier() and ":" in stripped and name in {f.name for f in dataclasses.fields(cls)}:
                beside = [by_line[number]] if number in by_line else []
                comments[name] = " ".join([*above, *beside])
            above = []
    return comments


def settings_rows(benchmark: Benchmark, metadata: Mapping[str, Any]) -> list[str]:
    comments = field_comments(benchmark.settings)
    rows = ["| setting | variable | default | this YAML | what it changes |", "| --- | --- | --- | --- | --- |"]
    for field in dataclasses.fields(benchmark.settings):
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        yaml_value = f"`{json.dumps(metadata[field.name])}`" if field.name in metadata else ""
        rows.append(f"| `{field.name}` | `{env_var(benchmark.entry.env_prefix, field.name)}` | "
                    f"`{json.dumps(default, default=str)}` | {yaml_value} | {as_cell(comments.get(field.name, ''))} |")
    return rows


def aggregation_text(metric: Metric) -> str:
    aggregation = metric.aggregation
    if isinstance(aggregation, Judged):
        from lmms_egoplan.harness.judged import JUDGED_AGGREGATIONS

        return f"judged ({aggregation.name}): {dotted(JUDGED_AGGREGATIONS[aggregation])}"
    return f"`{aggregation}`" if isinstance(aggregation, str) else dotted(aggregation)


def metric_rows(metrics: Iterable[Metric]) -> list[str]:
    rows = ["| metric | aggregation | higher is better |", "| --- | --- | --- |"]
    return rows + [f"| `{metric.name}` | {aggregation_text(metric)} | {'yes' if metric.higher_is_better else 'no'} |"
                   for metric in metrics]


def hook_rows(spec: TaskSpec) -> list[str]:
    rows = ["| when | hook | what it does |", "| --- | --- | --- |"]
    for moment, names in HOOK_MOMENTS:
        rows += [f"| {moment} | `{name}`: {dotted(getattr(spec, name))} | {first_line(getattr(spec, name))} |"
                 for name in names if getattr(spec, name) is not None]
    if spec.process_results is None:
        rows.append("| each document's answers are scored | the harness's own scoring of the output type | |")
    return rows


def card_metrics(spec: TaskSpec, config: Mapping[str, Any], counted: Iterable[Metric]) -> list[Metric]:
    """The metrics every run of the task reports: the spec's, then those the adapter adds to a generative task."""
    generative = config.get("output_type", "generate_until") in GENERATIVE_OUTPUT_TYPES
    names = {metric.name for metric in spec.metrics}
    return [*spec.metrics, *(metric for metric in counted if generative and metric.name not in names)]


def protocol_lines(benchmark: Benchmark, spec: TaskSpec, config: Mapping[str, Any]) -> list[str]:
    """Output type, split, part and the decoding and prompt preset under the default settings (the YAML's metadata
    over the defaults, no variable set)."""
    metadata = {key: value for key, value in (config.get("metadata") or {}).items() if key != "version"}
    settings = resolve_settings(benchmark.settings, task=config["task"], metadata=metadata,
                                env_prefix=benchmark.entry.env_prefix, environ={})
    configuration = spec.configure(TaskContext(task_name=config["task"], settings=settings,
                                               dataset_name=config.get("dataset_name")), config) \
        if spec.configure is not None else None
    generation = {**(config.get("generation_kwargs") or {}),
                  **(configuration.generation_kwargs if configuration is not None else {})}
    preset = configuration.prompt_preset if configuration is not None and configuration.prompt_preset else \
        (config.get("lmms_eval_specific_kwargs") or {}).get("default")
    split = config.get("test_split") or config.get("validation_split")
    lines = [f"- output type: `{config.get('output_type', 'generate_until')}`; split: `{split}`"
             + (f"; dataset part: `{config['dataset_name']}`" if config.get("dataset_name") else "")
             + f"; version {(config.get('metadata') or {}).get('version')}"]
    if generation:
        lines.append(f"- decoding (default settings{', the spec sets it' if configuration else ''}): "
                     f"`{json.dumps(generation)}`")
    if preset:
        lines.append(f"- prompt preset (default): `{json.dumps(preset)}`")
    return lines


def task_card(path: Path, config: Mapping[str, Any], harness_specs: str, counted: Iterable[Metric]) -> list[str]:
    benchmark, spec = named_task(config, harness_specs)
    spec_name = config[TASK_SPEC_KEY]
    metadata = {key: value for key, value in (config.get("metadata") or {}).items() if key != "version"}
    lines = [f"## `{config['task']}`", "",
             f"[`{path.name}`]({path.name}): `{BENCHMARK_KEY}` {benchmark.name}, `{TASK_SPEC_KEY}` `{spec_name}` "
             f"(its `{harness_specs}[{spec_name!r}]`), run by `{type_name(config['class'])}`.", "", "Protocol:", "",
             *protocol_lines(benchmark, spec, config), "", "Hooks:", "", *hook_rows(spec), "", "Metrics:", "",
             *metric_rows(card_metrics(spec, config, counted)), ""]
    if spec.metrics_of_the_data is not None:
        lines += [f"Once the documents are loaded, {dotted(spec.metrics_of_the_data)} adds the metrics they decide: "
                  f"{first_line(spec.metrics_of_the_data)}", ""]
    lines += [f"When the loader leaves samples out, `{SKIPPED_SAMPLES.name}` too (largest, lower is better).", "",
              f"Settings (`{benchmark.settings.__module__}.{benchmark.settings.__qualname__}`: defaults < the YAML's "
              f"`metadata` < the settings file < the variable):", "", *settings_rows(benchmark, metadata), ""]
    return lines


def group_card(path: Path, config: Mapping[str, Any]) -> list[str]:
    members = [member if isinstance(member, str) else member["task"] for member in config["task"]]
    rows = ["| metric | aggregation | weighted by size |", "| --- | --- | --- |"]
    for entry in config.get("aggregate_metric_list") or ():
        aggregation = entry["aggregation"]
        shown = f"`{aggregation}`" if isinstance(aggregation, str) else dotted(aggregation)
        rows.append(f"| `{entry['metric']}` | {shown} | {'yes' if entry.get('weight_by_size', False) else 'no'} |")
    return [f"## `{config['group']}` (group)", "", f"[`{path.name}`]({path.name}): the group of "
            + ", ".join(f"`{member}`" for member in members) + ".", "", "Aggregated metrics:", "", *rows, ""]


def folder_cards(folder: Path, harness: str, harness_specs: str, counted: Iterable[Metric]) -> str:
    """The cards of one benchmark folder's tasks and groups, in name order."""
    sections: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.yaml")):
        config = load_yaml(path)
        if isinstance(config.get("task"), list):
            sections[config["group"]] = group_card(path, config)
        elif "class" in config:
            sections[config["task"]] = task_card(path, config, harness_specs, counted)
    header = [f"# The {harness} tasks of this folder: what each computes", "",
              "Generated from the YAMLs and the specs they name by `python -m lmms_egoplan.harness.task_cards`; "
              "do not edit (`tests/harness/test_task_cards.py` fails when a card is not current).", ""]
    return "\n".join([*header, *(line for name in sorted(sections) for line in sections[name])]).rstrip() + "\n"


def every_card() -> dict[Path, str]:
    """Each benchmark folder's cards file, by its path, for both harnesses' task trees."""
    cards = {}
    for package, (harness, harness_specs, counted) in HARNESSES.items():
        root = Path(str(resources.files(package)))
        for folder in sorted(path for path in root.iterdir() if path.is_dir() and any(path.glob("*.yaml"))):
            cards[folder / CARDS_FILE] = folder_cards(folder, harness, harness_specs, counted)
    return cards


def write_cards() -> list[Path]:
    """Write every cards file that is not current; the files written."""
    written = []
    for path, text in every_card().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
    return written


if __name__ == "__main__":
    for path in write_cards():
        print(f"wrote {path}")
