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
