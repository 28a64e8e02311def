"""GPU timing primitives, run inside the harness worker (they import torch).

Every timed call: inputs rotated between several independent sets (nothing can be cached by
pointer or content), the L2 cache flushed by writing a buffer larger than L2, a CUDA event pair
on the current stream around the call, then a device-wide synchronize (all streams) before the
end event is read. Next to the event time we record the fully synchronized wall time of the same
call: work launched on a side stream that the current stream does not wait for shows up as wall
time far above event time (see ``integrity.side_stream_check``). Clocks are never touched.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

L2_FLUSH_BYTES_DEFAULT = 256 * 1024 * 1024  # > 2x the L2 of any Hopper part (H100/H200: 50 MB)


@dataclass
class TimingSample:
    """Per-trial times of one callable, in microseconds."""

    event_us: list[float] = field(default_factory=list)
    wall_us: list[float] = field(default_factory=list)
    warmup: int = 0
    sync_overhead_us: float = 0.0  # wall minus event time of an empty call: the harness's own share

    @property
    def trials(self) -> int:
        return len(self.event_us)

    @property
    def median_us(self) -> float:
        return statistics.median(self.event_us)

    @property
    def wall_median_us(self) -> float:
        return statistics.median(self.wall_us) if self.wall_us else float("nan")

    @property
    def spread_pct(self) -> float:
        """Interquartile range of the trials relative to the median, in percent."""
        return spread_pct(self.event_us)

    def summary(self) -> dict:
        xs = sorted(self.event_us)
        return {
            "median_us": self.median_us,
            "mean_us": statistics.fmean(xs),
            "min_us": xs[0],
            "max_us": xs[-1],
            "spread_pct": self.spread_pct,
            "trials": self.trials,
            "warmup": self.warmup,
            "wall_median_us": self.wall_median_us,
            "sync_overhead_us": self.sync_overhead_us,
        }


def spread_pct(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    med = statistics.median(values)
    return 100.0 * (q[2] - q[0]) / med if med > 0 else 0.0


class L2Flusher:
    """Overwrites a buffer larger than L2 so that every timed call starts with a cold cache."""

    def __init__(self, device, nbytes: int = L2_FLUSH_BYTES_DEFAULT):
        import torch

        self.buffer = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device)

    def flush(self) -> None:
        self.buffer.fill_(1.0)


def choose_trials(estimate_us: float, target_s: float, min_trials: int, max_trials: int) -> int:
    """Enough trials to spend about ``target_s`` in timed calls, within [min_trials, max_trials]."""
    if estimate_us <= 0:
        return max_trials
    return int(min(max_trials, max(min_trials, round(target_s * 1e6 / estimate_us))))


def time_cuda(
    fn: Callable[[list], object],
    input_sets: Sequence[list],
    *,
    flusher: L2Flusher | None,
    warmup: int = 5,
    min_trials: int = 20,
    max_trials: int = 200,
    target_s: float = 0.5,
) -> TimingSample:
    """Time ``fn(inputs)`` on the GPU; returns per-trial event and synchronized wall times."""
    import torch

    if not input_sets:
        raise ValueError("time_cuda needs at least one input set")
    sample = TimingSample(warmup=warmup)
    torch.cuda.synchronize()
    # What an empty call costs in wall time beyond its events (Python, launch and sync latency),
    # so that the side-stream check compares like with like.
    gaps = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        end.record()
        torch.cuda.synchronize()
        gaps.append((time.perf_counter() - t0) * 1e6 - start.elapsed_time(end) * 1e3)
    sample.sync_overhead_us = max(0.0, statistics.median(gaps))
    # Warm-up doubles as the trial-count estimate (cold-cache, so it matches the timed calls).
    warm_us: list[float] = []
    for i in range(max(warmup, 1)):
        inputs = input_sets[i % len(input_sets)]
        if flusher is not None:
            flusher.flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(inputs)
        end.record()
        torch.cuda.synchronize()
        warm_us.append(start.elapsed_time(end) * 1e3)
    trials = choose_trials(statistics.median(warm_us[-3:]), target_s, min_trials, max_trials)
    for i in range(trials):
        inputs = input_sets[i % len(input_sets)]
        if flusher is not None:
            flusher.flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()  # the flush and anything before it are done: the wall clock starts clean
        t0 = time.perf_counter()
        start.record()
        fn(inputs)
        end.record()
        torch.cuda.synchronize()  # device-wide: side streams included
        t1 = time.perf_counter()
        sample.event_us.append(start.elapsed_time(end) * 1e3)
        sample.wall_us.append((t1 - t0) * 1e6)
    return sample


def time_cpu(fn: Callable[[list], object], input_sets: Sequence[list], *, warmup: int = 1, trials: int = 5) -> TimingSample:
    """Wall-clock timing on the CPU (used only where no GPU exists, and labelled so)."""
    sample = TimingSample(warmup=warmup)
    for i in range(warmup):
        fn(input_sets[i % len(input_sets)])
    for i in range(trials):
        t0 = time.perf_counter()
        fn(input_sets[i % len(input_sets)])
        dt = (time.perf_counter() - t0) * 1e6
        sample.event_us.append(dt)
        sample.wall_us.append(dt)
    return sample


# ---------------------------------------------------------------------------------------------
# Optional hardware counters through the Nsight Compute command line (off by default: slow, and
# ncu replays every kernel). Never touches clocks: ncu runs with --clock-control none.

NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)


def ncu_available() -> bool:
    import shutil

    return shutil.which("ncu") is not None


def ncu_counters(problem, candidate, settings, timeout_s: float = 600.0) -> dict[str, float]:
    """Counters summed over the kernels of one candidate call (kernel time in us, DRAM bytes,
    SM throughput as the time-weighted mean). Empty when ncu is absent or fails."""
    import csv
    import io
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    if not ncu_available():
        return {}
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="mucutlass-ncu-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"problem": problem.to_spec(), "candidate": candidate.model_dump()}))
        cmd = ["ncu", "--csv", "--clock-control", "none", "--target-processes", "all",
               "--nvtx", "--nvtx-include", "mucutlass_candidate/", "--metrics", ",".join(NCU_METRICS),
               sys.executable, "-m", "evals.timing", str(spec)]
        env = dict(os.environ, PYTHONPATH=str(root))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=str(root), env=env)
        except (subprocess.TimeoutExpired, OSError):
            return {}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('"')]
    if not lines:
        return {}
    totals: dict[str, float] = {}
    weighted_sm = 0.0
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    by_kernel: dict[str, dict[str, float]] = {}
    for row in rows:
        try:
            value = float(str(row.get("Metric Value", "")).replace(",", ""))
        except ValueError:
            continue
        by_kernel.setdefault(row.get("ID", ""), {})[row.get("Metric Name", "")] = value
    for metrics in by_kernel.values():
        t_ns = metrics.get("gpu__time_duration.sum", 0.0)
        totals["kernel_time_us"] = totals.get("kernel_time_us", 0.0) + t_ns / 1e3
        for name in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            totals[name] = totals.get(name, 0.0) + metrics.get(name, 0.0)
        weighted_sm += metrics.get("sm__throughput.avg.pct_of_peak_sustained_elapsed", 0.0) * t_ns
    if totals.get("kernel_time_us"):
        totals["sm_throughput_pct"] = weighted_sm / (totals["kernel_time_us"] * 1e3)
    totals["kernels"] = float(len(by_kernel))
    return totals


def _ncu_target(spec_path: str) -> int:
    """Runs one candidate call inside an NVTX range (what ``ncu_counters`` profiles)."""
    import json

    import torch

    from evals.harness import Candidate
    from evals.problems import Problem
    from evals.worker import Worker

    spec = json.loads(open(spec_path).read())
    problem = Problem.from_spec(spec["problem"])
    device = torch.device("cuda")
    model = Worker().candidate_factory(problem, Candidate(**spec["candidate"]).worker_view(), device)(0)
    inputs = problem.make_inputs(0, device)
    with torch.no_grad():
        model(*inputs)  # warm-up outside the range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("mucutlass_candidate")
        model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_ncu_target(sys.argv[1]))
