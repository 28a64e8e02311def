"""planner: on the first pass, loads the problem, its SOL report and the reference timings once;
then names and ranks the changes to try (graph.planning) and picks the best by ROI."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from graph.attempts import add_node_spend, stop_decision
from graph.context import RunContext
from graph.planning import ProgramFeatures, flat_plan, nominate_source, plan
from graph.state import OptimizeState, history, initial_state, program_of
from nodes.dsl_writer import writer_request
from nodes.tier_types import ProposingTier
from nodes.tiers import tier_of
from run_vocabulary.floor import reference_record


def planner(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    start = time.perf_counter()
    update = _plan(state, runtime)
    return {**update, **add_node_spend({**state, **update}, "planner", time.perf_counter() - start)}


def _plan(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    svc = ctx.services
    work0 = svc.work_s
    update: dict = {}
    if not state.get("sol"):
        # fields a caller left out (a run started from LangGraph Studio gives only problem_path)
        update = {k: v for k, v in initial_state(state.get("problem_path", ""), ctx.backend).items() if k not in state}
        path = state.get("problem_path", "")
        if not path:
            return {**update, "stop_reason": "setup failed: no problem_path in the input"}
        try:
            problem = svc.problem(path)
            update["problem_name"] = getattr(problem, "key", None) or problem.name
            update["sol"] = svc.sol_report(path, ctx.gpu)
            update["reference_us"] = svc.reference_timings(path)
            update["reference_reason"] = svc.reference_reason(path)
            # each timed variant's check at the tolerance, and whether it counts (floor, speedups, stop rules)
            update["reference_checks"] = reference_record(update["reference_us"], svc.reference_checks(path),
                                                          getattr(problem, "allowed_precisions", ()),
                                                          getattr(problem, "tolerance", None))
        except Exception as exc:  # a broken problem or library failure ends the run with its reason
            return {**update, "stop_reason": f"setup failed: {type(exc).__name__}: {exc}"}
        state = {**state, **update}
    features = ProgramFeatures.of(program_of(state, "best_program"))
    try:
        tier = tier_of(ctx)
    except Exception as exc:  # TierError: unknown tier, missing key, offline tier not installed
        return {**update, "stop_reason": f"setup failed: {exc}"}
    variant = ctx.variant_spec
    if variant.language not in getattr(tier, "languages", ("mcu",)):
        return {**update, "stop_reason": f"setup failed: the {ctx.tier} tier cannot write the {variant.name} variant's "
                                         f"answers ({variant.language}); use a model tier or playback of .py files"}
    proposed = None
    if isinstance(tier, ProposingTier):
        try:
            proposed = tier.propose(writer_request(state, ctx, None, runtime.store))
        except Exception:  # the built-in nomination is always there to fall back on
            proposed = None
        if proposed is not None and not proposed and state.get("attempts"):
            return {**update, "stop_reason": stop_decision(state, ctx, nothing_left=tier.name),
                    "work_s": state.get("work_s", 0.0) + (svc.work_s - work0)}
    problem = svc.problem(state["problem_path"])
    if variant.sol_guided:
        proposed = proposed or (nominate_source(state["sol"], history(state)) if variant.language == "python" else None)
        ranked = plan(state["sol"], history(state), features, problem.allowed_precisions,
                      proposed or None)
    else:
        ranked = flat_plan(history(state), proposed or None)
    update.update(plan=[h.model_dump() for h in ranked], hypothesis=ranked[0].model_dump(), diagnostics=[])
    update["work_s"] = state.get("work_s", 0.0) + (svc.work_s - work0)
    return update
