"""profiler: times the candidate and (once per run, in the planner) the reference the same way in
the same worker. Without a GPU the times are estimates and say so (timing_source)."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from dsl_compiler.diagnostics import failure
from graph.attempts import advance, fail
from graph.context import RunContext
from graph.state import OptimizeState, current


def profiler(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx, svc = runtime.context, runtime.context.services
    attempt = current(state)
    work0, start = svc.work_s, time.perf_counter()
    try:
        timing = svc.profile(state["problem_path"], svc.candidate_of(state))
        ok = timing.get("t_us") is not None and timing["t_us"] > 0
        reason = "" if ok else (timing.get("reason") or "the profiler returned no time")
    except Exception as exc:
        timing, ok, reason = {}, False, f"profiling crashed: {type(exc).__name__}: {exc}"
    node_s = time.perf_counter() - start
    work_s = state.get("work_s", 0.0) + (svc.work_s - work0)
    if not ok:
        return {**fail(state, attempt, node_s, f"profile: {reason}", [failure(reason)], ctx,
                       failure_rule=timing.get("rule"), judge_failed=bool(timing.get("judge_failed"))),
                "work_s": work_s}
    return {"current": advance(attempt, node_s, reached="profile", t_us=float(timing["t_us"]),
                               t_spread_pct=timing.get("t_spread_pct"), timing_source=timing.get("timing_source"),
                               flags=[*attempt.flags, *timing.get("flags", [])]),
            "work_s": work_s}
