"""The likelihood path calls transformers the way the installed release asks: scoring raises no deprecation
warning (issue 57: ``past_key_values=`` warned on every question under transformers 5.24, and 5.40 removes it).

transformers says a call is deprecated in two ways: a ``FutureWarning`` (``deprecate_kwarg``) and a once-per-process
log line (``logger.warning_once``, e.g. "`past_key_values`/`cache_params` are deprecated"); both are caught here,
around scoring only (loading a checkpoint is not the suite's call of ``forward``).
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

import pytest
import torch
import transformers
from transformers.utils import logging as transformers_logging

from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from lmms_egoplan.models.likelihood import cache_keyword
from tests.models.test_egoplan_hf import egoplan_doc, mc_requests

ARCHS = [arch for arch in ARCHITECTURES if arch != "llama"]  # every multimodal tiny checkpoint


@contextmanager
def deprecations_as_errors():
    """Deprecation warnings raise; transformers' deprecation log lines are collected (yielded list)."""
    said: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "deprecat" in record.getMessage().lower():
                said.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    root = transformers_logging.get_logger()  # the library's root logger: its modules' records reach it
    transformers_logging.warning_once.cache_clear()  # a line said earlier in the process is said again
    root.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            warnings.simplefilter("error", DeprecationWarning)
            yield said
    finally:
        root.removeHandler(handler)


@pytest.mark.parametrize("prefix_sharing", [True, False], ids=["prefix_sharing", "full_forward"])
@pytest.mark.parametrize("arch", ARCHS)
def test_scoring_raises_no_deprecation_warning(arch, prefix_sharing, tiny_model):
    backend = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32",
                        prefix_sharing=prefix_sharing)
    requests = mc_requests(backend, [egoplan_doc(0)])
    with deprecations_as_errors() as said:
        scores = backend.loglikelihood(requests)
    assert len(scores) == len(requests)
    assert said == [], f"{arch}: transformers logged a deprecation while the suite scored: {said}"


def test_the_check_catches_a_deprecated_call(tiny_model):
    """The old call (``past_key_values=``, still accepted by the installed transformers) is caught."""
    backend = EgoPlanHF(pretrained=str(tiny_model("qwen2_vl")), device="cpu", dtype="float32")
    model = backend.model
    if cache_keyword(model) == "past_key_values":
        pytest.skip(f"transformers {transformers.__version__} takes `past_key_values` as the cache's own name: "
                    "no deprecated call to catch (the lowest admitted release, CI's second run)")
    ids = backend.tokenizer("a cup", return_tensors="pt")["input_ids"]
    with pytest.raises(FutureWarning, match="past_key_values"), deprecations_as_errors():
        prefill = model(input_ids=ids, use_cache=True)
        model(input_ids=ids[:, -1:], past_key_values=prefill.cache, use_cache=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_kv_cache_goes_by_the_name_the_installed_transformers_gives_it(arch, tiny_model):
    """``cache`` from transformers 5.24 on, ``past_key_values`` before (5.20.x, what vLLM 0.33.0 installs): the
    keyword is read from the model and is the name its output holds the cache under."""
    model = EgoPlanHF(pretrained=str(tiny_model(arch)), device="cpu", dtype="float32").model
    release = tuple(int(part) for part in transformers.__version__.split(".")[:2])
    keyword = cache_keyword(model)
    assert keyword == ("cache" if release >= (5, 24) else "past_key_values")
    ids = torch.tensor([[1, 2, 3]])
    with deprecations_as_errors() as said:
        prefill = model(input_ids=ids, use_cache=True)
        model(input_ids=ids[:, -1:], use_cache=True, **{keyword: prefill[keyword]})
    assert prefill[keyword] is not None and said == []
