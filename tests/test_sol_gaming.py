import math
from pathlib import Path

import pytest

from dsl_compiler.parser import parse
from sol_models.bounds import sol_report
from sol_models.counting import count_problem
from sol_models.gaming import ceiling_check, ceiling_check_work, narrowest_precision, program_precision
from sol_models.hardware import get_gpu

DATA = Path(__file__).parent / "data" / "sol"
H200 = get_gpu("h200", calibrated=False)


def test_faster_than_light_is_impossible_with_the_numbers():
    v = ceiling_check(80.0, 100.0)
    assert not v.ok and v.verdict == "impossible"
    assert v.ratio == pytest.approx(0.8) and v.threshold_us == pytest.approx(90.0)
    assert "80.000" in v.reason and "100.000" in v.reason and "90.000" in v.reason


def test_within_the_margin_is_ok():
    assert ceiling_check(90.0, 100.0).ok  # exactly at the floor
    assert ceiling_check(95.0, 100.0).ok
    assert ceiling_check(300.0, 100.0).ratio == pytest.approx(3.0)
    assert not ceiling_check(89.9, 100.0).ok
    assert ceiling_check(89.9, 100.0, margin=0.2).ok


def test_margin_setting_from_the_environment(monkeypatch):
    monkeypatch.setenv("MUCUTLASS_SOL_MARGIN", "0.3")
    assert ceiling_check(75.0, 100.0).ok
    monkeypatch.setenv("MUCUTLASS_SOL_MARGIN", "not a number")
    assert not ceiling_check(75.0, 100.0).ok


def test_invalid_times_are_not_ok():
    for bad in (0.0, -5.0, math.nan, math.inf):
        v = ceiling_check(bad, 100.0)
        assert not v.ok and v.verdict == "invalid" and "positive finite" in v.reason
    assert ceiling_check(10.0, 0.0).verdict == "invalid"
    with pytest.raises(ValueError):
        ceiling_check(10.0, 10.0, margin=1.5)


def test_the_bound_of_the_precision_used_decides():
    work = count_problem(DATA / "gemm.py")
    t_tf32 = sol_report(work, H200, "tf32").t_sol_us
    t_bf16 = sol_report(work, H200, "bf16").t_sol_us
    measured = (t_tf32 * 0.9 + t_bf16) / 2  # faster than tf32 allows, slower than bf16's bound
    assert not ceiling_check_work(measured, work, H200, "tf32").ok
    verdict = ceiling_check_work(measured, work, H200, "bf16")
    assert verdict.ok and verdict.precision == "bf16"


def test_program_precision_is_its_narrowest_kernel():
    text = """program p
input x: bf16[256, 256]
input y: f32[256, 256]
param w: bf16[256, 256] = "a.weight"
param v: f32[256, 256] = "b.weight"
kernel k1 = gemm(x, w^T) { math = bf16; store h: f32 = acc }
kernel k2 = gemm(y, v^T) { math = tf32; store z: f32 = acc + h }
output z
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    assert program_precision(prog) == "bf16"
    assert narrowest_precision(["tf32", "f32"]) == "tf32"
    assert narrowest_precision([]) == "tf32"


def test_numpy_and_missing_times():
    np = pytest.importorskip("numpy")
    assert not ceiling_check(np.float32(50.0), np.float32(100.0)).ok
    assert ceiling_check(np.float32(95.0), 100.0).ok
    v = ceiling_check(None, 100.0)
    assert v.verdict == "invalid" and "None" in v.reason


def test_a_program_storing_its_parameters_narrower_is_held_to_those_bytes(tmp_path):
    """A GEMM + reduction whose weight dominates the bytes: an f16 program converts the weight once, at load, and
    reads 2 bytes an element; its ceiling counts them so (an honest f16 program ~2x under the fp32-bytes bound was
    flagged impossible), and a program storing it in f32 keeps the problem's own bound."""
    from graph.attempts import ceiling_bound_us

    problem = tmp_path / "matvec_sum.py"
    problem.write_text(
        "import torch, torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(8192, 8192)\n"
        "    def forward(self, x):\n        return torch.sigmoid(self.fc(x)).sum(dim=1, keepdim=True)\n"
        "def get_inputs():\n    return [torch.rand(8, 8192)]\n"
        "def get_init_inputs():\n    return []\n")
    work = count_problem(problem)
    report = sol_report(work, H200, "tf32").model_dump()
    report.update(param_bytes=work.param_bytes, input_bytes=work.input_bytes)
    f16_text = """program p
input x: f32[8, 8192]
param w: f16[8192, 8192] = "fc.weight"
param b: f32[8192] = "fc.bias"
kernel fc = gemm(x, w^T) { math = f16; store h: f32 = sigmoid(acc + b[col]) }
torch s = sum(h, dim=1, keepdim=True)
output s
"""
    prog, diags = parse(f16_text)
    assert prog is not None, diags
    f32_prog, diags = parse(f16_text.replace("f16[8192, 8192]", "f32[8192, 8192]").replace("math = f16", "math = tf32"))
    assert f32_prog is not None, diags
    headline = ceiling_bound_us(report, "f16")
    legal = ceiling_bound_us(report, "f16", prog)
    weight = 8192 * 8192
    assert legal < headline
    assert legal == pytest.approx(headline - 2 * weight / (H200.dram_bw_gbps * 1e9) * 1e6, rel=1e-6)
    assert ceiling_bound_us(report, "tf32", f32_prog) == pytest.approx(ceiling_bound_us(report, "tf32"))
    honest_us = 1.2 * legal  # the f16 program near its own bound: under the fp32 bytes' bound, over its own
    assert honest_us < headline and ceiling_check(honest_us, legal).ok and not ceiling_check(honest_us, headline).ok
