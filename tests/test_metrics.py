"""Metrics against values computed by hand."""

import math

import pytest

from evals import metrics
from evals.metrics import ProblemResult
from run_vocabulary.records import AttemptRecord, RunSummary


def _r(problem, correct, speedups=None, sol=None, flags=(), attempts=1, tokens=0, curve=None):
    return ProblemResult(
        problem=problem, tier="t", policy="fixed", correct=correct, speedups=speedups or {}, sol_fraction=sol,
        flags=list(flags), attempts=attempts, tokens=tokens,
        attempt_speedups={"eager_fp32": curve or [None] * attempts},
    )


@pytest.fixture
def results():
    return [
        _r("A", True, {"eager_fp32": 4.0, "eager_tf32": 2.0, "compile": 1.0}, sol=0.5, attempts=3, tokens=100,
           curve=[None, 1.5, 4.0]),
        _r("B", True, {"eager_fp32": 1.0, "eager_tf32": 0.5, "compile": 0.25}, sol=0.125, tokens=300, curve=[1.0]),
        _r("C", False, attempts=2, tokens=200),
        _r("D", True, {"eager_fp32": 16.0, "eager_tf32": 8.0, "compile": 8.0}, sol=1.5,
           flags=["sol_ceiling: 1.5x faster than the bound"], tokens=400),
    ]


def test_geomean_and_median_over_correct_unflagged(results):
    assert metrics.geomean_speedup(results, "eager_fp32") == pytest.approx(2.0)  # sqrt(4 * 1)
    assert metrics.geomean_speedup(results, "compile") == pytest.approx(0.5)  # sqrt(1 * 0.25)
    assert metrics.median_speedup(results, "eager_fp32") == pytest.approx(2.5)  # median(4, 1)
    assert metrics.geomean_sol_fraction(results) == pytest.approx(0.25)  # sqrt(0.5 * 0.125)


def test_fast_p_is_kernelbench_definition(results):
    # denominator: all 4 problems; C is wrong, D is flagged; "> p" is strict
    table = metrics.fast_p_table(results, "eager_fp32")
    assert table == {0.0: 0.5, 0.5: 0.5, 0.8: 0.5, 1.0: 0.25, 1.5: 0.25, 2.0: 0.25}
    assert metrics.fast_p(results, 2.0, "eager_tf32") == 0.0  # A is exactly 2.0x
    assert metrics.fast_p(results, 1.0, "eager_tf32") == 0.25
    assert metrics.fast_p([], 1.0, "eager_fp32") == 0.0


def test_fast_0_is_the_correctness_rate_without_timed_baselines():
    untimed = [_r("A", True), _r("B", True), _r("C", False)]  # a run without a GPU times no baseline
    assert metrics.fast_p(untimed, 0.0, "eager_fp32") == pytest.approx(2 / 3)
    assert metrics.fast_p(untimed, 0.5, "eager_fp32") == 0.0


def test_attempt_curve_counts_first_n_attempts(results):
    # >= 2x over eager_fp32: only A, from its third attempt; runs that stopped keep their best
    assert metrics.attempt_curve(results, "eager_fp32") == [0.0, 0.0, 0.25]
    assert metrics.attempt_curve(results, "eager_fp32", threshold=1.0) == [0.25, 0.5, 0.5]


def test_group_metrics_counts_flagged_beside_headline(results):
    g = metrics.group_metrics(results)
    assert (g.total, g.correct, g.flagged) == (4, 2, 1)
    assert g.geomean_speedup["eager_fp32"] == pytest.approx(2.0)
    # with the flagged result counted: cbrt(4 * 1 * 16) = 4
    assert g.geomean_speedup_with_flagged["eager_fp32"] == pytest.approx(4.0)
    assert (g.attempts, g.tokens) == (7, 1000)
    assert g.spend_unit == "tokens"


def test_efficiency_gain_and_retention():
    assert metrics.retention(1.9, 2.0) == pytest.approx(0.95)
    # the paper's best point: 96% kept, 43% of tokens saved -> 0.96 / 0.57 = 1.684
    assert metrics.efficiency_gain(0.96, 1.0, 57, 100) == pytest.approx(1.6842, abs=1e-4)
    assert metrics.efficiency_gain(None, 2.0, 1, 1) is None
    assert metrics.efficiency_gain(1.0, 2.0, 0, 10) is None


def test_compare_to_fixed_uses_attempts_without_tokens():
    fixed = metrics.group_metrics([_r("A", True, {"eager_fp32": 4.0}, attempts=10),
                                   _r("B", True, {"eager_fp32": 1.0}, attempts=10)])
    policy = metrics.group_metrics([_r("A", True, {"eager_fp32": 2.0}, attempts=4),
                                    _r("B", True, {"eager_fp32": 1.0}, attempts=6)])
    c = metrics.compare_to_fixed(policy, fixed)
    assert c.spend_unit == "attempts"
    assert c.retention == pytest.approx(math.sqrt(2) / 2)  # sqrt(2*1) / sqrt(4*1)
    assert c.attempts_saved == pytest.approx(0.5)
    assert c.efficiency_gain == pytest.approx(math.sqrt(2) / 2 * 20 / 10)


def test_result_from_summary_takes_the_kept_attempt():
    attempts = [
        AttemptRecord(index=1, correct=True, t_us=50.0, speedup_vs_eager_fp32=2.0, sol_fraction=0.2, tokens_in=10),
        AttemptRecord(index=2, correct=False, tokens_in=10),
        AttemptRecord(index=3, correct=True, t_us=5.0, speedup_vs_eager_fp32=20.0, sol_fraction=2.0,
                      flags=["sol_ceiling: faster than physically possible"]),
    ]
    s = RunSummary(problem="p", tier="t", policy="fixed", backend="interpreter", gpu="none", attempts=attempts,
                   best_index=3, tokens_in=20, tokens_out=5)
    r = metrics.result_from_summary(s)
    assert r.correct and r.flagged and not r.counts
    assert r.speedups == {"eager_fp32": 20.0}
    assert r.tokens == 25 and r.attempts == 3
    # flagged and failed attempts do not count in the attempt curve
    assert r.attempt_speedups["eager_fp32"] == [2.0, None, None]
    none = metrics.result_from_summary(s.model_copy(update={"best_index": None}))
    assert not none.correct and none.speedups == {}
