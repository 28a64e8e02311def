"""Replay of a hand-made log (tests/data/eval/budget_log.json) under the paper's stop rules.

P1: t_SOL 10 us, references 100/50/40 us (best 40); times per attempt:
    fail, 60, 30, 32, 18, 25, 26, 24, 12, 15; 1000 tokens each.
P2: t_SOL 5 us, references 50/20/25 us (best 20); times 12, 8, 9, 9.5, 7, 6; 500 tokens each.
"""

import json
import math
from pathlib import Path

import pytest

from evals.replay import ReplayError, policy_grid, replay, replay_run, replay_table_markdown
from run_vocabulary.policies import PolicySettings, parse_policy
from run_vocabulary.records import RunSummary

LOG = Path(__file__).parent / "data" / "eval" / "budget_log.json"


@pytest.fixture
def logs():
    return [RunSummary.model_validate(d) for d in json.loads(LOG.read_text())]


def _row(result, label):
    return next(r for r in result.rows if r.setting.label == label)


def test_sol_stop_points_and_savings(logs):
    result = replay(logs, policy_grid(["sol"], [1.0, 2.5], []))
    loose = _row(result, "sol:eps=2.5")
    # P1: attempt 3 (30 us) beats 40 us and 30 <= 3.5 * 10; P2: attempt 1 (12 us) beats 20 and 12 <= 17.5
    assert loose.stops == {"P1": 3, "P2": 1}
    assert loose.attempts_saved == pytest.approx(1 - 4 / 16)
    assert loose.tokens_saved == pytest.approx(1 - 3500 / 13000)
    g_fixed = math.sqrt((100 / 12) * (50 / 6))
    g_policy = math.sqrt((100 / 30) * (50 / 12))
    assert loose.geomean_fixed == pytest.approx(g_fixed)
    assert loose.geomean_policy == pytest.approx(g_policy)
    assert loose.retention == pytest.approx(g_policy / g_fixed)
    assert loose.efficiency_gain == pytest.approx(g_policy / g_fixed * 13000 / 3500)
    assert loose.efficiency_unit == "tokens"

    tight = _row(result, "sol:eps=1")
    # P1: 18 us <= 20 at attempt 5; P2: 8 us <= 10 at attempt 2
    assert tight.stops == {"P1": 5, "P2": 2}
    assert tight.retention == pytest.approx(math.sqrt((100 / 18) * (50 / 8)) / g_fixed)


def test_plateau_and_combined(logs):
    result = replay(logs, policy_grid(["plateau", "sol+plateau"], [1.0], [3]))
    # P1: last gain at attempt 5, then 25, 26, 24 -> three without gain; P2 keeps improving to the end
    assert _row(result, "plateau:w=3").stops == {"P1": 8, "P2": 6}
    assert _row(result, "sol+plateau:eps=1:w=3").stops == {"P1": 5, "P2": 2}
    assert _row(result, "plateau:w=3").stopped_early == 1


def test_replayed_run_is_the_cut_log(logs):
    cut = replay_run(logs[0], "sol", PolicySettings(max_attempts=10, eps=2.5))
    assert [a.index for a in cut.attempts] == [1, 2, 3]
    assert cut.best_index == 3 and cut.best_t_us == 30.0
    assert (cut.tokens_in, cut.tokens_out) == (2400, 600)
    assert cut.policy == "sol" and cut.stop_reason.startswith("sol:")


def test_table_and_errors(logs):
    text = replay_table_markdown(replay(logs, policy_grid(["sol"], [2.5], [])))
    assert "| mini | dsl+sol | sol:eps=2.5 | 2/2 | 4/16 | 75.0% | 73.1% |" in text
    with pytest.raises(ReplayError, match="unknown policy"):
        policy_grid(["soll"], [1.0], [4])
    with pytest.raises(ReplayError, match="token-budget"):
        policy_grid(["tokens"], [], [])
    with pytest.raises(ReplayError, match="no finished runs"):
        replay([], policy_grid(["sol"], [1.0], []))


def test_the_grid_names_its_points_as_a_live_evaluation_does(logs):
    """Replay and live runs parse one way: a bare name crosses the grid flags, a policy written with its
    parameters is one point, and every point's label is the one `mucutlass eval --policies` keys its runs by."""
    grid = policy_grid(["sol:eps=2.5", "plateau", "tokens"], [1.0], [3, 4], [1_000_000])
    assert [c.label for c in grid] == ["sol:eps=2.5", "plateau:w=3", "plateau:w=4", "tokens:tokens=1000000"]
    assert [parse_policy(c.label) for c in grid] == grid  # a label reads back as its point
    result = replay(logs, grid[:1])
    assert _row(result, "sol:eps=2.5").stops == {"P1": 3, "P2": 1}  # as policy_grid(["sol"], [2.5]) gives
    assert result.model_dump()["rows"][0]["setting"] == {"label": "sol:eps=2.5", "policy": "sol", "parameters": {"eps": 2.5}}
    with pytest.raises(ReplayError, match="the plateau policy takes w, not 'eps'"):
        policy_grid(["plateau:eps=1"], [], [])
    with pytest.raises(ReplayError, match="w must be a whole number of at least 1"):
        policy_grid(["plateau"], [], [0])
