"""Who did a forward's work: the candidate's own kernels or a library's (the `pytorch_only` flag).

GPU kernels are named by the profiler. A library kernel that computes (cuBLAS/cuDNN GEMMs and convolutions,
ATen reductions, torch.compile's generated kernels) is work the candidate did not bring. A library kernel that
only moves data (a copy, a cast, a layout change, a pad, a fill) is the cost of a program's own torch steps
around its kernels: it is neither side's work, so an honest program whose conv spends half its time in a cast
to channels-last is not called PyTorch's. Elementwise ATen kernels count as movement: on their own they cannot
make a GEMM- or conv-class problem fast, and a candidate with no kernel of its own is flagged whatever it ran.
"""

from __future__ import annotations

import re
from typing import Iterable, NamedTuple

# Kernel names of libraries (ATen, cuBLAS, cuDNN, torch.compile's generated kernels).
LIBRARY_KERNEL = re.compile(
    r"at::|at_cuda_detail|\bcublas|cudnn|cutlass_80|cutlass3x|sm\d+_xmma|\bxmma|nvjet|gemv|gemmk1|splitKreduce|"
    r"ampere_|volta_|turing_|implicit_convolve|precomputed_convolve|winograd|\bfft|elementwise_kernel|"
    r"reduce_kernel|triton_(poi|red|per|tem)_|Memcpy|Memset|memcpy|memset",
    re.IGNORECASE,
)
# Of those, the ones that only move data (copies, casts, layout changes, pads, fills, plain elementwise maps).
MOVEMENT_KERNEL = re.compile(
    r"Memcpy|Memset|memcpy|memset|copy|cast|fill|transpose|permute|constant_pad|reflection_pad|replication_pad|"
    r"CatArray|cat_|index_|elementwise_kernel|vectorized_elementwise|unrolled_elementwise",
    re.IGNORECASE,
)
# A library kernel whose name also carries a movement word but computes (cuDNN's implicit GEMM, a cuBLAS GEMM).
COMPUTE_KERNEL = re.compile(r"gemm|conv|xmma|cublas|cudnn|nvjet", re.IGNORECASE)


class WorkSplit(NamedTuple):
    own_us: float  # kernels the candidate brought (built programs, code it compiled)
    library_work_us: float  # library kernels that compute
    movement_us: float  # library kernels that only move data

    @property
    def own_share(self) -> float | None:
        """The candidate's share of the computing GPU time (movement left out); None without computing kernels."""
        work = self.own_us + self.library_work_us
        return self.own_us / work if work > 0 else None


def split_kernel_time(kernels: Iterable[tuple[str, float]]) -> WorkSplit:
    own = lib = move = 0.0
    for name, t_us in kernels:
        if not LIBRARY_KERNEL.search(name):
            own += t_us
        elif MOVEMENT_KERNEL.search(name) and not COMPUTE_KERNEL.search(name):
            move += t_us
        else:
            lib += t_us
    return WorkSplit(own, lib, move)


def pytorch_only_reason(split: WorkSplit, flop_share: float | None) -> str | None:
    """Why the forward counts as PyTorch's work (a flag kept out of headline speedups), or None."""
    if split.own_us <= 0.0:
        return "no GPU time ran in kernels the candidate brought: only library kernels (ATen, cuBLAS, cuDNN)"
    share = split.own_share
    if share is not None and share < 0.5:
        return (f"{100 * (1 - share):.0f}% of the computing GPU time ran in library kernels (ATen, cuBLAS, cuDNN); "
                f"less than half is in kernels the candidate brought")
    if flop_share is not None and flop_share < 0.5:
        return (f"{100 * (1 - flop_share):.0f}% of the FLOPs ran as PyTorch operators; less than half is in kernels "
                f"the candidate brought")
    return None
