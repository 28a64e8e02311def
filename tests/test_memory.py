"""Memory across problems: each attempt's note (hypothesis, expected gain, result, why) goes into a
LangGraph store under (tier, variant); the writer of a later problem of the same evaluation reads the
most relevant notes (same op family, same bound first). Off for single runs, on for eval."""

from __future__ import annotations

import sqlite3

from evals.executors import LocalExecutor
from run_vocabulary.records import AttemptRecord
from evals.runner import MEMORY_FILE, EvalConfig, run_evaluation
from graph import memory
from graph.context import RunContext
from graph.runner import run_optimize
from nodes.tiers import ChatTier, TierSpec
from test_graph_fakes import BROKEN, GOOD, SLOW, TextTrackingServices, reply, write_problem
from test_graph_loop import RecordingChat

NOTES_HEADING = "# Notes from attempts on earlier problems"


def test_op_family_and_recall_order():
    from langgraph.store.memory import InMemoryStore

    assert memory.op_family("self.fc = nn.Linear(4, 4)") == "gemm"
    assert memory.op_family("y = torch.bmm(a, b)") == "gemm"
    assert memory.op_family("self.conv = nn.Conv2d(3, 8, 3)") == "conv"
    assert memory.op_family("return torch.softmax(x, -1)") == "other"
    store = InMemoryStore()
    ns = memory.namespace("t", "dsl")

    def note(problem, family, bound, title, **kw):
        a = AttemptRecord(index=1, hypothesis=title, **{"reached": "done", **kw})
        memory.remember(store, ns, "r", problem, family, bound, [a], [{"title": title, "expected_gain": 2.0}], 0)

    note("p_mem", "gemm", "memory", "merge kernels", correct=True, t_us=9.0, improved=True)
    note("p_cmp_fail", "gemm", "compute", "bf16 operands", reached="compile", failure_reason="validate: mismatch",
         diagnostics=["wrong result: max abs error 0.3 > 0.01"])
    note("p_cmp_best", "gemm", "compute", "tf32 math", correct=True, t_us=5.0, improved=True,
         speedup_vs_eager_fp32=4.2)
    note("p_conv", "conv", "compute", "tile 128x128x64", correct=True, t_us=1.0, improved=True)
    note("me", "gemm", "compute", "my own attempt", correct=True, t_us=1.0, improved=True)
    notes = memory.recall(store, ns, "gemm", "compute", problem="me")
    assert [n.split(":")[0] for n in notes] == ["p_cmp_best (compute-bound)", "p_cmp_fail (compute-bound)",
                                               "p_mem (memory-bound)"]
    assert notes[0] == ("p_cmp_best (compute-bound): tf32 math (expected 2x) -> 5 us, 4.20x over eager fp32; "
                        "new best")
    assert notes[1].endswith("bf16 operands (expected 2x) -> failed at compile; wrong result: max abs error 0.3 > 0.01")
    # another variant (or tier) has its own memory
    assert memory.recall(store, memory.namespace("t", "dsl+sol"), "gemm", "compute", problem="me") == []


def test_single_runs_keep_no_memory_by_default(tmp_path):
    chat = RecordingChat(messages=iter([reply(SLOW), reply(GOOD)]), seen=[])
    ctx = RunContext(tier="fake", policy="fixed", max_attempts=2, backend="interpreter",
                     tier_impl=ChatTier(chat, TierSpec(name="fake", model="m")), services=TextTrackingServices())
    summary = run_optimize(write_problem(tmp_path), ctx, tmp_path / "run")
    assert summary.best_index == 2 and not ctx.memory
    assert all(NOTES_HEADING not in user for _, user in chat.seen)


def _problem_files(tmp_path):
    paths = {}
    for name in ("first", "second"):
        path = write_problem(tmp_path).rename(tmp_path / f"{name}.py")  # two Linear + ReLU problems: gemm family
        paths[f"mini/{name}"] = str(path)
    return paths


def _eval(tmp_path, out, memory_on: bool, chats: list):
    paths = _problem_files(tmp_path)

    def run_fn(spec, on_event=None):
        # graph.runner.run_spec with fakes of the libraries and a scripted model per run
        chat = RecordingChat(messages=iter([reply(BROKEN), reply(SLOW), reply(GOOD)]), seen=[])
        chats.append((spec.problem, chat))
        ctx = RunContext(tier=spec.tier, policy=spec.policy, variant=spec.variant, max_attempts=spec.max_attempts,
                         backend=spec.backend, memory=spec.memory_path is not None, memory_path=spec.memory_path,
                         tier_impl=ChatTier(chat, TierSpec(name=spec.tier, model="m")), services=TextTrackingServices())
        return run_optimize(spec.problem_path, ctx, spec.run_dir, on_event)

    config = EvalConfig(source={"suite": "mini"}, problems=list(paths), tiers=["fake"], variants=["dsl"],
                        memory=memory_on, policies=["fixed"], max_attempts=3, backend="interpreter")
    return run_evaluation(config, paths, out, executor=LocalExecutor(1), run_fn=run_fn, environment={},
                          show_progress=False, write_outputs=False)


def test_memory_written_and_recalled_across_two_problems_of_an_eval(tmp_path):
    chats: list = []
    out = tmp_path / "ev"
    outcome = _eval(tmp_path, out, True, chats)
    assert outcome.ran == 2 and not outcome.failed
    [(p1, first), (p2, second)] = chats
    assert (p1, p2) == ("mini/first", "mini/second")
    # the first problem starts with an empty memory
    assert all(NOTES_HEADING not in user for _, user in first.seen)
    # the second problem's writer reads the first one's notes: what worked, and what failed and why
    user = second.seen[0][1]
    assert NOTES_HEADING in user
    notes = user.split(NOTES_HEADING, 1)[1].split("# Attempt", 1)[0]
    assert "- first (compute-bound): a faster program (expected 1x) -> 12 us, 8.33x over eager fp32; new best" in notes
    assert "- first (compute-bound): repair: a first correct program -> 80 us, 1.25x over eager fp32; new best" in notes
    assert "failed at write; program.mcu:3:21: error[undefined-name]: w is not declared" in notes
    # the notes are in the evaluation's folder, under (tier, variant), one per attempt of both problems
    rows = sqlite3.connect(out / MEMORY_FILE).execute("SELECT prefix FROM store").fetchall()
    assert len(rows) == 6 and {r[0] for r in rows} == {"memory.fake.dsl"}


def test_no_memory_eval_writes_and_reads_nothing(tmp_path):
    chats: list = []
    out = tmp_path / "ev"
    _eval(tmp_path, out, False, chats)
    assert all(NOTES_HEADING not in user for _, chat in chats for _, user in chat.seen)
    assert not (out / MEMORY_FILE).exists()
