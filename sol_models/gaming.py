"""The SOL ceiling: a measured time below the speed of light (by more than a margin) cannot be
honest; the intended work was skipped, cached, run elsewhere or mis-timed.

Compare against the bound of the precision the candidate actually used (a bf16 kernel has a lower
t_SOL than a tf32 one) and the fused byte count (the least any implementation must move)."""

from __future__ import annotations

import math
import os
from typing import Any, Literal

from pydantic import BaseModel

DEFAULT_MARGIN = 0.10
MARGIN_ENV = "MUCUTLASS_SOL_MARGIN"  # overrides the default margin, e.g. 0.15

# Narrowest first: a program's precision is that of its narrowest kernel.
_PRECISION_ORDER = ("fp8", "bf16", "f16", "tf32", "f32")


class CeilingVerdict(BaseModel):
    ok: bool
    verdict: Literal["ok", "impossible", "invalid"]
    reason: str
    ratio: float | None  # t_measured / t_sol
    t_measured_us: float
    t_sol_us: float
    threshold_us: float | None  # t_sol x (1 - margin)
    margin: float
    precision: str | None = None


def default_margin() -> float:
    """The margin setting: ``MUCUTLASS_SOL_MARGIN`` when set to a number in [0, 1), else 10%."""
    raw = os.environ.get(MARGIN_ENV)
    if raw is None:
        return DEFAULT_MARGIN
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_MARGIN
    return value if 0.0 <= value < 1.0 else DEFAULT_MARGIN


def ceiling_check(
    t_measured_us: float, t_sol_us: float, margin: float | None = None, precision: str | None = None
) -> CeilingVerdict:
    """``impossible`` when t_measured < t_sol x (1 - margin); ``invalid`` for a time that is not a
    positive finite number; else ``ok``. The reason carries the numbers."""
    margin = default_margin() if margin is None else margin
    label = f"{precision} " if precision else ""
    if not (0.0 <= margin < 1.0):
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    values = []
    for what, value in (("measured time", t_measured_us), ("t_SOL", t_sol_us)):
        number = _or_nan(value)  # numpy and torch scalars too
        if not (math.isfinite(number) and number > 0):
            return CeilingVerdict(
                ok=False, verdict="invalid", ratio=None, t_measured_us=_or_nan(t_measured_us),
                t_sol_us=_or_nan(t_sol_us), threshold_us=None, margin=margin, precision=precision,
                reason=f"{what} {value!r} is not a positive finite number of microseconds",
            )
        values.append(number)
    t_measured_us, t_sol_us = values
    threshold = t_sol_us * (1.0 - margin)
    ratio = t_measured_us / t_sol_us
    if t_measured_us < threshold:
        reason = (
            f"impossible: measured {t_measured_us:.3f} us is {ratio:.2f}x the {label}speed of light "
            f"{t_sol_us:.3f} us, below the {1 - margin:.0%} floor of {threshold:.3f} us; the intended "
            "work cannot have been done (skipped, cached, run on another stream, or mis-timed)"
        )
        return CeilingVerdict(ok=False, verdict="impossible", reason=reason, ratio=ratio,
                              t_measured_us=t_measured_us, t_sol_us=t_sol_us, threshold_us=threshold,
                              margin=margin, precision=precision)
    reason = (
        f"ok: measured {t_measured_us:.3f} us is {ratio:.2f}x the {label}speed of light {t_sol_us:.3f} us "
        f"(floor {threshold:.3f} us at a {margin:.0%} margin)"
    )
    return CeilingVerdict(ok=True, verdict="ok", reason=reason, ratio=ratio, t_measured_us=t_measured_us,
                          t_sol_us=t_sol_us, threshold_us=threshold, margin=margin, precision=precision)


def _or_nan(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def ceiling_check_work(
    t_measured_us: float, work: Any, gpu: Any, precision: str, margin: float | None = None
) -> CeilingVerdict:
    """The ceiling check against the bound of ``work`` (a WorkCount of the intended problem) at the
    precision the candidate used, with fused bytes."""
    from sol_models.bounds import sol_report

    report = sol_report(work, gpu, precision=precision)
    return ceiling_check(t_measured_us, report.t_sol_us, margin=margin, precision=precision)


def narrowest_precision(precisions: list[str] | tuple[str, ...]) -> str:
    """The narrowest (fastest) of several math precisions; "tf32" when none is given."""
    known = [p for p in _PRECISION_ORDER if p in set(precisions)]
    return known[0] if known else "tf32"


def program_precision(program: Any) -> str:
    """The math precision a μCUTLASS program runs at: its narrowest kernel's (torch steps run at
    PyTorch's precision and do not lower it). A program without kernels counts as tf32."""
    from dsl_compiler import shapes
    from dsl_compiler.precision import effective_math

    types = shapes.infer(program)
    return narrowest_precision([effective_math(program, k, types) for k in program.kernels])
