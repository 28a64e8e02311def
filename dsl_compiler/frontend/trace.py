"""The frontend's entry point: trace, lower, and (with ``fallback``) re-lower until the checks pass."""

from __future__ import annotations

from typing import Any

from dsl_compiler.diagnostics import Diagnostic, kernels_named
from dsl_compiler.frontend.lower import lower
from dsl_compiler.frontend.reference import LoadedReference, TraceError, build_and_trace, load_reference
from dsl_compiler.frontend.results import CoverageRow, TraceOptions, TraceResult
from dsl_compiler.frontend.whole_model import whole_model_program
from dsl_compiler.ir import Acc, Kernel


def trace_problem(problem: Any, options: TraceOptions | None = None, *, fallback: bool = True,
                  target: str = "sm90a", backend: str | None = "cutlass") -> TraceResult:
    """Trace the reference ``Model`` of ``problem`` into a μCUTLASS program, with coverage.

    With ``fallback`` the program is checked for ``target`` / ``backend``, and a kernel the checks
    reject first loses its epilogue to PyTorch steps, then runs as a PyTorch step itself; the
    coverage rows say which diagnostic caused it."""
    options = options or TraceOptions()
    try:
        ref = load_reference(problem)
    except TraceError as exc:
        return TraceResult(program=None, diagnostics=[exc.diagnostic])
    except Exception as exc:  # evals.problems.ProblemError and friends
        return TraceResult(program=None, diagnostics=[Diagnostic(code="problem", message=str(exc).splitlines()[0] if str(exc) else type(exc).__name__, hint="fix the problem file")])
    try:
        traced = build_and_trace(ref)
    except TraceError as exc:
        if exc.diagnostic.code != "trace":  # not a runnable problem (Model() raises)
            return TraceResult(program=None, diagnostics=[exc.diagnostic])
        return _whole_model(ref, exc.diagnostic, [])
    result = lower(traced, options, ref)
    if result.program is None:
        return _whole_model(ref, next((d for d in result.diagnostics if d.severity == "error"), None), result.coverage)
    if not fallback:
        return result
    from dsl_compiler.checks import check

    why: dict[str, str] = {}
    for _ in range(3 * len(result.program.kernels) + 1):
        diags = [d for d in check(result.program, target, backend=backend) if d.severity == "error"]
        if not diags:
            break
        # a target whose tf32 MMA reads K-major operands only: give those kernels transposing copies
        kmajor = tuple(dict.fromkeys(names[0] for d in diags if d.code == "layout" and "K-major" in d.message
                                     for names in [kernels_named(d.message)] if names and names[0] not in options.kmajor))
        if kmajor:
            options = options.model_copy(update={"kmajor": options.kmajor + kmajor})
            result = lower(traced, options, ref, why)
            if result.program is None:
                return _whole_model(ref, next((d for d in result.diagnostics if d.severity == "error"), None), result.coverage)
            continue
        culprit = next((names[0] for d in diags for names in [kernels_named(d.message)] if names), None)
        names = {k.name for k in result.program.kernels}
        if culprit not in names:
            culprit = result.program.kernels[-1].name if names else None
        if culprit is None:
            result.diagnostics.extend(diags)
            return result
        message = next((d.message for d in diags if culprit in d.message), diags[0].message)
        has_epilogue = any(_has_epilogue(k) for k in result.program.kernels if k.name == culprit)
        if culprit not in options.unfuse and has_epilogue:
            options = options.model_copy(update={"unfuse": options.unfuse + (culprit,)})
            why[culprit] = f"epilogue left to PyTorch: {message}"
        else:
            options = options.model_copy(update={"demote": options.demote + (culprit,)})
            why[culprit] = f"demoted to PyTorch: {message}"
        result = lower(traced, options, ref, why)
        if result.program is None:
            return _whole_model(ref, next((d for d in result.diagnostics if d.severity == "error"), None), result.coverage)
    return result


def _whole_model(ref: LoadedReference, cause: Diagnostic | None, coverage: list[CoverageRow]) -> TraceResult:
    """A model the lowering cannot take apart runs as one ``module`` step of the whole model (coverage 0); the
    per-op rows of a lowering that failed stay, saying which op stopped it. Refused only where the model does not
    run on its own inputs, or its inputs or outputs have no program form."""
    why = cause.message.splitlines()[0] if cause is not None else "the lowering gave no program"
    found = whole_model_program(ref, why)
    if found is None or found.program is None:
        diagnostics = ([cause] if cause is not None else []) + (found.diagnostics if found is not None else [])
        return TraceResult(program=None, coverage=coverage, diagnostics=diagnostics)
    kept = [r for r in coverage if r.placement == "unsupported" and not r.reason.startswith("not lowered:")]
    return found.model_copy(update={"coverage": found.coverage + kept})


def _has_epilogue(kernel: Kernel) -> bool:
    return bool(kernel.lets) or any(not isinstance(s.expr, Acc) for s in kernel.stores)
