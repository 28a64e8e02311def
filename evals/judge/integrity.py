"""Checks the harness makes outside the judge process. Each returns ``(ok, reason)``; ``reason`` is
empty when ok.

What a μCUTLASS program says of itself is data, not code, so its precisions (following the
dataflow) and whether it has a kernel at all are read from it here; the SOL ceiling compares a time
with the physical bound. Everything about what a candidate does (outputs, inputs, precision of
Python code, work attribution, timing) is measured by the judge process (``evals.judge.process``). A
``CheckResult`` is named by its rule (``evals.judge.verdicts``): hard rules fail the attempt, flags are
kept out of headline numbers.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pydantic import BaseModel

CheckVerdict = tuple[bool, str]

# the precision rules are the language's (one home); the harness reads them through this module
from dsl_compiler.precision import PRECISION_BITS, admitted, lowest_precision, program_precisions  # noqa: F401
from evals.judge.verdicts import HARD_RULES


class CheckResult(BaseModel):
    name: str
    ok: bool
    reason: str = ""

    @property
    def hard(self) -> bool:
        return self.name in HARD_RULES

    def flag(self) -> str:
        return f"{self.name}: {self.reason}"


def result(name: str, verdict: CheckVerdict) -> CheckResult:
    return CheckResult(name=name, ok=bool(verdict[0]), reason=verdict[1])


def flags_of(checks: Iterable[CheckResult]) -> list[str]:
    """The failed checks as ``"name: reason"`` strings (``AttemptRecord.flags``)."""
    return [c.flag() for c in checks if not c.ok]


# ---------------------------------------------------------------------------------------------
# Speed of light


def sol_ceiling_check(t_measured_us: float, t_sol_us: float, margin: float | None = None) -> CheckVerdict:
    """A time more than ``margin`` under the physical bound is not honest (or the bound is wrong):
    sol_models.gaming's rule, its margin by default (10%, or MUCUTLASS_SOL_MARGIN)."""
    from sol_models.gaming import ceiling_check

    verdict = ceiling_check(t_measured_us, t_sol_us, margin=margin)
    return bool(verdict.ok), "" if verdict.ok else (verdict.reason or "faster than SOL")


# ---------------------------------------------------------------------------------------------
# Programs (static: a program is data)

def pytorch_only_program_check(program) -> CheckVerdict:
    if not program.kernels:
        return False, (
            f"the program has no kernel, only {len(program.torch_steps)} PyTorch step(s); "
            f"express the GEMM or convolution as a `kernel`"
        )
    return True, ""


def precision_check(used: Sequence[str], allowed: Sequence[str]) -> CheckVerdict:
    bad = [p for p in used if not admitted(p, allowed)]  # tf32x3 is admitted wherever f32 is
    if bad:
        return False, (
            f"uses {', '.join(bad)} but this problem allows only {', '.join(allowed)} at its tolerance; "
            f"set math = {allowed[-1] if allowed else 'f32'} (or a higher precision)"
        )
    return True, ""
