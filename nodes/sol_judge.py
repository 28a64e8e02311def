"""sol_judge: headroom = t_best / t_SOL; flags results faster than physically possible; applies
the run's budgeting policy to loop or end, and records why."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from graph.attempts import ceiling_bound_us, judge, stop_decision
from graph.context import RunContext
from graph.memory import remember_state
from graph.state import OptimizeState, current, program_of


def sol_judge(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx, svc = runtime.context, runtime.context.services
    start = time.perf_counter()
    update: dict = {}
    attempt = current(state)
    if attempt is not None:  # a profiled attempt to judge (failed ones were finished where they failed)
        t_sol = ceiling_bound_us(state.get("sol", {}), attempt.precision, program_of(state))
        flags: list[str] = []
        if t_sol and attempt.t_us:
            ok, reason = svc.ceiling_check(attempt.t_us, t_sol)
            if not ok:
                flags.append(f"sol_ceiling: {reason}")
        update = judge(state, attempt, time.perf_counter() - start, flags)
        state = {**state, **update}
    update.update(remember_state(runtime.store, ctx, state))  # every attempt finished so far, failed ones too
    if state.get("stop_reason"):
        return update
    update["stop_reason"] = stop_decision(state, ctx)
    return update
