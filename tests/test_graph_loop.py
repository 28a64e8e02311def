"""The graph loop end to end with scripted chat models and fake libraries: error round trip to the
writer, the best kept, a stop for each policy reason, token totals, the run directory."""

from __future__ import annotations

import csv
import json

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from graph.context import RunContext
from graph.runner import run_optimize
from nodes.playback import PlaybackTier
from nodes.tiers import ChatTier, TierSpec
from test_graph_fakes import BROKEN, GOOD, JUDGE_FAILS, SLOW, WRONG, TextTrackingServices, reply, write_problem


class RecordingChat(GenericFakeChatModel):
    seen: list = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seen.append([m.content for m in messages])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def chat_tier(*programs, price_in=1.0, price_out=4.0):
    chat = RecordingChat(messages=iter([reply(p) for p in programs]), seen=[])
    spec = TierSpec(name="fake", model="fake-model", price_in_per_mtok=price_in, price_out_per_mtok=price_out)
    return ChatTier(chat, spec), chat


def run(tmp_path, tier, policy="fixed", max_attempts=3, **kw):
    services = TextTrackingServices()
    ctx = RunContext(tier="fake", policy=policy, max_attempts=max_attempts, backend="interpreter",
                     tier_impl=tier, services=services, **kw)
    events = []
    summary = run_optimize(write_problem(tmp_path), ctx, tmp_path / "run", on_event=events.append)
    return summary, services, events


def test_loop_error_round_trip_best_and_tokens(tmp_path):
    tier, chat = chat_tier(BROKEN, SLOW, GOOD)
    summary, services, events = run(tmp_path, tier)
    a = summary.attempts
    assert [x.reached for x in a] == ["write", "done", "done"]
    assert not a[0].compile_ok and a[0].failure_reason.startswith("check: w is not declared")
    d = a[0].diagnostics[0]  # a value with its location, rendered only into the prompt
    assert d.code == "undefined-name" and (d.span.line, d.span.column) == (3, 21)
    assert "program.mcu:3:21: error[undefined-name]" in chat.seen[1][1]
    # the writer's next prompt carries the diagnostic and its fix hint
    assert "error[undefined-name]" in chat.seen[1][1] and "declare it" in chat.seen[1][1]
    assert "error[undefined-name]" not in chat.seen[0][1]
    # a last answer that did not check is shown as written; the best program as its canonical text
    assert "# The last program: edit it\n```mcu\n" + BROKEN.strip() + "\n```" in chat.seen[1][1]
    assert "# The best program so far: edit it\n```mcu\nprogram p\n\ninput x: f32[16, 64]\n\nkernel k" in chat.seen[2][1]
    # the writer's system prompt asks for one ```mcu block
    assert "```mcu" in chat.seen[0][0]
    assert a[1].correct and a[1].t_us == 80.0 and a[1].improved
    assert a[2].t_us == 12.0 and a[2].improved and a[2].sol_fraction == 10.0 / 12.0
    assert a[2].speedup_vs_eager_tf32 == 50.0 / 12.0 and a[2].precision == "tf32"
    assert summary.best_index == 3 and summary.best_t_us == 12.0
    assert summary.stop_reason.startswith("fixed: 3 of 3")
    # tokens: every call counted, with cost at the tier's prices
    assert (summary.tokens_in, summary.tokens_out) == (3000, 600)
    assert abs(summary.cost_usd - (3000 * 1.0 + 600 * 4.0) / 1e6) < 1e-12
    assert summary.tokens_by_model["fake-model"]["calls"] == 3
    # setup happens once per run, not once per node or attempt
    assert services.calls["problem"] == 1 and services.calls["sol"] == 1 and services.calls["reference"] == 1
    # events: one per attempt, in order, with progress numbers
    att = [e for e in events if e["event"] == "attempt"]
    assert [e["index"] for e in att] == [1, 2, 3] and att[-1]["of"] == 3
    assert att[-1]["best_speedup"] == 50.0 / 12.0 and att[-1]["headroom"] == 1.2
    assert events[-1]["event"] == "done"


def test_run_directory(tmp_path):
    tier, _ = chat_tier(BROKEN, SLOW, GOOD)
    summary, _, _ = run(tmp_path, tier)
    run_dir = tmp_path / "run"
    assert (run_dir / "best.mcu").read_text() == GOOD
    data = json.loads((run_dir / "summary.json").read_text())
    assert data["best_index"] == 3 and data["attempts"] == 3 and data["headroom"] == 1.2
    assert 0 <= data["graph_overhead_s"] <= data["wall_s"]
    rows = list(csv.DictReader(open(run_dir / "attempts.csv")))
    assert [r["index"] for r in rows] == ["1", "2", "3"] and rows[2]["t_us"] == "12.0"
    assert len(json.loads((run_dir / "attempts.json").read_text())) == 3
    assert (run_dir / "checkpoints.sqlite").is_file() and (run_dir / "run.json").is_file()


def test_wrong_result_goes_back_to_the_writer(tmp_path):
    tier, chat = chat_tier(WRONG, GOOD)
    summary, _, _ = run(tmp_path, tier, max_attempts=2)
    assert summary.attempts[0].failure_reason.startswith("validate: max abs error 3.5")
    assert "wrong result" in chat.seen[1][1]
    assert summary.best_index == 2


def test_an_attempt_says_whether_the_program_or_the_judge_failed(tmp_path):
    """The verdict's rule travels with a rejected attempt, and the judge's own failure is told apart from it (a
    table of fallbacks counts it as the judge's, not the program's), whatever its reason's wording."""
    tier, _ = chat_tier(WRONG, JUDGE_FAILS, GOOD)
    summary, _, _ = run(tmp_path, tier, max_attempts=3)
    wrong, judged, good = summary.attempts
    assert (wrong.failure_rule, wrong.judge_failed) == ("mismatch", False)
    assert judged.judge_failed and judged.failure_rule is None and "the judge failed" in judged.failure_reason
    assert not good.judge_failed and good.failure_rule is None and summary.best_index == 3


def test_sol_stop(tmp_path):
    tier, _ = chat_tier(SLOW, GOOD, GOOD, GOOD)
    summary, _, _ = run(tmp_path, tier, policy="sol", max_attempts=4, eps=0.5)
    assert len(summary.attempts) == 2 and summary.stop_reason.startswith("sol:")


def test_plateau_stop(tmp_path):
    tier, _ = chat_tier(GOOD, SLOW, SLOW, SLOW, SLOW)
    summary, _, _ = run(tmp_path, tier, policy="plateau", max_attempts=5, plateau_window=2)
    assert len(summary.attempts) == 3 and summary.stop_reason.startswith("plateau: 2")


def test_sol_plus_plateau_stops_on_sol(tmp_path):
    tier, _ = chat_tier(GOOD, SLOW, SLOW)
    summary, _, _ = run(tmp_path, tier, policy="sol+plateau", max_attempts=3, eps=0.5, plateau_window=5)
    assert len(summary.attempts) == 1 and summary.stop_reason.startswith("sol:")


def test_token_budget_stop(tmp_path):
    tier, _ = chat_tier(SLOW, SLOW, SLOW, SLOW)
    summary, _, _ = run(tmp_path, tier, policy="tokens", max_attempts=4, token_budget=2400)
    assert len(summary.attempts) == 2 and summary.stop_reason.startswith("tokens: 2400 of 2400")


def test_failures_to_the_cap_end_the_run(tmp_path):
    tier, _ = chat_tier(BROKEN, BROKEN)
    summary, _, _ = run(tmp_path, tier, policy="sol", max_attempts=2)
    assert len(summary.attempts) == 2 and summary.best_index is None
    assert summary.stop_reason.startswith("fixed: 2 of 2")
    assert not (tmp_path / "run" / "best.mcu").exists()


def test_malformed_reply_is_one_failed_attempt(tmp_path):
    from langchain_core.messages import AIMessage

    chat = RecordingChat(messages=iter([AIMessage(content="I cannot help with that."), reply(GOOD)]), seen=[])
    summary, _, _ = run(tmp_path, ChatTier(chat, TierSpec(name="fake", model="m")), max_attempts=2)
    assert summary.attempts[0].failure_reason.startswith("write: the reply had no program")
    assert summary.best_index == 2


def test_tier_exception_is_one_failed_attempt(tmp_path):
    class Exploding:
        name = "exploding"

        def write(self, request):
            raise RuntimeError("endpoint unreachable")

    summary, _, _ = run(tmp_path, Exploding(), max_attempts=2)
    assert [a.failure_reason for a in summary.attempts] == ["write: tier failed: RuntimeError: endpoint unreachable"] * 2


def test_playback_tier(tmp_path):
    progs = tmp_path / "progs"
    progs.mkdir()
    for i, text in enumerate([BROKEN, SLOW, GOOD]):
        (progs / f"{i:02d}.mcu").write_text(text)
    summary, _, _ = run(tmp_path, PlaybackTier(progs), max_attempts=4)
    assert [a.program_text for a in summary.attempts] == [BROKEN, SLOW, GOOD, GOOD]
    assert summary.tokens_in == 0 and summary.best_index == 3


def test_attempt_events_carry_the_full_record_and_render(tmp_path):
    import io

    from rich.console import Console

    from graph.events import rich_printer
    from run_vocabulary.records import AttemptRecord

    tier, _ = chat_tier(BROKEN, GOOD)
    summary, _, events = run(tmp_path, tier, max_attempts=2)
    records = [AttemptRecord.model_validate(e["record"]) for e in events if e["event"] == "attempt"]
    assert records == summary.attempts
    buf = io.StringIO()
    show = rich_printer(Console(file=buf, width=200, color_system=None))
    for e in events:
        show(e)
    text = buf.getvalue()
    assert "attempt 1/2" in text and "check: w is not declared" in text
    assert "attempt 2/2" in text and "new best" in text and "best 4.17x headroom 1.20x tokens 2400" in text
    assert "stop: fixed: 2 of 2" in text and text.rstrip().splitlines()[-1].startswith("done: best 12 us")


def test_faster_than_light_is_flagged_and_never_best(tmp_path):
    too_fast = GOOD.replace("# t_us = 12", "# t_us = 5")  # t_SOL is 10 us
    tier, _ = chat_tier(SLOW, too_fast)
    summary, _, _ = run(tmp_path, tier, max_attempts=2)
    flagged = summary.attempts[1]
    assert flagged.correct and flagged.t_us == 5.0 and not flagged.improved
    assert flagged.flags and flagged.flags[0].startswith("sol_ceiling")
    assert summary.best_index == 1 and summary.best_t_us == 80.0


def test_the_judges_flags_survive_the_sol_judge():
    """A result the validator or the profiler flagged (pytorch_only: cuBLAS did the work) keeps its flag
    through the SOL judge, and a flagged result is never the run's best."""
    from run_vocabulary.records import AttemptRecord
    from graph.attempts import judge

    attempt = AttemptRecord(index=1, correct=True, t_us=50.0, flags=["pytorch_only: 98% of the GPU time in cuBLAS"])
    done = judge({"sol": {"t_sol_us": 10.0}, "reference_us": {"eager_fp32": 100.0}}, attempt, 0.0, [])
    record = done["attempts"][-1]
    assert record["flags"] == ["pytorch_only: 98% of the GPU time in cuBLAS"] and not record["improved"]
    done = judge({"sol": {"t_sol_us": 10.0}}, attempt, 0.0, ["sol_ceiling: faster than light"])
    assert done["attempts"][-1]["flags"] == ["pytorch_only: 98% of the GPU time in cuBLAS", "sol_ceiling: faster than light"]


def test_ceiling_uses_the_bound_of_the_precision_used():
    from graph.attempts import ceiling_bound_us

    sol = {"t_sol_us": 10.0, "per_precision": {"tf32": {"t_sol_us": 10.0}, "bf16": {"t_sol_us": 5.0}}}
    assert ceiling_bound_us(sol, "tf32") == 10.0
    assert ceiling_bound_us(sol, "bf16") == 5.0
    assert ceiling_bound_us(sol, "bf16,tf32") == 5.0  # the narrowest precision bounds the program
    assert ceiling_bound_us(sol, "f8") == 10.0 and ceiling_bound_us(sol, None) == 10.0
    assert ceiling_bound_us({"t_sol_us": 7.0}, "bf16") == 7.0


def test_a_run_closes_only_services_it_made(tmp_path):
    class Counting(TextTrackingServices):
        closed = 0

        def close(self):
            type(self).closed += 1
            super().close()

    services = Counting()
    tier, _ = chat_tier(GOOD)
    ctx = RunContext(tier="fake", policy="fixed", max_attempts=1, backend="interpreter", tier_impl=tier,
                     services=services)
    run_optimize(write_problem(tmp_path), ctx, tmp_path / "run")
    assert Counting.closed == 0  # the caller's services (an evaluation's shared harness) stay open
    assert RunContext(backend="interpreter")._owns_services and not ctx._owns_services
