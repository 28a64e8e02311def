"""Configuration proposals of the offline tier and its per-shape record."""

from __future__ import annotations

import json

import pytest

from dsl_compiler.checks import check
from dsl_compiler.ir import KernelConfig
from evals.problems import load_suite
from sol_models import search
from dsl_compiler.frontend import trace_problem
from sol_models.estimate import estimate_program
from sol_models.hardware import get_gpu

BUILTIN = {p.name: p for p in load_suite("builtin")}


def traced(name: str):
    problem = BUILTIN[name]
    return problem, trace_problem(problem).program


@pytest.mark.parametrize("name", ["01_gemm_square", "07_gemm_tall_skinny", "16_linear_mish_clamp_scale_add",
                                  "19_linear_relu_row_sum", "20_conv2d_bias_relu", "27_conv3d_relu"])
def test_proposals_are_legal_and_ranked(name):
    problem, program = traced(name)
    kernel = program.kernels[0].name
    ranked = search.rank_configs(program, kernel, problem, "h200", limit=8)
    assert 1 < len(ranked) <= 8
    gpu = get_gpu("h200")
    times = []
    for r in ranked:
        candidate = search.with_config(program, kernel, r.config)
        assert [d for d in check(candidate) if d.severity == "error"] == []
        assert r.config.math == "tf32"  # fp32 storage at tolerance 1e-2
        t = estimate_program(candidate, gpu).kernels[0].t_us
        # the estimate orders them (raster / swizzle variants sit just behind the config they vary)
        assert t == pytest.approx(r.t_est_us, rel=0.03)
        times.append(r.t_est_us)
    assert times == sorted(times)
    assert len({r.config for r in ranked}) == len(ranked)
    assert search.propose_configs(program, kernel, problem, "h200", limit=8) == [r.config for r in ranked]


def test_conv_proposals_keep_the_conv_schedule():
    problem, program = traced("20_conv2d_bias_relu")
    configs = search.propose_configs(program, program.kernels[0].name, problem, "h200")
    assert configs and all(c.schedule == "auto" and c.decomposition == "data_parallel" for c in configs)


def test_grouped_conv_tiles_fit_the_channels_per_group_and_depthwise_leaves_the_tile_to_the_kernel():
    from dsl_compiler.cutlass.emit import emit_program

    problem, program = traced("29_grouped_conv2d")
    kernel = program.kernels[0]
    per_group = kernel.op.groups and program.decl(kernel.op.w.name).shape[0] // kernel.op.groups
    ranked = search.rank_configs(program, kernel.name, problem, "h200")
    tiles = [r.config.tile for r in ranked if r.config.tile]
    assert tiles and all(tn % per_group == 0 or per_group % tn == 0 for _, tn, _ in tiles)
    assert ranked[0].config.tile[1] == per_group  # one group per CTA: no work on another group's zeros
    assert all(r.config.cluster == (1, 1, 1) and r.config.schedule == "auto" for r in ranked)
    for r in ranked:  # every proposal builds
        assert emit_program(search.with_config(program, kernel.name, r.config))[1] == []
    problem, program = traced("28_depthwise_conv2d_relu6")
    assert [r.config.tile for r in search.rank_configs(program, program.kernels[0].name, problem, "h200")] == [None]


def test_split_k_for_large_k_small_output():
    problem, program = traced("08_gemm_large_k")  # 512 x 512 output, K = 32768: 16 tiles for 132 SMs
    ranked = search.rank_configs(program, "matmul", problem, "h200", limit=8)
    assert ranked[0].config.decomposition in ("split_k", "stream_k")
    square_problem, square = traced("01_gemm_square")
    assert all(c.decomposition == "data_parallel"
               for c in search.propose_configs(square, "matmul", square_problem, "h200", limit=20))


def test_precision_follows_the_problem():
    problem, program = traced("11_linear_relu")
    strict = {"tolerance": 1e-4, "allowed_precisions": ("f32", "tf32")}
    assert all(c.math == "tf32" for c in search.propose_configs(program, "fc", strict, "h200"))
    # f32 only: never a TF32 kernel (whatever the program's own math says), only the fp32-accurate split
    only_f32 = search.propose_configs(program, "fc", {"allowed_precisions": ("f32",)}, "h200")
    assert only_f32 and all(c.math == "tf32x3" for c in only_f32)


def test_proposals_are_deterministic():
    problem, program = traced("30_mlp3")
    first = [search.propose_configs(program, k.name, problem, "h200") for k in program.kernels]
    second = [search.propose_configs(program, k.name, problem, "h200") for k in program.kernels]
    assert first == second


def test_record_keeps_the_best_and_survives_reload(tmp_path, monkeypatch):
    path = tmp_path / "record.json"
    monkeypatch.setenv(search.RECORD_ENV, str(path))
    record = search.ConfigRecord()
    assert record.path == path and record.best("k") is None
    fast = KernelConfig(math="tf32", tile=(128, 256, 32), cluster=(2, 1, 1), schedule="cooperative")
    slow = KernelConfig(math="tf32", tile=(128, 128, 32), schedule="pingpong")
    assert record.update("k", slow, 500.0)
    assert record.update("k", fast, 400.0)
    assert not record.update("k", slow, 450.0)
    assert not record.update("k", slow, float("nan"))
    again = search.ConfigRecord()
    assert again.best("k") == (fast, 400.0)
    path.write_text("{not json")
    assert search.ConfigRecord().best("k") is None


def test_recorded_config_goes_first(tmp_path):
    problem, program = traced("05_gemm_transposed_b")
    record = search.ConfigRecord(tmp_path / "r.json")
    plain = search.rank_configs(program, "matmul", problem, "h200", record=record)
    measured_best = plain[3].config
    key = search.shape_key(program, "matmul")
    record.update(key, measured_best, 88.0, "h200")
    ranked = search.rank_configs(program, "matmul", problem, "h200", record=search.ConfigRecord(tmp_path / "r.json"))
    assert ranked[0].config == measured_best and ranked[0].source == "record" and ranked[0].t_record_us == 88.0
    assert measured_best not in [r.config for r in ranked[1:]]
    assert json.loads((tmp_path / "r.json").read_text())["entries"][key]["t_us"] == 88.0


def test_shape_key_separates_epilogue_classes():
    _, plain = traced("05_gemm_transposed_b")
    _, relu = traced("11_linear_relu")
    _, residual = traced("18_linear_residual_add")
    _, reduction = traced("19_linear_relu_row_sum")
    keys = [search.shape_key(plain, "matmul"), search.shape_key(relu, "fc"),
            search.shape_key(residual, "fc"), search.shape_key(reduction, "fc")]
    assert [k.split("|")[-1] for k in keys] == ["none", "bias", "residual", "reduction"]
    assert keys[0].startswith("gemm_nt|1x2048x4096x") and keys[1].startswith("gemm_nt|")


def test_unknown_kernel_is_a_clear_error():
    problem, program = traced("01_gemm_square")
    with pytest.raises(KeyError, match="no kernel 'nope'"):
        search.propose_configs(program, "nope", problem, "h200")


# ---------------------------------------------------------------------------------------------
# One ranking per kernel signature: a recurrence's steps and a model's repeated blocks are ranked once

RECURRENT = """program rec
input x: f32[16, 256]
param w1: f32[256, 256] = "l1.weight"
param w2: f32[256, 256] = "l2.weight"
param w3: f32[128, 256] = "l3.weight"
param b3: f32[128] = "l3.bias"
kernel step_a = gemm(x, w1^T) {
  math = tf32
  store h1: f32 = relu(acc)
}
kernel step_b = gemm(h1, w2^T) {
  math = tf32
  store h2: f32 = relu(acc)
}
kernel head = gemm(h2, w3^T) {
  math = tf32
  store y: f32 = acc + b3[col]
}
output y
"""


def test_kernels_that_differ_only_in_the_names_they_use_share_a_signature_and_a_ranking():
    from dsl_compiler.parser import parse

    program, diags = parse(RECURRENT)
    assert program is not None, diags
    sig = {k.name: search.kernel_signature(program, k.name) for k in program.kernels}
    assert sig["step_a"] == sig["step_b"]
    assert sig["head"] != sig["step_a"]  # another shape and an epilogue reading a vector
    a = search.rank_configs(program, "step_a", None, "h200")
    b = search.rank_configs(program, "step_b", None, "h200")
    assert [r.config for r in a] == [r.config for r in b] and a
    assert [r.t_est_us for r in a] == pytest.approx([r.t_est_us for r in b])


def test_a_different_epilogue_or_layout_is_a_different_signature():
    from dsl_compiler.parser import parse

    other_epilogue = RECURRENT.replace("store h2: f32 = relu(acc)", "store h2: f32 = acc * 2.0")
    program, _ = parse(other_epilogue)
    assert search.kernel_signature(program, "step_a") != search.kernel_signature(program, "step_b")
    transposed = RECURRENT.replace("gemm(h1, w2^T)", "gemm(h1, w2)")
    program, _ = parse(transposed)
    assert search.kernel_signature(program, "step_a") != search.kernel_signature(program, "step_b")


def test_the_lstm_plan_ranks_its_recurrent_steps_once():
    from nodes.offline.policy import OfflineTier

    lstm = next(p for p in load_suite("models") if p.name == "14_lstm_layer")
    calls = []
    real = search.rank_configs

    def counting(program, name, *args, **kwargs):
        calls.append(name)
        return real(program, name, *args, **kwargs)

    search.rank_configs = counting
    try:
        listed = OfflineTier(use_record=False).candidates(lstm, "h200")
    finally:
        search.rank_configs = real
    first = listed[0].program
    assert len(first.kernels) == 65
    # per plan (one per precision), the input projection and one recurrent step: not 64 of them
    assert set(calls) == {"input_proj", "recurrent"} and calls.count("recurrent") == calls.count("input_proj"), calls
    steps = [k for k in first.kernels if k.name.startswith("recurrent")]
    assert len({k.config for k in steps}) == 1
