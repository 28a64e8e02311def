"""A run's build throughput through the graph: the offline tier's next candidates are built in the
same translation unit as its first (a fake nvcc counts the units), later attempts find their
kernels in the cache, and summary.json carries the kernel cache's hit rate and the wall time split
into build / validate / profile / model / graph."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from test_build_units import _calls, nvcc_units  # noqa: F401 - the fixture

from graph.context import RunContext, Services
from graph.runner import run_optimize

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"


class SlowFakeHarness:
    """Stands in for the GPU judge: every candidate is correct; validation and timing take a while."""

    def __init__(self):
        self.t_us = 50.0

    def validate(self, problem, candidate):
        time.sleep(0.05)
        return SimpleNamespace(correct=True, max_abs_error=0.0, reason="", flags=[])

    def profile(self, problem, candidate):
        time.sleep(0.03)
        self.t_us -= 1.0
        return SimpleNamespace(median_us=self.t_us, valid=True, spread_pct=1.0, timing_source="gpu", reason="", flags=[])


class FakeGpuServices(Services):
    def __init__(self):
        super().__init__()
        self._fake = SlowFakeHarness()

    def harness(self):
        return self._fake

    def reference_timings(self, path):
        return {"eager_fp32": 100.0, "eager_tf32": 60.0}


def test_offline_run_builds_ahead_and_reports_its_cache_and_time_split(nvcc_units, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_FAIL", "no kernel has this line")
    ctx = RunContext(tier="offline", policy="fixed", max_attempts=5, backend="cutlass", services=FakeGpuServices())
    summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    built = [a for a in summary.attempts if a.compile_ok]
    assert len(built) == 5, [a.failure_reason for a in summary.attempts]
    # the first attempt's unit carried the next seven candidates' kernels; later units (the candidates that
    # re-ranking brought forward) were built in the background while attempts were judged
    assert _calls(nvcc_units)[0] == ("unit.cu", 8)
    assert all(a.build_s < 0.3 for a in summary.attempts[1:])  # no later attempt waited for a whole nvcc run
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    cache = data["kernel_cache"]
    assert cache["kernels"] == 5 and cache["hits"] == 4 and cache["hit_rate"] == 0.8
    assert cache["ahead_kernels"] >= 7
    split = data["time_split_s"]
    assert {"build", "validate", "profile", "model", "graph"} <= set(split)
    assert split["validate"] >= 5 * 0.05 and split["profile"] >= 5 * 0.03 and split["build"] > 0
    assert sum(split.values()) <= data["wall_s"] + 0.5
