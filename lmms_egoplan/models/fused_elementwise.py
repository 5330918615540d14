"""The elementwise work of ``egoplan_hf``'s model fused into a few kernels: regional ``torch.compile``, opt in with
``--model_args fused_elementwise=True``.

In eager mode every elementwise operation is a kernel of its own that reads and writes the whole tensor: a
Qwen-VL RMSNorm is seven of them (the float32 cast, square, mean, add, rsqrt, two multiplies, the cast back), the
SiLU gating of an MLP two, the vision tower's rotary embedding a dozen. At Qwen2.5-VL-7B's shape on an H200 they
took about 0.8 s of the 2.63 s the GPU worked for 32 questions, five times the attention's 0.16 s (README, "Running
on a GPU"). Compiling the modules that hold no
state between calls -- the norms and the MLPs (``FUSED_CLASS_SUFFIXES``) -- and the rotary embeddings lets torch's
inductor fuse each one's elementwise operations into one kernel around the matrix products, with the same
arithmetic. The decoder layers themselves stay eager: their attention updates the KV cache, whose per-layer state
would make torch recompile each layer. What an attention computes elementwise, the rotary embedding (text: five
kernels each for the query and the key, two products, a negation, a concatenation and a sum; vision: the same in
float32 with the casts), is a function of its modeling module (``FUSED_FUNCTIONS``) that the attention's forward
looks up there when called: while one of the model's attention modules runs, that name holds its compiled version
(also for ``vision_attention``'s packed forward, which looks it up the same way).

One compiled function serves every instance of a class (torch inlines the module and takes its weights as inputs),
so a model compiles each class's forward a few times -- per input rank and dtype, and once more when a sequence
length first changes (from then on the lengths are symbolic) -- not once per layer: ``compiled_variants`` counts
them, speed/bench_loglikelihood.py reports them and the tests bound them.

Scoped: the forward is set on the module instances of the model egoplan_hf loaded (no class is changed, so no
other model in the process is affected); modules with accelerate's hook (``device_map`` placement) keep theirs. The
rotary function is swapped in its module only for the duration of one of those modules' forwards and put back after
it, also on an error (a model of the same architecture running meanwhile in another thread would get the compiled
function, which computes the same).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import types
from typing import Callable, Iterator

import torch

# Modules fused, by the end of their class name: stateless functions of their input in every architecture the
# suite runs (Qwen2_5_VLRMSNorm, Qwen2MLP, Qwen2_5_VLMLP, VisionMlp, LlamaMLP, Gemma3RMSNorm, ...).
FUSED_CLASS_SUFFIXES = ("RMSNorm", "MLP", "Mlp")
# Functions of a modeling module, fused where a module's forward calls them: the rotary embeddings of the text
# attention (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Llama, Qwen2, Gemma3, Mistral, ...) and of the Qwen-VL vision attention.
FUSED_FUNCTIONS = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_vision")
# torch.compile's backend: inductor generates the fused kernels (triton on a GPU, C++ on a CPU).
BACKEND = "inductor"


class FusedElementwise:
    """The compiled forwards of one model's fused modules, and whether they are used (``enabled``)."""

    def __init__(self, backend: str = BACKEND):
        self.enabled = True  # False: every module's own forward
        self.backend = backend
        self._compiled: dict[Callable, Callable] = {}  # a function -> its compiled version

    def compiled(self, function: Callable) -> Callable:
        if function not in self._compiled:
            self._compiled[function] = torch.compile(function, backend=self.backend)
        return self._compiled[function]

    def call(self, module, forward: Callable, *args, **kwargs):
        """``module``'s forward: its class's compiled one while enabled (inference only), else its own."""
        if not self.enabled or module.training:
            return forward(*args, **kwargs)
        return self._compiled[type(module).forward](module, *args, **kwargs)

    def call_with_compiled(self, module, forward: Callable, namespace: dict, functions: dict[str, Callable], *args,
                           **kwargs):
        """``module``'s forward with ``functions`` (name -> function of its modeling module, ``namespace``) compiled
        while it runs, where enabled (inference only); put back after it, also on an error. A name that holds
        another function meanwhile (a concurrent call has swapped it, or someone patched it since) is left as it is."""
        if not self.enabled or module.training:
            return forward(*args, **kwargs)
        swapped = {name: function for name, function in functions.items() if namespace.get(name) is function}
        namespace.update({name: self._compiled[function] for name, function in swapped.items()})
        try:
            return forward(*args, **kwargs)
        finally:
            namespace.update(swapped)

    @contextlib.contextmanager
    def unfused(self) -> Iterator[None]:
        """The modules' own forwards meanwhile: generation, whose one-token steps would compile graphs of their own
        (unmeasured; fused_elementwise is the likelihood path's)."""
        enabled, self.enabled = self.enabled, False
        try:
            yield
        finally:
            self.enabled = enabled

    def compiled_variants(self) -> int:
        """Graphs compiled so far, over every compiled function: a new input rank, dtype or (once) a length adds one;
        a count that grew with the layers would mean a recompile per layer."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return sum(len(_debug_get_cache_entry_list(function.__code__)) for function in self._compiled)


def inductor_missing(device: torch.device) -> str | None:
    """Why inductor cannot compile kernels for ``device`` here (no triton for a GPU, no C++ compiler for a CPU), or
    None; asked of torch's own lookups (None where they moved: the first compile then says it)."""
    try:
        if device.type == "cuda":
            from torch.utils._triton import has_triton

            return None if has_triton() else "triton is not installed (inductor writes a GPU's kernels in triton)"
        if device.type == "cpu":
            from torch._inductor.cpp_builder import get_cpp_compiler

            get_cpp_compiler()
    except ImportError:
        return None
    except Exception as error:  # torch's compiler lookup raises its own error types
        return f"no C++ compiler for inductor's CPU kernels ({error})"
    return None


def fuse_elementwise(model, backend: str = BACKEND) -> FusedElementwise | None:
    """Gives ``model``'s stateless modules (``FUSED_CLASS_SUFFIXES``) their class's compiled forward and the modules
    whose forward calls a ``FUSED_FUNCTIONS`` function that function compiled (see the module docstring); None where
    it has neither."""
    unhooked = [m for m in model.modules() if not hasattr(m, "_hf_hook")]  # accelerate's hook keeps its forward
    modules = [m for m in unhooked if type(m).__name__.endswith(FUSED_CLASS_SUFFIXES)]
    callers = {m: called for m in unhooked if (called := _fused_functions_called(m))[1]}
    if not modules and not callers:
        return None
    fused = FusedElementwise(backend)
    for module in modules:
        fused.compiled(type(module).forward)
        module.forward = functools.partial(fused.call, module, module.forward)
    for module, (namespace, functions) in callers.items():
        for function in functions.values():
            fused.compiled(function)
        module.forward = functools.partial(fused.call_with_compiled, module, module.forward, namespace, functions)
    return fused


def _fused_functions_called(module) -> tuple[dict, dict[str, Callable]]:
    """(its modeling module's namespace, name -> function): the ``FUSED_FUNCTIONS`` that ``module``'s class forward
    calls by name from its modeling module (through any decorator: transformers' keyword deprecations wrap it), where
    that name holds a plain function."""
    forward = inspect.unwrap(type(module).forward)
    namespace, code = getattr(forward, "__globals__", {}), getattr(forward, "__code__", None)
    return namespace, {name: namespace[name] for name in FUSED_FUNCTIONS
                       if code is not None and name in code.co_names
                       and isinstance(namespace.get(name), types.FunctionType)}
