"""egoplan_hf's ``fused_elementwise`` (``models.fused_elementwise``): the norms, MLPs and the vision and text rotary
embeddings compiled by torch's inductor score as the eager model does (float32 tightly, bfloat16 within its
precision, the same choices), compile a few graphs per class however many layers use it and none for a new batch's
lengths, and launch fewer kernels per question (speed/bench_loglikelihood.py's ``kernels_per_question``, the CPU's
count); the text rotary function is compiled in its modeling module only while one of the model's attention modules
runs."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._inductor import cpp_builder

from lmms_egoplan.core.settings import SettingsError
from lmms_egoplan.models.egoplan_hf import EgoPlanHF
from tests.gpu.conftest import load_speed_module
from tests.models.test_egoplan_hf import egoplan_doc, gen_requests, mc_requests
from tests.models.test_likelihood_batching import SEEDS, choices

# float32: the fused kernels sum the norm's squares in another order (measured: at most 4e-7).
FUSED_TOLERANCE = {"float32": 1e-5, "bfloat16": 0.05}  # bfloat16: the suite's precision (test_egoplan_hf)
# Graphs per compiled function: a rank or dtype each (a text and a vision norm), and one more where a length first
# changes; below torch's recompile limit (8), past which it would run the function eagerly unannounced.
MOST_GRAPHS_PER_FUNCTION = 3


@pytest.fixture
def fused_kernels_recorded():
    """Inductor's C++ kernels recorded by the profiler (bench_loglikelihood's kernel count on a CPU), from the first
    compile on."""
    torch._dynamo.reset()
    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_elementwise_scores_as_the_eager_model_with_a_few_graphs_and_fewer_kernels(
    dtype, tiny_model, fused_kernels_recorded
):
    bench = load_speed_module("bench_loglikelihood")
    # 4 decoder layers and vision blocks: a recompile per layer would show as more graphs than functions x 3.
    model = EgoPlanHF(
        pretrained=str(tiny_model("qwen2_5_vl", num_layers=4)),
        device="cpu",
        dtype=dtype,
        batch_size=3,
        continuation_batch_size=5,
        fused_elementwise=True,
    )
    fused = model.fused_elementwise
    requests = mc_requests(model, [egoplan_doc(seed) for seed in SEEDS])
    first, later = requests[:12], requests[12:]  # 3 questions of 4 candidates, then 2
    fused.enabled = False
    expected = model.loglikelihood(first) + model.loglikelihood(later)
    fused.enabled = True
    values = model.loglikelihood(first)
    graphs = fused.compiled_variants()
    values += model.loglikelihood(later)  # other prompt lengths and batch sizes: nothing new compiled
    assert fused.compiled_variants() == graphs
    compiled = {function.__qualname__ for function in fused._compiled}
    assert compiled == {
        "Qwen2_5_VLRMSNorm.forward",
        "Qwen2MLP.forward",
        "Qwen2_5_VLMLP.forward",
        "apply_rotary_pos_emb_vision",
        "apply_rotary_pos_emb",
    }
    assert len(compiled) <= graphs <= MOST_GRAPHS_PER_FUNCTION * len(compiled)
    assert [v for v, _ in values] == pytest.approx([v for v, _ in expected], abs=FUSED_TOLERANCE[dtype])
    assert choices(values) == choices(expected)
    if dtype == "float32":  # bfloat16 rounds the argmax's logits alike or not: the choice is what counts there
        assert [greedy for _, greedy in values] == [greedy for _, greedy in expected]
    kernels = {method: bench.kernels_per_question(model, first, method, 3) for method in ("batched", "batched_fused")}
    assert kernels["batched_fused"] < kernels["batched"]


def test_generation_runs_the_modules_own_forwards_and_a_machine_without_inductor_is_told_at_once(
    tiny_model, monkeypatch
):
    torch._dynamo.reset()
    pretrained = str(tiny_model("qwen2_5_vl"))
    eager, model = (
        EgoPlanHF(pretrained=pretrained, device="cpu", dtype="float32", fused_elementwise=fused)
        for fused in (False, True)
    )
    expected = eager.generate_until(gen_requests(eager, [egoplan_doc(0)], max_new_tokens=4))
    assert model.generate_until(gen_requests(model, [egoplan_doc(0)], max_new_tokens=4)) == expected
    assert model.fused_elementwise.enabled and model.fused_elementwise.compiled_variants() == 0  # nothing compiled

    def no_compiler():
        raise RuntimeError("no g++ on PATH")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with pytest.raises(
        SettingsError,
        match=r"fused_elementwise=true compiles with torch's inductor, which cannot run "
        r"here: no C\+\+ compiler for inductor's CPU kernels \(no g\+\+ on PATH\)",
    ):
        EgoPlanHF(pretrained=pretrained, device="cpu", fused_elementwise=True)
    EgoPlanHF(pretrained=pretrained, device="cpu")  # without it, nothing asks for a compiler


def test_the_rotary_functions_are_compiled_only_while_the_models_attention_modules_run(tiny_model):
    torch._dynamo.reset()
    model = EgoPlanHF(pretrained=str(tiny_model("qwen2_5_vl", num_layers=2)), device="cpu", dtype="float32",
                      fused_elementwise=True)
    fused = model.fused_elementwise
    # The text attention, and the vision attention in its packed forward (vision_attention): the projection that
    # each runs before its rotary embedding records what the name holds there.
    attentions = {"apply_rotary_pos_emb": ("Qwen2_5_VLAttention", "q_proj"),
                  "apply_rotary_pos_emb_vision": ("Qwen2_5_VLVisionAttention", "qkv")}
    namespace = inspect.unwrap(type(model.model).forward).__globals__  # the modeling module of them all
    originals = {name: namespace[name] for name in attentions}
    seen = {name: [] for name in attentions}
    hooks = []
    for name, (attention, projection) in attentions.items():
        module = next(m for m in model.model.modules() if type(m).__name__ == attention)
        hooks.append(getattr(module, projection).register_forward_hook(
            lambda *_, name=name: seen[name].append(namespace[name])))
    assert model.vision_attention is not None  # packed
    requests = mc_requests(model, [egoplan_doc(SEEDS[0])])
    model.loglikelihood(requests)
    for name, original in originals.items():
        assert seen[name] and all(function is fused._compiled[original] for function in seen[name]), name
        assert namespace[name] is original  # put back after each forward

    seen = {name: [] for name in attentions}
    model.generate_until(gen_requests(model, [egoplan_doc(0)], max_new_tokens=2))  # generation: unfused
    assert all(seen[name] and all(function is originals[name] for function in seen[name]) for name in attentions)

    def failing(*_):
        raise RuntimeError("out of memory")

    hooks[0].remove()
    next(m for m in model.model.modules() if type(m).__name__ == "Qwen2_5_VLAttention").q_proj.register_forward_hook(
        failing)
    with pytest.raises(RuntimeError, match="out of memory"):
        model.loglikelihood(requests)
    assert all(namespace[name] is original for name, original in originals.items())  # put back on an error too
