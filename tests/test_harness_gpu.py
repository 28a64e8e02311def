"""The harness on an sm_90 GPU: reference timings, timing spread, memory back to its starting
level, per-attempt overhead, the default timing method (CUDA graphs the harness captures) with the
judge's wall-clock bound, and a fatal CUDA error costing one attempt only."""

import statistics
import time

import pytest

from evals.judge.client import Candidate, Harness, HarnessSettings
from evals.problems import load_suite
from tests.adversarial.cases import HERE

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def harness():
    h = Harness(HarnessSettings(device="cuda", watchdog_s=120))
    yield h
    h.close()


@pytest.fixture(scope="module")
def builtin():
    return {p.name: p for p in load_suite("builtin")}


@pytest.fixture(scope="module")
def smoke():
    return {p.name: p for p in load_suite("smoke")}


def test_reference_timings_and_tf32_gap(harness, builtin):
    r = harness.reference_timings(builtin["01_gemm_square"])
    assert r.timing_source == "gpu" and r.compile_us is not None, r
    assert r.eager_fp32_us > 2.0 * r.eager_tf32_us  # matmul TF32 is off in PyTorch's default fp32
    assert r.eager_tf32_spread_pct < 3.0 and r.eager_fp32_spread_pct < 3.0
    assert harness.reference_timings(builtin["01_gemm_square"]) is r  # cached per problem


def test_candidate_timing_spread_under_3pct(harness, builtin):
    p = builtin["11_linear_relu"]
    t = harness.profile(p, Candidate.from_file(HERE / "honest.py"))
    assert t.timing_source == "gpu" and t.valid, t
    assert t.median_us > 50 and t.spread_pct < 3.0, t
    assert t.trials >= 20
    again = harness.profile(p, Candidate.from_file(HERE / "honest.py"))
    assert abs(again.median_us / t.median_us - 1) < 0.05


def test_memory_back_to_start_over_attempts(harness, smoke):
    """The judge process's device memory does not grow: candidates run (and leave) elsewhere."""
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    start = harness.memory_allocated_bytes()
    levels = []
    for _ in range(10):
        v = harness.validate(p, cand)
        assert v.correct
        levels.append(v.memory_allocated_bytes)
    assert max(levels) <= start, (start, levels[-5:])


def test_overhead_per_attempt_under_1_5s(harness, smoke):
    """validate + profile minus the timed calls, with the pause a real attempt has between calls (the
    model's turn, the build) in which the next candidate process starts."""
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    overheads = []
    for _ in range(5):
        time.sleep(2.0)
        v = harness.validate(p, cand)
        t = harness.profile(p, cand)
        assert v.correct and t.valid, (v.reason, t.reason)
        overheads.append(v.wall_s + t.wall_s - (t.timed_s or 0.0))
    assert statistics.median(overheads) <= 1.5, overheads


def test_overhead_on_a_large_problem_under_1_5s(harness, builtin):
    """11_linear_relu (2048 x 4096 in and out, a 4096 x 4096 weight): the tensors cross the channel's
    shared arena, so the overhead stays near a tiny problem's."""
    p = builtin["11_linear_relu"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    overheads, stages = [], []
    for _ in range(3):
        time.sleep(2.0)
        v = harness.validate(p, cand)
        t = harness.profile(p, cand)
        assert v.correct and t.valid, (v.reason, t.reason)
        overheads.append(v.wall_s + t.wall_s - (t.timed_s or 0.0))
        stages.append((v.info.get("stages"), t.stages))
    assert statistics.median(overheads) <= 1.5, (overheads, stages)


def test_illegal_address_costs_one_attempt(harness, builtin):
    p = builtin["11_linear_relu"]
    restarts = harness.restarts
    bad = harness.validate(p, Candidate.from_file(HERE / "illegal_address.py"))
    assert not bad.correct and bad.crashed and bad.rule == "crash" and bad.reason.startswith("crash: "), bad.reason
    assert harness.restarts == restarts  # the judge never ran it: only the candidate's process ended
    good = harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert good.correct, good.reason
    t = harness.profile(p, Candidate.from_file(HERE / "honest.py"))
    assert t.valid and t.median_us > 0 and t.method == "cuda_graph", t


def test_program_candidate_on_gpu(harness, smoke):
    ir = pytest.importorskip("dsl_compiler.ir")
    pytest.importorskip("dsl_compiler.runtime")
    prog = ir.Program(
        decls=(ir.TensorDecl(kind="input", name="A", dtype="f32", shape=(64, 32)),
               ir.TensorDecl(kind="input", name="B", dtype="f32", shape=(32, 48))),
        steps=(ir.Kernel(name="mm", op=ir.GemmOp(a=ir.Operand(name="A"), b=ir.Operand(name="B")),
                         config=ir.KernelConfig(math="tf32"), stores=(ir.Store(name="C", dtype="f32", expr=ir.Acc()),)),),
        outputs=("C",),
    )
    v = harness.validate(smoke["01_gemm_tiny"], Candidate.from_program(prog, backend="interpreter"))
    assert v.correct, v.reason
    t = harness.profile(smoke["01_gemm_tiny"], Candidate.from_program(prog, backend="interpreter"))
    assert t.timing_source == "gpu" and t.median_us > 0


# ---------------------------------------------------------------------------------------------
# The timing methods (evals.judge.timing.TimingMethod) the harness can be set to, and its own numbers


@pytest.fixture(scope="module")
def quiet_harness():
    """The harness under the timing method that keeps the GPU busy while a call is launched."""
    h = Harness(HarnessSettings(device="cuda", watchdog_s=120, host_sync="after", warmup_s=0.2, l2_flush_mode="zero"))
    yield h
    h.close()


def test_default_method_is_the_harness_s_graph_with_a_wall_bound(harness, builtin):
    p = builtin["11_linear_relu"]
    t = harness.profile(p, Candidate.from_file(HERE / "honest.py"))
    assert t.valid and t.method == "cuda_graph" and t.spread_pct < 3.0, t
    # the judge's own clock over back-to-back calls agrees with the GPU time it was told
    assert t.wall_bound_us is not None and 0.5 * t.wall_bound_us <= t.median_us, t


def test_other_timing_settings_agree_and_still_catch_a_side_stream(harness, quiet_harness, builtin):
    p = builtin["11_linear_relu"]
    honest = Candidate.from_file(HERE / "honest.py")
    base = harness.profile(p, honest)
    quiet = quiet_harness.profile(p, honest)
    assert quiet.valid and quiet.timing_source == "gpu" and quiet.trials >= 20, quiet
    assert quiet.spread_pct < 3.0, quiet
    assert 0.9 < quiet.median_us / base.median_us < 1.1, (quiet.median_us, base.median_us)
    sneaky = quiet_harness.profile(p, Candidate.from_file(HERE / "side_stream.py"))
    assert not sneaky.valid and sneaky.rule == "timing_tampered", sneaky


def test_profile_reports_its_timed_share_and_memory(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    t = harness.profile(p, cand)
    assert t.timed_s is not None and 0 < t.timed_s < t.wall_s
    assert t.wall_s - t.timed_s < 1.5, t  # the harness's own share of a profile call
    assert t.memory_reserved_bytes >= t.memory_allocated_bytes >= 0 and t.worker_rss_bytes > 0


def test_reference_timings_agree_between_timing_settings(harness, quiet_harness, builtin):
    p = builtin["01_gemm_square"]
    base, quiet = harness.reference_timings(p), quiet_harness.reference_timings(p)
    assert quiet.timing_source == "gpu" and quiet.timed_s > 0 and quiet.compile_us > 0, quiet
    for key in ("eager_fp32_us", "eager_tf32_us"):
        assert 0.9 < getattr(quiet, key) / getattr(base, key) < 1.1, (key, base, quiet)
