"""Grouped and depthwise 2-D convolution in the CUTLASS backend (dsl_compiler.cutlass.grouped_conv): which CUTLASS
2.x kernel each program becomes, what its epilogue reads, what is refused (with a hint), the C ABI the runtime
calls, and (nvcc) that both kinds compile."""

from __future__ import annotations

import os

import pytest

from dsl_compiler.checks import check
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.parser import parse


def conv(groups, c=64, k=None, dt="f32", cfg="math = f32", body="store y: {dt} = acc", extra="", hw=(12, 12),
         filt=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), dims=2):
    k = c if k is None else k
    sp = ", ".join(map(str, hw[:dims]))
    fl = ", ".join(map(str, filt[:dims]))
    tup = lambda t: "(" + ", ".join(map(str, t[:dims])) + ("," if dims == 1 else "") + ")"  # noqa: E731
    return (f"program p\ninput x: {dt}[2, {c}, {sp}] channels_last\nparam w: {dt}[{k}, {c // groups}, {fl}] channels_last = \"w\"\n"
            f"{extra.format(dt=dt, k=k)}kernel c = conv{dims}d(x, w, stride={tup(stride)}, padding={tup(padding)}, "
            f"dilation={tup(dilation)}, groups={groups}) {{\n  {cfg}\n  {body.format(dt=dt)}\n}}\noutput y\n")


BIAS = "param b: {dt}[{k}] = \"b\"\n"


def emit(text):
    prog, diags = parse(text)
    assert prog is not None, diags
    emitted, diags = emit_program(prog)
    return prog, emitted, diags


def emitted_one(text):
    prog, emitted, diags = emit(text)
    assert not diags, [d.render() for d in diags]
    errors = [d for d in check(prog) if d.severity == "error"]
    assert not errors, [d.render() for d in errors]
    (e,) = emitted
    return e


def refused(text):
    _, emitted, diags = emit(text)
    assert not emitted and len(diags) == 1, diags
    d = diags[0]
    assert d.code == "unsupported" and d.hint and d.span is not None, d
    return d


# ---------------------------------------------------------------------------------------------
# Depthwise


def test_depthwise_relu6_with_bias_is_the_direct_conv_with_fixed_stride_and_dilation():
    e = emitted_one(conv(64, body="store y: {dt} = hardtanh(acc + b[col], 0.0, 6.0)", extra=BIAS))
    src = e.source
    assert "DefaultDepthwiseDirect2dConvFprop" in src and "cutlass::conv::device::DirectConvolution<" in src
    assert "IteratorAlgorithm::kFixedStrideDilation" in src and "cutlass::MatrixShape<1, 1>, cutlass::MatrixShape<1, 1>" in src
    assert "cutlass::arch::OpClassSimt" in src and "FilterShape = cutlass::MatrixShape<3, 3>" in src
    assert "kGroups = 64;" in src
    # the bias is CUTLASS's source operand C with every stride 0; the epilogue reads it
    assert "Layout lc = Layout(typename Layout::Stride(0));" in src and "is_source_needed() const { return true; }" in src
    assert "mu_clamp((v0 + v1), p.c[0], p.c[1])" in src
    # the filter is re-laid out into the workspace, which mucutlass_workspace_size sizes
    assert "{reinterpret_cast<ElementB*>(workspace), lb}" in src and "sizeof(typename Op::ElementB)" in src
    abi = e.abi
    assert abi.op_kind == "conv" and abi.spatial_dims == 2
    assert [(t.name, t.role) for t in abi.tensors] == [("x", "x"), ("w", "w"), ("y", "d"), ("b", "col")]
    assert abi.scalars == (0.0, 6.0) and abi.ints[:6] == ("n", "d", "h", "w", "c", "k")


def test_depthwise_large_dilation_reads_stride_and_dilation_at_run_time():
    src = emitted_one(conv(16, c=16, dilation=(3, 3), padding=(3, 3))).source
    assert "IteratorAlgorithm::kOptimized" in src and "cutlass::MatrixShape<-1, -1>" in src
    assert "TensorNHWCShape<1, 8, 8, 16>" in src  # 16 channels: a 16-channel CTA


def test_depthwise_accepts_tf32_and_computes_fp32_and_checks_allow_f32_math():
    a = emitted_one(conv(64, cfg="math = tf32"))
    b = emitted_one(conv(64, cfg="math = f32"))
    assert a.source == b.source  # both are the fp32 SIMT kernel
    prog, _ = parse(conv(64, cfg=""))
    assert not [d for d in check(prog) if d.severity == "error"]  # f32 operands with no math knob: exact fp32


def test_depthwise_stages_auto_fits_shared_memory_and_explicit_stages_are_kept():
    from dsl_compiler.cutlass.grouped_conv import depthwise_plan

    auto = depthwise_plan("f32", 256, 3, 3, (1, 1), (1, 1), "auto")
    assert auto["oh"] == 8 and auto["groups_per_cta"] == 64 and auto["stages"] >= 2 and auto["fixed"]
    assert auto["smem_bytes"] <= 200 * 1024
    big = depthwise_plan("f32", 256, 7, 7, (2, 2), (2, 2), "auto")
    assert not big["fixed"] and big["smem_bytes"] <= 200 * 1024
    assert "    3,  // knob: stages" in emitted_one(conv(64, cfg="math = f32; stages = 3")).source


def test_depthwise_split_setting_spreads_output_tiles_over_the_sms_and_is_off_by_default(monkeypatch):
    """CUTLASS's depthwise grid is (1, ceil(K / 64), split_k_slices): off, split_k_slices stays 1 (a few CTAs walk
    every output tile, the source as before); on, the host code sizes it from the SM count and the tile counts."""
    text = conv(192, c=192, body="store y: {dt} = hardtanh(acc, 0.0, 6.0)", hw=(224, 224))
    monkeypatch.delenv("MUCUTLASS_DEPTHWISE_SPLIT", raising=False)
    default = emitted_one(text).source
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "off")
    off = emitted_one(text).source
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "on")
    on = emitted_one(text).source
    assert default == off and "mu_slices" not in off and "Mode::kCrossCorrelation, 1, kGroups)" in off
    assert "Mode::kCrossCorrelation, mu_slices(I(0), P, Q, I(5)), kGroups)" in on
    assert "static int mu_slices(int n, int p, int q, int k)" in on and "cudaDevAttrMultiProcessorCount" in on
    # the tile counts the kernel's own 8x8x64 output tile gives, and about 4 CTAs per SM over the channel blocks
    assert "n * ((p + 7) / 8) * ((q + 7) / 8)" in on and "(k + 63) / 64" in on and "(4LL * sms" in on
    assert "TensorNHWCShape<1, 8, 8, 64>" in on
    # everything else is the same kernel
    assert on.split("namespace", 1)[0] == off.split("namespace", 1)[0]
    assert on.count("DefaultDepthwiseDirect2dConvFprop") == off.count("DefaultDepthwiseDirect2dConvFprop") == 1
    # a grouped (tensor-core) conv is untouched by the setting
    grouped = conv(2, cfg="math = tf32")
    assert "mu_slices" not in emitted_one(grouped).source
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "off")
    assert "mu_slices" not in emitted_one(grouped).source


def test_depthwise_split_setting_with_a_bad_value_is_one_diagnostic(monkeypatch):
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", "maybe")
    _, emitted, diags = emit(conv(64))
    assert not emitted and len(diags) == 1
    d = diags[0]
    assert "MUCUTLASS_DEPTHWISE_SPLIT" in d.message and "'maybe'" in d.message and d.hint and d.span is not None


def test_depthwise_with_a_channel_multiplier_is_refused_with_a_torch_step_hint():
    d = refused(conv(64, k=128))
    assert "channel multiplier" in d.message and "groups=64" in d.hint


def test_depthwise_channels_must_fill_a_16_byte_access():
    d = refused(conv(6, c=6, dt="f32"))
    assert "C = 6" in d.found and "multiple of 4" in d.hint


@pytest.mark.parametrize("cfg,knob", [("math = f32; tile = 128x64x32", "tile"), ("math = f32; cluster = 2x1x1", "cluster"),
                                      ("math = f32; schedule = pingpong", "schedule"), ("math = f32; swizzle = 2", "swizzle")])
def test_depthwise_refuses_knobs_it_does_not_have_at_their_span(cfg, knob):
    d = refused(conv(64, cfg=cfg))
    assert d.found.startswith(f"{knob} =") and d.span.line == 5  # the config line


# ---------------------------------------------------------------------------------------------
# Grouped


def test_grouped_one_group_per_cta_uses_optimized_iterators_and_bias():
    e = emitted_one(conv(4, c=128, cfg="math = tf32", body="store y: {dt} = sigmoid(acc + b[col])", extra=BIAS))
    src = e.source
    assert "DefaultConv2dGroupFprop" in src and "cutlass::conv::device::ImplicitGemmConvolution<" in src
    assert "GroupMode::kSingleGroup" in src and "IteratorAlgorithm::kOptimized" in src
    assert "cutlass::arch::Sm80" in src and "cutlass::gemm::GemmShape<16, 8, 8>" in src  # TF32 mma.sync
    assert "GemmShape<128, 32, 32>" in src  # K/groups = 32: one group per CTA
    assert "mu_sigmoid((v0 + v1))" in src and "Layout(typename Layout::Stride(0))" in src
    assert "return 0;\n}" in src and [t.role for t in e.abi.tensors] == ["x", "w", "d", "col"]


def test_grouped_several_groups_per_cta_uses_analytic_iterators():
    src = emitted_one(conv(8, c=64, cfg="math = tf32")).source  # K/groups = 8
    assert "GroupMode::kMultipleGroup" in src and "IteratorAlgorithm::kAnalytic" in src and "GemmShape<128, 32, 32>" in src


def test_grouped_16_bit_tile_swizzle_stages_and_residual():
    e = emitted_one(conv(4, c=64, dt="bf16", cfg="tile = 64x64x32; swizzle = 4; stages = 4",
                         body="store y: {dt} = relu(acc + r)", extra="input r: {dt}[2, {k}, 12, 12] channels_last\n"))
    src = e.source
    assert "cutlass::bfloat16_t" in src and "GemmShape<16, 8, 16>" in src and "GemmShape<64, 64, 32>" in src
    assert "GemmIdentityThreadblockSwizzle<4>" in src and "    4,  // knob: stages" in src
    assert "Layout lc = ld;" in src and [t.role for t in e.abi.tensors] == ["x", "w", "d", "src"]


def test_grouped_tile_n_must_serve_the_groups():
    d = refused(conv(4, c=192, cfg="math = tf32; tile = 128x64x32"))  # K/groups = 48: 64 neither divides nor is a multiple
    assert "tile N = 64" in d.found and "K/groups = 48" in d.message and "leave tile" in d.hint


def test_grouped_exact_fp32_is_refused_with_the_tf32_hint():
    d = refused(conv(4, c=64, cfg="math = f32"))
    assert "tf32" in d.hint


@pytest.mark.parametrize("cfg", ["math = tf32; cluster = 2x1x1", "math = tf32; decomposition = split_k; split_k = 2"])
def test_grouped_refuses_sm90_only_knobs(cfg):
    refused(conv(4, c=64, cfg=cfg))


def test_constants_are_runtime_scalars_so_kernels_share_a_build():
    a = emitted_one(conv(64, body="store y: {dt} = clamp(acc, 0.0, 6.0)"))
    b = emitted_one(conv(64, body="store y: {dt} = clamp(acc, -1.0, 1.0)"))
    assert a.source == b.source and a.abi.scalars != b.abi.scalars


# ---------------------------------------------------------------------------------------------
# Epilogues and shapes the kernels cannot take


@pytest.mark.parametrize("body,extra,what", [
    ("store y: {dt} = acc + b[col] + r", BIAS + "input r: {dt}[2, {k}, 12, 12] channels_last\n", "reads 2 tensors"),
    ("store y: {dt} = acc * g[scalar]", "param g: {dt}[1] = \"g\"\n", "one-element tensor"),
    ("store y: {dt} = acc\n  store z: {dt} = relu(acc)", "", "2 stores"),
    ("store y: {dt} = acc + b[col]", "param b: f16[{k}] = \"b\"\n", "is f16 but the store is f32"),
])
def test_epilogues_beyond_one_source_tensor_are_refused(body, extra, what):
    d = refused(conv(64, body=body, extra=extra))
    assert what in d.message and ("later" in d.hint or "convert" in d.hint)


def test_conv1d_runs_as_the_2d_kernel_with_one_row():
    dw = emitted_one(conv(64, dims=1, hw=(40,), filt=(5,), padding=(2,), stride=(2,)))
    assert "FilterShape = cutlass::MatrixShape<1, 5>" in dw.source and "cutlass::MatrixShape<1, 2>, cutlass::MatrixShape<1, 1>" in dw.source
    assert dw.abi.spatial_dims == 1
    gc = emitted_one(conv(4, c=128, dt="bf16", cfg="", dims=1, hw=(40,), filt=(3,), padding=(1,)))
    assert "GroupMode::kSingleGroup" in gc.source and gc.abi.spatial_dims == 1


def test_grouped_conv3d_and_nchw_are_refused():
    text = (f"program p\ninput x: bf16[2, 64, 6, 6, 6] channels_last\nparam w: bf16[64, 16, 3, 3, 3] channels_last = \"w\"\n"
            "kernel c = conv3d(x, w, stride=(1, 1, 1), padding=(1, 1, 1), dilation=(1, 1, 1), groups=4) {\n  store y: bf16 = acc\n}\noutput y\n")
    assert "2-D" in refused(text).message and "conv3d" in refused(text).hint
    text = conv(64).replace(" channels_last\nparam", "\nparam", 1)
    prog, diags = parse(text)
    assert any(d.code == "layout" for d in check(prog))
    assert "NCHW" in refused(text).message


# ---------------------------------------------------------------------------------------------
# The runtime's call: the conv ABI unchanged


def test_runtime_gives_a_1d_conv_the_ints_of_a_2d_one_with_one_row():
    import dataclasses

    import torch

    from dsl_compiler.cutlass_runtime import conv_call_args

    prog = parse(conv(64, dims=1, hw=(40,), filt=(5,), padding=(2,), stride=(2,)))[0]
    (e,) = emit_program(prog)[0]
    env = {"x": torch.randn(2, 64, 40), "w": torch.randn(64, 1, 5)}
    tensors, ints, results = conv_call_args("c", prog.kernels[0].op.model_dump(mode="json"), dataclasses.asdict(e.abi), env, {})
    # n d h w c k t r s | pad d h w | stride d h w | dilation d h w: h = r = 1, pad_h = 0, stride_h = dil_h = 1
    assert ints == [2, 1, 1, 40, 64, 64, 1, 1, 5, 0, 0, 2, 1, 1, 2, 1, 1, 1]
    assert tuple(results["y"].shape) == (2, 64, 20) and tensors[0].permute(0, 2, 1).is_contiguous()


def test_runtime_builds_the_conv_call_for_a_depthwise_kernel_on_cpu_tensors():
    import dataclasses

    import torch

    from dsl_compiler.cutlass_runtime import CutlassError, conv_call_args

    prog = parse(conv(64, body="store y: {dt} = relu(acc + b[col])", extra=BIAS, stride=(2, 2)))[0]
    (e,) = emit_program(prog)[0]
    kernel = prog.kernels[0]
    env = {"x": torch.randn(2, 64, 12, 12), "w": torch.randn(64, 1, 3, 3), "b": torch.randn(64)}
    tensors, ints, results = conv_call_args("c", kernel.op.model_dump(mode="json"), dataclasses.asdict(e.abi), env, {})
    assert ints == [2, 1, 12, 12, 64, 64, 1, 3, 3, 0, 1, 1, 1, 2, 2, 1, 1, 1]
    assert tuple(results["y"].shape) == (2, 64, 6, 6) and results["y"].permute(0, 2, 3, 1).is_contiguous()
    assert tensors[1].permute(0, 2, 3, 1).is_contiguous() and tensors[3].numel() == 64
    env["b"] = torch.randn(32)
    with pytest.raises(CutlassError, match=r"b\[col\]"):
        conv_call_args("c", kernel.op.model_dump(mode="json"), dataclasses.asdict(e.abi), env, {})


# ---------------------------------------------------------------------------------------------
# nvcc: each kind compiles (compile-only; the GPU matrix runs them)


@pytest.mark.nvcc
@pytest.mark.parametrize("name, split", [("depthwise_conv2d_relu6", "off"), ("depthwise_conv2d_relu6", "on"),
                                         ("grouped_conv2d_tf32_bias", "off")])
def test_real_nvcc_compiles_depthwise_and_grouped(name, split, tmp_path, monkeypatch):
    from test_backend_programs import program

    from dsl_compiler import build

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", split)
    res = build.build_program(program(name))
    assert res.ok, "\n".join(d.render() for d in res.diagnostics)
    (so,) = res.artifacts.values()
    assert os.path.getsize(so) > 100_000
