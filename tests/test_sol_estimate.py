import math

import pytest

from dsl_compiler.parser import parse
from sol_models.estimate import estimate_program
from sol_models.hardware import get_gpu

H200 = get_gpu("h200", calibrated=False)


def gemm(m, n, k, cfg, dtype="f32", math_mode="tf32", epilogue="relu(acc + b[col])", w_kn=False):
    """w_kn: the weight stored [K, N] and read as a plain B (N-major) instead of nn.Linear's [N, K]."""
    w_shape, b_read = (f"{k}, {n}", "w") if w_kn else (f"{n}, {k}", "w^T")
    text = f"""program g
input a: {dtype}[{m}, {k}]
param w: {dtype}[{w_shape}] = "fc.weight"
param b: {dtype}[{n}] = "fc.bias"
kernel fc = gemm(a, {b_read}) {{
  math = {math_mode}; {cfg}
  store y: {dtype} = {epilogue}
}}
output y
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    return prog


def t(m, n, k, cfg, **kw):
    return estimate_program(gemm(m, n, k, cfg, **kw), H200)


def test_large_tile_beats_small_tile_on_4096_cubed():
    big = t(4096, 4096, 4096, "tile = 128x256x32; cluster = 2x1x1; schedule = cooperative")
    small = t(4096, 4096, 4096, "tile = 64x64x32; schedule = pingpong")
    assert big.t_us < small.t_us / 1.5
    assert any("L2" in r for r in small.kernels[0].reasons)


def test_estimate_is_near_the_measured_h200_tf32_gemm():
    # measured: 0.385 ms at 4096^3 (tf32, 128x256x32 cooperative, cluster 2x1); 0.423 ms ping-pong 128x128
    coop = t(4096, 4096, 4096, "tile = 128x256x32; cluster = 2x1x1; schedule = cooperative")
    ping = t(4096, 4096, 4096, "tile = 128x128x32; cluster = 2x1x1; schedule = pingpong")
    assert 385 * 0.8 < coop.t_us < 385 * 1.25
    assert 423 * 0.8 < ping.t_us < 423 * 1.25
    assert coop.t_us < ping.t_us


def test_tf32_with_b_stored_kn_costs_the_register_sourced_mainloop():
    # measured on the H200: 0.594 ms with B stored [K, N] (A and B swapped) against 0.407 ms K-major
    cfg = "tile = 128x256x32; cluster = 2x1x1; schedule = cooperative"
    kmajor = t(4096, 4096, 4096, cfg)
    slow = t(4096, 4096, 4096, cfg, w_kn=True)
    assert 1.3 < slow.t_us / kmajor.t_us < 1.6
    assert any("register-sourced" in r for r in slow.kernels[0].reasons)
    bf16_nn = t(4096, 4096, 4096, "tile = 128x256x64", dtype="bf16", math_mode="bf16", w_kn=True)
    assert not any("register-sourced" in r for r in bf16_nn.kernels[0].reasons)  # 16-bit wgmma reads either major


def test_split_k_wins_for_small_output_and_long_k():
    plain = t(256, 256, 65536, "tile = 128x128x32; schedule = cooperative")
    split = t(256, 256, 65536, "tile = 128x128x32; schedule = cooperative; decomposition = split_k; split_k = 16")
    stream = t(256, 256, 65536, "tile = 128x128x32; schedule = cooperative; decomposition = stream_k")
    assert split.t_us < plain.t_us / 3
    assert stream.t_us < plain.t_us / 3
    assert split.kernels[0].t_reduction_us > 0


def test_64_row_tile_wastes_less_on_m_64():
    tall = t(64, 4096, 4096, "tile = 128x128x32; schedule = pingpong")
    short = t(64, 4096, 4096, "tile = 64x128x32; schedule = pingpong")
    assert short.kernels[0].padding_waste < tall.kernels[0].padding_waste
    assert tall.kernels[0].padding_waste == pytest.approx(0.5)
    assert short.t_us < tall.t_us


def test_few_stages_cost_time_and_too_many_do_not_fit():
    two = t(4096, 4096, 4096, "tile = 128x256x32; schedule = cooperative; stages = 2")
    four = t(4096, 4096, 4096, "tile = 128x256x32; schedule = cooperative; stages = 4")
    assert two.t_us > four.t_us
    huge = t(4096, 4096, 4096, "tile = 128x256x32; schedule = cooperative; stages = 12")
    assert math.isinf(huge.t_us) and not huge.kernels[0].feasible


def test_cluster_multicast_cuts_l2_traffic():
    one = t(4096, 4096, 4096, "tile = 128x128x32; schedule = pingpong")
    two = t(4096, 4096, 4096, "tile = 128x128x32; cluster = 2x1x1; schedule = pingpong")
    assert two.kernels[0].t_l2_us < one.kernels[0].t_l2_us
    assert two.t_us <= one.t_us


def test_pingpong_hides_epilogue_and_large_pingpong_tiles_spill():
    heavy = "relu(acc + b[col])"
    coop = t(4096, 4096, 512, "tile = 128x128x32; schedule = cooperative", epilogue=heavy)
    ping = t(4096, 4096, 512, "tile = 128x128x32; schedule = pingpong", epilogue=heavy)
    assert ping.kernels[0].t_epilogue_us < coop.kernels[0].t_epilogue_us
    spill = t(4096, 4096, 4096, "tile = 128x256x32; schedule = pingpong")
    assert any("spill" in r for r in spill.kernels[0].reasons)


def test_bf16_is_faster_than_tf32():
    tf32 = t(4096, 4096, 4096, "tile = 128x256x32; cluster = 2x1x1")
    bf16 = t(4096, 4096, 4096, "tile = 128x256x64; cluster = 2x1x1", dtype="bf16", math_mode="bf16")
    assert bf16.t_us < tf32.t_us / 1.6


def test_auto_config_and_torch_steps_and_conv():
    text = """program c
input x: f32[8, 64, 64, 64] channels_last
param w: f32[128, 64, 3, 3] channels_last = "conv.weight"
kernel c1 = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) { math = tf32; store y: f32 = relu(acc) }
torch z = softmax(y, dim=1)
output z
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    est = estimate_program(prog, H200)
    k = est.kernels[0]
    assert k.schedule == "conv" and k.tile == (128, 128, 32) and k.stages >= 3
    step = est.torch_steps[0]
    y_bytes = 4 * 8 * 128 * 64 * 64
    assert step.bytes_moved == 2 * y_bytes
    assert step.t_us == pytest.approx(H200.launch_latency_us + 2 * y_bytes / (0.9 * 4.8e12) * 1e6)
    assert est.t_us == pytest.approx(k.t_us + step.t_us)
    assert est.timing_source == "estimate"


@pytest.mark.parametrize("calibrated", [False, True])
def test_estimate_never_beats_the_speed_of_light(calibrated, tmp_path):
    import itertools
    import json

    from sol_models.bounds import sol_report
    from sol_models.counting import count_program
    from sol_models.gaming import program_precision

    gpu = H200
    if calibrated:
        (tmp_path / "h200.json").write_text(json.dumps(
            {"dram_bw_gbps": 4300, "peak_tflops": {"f32": 50, "tf32": 360, "bf16": 780, "f16": 780}}))
        gpu = get_gpu("h200", calibrated_dir=tmp_path)
    shapes = [(4096, 4096, 4096), (64, 8192, 1024), (8192, 256, 64), (256, 256, 65536), (1, 4096, 4096)]
    configs = ["tile = 128x256x32; cluster = 2x1x1", "tile = 64x128x32; schedule = pingpong",
               "tile = 128x128x32; decomposition = stream_k", "tile = 128x128x32; decomposition = split_k; split_k = 8"]
    for (m, n, k), cfg, dt in itertools.product(shapes, configs, [("f32", "tf32"), ("bf16", "bf16")]):
        prog = gemm(m, n, k, cfg.replace("x32", "x64") if dt[0] == "bf16" else cfg, dtype=dt[0], math_mode=dt[1])
        est = estimate_program(prog, gpu)
        bound = sol_report(count_program(prog), gpu, precision=program_precision(prog))
        assert est.t_us > bound.t_sol_us, (m, n, k, cfg, dt)


def depthwise(n, c, h, w, dtype="f32", math_mode="f32"):
    text = f"""program dw
input x: {dtype}[{n}, {c}, {h}, {w}] channels_last
param w: {dtype}[{c}, 1, 3, 3] channels_last = "conv.weight"
kernel dw = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups={c}) {{
  math = {math_mode}
  store y: {dtype} = acc
}}
output y
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    return prog


# H200 step profile of 2026-12-01 and offline run of 2026-11-30 (fp32, 3x3, stride 1, pad 1): us per call
DEPTHWISE_MEASURED_US = {(2, 192, 224, 224): (2213, 2430), (4, 192, 112, 112): (1098,), (16, 256, 128, 128): (6955,)}


@pytest.mark.parametrize("shape", list(DEPTHWISE_MEASURED_US))
def test_depthwise_conv_is_estimated_at_the_direct_kernels_measured_rate(shape, monkeypatch):
    """The direct kernel as built runs one CTA per 64 channels over every output tile: milliseconds where DRAM
    bandwidth alone would say tens of microseconds. The estimate is within 2x of each H200 measurement."""
    monkeypatch.delenv("MUCUTLASS_DEPTHWISE_SPLIT", raising=False)
    est = estimate_program(depthwise(*shape), H200).kernels[0]
    n, c, h, w = shape
    at_bandwidth_us = 2 * n * c * h * w * 4 / (H200.dram_bw_gbps * 1e9) * 1e6
    for measured_us in DEPTHWISE_MEASURED_US[shape]:
        assert measured_us / 2 <= est.t_us <= measured_us * 2, (shape, est.t_us, measured_us)
    assert est.t_us > 20 * at_bandwidth_us
    assert est.schedule == "direct" and est.units == -(-c // 64)
    assert "direct SIMT kernel" in est.reasons[0] and "GFLOP/s per CTA" in est.reasons[0]
    assert not any("memory-bound" in r for r in est.reasons)


def test_depthwise_estimate_follows_the_split_setting(monkeypatch):
    """With the output tiles split over the SMs the kernel is estimated as a streaming one (and says that is
    unmeasured); a bad value of the setting leaves the default."""
    prog = depthwise(2, 192, 224, 224)
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "off")
    off = estimate_program(prog, H200).kernels[0]
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "on")
    on = estimate_program(prog, H200).kernels[0]
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "sideways")
    bad = estimate_program(prog, H200).kernels[0]
    moved_bytes = 2 * 2 * 192 * 224 * 224 * 4
    at_bandwidth_us = moved_bytes / (H200.dram_bw_gbps * 1e9) * 1e6
    assert at_bandwidth_us <= on.t_us < 2.5 * at_bandwidth_us < off.t_us / 20
    assert on.units >= H200.sm_count and "unmeasured" in on.reasons[0]
    assert any("memory-bound" in r for r in on.reasons)
    assert bad.t_us == off.t_us


def test_depthwise_calibration_leaves_tensor_core_gemm_and_conv_estimates_alone(monkeypatch):
    """The depthwise rate and split setting touch only depthwise kernels: TF32 and 16-bit GEMMs, dense and
    grouped convs estimate the same whatever they are."""
    import sol_models.estimate as estimate

    conv = """program c
input x: {dt}[8, 64, 56, 56] channels_last
param w: {dt}[128, {cg}, 3, 3] channels_last = "conv.weight"
kernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups={g}) {{
  math = {mm}
  store y: {dt} = acc
}}
output y
"""
    progs = [gemm(4096, 4096, 4096, "tile = 128x256x32"), gemm(4096, 4096, 4096, "tile = 128x256x64", dtype="bf16", math_mode="bf16")]
    for dt, mm in (("f32", "tf32"), ("f16", "f16")):
        for g in (1, 4):
            prog, diags = parse(conv.format(dt=dt, mm=mm, g=g, cg=64 // g))
            assert prog is not None, diags
            progs.append(prog)

    def times():
        return [estimate_program(p, H200).t_us for p in progs]

    monkeypatch.delenv("MUCUTLASS_DEPTHWISE_SPLIT", raising=False)
    before = times()
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "on")
    monkeypatch.setattr(estimate, "DEPTHWISE_DIRECT_FLOPS_PER_S_PER_CTA", 1e6)
    monkeypatch.setattr(estimate, "DEPTHWISE_SIMT_EFFICIENCY", 1e-6)
    assert times() == before
    assert all(math.isfinite(t_us) and t_us > 0 for t_us in before)
