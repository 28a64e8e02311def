"""dsl_writer: asks the tier for one program implementing the chosen hypothesis (or repairing the
last attempt's errors) and opens a new attempt with it."""

from __future__ import annotations

import time

from langgraph.runtime import Runtime

from dsl_compiler.diagnostics import failure
from graph.attempts import add_node_spend, add_tokens, advance, fail, program_hash, stop_decision
from graph.context import RunContext
from run_vocabulary.records import AttemptRecord
from graph.memory import recall_state
from graph.state import OptimizeState, diagnostics_of, history, hypothesis, program_of
from nodes.tier_types import WriterReply, WriterRequest
from nodes.tiers import tier_of


def writer_request(state: OptimizeState, ctx: RunContext, index: int | None, store=None) -> WriterRequest:
    problem = ctx.services.problem(state["problem_path"])
    past = history(state)
    mcu = ctx.variant_spec.language == "mcu"
    best = program_of(state, "best_program")
    # the compiler keeps the checked program of the last attempt in the state (None when it did not check)
    last = program_of(state) if mcu and past else None
    return WriterRequest(
        problem_name=state.get("problem_name") or problem.name,
        problem_source=problem.source,
        sol=state.get("sol", {}),
        plan=hypothesis(state),
        history=past,
        diagnostics=diagnostics_of(state),
        attempt_index=index if index is not None else len(past) + 1,
        best_program=best if mcu else None,
        last_program=last,
        best_source=None if mcu else state.get("best_program_text"),
        last_source=past[-1].program_text if past and last is None else None,
        allowed_precisions=list(getattr(problem, "allowed_precisions", ())),
        tolerance=getattr(problem, "tolerance", None),
        problem=problem,
        gpu=ctx.gpu,
        variant=ctx.variant,
        memory=recall_state(store, ctx, state),
    )


def dsl_writer(state: OptimizeState, runtime: Runtime[RunContext]) -> dict:
    ctx = runtime.context
    index = len(state.get("attempts", [])) + 1
    request = writer_request(state, ctx, index, runtime.store)
    start = time.perf_counter()
    try:
        tier = tier_of(ctx)
        reply = tier.write(request)
    except Exception as exc:  # any tier failure is this attempt's failure, never the run's
        reply = WriterReply("", error=f"tier failed: {type(exc).__name__}: {exc}")
    call_s = time.perf_counter() - start
    if reply.out_of_ideas and state.get("attempts"):  # never an attempt that repeats one, nor an empty one
        spend = {"work_s": state.get("work_s", 0.0) + call_s, **add_node_spend(state, "writer", call_s)}
        return {**spend, "current": None, "program": None,
                "stop_reason": stop_decision(state, ctx, nothing_left=getattr(tier, "name", ctx.tier))}
    expect = getattr(ctx.services, "expect", None)
    if expect is not None:  # a hint only: the builds of the next attempts start with this one's
        expect(tuple(reply.ahead)[:max(0, ctx.max_attempts - index)])  # no more than the budget has attempts for
    plan = hypothesis(state)
    title = reply.hypothesis.title if reply.hypothesis else (plan.title if plan else "")
    if request.diagnostics and not reply.hypothesis:
        title = f"repair: {title}" if title and not title.startswith("repair") else (title or "repair")
    attempt = AttemptRecord(
        index=index, hypothesis=title, program_text=reply.program_text, program_hash=program_hash(reply.program_text),
        tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, cost_usd=reply.cost_usd,
    )
    update = add_tokens(state, reply.model, reply.tokens_in, reply.tokens_out, reply.cost_usd)
    update.update(add_node_spend(state, "writer", call_s, reply.tokens_in, reply.tokens_out, reply.cost_usd))
    update["work_s"] = state.get("work_s", 0.0) + call_s
    if reply.error or not reply.program_text.strip():
        reason = reply.error or "the tier returned no program"
        update.update(fail({**state, **update}, attempt, call_s, f"write: {reason}", [failure(reason)],
                           ctx), program=None)
        return update
    update["current"] = advance(attempt, call_s)
    return update
