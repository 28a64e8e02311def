"""The harness's own numbers: its overhead per attempt, the worker's memory across attempts and
after a crash, and the spread of repeated timings under timing variants. Writes
``<out>/<date>-<gpu>-harness.{json,md}`` (keys: date, gpu, gpu_name, device, versions, environment,
variants, rows, summary) and prints the tables.

    python benchmarks/bench_harness.py --out benchmarks/results          # a GPU: about 4 minutes
    python benchmarks/bench_harness.py --quick --out /tmp/harness         # any machine, a few seconds

Without a GPU it says so and runs on the CPU: validation is real, programs run on the interpreter
backend, a profile is the SOL model's estimate, and the spread section times tiny problems by
wall clock (the GPU timing variants do not apply there).

a. overhead: validate + profile wall time minus the worker's time inside the measurement
   (``Timing.timed_s``: warm-up and timed calls), for a PyTorch candidate, a μCUTLASS program on
   the interpreter and, with nvcc, the same program built for the cutlass backend (built in the
   background while the memory section runs; its build time is reported, not counted).
b. memory: torch's allocated and reserved bytes (and the worker's resident host memory) after every
   attempt of a run of attempts, then after an illegal-address crash and the worker's restart.
c. timing spread: eager fp32, eager TF32 and torch.compile on three problems, each timed
   ``--repeats`` times under each variant of ``evals.judge.timing.TimingMethod``: the IQR / median of the
   trials, and the range of the repeated medians. Repeats are interleaved (repeat, problem,
   variant, mode) and the variant order rotates, so drift of clocks or temperature is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_io import gpu_slug, write_result  # noqa: E402
from evals.judge import Candidate, Harness, HarnessSettings  # noqa: E402
from evals.harness_cli import fmt_us  # noqa: E402
from evals.problems import load_suite  # noqa: E402
from evals.replay import fmt_num  # noqa: E402
from evals.environment import collect_environment, versions_text  # noqa: E402
from evals.judge.timing import TimingMethod, range_pct, spread_pct  # noqa: E402

ADVERSARIAL = ROOT / "tests" / "adversarial"
OVERHEAD_PROBLEM = "02_linear_relu_tiny"  # smoke: the harness's cost, not the problem's
OVERHEAD_PROBLEM_LARGE = "11_linear_relu"  # builtin: how it grows with the problem's size
# Without a GPU: 11_linear_relu's tensor sizes with math a CPU does in milliseconds (and its honest candidate)
OVERHEAD_PROBLEM_LARGE_CPU = ROOT / "benchmarks" / "harness_problems" / "large_cheap_relu.py"
SPREAD_PROBLEMS_GPU = ("01_gemm_square", "11_linear_relu", "20_conv2d_bias_relu")
SPREAD_PROBLEMS_CPU = ("01_gemm_tiny", "02_linear_relu_tiny", "03_conv2d_relu_tiny")
MODES = ("eager_fp32", "eager_tf32", "compile")
SPREAD_LIMIT_PCT = 3.0
SPREAD_MIN_KERNEL_US = 50.0  # the spread target holds for kernels above this
L2_FALLBACK_BYTES = 50 * 1024**2

# name -> changes to the default TimingMethod; "2x_l2" is resolved from the device's L2 size.
VARIANTS: dict[str, dict] = {
    # the harness's default: CUDA graphs captured and replayed by the harness (evals.judge.timing.time_candidate)
    # (trials of back-to-back calls spanning ~2 ms, their mean the trial's time, after 0.1 s of warm-up)
    "cuda_graph": {"graph": True},
    "cuda_graph_one_call": {"graph": True, "trial_us": 0.0, "warmup_s": 0.0},  # the earlier default: one call a trial
    "cuda_graph_no_warmup": {"graph": True, "warmup_s": 0.0},
    "cuda_graph_trial_5ms": {"graph": True, "trial_us": 5000.0},
    "cuda_graph_warmup_0.3s": {"graph": True, "warmup_s": 0.3},  # clocks settle before the trials
    "cuda_graph_more_trials": {"graph": True, "max_trials": 1000, "target_s": 1.0},
    "current": {},
    "warmup_0.2s": {"warmup_s": 0.2},
    "warmup_1s": {"warmup_s": 1.0},
    "flush_zero": {"l2_flush_mode": "zero"},
    "flush_2x_l2": {"l2_flush_mb": "2x_l2"},
    "more_trials": {"max_trials": 1000, "target_s": 1.0},
    "host_sync_after": {"host_sync": "after"},
    "host_sync_end": {"host_sync": "end"},
    "after_warmup_0.2s_zero_2x_l2": {"host_sync": "after", "warmup_s": 0.2, "l2_flush_mode": "zero",
                                     "l2_flush_mb": "2x_l2"},
    "after_warmup_0.2s": {"host_sync": "after", "warmup_s": 0.2},
    # A busy host (every core spinning, as when nvcc builds run beside the timing): host-side delays
    # land inside the event window when the GPU idles before a call.
    "current_busy_host": {"host_load": True},
    "host_sync_after_busy_host": {"host_sync": "after", "host_load": True},
    "host_sync_end_busy_host": {"host_sync": "end", "host_load": True},
}
# about 30 s a repeat on an H200; the two combinations are there to confirm a choice
DEFAULT_VARIANTS = [v for v in VARIANTS if v not in ("after_warmup_0.2s", "after_warmup_0.2s_zero_2x_l2")]
SECTIONS = ("memory", "overhead", "spread")
STAGE_ORDER = ("process_start", "reference", "transfer", "candidate", "timed", "compare", "sealed", "sealed_mask",
               "probes", "attribution", "snapshot", "end", "process_end")


def resolve_variants(names: list[str], l2_bytes: int) -> dict[str, TimingMethod]:
    two_l2_mb = max(1, math.ceil(2 * l2_bytes / 1024**2))
    out = {}
    for name in names:
        changes = {k: (two_l2_mb if v == "2x_l2" else v) for k, v in VARIANTS[name].items() if k not in ("host_load", "graph")}
        out[name] = replace(TimingMethod(), **changes)
    return out


def graph_variants(names) -> set[str]:
    return {n for n in names if VARIANTS.get(n, {}).get("graph")}


def loaded_variants(names) -> set[str]:
    return {n for n in names if VARIANTS.get(n, {}).get("host_load")}


# Spins until its parent is gone, so a benchmark killed mid-block leaves nothing spinning behind.
_SPIN = "import os, sys\nwhile os.getppid() == int(sys.argv[1]):\n    for _ in range(100000):\n        pass\n"


class HostLoad:
    """``n`` processes spinning on the CPU while the block runs (ended by their pids on exit)."""

    def __init__(self, n: int):
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "HostLoad":
        self.procs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())]) for _ in range(self.n)]
        time.sleep(0.2)  # let them start spinning
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait()
        self.procs = []


def usable_cores() -> int:
    """The cores this process may run on (a container's cpuset, not the host's count), at most 64."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 64))


class Clock:
    """The run's time budget: sections ask what is left before starting more work."""

    def __init__(self, budget_s: float):
        self.started = time.perf_counter()
        self.budget_s = budget_s

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.started

    @property
    def left_s(self) -> float:
        return self.budget_s - self.elapsed_s


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# a. overhead per attempt


def run_attempt(harness: Harness, problem, candidate: Candidate) -> dict:
    """One attempt as the graph makes it: validate, then profile."""
    v = harness.validate(problem, candidate)
    t = harness.profile(problem, candidate)
    timed_s = t.timed_s or 0.0
    stages: dict[str, float] = {}
    for part in ((v.info or {}).get("stages") or {}, t.stages or {}):
        for k, sec in part.items():
            stages[k] = stages.get(k, 0.0) + sec
    return {
        "stages": stages,
        "correct": v.correct and t.valid, "reason": v.reason or t.reason, "crashed": v.crashed or t.crashed,
        "validate_s": v.wall_s, "profile_s": t.wall_s, "timed_s": timed_s,
        "overhead_s": v.wall_s + t.wall_s - timed_s, "timing_source": t.timing_source, "median_us": t.median_us,
        "memory_allocated_bytes": t.memory_allocated_bytes if t.memory_allocated_bytes is not None else v.memory_allocated_bytes,
        "memory_reserved_bytes": t.memory_reserved_bytes if t.memory_reserved_bytes is not None else v.memory_reserved_bytes,
        "worker_rss_bytes": t.worker_rss_bytes if t.worker_rss_bytes is not None else v.worker_rss_bytes,
    }


def overhead_row(harness: Harness, problem, candidate: Candidate, label: str, backend: str, attempts: int,
                 extra: dict | None = None, pause_s: float = 0.0) -> dict:
    first = run_attempt(harness, problem, candidate)  # the worker's first use of this candidate kind
    runs = []
    for _ in range(attempts):
        time.sleep(pause_s)
        runs.append(run_attempt(harness, problem, candidate))
    bad = next((r for r in [first, *runs] if not r["correct"]), None)
    row = {
        "section": "overhead", "candidate": label, "problem": problem.name, "backend": backend,
        "attempts": len(runs), "correct": bad is None, "reason": bad["reason"] if bad else "",
        "first_attempt_s": first["overhead_s"],
        "overhead_median_s": _median(r["overhead_s"] for r in runs),
        "overhead_max_s": max(r["overhead_s"] for r in runs),
        "validate_median_s": _median(r["validate_s"] for r in runs),
        "profile_median_s": _median(r["profile_s"] for r in runs),
        "timed_median_s": _median(r["timed_s"] for r in runs),
        "timing_source": runs[-1]["timing_source"],
        "candidate_median_us": _median(r["median_us"] for r in runs),
        "pause_s": pause_s,
        # the judge's seconds per stage (median over the attempts): process_start (waiting for a
        # pre-started candidate process), reference (inputs, reference model and outputs), transfer
        # (tensors through the channel's arena), candidate (the candidate process's handlers, its
        # import, build and forwards included), timed (the measurement), compare, probes (precision),
        # attribution, snapshot (the protected folders), end (closing checks), process_end
        "stages": {k: _median(r["stages"].get(k, 0.0) for r in runs) for k in sorted({k for r in runs for k in r["stages"]})},
    }
    row.update(extra or {})
    _log(f"overhead {label} on {problem.name}: median {row['overhead_median_s']:.3f} s, "
         f"max {row['overhead_max_s']:.3f} s over {len(runs)} attempts (first {first['overhead_s']:.2f} s)")
    return row


def program_for(problem):
    """The offline tier's translation of ``problem`` into a μCUTLASS program (or None, why)."""
    try:
        from dsl_compiler.frontend import trace_problem
    except ImportError as exc:
        return None, f"the offline frontend is not available: {exc}"
    result = trace_problem(problem)
    if result.program is None:
        return None, "; ".join(d.message for d in result.diagnostics[:1]) or "no program"
    return result.program, ""


class BackgroundBuild:
    """Builds the program's kernels with nvcc in a thread, while other sections run."""

    def __init__(self, program):
        self.result = None
        self.error = ""
        self.thread = threading.Thread(target=self._run, args=(program,), daemon=True)
        self.thread.start()

    def _run(self, program) -> None:
        try:
            from dsl_compiler.build import build_program

            self.result = build_program(program)
        except Exception as exc:  # no nvcc, no CUTLASS headers: the row says why
            self.error = f"{type(exc).__name__}: {exc}".splitlines()[0]

    def wait(self, timeout_s: float):
        self.thread.join(max(timeout_s, 0.0))
        if self.thread.is_alive():
            return None, f"the build was still running after waiting {timeout_s:.0f} s"
        if self.error:
            return None, self.error
        if not self.result.ok:
            d = self.result.diagnostics[0] if self.result.diagnostics else None
            return None, f"build failed: {d.message if d else 'no diagnostic'}"
        return self.result, ""


# ---------------------------------------------------------------------------------------------
# b. memory across attempts and after a crash


def memory_rows(harness: Harness, problem, attempts: int, cuda: bool) -> list[dict]:
    honest = Candidate.from_file(ADVERSARIAL / "honest.py")
    run_attempt(harness, problem, honest)  # the first profile allocates the L2 flush buffer, kept for good
    start = harness.worker_memory()
    levels = []
    for _ in range(attempts):
        r = run_attempt(harness, problem, honest)
        levels.append({k: r[k] for k in ("memory_allocated_bytes", "memory_reserved_bytes", "worker_rss_bytes")})

    def growth(key):
        vals = [lv[key] for lv in levels if lv.get(key) is not None]
        if not vals or start.get(key) is None:
            return None, None
        return max(vals) - start[key], vals[-1] - start[key]

    alloc_max, alloc_last = growth("memory_allocated_bytes")
    res_max, res_last = growth("memory_reserved_bytes")
    rss_max, rss_last = growth("worker_rss_bytes")
    row = {
        "section": "memory", "what": f"{attempts} attempts (validate + profile) of honest.py on {problem.name}",
        "attempts": attempts, "cuda_allocator": cuda,
        "start_allocated_bytes": start.get("memory_allocated_bytes"), "start_reserved_bytes": start.get("memory_reserved_bytes"),
        "start_worker_rss_bytes": start.get("worker_rss_bytes"),
        "allocated_growth_max_bytes": alloc_max, "allocated_growth_last_bytes": alloc_last,
        "reserved_growth_max_bytes": res_max, "reserved_growth_last_bytes": res_last,
        "worker_rss_growth_max_bytes": rss_max, "worker_rss_growth_last_bytes": rss_last,
        "levels": levels,
    }
    _log(f"memory over {attempts} attempts: allocated +{alloc_max}, reserved +{res_max}, rss +{rss_max} bytes")

    # An illegal address kills the CUDA context (a segfault on the CPU): the attempt fails, a fresh
    # worker takes over, and the next attempt starts from the same level as the first worker did.
    restarts = harness.restarts
    t0 = time.perf_counter()
    bad = harness.validate(problem, Candidate.from_file(ADVERSARIAL / "illegal_address.py"))
    crash_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    after = run_attempt(harness, problem, honest)
    next_s = time.perf_counter() - t0
    after_mem = harness.worker_memory()
    crash = {
        "section": "crash", "crashed": bad.crashed, "reason": bad.reason[:200], "restarts": harness.restarts - restarts,
        "crash_attempt_s": crash_s, "next_attempt_s": next_s, "next_attempt_correct": after["correct"],
        "after_restart_allocated_bytes": after_mem.get("memory_allocated_bytes"),
        "after_restart_reserved_bytes": after_mem.get("memory_reserved_bytes"),
        "after_restart_worker_rss_bytes": after_mem.get("worker_rss_bytes"),
        "after_restart_allocated_vs_start_bytes": _diff(after_mem.get("memory_allocated_bytes"), start.get("memory_allocated_bytes")),
        "after_restart_reserved_vs_start_bytes": _diff(after_mem.get("memory_reserved_bytes"), start.get("memory_reserved_bytes")),
    }
    _log(f"crash: {bad.reason[:80]!r}; restarts +{crash['restarts']}; next attempt correct={after['correct']} "
         f"in {next_s:.2f} s; allocated after restart vs start: {crash['after_restart_allocated_vs_start_bytes']}")
    return [row, crash]


def _diff(a, b):
    return None if a is None or b is None else a - b


# ---------------------------------------------------------------------------------------------
# c. timing spread


def tf32(matmul: bool):
    """TF32 in matmuls as asked; cuDNN keeps PyTorch's default (on), as the worker's eager timings do."""
    from evals.judge.process import tf32_mode

    return tf32_mode(matmul=matmul, cudnn=True)


class SpreadTarget:
    """One problem's model, input sets and compiled model, kept for all variants and repeats."""

    def __init__(self, problem, device, n_input_sets: int, compile_model: bool):
        import torch

        self.problem = problem
        self.model = problem.make_model(0, device)
        self.inputs = [problem.make_inputs(1 + i, device) for i in range(n_input_sets)]
        self.compiled = None
        self.compile_s = None
        self.compile_error = ""
        if compile_model:
            try:
                with torch.no_grad(), tf32(True):
                    compiled = torch.compile(self.model)
                    t0 = time.perf_counter()
                    compiled(*self.inputs[0])
                    torch.cuda.synchronize()
                self.compile_s = time.perf_counter() - t0
                self.compiled = compiled
            except Exception as exc:  # a model torch.compile cannot handle still has eager rows
                self.compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]

    def fn(self, mode: str):
        model = self.callable(mode)
        return None if model is None else (lambda inp: model(*inp))

    def callable(self, mode: str):
        return self.compiled if mode == "compile" else self.model


def _graph_sample(model, inputs, flusher, method: TimingMethod):
    """The harness's default method (CUDA graphs it captures and replays) as a TimingSample."""
    from evals.judge.timing import TimingSample, time_candidate

    r = time_candidate(model, inputs, flusher, method)
    sample = TimingSample(event_us=list(r["event_us"]), wall_us=[], warmup=method.warmup, elapsed_s=r["timed_s"],
                          warmup_calls=r["warmup_calls"])
    sample.method = r["method"]
    sample.calls_per_trial = r["calls_per_trial"]
    return sample


class Flushers:
    """One flush buffer per size, so alternating variants do not reallocate 256 MB each time."""

    def __init__(self, device):
        self.device = device
        self.by_size = {}

    def get(self, method: TimingMethod):
        from evals.judge.timing import make_flusher

        key = method.l2_flush_mb
        self.by_size[key] = make_flusher(self.device, method, self.by_size.get(key))
        return self.by_size[key]


def spread_rows_gpu(problems, variants: dict[str, TimingMethod], repeats: int, clock: Clock, reserve_s: float,
                    device: str = "cuda", compile_models: bool = True, loaded: set[str] = frozenset(),
                    load_procs: int | None = None, first_round_s: float = 30.0) -> tuple[list[dict], dict]:
    """Rows per (problem, mode, variant). A repeat starts only when the budget leaves room for it
    (the last repeat's duration, ``first_round_s`` before the first)."""
    import torch

    from evals.judge.timing import time_cuda

    device = torch.device(device)
    targets = []
    for p in problems:
        targets.append(SpreadTarget(p, device, 3, compile_model=compile_models))
        _log(f"spread: {p.name} ready (torch.compile {targets[-1].compile_s or 0:.1f} s{', failed: ' + targets[-1].compile_error if targets[-1].compile_error else ''})")
    flushers = Flushers(device)
    samples: dict[tuple[str, str, str], list] = {}
    names = list(variants)
    done = 0
    round_s = None
    gc.collect()
    gc.freeze()  # as the worker does: the collector never walks torch's own objects
    for r in range(repeats):
        if clock.left_s - reserve_s < (round_s if round_s is not None else first_round_s):
            _log(f"spread: stopping after {done} repeats (the time budget is spent)")
            break
        t_round = time.perf_counter()
        order = names[r % len(names):] + names[:r % len(names)]  # rotate: no variant always follows another
        for target in targets:
            for name in order:
                method = variants[name]
                load = HostLoad(load_procs or usable_cores()) if name in loaded else contextlib.nullcontext()
                with load:
                    for mode in MODES:
                        fn = target.fn(mode)
                        if fn is None:
                            continue
                        with torch.no_grad(), tf32(mode != "eager_fp32"):
                            if name in graph_variants([name]):
                                s = _graph_sample(target.callable(mode), target.inputs, flushers.get(method), method)
                            else:
                                s = time_cuda(fn, target.inputs, flusher=flushers.get(method), **method.time_cuda_kwargs())
                        samples.setdefault((target.problem.name, mode, name), []).append(s)
        done += 1
        round_s = time.perf_counter() - t_round
        _log(f"spread: repeat {r + 1}/{repeats} in {round_s:.1f} s ({clock.elapsed_s:.0f} s so far)")
    gc.unfreeze()
    rows = [_spread_row(p, m, v, ss) for (p, m, v), ss in samples.items()]
    info = {"repeats_done": done, "busy_host_processes": (load_procs or usable_cores()) if loaded else 0,
            "compile_s": {t.problem.name: t.compile_s for t in targets},
            "compile_errors": {t.problem.name: t.compile_error for t in targets if t.compile_error}}
    del targets
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows, info


def spread_rows_cpu(problems, repeats: int, trials: int) -> tuple[list[dict], dict]:
    """No GPU: wall-clock timings of tiny problems (the GPU variants do not apply)."""
    import torch

    from evals.judge.timing import time_cpu

    rows = []
    for p in problems:
        model = p.make_model(0, "cpu")
        inputs = [p.make_inputs(1 + i, "cpu") for i in range(3)]
        for mode in ("eager_fp32",):
            with torch.no_grad():
                ss = [time_cpu(lambda inp: model(*inp), inputs, warmup=2, trials=trials) for _ in range(repeats)]
            rows.append(_spread_row(p.name, mode, "cpu_wall_clock", ss))
    return rows, {"repeats_done": repeats, "note": "no GPU: wall-clock times on the CPU; torch.compile and the "
                  "GPU timing variants were not run"}


def _spread_row(problem: str, mode: str, variant: str, samples: list) -> dict:
    medians = [s.median_us for s in samples]
    spreads = [s.spread_pct for s in samples]
    return {
        "section": "spread", "problem": problem, "mode": mode, "variant": variant, "repeats": len(samples),
        "median_us": statistics.median(medians),
        "spread_pct_median": statistics.median(spreads), "spread_pct_max": max(spreads),
        "medians_range_pct": range_pct(medians),
        "trials_median": statistics.median(s.trials for s in samples),
        "calls_per_trial": max(getattr(s, "calls_per_trial", 1) for s in samples),
        "measure_s_median": statistics.median(s.elapsed_s for s in samples),
        "per_repeat": [{"median_us": s.median_us, "spread_pct": s.spread_pct, "trials": s.trials,
                        "min_us": min(s.event_us), "max_us": max(s.event_us)} for s in samples],
    }


def summarize_spread(rows: list[dict]) -> dict:
    """Per variant: the worst spread over kernels above 50 us, and how far its times sit from the
    current method's (geomean ratio of medians)."""
    by_variant: dict[str, list[dict]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r)
    current = {(r["problem"], r["mode"]): r["median_us"] for r in by_variant.get("current", [])}
    out = {}
    for name, rs in by_variant.items():
        big = [r for r in rs if r["median_us"] > SPREAD_MIN_KERNEL_US]
        ratios = [r["median_us"] / current[(r["problem"], r["mode"])] for r in rs
                  if current.get((r["problem"], r["mode"]))]
        worst = max(big, key=lambda r: r["spread_pct_max"], default=None)
        out[name] = {
            "kernels_above_50us": len(big),
            "worst_spread_pct": worst["spread_pct_max"] if worst else None,
            "worst_spread_where": f"{worst['problem']} {worst['mode']}" if worst else None,
            "worst_median_spread_pct": max((r["spread_pct_median"] for r in big), default=None),
            "worst_medians_range_pct": max((r["medians_range_pct"] for r in big), default=None),
            "all_under_3pct": bool(big) and all(r["spread_pct_max"] < SPREAD_LIMIT_PCT for r in big),
            "median_vs_current_geomean": math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None,
            "measure_s_total": sum(r["measure_s_median"] * r["repeats"] for r in rs),
        }
    return out


# A method whose medians sit further than this from the current method's measures something else (a
# faster median is not a better method): it is not a candidate for the default.
MEDIAN_AGREEMENT = 0.05


def best_variant(per_variant: dict) -> str | None:
    """The timing method whose worst repeat spread is lowest (ties: the lower run-to-run range), among
    those that agree with the current method's medians; a busy host is a condition to survive, not a
    method to pick."""
    ranked = [(v["worst_spread_pct"], v["worst_medians_range_pct"] or 0.0, k) for k, v in per_variant.items()
              if v["worst_spread_pct"] is not None and not VARIANTS.get(k, {}).get("host_load")
              and abs((v["median_vs_current_geomean"] or 1.0) - 1.0) <= MEDIAN_AGREEMENT]
    return min(ranked)[2] if ranked else None


# ---------------------------------------------------------------------------------------------
# report


def _mb(b) -> str:
    return "-" if b is None else f"{b / 1024**2:+.1f} MB" if b else "0"


def _mb_level(b) -> str:
    return "-" if b is None else f"{b / 1024**2:.1f} MB"


def before_after(before: dict, rows: list[dict]) -> list[str]:
    """The overhead rows of an earlier results file (``--before``) beside this run's, with the stages."""
    lines = ["", f"Before and after ({before.get('label') or 'before'}: {before.get('path', '')}; median seconds per "
             "attempt):", "", "| candidate | problem | backend | overhead before | overhead after | stage | before | after |",
             "| --- | --- | --- | ---: | ---: | --- | ---: | ---: |"]
    for r in rows:
        if r["section"] != "overhead":
            continue
        b = next((x for x in before.get("rows", []) if x.get("section") == "overhead" and
                  (x["candidate"], x["problem"], x["backend"]) == (r["candidate"], r["problem"], r["backend"])), None)
        if b is None:
            continue
        lines.append(f"| {r['candidate']} | {r['problem']} | {r['backend']} | {fmt_num(b['overhead_median_s'], '.3f', ' s')} | "
                     f"{fmt_num(r['overhead_median_s'], '.3f', ' s')} | | | |")
        sb, sa = b.get("stages") or {}, r.get("stages") or {}
        for k in [k for k in STAGE_ORDER if k in sb or k in sa]:
            lines.append(f"| | | | | | {k} | {fmt_num(sb.get(k, 0.0), '.3f')} | {fmt_num(sa.get(k, 0.0), '.3f')} |")
    return lines


def to_markdown(doc: dict) -> str:
    s = doc["summary"]
    lines = [f"# Harness: overhead, memory and timing spread on {doc['gpu_name'] or 'the CPU'} ({doc['date']})", "",
             f"Versions: {versions_text({'versions': doc['versions'], **doc.get('environment', {})})}. "
             f"Device: {doc['device']}. {doc.get('note', '')}".rstrip(), ""]
    lines += ["## Overhead per attempt (validate + profile wall time minus the worker's time inside the measurement)", "",
              "| candidate | problem | backend | attempts | median | max | first | validate | profile | timed | timing |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in doc["rows"]:
        if r["section"] == "overhead":
            lines.append(f"| {r['candidate']} | {r['problem']} | {r['backend']} | {r['attempts']} | "
                         f"{fmt_num(r['overhead_median_s'], '.3f', ' s')} | {fmt_num(r['overhead_max_s'], '.3f', ' s')} | "
                         f"{fmt_num(r['first_attempt_s'], '.2f', ' s')} | {fmt_num(r['validate_median_s'], '.3f', ' s')} | "
                         f"{fmt_num(r['profile_median_s'], '.3f', ' s')} | {fmt_num(r['timed_median_s'], '.3f', ' s')} | "
                         f"{r['timing_source'] or '-'}{'' if r['correct'] else ' (WRONG: ' + r['reason'][:60] + ')'} |")
    names = [k for k in STAGE_ORDER if any(k in (r.get("stages") or {}) for r in doc["rows"] if r["section"] == "overhead")]
    if names:
        lines += ["", "Where the judge's time goes (median seconds per attempt, validate + profile; `candidate` is the "
                  "candidate process's own handlers: its import, builds and forwards; `timed` the measurement):", "",
                  "| candidate | problem | " + " | ".join(names) + " |", "| --- | --- | " + " | ".join("---:" for _ in names) + " |"]
        for r in doc["rows"]:
            if r["section"] == "overhead":
                st = r.get("stages") or {}
                lines.append(f"| {r['candidate']} | {r['problem']} | " + " | ".join(fmt_num(st.get(k), '.3f') for k in names) + " |")
    for r in doc["rows"]:
        if r["section"] == "overhead_skipped":
            lines.append(f"\nNot measured: {r['candidate']}: {r['reason']}")
    if doc.get("before"):
        lines += before_after(doc["before"], doc["rows"])
    lines += ["", "## Memory", ""]
    for r in doc["rows"]:
        if r["section"] == "memory":
            lines.append(f"{r['what']}: growth over the start level ({_mb_level(r['start_allocated_bytes'])} allocated, "
                         f"{_mb_level(r['start_reserved_bytes'])} reserved), the most after any attempt: allocated "
                         f"{_mb(r['allocated_growth_max_bytes'])}, reserved "
                         f"{_mb(r['reserved_growth_max_bytes'])}, worker RSS {_mb(r['worker_rss_growth_max_bytes'])} "
                         f"(last attempt: {_mb(r['worker_rss_growth_last_bytes'])})."
                         + ("" if r["cuda_allocator"] else " No CUDA allocator here (CPU): device memory is 0."))
        if r["section"] == "crash":
            lines.append(f"Illegal address: crashed={r['crashed']}, worker restarts {r['restarts']}, the crashed attempt "
                         f"{r['crash_attempt_s']:.2f} s, the next {r['next_attempt_s']:.2f} s (correct={r['next_attempt_correct']}); "
                         f"after the restart allocated {_mb(r['after_restart_allocated_vs_start_bytes'])} and reserved "
                         f"{_mb(r['after_restart_reserved_vs_start_bytes'])} against the first worker's start level.")
    lines += ["", f"## Timing spread ({s.get('spread_repeats_done', 0)} repeats; IQR / median of the trials, worst and "
              "median over the repeats; range of the repeated medians)", "",
              "| problem | mode | variant | median | IQR spread worst | IQR spread median | medians range | trials |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in sorted((r for r in doc["rows"] if r["section"] == "spread"), key=lambda r: (r["problem"], r["mode"], r["variant"])):
        lines.append(f"| {r['problem']} | {r['mode']} | {r['variant']} | {fmt_us(r['median_us'])} | "
                     f"{r['spread_pct_max']:.2f}% | {r['spread_pct_median']:.2f}% | {r['medians_range_pct']:.2f}% | "
                     f"{r['trials_median']:.0f} |")
    if doc.get("variants"):
        default = asdict(TimingMethod())
        lines += ["", "Variants (changes to the current method, `evals.judge.timing.TimingMethod`): " + "; ".join(
            f"{name}: " + (", ".join(f"{k}={v}" for k, v in m.items() if v != default.get(k)) or "as is")
            for name, m in doc["variants"].items()) + "."]
    lines += ["", "Per variant (kernels above 50 us):", "",
              "| variant | worst IQR spread | where | worst median spread | worst medians range | all < 3% | times vs current | seconds |",
              "| --- | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    for name, v in s.get("spread_by_variant", {}).items():
        lines.append(f"| {name} | {fmt_num(v['worst_spread_pct'], '.2f', '%')} | {v['worst_spread_where'] or '-'} | "
                     f"{fmt_num(v['worst_median_spread_pct'], '.2f', '%')} | {fmt_num(v['worst_medians_range_pct'], '.2f', '%')} | "
                     f"{v['all_under_3pct']} | {fmt_num(v['median_vs_current_geomean'], '.3f', 'x')} | {v['measure_s_total']:.1f} |")
    lines += ["", "## Summary", "", "```", json.dumps({k: v for k, v in s.items() if k != "spread_by_variant"}, indent=2), "```", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def resummarize(path: Path) -> int:
    """Recompute a results file's summary and table from its rows (after the summary's definition changed)."""
    doc = json.loads(path.read_text())
    doc["summary"] = summarize(doc["rows"], doc.get("spread_info", {}), doc.get("device") == "cuda")
    write_result(path.with_suffix(""), doc, to_markdown(doc))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--gpu", default=None, help="name in the file names (default: from the device, 'cpu' without one)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of: {', '.join(SECTIONS)}")
    ap.add_argument("--attempts", type=int, default=20, help="attempts per candidate for the overhead")
    ap.add_argument("--memory-attempts", type=int, default=20)
    ap.add_argument("--pause-s", type=float, default=2.0,
                    help="pause between attempts (the model's turn and the build in a real run; fresh candidate "
                    "processes start during it)")
    ap.add_argument("--repeats", type=int, default=5, help="repeated timings per (problem, mode, variant)")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated subset of: {', '.join(VARIANTS)}")
    ap.add_argument("--budget-s", type=float, default=220.0, help="no spread repeat starts that would end past this (seconds)")
    ap.add_argument("--no-cutlass", action="store_true", help="skip the nvcc-built program")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--quick", action="store_true", help="few attempts and repeats (a smoke run)")
    ap.add_argument("--large-cpu", action="store_true", help="with --quick on the CPU: the large cheap problem too")
    ap.add_argument("--resummarize", type=Path, help="recompute the summary and table of this results JSON from its rows")
    ap.add_argument("--cpu-timing", action=argparse.BooleanOptionalAction, default=None,
                    help="without a GPU, profile on the CPU too (HarnessSettings.cpu_timing: sealed calls and the "
                    "timing checks run, so the profile's stages are measured; --no-cpu-timing: estimates only; "
                    "default: on, off with --quick)")
    ap.add_argument("--pin-arena-mb", type=int, default=0, help="HarnessSettings.pin_arena_mb: page-lock this much of "
                    "each channel arena (GPU)")
    ap.add_argument("--stem", default="harness", help="results file name: <date>-<gpu>-<stem>.{json,md}")
    ap.add_argument("--before", type=Path, help="an earlier results JSON whose overhead rows and stages are set beside this run's")
    ap.add_argument("--label", default="", help="what this run measures (kept in the JSON, e.g. the commit)")
    args = ap.parse_args(argv)
    if args.resummarize:
        return resummarize(args.resummarize)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: clean up (workers, load) on the way out
    variant_names = [v for v in args.variants.split(",") if v]
    sections = [x for x in args.sections.split(",") if x]
    for what, names, known in (("variant", variant_names, VARIANTS), ("section", sections, SECTIONS)):
        unknown = [n for n in names if n not in known]
        if unknown:
            print(f"error: unknown {what}(s) {', '.join(unknown)}; choose from {', '.join(known)}", file=sys.stderr)
            return 2
    if args.cpu_timing is None:
        args.cpu_timing = not args.quick
    if args.quick:
        args.attempts, args.memory_attempts, args.repeats = min(args.attempts, 2), min(args.memory_attempts, 2), min(args.repeats, 2)
    clock = Clock(args.budget_s)
    smoke = {p.name: p for p in load_suite("smoke")}
    builtin = {p.name: p for p in load_suite("builtin")}
    harness = Harness(HarnessSettings(device=args.device, watchdog_s=120, n_input_sets=5, cpu_timing=args.cpu_timing,
                                      pin_arena_mb=args.pin_arena_mb))
    info = harness.worker_info()
    cuda = bool(info.get("cuda")) and args.device != "cpu"
    note = "" if cuda else ("No GPU: validation ran on the CPU, programs on the interpreter backend, profiles "
                            + ("were timed on the CPU (cpu_timing: the timing checks and sealed calls run)" if args.cpu_timing
                               else "are the SOL model's estimates")
                            + ", and the spread section timed tiny problems by wall clock.")
    _log(f"harness benchmark on {info.get('gpu_name') or 'the CPU (no GPU)'}: {', '.join(sections)}; budget {args.budget_s:.0f} s")
    rows: list[dict] = []
    tiny = smoke[OVERHEAD_PROBLEM]
    program, why_no_program = program_for(tiny) if "overhead" in sections else (None, "")
    build = None
    if cuda and program is not None and not args.no_cutlass:
        build = BackgroundBuild(program)  # nvcc works while the memory section runs
    try:
        if "memory" in sections:
            rows += memory_rows(harness, tiny, args.memory_attempts, cuda)
        if "overhead" in sections:
            rows += overhead_rows(harness, tiny, builtin, program, why_no_program, build, cuda, args, clock)
    finally:
        harness.close()

    variants: dict[str, TimingMethod] = {}
    spread, spread_info = [], {}
    if "spread" in sections and cuda:
        import torch

        l2_bytes = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or L2_FALLBACK_BYTES)
        variants = resolve_variants(variant_names, l2_bytes)
        spread, spread_info = spread_rows_gpu([builtin[n] for n in SPREAD_PROBLEMS_GPU], variants, args.repeats, clock,
                                              reserve_s=5.0, loaded=loaded_variants(variant_names))
    elif "spread" in sections:
        spread, spread_info = spread_rows_cpu([smoke[n] for n in SPREAD_PROBLEMS_CPU], args.repeats, trials=10 if args.quick else 30)
    rows += spread

    doc = {
        "date": dt.date.today().isoformat(), "gpu": args.gpu or gpu_slug(info.get("gpu_name") if cuda else None),
        "gpu_name": info.get("gpu_name") if cuda else None, "device": "cuda" if cuda else "cpu", "note": note,
        "sections": sections,
        "settings": {"attempts": args.attempts, "memory_attempts": args.memory_attempts, "repeats": args.repeats,
                     "budget_s": args.budget_s, "quick": args.quick, "pause_s": args.pause_s,
                     "cpu_timing": args.cpu_timing, "pin_arena_mb": args.pin_arena_mb},
        "variants": {k: asdict(v) | ({"host_load": True} if k in loaded_variants([k]) else {}) for k, v in variants.items()},
        "spread_info": spread_info,
        "rows": rows,
        "summary": summarize(rows, spread_info, cuda),
    }
    env = collect_environment("cutlass" if cuda else "interpreter")
    doc |= {"versions": env["versions"], "environment": env, "wall_s": clock.elapsed_s, "label": args.label}
    if args.before and args.before.is_file():
        before = json.loads(args.before.read_text())
        doc["before"] = {"path": str(args.before), "label": before.get("label", ""),
                         "rows": [r for r in before.get("rows", []) if r.get("section") == "overhead"]}
    write_result(Path(args.out) / f"{doc['date']}-{doc['gpu']}-{args.stem}", doc, to_markdown(doc))
    _log(f"in {clock.elapsed_s:.0f} s")
    return 0


def overhead_rows(harness: Harness, tiny, builtin: dict, program, why_no_program: str, build, cuda: bool, args,
                  clock: Clock) -> list[dict]:
    honest = Candidate.from_file(ADVERSARIAL / "honest.py")
    # the model's turn between attempts, in which the next candidate process starts (on the CPU as well: without
    # it the overhead would be mostly the wait for a process importing torch)
    pause = args.pause_s if cuda or not args.quick else 0.0
    rows = [overhead_row(harness, tiny, honest, "honest.py (PyTorch)", "torch", args.attempts, pause_s=pause)]
    if not args.quick and cuda:
        rows.append(overhead_row(harness, builtin[OVERHEAD_PROBLEM_LARGE], honest, "honest.py (PyTorch)", "torch",
                                 max(args.attempts // 2, 1), pause_s=pause))  # few, to leave time for the spread
    elif not args.quick or args.large_cpu:
        from evals.problems import load_problem

        large = load_problem(OVERHEAD_PROBLEM_LARGE_CPU)
        cand = Candidate.from_file(OVERHEAD_PROBLEM_LARGE_CPU.with_name("large_cheap_relu_candidate.py"))
        rows.append(overhead_row(harness, large, cand, "large_cheap_relu_candidate.py", "torch",
                                 max(args.attempts // 2, 1), pause_s=pause))
    if program is None:
        rows.append({"section": "overhead_skipped", "candidate": "offline-tier program", "reason": why_no_program})
        return rows
    rows.append(overhead_row(harness, tiny, Candidate.from_program(program, backend="interpreter"),
                             "offline-tier program", "interpreter", args.attempts, pause_s=pause))
    if build is not None:
        result, why = build.wait(min(90.0, clock.left_s - 150.0))
        if result is not None:
            rows.append(overhead_row(harness, tiny, Candidate.from_program(program, backend="cutlass", artifacts=result.artifacts),
                                     "offline-tier program", "cutlass", args.attempts,
                                     extra={"build_s": result.seconds, "build_cached": result.cached}, pause_s=pause))
        else:
            rows.append({"section": "overhead_skipped", "candidate": "offline-tier program (cutlass)", "reason": why})
    elif not cuda:
        rows.append({"section": "overhead_skipped", "candidate": "offline-tier program (cutlass)",
                     "reason": "no GPU: the cutlass backend needs one"})
    elif args.no_cutlass:
        rows.append({"section": "overhead_skipped", "candidate": "offline-tier program (cutlass)", "reason": "--no-cutlass"})
    return rows


def summarize(rows: list[dict], spread_info: dict, cuda: bool) -> dict:
    spread = [r for r in rows if r["section"] == "spread"]
    per_variant = summarize_spread(spread)
    overheads = [r for r in rows if r["section"] == "overhead"]
    mem = next((r for r in rows if r["section"] == "memory"), {})
    crash = next((r for r in rows if r["section"] == "crash"), {})
    tf32_gemm = {r["variant"]: r["spread_pct_max"] for r in spread
                 if r["problem"] == SPREAD_PROBLEMS_GPU[0] and r["mode"] == "eager_tf32"}
    return {
        "overhead_median_s_worst_candidate": max((r["overhead_median_s"] for r in overheads), default=None),
        "overhead_max_s": max((r["overhead_max_s"] for r in overheads), default=None),
        "overhead_under_1s": bool(overheads) and all(r["overhead_median_s"] < 1.0 for r in overheads),
        "overhead_under_1_5s": bool(overheads) and all(r["overhead_median_s"] <= 1.5 for r in overheads),
        "default_method": "cuda_graph",
        "default_method_all_under_3pct": bool(per_variant.get("cuda_graph", {}).get("all_under_3pct")),
        "all_attempts_correct": all(r["correct"] for r in overheads),
        "memory_allocated_growth_bytes": mem.get("allocated_growth_max_bytes"),
        "memory_reserved_growth_bytes": mem.get("reserved_growth_max_bytes"),
        "worker_rss_growth_bytes": mem.get("worker_rss_growth_max_bytes"),
        "memory_after_restart_vs_start_bytes": crash.get("after_restart_allocated_vs_start_bytes"),
        "crash_cost_one_attempt": bool(crash.get("crashed") and crash.get("restarts") == 0 and crash.get("next_attempt_correct")),
        "spread_repeats_done": spread_info.get("repeats_done", 0),
        "spread_by_variant": per_variant,
        "eager_tf32_gemm_square_worst_spread_pct_by_variant": tf32_gemm,
        "best_variant": best_variant(per_variant) if cuda else None,
        "variants_all_under_3pct": [k for k, v in per_variant.items() if v["all_under_3pct"]],
    }


if __name__ == "__main__":
    sys.exit(main())
