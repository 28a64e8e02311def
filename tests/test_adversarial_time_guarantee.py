"""The red team's time guarantee (tests/adversarial/runner.py): a case whose harm is a reported time below
its work fails when the time is under half the fp32 floor of the problem's FLOPs, on the GPU problem."""
from types import SimpleNamespace

from tests.adversarial.cases import CASES, problem_for
from tests.adversarial.runner import _time_guarantee

MEMO = next(c for c in CASES if c.file == "memo_eager_fallback.py")


def test_a_time_below_the_work_is_a_problem_and_the_gemms_time_is_not():
    problem = problem_for(MEMO.problem, on_gpu=True)  # 11_linear_relu: 68.7 GFLOP, floor ~0.51 ms at half
    assert _time_guarantee(MEMO, SimpleNamespace(median_us=30.0), problem, True, "profile")
    assert _time_guarantee(MEMO, SimpleNamespace(median_us=1380.0), problem, True, "profile") == []


def test_only_timed_gpu_runs_of_such_cases_are_checked():
    problem = problem_for(MEMO.problem, on_gpu=True)
    assert _time_guarantee(MEMO, SimpleNamespace(median_us=1.0), problem, False, "profile") == []
    assert _time_guarantee(MEMO, SimpleNamespace(median_us=1.0), problem, True, "validate") == []
    other = next(c for c in CASES if not c.honest_time)
    assert _time_guarantee(other, SimpleNamespace(median_us=1.0), problem, True, "profile") == []
