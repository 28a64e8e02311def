"""The CUTLASS backend's test matrix as μCUTLASS programs: each op kind, operand layout, element
type, schedule, stages auto / explicit, cluster 1x1 / 2x1 / 1x2, every epilogue operation and a
two-kernel pipeline. The GPU tests build and run them; here they must parse, pass the checks and
emit without diagnostics."""

from __future__ import annotations

import pytest

from dsl_compiler.checks import check
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.parser import parse


def _gemm(name, dt, a, b, body, cfg="", extra="", out="y", m=256, n=384, k=128, batch=None, a_t=False, b_t=True,
          shared_b=False):
    bs = "" if batch is None else f"{batch}, "
    a_shape = f"{bs}{k}, {m}" if a_t else f"{bs}{m}, {k}"
    b_bs = "" if (batch is None or shared_b) else f"{batch}, "
    b_shape = f"{b_bs}{n}, {k}" if b_t else f"{b_bs}{k}, {n}"
    return (f"program {name}\ninput {a}: {dt}[{a_shape}]\nparam {b}: {dt}[{b_shape}] = \"{b}\"\n{extra}"
            f"kernel k0 = gemm({a}{'^T' if a_t else ''}, {b}{'^T' if b_t else ''}) {{\n  {cfg}\n{body}\n}}\noutput {out}\n")


BIAS = "param bias: {dt}[384] = \"bias\"\n"

MATRIX: dict[str, str] = {
    # layouts x element types x schedules / stages / clusters
    "gemm_bf16_nt_coop": _gemm("gemm_bf16_nt_coop", "bf16", "x", "w", "  store y: bf16 = relu(acc + bias[col])",
                               "tile = 128x128x64; schedule = cooperative; stages = auto; cluster = 1x1x1", BIAS.format(dt="bf16")),
    "gemm_bf16_nn_pingpong": _gemm("gemm_bf16_nn_pingpong", "bf16", "x", "w", "  store y: bf16 = acc",
                                   "tile = 128x128x64; schedule = pingpong; stages = 4; cluster = 2x1x1", b_t=False),
    "gemm_bf16_tn_cluster12": _gemm("gemm_bf16_tn_cluster12", "bf16", "x", "w", "  store y: f32 = gelu(acc)",
                                    "tile = 128x128x64; schedule = cooperative; cluster = 1x2x1", a_t=True),
    "gemm_bf16_tt": _gemm("gemm_bf16_tt", "bf16", "x", "w", "  store y: bf16 = silu(acc)",
                          "tile = 128x128x64; schedule = pingpong; stages = 3", a_t=True, b_t=False),
    "gemm_f16_nt": _gemm("gemm_f16_nt", "f16", "x", "w", "  store y: f16 = tanh(acc) + sigmoid(acc)",
                         "tile = 128x256x64; schedule = cooperative; cluster = 2x1x1"),
    "gemm_f16_accum_f16": _gemm("gemm_f16_accum_f16", "f16", "x", "w", "  store y: f16 = acc",
                                "accum = f16; tile = 128x128x64"),
    "gemm_tf32_nt": _gemm("gemm_tf32_nt", "f32", "x", "w", "  store y: f32 = relu(acc + bias[col])",
                          "math = tf32; tile = 128x256x32; schedule = cooperative; cluster = 2x1x1", BIAS.format(dt="f32")),
    # tf32 with operands that are not K-major: B [K, N] (A and B swapped: the kernel computes D^T, so every
    # epilogue node runs transposed), A [K, M] (through registers), and both (B transposed in shared memory)
    "gemm_tf32_nn": _gemm("gemm_tf32_nn", "f32", "x", "w", "  store y: f32 = relu(acc + bias[col])",
                          "math = tf32; tile = 128x128x32", BIAS.format(dt="f32"), b_t=False),
    "gemm_tf32_nn_epilogue": _gemm("gemm_tf32_nn_epilogue", "f32", "x", "w",
                                   "  let h = acc * s[row] + bias[col]\n  store y: f32 = relu(h) + r\n  store z: f32 = h * 0.5\n"
                                   "  store rs: f32 = row_sum(h)\n  store cm: f32 = col_max(acc)",
                                   "math = tf32; tile = 128x256x32; schedule = cooperative; cluster = 2x1x1; raster = along_m",
                                   BIAS.format(dt="f32") + "param s: f32[256] = \"s\"\ninput r: f32[256, 384]\n",
                                   out="y, z, rs, cm", b_t=False),
    "bmm_tf32_nn": _gemm("bmm_tf32_nn", "f32", "x", "w", "  store y: f32 = acc", "math = tf32; tile = 128x128x32",
                         batch=3, b_t=False),
    "gemm_tf32_tn": _gemm("gemm_tf32_tn", "f32", "x", "w", "  store y: f32 = gelu(acc)", "math = tf32; tile = 128x128x32",
                          a_t=True),
    "gemm_tf32_tt": _gemm("gemm_tf32_tt", "f32", "x", "w", "  store y: f32 = acc + bias[col]", "math = tf32; schedule = pingpong",
                          BIAS.format(dt="f32"), a_t=True, b_t=False),
    "gemm_ragged_bf16": _gemm("gemm_ragged_bf16", "bf16", "x", "w", "  store y: bf16 = acc * 0.5",
                              "tile = 128x128x64", m=200, n=264, k=72),
    # batched (the L mode), and a batch sharing one B
    "bmm_bf16": _gemm("bmm_bf16", "bf16", "x", "w", "  store y: bf16 = acc", "tile = 128x128x64", batch=3, b_t=False),
    "bmm_shared_b_tf32": _gemm("bmm_shared_b_tf32", "f32", "x", "w", "  store y: f32 = acc", "math = tf32; tile = 128x128x32",
                               batch=2, shared_b=True),
    # decomposition, raster, swizzle
    "gemm_split_k": _gemm("gemm_split_k", "bf16", "x", "w", "  store y: f32 = acc", "tile = 128x128x64; schedule = cooperative; decomposition = split_k; split_k = 2", k=512),
    "gemm_stream_k": _gemm("gemm_stream_k", "bf16", "x", "w", "  store y: f32 = acc + 1.0", "tile = 128x128x64; schedule = cooperative; decomposition = stream_k", k=512),
    "gemm_raster_m_swizzle": _gemm("gemm_raster_m_swizzle", "bf16", "x", "w", "  store y: bf16 = acc", "tile = 128x128x64; raster = along_m; swizzle = 2", m=512, n=512),
    "gemm_raster_n_swizzle": _gemm("gemm_raster_n_swizzle", "bf16", "x", "w", "  store y: bf16 = acc", "tile = 128x128x64; raster = along_n; swizzle = 4", m=512, n=512),
    # every epilogue operation
    "epi_unary_a": _gemm("epi_unary_a", "bf16", "x", "w",
                         "  store y: f32 = neg(acc) + abs(acc) + relu(acc) + gelu(acc) + gelu_tanh(acc) + silu(acc) + sigmoid(acc) + tanh(acc)",
                         "tile = 128x128x64"),
    "epi_unary_b": _gemm("epi_unary_b", "bf16", "x", "w",
                         "  let a = abs(acc) + 1.0\n  store y: f32 = mish(acc) + softplus(acc) + exp(acc * 0.25) + log(a) + sqrt(a) + rsqrt(a) + square(acc) + hardswish(acc) + hardsigmoid(acc)",
                         "tile = 128x128x64"),
    "epi_binary_param": _gemm("epi_binary_param", "bf16", "x", "w",
                              "  let a = abs(acc) + 1.0\n  store y: f32 = min(acc, 0.5) + max(acc, -0.5) + (acc - 1.0) * 2.0 + acc / a + pow(a, 1.5) + clamp(acc, -0.25, 0.25) + hardtanh(acc, -1.0, 1.0) + leaky_relu(acc, 0.1) + elu(acc, 1.0)",
                              "tile = 128x128x64"),
    "epi_broadcasts": _gemm("epi_broadcasts", "bf16", "x", "w",
                            "  store y: f32 = acc * s[row] + bias[col] * g[scalar] + r + 0.5 * r2",
                            "tile = 128x128x64",
                            BIAS.format(dt="bf16") + "param s: f32[256] = \"s\"\nparam g: f32[1] = \"g\"\ninput r: f32[256, 384]\ninput r2: bf16[256, 384]\n"),
    "epi_multi_store_reduce": _gemm("epi_multi_store_reduce", "bf16", "x", "w",
                                    "  let h = acc + bias[col]\n  store y: f32 = h\n  store z: bf16 = relu(h)\n  store rs: f32 = row_sum(h)\n  store rm: f32 = row_max(h)\n  store cm: f32 = col_min(acc)",
                                    "tile = 128x128x64; schedule = cooperative", BIAS.format(dt="bf16"), out="y, z, rs, rm, cm"),
    # convolution forward 1-D / 2-D / 3-D, channels-last
    "conv2d_bf16_bias_relu": (
        "program conv2d_bf16_bias_relu\ninput x: bf16[2, 64, 16, 16] channels_last\nparam w: bf16[128, 64, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: bf16[128] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {\n"
        "  tile = 128x128x64\n  store y: bf16 = relu(acc + b[col])\n}\noutput y\n"),
    "conv2d_tf32_stride_dilation": (
        "program conv2d_tf32_stride_dilation\ninput x: f32[2, 32, 17, 17] channels_last\nparam w: f32[64, 32, 3, 3] channels_last = \"conv.weight\"\n"
        "kernel c = conv2d(x, w, stride=(2, 2), padding=(2, 2), dilation=(2, 2), groups=1) {\n  math = tf32; tile = 128x64x32; stages = 4\n"
        "  store y: f32 = acc\n}\noutput y\n"),
    "conv2d_residual": (
        "program conv2d_residual\ninput x: bf16[2, 64, 8, 8] channels_last\ninput r: bf16[2, 64, 8, 8] channels_last\n"
        "param w: bf16[64, 64, 3, 3] channels_last = \"conv.weight\"\n"
        "kernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {\n  tile = 128x64x64; cluster = 2x1x1\n"
        "  store y: bf16 = relu(acc + r)\n}\noutput y\n"),
    "conv1d_f16": (
        "program conv1d_f16\ninput x: f16[4, 32, 100] channels_last\nparam w: f16[64, 32, 5] channels_last = \"conv.weight\"\n"
        "kernel c = conv1d(x, w, stride=(1,), padding=(2,), dilation=(1,), groups=1) {\n  tile = 128x64x64\n  store y: f16 = acc\n}\noutput y\n"),
    "conv3d_bf16": (
        "program conv3d_bf16\ninput x: bf16[2, 16, 6, 8, 8] channels_last\nparam w: bf16[32, 16, 3, 3, 3] channels_last = \"conv.weight\"\n"
        "kernel c = conv3d(x, w, stride=(1, 1, 1), padding=(1, 1, 1), dilation=(1, 1, 1), groups=1) {\n  tile = 128x64x64\n"
        "  store y: f32 = acc * 2.0\n}\noutput y\n"),
    # grouped GEMM (mixture-of-experts form): equal and unequal row groups, B [G, K, N] and B^T [G, N, K],
    # groups that are not tile multiples, column / row / scalar broadcasts and a full-size source tensor
    "grouped": (
        "program grouped\ninput x: bf16[256, 64]\nparam w: bf16[2, 64, 128] = \"w\"\n"
        "kernel g = grouped_gemm(x, w, group_sizes=(128, 128)) {\n  store y: bf16 = acc\n}\noutput y\n"),
    "grouped_bf16_bias_relu": (
        "program grouped_bf16_bias_relu\ninput x: bf16[384, 128]\nparam w: bf16[3, 128, 256] = \"experts.w\"\n"
        "param b: bf16[256] = \"experts.b\"\n"
        "kernel g = grouped_gemm(x, w, group_sizes=(128, 64, 192)) {\n  tile = 128x128x64; schedule = cooperative\n"
        "  store y: bf16 = relu(acc + b[col])\n}\noutput y\n"),
    "grouped_tf32_bt_rows_src": (
        "program grouped_tf32_bt_rows_src\ninput x: f32[256, 96]\nparam w: f32[3, 128, 96] = \"experts.w\"\n"
        "param s: f32[256] = \"s\"\nparam g: f32[1] = \"g\"\ninput r: f32[256, 128]\n"
        "kernel k0 = grouped_gemm(x, w^T, group_sizes=(100, 60, 96)) {\n"
        "  math = tf32; tile = 64x128x32; schedule = pingpong; cluster = 2x1x1; stages = 4; raster = along_n; swizzle = 2\n"
        "  store y: f32 = acc * s[row] + g[scalar] * r - 0.25\n}\noutput y\n"),
    # groups > 1: CUTLASS 2.x kernels (cutlass.grouped_conv). Depthwise: the direct SIMT conv, with stride and dilation as
    # template constants, and at run time (dilation 3); grouped: the Sm80 tensor-op group conv, one group per CTA
    # (K/groups = 32, tile N 32) and several (K/groups = 16, tile N 64)
    "depthwise_conv2d_relu6": (
        "program depthwise_conv2d_relu6\ninput x: f32[2, 64, 20, 20] channels_last\nparam w: f32[64, 1, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: f32[64] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=64) {\n"
        "  math = f32\n  store y: f32 = hardtanh(acc + b[col], 0.0, 6.0)\n}\noutput y\n"),
    "depthwise_conv2d_f16_stride2": (
        "program depthwise_conv2d_f16_stride2\ninput x: f16[2, 32, 17, 15] channels_last\nparam w: f16[32, 1, 5, 5] channels_last = \"conv.weight\"\n"
        "kernel c = conv2d(x, w, stride=(2, 2), padding=(2, 1), dilation=(1, 1), groups=32) {\n  stages = 3\n"
        "  store y: f16 = clamp(acc * 0.5, -1.0, 1.0)\n}\noutput y\n"),
    "depthwise_conv2d_f16_in_f32_bias_out": (
        "program depthwise_conv2d_f16_in_f32_bias_out\ninput x: f16[2, 64, 16, 16] channels_last\nparam w: f16[64, 1, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: f32[64] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=64) {\n"
        "  math = f16\n  store y: f32 = hardtanh(acc + b[col], 0.0, 6.0)\n}\noutput y\n"),
    "depthwise_conv2d_dilation3_residual": (
        "program depthwise_conv2d_dilation3_residual\ninput x: f32[2, 16, 12, 12] channels_last\ninput r: f32[2, 16, 12, 12] channels_last\n"
        "param w: f32[16, 1, 3, 3] channels_last = \"conv.weight\"\n"
        "kernel c = conv2d(x, w, stride=(1, 1), padding=(3, 3), dilation=(3, 3), groups=16) {\n  math = tf32\n"
        "  store y: f32 = relu(acc + r)\n}\noutput y\n"),
    "grouped_conv2d_tf32_bias": (
        "program grouped_conv2d_tf32_bias\ninput x: f32[2, 64, 10, 10] channels_last\nparam w: f32[64, 32, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: f32[64] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=2) {\n"
        "  math = tf32\n  store y: f32 = sigmoid(acc + b[col])\n}\noutput y\n"),
    # 1-D: the 2-D kernels with H = R = 1
    "depthwise_conv1d_stride2": (
        "program depthwise_conv1d_stride2\ninput x: f32[2, 32, 50] channels_last\nparam w: f32[32, 1, 5] channels_last = \"conv.weight\"\n"
        "param b: f32[32] = \"conv.bias\"\nkernel c = conv1d(x, w, stride=(2,), padding=(2,), dilation=(1,), groups=32) {\n"
        "  math = f32\n  store y: f32 = silu(acc + b[col])\n}\noutput y\n"),
    "grouped_conv1d_bf16": (
        "program grouped_conv1d_bf16\ninput x: bf16[2, 64, 40] channels_last\nparam w: bf16[64, 16, 3] channels_last = \"conv.weight\"\n"
        "kernel c = conv1d(x, w, stride=(1,), padding=(1,), dilation=(1,), groups=4) {\n  store y: bf16 = acc\n}\noutput y\n"),
    "grouped_conv2d_f16_in_f32_bias_out": (
        "program grouped_conv2d_f16_in_f32_bias_out\ninput x: f16[2, 64, 12, 12] channels_last\nparam w: f16[64, 8, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: f32[64] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=8) {\n"
        "  math = f16; tile = 128x64x64\n  store y: f32 = sigmoid(acc + b[col])\n}\noutput y\n"),
    "grouped_conv2d_bf16_multi_group": (
        "program grouped_conv2d_bf16_multi_group\ninput x: bf16[2, 64, 9, 9] channels_last\nparam w: bf16[64, 16, 3, 3] channels_last = \"conv.weight\"\n"
        "param b: bf16[64] = \"conv.bias\"\nkernel c = conv2d(x, w, stride=(2, 2), padding=(1, 1), dilation=(1, 1), groups=4) {\n"
        "  tile = 64x64x32; swizzle = 2\n  store y: bf16 = relu(acc + b[col])\n}\noutput y\n"),
    # a two-kernel pipeline (MLP) with a torch step at the end
    "pipeline_mlp": (
        "program pipeline_mlp\ninput x: bf16[256, 256]\nparam w1: bf16[512, 256] = \"fc1.weight\"\nparam b1: bf16[512] = \"fc1.bias\"\n"
        "param w2: bf16[128, 512] = \"fc2.weight\"\nparam b2: bf16[128] = \"fc2.bias\"\n"
        "kernel fc1 = gemm(x, w1^T) {\n  tile = 128x128x64; schedule = pingpong\n  store h: bf16 = gelu(acc + b1[col])\n}\n"
        "kernel fc2 = gemm(h, w2^T) {\n  tile = 128x128x64\n  store y: f32 = acc + b2[col]\n}\n"
        "torch z = softmax(y, dim=1)\noutput z\n"),
}

# Programs the backend must refuse with an `unsupported` diagnostic (and a hint), not a crash.
UNSUPPORTED: dict[str, str] = {
    # depthwise with a channel multiplier (K = 2C): CUTLASS's depthwise kernel computes one output channel per input channel
    "depthwise": (
        "program dw\ninput x: bf16[2, 64, 8, 8] channels_last\nparam w: bf16[128, 1, 3, 3] channels_last = \"w\"\n"
        "kernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=64) {\n  store y: bf16 = acc\n}\noutput y\n"),
    "grouped_conv3d": (
        "program gc3\ninput x: bf16[2, 64, 6, 6, 6] channels_last\nparam w: bf16[64, 16, 3, 3, 3] channels_last = \"w\"\n"
        "kernel c = conv3d(x, w, stride=(1, 1, 1), padding=(1, 1, 1), dilation=(1, 1, 1), groups=4) {\n  store y: bf16 = acc\n}\noutput y\n"),
    "conv_nchw": (
        "program nchw\ninput x: bf16[2, 64, 8, 8]\nparam w: bf16[64, 64, 3, 3] = \"w\"\n"
        "kernel c = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {\n  store y: bf16 = acc\n}\noutput y\n"),
    "exact_fp32": _gemm("exact_fp32", "f32", "x", "w", "  store y: f32 = acc", ""),
    "tf32_mn_major_explicit_stages": _gemm("tf32_mn_major_explicit_stages", "f32", "x", "w", "  store y: f32 = acc",
                                           "math = tf32; stages = 4", b_t=False),
    "tf32_both_mn_major_tile_k64": _gemm("tf32_both_mn_major_tile_k64", "f32", "x", "w", "  store y: f32 = acc",
                                         "math = tf32; tile = 128x128x64", a_t=True, b_t=False),
    "streamk_pingpong": _gemm("streamk_pingpong", "bf16", "x", "w", "  store y: f32 = acc", "schedule = pingpong; decomposition = stream_k"),
}


def program(name: str):
    text = MATRIX.get(name) or UNSUPPORTED[name]
    prog, diags = parse(text)
    assert prog is not None, "\n".join(d.render(name) for d in diags)
    return prog


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_matrix_program_parses_checks_and_emits(name):
    prog = program(name)
    errors = [d for d in check(prog) if d.severity == "error"]
    assert not errors, "\n".join(d.render(name) for d in errors)
    emitted, diags = emit_program(prog)
    assert not diags, [d.message for d in diags]
    assert len(emitted) == len(prog.kernels)


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_programs_get_a_diagnostic_with_a_hint(name):
    prog, diags = parse(UNSUPPORTED[name])
    assert prog is not None, diags
    emitted, diags = emit_program(prog)
    assert diags and all(d.code == "unsupported" and d.hint for d in diags), diags
    assert diags[0].span is not None


def test_a_program_of_torch_steps_alone_loads_on_the_cutlass_backend_without_artifacts():
    import torch

    from dsl_compiler import parse
    from dsl_compiler.runtime import load

    program, diags = parse("input x: f32[4, 8]\ntorch y = sigmoid(x)\noutput y\n")
    assert program is not None and not diags
    x = torch.randn(4, 8)
    for artifacts in (None, {}):  # what a build of no kernels hands over
        module = load(program, "cutlass", {}, artifacts)
        assert torch.equal(module(x), torch.sigmoid(x))
