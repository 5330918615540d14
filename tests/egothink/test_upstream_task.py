"""The EgoThink pull request for lmms-eval (docs/upstream/30-egothink-paper-protocol.patch, on 36 and 24), held to
the suite in process: its dimension tasks are the suite's (config, prompt template), its groups hold the suite's
groups' members, its per-model inference presets (Tables 5-6; only those of backends lmms-eval has) and decoding are
the suite's, and for every preset its task, in a scratch copy of lmms-eval with 36, 24 and 30 applied, gives the text
and chat messages the suite's task gives. The end-to-end run (the default preset, the judge, the scores):
tests/e2e/test_upstream_equivalence.py."""

from __future__ import annotations

import importlib.resources
import importlib.util

import pytest
import yaml
from lmms_eval.models import AVAILABLE_MODELS
from PIL import Image

from lmms_egoplan.egothink import task as suite_task
from lmms_egoplan.egothink.data import CAPABILITIES, DIMENSIONS
from tests.e2e.upstream_patches import PATCHES, git_apply, scratch_lmms_eval

SERIES = [PATCHES / "36-llm-judge-base-url.patch", PATCHES / "24-egothink-llm-judge.patch",
          PATCHES / "30-egothink-paper-protocol.patch"]
FOLDER = "lmms_eval/tasks/egothink"
SUITE_TEMPLATES = {"_paper_short_answer_template_yaml": "_short_answer_yaml",
                   "_paper_planning_template_yaml": "_planning_yaml"}


class _Loader(yaml.SafeLoader):
    """lmms-eval's task YAMLs, their ``!function`` tags read as None."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A scratch copy of the installed lmms-eval with 36, 24 and 30 applied."""
    folder = scratch_lmms_eval(tmp_path_factory.mktemp("lmms-eval"))
    for patch in SERIES:
        applied = git_apply(patch, folder)
        assert applied.returncode == 0, applied.stderr
    return folder


@pytest.fixture(scope="module")
def upstream_yaml(scratch):
    return lambda name: yaml.load((scratch / FOLDER / name).read_text(), Loader=_Loader)


def suite_yaml(name: str) -> dict:
    return yaml.load((importlib.resources.files("lmms_egoplan.tasks") / "egothink" / name).read_text(), Loader=_Loader)


@pytest.fixture(scope="module")
def utils(scratch):
    spec = importlib.util.spec_from_file_location("egothink_utils_patched", scratch / FOLDER / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_dimensions_and_groups_are_the_suites(upstream_yaml):
    for dimension in DIMENSIONS.values():
        task = upstream_yaml(f"egothink_paper_{dimension.name}.yaml")
        template = ("_paper_planning_template_yaml" if dimension.capability == "Planning"
                    else "_paper_short_answer_template_yaml")
        assert task == {"task": f"egothink_paper_{dimension.name}", "dataset_name": dimension.hub_config,
                        "include": template}
    for capability, names in CAPABILITIES.items():
        group = upstream_yaml(f"egothink_paper_capability_{capability}.yaml")
        assert group["task"] == [f"egothink_paper_{name}" for name in names]
        assert suite_yaml(f"ego_think_capability_{capability}.yaml")["task"] == [f"ego_think_{n}" for n in names]
    top = upstream_yaml("egothink_paper.yaml")
    assert top["task"] == [f"egothink_paper_capability_{capability}" for capability in CAPABILITIES]
    assert [metric["metric"] for metric in top["aggregate_metric_list"]] == ["score", "judged", "failed"]
    assert top["aggregate_metric_list"][0] == {"metric": "score", "aggregation": "mean", "weight_by_size": False}


@pytest.mark.parametrize("template", sorted(SUITE_TEMPLATES))
def test_its_presets_and_decoding_are_the_suites_for_lmms_evals_backends(upstream_yaml, template):
    ours, theirs = upstream_yaml(template), suite_yaml(SUITE_TEMPLATES[template])
    presets = ours["lmms_eval_specific_kwargs"]
    assert set(presets) - {"default"} <= set(AVAILABLE_MODELS)
    assert presets == {name: theirs["lmms_eval_specific_kwargs"][name] for name in presets}
    assert set(theirs["lmms_eval_specific_kwargs"]) - set(presets) == {  # the suite's own backends' names
        "blip2", "llama_adapter", "minigpt4", "mplug_owl", "openflamingo", "otter", "pandagpt"}
    defaults = {**suite_yaml("_default_template_yaml")["generation_kwargs"], **theirs.get("generation_kwargs", {})}
    assert {**upstream_yaml("_paper_template_yaml")["generation_kwargs"], **ours.get("generation_kwargs", {})} \
        == defaults


@pytest.mark.parametrize("template", sorted(SUITE_TEMPLATES))
def test_every_preset_gives_the_suites_text_and_messages(utils, upstream_yaml, template, tmp_path):
    image = tmp_path / "frame.png"
    Image.new("RGB", (8, 6), (10, 20, 30)).save(image)
    question = "[navigation 0] How do I get to the door?"
    for preset in upstream_yaml(template)["lmms_eval_specific_kwargs"].values():
        ours = utils.egothink_paper_doc_to_messages({"question": question, "image": Image.open(image)}, preset)
        theirs = suite_task.doc_to_messages({"question": question, "image": str(image)}, preset)
        assert utils.egothink_paper_doc_to_text({"question": question}, preset) == \
            suite_task.doc_to_text({"question": question}, preset)
        assert [(turn["role"], texts(turn)) for turn in ours] == [(turn["role"], texts(turn)) for turn in theirs]
        assert [len(turn["content"]) for turn in ours] == [len(turn["content"]) for turn in theirs]


def texts(turn: dict) -> list[str]:
    return [part["text"] for part in turn["content"] if part.get("type") == "text"]

