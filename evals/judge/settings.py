"""The judge's settings: one validated model, from the caller's ``Harness`` to the judge process and (its
timing part) to the candidate process. Every default lives here once; the judge process validates what
it is sent with this same model, so no process keeps a default of its own."""

from __future__ import annotations

import os
import sys
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from evals.judge.timing import SETTING_NAMES, TimingMethod

# The settings of how a measurement is taken (evals.judge.timing.TimingMethod, as the candidate reads them).
TIMING_SETTINGS = tuple(SETTING_NAMES.get(f, f) for f in TimingMethod.__dataclass_fields__)


def _env_float(name: str, default: float | None) -> float | None:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default



def _flag(value: str | None) -> bool | None:
    """An on/off environment value: None when unset or empty."""
    if value is None or not value.strip():
        return None
    return value.strip().lower() not in ("0", "off", "false", "no")

class HarnessSettings(BaseModel):
    """How candidates are judged and timed. Times are in seconds unless the name says otherwise."""

    n_input_sets: int = Field(5, ge=1, description="correctness input sets, each from a fresh seed")
    seed: int | None = Field(None, description="base seed; None draws fresh seeds for every call")
    tolerance: float | None = Field(None, gt=0, description="overrides every problem's tolerance")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    gpu_index: int | None = Field(None, description="the GPU this harness's worker uses (CUDA_VISIBLE_DEVICES)")
    gpu: str = Field("h200", description="GPU name for SOL estimates when no GPU is present")
    watchdog_s: float = Field(default_factory=lambda: _env_float("MUCUTLASS_WATCHDOG_S", 120.0), gt=0,
                              description="a validate or profile call running longer is killed (env MUCUTLASS_WATCHDOG_S)")
    reference_watchdog_s: float = Field(900.0, gt=0, description="limit for reference timings (torch.compile)")
    startup_timeout_s: float = Field(300.0, gt=0, description="limit for a worker to start (imports torch)")
    warmup: int = Field(5, ge=1, description="calls before timing; they also estimate the trial count")
    warmup_s: float = Field(0.1, ge=0, description="then back-to-back calls for this long before timing, so clocks and power settle")
    trial_us: float = Field(2000.0, ge=0, description="a trial is back-to-back calls spanning about this much GPU time; "
                            "its time is their mean (0: one call per trial)")
    max_calls_per_trial: int = Field(16, ge=1)
    closing_linger_s: float = Field(0.25, ge=0, description="the closing ping of a validation is answered this long "
                                    "after it is sent: a candidate process that ends itself meanwhile is a crash")
    min_trials: int = Field(20, ge=3)
    max_trials: int = Field(200, ge=3)
    target_timed_s: float = Field(0.5, gt=0, description="time spent in timed calls per measurement")
    timing_input_sets: int = Field(3, ge=1, description="input sets rotated between timed calls (fewer where the "
                                   "memory plan cannot hold them: evals.judge.memory)")
    l2_flush_mb: int = Field(256, ge=0, description="bytes written before every timed call; > L2 (0: no flush)")
    l2_flush_mode: Literal["fill", "zero"] = Field("fill", description="how the flush buffer is written: fill_(1.0) or zero_()")
    host_sync: Literal["before_and_after", "after", "end"] = Field(
        "before_and_after", description="'before_and_after': the GPU idles between the flush and a timed call, whose "
        "event time then includes its host launch latency; 'after': the flush keeps the GPU busy while the call is "
        "launched; 'end': all trials are enqueued and synchronized once (the host runs ahead of the GPU)")
    probe_budget_s: float = Field(2.0, ge=0, description="seconds of float64 signature runs the precision probe may "
                                  "spend per check; beyond it a secret sample of at least two of the judged outputs "
                                  "is probed (0: every output, whatever it costs)")
    sample_elements: int = Field(1 << 20, ge=1024, description="elements of each output the judge keeps after a call "
                                 "(at positions drawn secretly for each operation) for the precision probes and the "
                                 "checks between calls; smaller outputs are kept whole")
    compile_reference: bool = True
    cpu_timing: bool = Field(False, description="without a GPU, measure candidates on the CPU (wall clock in the "
                             "candidate's process, bounded by sealed calls) instead of estimating programs: for "
                             "testing the judge's timing rules where no GPU is")
    timing_lock_wait_s: float = Field(120.0, ge=0, description="judges sharing a GPU on this host measure one at a "
                                      "time, with no other judge's validation beside them; the longest wait for "
                                      "that (then the work goes on without it); 0 turns it off")
    ncu: bool = Field(False, description="collect Nsight Compute counters when `ncu` exists (slow)")
    python: str = Field(default_factory=lambda: sys.executable)
    spare_processes: int | None = Field(None, ge=1, description="candidate processes kept started ahead of need "
                                        "(each imports torch and starts CUDA; None: 3 with a GPU, 2 without)")
    fork_server: bool | None = Field(
        default_factory=lambda: _flag(os.environ.get("MUCUTLASS_FORK_SERVER")),
        description="fork candidate processes from a process that has imported torch (evals.judge.zygote) instead of "
        "starting a new Python for each; None (env MUCUTLASS_FORK_SERVER unset): on where the judge has no GPU, off "
        "where it has one (not yet measured on a GPU host: MUCUTLASS_FORK_SERVER=1 turns it on, 0 off)")
    pin_arena_mb: int | None = Field(None, ge=0, description="page-lock this much of each candidate channel's shared "
                                     "arena in both processes (GPU only: tensors cross at DMA speed; None: all of "
                                     "it; 0: pageable)")
    memory_limit_gb: float | None = Field(
        default_factory=lambda: _env_float("MUCUTLASS_MEMORY_LIMIT_GB", None), ge=0,
        description="resident host memory of a candidate's whole process tree before it is killed (None: from the "
        "problem's footprint, at least 8 GB; 0: no limit; env MUCUTLASS_MEMORY_LIMIT_GB)")
    judges_per_gpu: int = Field(default_factory=lambda: int(_env_float("MUCUTLASS_JUDGES_PER_GPU", 1) or 1), ge=1,
                                description="judges sharing one GPU (an evaluation's workers per device): each "
                                "judge and its candidates keep to their share of its memory (env "
                                "MUCUTLASS_JUDGES_PER_GPU)")
    gpu_memory_gb: float | None = Field(None, gt=0, description="GPU memory of this judge and its candidate processes "
                                        "together (None: the device's total over judges_per_gpu)")

    def worker_view(self) -> dict:
        """What the judge process is sent: every field (it validates them with this model)."""
        return self.model_dump()

    def timing_view(self) -> dict:
        """What the candidate process's timing loop reads (evals.judge.timing.TimingMethod)."""
        return self.model_dump(include=set(TIMING_SETTINGS))

    @model_validator(mode="after")
    def _trials_in_order(self) -> "HarnessSettings":
        if self.max_trials < self.min_trials:
            raise ValueError(f"max_trials ({self.max_trials}) must be at least min_trials ({self.min_trials})")
        return self
