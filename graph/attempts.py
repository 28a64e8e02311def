"""Bookkeeping of attempts over the graph state: start one, advance it, finish it (a failure or a
judged result), keep the best and the token counters. Pure functions returning state updates."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from dsl_compiler.diagnostics import Diagnostic, failure
from run_vocabulary.budgets import Spend, budget_stop
from run_vocabulary.policies import stop_reason
from run_vocabulary.records import AttemptRecord
from graph.state import OptimizeState, baselines_us, history, program_of

if TYPE_CHECKING:
    from graph.context import RunContext


def program_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def add_tokens(state: OptimizeState, model: str, tokens_in: int, tokens_out: int, cost_usd: float) -> dict[str, Any]:
    by_model = {k: dict(v) for k, v in state.get("tokens_by_model", {}).items()}
    row = by_model.setdefault(model or "unknown", {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "calls": 0})
    row["tokens_in"] += tokens_in
    row["tokens_out"] += tokens_out
    row["cost_usd"] += cost_usd
    row["calls"] += 1
    return {
        "tokens_in": state.get("tokens_in", 0) + tokens_in,
        "tokens_out": state.get("tokens_out", 0) + tokens_out,
        "cost_usd": state.get("cost_usd", 0.0) + cost_usd,
        "tokens_by_model": by_model,
    }


def advance(attempt: AttemptRecord, node_s: float, **changes: Any) -> dict:
    """The attempt after one more node: its fields updated and the node's time added."""
    return attempt.model_copy(update={**changes, "wall_s": attempt.wall_s + node_s}).model_dump()


def add_node_spend(state: OptimizeState, node: str, seconds: float, tokens_in: int = 0, tokens_out: int = 0,
                   cost_usd: float = 0.0) -> dict[str, Any]:
    """The state's spend by node (planner, writer) with one more call of ``node``."""
    by_node = {k: dict(v) for k, v in state.get("spend_by_node", {}).items()}
    row = by_node.setdefault(node, {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "seconds": 0.0, "calls": 0})
    row["tokens_in"] += tokens_in
    row["tokens_out"] += tokens_out
    row["cost_usd"] += cost_usd
    row["seconds"] += seconds
    row["calls"] += 1
    return {"spend_by_node": by_node}


def spent(state: OptimizeState) -> Spend:
    """What the run has spent so far, over all its resumes (the state's counters are checkpointed)."""
    return Spend(state.get("tokens_in", 0) + state.get("tokens_out", 0), state.get("cost_usd", 0.0),
                 state.get("work_s", 0.0))


def stop_decision(state: OptimizeState, ctx: RunContext, *, nothing_left: str | None = None) -> str:
    """The one stop decision of a run, after every finished attempt (failed or judged) and when the writer has
    nothing left to propose: a writer out of ideas, then the run's hard budgets (``run_vocabulary.budgets``), then
    its stop rule over the state's history (``run_vocabulary.policies.stop_reason``); "" to go on."""
    if not nothing_left:
        over = budget_stop(spent(state), ctx.budget)
        if over:
            return over
    return stop_reason(ctx.stop_policy, history(state), state.get("sol", {}).get("t_sol_us"),
                       baselines_us(state), ctx.policy_settings, nothing_left=nothing_left)


def fail(
    state: OptimizeState, attempt: AttemptRecord, node_s: float, reason: str, diagnostics: list[Diagnostic],
    ctx: RunContext, **changes: Any,
) -> dict[str, Any]:
    """Finish a failed attempt: it joins the history, its messages go back to the writer, and the
    budget is checked (a failure counts as an attempt)."""
    done = AttemptRecord.model_validate(
        advance(attempt, node_s, failure_reason=reason, diagnostics=diagnostics or [failure(reason)], **changes)
    )
    attempts = [*state.get("attempts", []), done.model_dump()]
    why = stop_decision({**state, "attempts": attempts}, ctx)
    return {"current": None, "attempts": attempts, "diagnostics": done.diagnostics, "stop_reason": why}


# Times equal to a part in 10^4 are a tie, not a new best: estimated times of equivalent programs differ in their last
# bits, and no measured time is that precise.
TIE_REL = 1e-4


def judge(state: OptimizeState, attempt: AttemptRecord, node_s: float, flags: list[str]) -> dict[str, Any]:
    """Finish a profiled attempt: SOL fraction, speedups, flags; a new best when it is one."""
    t_sol = state.get("sol", {}).get("t_sol_us")
    refs = baselines_us(state)  # a variant that fails the tolerance is no baseline
    t = attempt.t_us
    # the judge's flags (validator, profiler: pytorch_only) stay; the SOL ceiling's are added to them
    flags = [*attempt.flags, *(f for f in flags if f not in attempt.flags)]
    changes: dict[str, Any] = {"reached": "done", "flags": flags, "t_sol_us": t_sol}
    if t and t > 0:
        if t_sol:
            changes["sol_fraction"] = t_sol / t
        for key, name in (("eager_fp32", "speedup_vs_eager_fp32"), ("eager_tf32", "speedup_vs_eager_tf32"),
                          ("compile", "speedup_vs_compile")):
            if refs.get(key):
                changes[name] = refs[key] / t
    best = state.get("best_t_us")
    improved = bool(attempt.correct and t is not None and not flags and (best is None or t < best * (1 - TIE_REL)))
    changes["improved"] = improved
    done = AttemptRecord.model_validate(advance(attempt, node_s, **changes))
    update: dict[str, Any] = {"current": None, "attempts": [*state.get("attempts", []), done.model_dump()],
                              "diagnostics": []}
    if improved:
        update.update(best_index=done.index, best_t_us=t, best_program_text=done.program_text,
                      best_program=program_of(state), best_artifacts=dict(state.get("artifacts") or {}),
                      best_sources=dict(state.get("sources") or {}))
    return update


def ceiling_bound_us(sol: dict, precision: str | None, program: Any = None) -> float | None:
    """The t_SOL a measured time is held to: the bound of the narrowest precision the program
    computed in (``precision`` is e.g. "tf32" or "bf16,tf32"), since a bf16 kernel may honestly beat
    the tf32 bound but never its own; the report's headline bound when none is known. A program that
    stores parameters in a narrower type (converted once, at load) moves those bytes legally: its
    bound counts them at their stored type (``sol_models.bounds.stored_bound_us``), so the judge
    holds a program to what it may do, never to more."""
    per = sol.get("per_precision") or {}
    names = [p for p in (precision or "").split(",") if p]
    bounds = [(per.get(p) or {}).get("t_sol_us") for p in names]
    headline = min((b for b in bounds if b), default=None) or sol.get("t_sol_us")
    if program is None or not headline:
        return headline
    from sol_models.bounds import stored_bound_us

    legal = [stored_bound_us(sol, p, program) for p in (names or [sol.get("precision", "tf32")])]
    return min([headline, *(b for b in legal if b)])
