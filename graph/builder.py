"""The graph: planner -> dsl_writer -> compiler -> validator -> profiler -> sol_judge -> (planner | end)."""

from __future__ import annotations

import functools
import threading

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


_DEFAULT: list[RunContext] = []
_DEFAULT_LOCK = threading.Lock()


def default_context() -> RunContext:
    """The context of a run invoked without one (`langgraph dev`, LangGraph Studio): the command line's defaults, the
    offline tier and sol+plateau, on the backend this machine can run. One per process, so its services (the harness
    worker, the cached SOL counts) are started once."""
    with _DEFAULT_LOCK:
        if not _DEFAULT:
            from dsl_compiler.backend import resolve_backend

            _DEFAULT.append(RunContext(backend=resolve_backend("auto")[0]))
        return _DEFAULT[0]


def _with_default_context(node):
    @functools.wraps(node)  # keeps the signature LangGraph reads to pass the runtime
    def run(state, runtime):
        if runtime.context is None:
            runtime = runtime.override(context=default_context())
        return node(state, runtime)

    return run


def build_graph(checkpointer=None, store=None):
    g = StateGraph(OptimizeState, context_schema=RunContext)
    for name, node in (("planner", planner), ("dsl_writer", dsl_writer), ("compiler", compiler),
                       ("validator", validator), ("profiler", profiler), ("sol_judge", sol_judge)):
        g.add_node(name, _with_default_context(node))
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
