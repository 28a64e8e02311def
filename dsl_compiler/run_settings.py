"""How a loaded program runs: the settings of the runtime (torch-free, so the build and the estimate read them too)."""

from __future__ import annotations

import dataclasses
import os

# Run settings of a loaded program and the values each takes. Off by default: their speed is not yet measured on the
# H200 (benchmarks/h200_suite.sh runtime measures both), and a graph adds an input copy and an output clone per call.
RUNTIME_SETTINGS = {
    "MUCUTLASS_CUDA_GRAPH": ("off", "on", "auto"),  # auto: when the estimate says the program is launch-bound
    "MUCUTLASS_FUSED_CASTS": ("off", "on"),  # the input casts / layout copies of a program as one launch
    # the depthwise direct conv's output tiles spread over about 4 CTAs per SM (split_k_slices) instead of one CTA per
    # 64 channels walking all of them (cutlass.grouped_conv; benchmarks/bench_depthwise.py measures it); read at emit time
    "MUCUTLASS_DEPTHWISE_SPLIT": ("off", "on"),
}


def runtime_setting(name: str) -> str:
    """A run setting from the environment (``RUNTIME_SETTINGS``); an unknown value is one clear error."""
    allowed = RUNTIME_SETTINGS[name]
    value = os.environ.get(name, allowed[0]).strip().lower() or allowed[0]
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: use one of {', '.join(allowed)}")
    return value


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """How a loaded program runs (decided by the caller; ``sol_models.estimate.runtime_options`` resolves
    the settings against the estimate)."""

    cuda_graph: bool = False  # replay the whole program from a CUDA graph per input signature (ProgramGraphs)
    fused_casts: bool = False  # the casts / channels-last copies of the inputs as one launch (fused_cast)
    reason: str = ""  # why, in words (the estimate's numbers), for logs and tables
