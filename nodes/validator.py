"""validator: runs the candidate against the reference on fresh random inputs (evals.judge).
A wrong, non-finite, unwritten or input-independent output ends the attempt with the reason."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from dsl_compiler.diagnostics import failure
from graph.attempts import advance, fail
from graph.context import RunContext
from graph.state import OptimizeState, current


def validator(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx, svc = runtime.context, runtime.context.services
    attempt = current(state)
    work0, start = svc.work_s, time.perf_counter()
    try:
        result = svc.validate(state["problem_path"], svc.candidate_of(state))
    except Exception as exc:
        result = {"correct": False, "max_abs_error": None, "reason": f"validation crashed: {type(exc).__name__}: {exc}"}
    node_s = time.perf_counter() - start
    work_s = state.get("work_s", 0.0) + (svc.work_s - work0)
    flags = [*attempt.flags, *result.get("flags", [])]
    if not result["correct"]:
        reason = result.get("reason") or "outputs differ from the reference"
        return {**fail(state, attempt, node_s, f"validate: {reason}", [failure(f"wrong result: {reason}")],
                       ctx, reached="compile", max_abs_error=result.get("max_abs_error"),
                       flags=flags, failure_rule=result.get("rule"),
                       judge_failed=bool(result.get("judge_failed"))),
                "work_s": work_s}
    return {"current": advance(attempt, node_s, reached="validate", correct=True,
                               max_abs_error=result.get("max_abs_error"), flags=flags),
            "work_s": work_s}
