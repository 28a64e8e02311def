"""The harness's static checks, the precision probes and timing statistics as plain functions (no worker)."""

import pytest
import torch

from evals.judge import integrity
from evals.judge.timing import choose_trials, spread_pct, time_cpu


def test_sol_ceiling():
    assert integrity.sol_ceiling_check(100.0, 95.0)[0]
    ok, reason = integrity.sol_ceiling_check(50.0, 100.0)
    assert not ok and reason


def test_lowest_precision():
    assert integrity.lowest_precision(["f32", "tf32", "bf16"]) == "bf16"


def test_precision_check():
    assert integrity.precision_check(["tf32"], ("f32", "tf32"))[0]
    ok, reason = integrity.precision_check(["bf16"], ("f32", "tf32"))
    assert not ok and "bf16" in reason


def test_program_checks():
    ir = pytest.importorskip("dsl_compiler.ir")
    x = ir.TensorDecl(kind="input", name="x", dtype="f32", shape=(8, 4))
    w = ir.TensorDecl(kind="param", name="w", dtype="bf16", shape=(4, 4), source="w")
    k = ir.Kernel(name="k", op=ir.GemmOp(a=ir.Operand(name="x"), b=ir.Operand(name="w")),
                  stores=(ir.Store(name="y", dtype="f32", expr=ir.Acc()),))
    prog = ir.Program(decls=(x, w), steps=(k,), outputs=("y",))
    assert integrity.program_precisions(prog) == ["bf16"]  # an f32 x bf16 GEMM runs at bf16
    assert integrity.pytorch_only_program_check(prog)[0]
    only_torch = ir.Program(decls=(x,), steps=(ir.TorchStep(outputs=("y",), fn="relu", args=(ir.TensorArg(name="x"),)),),
                            outputs=("y",))
    ok, reason = integrity.pytorch_only_program_check(only_torch)
    assert not ok and "no kernel" in reason


def test_flags_of():
    checks = [integrity.CheckResult(name="a", ok=True), integrity.CheckResult(name="timing_tampered", ok=False, reason="r")]
    assert integrity.flags_of(checks) == ["timing_tampered: r"]
    assert checks[1].hard and not integrity.CheckResult(name="pytorch_only", ok=False).hard


def test_timing_statistics():
    assert spread_pct([100.0] * 10) == 0.0
    assert spread_pct([90.0, 100.0, 100.0, 110.0]) == pytest.approx(5.0)  # IQR 97.5-102.5
    assert choose_trials(1000.0, 0.5, 20, 200) == 200
    assert choose_trials(1e5, 0.5, 20, 200) == 20
    assert choose_trials(1e4, 0.5, 20, 200) == 50
    calls = []
    sample = time_cpu(lambda inp: calls.append(inp[0]), [[1], [2], [3]], warmup=1, trials=4)
    assert sample.trials == 4 and calls == [1, 1, 2, 3, 1]  # inputs rotate between calls


def test_time_cuda_logic_with_fake_events(monkeypatch):
    """time_cuda's loop (warm-up, trial count, rotation, flush before every call) driven by
    CPU stand-ins for CUDA events; the real ones run in the GPU tests."""
    import time as _time

    from evals.judge import timing

    class FakeEvent:
        def __init__(self, enable_timing=True):
            self.t = None

        def record(self, stream=None):
            self.t = _time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    flushes, seen = [], []

    class Flusher:
        def flush(self):
            flushes.append(1)

    def fn(inputs):
        seen.append(inputs[0])
        _time.sleep(0.002)

    sample = timing.time_cuda(fn, [[0], [1], [2]], flusher=Flusher(), warmup=3, min_trials=5, max_trials=8, target_s=0.01)
    assert sample.trials == 5  # 0.01 s / ~2 ms per call, at least min_trials
    assert len(flushes) == 3 + 5 and seen[3:8] == [0, 1, 2, 0, 1]
    assert 1500 < sample.median_us < 20000 and sample.wall_median_us >= sample.median_us * 0.9
    assert set(sample.summary()) >= {"median_us", "spread_pct", "trials", "wall_median_us", "sync_overhead_us"}
    assert 0 <= sample.sync_overhead_us < 1000  # an empty call's own cost, not the 2 ms of fn (>= 0 by construction)


def test_program_precision_follows_the_dataflow():
    """A cast upstream of a kernel (a torch step to bf16 and back) makes the kernel bf16, whatever its
    math knob and its declared types say; a torch step computing on bf16 is bf16 math too."""
    from dsl_compiler.parser import parse

    def precisions(body: str) -> list[str]:
        program, diags = parse("program p\ninput x: f32[8, 16]\nparam w: f32[4, 16] = \"fc.weight\"\n" + body)
        assert program is not None, [d.message for d in diags]
        return integrity.program_precisions(program)

    laundered = 'torch xl = to(x, dtype="bf16")\ntorch xr = to(xl, dtype="f32")\n' \
                'kernel k = gemm(xr, w^T) {\n  math = tf32\n  store y: f32 = acc\n}\noutput y\n'
    assert precisions(laundered) == ["tf32", "bf16"]
    clean = 'kernel k = gemm(x, w^T) {\n  math = tf32\n  store y: f32 = acc\n}\ntorch z = relu(y)\noutput z\n'
    assert precisions(clean) == ["tf32"]
    ok, reason = integrity.precision_check(precisions(laundered), ("f32", "tf32"))
    assert not ok and "bf16" in reason


def test_probe_signatures_tell_rounding_from_a_wrong_answer():
    """Each rounding level leaves its signature on the probe; a scaled result of the same size is a
    wrong answer, not a precision."""
    from evals.judge import probes

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 32)
    x = [torch.rand(16, 64)]
    with torch.no_grad():
        ref = [model(*x)]
        probe = probes.signatures(model, x, ref)
        assert probe is not None
        errs = probe["errors"]
        assert errs["f32"] < 1e-6 < errs["tf32"] < errs["bf16"] < errs["fp8"]
        bf16 = probes.run_at(model, x, "bf16")
        assert probes.judge([o.float() for o in bf16], probe, ("f32", "tf32"))[0] == "bf16"
        assert probes.judge(ref, probe, ("f32",))[0] is None  # true fp32 is never taken for less
        scaled = [ref[0] * (1 + 2 * errs["tf32"])]
        # parallel to the result: no level's signature (a mismatch, not tf32); on an f32-only problem its size is past
        # what f32 makes, so it is named by magnitude, never as a precision's rounding
        level, numbers = probes.judge(scaled, probe, ("f32",))
        assert level is None or numbers.get("beyond_budget") is True
        level, numbers = probes.judge(scaled, probe, ("f32", "tf32"))  # within TF32's budget: nothing found
        assert level is None and not numbers.get("beyond_budget")
        # the range probe: f16 overflows where TF32 and bf16 do not
        big = probes.range_probe(x)
        rprobe = probes.signatures(model, big, [model(*big)])
        assert rprobe["errors"]["f16"] == float("inf") and rprobe["errors"]["bf16"] < 1e-2
