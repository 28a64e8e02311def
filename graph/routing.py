"""Where the graph goes after each node. A failed attempt (``current`` cleared by the node that
failed it) returns to the writer with its diagnostics, unless the budget ran out."""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END

from graph.state import OptimizeState


def after_planner(state: OptimizeState) -> Literal["dsl_writer", "__end__"]:
    return END if state.get("stop_reason") else "dsl_writer"


def _next_or_retry(state: OptimizeState, next_node: str) -> str:
    if state.get("current") is not None:
        return next_node
    return "sol_judge" if state.get("stop_reason") else "dsl_writer"


def after_writer(state: OptimizeState) -> Literal["compiler", "dsl_writer", "sol_judge"]:
    return _next_or_retry(state, "compiler")  # type: ignore[return-value]


def after_compiler(state: OptimizeState) -> Literal["validator", "dsl_writer", "sol_judge"]:
    return _next_or_retry(state, "validator")  # type: ignore[return-value]


def after_validator(state: OptimizeState) -> Literal["profiler", "dsl_writer", "sol_judge"]:
    return _next_or_retry(state, "profiler")  # type: ignore[return-value]


def after_profiler(state: OptimizeState) -> Literal["sol_judge", "dsl_writer"]:
    return _next_or_retry(state, "sol_judge")  # type: ignore[return-value]


def after_judge(state: OptimizeState) -> Literal["planner", "__end__"]:
    return END if state.get("stop_reason") else "planner"
