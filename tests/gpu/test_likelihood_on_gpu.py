"""egoplan_hf scores alike on the GPU and on the CPU: every tiny architecture, in float32 and in bfloat16, on EgoPlan
questions as egoplan_val sends them (its prompt, 8 progress frames and the observation, 4 candidates scored over the
answer and the end-of-turn token); recorded: the largest loss difference and on how many questions the choice is
the same."""

import numpy as np
import pytest

from lmms_egoplan.core.request_options import ANSWER_AND_END_OF_TURN
from lmms_egoplan.demo.kit.checkpoints import ARCHITECTURES, TEXT_ONLY_ARCHITECTURES
from lmms_egoplan.models.egoplan_hf import EgoPlanHF

from .conftest import QUICK, SMALLEST, load_speed_module

# Every multimodal tiny architecture at every setting: the smallest one (the fast tier's run of the command, and
# `speed/gpu_check.py lock`'s) imports what each architecture's processor and model import on the GPU machine.
ARCHS = [arch for arch in ARCHITECTURES if arch not in TEXT_ONLY_ARCHITECTURES]
# bfloat16, where the devices' kernels differ most, at the smallest setting and in --quick; float32 too in full.
DTYPES = ["bfloat16"] if SMALLEST or QUICK else ["float32", "bfloat16"]
# The largest difference of a candidate's mean token loss (about 6.4 for these vocabularies) allowed between the
# devices: float32 on a GPU convolves in TF32 by default (cuDNN; about 3e-4 relative); bfloat16 rounds to 2^-8
# relative in every layer of both devices' different kernels. A choice can flip only between candidates whose
# losses are closer than twice the difference: the table says how many questions kept theirs.
TOLERANCE = {"float32": 5e-3, "bfloat16": 1e-1}


def losses(pretrained, device: str, dtype: str, docs: list[dict]) -> tuple[np.ndarray, str]:
    """Each question's 4 candidate losses (questions x candidates), with the backend's defaults there (on a GPU its
    GPU_DEFAULTS: fused elementwise work, batches prepared in worker processes, candidates inside the prefill)."""
    bench = load_speed_module("bench_loglikelihood")
    backend = EgoPlanHF(pretrained=str(pretrained), device=device, dtype=dtype)
    backend.task_dict = {bench.TASK: {bench.SPLIT: docs}}
    values = backend.loglikelihood(bench.requests_for(docs, ANSWER_AND_END_OF_TURN))
    defaults = (f"fused_elementwise {'on' if backend.fused_elementwise else 'off'}, "
                f"prefetch_processes {backend.prefetch_processes}, "
                f"candidates_in_prefill {'on' if backend.scorer.candidates_in_prefill else 'off'}")
    return np.array([loss for loss, _ in values]).reshape(len(docs), 4), defaults


# The budget holds the GPU defaults' inductor compile, a few graphs per architecture.
@pytest.mark.gpu_budget(full=240, quick=160)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_likelihoods_on_the_gpu_equal_the_cpus(arch, dtype, gpu_check, tiny_model):
    bench = load_speed_module("bench_loglikelihood")
    docs = bench.egoplan_docs(gpu_check.pick(full=8, smallest=1), bench.FRAME_SIDE["tiny"], observation=True)
    (on_cpu, _), (on_device, defaults) = (losses(tiny_model(arch), device, dtype, docs)
                                          for device in ("cpu", gpu_check.device))
    difference = float(np.abs(on_cpu - on_device).max())
    same = int((on_cpu.argmin(axis=1) == on_device.argmin(axis=1)).sum())
    gpu_check.record("likelihood, GPU vs CPU", f"{arch} {dtype}",
                     result=f"largest loss difference {difference:.1e}; same choice on {same} of {len(docs)} questions "
                            f"({gpu_check.device}: {defaults})",
                     max_loss_difference=difference, same_choice=same, questions=len(docs))
    assert difference <= TOLERANCE[dtype], f"{arch} {dtype}: the GPU's losses differ from the CPU's by {difference}"
