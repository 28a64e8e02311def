"""The cutlass backend through the graph: the real checks and nvcc build, the CUTLASS sources and
the ModelNew module in the run directory. Without a GPU the harness cannot run a CUTLASS kernel,
so validation and timing are small fakes here; on a GPU the real harness runs (gpu test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graph.context import RunContext, Services
from graph.runner import run_optimize
from nodes.playback import PlaybackTier

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"
FUSED = """program linear_relu
input x: f32[16, 32]
param w: f32[64, 32] = "fc.weight"
param b: f32[64] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32
  store y: f32 = relu(acc + b[col])
}
output y
"""


class NoGpuHarness(Services):
    """Real problem, SOL, checks and build; validation and timing stand in for the GPU."""

    def reference_timings(self, path):
        return {"eager_fp32": 20.0}

    def validate(self, path, candidate):
        assert candidate.backend == "cutlass" and candidate.artifacts, "the built library must reach the harness"
        assert all(Path(p).is_file() for p in candidate.artifacts.values())
        return {"correct": True, "max_abs_error": 0.0, "reason": None, "flags": []}

    def profile(self, path, candidate):
        return {"t_us": 9.0, "t_spread_pct": 1.0, "timing_source": "gpu", "reason": "", "flags": []}


@pytest.mark.nvcc
def test_cutlass_backend_builds_and_exports(tmp_path):
    (tmp_path / "p.mcu").write_text(FUSED)
    ctx = RunContext(tier="playback", policy="fixed", max_attempts=1, backend="cutlass",
                     tier_impl=PlaybackTier(tmp_path / "p.mcu"), services=NoGpuHarness())
    summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    a = summary.attempts[0]
    assert a.compile_ok and a.correct, a.diagnostics
    assert a.build_s >= 0 and summary.best_index == 1
    out = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert out["cutlass_sources"] == ["cutlass/fc.cu"]
    assert "cutlass::" in (tmp_path / "run" / "cutlass" / "fc.cu").read_text()
    assert out.get("model_new") == "model_new.py", out.get("model_new_error")
    assert "class ModelNew" in (tmp_path / "run" / "model_new.py").read_text()


@pytest.mark.gpu
def test_cutlass_backend_on_the_gpu(tmp_path):
    (tmp_path / "p.mcu").write_text(FUSED)
    ctx = RunContext(tier="playback", policy="fixed", max_attempts=1, backend="cutlass",
                     tier_impl=PlaybackTier(tmp_path / "p.mcu"))
    summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    a = summary.attempts[0]
    assert a.correct and a.timing_source == "gpu" and a.t_us > 0, a.failure_reason
    assert set(summary.reference_us) >= {"eager_fp32", "eager_tf32"}
