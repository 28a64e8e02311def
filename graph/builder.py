"""The graph: planner -> dsl_writer -> compiler -> validator -> profiler -> sol_judge -> (planner | end)."""

from __future__ import annotations

from langgraph.graph import START, StateGraph

from graph import routing
from graph.context import RunContext
from graph.state import OptimizeState
from nodes.compiler import compiler
from nodes.dsl_writer import dsl_writer
from nodes.planner import planner
from nodes.profiler import profiler
from nodes.sol_judge import sol_judge
from nodes.validator import validator


def build_graph(checkpointer=None, store=None):
    g = StateGraph(OptimizeState, context_schema=RunContext)
    g.add_node("planner", planner)
    g.add_node("dsl_writer", dsl_writer)
    g.add_node("compiler", compiler)
    g.add_node("validator", validator)
    g.add_node("profiler", profiler)
    g.add_node("sol_judge", sol_judge)
    g.add_edge(START, "planner")
    g.add_conditional_edges("planner", routing.after_planner)
    g.add_conditional_edges("dsl_writer", routing.after_writer)
    g.add_conditional_edges("compiler", routing.after_compiler)
    g.add_conditional_edges("validator", routing.after_validator)
    g.add_conditional_edges("profiler", routing.after_profiler)
    g.add_conditional_edges("sol_judge", routing.after_judge)
    # ``store``: the memory across problems (graph.memory), read and written through runtime.store
    return g.compile(checkpointer=checkpointer, store=store, name="mucutlass")


# `langgraph dev` serves this (langgraph.json); the server supplies its own checkpointer.
graph = build_graph()
