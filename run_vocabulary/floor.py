"""The floor under a run's result: PyTorch's fastest eligible variant of the reference.

The harness times the reference three ways in the worker that times the candidates, the same way
(``Harness.reference_timings``): eager with PyTorch's defaults (``eager_fp32``: matmul fp32, cuDNN
TF32), eager with TF32 allowed (``eager_tf32``) and ``torch.compile`` (``compile``, compiled and run
with TF32 allowed). Those are measured candidates that are always there: a run keeps the fastest of
its correct programs and the eligible variants, so its result is never slower than PyTorch. When a
PyTorch variant is kept, the result says so (``fallback``): it is PyTorch's time, never a speedup of
ours.

A variant is eligible when it was measured, the problem allows the precision it computes in, and
its outputs pass the problem's tolerance. The last is data, not a guess: each variant's outputs are
compared with the reference on the GPU (``evals.baseline_checks``, the judge's comparison) and the
result is recorded beside its time (``VariantCheck``). A variant that fails is shown as failing
("fails 1e-4") and counts for nothing: not for the floor, not as a speedup's baseline, not as the
time a stop rule must beat. A reduced-precision variant that was not checked counts only at
tolerances TF32 is known to meet (``UNCHECKED_MIN_TOLERANCE``); below it, only a passing check
makes it eligible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

VARIANTS: tuple[str, ...] = ("eager_fp32", "eager_tf32", "compile")
# reference variant -> the math precision it needs from the problem (None: the reference's own). torch.compile is
# compiled and timed with TF32 allowed (Harness.reference_timings), so it computes in TF32 as eager_tf32 does.
VARIANT_PRECISION: dict[str, str | None] = {"eager_fp32": None, "eager_tf32": "tf32", "compile": "tf32"}
VARIANT_LABEL = {"eager_fp32": "PyTorch eager", "eager_tf32": "PyTorch eager with TF32", "compile": "torch.compile"}
VARIANT_SHORT = {"eager_fp32": "eager fp32", "eager_tf32": "TF32", "compile": "compile"}
# at or above this tolerance a variant that was not checked keeps the precision rule alone (TF32 meets 1e-3 on the
# problems it is allowed on); below it only a passing check makes a reduced-precision variant eligible
UNCHECKED_MIN_TOLERANCE = 1e-3


@dataclass(frozen=True)
class VariantCheck:
    """A variant's outputs against the reference at ``tolerance`` (atol = rtol, the judge's comparison) over
    ``sets`` input sets: ``passed`` None when it was not checked (``text`` says why), else whether every set
    passed; the largest errors over the sets and, for a failure, the failing comparison's text."""

    passed: bool | None
    tolerance: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    sets: int = 0
    text: str = ""
    source: str = ""  # where the outputs were made: "gpu", "cpu"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "VariantCheck | None":
        if not data:
            return None
        known = {k: data.get(k) for k in cls.__dataclass_fields__ if k in data}
        known.setdefault("passed", None)
        known["sets"] = int(known.get("sets") or 0)
        known["text"] = str(known.get("text") or "")
        known["source"] = str(known.get("source") or "")
        return cls(**known)


@dataclass(frozen=True)
class VariantStatus:
    """Whether a measured variant counts (``eligible``) and the word for a table (``label``: "passes 1e-4",
    "fails 1e-4", "not checked", "TF32 not allowed", "not measured")."""

    variant: str
    t_us: float | None
    eligible: bool
    label: str
    check: VariantCheck | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"eligible": self.eligible, "label": self.label}
        if self.check is not None:
            out.update(self.check.to_dict())
        return out


def _measured(t: float | None) -> bool:
    return t is not None and t > 0 and math.isfinite(t)


def tolerance_text(tolerance: float | None) -> str:
    """1e-4, 1e-2, 5e-3, 0.5: a tolerance as KernelBench's rule names it."""
    if tolerance is None:
        return "its tolerance"
    mantissa, exponent = f"{float(tolerance):.6e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}" if int(exponent) <= -2 else f"{float(tolerance):g}"


def variant_status(variant: str, t_us: float | None, check: VariantCheck | Mapping | None,
                   allowed_precisions: Sequence[str] | None, tolerance: float | None) -> VariantStatus:
    """One variant's standing: measured, allowed by the problem's precisions, and (by its check) within the
    tolerance; unchecked reduced-precision variants count only at ``UNCHECKED_MIN_TOLERANCE`` or looser."""
    if isinstance(check, Mapping):
        check = VariantCheck.from_dict(check)
    tol = check.tolerance if (check is not None and check.tolerance is not None) else tolerance
    if not _measured(t_us):
        return VariantStatus(variant, None, False, "not measured", check)
    need = VARIANT_PRECISION.get(variant)
    if need is not None and need not in set(allowed_precisions or ()):
        return VariantStatus(variant, t_us, False, f"{need.upper()} not allowed", check)
    if check is not None and check.passed is False:
        return VariantStatus(variant, t_us, False, f"fails {tolerance_text(tol)}", check)
    if check is not None and check.passed:
        return VariantStatus(variant, t_us, True, f"passes {tolerance_text(tol)}", check)
    if need is None or tolerance is None or tolerance >= UNCHECKED_MIN_TOLERANCE:  # None: the precision rule only
        return VariantStatus(variant, t_us, True, "not checked", check)
    return VariantStatus(variant, t_us, False, f"not checked at {tolerance_text(tolerance)}", check)


def variant_statuses(reference_us: Mapping[str, float | None], checks: Mapping[str, Any] | None,
                     allowed_precisions: Sequence[str] | None, tolerance: float | None) -> dict[str, VariantStatus]:
    """``variant_status`` of every variant (in ``VARIANTS`` order)."""
    checks = checks or {}
    return {v: variant_status(v, reference_us.get(v), checks.get(v), allowed_precisions, tolerance) for v in VARIANTS}


def reference_record(reference_us: Mapping[str, float | None], checks: Mapping[str, Any] | None,
                     allowed_precisions: Sequence[str] | None, tolerance: float | None) -> dict[str, dict]:
    """What a run records beside ``reference_us`` (``RunSummary.reference_checks``): per measured variant its
    check, whether it is eligible and its label, decided once with the problem's precisions and tolerance."""
    return {v: s.to_dict() for v, s in variant_statuses(reference_us, checks, allowed_precisions, tolerance).items()
            if s.t_us is not None}


def eligible_us(reference_us: Mapping[str, float | None], reference_checks: Mapping[str, Mapping] | None) -> dict[str, float]:
    """The times of the variants a run recorded as eligible (``reference_record``); a record written before
    checks were kept (no ``reference_checks``) keeps every measured time, as it was judged then."""
    measured = {k: float(v) for k, v in reference_us.items() if _measured(v)}
    if not reference_checks:
        return measured
    return {k: v for k, v in measured.items() if (reference_checks.get(k) or {}).get("eligible", False)}


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
    """The reference variants a problem's precisions allow: the TF32 ones only where its precisions include it."""
    allowed = set(allowed_precisions or ())
    return [v for v, need in VARIANT_PRECISION.items() if need is None or need in allowed]


def pytorch_floor(reference_us: Mapping[str, float | None], allowed_precisions: Sequence[str] | None,
                  checks: Mapping[str, Any] | None = None, tolerance: float | None = None) -> tuple[str, float] | None:
    """(variant, t_us) of PyTorch's fastest eligible variant (``variant_status``); None when none is. Without
    ``checks`` and ``tolerance`` only the precision rule applies (a record from before checks were kept)."""
    statuses = variant_statuses(reference_us, checks, allowed_precisions, tolerance)
    times = [(v, float(s.t_us)) for v, s in statuses.items() if s.eligible and s.t_us is not None]
    return min(times, key=lambda vt: vt[1]) if times else None


def kept_result(best_t_us: float | None, reference_us: Mapping[str, float | None],
                allowed_precisions: Sequence[str] | None, checks: Mapping[str, Any] | None = None,
                tolerance: float | None = None) -> Kept:
    """The faster of our best correct program and the floor; ours on a tie (PyTorch must be strictly faster)."""
    floor = pytorch_floor(reference_us, allowed_precisions, checks, tolerance)
    variant, floor_us = floor if floor else (None, None)
    if floor_us is not None and (best_t_us is None or floor_us < best_t_us):
        return Kept(source=variant, t_us=floor_us, ours_us=best_t_us, floor_variant=variant, floor_us=floor_us)
    return Kept(source="ours", t_us=best_t_us, ours_us=best_t_us, floor_variant=variant, floor_us=floor_us)


def speedups(t_us: float | None, reference_us: Mapping[str, float | None],
             reference_checks: Mapping[str, Mapping] | None) -> dict[str, float | None]:
    """``t_baseline / t_us`` over each variant that counts (``eligible_us``); None for one that does not."""
    eligible = eligible_us(reference_us, reference_checks)
    return {v: (eligible[v] / t_us if (t_us and v in eligible) else None) for v in VARIANTS}


def cell(variant: str, reference_checks: Mapping[str, Mapping] | None) -> str:
    """The words a table puts beside a variant's time where it does not count ("fails 1e-4"), else ""."""
    rec = (reference_checks or {}).get(variant) or {}
    if not rec or rec.get("eligible", True):
        return ""
    return str(rec.get("label") or "not eligible")
