import math
from pathlib import Path

import pytest

from dsl_compiler.parser import parse
from sol_models.bounds import headroom, sol_report
from sol_models.counting import ProgramCountError, count_problem, count_program
from sol_models.hardware import get_gpu

DATA = Path(__file__).parent / "data" / "sol"
H200 = get_gpu("h200", calibrated=False)


def program(text):
    prog, diags = parse(text)
    assert prog is not None, diags
    return prog


def test_gemm_is_compute_bound_at_the_tf32_peak():
    work = count_problem(DATA / "gemm.py")
    r = sol_report(work, H200, precision="tf32")
    flops, bytes_ = 2 * 1024 * 512 * 2048, 4 * (1024 * 2048 + 2048 * 512 + 1024 * 512)
    assert r.t_sol_us == pytest.approx(flops / 494.7e12 * 1e6)
    assert r.bound == "compute"
    assert r.t_memory_us == pytest.approx(bytes_ / 4.8e12 * 1e6)
    assert r.intensity_flop_per_byte == pytest.approx(flops / bytes_)
    assert r.ridge_flop_per_byte == pytest.approx(494.7e12 / 4.8e12)
    assert r.launch_floor_us == pytest.approx(1 * H200.launch_latency_us)


def test_elementwise_is_memory_bound():
    r = sol_report(count_problem(DATA / "relu.py"), H200)
    assert r.bound == "memory"
    assert r.t_sol_us == pytest.approx(2 * 4 * 256 * 4096 / 4.8e12 * 1e6)
    assert r.intensity_flop_per_byte < r.ridge_flop_per_byte


def test_per_precision_table_orders_bounds():
    r = sol_report(count_problem(DATA / "gemm.py"), H200, precision="bf16")
    table = r.per_precision
    assert set(table) == {"f32", "tf32x3", "tf32", "bf16", "f16", "fp8"}
    # three TF32 MMAs a product: three times TF32's compute bound, still under fp32 SIMT's
    assert table["tf32x3"].t_compute_us == pytest.approx(3 * table["tf32"].t_compute_us)
    assert table["f32"].t_sol_us > table["tf32x3"].t_sol_us > table["tf32"].t_sol_us > table["bf16"].t_sol_us >= table["fp8"].t_sol_us
    assert r.t_sol_us == table["bf16"].t_sol_us
    a100 = sol_report(count_problem(DATA / "gemm.py"), get_gpu("a100", calibrated=False))
    assert "fp8" not in a100.per_precision


def test_simt_flops_bound_the_compute_time_separately():
    # linear + gelu: the gelu runs on SIMT units beside the tensor cores: max, not sum
    work = count_problem(DATA / "linear_gelu.py")
    r = sol_report(work, H200)
    t_tc = work.flops_tensor / 494.7e12 * 1e6
    t_simt = work.flops_other / 67e12 * 1e6
    assert r.t_compute_us == pytest.approx(max(t_tc, t_simt))
    assert r.per_precision["f32"].t_compute_us == pytest.approx(work.flops / 67e12 * 1e6)
    assert r.t_sol_unfused_us > r.t_sol_us or r.bound == "compute"


def test_unsupported_precision_is_a_clear_error():
    with pytest.raises(ValueError, match="no 'fp8' math"):
        sol_report(count_problem(DATA / "gemm.py"), get_gpu("a100", calibrated=False), precision="fp8")


def test_headroom():
    assert headroom(30.0, 10.0) == 3.0
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError):
            headroom(bad, 10.0)
        with pytest.raises(ValueError):
            headroom(10.0, bad)


MLP = """program mlp
input x: f32[128, 1024]
param w1: f32[512, 1024] = "fc1.weight"
param b1: f32[512] = "fc1.bias"
param w2: f32[256, 512] = "fc2.weight"
kernel fc1 = gemm(x, w1^T) {
  math = tf32
  store h: f32 = relu(acc + b1[col])
}
kernel fc2 = gemm(h, w2^T) { math = tf32; store y: f32 = acc }
output y
"""


def test_program_counts_its_intermediates():
    w = count_program(program(MLP))
    assert w.flops_tensor == 2 * 128 * 1024 * 512 + 2 * 128 * 512 * 256
    assert w.flops_other == 2 * 128 * 512  # add + relu per element of h
    fused = 4 * (128 * 1024 + 512 * 1024 + 512 + 256 * 512 + 128 * 256)
    assert w.bytes_fused == fused
    h = 4 * 128 * 512
    assert w.bytes_program == fused + 2 * h  # h is written by fc1 and read by fc2
    assert w.kernel_count == 2


CONV = """program c
input x: f32[2, 16, 32, 32] channels_last
param w: f32[32, 16, 3, 3] channels_last = "conv.weight"
kernel c1 = conv2d(x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=1) { store y: f32 = acc }
output y
"""


def test_program_conv_uses_the_implicit_gemm_view():
    w = count_program(program(CONV))
    p = q = (32 + 2 - 2 - 1) // 2 + 1
    assert w.flops_tensor == 2 * (2 * p * q) * 32 * (16 * 9)
    assert w.bytes_program == 4 * (2 * 16 * 32 * 32 + 32 * 16 * 9 + 2 * 32 * p * q)


def test_program_with_bad_shapes_is_a_clear_error():
    bad = MLP.replace("param w2: f32[256, 512]", "param w2: f32[256, 500]")
    prog, _ = parse(bad)
    with pytest.raises(ProgramCountError, match="cannot infer shapes"):
        count_program(prog)
