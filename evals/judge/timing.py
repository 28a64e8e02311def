"""GPU timing primitives (they import torch), run where the kernels run: in the candidate process for
a candidate, in the judge process for the reference.

The default method, ``time_candidate``: the harness captures the forward in one CUDA graph per input
set and times graph replays with events it created before the candidate ran (``cuda_graph``); no
candidate Python runs inside a timed window, and capture fails when work is left on a stream that
the capturing stream does not join. When capture fails, eager calls are timed with a device-wide
synchronize inside every window (``events_device_sync``). Every window is preceded by an L2 flush
enqueued before its start event, so the GPU is busy while the host launches the call. The judge
bounds the result with its own wall clock (``evals.judge.process``).

``time_cuda`` is the earlier event method, kept for the benchmark's comparison of methods: inputs
rotated between several sets, the L2 flushed, a CUDA event pair on the current stream around the
call, then a device-wide synchronize before the end event is read, with the synchronized wall time
of the same call recorded beside it. Clocks are never touched.

How a measurement is taken is a ``TimingMethod`` (the harness's timing settings):
- ``host_sync``: ``"before_and_after"`` waits for the flush before the start event, so the GPU is
  idle when the call is launched and the event time includes the call's host launch latency (and
  its jitter, large on a busy host); ``"after"`` enqueues flush, start event and call back to back,
  so the flush keeps the GPU busy while the host launches the call (KernelBench does this);
  ``"end"`` enqueues all trials and synchronizes once at the end (Triton's ``do_bench``), so the
  host runs ahead and the GPU never waits for it; the wall time is then the batch's per call.
- ``warmup_s``: back-to-back calls for this long before timing, so clocks and power settle.
- ``l2_flush_mb`` / ``l2_flush_mode``: the size of the flush buffer (0: no flush) and how it is
  written (``fill_`` or ``zero_``).
Garbage collection is off inside a measurement and the CUDA events are created before the timed
loop, so neither lands between a start and an end event.
"""

from __future__ import annotations

import gc
import itertools
import math
import statistics
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Literal, Mapping, Sequence

L2_FLUSH_BYTES_DEFAULT = 256 * 1024 * 1024  # > 2x the L2 of any Hopper part (H100/H200: 50 MB)
HOST_SYNC_MODES = ("before_and_after", "after", "end")
L2_FLUSH_MODES = ("fill", "zero")
HostSync = Literal["before_and_after", "after", "end"]
FlushMode = Literal["fill", "zero"]
SETTING_NAMES = {"target_s": "target_timed_s"}  # TimingMethod field -> HarnessSettings name, where they differ


@dataclass(frozen=True)
class TimingMethod:
    """How one measurement is taken. The harness's defaults (``HarnessSettings``) are these."""

    warmup: int = 5  # calls before timing; they also estimate the trial count
    warmup_s: float = 0.1  # then back-to-back calls for this long (clocks and power settle)
    min_trials: int = 20
    max_trials: int = 200
    target_s: float = 0.5  # time spent in timed calls, within [min_trials, max_trials]
    host_sync: HostSync = "before_and_after"
    l2_flush_mb: int = 256  # 0: no flush
    l2_flush_mode: FlushMode = "fill"
    # time_candidate: a trial is back-to-back calls spanning about this much GPU time (each behind its flush,
    # each timed by its own events), and its time is their mean (0: one call per trial)
    trial_us: float = 2000.0
    max_calls_per_trial: int = 16

    def __post_init__(self):
        if self.host_sync not in HOST_SYNC_MODES:
            raise ValueError(f"host_sync must be one of {HOST_SYNC_MODES}, not {self.host_sync!r}")
        if self.l2_flush_mode not in L2_FLUSH_MODES:
            raise ValueError(f"l2_flush_mode must be one of {L2_FLUSH_MODES}, not {self.l2_flush_mode!r}")
        if self.warmup < 1 or self.min_trials < 1 or self.max_trials < self.min_trials:
            raise ValueError("need warmup >= 1 and 1 <= min_trials <= max_trials")
        if self.warmup_s < 0 or self.target_s <= 0 or self.l2_flush_mb < 0:
            raise ValueError("warmup_s and l2_flush_mb must be >= 0, target_s > 0")
        if self.trial_us < 0 or self.max_calls_per_trial < 1:
            raise ValueError("need trial_us >= 0 and max_calls_per_trial >= 1")

    @classmethod
    def from_settings(cls, settings: Mapping) -> "TimingMethod":
        """From the worker's view of ``HarnessSettings`` (``target_timed_s`` is ``target_s``);
        a missing key keeps its default."""
        names = {setting: f for f, setting in SETTING_NAMES.items()}
        kw = {names.get(k, k): v for k, v in settings.items()}
        return cls(**{k: v for k, v in kw.items() if k in cls.__dataclass_fields__})

    def time_cuda_kwargs(self) -> dict:
        kw = asdict(self)
        for name in ("l2_flush_mb", "l2_flush_mode", "trial_us", "max_calls_per_trial"):
            kw.pop(name)
        return kw

    def calls_per_trial(self, call_us: float) -> int:
        """Back-to-back calls in one trial of ``time_candidate`` for calls of about ``call_us``."""
        if self.trial_us <= 0 or call_us <= 0:
            return 1
        return int(min(self.max_calls_per_trial, max(1, math.ceil(self.trial_us / call_us))))


@dataclass
class TimingSample:
    """Per-trial times of one callable, in microseconds."""

    event_us: list[float] = field(default_factory=list)
    wall_us: list[float] = field(default_factory=list)
    warmup: int = 0
    sync_overhead_us: float = 0.0  # wall minus event time of an empty call: the harness's own share
    warmup_calls: int = 0  # calls made before timing (count-based plus duration-based warm-up)
    elapsed_s: float = 0.0  # wall time of the whole measurement: warm-up, timed calls, bookkeeping

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
            "warmup_calls": self.warmup_calls,
            "wall_median_us": self.wall_median_us,
            "sync_overhead_us": self.sync_overhead_us,
            "timed_s": self.elapsed_s,
        }


def spread_pct(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    q = statistics.quantiles(values, n=4, method="inclusive")
    med = statistics.median(values)
    return 100.0 * (q[2] - q[0]) / med if med > 0 else 0.0


def range_pct(values: Sequence[float]) -> float:
    """(max - min) / median of repeated medians, in percent: the run-to-run spread."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    return 100.0 * (max(values) - min(values)) / med if med > 0 else 0.0


class L2Flusher:
    """Overwrites a buffer larger than L2 so that every timed call starts with a cold cache."""

    def __init__(self, device, nbytes: int = L2_FLUSH_BYTES_DEFAULT, mode: FlushMode = "fill"):
        import torch

        if mode not in L2_FLUSH_MODES:
            raise ValueError(f"l2_flush_mode must be one of {L2_FLUSH_MODES}, not {mode!r}")
        self.mode = mode
        self.buffer = torch.empty(max(nbytes // 4, 1), dtype=torch.float32, device=device)

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * 4

    def flush(self) -> None:
        if self.mode == "zero":
            self.buffer.zero_()  # a memset: no kernel reading a scalar, lower power than a fill
        else:
            self.buffer.fill_(1.0)


def make_flusher(device, method: TimingMethod, current: "L2Flusher | None" = None) -> "L2Flusher | None":
    """The flusher ``method`` asks for, reusing ``current`` when it already fits; None for no flush."""
    nbytes = int(method.l2_flush_mb) * 1024 * 1024
    if nbytes <= 0:
        return None
    if current is not None and current.nbytes == nbytes:
        current.mode = method.l2_flush_mode
        return current
    return L2Flusher(device, nbytes, method.l2_flush_mode)


def choose_trials(estimate_us: float, target_s: float, min_trials: int, max_trials: int) -> int:
    """Enough trials to spend about ``target_s`` in timed calls, within [min_trials, max_trials]."""
    if estimate_us <= 0:
        return max_trials
    return int(min(max_trials, max(min_trials, round(target_s * 1e6 / estimate_us))))


def _event_pairs(n: int) -> list:
    """``n`` start/end event pairs, created now (torch creates a CUDA event at its first record,
    which would otherwise land inside the timed window)."""
    import torch

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in pairs:
        start.record()
        end.record()
    return pairs


def _timed_calls(fn, input_sets, pairs, flusher, host_sync: str) -> tuple[list[float], list[float]]:
    """One call per event pair; returns (event_us, wall_us). The events are read after the loop, so
    between one call's end and the next flush the host only takes the time. With ``host_sync="end"``
    the calls are not synchronized one by one, and every call's wall time is the batch's mean."""
    import torch

    perf = time.perf_counter
    walls = []
    batch_t0 = perf()
    for i, (start, end) in enumerate(pairs):
        if flusher is not None:
            flusher.flush()
        if host_sync == "before_and_after":
            torch.cuda.synchronize()  # the flush is done: the wall clock starts clean
        t0 = perf()
        start.record()
        if fn is not None:
            fn(input_sets[i % len(input_sets)])
        end.record()
        if host_sync != "end":
            torch.cuda.synchronize()  # device-wide: side streams included
            walls.append((perf() - t0) * 1e6)
    if host_sync == "end":
        torch.cuda.synchronize()  # device-wide: side streams included
        walls = [(perf() - batch_t0) * 1e6 / max(len(pairs), 1)] * len(pairs)
    events = [start.elapsed_time(end) * 1e3 for start, end in pairs]
    return events, walls


def _warm_for(fn, input_sets, flusher, seconds: float) -> int:
    """Back-to-back calls (each after a flush) for ``seconds``; the host stays at most two calls
    ahead of the GPU, so its clock tracks the GPU's work and the GPU never idles."""
    import torch

    deadline = time.perf_counter() + seconds
    marks: deque = deque()
    calls = 0
    while calls == 0 or time.perf_counter() < deadline:
        if flusher is not None:
            flusher.flush()
        fn(input_sets[calls % len(input_sets)])
        calls += 1
        mark = torch.cuda.Event()
        mark.record()
        marks.append(mark)
        if len(marks) > 2:
            marks.popleft().synchronize()
    torch.cuda.synchronize()
    return calls


def time_cuda(
    fn: Callable[[list], object],
    input_sets: Sequence[list],
    *,
    flusher: L2Flusher | None,
    warmup: int = 5,
    min_trials: int = 20,
    max_trials: int = 200,
    target_s: float = 0.5,
    warmup_s: float = 0.0,
    host_sync: HostSync = "before_and_after",
) -> TimingSample:
    """Time ``fn(inputs)`` on the GPU; returns per-trial event and synchronized wall times."""
    import torch

    if not input_sets:
        raise ValueError("time_cuda needs at least one input set")
    if host_sync not in HOST_SYNC_MODES:
        raise ValueError(f"host_sync must be one of {HOST_SYNC_MODES}, not {host_sync!r}")
    started = time.perf_counter()
    sample = TimingSample(warmup=warmup)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed window would be timed; garbage waits for the next one
    try:
        torch.cuda.synchronize()
        # What an empty call costs in wall time beyond its events (Python, launch and sync latency,
        # and with host_sync "after" or "end" the flush it waits behind), so that the side-stream
        # check compares like with like.
        gap_flusher = None if host_sync == "before_and_after" else flusher
        events, walls = _timed_calls(None, input_sets, _event_pairs(5), gap_flusher, host_sync)
        sample.sync_overhead_us = max(0.0, statistics.median(w - e for w, e in zip(walls, events)))
        # Warm-up doubles as the trial-count estimate (cold-cache, so it matches the timed calls).
        n_warm = max(warmup, 1)
        warm_us, _ = _timed_calls(fn, input_sets, _event_pairs(n_warm), flusher, host_sync)
        sample.warmup_calls = n_warm
        if warmup_s > 0:
            sample.warmup_calls += _warm_for(fn, input_sets, flusher, warmup_s)
        trials = choose_trials(statistics.median(warm_us[-3:]), target_s, min_trials, max_trials)
        sample.event_us, sample.wall_us = _timed_calls(fn, input_sets, _event_pairs(trials), flusher, host_sync)
    finally:
        if gc_was_enabled:
            gc.enable()
    sample.elapsed_s = time.perf_counter() - started
    return sample


# ---------------------------------------------------------------------------------------------
def set_framework() -> None:
    """The numerics a candidate runs and is timed under (its process sets them before every request, and a change
    it makes is the ``framework_state`` verdict): fp32 default dtype, no autograd, no TF32 in PyTorch's own
    matmuls and convolutions, cuDNN on without autotuning, no autocast."""
    import torch

    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.enabled = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    torch.use_deterministic_algorithms(False)
    for dev in ("cpu", "cuda"):
        try:
            torch.set_autocast_enabled(dev, False)
        except (TypeError, RuntimeError):
            pass


# The default method: the harness captures the forward in CUDA graphs and times their replays

TIMING_METHODS = ("cuda_graph", "events_device_sync", "cpu_process")


def _graph_entries(fn, input_sets) -> list[dict]:
    """One CUDA graph per input set, captured by the harness around ``fn``: a replay runs exactly the
    captured kernels (the candidate's Python does not run), and capture fails when work is left on a
    stream that the capturing stream does not join, so no timed work can escape the graph."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for inputs in input_sets:
            fn(inputs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    # the warm-up's freed blocks back to the device: a capture allocates from its own pool and cannot release
    # cached blocks while it runs (an 8 GiB-output model ran out of its share with 7.75 GiB cached and unused)
    torch.cuda.empty_cache()
    entries = []
    for inputs in input_sets:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn(inputs)
        entries.append({"inputs": inputs, "run": graph.replay, "outputs": (lambda o=out: o), "graph": graph})
    torch.cuda.synchronize()
    return entries


def release_rng_from_failed_capture() -> None:
    """A capture that fails (a model that branches on a value syncs the host) ends before the default CUDA
    generator's capture epilogue runs, so the generator stays marked as capturing and every later random draw
    on the GPU in this process fails ("Offset increment outside graph capture encountered unexpectedly"): the
    judge could then draw no more input sets. One small capture that ends cleanly runs the epilogue."""
    import warnings

    import torch

    try:
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an almost empty graph is the point
            with torch.cuda.graph(graph):
                torch.empty(1, device="cuda").zero_()
        del graph
        torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - nothing more to do: the draws that follow say so themselves
        pass


def _eager_entries(fn, input_sets) -> list[dict]:
    entries = []
    for inputs in input_sets:
        box = {"out": None}

        def run(inputs=inputs, box=box):
            box["out"] = fn(inputs)

        entries.append({"inputs": inputs, "run": run, "outputs": (lambda box=box: box["out"])})
    return entries


def _replay_trials(entries, pairs, flusher, mids=None, calls_per_trial: int = 1, refresh=None) -> list[float]:
    """One call per event pair, ``calls_per_trial`` calls back to back per trial; returns each call's
    time. The flush is enqueued before the start event, so the GPU is busy flushing (>= 50 us for
    256 MB on an H200) while the host launches the call: no host gap inside the window, and none
    between the calls of a trial (the host enqueues flush, events and call far faster than the GPU
    runs them). The device is synchronized after each trial, outside the windows (the host never runs
    hundreds of trials ahead: on the H200 that made event times wander, see tests/test_harness_gpu.py).
    With ``mids`` (the eager fallback), every stream is drained inside the window: the end event is
    recorded after a device-wide synchronize, so work on any stream is counted."""
    import torch

    for i, (start, end) in enumerate(pairs):
        if refresh is not None:
            refresh(i)  # before the flush and the start event: not timed
        if flusher is not None:
            flusher.flush()
        start.record()
        entries[i % len(entries)]["run"]()
        if mids is not None:
            mids[i].record()
            torch.cuda.synchronize()  # every stream drained inside the timed window
        end.record()
        if (i + 1) % calls_per_trial == 0 or i + 1 == len(pairs):
            torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in pairs]


def _fresh_values(entries, sync=None) -> tuple:
    """(refresh(i), restore()): refresh writes call ``i``'s input set scaled by a factor no earlier call used
    (floating-point tensors only: every value changes, none changes sign or leaves its range by much, and the
    write bumps each tensor's version counter); restore puts the original values back and runs each set once
    more (untimed), so each set's last outputs are for its own inputs again. ``sync``: what waits for the
    device after restoring (CUDA's synchronize by default)."""
    import torch

    sync = torch.cuda.synchronize if sync is None else sync

    originals = [[x.clone() if isinstance(x, torch.Tensor) and x.is_floating_point() else None for x in e["inputs"]]
                 for e in entries]

    factors = itertools.count(1)  # each refresh takes the next: unique however the caller numbers its calls

    def refresh(i: int) -> None:  # call i's set
        k = i % len(entries)
        scale = 1.0 + 1e-3 * (next(factors) % 4093 or 4093)
        for x, o in zip(entries[k]["inputs"], originals[k]):
            if o is not None:
                torch.mul(o, scale, out=x)

    def restore() -> None:
        for e, saved in zip(entries, originals):
            for x, o in zip(e["inputs"], saved):
                if o is not None:
                    x.copy_(o)
            e["run"]()
        sync()

    return refresh, restore


def trial_means(call_us: list[float], calls_per_trial: int) -> list[float]:
    """Each trial's time: the mean of its calls."""
    n = max(1, calls_per_trial)
    return [statistics.fmean(call_us[i:i + n]) for i in range(0, len(call_us) - n + 1, n)]


def time_candidate(model, input_sets, flusher, method: TimingMethod, graph: bool = True) -> dict:
    """Times ``model(*inputs)`` over the rotated ``input_sets``: CUDA graphs captured and replayed by
    the harness (``cuda_graph``); when capture fails, eager calls with every stream drained inside
    each timed window (``events_device_sync``). Returns the per-trial times, the method, the capture
    error if any, the entries (for sampled re-runs of timed calls) and each set's last outputs."""
    import torch

    def fn(inputs):
        return model(*inputs)

    started = time.perf_counter()
    capture_error = ""
    entries = None
    if graph:
        try:
            entries = _graph_entries(fn, input_sets)
        except Exception as exc:  # noqa: BLE001 - unjoined streams, host syncs, unsupported ops
            capture_error = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            release_rng_from_failed_capture()
    name = "cuda_graph" if entries is not None else "events_device_sync"
    if entries is None:
        entries = _eager_entries(fn, input_sets)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        n_warm = max(method.warmup, len(entries))
        mids = [torch.cuda.Event(enable_timing=True) for _ in range(n_warm)] if name != "cuda_graph" else None
        warm_us = _replay_trials(entries, _event_pairs(n_warm), flusher, mids)
        warmup_calls = n_warm
        if method.warmup_s > 0:
            warmup_calls += _warm_for(lambda i: entries[i % len(entries)]["run"](), list(range(len(entries))),
                                      flusher, method.warmup_s)
        call_est_us = statistics.median(warm_us[-3:])
        # a graph's calls run back to back in a trial, their mean is its time (fast clock and power noise
        # averages out); the eager fallback keeps one call per trial, each window drained device-wide
        per_trial = method.calls_per_trial(call_est_us) if name == "cuda_graph" else 1
        trials = choose_trials(call_est_us * per_trial, method.target_s, method.min_trials, method.max_trials)
        pairs = _event_pairs(trials * per_trial)
        mids = [torch.cuda.Event(enable_timing=True) for _ in range(trials)] if name != "cuda_graph" else None
        # eager calls run the candidate's Python each time: every timed call gets values it has not seen (a memo
        # keyed by the inputs misses), and the inputs are put back after the trials
        refresh, restore = _fresh_values(entries) if name != "cuda_graph" else (None, None)
        call_us = _replay_trials(entries, pairs, flusher, mids, per_trial, refresh)
        if restore is not None:
            restore()
        event_us = trial_means(call_us, per_trial)
        # the current stream's share of each window (eager fallback): work it does not wait for shows
        # up as a window far longer than the current stream's part of it
        current_us = [s.elapsed_time(m) * 1e3 for (s, _), m in zip(pairs, mids)] if mids is not None else None
    finally:
        if gc_was_enabled:
            gc.enable()
    out = {
        "method": name, "capture_error": capture_error, "call_us": call_us, "event_us": event_us,
        "median_us": statistics.median(event_us),
        "mean_us": statistics.fmean(event_us), "min_us": min(event_us), "spread_pct": spread_pct(event_us),
        "trials": len(event_us), "calls_per_trial": per_trial, "warmup_s": method.warmup_s,
        "warmup_calls": warmup_calls, "timed_s": time.perf_counter() - started,
        "current_stream_median_us": statistics.median(current_us) if current_us else None,
        "graphs": entries, "last_outputs": [e["outputs"]() for e in entries],
    }
    return out


def time_candidate_cpu(model, input_sets, method: TimingMethod) -> dict:
    """``time_candidate`` on the CPU (``cpu_process``): eager calls over the rotated ``input_sets``, each
    timed by the process's CPU clock and its reaped children's (on a shared host the wall clock counts the
    waits for a core; the caller runs torch on one thread). Every thread counts, ended ones too: by this
    thread's clock alone a forward whose work ran in a thread it started and joined took the join's time.
    A claim like every in-process time; the judge bounds it with sealed calls (``evals.judge.sealed``), by
    the CPU time the kernel counts for the candidate's processes."""
    import resource

    started = time.perf_counter()
    entries = _eager_entries(lambda inputs: model(*inputs), input_sets)

    def perf() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    # every call gets values no earlier call saw, written before its clock starts: a memo keyed by the inputs
    # (their bytes, or their buffer and version counter) never answers a timed call (as on a GPU's eager path)
    refresh, restore = _fresh_values(entries, sync=lambda: None)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        n_warm = max(method.warmup, len(entries))
        warm = []
        for i in range(n_warm):
            refresh(i)
            t0 = perf()
            entries[i % len(entries)]["run"]()
            warm.append((perf() - t0) * 1e6)
        trials = choose_trials(statistics.median(warm[-3:]), method.target_s, method.min_trials, method.max_trials)
        call_us = []
        for i in range(trials):
            refresh(i)
            t0 = perf()
            entries[i % len(entries)]["run"]()
            call_us.append((perf() - t0) * 1e6)
        restore()
    finally:
        if gc_was_enabled:
            gc.enable()
    return {
        "method": "cpu_process", "capture_error": "", "call_us": call_us, "event_us": call_us,
        "median_us": statistics.median(call_us), "mean_us": statistics.fmean(call_us), "min_us": min(call_us),
        "spread_pct": spread_pct(call_us), "trials": len(call_us), "calls_per_trial": 1, "warmup_s": 0.0,
        "warmup_calls": n_warm, "timed_s": time.perf_counter() - started, "current_stream_median_us": None,
        "graphs": entries, "last_outputs": [e["outputs"]() for e in entries],
    }


def time_cpu(fn: Callable[[list], object], input_sets: Sequence[list], *, warmup: int = 1, trials: int = 5) -> TimingSample:
    """Wall-clock timing on the CPU (used only where no GPU exists, and labelled so)."""
    started = time.perf_counter()
    sample = TimingSample(warmup=warmup, warmup_calls=warmup)
    for i in range(warmup):
        fn(input_sets[i % len(input_sets)])
    for i in range(trials):
        t0 = time.perf_counter()
        fn(input_sets[i % len(input_sets)])
        dt = (time.perf_counter() - t0) * 1e6
        sample.event_us.append(dt)
        sample.wall_us.append(dt)
    sample.elapsed_s = time.perf_counter() - started
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
    with tempfile.TemporaryDirectory(prefix="mucutlass-ncu-") as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(json.dumps({"problem": problem.to_spec(), "candidate": candidate.model_dump()}))
        cmd = ["ncu", "--csv", "--clock-control", "none", "--target-processes", "all",
               "--nvtx", "--nvtx-include", "mucutlass_candidate/", "--metrics", ",".join(NCU_METRICS),
               sys.executable, "-m", "evals.judge.ncu_target", str(spec)]
        from evals.judge.sandbox import candidate_env  # evals.judge.timing is imported in the candidate: no import at the top

        env = candidate_env(workdir=tmp)  # no keys, the candidate's own caches (it runs outside the sandbox)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp, env=env)
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
