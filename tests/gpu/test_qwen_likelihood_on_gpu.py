"""Issue 55's GPU check: lmms-eval's qwen2_5_vl with the loglikelihood of pull request 25 (a patched scratch copy,
sharing a question's prompt across its candidates; also timed one pass per candidate) against the suite's egoplan_hf
at Qwen2.5-VL-7B's published shape (random weights, bfloat16, all 28 layers; speed/bench_qwen_loglikelihood.py):
each candidate's loss within the dtype's tolerance, the same choice on at least 99 % of the questions beyond the near
ties (lmms-eval's two lowest losses within that tolerance, which rounding may reorder: counted and recorded), and each
one's questions per second. At the smallest setting (the fast tier, on the CPU) it compares the three tiny Qwen
checkpoints, Qwen2-VL, Qwen2.5-VL and Qwen3-VL, on lmms-eval's three patched backends."""

import pytest

from .conftest import load_speed_module


@pytest.mark.gpu_budget(full=150)
def test_lmms_evals_patched_qwen_likelihood_chooses_as_egoplan_hf_at_the_qwen2_5_vl_7b_shape(gpu_check, tmp_path):
    arguments = gpu_check.pick(full=["--shape", "qwen2.5-vl-7b", "--questions", "24", "--rounds", "2"],
                               smallest=["--arch", "all", "--questions", "1", "--rounds", "1"])
    # exit status 1: a disagreement, its figures written (recorded, then asserted below)
    f = gpu_check.speed_script("bench_qwen_loglikelihood.py", [*arguments, "--device", gpu_check.device], tmp_path,
                               verdicts=(0, 1))
    assert f["architectures"], f"the comparison ran no architecture: {f}"
    for found in f["architectures"]:
        rates = found["questions_per_second"]
        gpu_check.record(
            "patched lmms-eval Qwen likelihood (bench_qwen_loglikelihood.py)",
            f"{f['shape']} {found['arch']}, {found['dtype']}, {found['questions']} questions",
            result=f"same choice on {found['same_choice']:.1%}, {found['same_choice_beyond_near_ties']:.1%} beyond "
                   f"{found['near_ties']} near ties ({found['near_tie_disagreements']} chosen differently); max |loss "
                   f"difference| {found['max_loss_difference']:.2e} (allowed {found['loss_tolerance']:g}); "
                   f"{rates['lmms-eval']:.2f} questions/s lmms-eval ({found['prefix_sharing_ratio']:.2f}x its one pass "
                   f"per candidate), {rates['egoplan_hf']:.2f} egoplan_hf ({found['ratio']:.2f}x)", **found)
    needed = load_speed_module("bench_qwen_loglikelihood").SAME_CHOICE_NEEDED
    for found in f["architectures"]:
        assert found["max_loss_difference"] <= found["loss_tolerance"], found
        assert found["same_choice_beyond_near_ties"] >= needed, found
