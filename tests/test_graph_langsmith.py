"""LangSmith tracing: with LANGSMITH_TRACING set, a run's tree reaches the (mock) server with
run_name, tags and metadata; without it, nothing is sent. Each case runs in a fresh interpreter,
since the LangSmith client reads its settings once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from mock_servers import MockLangSmith

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

SCRIPT = textwrap.dedent('''
    import sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from graph.context import RunContext
    from graph.runner import run_optimize
    from nodes.tiers import ChatTier, TierSpec
    from test_graph_fakes import BROKEN, GOOD, TextTrackingServices, reply, scripted_chat, write_problem
    from pathlib import Path

    tier = ChatTier(scripted_chat(reply(BROKEN), reply(GOOD)), TierSpec(name="fake", model="fake-model"))
    ctx = RunContext(tier="fake", policy="sol", max_attempts=2, tier_impl=tier, services=TextTrackingServices(),
                     run_id="trace1")
    run_optimize(write_problem(Path({tmp!r})), ctx, Path({tmp!r}) / "run")
    from langchain_core.tracers.langchain import wait_for_all_tracers
    wait_for_all_tracers()
    print("ok")
''')


def run_script(tmp_path, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env.update(env_extra)
    code = SCRIPT.format(root=str(ROOT), tests=str(TESTS), tmp=str(tmp_path))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)


def test_trace_reaches_langsmith_with_metadata(tmp_path):
    with MockLangSmith() as server:
        out = run_script(tmp_path, {"LANGSMITH_TRACING": "true", "LANGSMITH_ENDPOINT": server.url,
                                    "LANGSMITH_API_KEY": "lsv2-test", "LANGSMITH_PROJECT": "mucutlass-test"})
        assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
        runs = server.runs()
    root = [r for r in runs.values() if not r.get("parent_run_id")]
    assert len(root) == 1
    root = root[0]
    assert root["name"] == "optimize linear_relu"
    assert {"tier:fake", "policy:sol", "backend:interpreter"} <= set(root.get("tags") or [])
    meta = root["extra"]["metadata"]
    assert meta["tier"] == "fake" and meta["policy"] == "sol" and meta["problem"] == "linear_relu"
    names = [r.get("name") for r in runs.values()]
    for node in ("planner", "dsl_writer", "compiler", "validator", "profiler", "sol_judge"):
        assert node in names, node
    writes = {r["name"]: r for r in runs.values() if str(r.get("name", "")).startswith("write attempt")}
    assert set(writes) == {"write attempt 1", "write attempt 2"}
    assert writes["write attempt 2"]["extra"]["metadata"]["attempt"] == 2
    assert writes["write attempt 2"]["extra"]["metadata"]["tier"] == "fake"
    # metadata set on the root is inherited by every run of the tree
    assert all((r.get("extra") or {}).get("metadata", {}).get("problem") == "linear_relu" for r in runs.values())


def test_nothing_is_sent_without_tracing(tmp_path):
    with MockLangSmith() as server:
        out = run_script(tmp_path, {"LANGSMITH_ENDPOINT": server.url, "LANGSMITH_API_KEY": "lsv2-test"})
        assert out.returncode == 0, out.stderr[-2000:]
        assert server.requests == []
