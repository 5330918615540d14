"""Every script of speed/ runs on its smallest setting and prints its ratio line against the naive
method, so none can break unseen. A smoke run, not a measurement: no time is asserted (the README
quotes the scripts' own runs at their default settings). The GPU checks run four of them (at their
smallest setting in tests/test_gpu_check.py, which looks for their ratio lines here); speed/gpu_check.py
and speed/gpu_wheels.py, the GPU command, are tested there too."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SPEED = Path(__file__).resolve().parents[1] / "speed"

# script -> (its smallest setting, the ratio line it must print); no setting: the GPU check's run prints it
SMOKE_RUNS = {
    "bench_judge.py": (["--items", "32", "--latency", "0.05", "--concurrency", "8"],
                       r"serial / wall = [\d.]+x faster"),
    "bench_lcs.py": (["--pairs", "20", "--reference-pairs", "1", "--reference-sample", "shortest"],
                     r"per pair: release [\d.]+ s, fast [\d.]+ ms -> speed-up x[\d,]+"),
    "bench_loglikelihood.py": (None, r"ratio\s+:\s+[\d.]+x"),
    "bench_egoplan_visuals.py": (None, r"naive / egoplan =\s+[\d.]+x"),
    "bench_judge_hf.py": (None, r"queue / old lock = [\d.]+x"),
    "bench_entry_point.py": (["--runs", "1"], r"installed / not installed = [\d.]+x"),
    "bench_qwen_loglikelihood.py": (None, r"egoplan_hf / lmms-eval = [\d.]+x"),
    "bench_media_check.py": (["--samples", "4", "--frames-per-video", "400"],
                             r"pre-cut clips \(H\.264\)\s+: check .* check / decoding = [\d.]+%"),
    "bench_full_size.py": (["--questions", "63", "--report-scale", "0.02", "--rounds", "1"],
                           r"task build .*: naive [\d.]+ s, suite [\d.]+ s -> naive / suite = [\d.]+x\n(.*\n)*"
                           r"audit-trail look-ups: naive [\d,]+ listings [\d.]+ s, suite [\d,]+ listings [\d.]+ s -> "
                           r"naive / suite = [\d.]+x\n"
                           r"report tables: naive [\d.]+ s, suite [\d.]+ s -> naive / suite = [\d.]+x"),
}


def test_every_speed_script_has_a_smoke_run():
    assert {path.name for path in SPEED.glob("*.py")} == {*SMOKE_RUNS, "gpu_check.py", "gpu_wheels.py"}


@pytest.mark.parametrize("script", sorted(script for script, (arguments, _) in SMOKE_RUNS.items() if arguments))
def test_the_speed_script_runs_and_prints_its_ratio(script, tmp_path):
    arguments, ratio_line = SMOKE_RUNS[script]
    run = subprocess.run([sys.executable, str(SPEED / script), *arguments], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    output = run.stdout + run.stderr
    # bench_judge exits 1 when the wall time exceeds its allowance: a verdict on this machine's load, not a breakage.
    assert run.returncode in ((0, 1) if script == "bench_judge.py" else (0,)), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert re.search(ratio_line, run.stdout), output[-3000:]


def test_the_qwen_comparison_forgives_a_changed_choice_only_on_a_near_tie():
    """bench_qwen_loglikelihood.py's verdict (the GPU check's): every loss within the dtype's tolerance, and a choice
    may change only where lmms-eval's two lowest losses lie within it (a near tie)."""
    sys.path.insert(0, str(SPEED))
    from bench_qwen_loglikelihood import agreement

    reference = np.array([[1.0, 1.02, 2.0, 3.0], [1.0, 1.5, 2.0, 3.0], [2.0, 1.0, 3.0, 4.0]])
    flipped_tie = reference + [[0.03, 0.0, 0.0, 0.0], [0.0] * 4, [0.0, 0.01, 0.0, 0.0]]
    found = agreement({"lmms-eval": reference, "egoplan_hf": flipped_tie}, tolerance=0.1)
    assert found["max_loss_difference"] == pytest.approx(0.03, abs=1e-12) and found["loss_tolerance"] == 0.1
    assert (found["near_ties"], found["near_tie_disagreements"]) == (1, 1)
    assert found["same_choice"] == pytest.approx(2 / 3) and found["same_choice_beyond_near_ties"] == 1.0
    assert found["agrees"]
    # a choice changed where the two lowest were 0.5 apart, each loss within the tolerance 0.4: beyond the near ties
    flipped_apart = reference + [[0.0] * 4, [0.3, -0.25, 0.0, 0.0], [0.0] * 4]
    found = agreement({"lmms-eval": reference, "egoplan_hf": flipped_apart}, tolerance=0.4)
    assert found["near_ties"] == 1 and found["same_choice_beyond_near_ties"] == pytest.approx(1 / 2)
    assert not found["agrees"]
    # the same choices, but a loss beyond the tolerance
    assert not agreement({"lmms-eval": reference, "egoplan_hf": reference + 0.2}, tolerance=0.1)["agrees"]


def test_the_likelihood_bench_estimates_a_run_from_its_steady_rate_not_its_first_batch():
    """bench_loglikelihood.py (issue 78 point 1): a round whose first batch waits 0.5 s for its preparation and whose
    next two take 0.2 s each runs 40 questions/s at the steady state, not 24 / 0.9; EgoPlan Val is then estimated as
    first batch + compile + 3,355 questions at the steady rate, and a method with one batch a round has no steady
    rate (its estimate falls back to the whole rounds' rate)."""
    import argparse

    sys.path.insert(0, str(SPEED))
    from bench_loglikelihood import EGOPLAN_VAL_QUESTIONS, Timing, full_run_estimates

    values = [(1.0, False)] * 4 * 24
    three_batches = Timing(0.9, values, 0.0, 1.0, [(0.5, 8), (0.7, 8), (0.9, 8)])
    assert three_batches.first_batch_seconds == 0.5
    assert three_batches.steady_questions_per_second == pytest.approx(40.0)
    one_batch = Timing(0.6, values[:32], 0.0, 1.0, [(0.6, 8)])
    assert one_batch.steady_questions_per_second is None
    timings = {"batched": [three_batches, three_batches], "batched_fused": [three_batches],
               "prefix_shared": [one_batch]}
    steady, first, compiled, minutes = full_run_estimates(argparse.Namespace(fused=True), {"compile_seconds": 30.0},
                                                          timings)
    assert steady == {"batched": pytest.approx(40.0), "batched_fused": pytest.approx(40.0), "prefix_shared": None}
    assert compiled == {"batched": 0.0, "batched_fused": 30.0, "prefix_shared": 0.0}
    assert minutes["batched"] == pytest.approx((0.5 + EGOPLAN_VAL_QUESTIONS / 40.0) / 60)
    assert minutes["batched_fused"] == pytest.approx((0.5 + 30.0 + EGOPLAN_VAL_QUESTIONS / 40.0) / 60)
    assert minutes["prefix_shared"] == pytest.approx((0.6 + EGOPLAN_VAL_QUESTIONS / (8 / 0.6)) / 60)


def test_the_rule_judges_candidates_in_prefill_beside_the_defaults_it_would_join():
    """bench_loglikelihood.py's DEFAULT_RULE (issue 78 point 4): the candidates inside the prefill, measured on top of
    the other options asked for, are judged beside the most complete of them measured (the fused path in processes,
    else the fused path, else the batched one), not beside the unfused batched path; a recompile during the rounds
    counts against each method measured fused."""
    import argparse

    sys.path.insert(0, str(SPEED))
    from bench_loglikelihood import METHODS, default_verdicts, fused_methods

    values = [(1.0, False), (2.0, False), (3.0, False), (4.0, False)] * 6
    steady = {"batched": 10.0, "batched_fused": 14.0, "batched_processes": 16.0, "batched_in_prefill": 15.0}
    every = default_verdicts(argparse.Namespace(dtype="bfloat16", fused=True), dict.fromkeys(steady, values), steady,
                             {"compiled_in_rounds": 0})
    assert every["batched_in_prefill"]["reference"] == "batched_processes"
    assert every["batched_in_prefill"]["ratio"] == pytest.approx(15 / 16) and not every["batched_in_prefill"]["default"]
    assert every["batched_processes"]["reference"] == "batched_fused" and every["batched_processes"]["default"]
    no_processes = {method: rate for method, rate in steady.items() if method != "batched_processes"}
    verdicts = default_verdicts(argparse.Namespace(dtype="bfloat16", fused=True), dict.fromkeys(no_processes, values),
                                no_processes, {"compiled_in_rounds": 2})
    assert verdicts["batched_in_prefill"]["reference"] == "batched_fused"
    assert verdicts["batched_in_prefill"]["why_not"] == ["2 graphs compiled during the rounds"]
    unfused = default_verdicts(argparse.Namespace(dtype="bfloat16", fused=False),
                               dict.fromkeys(("batched", "batched_in_prefill"), values), steady,
                               {"compiled_in_rounds": 2})
    assert unfused["batched_in_prefill"]["reference"] == "batched" and unfused["batched_in_prefill"]["default"]
    assert fused_methods(argparse.Namespace(fused=False)) == {"batched_fused"}
    assert fused_methods(argparse.Namespace(fused=True)) == {m for m in METHODS if m.startswith("batched_")}


def test_the_profile_counts_each_kernel_once_as_torch_does():
    """bench_loglikelihood.py --profile: the device's busy time is torch's own total of its device time (the "Self
    CUDA time total" of its table) over events as torch.profiler builds them from a GPU trace
    (``_parse_kineto_results``: a kernel both appended to the operator that launched it and an event of its own, a
    ``record_function`` region a device event spanning its kernels), not the sum of the table's rows, which counted
    most kernels twice (the H100's profile read "busy 5.11 s of 4.47"); kernels that two streams run at once count
    once."""
    import re

    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent

    sys.path.insert(0, str(SPEED))
    from bench_loglikelihood import device_busy_seconds

    def event(number, name, start, end, device=DeviceType.CPU, **kwargs):
        return FunctionEvent(id=number, name=name, thread=0, start_us=start, end_us=end, device_type=device,
                             use_device="cuda", stack=[], input_shapes=[], **kwargs)

    matmul, gemm = event(1, "aten::mm", 0, 50), event(2, "gemm", 10, 40, DeviceType.CUDA)
    matmul.append_kernel("gemm", 0, 30)
    norm, fused = event(3, "aten::mul", 55, 60), event(4, "triton_fused", 60, 70, DeviceType.CUDA)
    norm.append_kernel("triton_fused", 0, 10)
    copy = event(5, "Memcpy HtoD", 80, 84, DeviceType.CUDA)
    step = event(6, "model step", 0, 90, DeviceType.CUDA, is_user_annotation=True)
    events = EventList([matmul, gemm, norm, fused, copy, step], use_device="cuda")
    events._build_tree()
    table = events.key_averages().table()
    torch_total = float(re.search(r"Self CUDA time total: ([\d.]+)us", table).group(1))
    assert torch_total == 44.0 and device_busy_seconds(events) == pytest.approx(torch_total / 1e6)
    assert sum(row.self_device_time_total for row in events.key_averages()) == 174  # the old sum
    # a copy on a second stream while the gemm runs: the device is busy once for the overlap
    side_copy = event(7, "Memcpy HtoD", 20, 45, DeviceType.CUDA)
    assert device_busy_seconds([*events, side_copy]) == pytest.approx((35 + 10 + 4) / 1e6)


def test_the_likelihood_bench_reports_padding_and_bytes_to_the_device_per_method(tmp_path):
    """bench_loglikelihood.py at a small setting (tiny Qwen2-VL, 4 of the demo's EgoPlan questions, 2 a batch): its
    --json gives each method's padded share of the forward passes' tokens and its bytes handed to the device a
    question (issue 78 point 3), and its lines print them."""
    out = tmp_path / "figures.json"
    run = subprocess.run([sys.executable, str(SPEED / "bench_loglikelihood.py"), "--questions", "4",
                          "--batch-size", "2", "--rounds", "1", "--skip-one-pass", "--layers", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, (run.stdout + run.stderr)[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["padding_share"]) == set(figures["host_to_device_bytes_per_question"]) == {"prefix_shared",
                                                                                                  "batched"}
    assert all(0 <= share < 0.5 for share in figures["padding_share"].values())
    assert figures["padding_share"]["prefix_shared"] < figures["padding_share"]["batched"]  # one question: no left pad
    sizes = figures["host_to_device_bytes_per_question"]  # the same pixels either way; the ids and masks differ a bit
    assert 0 < sizes["batched"] == pytest.approx(sizes["prefix_shared"], rel=0.01)
    assert re.search(r"MiB to the device, padding [\d.]+% of the tokens", run.stdout)
