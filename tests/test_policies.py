"""The budgeting policies are pure functions of the history: each rule fires exactly when it should."""

import math

import pytest

from run_vocabulary.policies import (
    POLICY_NAMES,
    PolicySettings,
    ProblemBudget,
    mark_improvements,
    next_problem,
    reference_beaten,
    schedule_attempts,
    should_stop,
    stop_index,
)
from run_vocabulary.records import AttemptRecord


def attempt(i, t_us=None, correct=True, tokens=0, flags=()):
    return AttemptRecord(index=i, t_us=t_us, correct=correct and t_us is not None, tokens_in=tokens, tokens_out=0,
                         flags=list(flags))


REF = {"eager_fp32": 100.0, "eager_tf32": 50.0}


def test_fixed_stops_at_cap_for_every_policy():
    s = PolicySettings(max_attempts=3)
    history = [attempt(i, None, correct=False) for i in range(1, 4)]
    for policy in POLICY_NAMES:
        stop, reason = should_stop(policy, history, 10.0, REF, s)
        assert stop and reason.startswith("fixed"), policy
        assert not should_stop(policy, history[:2], 10.0, REF, s)[0]


def test_sol_stop_needs_both_the_bound_and_the_reference():
    s = PolicySettings(eps=0.5, max_attempts=99)
    # within 1.5x of SOL (10 us) but not faster than the best reference (50 us): no stop
    assert should_stop("sol", [attempt(1, 14.0)], 10.0, {"eager_tf32": 12.0}, s) == (False, "")
    # within the bound and beats the reference
    stop, reason = should_stop("sol", [attempt(1, 14.0)], 10.0, REF, s)
    assert stop and reason.startswith("sol:")
    # beats the reference but too far from SOL
    assert not should_stop("sol", [attempt(1, 16.0)], 10.0, REF, s)[0]
    # a flagged (too fast) result does not count
    assert not should_stop("sol", [attempt(1, 1.0, flags=["sol_ceiling"])], 10.0, REF, s)[0]
    # baseline by name
    s2 = PolicySettings(eps=0.5, baseline="eager_fp32")
    assert should_stop("sol", [attempt(1, 14.0)], 10.0, {"eager_fp32": 20.0, "eager_tf32": 12.0}, s2)[0]


def test_plateau_counts_only_after_the_reference_is_beaten():
    s = PolicySettings(plateau_window=3, max_attempts=99)
    slow = [attempt(i, 200.0 - i) for i in range(1, 8)]  # improving but never beats 50 us
    assert not should_stop("plateau", slow, 1.0, REF, s)[0]
    flat_unbeaten = [attempt(1, 80.0)] + [attempt(i, 90.0) for i in range(2, 9)]
    assert not should_stop("plateau", flat_unbeaten, 1.0, REF, s)[0]
    h = [attempt(1, 80.0), attempt(2, 40.0), attempt(3, 41.0), attempt(4, 45.0)]
    assert not should_stop("plateau", h, 1.0, REF, s)[0]
    h.append(attempt(5, None, correct=False))
    stop, reason = should_stop("plateau", h, 1.0, REF, s)
    assert stop and reason.startswith("plateau: 3")
    # a gain resets the window
    h2 = h[:4] + [attempt(5, 30.0), attempt(6, 31.0)]
    assert not should_stop("plateau", h2, 1.0, REF, s)[0]


def test_min_gain_makes_tiny_improvements_not_count():
    h = [attempt(1, 40.0), attempt(2, 39.9), attempt(3, 30.0)]
    assert mark_improvements(h) == [True, True, True]
    assert mark_improvements(h, min_gain=0.01) == [True, False, True]


def test_sol_plus_plateau_fires_on_either():
    s = PolicySettings(eps=0.1, plateau_window=2, max_attempts=99)
    h = [attempt(1, 40.0), attempt(2, 41.0), attempt(3, 42.0)]
    assert should_stop("sol+plateau", h, 1.0, REF, s)[1].startswith("plateau")
    assert should_stop("sol+plateau", [attempt(1, 1.05)], 1.0, REF, s)[1].startswith("sol")
    assert not should_stop("sol+plateau", h[:2], 1.0, REF, s)[0]


def test_token_budget():
    s = PolicySettings(token_budget=1000, max_attempts=99)
    assert not should_stop("tokens", [attempt(1, 5.0, tokens=600)], 1.0, REF, s)[0]
    stop, reason = should_stop("tokens", [attempt(1, 5.0, tokens=600), attempt(2, None, tokens=400)], 1.0, REF, s)
    assert stop and "1000 of 1000" in reason


def test_unknown_policy_is_a_clear_error():
    with pytest.raises(ValueError, match="expected one of"):
        should_stop("greedy", [], 1.0, REF)


def test_no_reference_means_any_correct_result_counts():
    assert reference_beaten(5.0, {})
    assert not reference_beaten(None, {})
    assert not reference_beaten(60.0, REF)


def test_stop_index_replays_a_log():
    s = PolicySettings(eps=0.5, plateau_window=2, max_attempts=40)
    log = [attempt(1, 300.0), attempt(2, 45.0), attempt(3, 20.0), attempt(4, 14.0), attempt(5, 12.0)]
    assert stop_index("sol", log, 10.0, REF, s)[0] == 4
    assert stop_index("fixed", log, 10.0, REF, s) == (5, "")


def test_scheduler_prefers_headroom():
    probs = [
        ProblemBudget("near", t_sol_us=10.0, t_best_us=20.0, attempts_used=3),
        ProblemBudget("far", t_sol_us=10.0, t_best_us=80.0, attempts_used=3),
        ProblemBudget("done", t_sol_us=10.0, t_best_us=500.0, attempts_used=3, done=True),
    ]
    assert next_problem(probs, max_attempts_each=40) == "far"
    assert next_problem(probs, max_attempts_each=3) is None
    grants = schedule_attempts(probs, total_attempts=3, max_attempts_each=40)
    assert grants == {"near": 0, "far": 3, "done": 0}  # far: 80 -> 45 -> 27.5 -> 18.75, all above near's 20
    grants = schedule_attempts(probs, total_attempts=4, max_attempts_each=40)
    assert grants == {"near": 1, "far": 3, "done": 0}
    assert schedule_attempts(probs, total_attempts=9, max_attempts_each=5) == {"near": 2, "far": 2, "done": 0}


def test_scheduler_gives_unmeasured_problems_a_first_attempt():
    probs = [ProblemBudget("new", t_sol_us=10.0), ProblemBudget("far", t_sol_us=10.0, t_best_us=1000.0)]
    assert math.isinf(probs[0].headroom)
    grants = schedule_attempts(probs, total_attempts=2, max_attempts_each=40)
    assert grants == {"new": 1, "far": 1}


def test_stop_reason_is_the_one_decision_and_a_writer_with_nothing_left_ends_every_policy():
    from run_vocabulary.policies import stop_reason

    settings = PolicySettings(max_attempts=3)
    short = [attempt(1, 50.0)]
    assert stop_reason("fixed", short, 10.0, {"eager_fp32": 100.0}, settings) == ""
    assert stop_reason("fixed", short * 3, 10.0, {}, settings).startswith("fixed: 3 of 3")
    for policy in ("fixed", "sol", "plateau", "sol+plateau", "tokens"):
        assert stop_reason(policy, short, 10.0, {}, settings, nothing_left="offline") == \
            "out_of_ideas: the offline tier has no distinct program left to try after 1 attempt(s) of 3"
