"""A run's build throughput through the graph: the offline tier's next candidates are built in the
same translation unit as its first (a fake nvcc counts the units), later attempts find their
kernels in the cache, and summary.json carries the kernel cache's hit rate and the wall time split
into build / validate / profile / model / graph."""

from __future__ import annotations

import json
import time
from pathlib import Path

from test_build_units import _calls, nvcc_units  # noqa: F401 - the fixture

from evals.judge.client import Timing, Validation
from graph.context import RunContext, Services
from graph.runner import run_optimize

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"


class SlowFakeHarness:
    """Stands in for the GPU judge: every candidate is correct; validation and timing take a while."""

    def __init__(self):
        self.t_us = 50.0

    def validate(self, problem, candidate):
        time.sleep(0.2)
        return Validation(correct=True, max_abs_error=0.0)

    def profile(self, problem, candidate):
        time.sleep(0.1)
        self.t_us -= 1.0
        return Timing(median_us=self.t_us, valid=True, spread_pct=1.0, timing_source="gpu")


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
    monkeypatch.setenv("FAKE_NVCC_S", "1.0")  # one nvcc run: 1 s; judging one attempt: 0.3 s
    ctx = RunContext(tier="offline", policy="fixed", max_attempts=5, backend="cutlass", services=FakeGpuServices())
    summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    built = [a for a in summary.attempts if a.compile_ok]
    assert len(built) == 5, [a.failure_reason for a in summary.attempts]
    # the first attempt's unit carried the kernels of the next four candidates (as many as the budget has
    # attempts left); candidates that re-ranking brought forward were built in the background while attempts
    # were judged
    assert _calls(nvcc_units)[0] == ("unit.cu", 5)
    assert summary.attempts[0].build_s >= 1.0
    # the fake judge's times miss the estimates, so the tier re-ranks and builds ahead what it now expects
    # next; on a machine of few cores such a build may queue behind another, so one attempt may wait for it
    waited = [a.index for a in summary.attempts[1:] if a.build_s >= 0.9]
    assert len(waited) <= 1, [a.build_s for a in summary.attempts]
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    cache = data["kernel_cache"]
    assert cache["kernels"] == 5 and cache["hits"] >= 3 and cache["hit_rate"] == cache["hits"] / 5
    assert cache["ahead_kernels"] >= 4
    split = data["time_split_s"]
    assert {"build", "validate", "profile", "model", "graph"} <= set(split)
    assert split["validate"] >= 5 * 0.2 and split["profile"] >= 5 * 0.1 and split["build"] >= 1.0
    assert sum(split.values()) <= data["wall_s"] + 0.5


def test_each_attempt_event_carries_the_split_so_far(nvcc_units, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_FAIL", "no kernel has this line")
    events = []
    ctx = RunContext(tier="offline", policy="fixed", max_attempts=3, backend="cutlass", services=FakeGpuServices())
    run_optimize(PROBLEM, ctx, tmp_path / "run", on_event=events.append)
    attempts = [e for e in events if e["event"] == "attempt"]
    assert [e["index"] for e in attempts] == [1, 2, 3]
    validate = [e["time_split_s"]["validate"] for e in attempts]
    # each attempt's validation sleeps 0.2 s; the split is rounded to the millisecond
    step = 0.2 - 0.002
    assert validate[0] >= step and validate[1] >= validate[0] + step and validate[2] >= validate[1] + step
    assert [e["kernel_cache"]["kernels"] for e in attempts] == [1, 2, 3]
    final = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert final["time_split_s"]["validate"] >= validate[-1]
