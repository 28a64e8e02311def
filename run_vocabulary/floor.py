"""The floor under a run's result: PyTorch's fastest allowed variant of the reference.

The harness times the reference three ways in the worker that times the candidates, the same way
(``Harness.reference_timings``): eager with PyTorch's defaults (``eager_fp32``), eager with TF32
allowed (``eager_tf32``) and ``torch.compile`` (``compile``). Those are measured candidates that
are always there: a run keeps the fastest of its correct programs and the allowed variants, so its
result is never slower than PyTorch. When a PyTorch variant is kept, the result says so
(``fallback``): it is PyTorch's time, never a speedup of ours.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# reference variant -> the math precision it needs from the problem (None: the reference's own)
VARIANT_PRECISION: dict[str, str | None] = {"eager_fp32": None, "eager_tf32": "tf32", "compile": None}
VARIANT_LABEL = {"eager_fp32": "PyTorch eager", "eager_tf32": "PyTorch eager with TF32", "compile": "torch.compile"}


@dataclass(frozen=True)
class Kept:
    """What a run keeps: ``source`` "ours" or the PyTorch variant, its time, and whether it is a fallback."""

    source: str
    t_us: float | None
    ours_us: float | None
    floor_variant: str | None
    floor_us: float | None

    @property
    def fallback(self) -> bool:
        return self.source != "ours" and self.t_us is not None


def allowed_variants(allowed_precisions: Sequence[str] | None) -> list[str]:
    """The reference variants a problem allows: TF32 only where its precisions include it."""
    allowed = set(allowed_precisions or ())
    return [v for v, need in VARIANT_PRECISION.items() if need is None or need in allowed]


def pytorch_floor(reference_us: Mapping[str, float | None], allowed_precisions: Sequence[str] | None) -> tuple[str, float] | None:
    """(variant, t_us) of PyTorch's fastest allowed variant that was measured; None when none was."""
    times = [(v, reference_us.get(v)) for v in allowed_variants(allowed_precisions)]
    times = [(v, float(t)) for v, t in times if t is not None and t > 0 and math.isfinite(t)]
    return min(times, key=lambda vt: vt[1]) if times else None


def kept_result(best_t_us: float | None, reference_us: Mapping[str, float | None],
                allowed_precisions: Sequence[str] | None) -> Kept:
    """The faster of our best correct program and the floor; ours on a tie (PyTorch must be strictly faster)."""
    floor = pytorch_floor(reference_us, allowed_precisions)
    variant, floor_us = floor if floor else (None, None)
    if floor_us is not None and (best_t_us is None or floor_us < best_t_us):
        return Kept(source=variant, t_us=floor_us, ours_us=best_t_us, floor_variant=variant, floor_us=floor_us)
    return Kept(source="ours", t_us=best_t_us, ours_us=best_t_us, floor_variant=variant, floor_us=floor_us)
