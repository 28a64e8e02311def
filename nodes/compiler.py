"""compiler: checks the program (and builds it for the cutlass backend); in the cuda variants,
checks and builds the ModelNew module's extensions (evals.cuda_candidates). Any error ends the
attempt and goes back to the writer with the diagnostics."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from dsl_compiler.diagnostics import Diagnostic, failure, has_errors, model_text
from dsl_compiler.precision import kernel_maths
from graph.attempts import advance, fail
from graph.context import RunContext
from graph.state import OptimizeState, current


def compiler(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx, svc = runtime.context, runtime.context.services
    attempt = current(state)
    work0, start = svc.work_s, time.perf_counter()

    def failed(reason: str, diagnostics: list[Diagnostic], checked=None, **changes) -> dict:
        node_s = time.perf_counter() - start
        return {**fail(state, attempt, node_s, reason, diagnostics, ctx, **changes),
                "program": checked,  # the writer shows the last attempt's program when it checked
                "work_s": state.get("work_s", 0.0) + (svc.work_s - work0)}

    if ctx.variant_spec.language == "python":
        try:
            source, built = svc.build_model_new(attempt.program_text)
        except Exception as exc:
            return failed(f"build crashed: {type(exc).__name__}: {exc}", [])
        if source is None:
            return failed(f"build: {built.reason}", [failure(e) for e in built.diagnostics or [built.reason]],
                          build_s=built.seconds)
        return {"current": advance(attempt, time.perf_counter() - start, reached="compile", compile_ok=True,
                                   build_s=built.seconds),
                "candidate_source": source, "program": None, "artifacts": {}, "sources": {},
                "work_s": state.get("work_s", 0.0) + (svc.work_s - work0)}
    try:
        # the problem's outputs bound the program's: an oversized output is refused before any worker runs it
        program, diagnostics = svc.check_text(attempt.program_text,
                                              max_output_bytes=(state.get("sol") or {}).get("output_bytes"))
    except Exception as exc:
        return failed(f"check crashed: {type(exc).__name__}: {exc}", [])
    if program is None or has_errors(diagnostics):
        first = next((d for d in diagnostics if d.severity == "error"), None)
        return failed(f"check: {first.message if first else 'no program'}", diagnostics)
    precision = ",".join(sorted(set(kernel_maths(program)))) or None
    artifacts: dict[str, str] = {}
    sources: dict[str, str] = {}
    build_s = 0.0
    if state.get("backend") == "cutlass":
        try:
            built = svc.build(program)
        except Exception as exc:
            return failed(f"build crashed: {type(exc).__name__}: {exc}", [], program, precision=precision)
        build_s = float(getattr(built, "seconds", 0.0))
        if not built.ok:
            found = list(built.diagnostics) or [failure("build failed without diagnostics")]
            return failed(f"build: {model_text(found[0]).splitlines()[0]}", found, program, build_s=build_s,
                          precision=precision)
        artifacts = {k: str(v) for k, v in built.artifacts.items()}
        sources = {k: str(v) for k, v in (getattr(built, "sources", None) or {}).items()}
    node_s = time.perf_counter() - start
    return {
        "current": advance(attempt, node_s, reached="compile", compile_ok=True, build_s=build_s, precision=precision,
                           diagnostics=diagnostics),
        "program": program,
        "artifacts": artifacts,
        "sources": sources,
        "work_s": state.get("work_s", 0.0) + (svc.work_s - work0),
    }
