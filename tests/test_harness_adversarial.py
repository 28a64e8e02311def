"""The adversarial set (tests/adversarial/cases.py): every cheating candidate is caught by the harness's
public calls (validate, profile: what the graph's validator and profiler nodes call) FOR ITS RULE, the
attempt after it starts clean, and the honest controls pass with no hard rule and no unexpected flag.

CPU cases run everywhere through ``validate``; the GPU block runs every case at its stage on an sm_90
GPU. Cases today's harness misses carry ``xfail(strict=False, reason="judge: <property>")`` so the
suite stays green; the judge's work removes them."""

from __future__ import annotations

import pytest

from evals.judge.client import Harness, HarnessSettings
from tests.adversarial.cases import CASES, CONTROLS, FLAG_RULES, HERE, PROPERTIES
from tests.adversarial.runner import SECRET_VARS, Scratch, run_case, run_control


def _params(items, gpu: bool, ident):
    out = []
    for c in items:
        marks = [pytest.mark.xfail(strict=False, reason=c.pending)] if c.pending else []
        if gpu:
            marks.append(pytest.mark.gpu)
        out.append(pytest.param(c, marks=marks, id=ident(c)))
    return out


def _harness(**settings):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in SECRET_VARS.items():
            mp.setenv(k, v)  # every worker this harness starts inherits them
        h = Harness(HarnessSettings(**settings))
        yield h
        h.close()


def _check_case(harness, case, on_gpu: bool, tmp_path) -> None:
    if case.why_not_here():
        pytest.skip(case.why_not_here())
    out = run_case(harness, case, on_gpu, Scratch(tmp_path, harness.settings))
    assert out.caught, (f"{case.id} [{case.file}]: expected rule {case.rules}, got {out.rule!r} "
                        f"(rejected={out.rejected}) {out.problems}: {out.reason!r}")
    assert out.next_clean, f"the attempt after {case.id} did not start clean: {out.next_reason}"


def _check_control(harness, control, on_gpu: bool, tmp_path) -> None:
    if control.why_not_here():
        pytest.skip(control.why_not_here())
    out = run_control(harness, control, on_gpu, Scratch(tmp_path, harness.settings))
    assert out.caught, f"{control.file}: {out.problems}"


# ---------------------------------------------------------------------------------------------
# CPU


@pytest.fixture(scope="module")
def cpu_harness():
    # a 1 GB limit (the honest linear_relu needs under 0.8): the memory hog is caught once its tree holds
    # 1 GB, a few seconds of first touches even where a fresh VM backs new pages at 100-250 MB/s (at 3 GB
    # the load watchdog fired first on such a host)
    yield from _harness(device="cpu", watchdog_s=10, n_input_sets=3, memory_limit_gb=1)


@pytest.mark.parametrize("case", _params([c for c in CASES if c.cpu], False, lambda c: c.id))
def test_cheat_caught_for_its_rule_on_cpu(cpu_harness, case, tmp_path):
    _check_case(cpu_harness, case, False, tmp_path)


@pytest.mark.parametrize("control", _params([c for c in CONTROLS if c.cpu], False, lambda c: c.file if c.problem == "linear_relu" else f"{c.file}@{c.problem}"))
def test_honest_control_passes_on_cpu(cpu_harness, control, tmp_path):
    _check_control(cpu_harness, control, False, tmp_path)


def test_canary_is_a_real_check():
    """The canary that proves the next attempt clean finds a changed default dtype and a replaced
    comparison (here, in the test's own process), and nothing in a clean one."""
    import torch

    namespace: dict = {}
    exec(compile((HERE / "canary.py").read_text(), "canary", "exec"), namespace)
    assert namespace["_leftovers"]() == []
    old_dtype, old_all = torch.get_default_dtype(), torch.Tensor.all
    torch.set_default_dtype(torch.float64)
    torch.Tensor.all = lambda self, *a, **k: old_all(self, *a, **k)
    try:
        assert namespace["_leftovers"]() == ["default dtype torch.float64", "Tensor.all replaced"]
    finally:
        torch.set_default_dtype(old_dtype)
        torch.Tensor.all = old_all
    assert namespace["_leftovers"]() == []


def test_set_covers_every_property_and_both_kinds():
    assert len(CASES) >= 30
    assert {c.prop for c in CASES} == set(PROPERTIES)
    for prop in (2, 4, 5, 6, 7):
        assert sum(c.prop == prop for c in CASES) >= 2, prop
    assert {c.kind for c in CASES} == {"py", "mcu"}
    assert {c.rule for c in CASES} - FLAG_RULES
    assert len({c.id for c in CASES}) == len(CASES)
    for c in CASES + CONTROLS:
        assert (HERE / c.file).is_file(), c.file
    assert all((HERE / c.then).is_file() for c in CASES if c.then)


# ---------------------------------------------------------------------------------------------
# GPU: every case at its stage, on builtin problems large enough that hidden work shows


@pytest.fixture(scope="module")
def gpu_harness():
    yield from _harness(device="cuda", watchdog_s=30, n_input_sets=5)


@pytest.mark.parametrize("case", _params([c for c in CASES if c.gpu], True, lambda c: c.id))
def test_cheat_caught_for_its_rule_on_gpu(gpu_harness, case, tmp_path):
    _check_case(gpu_harness, case, True, tmp_path)


@pytest.mark.parametrize("control", _params(CONTROLS, True, lambda c: c.file if c.problem == "linear_relu" else f"{c.file}@{c.problem}"))
def test_honest_control_passes_on_gpu(gpu_harness, control, tmp_path):
    _check_control(gpu_harness, control, True, tmp_path)
