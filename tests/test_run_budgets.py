"""Hard budgets (dollars, tokens, minutes) of a run and of an evaluation, a writer out of ideas, and what the
report shows of spend: a fake chat model with token counts drives the graph; a fake run function the runner."""

from __future__ import annotations

import json
import sqlite3

import pytest

from graph.runner import resume_run
from run_vocabulary.budgets import Budget, Spend, budget_stop
from run_vocabulary.records import AttemptRecord, RunSummary
from test_graph_fakes import GOOD, SLOW, TextTrackingServices
from test_graph_loop import chat_tier, run

# every reply of the fake chat model: 1000 tokens in, 200 out; at $1 / $4 per million, $0.0018 an attempt
TOKENS_PER_ATTEMPT = 1200


def test_a_token_budget_stops_the_run_between_attempts_and_keeps_the_best(tmp_path):
    tier, chat = chat_tier(SLOW, GOOD, SLOW, SLOW, SLOW, SLOW)
    summary, _, events = run(tmp_path, tier, max_attempts=6, budget_tokens=3000)
    # 2400 tokens after two attempts is within 3000; the third (never cut mid-way) reaches 3600
    assert len(summary.attempts) == 3 and len(chat.seen) == 3
    assert summary.stop_reason == "budget_tokens: 3600 tokens spent of the run's 3000"
    assert summary.best_index == 2 and (tmp_path / "run" / "best.mcu").read_text() == GOOD
    data = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert data["stop_reason"].startswith("budget_tokens") and data["budgets"] == {"budget_tokens": 3000}
    assert [e for e in events if e["event"] == "stop"][-1]["reason"].startswith("budget_tokens")
    writer = summary.spend_by_node["writer"]
    assert (writer["tokens_in"], writer["tokens_out"], writer["calls"]) == (3000, 600, 3)
    assert summary.spend_by_node["planner"]["calls"] == 3 and summary.spend_by_node["planner"]["tokens_in"] == 0


def test_a_dollar_budget_counts_tokens_at_the_tiers_prices(tmp_path):
    tier, _ = chat_tier(SLOW, GOOD, SLOW, SLOW)
    summary, _, _ = run(tmp_path, tier, max_attempts=4, budget_usd=0.004)
    assert len(summary.attempts) == 3 and summary.stop_reason.startswith("budget_usd: $0.0054 spent of the run's $0.004")
    assert summary.best_index == 2


def test_resume_after_a_budget_stop(tmp_path):
    tier, _ = chat_tier(SLOW, SLOW, SLOW, SLOW, SLOW, SLOW)
    first, _, _ = run(tmp_path, tier, max_attempts=6, budget_tokens=2000)
    assert len(first.attempts) == 2 and first.stop_reason.startswith("budget_tokens")

    same, chat = chat_tier(GOOD, GOOD)
    again = resume_run(tmp_path / "run", tier_impl=same, services=TextTrackingServices())
    assert again.stop_reason == first.stop_reason and len(again.attempts) == 2 and chat.seen == []

    more, chat = chat_tier(GOOD, SLOW, SLOW, SLOW)
    raised = resume_run(tmp_path / "run", tier_impl=more, services=TextTrackingServices(),
                        budgets={"budget_tokens": 4000})
    assert len(chat.seen) == 2 and [a.index for a in raised.attempts] == [1, 2, 3, 4]
    assert raised.stop_reason == "budget_tokens: 4800 tokens spent of the run's 4000"
    assert raised.best_index == 3 and raised.tokens_in + raised.tokens_out == 4 * TOKENS_PER_ATTEMPT
    # the raised budget is the run's now: a later resume keeps it and stops at once
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["settings"]["budget_tokens"] == 4000
    idle, chat = chat_tier(GOOD)
    assert resume_run(tmp_path / "run", tier_impl=idle, services=TextTrackingServices()).stop_reason == \
        raised.stop_reason and chat.seen == []


def test_budget_settings_fall_back_on_the_environment_and_are_checked(monkeypatch):
    from run_vocabulary.settings import RunSettings

    monkeypatch.setenv("MUCUTLASS_BUDGET_TOKENS", "5000")
    monkeypatch.setenv("MUCUTLASS_BUDGET_USD", "1.5")
    settings = RunSettings()
    assert settings.budget == Budget(usd=1.5, tokens=5000, minutes=None)
    assert RunSettings.model_fields["budget_minutes"].description
    with pytest.raises(ValueError):
        RunSettings(budget_tokens=0)


def test_minutes_and_the_order_of_the_caps():
    assert budget_stop(Spend(seconds=89.0), Budget(minutes=1.5)) == ""
    assert budget_stop(Spend(seconds=90.0), Budget(minutes=1.5)) == "budget_minutes: 1.50 minutes spent of the run's 1.5"
    both = budget_stop(Spend(tokens=10, cost_usd=2.0), Budget(usd=1.0, tokens=5), "evaluation")
    assert both == "budget_usd: $2.0000 spent of the evaluation's $1"
    assert Budget(tokens=10, usd=1.0).left(Spend(tokens=4, cost_usd=2.0)) == Budget(usd=0.0, tokens=6)


def test_bad_budget_flags_are_usage_errors(capsys):
    from mucutlass.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["optimize", "--budget-tokens", "0"])
    assert exc.value.code == 2 and "must be a whole number above 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--suite", "smoke", "--eval-budget-usd", "nan"])
    assert exc.value.code == 2


class IdeasTier:
    """A writer with ``n`` distinct programs, then none."""

    name = "ideas"

    def __init__(self, programs):
        self.programs = list(programs)

    def write(self, request):
        from nodes.tier_types import WriterReply

        if request.attempt_index > len(self.programs):
            return WriterReply("", model="ideas", out_of_ideas=True, error="no distinct program left")
        return WriterReply(self.programs[request.attempt_index - 1], model="ideas")


def test_a_writer_out_of_ideas_stops_the_run_without_an_empty_attempt(tmp_path):
    summary, _, _ = run(tmp_path, IdeasTier([SLOW, GOOD]), max_attempts=6)
    assert len(summary.attempts) == 2 and summary.best_index == 2
    assert summary.stop_reason == "out_of_ideas: the ideas tier has no distinct program left to try after 2 attempt(s) of 6"


# ------------------------------------------------------------------------------------------------
# An evaluation's budget across problems


def budget_aware_run(spec, on_event=None):
    """500 tokens an attempt, 4 attempts at most; honours the run's token budget between attempts and keeps its
    attempts in its folder, as the graph's checkpoint does."""
    from pathlib import Path

    ckpt = Path(spec.run_dir) / "attempts.jsonl"
    attempts = [AttemptRecord.model_validate_json(x) for x in ckpt.read_text().splitlines()] if ckpt.exists() else []
    budget, why = Budget(tokens=spec.budget_tokens), ""
    while True:
        why = budget_stop(Spend(tokens=500 * len(attempts)), budget)
        if why or len(attempts) >= spec.max_attempts:
            break
        a = AttemptRecord(index=len(attempts) + 1, correct=True, t_us=100.0 / (len(attempts) + 1), reached="done",
                          tokens_in=400, tokens_out=100)
        attempts.append(a)
        with ckpt.open("a") as fh:
            fh.write(a.model_dump_json() + "\n")
    best = min(attempts, key=lambda a: a.t_us).index if attempts else None
    return RunSummary(problem=spec.problem, tier=spec.tier, policy=spec.policy, backend="interpreter", gpu="h200",
                      attempts=attempts, best_index=best, best_t_us=100.0 / best if best else None,
                      stop_reason=why or f"fixed: {len(attempts)} of {spec.max_attempts} attempts used",
                      tokens_in=400 * len(attempts), tokens_out=100 * len(attempts), work_s=0.5 * len(attempts),
                      budgets={"budget_tokens": spec.budget_tokens} if spec.budget_tokens else {},
                      spend_by_node={"writer": {"tokens_in": 400 * len(attempts), "tokens_out": 100 * len(attempts),
                                                "seconds": 0.6 * len(attempts), "cost_usd": 0.0}})


def _evaluate(tmp_path, **budgets):
    from evals.executors import LocalExecutor
    from evals.runner import EvalConfig, run_evaluation

    paths = {}
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text("# a problem\n")
        paths[name] = str(tmp_path / f"{name}.py")
    config = EvalConfig(source={"suite": "test"}, problems=list(paths), tiers=["offline"], policies=["fixed"],
                        max_attempts=4, **budgets)
    return run_evaluation(config, paths, tmp_path / "eval", executor=LocalExecutor(1), run_fn=budget_aware_run,
                          environment={}, show_progress=False)


def _stored(tmp_path):
    db = sqlite3.connect(tmp_path / "eval" / "results.sqlite")
    rows = db.execute("SELECT problem, status, summary_json FROM runs ORDER BY problem").fetchall()
    return {p: (status, json.loads(s) if s else None) for p, status, s in rows}


def test_an_evaluation_budget_spans_its_problems_and_resumes_when_raised(tmp_path):
    outcome = _evaluate(tmp_path, eval_budget_tokens=2500)
    stored = _stored(tmp_path)
    # a: all 4 attempts (2000 tokens); b: the 500 left, one attempt; c: nothing left, not started
    assert stored["a"][1]["stop_reason"].startswith("fixed: 4 of 4")
    assert stored["b"][1]["stop_reason"] == "budget_tokens: 500 tokens spent of the run's 500"
    assert "c" not in stored and outcome.unstarted == ["c [offline, dsl+sol, fixed]"]
    assert outcome.budget_stop == "budget_tokens: 2500 tokens spent of the evaluation's 2500"
    report = (tmp_path / "eval" / "report" / "report.md").read_text()
    assert "## Spend" in report and "| offline | 2 | 2500 | $0.0000 | 0.04 |" in report
    assert "| writer | 2 | 2500 | $0.0000 | 0.05 |" in report and "stopped on a budget" in report
    assert "![Attempt-Fast-p per policy](attempt_fast_p.png)" in report
    assert (tmp_path / "eval" / "report" / "attempt_fast_p.png").stat().st_size > 5000

    again = _evaluate(tmp_path, eval_budget_tokens=5000)
    stored = _stored(tmp_path)
    # b goes on from its one attempt (one run at a time: its 500 plus all 2500 left) to its cap; c gets the rest
    assert stored["b"][1]["budgets"] == {"budget_tokens": 3000} and len(stored["b"][1]["stop_reason"]) > 0
    assert stored["b"][1]["stop_reason"].startswith("fixed: 4 of 4")
    assert stored["c"][1]["stop_reason"] == "budget_tokens: 1000 tokens spent of the run's 1000"
    assert again.unstarted == [] and again.ran == 2


def test_a_per_run_budget_in_an_evaluation(tmp_path):
    _evaluate(tmp_path, budget_tokens=1000)
    stored = _stored(tmp_path)
    assert all(s[1]["stop_reason"] == "budget_tokens: 1000 tokens spent of the run's 1000" for s in stored.values())
    _evaluate(tmp_path, budget_tokens=5000)  # raised: each run goes on to its attempt cap
    assert all(s[1]["stop_reason"].startswith("fixed: 4 of 4") for s in _stored(tmp_path).values())


def test_attempt_fast_p_curves_and_their_picture(tmp_path):
    from evals import metrics
    from evals.report import plot_attempt_fast_p

    def summary(problem, policy, times):
        attempts = [AttemptRecord(index=i + 1, correct=t is not None, t_us=t, reached="done")
                    for i, t in enumerate(times)]
        return RunSummary(problem=problem, tier="offline", policy=policy, backend="interpreter", gpu="h200",
                          attempts=attempts)

    runs = [summary("x", "fixed", [100, 50, 40, 10]), summary("y", "fixed", [None, 20, 20, 20]),
            summary("x", "sol", [100, 50]), summary("y", "sol", [None, 20])]
    curves = metrics.attempt_fast_p(runs, p=0.95)
    # x reaches its final 10 us at attempt 4 under fixed, never under sol (it stopped at 50); y at attempt 2
    assert curves[("offline", "dsl+sol", "fixed")] == [0.0, 0.5, 0.5, 1.0]
    assert curves[("offline", "dsl+sol", "sol")] == [0.0, 0.5, 0.5, 0.5]
    assert metrics.attempt_fast_p(runs, p=0.2)[("offline", "dsl+sol", "sol")] == [0.0, 1.0, 1.0, 1.0]
    path = plot_attempt_fast_p(curves, 0.95, tmp_path / "attempt_fast_p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
