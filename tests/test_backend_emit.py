"""Structure of the emitted CUTLASS C++ (not whole-file snapshots)."""

from __future__ import annotations

import re

from test_backend_programs import program

from dsl_compiler.cutlass.emit import emit_kernel, emit_program


def _one(name):
    prog = program(name)
    emitted, diags = emit_program(prog)
    assert not diags
    return prog, emitted[0]


def test_gemm_bias_relu_uses_collective_builders_and_an_evt_tree():
    _, e = _one("gemm_bf16_nt_coop")
    src = e.source
    assert "cutlass::gemm::collective::CollectiveBuilder<" in src
    assert "cutlass::epilogue::collective::CollectiveBuilder<" in src
    assert "cutlass::gemm::KernelTmaWarpSpecializedCooperative" in src
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative" in src
    assert "using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>" in src
    assert "StageCountAutoCarveout" in src
    # relu(acc + bias[col]): one fused compute node over the accumulator and a row broadcast (length N)
    assert re.search(r"Sm90EVT<cutlass::epilogue::fusion::Sm90Compute<Fused0, cutlass::bfloat16_t, float, RN>, "
                     r"cutlass::epilogue::fusion::Sm90AccFetch, cutlass::epilogue::fusion::Sm90RowBroadcast<", src)
    assert "fmaxf((v0 + v1), 0.f)" in src
    # nn.Linear weight [N, K] is B in column-major; x [M, K] is row-major A
    assert "cutlass::bfloat16_t, cutlass::layout::RowMajor, 8, cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8" in src
    assert 'extern "C" int mucutlass_run(' in src and 'extern "C" int mucutlass_workspace_size(' in src
    assert "cutlassGetStatusString" in src and "can_implement" in src
    assert [t.role for t in e.abi.tensors] == ["a", "b", "d", "col"]


def test_namespace_is_a_deterministic_hash_of_the_kernel():
    prog, e1 = _one("gemm_bf16_nt_coop")
    e2 = emit_kernel(prog, prog.kernels[0])
    assert e1.source == e2.source and e1.namespace == e2.namespace
    assert re.fullmatch(r"mu_[0-9a-f]{16}", e1.namespace)
    _, other = _one("gemm_bf16_nn_pingpong")
    assert other.namespace != e1.namespace


def test_constants_are_runtime_scalars_so_builds_are_shared():
    from dsl_compiler.parser import parse
    from test_backend_programs import MATRIX

    _, e = _one("epi_binary_param")
    assert 0.1 in e.abi.scalars and 1.5 in e.abi.scalars
    assert "struct Fused0Args { float c[" in e.source and "using Arguments = Fused0Args;" in e.source
    prog2, _ = parse(MATRIX["epi_binary_param"].replace("leaky_relu(acc, 0.1)", "leaky_relu(acc, 0.2)"))
    e2 = emit_program(prog2)[0][0]
    assert e2.source == e.source and 0.2 in e2.abi.scalars and 0.1 not in e2.abi.scalars


def test_layouts_schedules_clusters_stages_and_schedulers():
    _, nn = _one("gemm_bf16_nn_pingpong")
    assert "cutlass::layout::RowMajor, 8, cutlass::bfloat16_t, cutlass::layout::RowMajor, 8" in nn.source
    assert "KernelTmaWarpSpecializedPingpong" in nn.source and "StageCount<4>" in nn.source
    assert "ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>" in nn.source
    _, tn = _one("gemm_bf16_tn_cluster12")
    assert "cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8, cutlass::bfloat16_t, cutlass::layout::ColumnMajor, 8" in tn.source
    assert "cute::Shape<cute::_1, cute::_2, cute::_1>" in tn.source
    # raster, swizzle and the split count are run-time values of the ABI: one build serves every choice
    _, sk = _one("gemm_split_k")
    knobs = dict(sk.abi.knob_values)
    assert "cutlass::gemm::StreamKScheduler" in sk.source and "static_cast<DecompT>(I(" in sk.source
    assert knobs["splits"] == 2 and knobs["decomposition"] == 2  # DecompositionMode::SplitK
    _, st = _one("gemm_stream_k")
    assert dict(st.abi.knob_values)["decomposition"] == 3  # StreamK
    _, ra = _one("gemm_raster_m_swizzle")
    assert dict(ra.abi.knob_values) == {"raster": 1, "swizzle": 2}  # RasterOrderOptions::AlongM
    assert "static_cast<RasterT>(I(" in ra.source and "max_swizzle_size = int(I(" in ra.source
    for name in ("raster", "swizzle"):
        assert ra.abi.ints.index(name) == len(ra.abi.ints) - 2 + ("raster", "swizzle").index(name)
    _, rn = _one("gemm_raster_n_swizzle")
    assert rn.source == ra.source and dict(rn.abi.knob_values) == {"raster": 2, "swizzle": 4}
    _, tf = _one("gemm_tf32_nt")
    assert "float, cutlass::layout::RowMajor, 4, float, cutlass::layout::ColumnMajor, 4, float" in tf.source


def test_epilogue_broadcasts_aux_loads_stores_and_reductions():
    _, e = _one("epi_broadcasts")
    src = e.source
    for node in ("Sm90ColBroadcast<", "Sm90RowBroadcast<", "Sm90ScalarBroadcast<float>", "Sm90SrcFetch<float>", "Sm90AuxLoad<0,"):
        assert node in src, node
    assert [t.role for t in e.abi.tensors][3:] == ["row", "col", "scalar", "src", "aux"]
    _, m = _one("epi_multi_store_reduce")
    src = m.source
    assert "Sm90AuxStore<0," in src and "TakeFirst" in src
    assert src.count("Sm90ColReduction<cutlass::plus") == 1  # row_sum: reduce over N
    assert "Sm90ColReduction<cutlass::maximum" in src  # row_max
    assert "Sm90RowReduction<cutlass::minimum" in src  # col_min: reduce over M
    assert "-INFINITY" in src and "INFINITY" in src
    assert [(t.role, t.reduce_fn) for t in m.abi.tensors if t.role == "reduce"] == [("reduce", "row_sum"), ("reduce", "row_max"), ("reduce", "col_min")]


def test_tf32_with_b_n_major_runs_transposed_and_other_layouts_do_not():
    """CUTLASS swaps A and B for tf32 A [M, K] x B [K, N]: the kernel computes D^T, so tile, cluster, raster
    and every epilogue node are written for [N, M], and the epilogue's parameters are rebuilt for it."""
    _, e = _one("gemm_tf32_nn_epilogue")  # tile 128x256, cluster 2x1, raster along_m in the program
    src = e.source
    assert "TileShape = cute::Shape<cute::_256, cute::_128, cute::_32>" in src
    assert "ClusterShape = cute::Shape<cute::_1, cute::_2, cute::_1>" in src
    assert dict(e.abi.knob_values)["raster"] == 2  # RasterOrderOptions::AlongN: the program's along_m, swapped
    assert "float, cutlass::layout::ColumnMajor, 4, float, cutlass::layout::ColumnMajor, 4," in src  # C and D
    assert "args.epilogue.dD = cute::make_stride(cute::_1{}, I(8), I(9))" in src
    # bias[col] (per N) is per row of D^T, s[row] (per M) per column; row_sum reduces D^T's rows
    assert "Sm90ColBroadcast<0, TileShape, float, float, cute::Stride<cute::_1, cute::_0, int64_t>" in src
    assert "Sm90RowBroadcast<0, TileShape, float, float, cute::Stride<cute::_0, cute::_1, int64_t>" in src
    assert "Sm90RowReduction<cutlass::plus" in src and "Sm90ColReduction<cutlass::maximum" in src
    assert "Sm90SrcFetch<float>" in src and "args.epilogue.dC = cute::make_stride(cute::_1{}, I(" in src  # r, as C
    assert "Sm90AuxStore<0, TileShape, float, RN, cute::Stride<cute::_1, int64_t, int64_t>" in src
    assert "CollectiveEpilogue::to_underlying_arguments(swapped, args.epilogue, workspace)" in src
    assert [t.role for t in e.abi.tensors][:3] == ["a", "b", "d"]  # the ABI is the program's, not the swap's
    for name in ("gemm_tf32_tn", "gemm_tf32_tt", "gemm_tf32_nt"):  # no swap: D row-major, the usual launch
        _, k = _one(name)
        assert "args.epilogue.dD = cute::make_stride(I(8), cute::_1{}, I(9))" in k.source, name
        assert "swapped" not in k.source and "op.can_implement(args)" in k.source, name


def test_conv_uses_the_sm90_implicit_gemm_builder_with_channels_last():
    _, c = _one("conv2d_bf16_bias_relu")
    src = c.source
    assert "cutlass::conv::collective::CollectiveBuilder<" in src
    assert "cutlass::conv::KernelImplicitTmaWarpSpecializedSm90" in src
    assert "cutlass::layout::TensorNHWC" in src and "ConvProblemShape<cutlass::conv::Operator::kFprop, 2>" in src
    assert "gemm_universal_adapter.h" not in src  # its 2.x GemmUniversal clashes with the conv kernel
    assert c.abi.op_kind == "conv" and c.abi.spatial_dims == 2
    _, c1 = _one("conv1d_f16")
    assert "TensorNWC" in c1.source and "kFprop, 1>" in c1.source
    _, c3 = _one("conv3d_bf16")
    assert "TensorNDHWC" in c3.source and "kFprop, 3>" in c3.source


def test_unsupported_cases_name_the_kernel_and_hint_a_route():
    for name, needle in (("depthwise", "torch y = conv2d"), ("conv_nchw", "channels_last"), ("exact_fp32", "math = tf32"),
                         ("streamk_pingpong", "schedule = cooperative"),
                         ("tf32_mn_major_explicit_stages", "stages = auto"), ("tf32_both_mn_major_tile_k64", "tile K = 32")):
        _, diags = emit_program(program(name))
        assert len(diags) == 1 and diags[0].code == "unsupported"
        assert needle in diags[0].hint, (name, diags[0].hint)


def test_the_three_emitters_write_one_epilogue_expression_alike():
    # one builder (cutlass.epilogue): the same store expression is the same C++ in the sm_90 conv's EVT functor, the
    # grouped GEMM's and the CUTLASS 2.x grouped conv's output operator
    bodies = []
    for name in ("conv2d_bf16_bias_relu", "grouped_bf16_bias_relu", "grouped_conv2d_bf16_multi_group"):
        _, e = _one(name)
        assert [t.role for t in e.abi.tensors][3:] == ["col"], name
        bodies.append(re.search(r"r\[i\] = (?:ElementOutput\()?(fmaxf\(\(v0 \+ v1\), 0\.f\))", e.source).group(1))
    assert len(set(bodies)) == 1


def test_an_epilogue_leaf_read_twice_is_one_evt_node_and_one_abi_tensor():
    from dsl_compiler.parser import parse

    text = MATRIX_GEMM.replace("store y: bf16 = acc", "store y: bf16 = acc * s[row] + relu(acc * s[row])")
    prog, diags = parse(text)
    assert not diags, diags
    (e,), diags = emit_program(prog)
    assert not diags
    assert [t.role for t in e.abi.tensors] == ["a", "b", "d", "row"]
    assert e.source.count("Sm90ColBroadcast<") == 1


MATRIX_GEMM = """input x: bf16[256, 128]
input s: bf16[256]
param w: bf16[192, 128] = "fc.weight"
kernel fc = gemm(x, w^T) {
  store y: bf16 = acc
}
output y
"""
