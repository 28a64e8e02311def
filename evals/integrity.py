"""Checks the harness makes outside the judge process. Each returns ``(ok, reason)``; ``reason`` is
empty when ok.

What a μCUTLASS program says of itself is data, not code, so its precisions (following the
dataflow) and whether it has a kernel at all are read from it here; the SOL ceiling compares a time
with the physical bound. Everything about what a candidate does (outputs, inputs, precision of
Python code, work attribution, timing) is measured by the judge process (``evals.worker``). A
``CheckResult`` is named by its rule (``evals.verdicts``): hard rules fail the attempt, flags are
kept out of headline numbers.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from pydantic import BaseModel

CheckVerdict = tuple[bool, str]

from evals.verdicts import HARD_RULES

# Precisions by mantissa bits: lower means less precise.
PRECISION_BITS = {"f32": 23, "tf32": 10, "f16": 10, "bf16": 7}


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


def program_precisions(program) -> list[str]:
    """Math precisions a program really uses, following the dataflow: every tensor carries the
    lowest precision on any path into it (a torch step that casts to bf16 and back leaves bf16 in
    its output's lineage), and a kernel computes at the lowest of its math
    (``dsl_compiler.precision.effective_math``) and its operands' lineage."""
    from dsl_compiler import ir
    from dsl_compiler.precision import effective_math

    try:
        from dsl_compiler import shapes

        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - a program whose shapes do not infer: declared types only
        types = None
    lineage: dict[str, set[str]] = {d.name: {d.dtype} for d in program.decls}

    def of(name: str) -> set[str]:
        return lineage.get(name, {"f32"})

    used: set[str] = set()
    for step in program.steps:
        if isinstance(step, ir.TorchStep):
            seen: set[str] = set()
            for arg in step.args:
                if isinstance(arg, ir.TensorArg):
                    seen |= of(arg.name)
            seen |= {str(kw.value) for kw in step.kwargs if kw.key == "dtype" and str(kw.value) in PRECISION_BITS}
            for out in step.outputs:
                t = types.get(out) if types else None
                lineage[out] = seen | ({t.dtype} if t is not None else set())
            used |= seen  # a torch step computes at what reaches it (a bf16 linear is bf16 math)
            continue
        reach = set().union(*(of(o.name) for o in step.operands))
        math = effective_math(program, step, types) if types is not None else (step.config.math or "f32")
        at = {math} | reach
        used |= at
        for store in step.stores:
            lineage[store.name] = at | {store.dtype}
            used.add(store.dtype)
    used.update(d.dtype for d in program.decls)
    used = {u for u in used if u in PRECISION_BITS and u != "f32"}
    return sorted(used or {"f32"}, key=lambda p: -PRECISION_BITS[p])


def lowest_precision(precisions: Sequence[str]) -> str:
    return min(precisions, key=lambda p: PRECISION_BITS[p]) if precisions else "f32"


def precision_check(used: Sequence[str], allowed: Sequence[str]) -> CheckVerdict:
    bad = [p for p in used if p not in allowed]
    if bad:
        return False, (
            f"uses {', '.join(bad)} but this problem allows only {', '.join(allowed)} at its tolerance; "
            f"set math = {allowed[-1] if allowed else 'f32'} (or a higher precision)"
        )
    return True, ""
