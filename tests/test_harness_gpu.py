"""The harness on an sm_90 GPU: reference timings, timing spread, memory back to its starting
level, per-attempt overhead, and a fatal CUDA error costing one attempt only."""

import statistics
import time

import pytest

from evals.harness import Candidate, Harness, HarnessSettings
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


def test_memory_back_to_start_over_100_attempts(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    start = harness.memory_allocated_bytes()
    levels = []
    for _ in range(100):
        v = harness.validate(p, cand)
        assert v.correct
        levels.append(v.memory_allocated_bytes)
    assert max(levels) <= start, (start, levels[-5:])


def test_overhead_per_attempt_under_1s(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        v = harness.validate(p, cand)
        walls.append(time.perf_counter() - t0)
        assert v.correct
    assert statistics.median(walls) < 1.0, walls


def test_illegal_address_costs_one_attempt(harness, builtin):
    p = builtin["11_linear_relu"]
    restarts = harness.restarts
    bad = harness.validate(p, Candidate.from_file(HERE / "illegal_address.py"))
    assert not bad.correct and bad.crashed and bad.reason.startswith("cuda_error"), bad.reason
    assert harness.restarts == restarts + 1
    good = harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert good.correct, good.reason
    t = harness.profile(p, Candidate.from_file(HERE / "honest.py"))
    assert t.valid and t.median_us > 0


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
# The timing methods (evals.timing.TimingMethod) the harness can be set to, and its own numbers


@pytest.fixture(scope="module")
def quiet_harness():
    """The harness under the timing method that keeps the GPU busy while a call is launched."""
    h = Harness(HarnessSettings(device="cuda", watchdog_s=120, host_sync="after", warmup_s=0.2, l2_flush_mode="zero"))
    yield h
    h.close()


def test_other_timing_methods_agree_and_still_catch_a_side_stream(harness, quiet_harness, builtin):
    p = builtin["11_linear_relu"]
    honest = Candidate.from_file(HERE / "honest.py")
    base = harness.profile(p, honest)
    quiet = quiet_harness.profile(p, honest)
    assert quiet.valid and quiet.timing_source == "gpu" and quiet.trials >= 20, quiet
    assert quiet.spread_pct < 3.0, quiet
    # the same kernel: hiding the launch latency may only take away the host's share of a 200+ us call
    assert 0.85 < quiet.median_us / base.median_us < 1.05, (quiet.median_us, base.median_us)
    sneaky = quiet_harness.profile(p, Candidate.from_file(HERE / "side_stream.py"))
    assert not sneaky.valid and any(f.startswith("side_stream") for f in sneaky.flags), sneaky


def test_profile_reports_its_timed_share_and_memory(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.profile(p, cand)
    t = harness.profile(p, cand)
    assert t.timed_s is not None and 0 < t.timed_s < t.wall_s
    assert t.wall_s - t.timed_s < 1.0, t  # the harness's own share of a profile call
    assert t.memory_reserved_bytes >= t.memory_allocated_bytes > 0 and t.worker_rss_bytes > 0


def test_reserved_memory_back_to_start_over_attempts(harness, smoke):
    p = smoke["02_linear_relu_tiny"]
    cand = Candidate.from_file(HERE / "honest.py")
    harness.validate(p, cand)
    harness.profile(p, cand)
    start = harness.worker_memory()
    levels = []
    for _ in range(20):
        harness.validate(p, cand)
        t = harness.profile(p, cand)
        levels.append((t.memory_allocated_bytes, t.memory_reserved_bytes))
    assert max(a for a, _ in levels) <= start["memory_allocated_bytes"], (start, levels[-3:])
    assert max(r for _, r in levels) <= start["memory_reserved_bytes"], (start, levels[-3:])


def test_reference_timings_agree_between_timing_methods(harness, quiet_harness, builtin):
    """The default method and the quiet one agree on 01_gemm_square's eager times: the quiet one leaves out
    only the host's launch latency (tens of us; on the H200 up to ~100 us for a compiled call, whose
    times are compared by the benchmark, not here)."""
    p = builtin["01_gemm_square"]
    base, quiet = harness.reference_timings(p), quiet_harness.reference_timings(p)
    assert quiet.timing_source == "gpu" and quiet.timed_s > 0 and quiet.compile_us > 0, quiet
    for key in ("eager_fp32_us", "eager_tf32_us"):
        assert 0.8 < getattr(quiet, key) / getattr(base, key) < 1.1, (key, base, quiet)


@pytest.mark.xfail(strict=True, reason="on the H200 (2026-11-30) host_sync='end' timed 11_linear_relu's honest candidate at "
                   "3.86 ms median with a 65% spread against about 0.22 ms by the default method: not yet a method "
                   "to measure with (strict: a pass means it was fixed)")
def test_batched_timing_agrees_and_still_catches_a_side_stream(harness, builtin):
    """host_sync="end" (every trial enqueued, one synchronize): the same time, and a side stream still shows."""
    p = builtin["11_linear_relu"]
    honest = Candidate.from_file(HERE / "honest.py")
    base = harness.profile(p, honest)
    with Harness(HarnessSettings(device="cuda", watchdog_s=120, host_sync="end")) as batched:
        t = batched.profile(p, honest)
        assert t.valid and t.trials >= 20 and t.spread_pct < 3.0, t
        assert 0.85 < t.median_us / base.median_us < 1.05, (t.median_us, base.median_us)
        sneaky = batched.profile(p, Candidate.from_file(HERE / "side_stream.py"))
        assert not sneaky.valid and any(f.startswith("side_stream") for f in sneaky.flags), sneaky
