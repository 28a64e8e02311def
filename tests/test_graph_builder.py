"""The compiled graph as `langgraph dev` loads it (langgraph.json), started with only a problem path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from graph.context import RunContext
from nodes.playback import PlaybackTier
from test_graph_fakes import GOOD, SLOW, TextTrackingServices, write_problem

ROOT = Path(__file__).resolve().parent.parent


def load_served_module():
    spec = json.loads((ROOT / "langgraph.json").read_text())
    file_, attr = spec["graphs"]["mucutlass"].split(":")
    mod_spec = importlib.util.spec_from_file_location("served_builder", ROOT / file_)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module, attr


def load_served_graph():
    module, attr = load_served_module()
    return getattr(module, attr)


def test_langgraph_json_points_at_the_compiled_graph(tmp_path):
    graph = load_served_graph()
    nodes = set(graph.get_graph().nodes)
    assert {"planner", "dsl_writer", "compiler", "validator", "profiler", "sol_judge"} <= nodes
    progs = tmp_path / "p"
    progs.mkdir()
    (progs / "1.mcu").write_text(SLOW)
    (progs / "2.mcu").write_text(GOOD)
    ctx = RunContext(tier="playback", policy="fixed", max_attempts=2, tier_impl=PlaybackTier(progs),
                     services=TextTrackingServices())
    final = graph.invoke({"problem_path": str(write_problem(tmp_path))}, context=ctx)
    assert [a["t_us"] for a in final["attempts"]] == [80.0, 12.0]
    assert final["best_index"] == 2 and final["stop_reason"].startswith("fixed")


def test_missing_problem_path_ends_with_a_reason():
    graph = load_served_graph()
    final = graph.invoke({}, context=RunContext(tier="playback", tier_impl=object(), services=TextTrackingServices()))
    assert final["stop_reason"] == "setup failed: no problem_path in the input"
    assert final["attempts"] == []


def test_broken_problem_ends_with_a_reason(tmp_path):
    from graph.context import Services
    from graph.runner import run_optimize

    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model: pass\n")  # no get_inputs / get_init_inputs
    ctx = RunContext(tier="playback", tier_impl=object(), services=Services())
    summary = run_optimize(bad, ctx, tmp_path / "run")
    assert summary.stop_reason.startswith("setup failed: ProblemError") and summary.attempts == []
    assert "get_inputs" in summary.stop_reason


def test_the_served_graph_runs_without_a_context(monkeypatch):
    """`langgraph dev` invokes the graph with only an input: the run takes the command line's defaults."""
    builder, attr = load_served_module()
    graph = getattr(builder, attr)
    default = builder.default_context()
    assert (default.tier, default.policy, default.max_attempts) == ("offline", "sol+plateau", 40)
    assert default.backend in ("cutlass", "interpreter") and builder.default_context() is default
    monkeypatch.setattr(default, "max_attempts", 2)  # the defaults, but two attempts to keep the test short
    problem = ROOT / "evals" / "suites" / "smoke" / "02_linear_relu_tiny.py"
    final = graph.invoke({"problem_path": str(problem)}, {"recursion_limit": 100})
    assert len(final["attempts"]) == 2 and final["attempts"][0]["correct"] and final["stop_reason"]
