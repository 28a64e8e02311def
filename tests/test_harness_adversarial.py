"""The adversarial set: every known-bad candidate is caught, for the right reason, and a crash or
a hang costs that one call (the next candidate runs normally). CPU cases run everywhere; the GPU
block runs every case on an sm_90 GPU."""

import pytest

from evals.harness import Candidate, Harness, HarnessSettings
from evals.problems import load_problem, load_suite
from tests.adversarial.cases import CASES, HERE, Case
from tests.adversarial.shared import shared_harness

# Crash and hang cost a worker restart each (an import of torch): they run once, in one test below.
CPU_CASES = [c for c in CASES if c.cpu and c.caught_by not in ("crash", "timeout")]


def _problem(name: str, suite: str = "smoke"):
    return next(p for p in load_suite(suite) if p.name == name)


@pytest.fixture(scope="module")
def cpu_harness():
    return shared_harness(device="cpu", watchdog_s=10, n_input_sets=3)


@pytest.fixture(scope="module")
def cpu_strict_harness():
    return shared_harness(device="cpu", watchdog_s=10, n_input_sets=2, seed=123, tolerance=1e-4)


def _judge(harness: Harness, problem, case: Case):
    cand = Candidate.from_source(case.source(), name=case.file)
    if case.stage == "profile":
        return harness.profile(problem, cand)
    return harness.validate(problem, cand)


def _assert_caught(result, case: Case, on_gpu: bool):
    if case.caught_by in ("pytorch_only",):
        # a flag for review, not a rejection: the candidate is right but only calls PyTorch
        assert any(f.startswith("pytorch_only:") for f in result.flags), result
        return
    if case.stage == "profile":
        assert not result.valid, result
    else:
        assert not result.correct, result
    reason = result.reason
    assert result.rule == case.caught_by, reason
    if case.caught_by == "crash":
        assert reason.startswith("crash: "), reason
    elif case.caught_by == "timeout":
        assert reason.startswith("timeout"), reason
        assert result.crashed
    else:
        assert reason.startswith(case.caught_by + ":"), reason
        assert any(f.startswith(case.caught_by + ":") for f in result.flags), result.flags


def test_honest_control_passes_on_cpu(cpu_harness):
    p = _problem("02_linear_relu_tiny")
    v = cpu_harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert v.correct, v.reason
    assert len(v.sets) == 3 and v.rule is None and v.device == "cpu"
    assert v.flags and all(f.startswith("pytorch_only: ") for f in v.flags)  # it only calls PyTorch, measured


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.file for c in CPU_CASES])
def test_adversarial_case_caught_on_cpu(cpu_harness, cpu_strict_harness, case):
    p = _problem("02_linear_relu_tiny")
    harness = cpu_strict_harness if case.strict else cpu_harness
    result = _judge(harness, p, case)
    _assert_caught(result, case, on_gpu=False)
    # whatever happened, the next candidate runs normally
    after = harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert after.correct, after.reason


def test_crash_then_hang_then_normal(cpu_harness):
    p = _problem("02_linear_relu_tiny")
    before = cpu_harness.restarts
    crash = cpu_harness.validate(p, Candidate.from_file(HERE / "illegal_address.py"))
    assert crash.crashed and "SIGSEGV" in crash.reason and crash.rule == "crash"
    hang = cpu_harness.validate(p, Candidate.from_file(HERE / "hang.py"))
    assert hang.crashed and "watchdog" in hang.reason and hang.rule == "timeout"
    assert cpu_harness.restarts == before  # the judge itself never ran the candidate: nothing to restart
    ok = cpu_harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert ok.correct and not ok.crashed


# ---------------------------------------------------------------------------------------------
# GPU: all of them, on a problem large enough that hidden side-stream work shows


@pytest.fixture(scope="module")
def gpu_harness():
    h = Harness(HarnessSettings(device="cuda", watchdog_s=60, n_input_sets=5))
    yield h
    h.close()


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_adversarial_case_caught_on_gpu(gpu_harness, case):
    p = _problem("11_linear_relu", suite="builtin")
    if case.strict:
        p = load_problem(p.path)
        p.tolerance, p.allowed_precisions = 1e-4, ("f32", "tf32")
    result = _judge(gpu_harness, p, case)
    _assert_caught(result, case, on_gpu=True)
    after = gpu_harness.validate(p, Candidate.from_file(HERE / "honest.py"))
    assert after.correct, after.reason
