"""The pytorch_only rule on GPU kernel names: data movement around the candidate's kernels is nobody's work."""

from evals.judge.attribution import WorkSplit, pytorch_only_reason, split_kernel_time

OWN_CONV = "void cutlass::device_kernel<cutlass::conv::kernel::ConvUniversal<t_conv_sm90_128x128x64>>(Params)"
CAST_NHWC = "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<copy_>>(int, F)"
CUBLAS_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_cublas"
CUDNN_CONV = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_cudnn"
ATEN_RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous)::launch_clamp_scalar>(int, F)"
ATEN_SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(float*, ...)"


def test_an_honest_program_whose_cast_costs_as_much_as_its_conv_is_not_flagged():
    # measured on the H200: a 3x3 conv at 0.58 ms beside its channels-last cast at 0.58 ms was flagged before
    split = split_kernel_time([(OWN_CONV, 580.0), (CAST_NHWC, 580.0)])
    assert split == WorkSplit(own_us=580.0, library_work_us=0.0, movement_us=580.0)
    assert pytorch_only_reason(split, None) is None


def test_cublas_doing_the_gemm_beside_a_small_own_epilogue_is_flagged():
    split = split_kernel_time([(CUBLAS_GEMM, 300.0), ("void my_bias_relu(float*, const float*, int)", 20.0)])
    assert split.library_work_us == 300.0 and split.own_us == 20.0
    assert "library kernels" in pytorch_only_reason(split, None)


def test_a_candidate_without_a_kernel_of_its_own_is_flagged_even_if_it_only_ran_elementwise_maps():
    split = split_kernel_time([(ATEN_RELU, 50.0), (CAST_NHWC, 10.0)])
    assert split.own_us == 0.0 and "no GPU time" in pytorch_only_reason(split, None)
    assert "no GPU time" in pytorch_only_reason(split_kernel_time([]), None)


def test_library_compute_is_work_even_when_its_name_mentions_a_copy_or_elementwise_word():
    split = split_kernel_time([(CUDNN_CONV, 400.0), (ATEN_SOFTMAX, 30.0), (OWN_CONV, 100.0)])
    assert split.library_work_us == 430.0 and split.movement_us == 0.0
    assert pytorch_only_reason(split, None) is not None


def test_the_flop_share_flags_on_its_own():
    split = split_kernel_time([(OWN_CONV, 100.0)])
    assert pytorch_only_reason(split, 0.9) is None
    assert "FLOPs" in pytorch_only_reason(split, 0.2)


# ---------------------------------------------------------------------------------------------
# Operator FLOPs (what a Python candidate dispatched, recorded by the profiler)

from evals.judge.attribution import OTHER_PROCESSES_CPU_S, OpRecorder, op_flops, work_share  # noqa: E402

M, K, N = 8, 64, 32
GEMM = 2.0 * M * K * N


def _recorded(fn) -> list:
    """The operators ``fn`` dispatches, as the candidate process's profiler records them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    events = list(prof.events())
    index = {id(e): i for i, e in enumerate(events)}
    return [[e.name, [list(s) for s in e.input_shapes], index.get(id(e.cpu_parent), -1) if e.cpu_parent else -1, None,
             [str(d) for d in e.input_dtypes]] for e in events]


def _operands():
    import torch

    g = torch.Generator().manual_seed(0)
    return torch.randn(M, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)


def test_every_spelling_of_a_gemm_counts_as_one():
    import torch
    import torch.nn.functional as F

    x, w, b = _operands()
    spellings = {
        "linear": lambda: F.linear(x, w, b),
        "addmv per row": lambda: torch.stack([torch.addmv(b, w, r) for r in x.unbind(0)]),
        "broadcast mul + sum": lambda: (x[:, None, :] * w[None]).sum(-1),
        "fused addmm + relu": lambda: torch._addmm_activation(b, x, w.t()),
        "dot per element": lambda: torch.stack([torch.stack([torch.dot(r, c) for c in w]) for r in x]),
    }
    for what, fn in spellings.items():
        flops = op_flops(_recorded(fn))
        assert 0.9 * GEMM <= flops <= 2.2 * GEMM, (what, flops)


def test_a_products_own_sub_operators_are_not_counted_again_and_views_are_free():
    ops = [["aten::linear", [[M, K], [N, K], [N]], -1], ["aten::t", [[N, K]], 0], ["aten::addmm", [[N], [M, K], [K, N]], 0],
           ["aten::copy_", [[M, N], [M, N]], 2], ["aten::mul", [[M, N], [M, N]], 2], ["aten::view", [[M, N], []], -1]]
    assert op_flops(ops) == GEMM


def test_the_reference_recorder_agrees_with_the_profiler_records():
    import torch
    import torch.nn.functional as F

    x, w, b = _operands()
    with OpRecorder() as rec:
        torch.relu(F.linear(x, w, b))
    assert rec.flops == op_flops(_recorded(lambda: torch.relu(F.linear(x, w, b)))) == GEMM + M * N


def _library_spellings(x, w, b):
    """A Linear computed by PyTorch's libraries beyond ATen's formulas (oneDNN and MKL under their own
    namespaces, ATen's distance matrix and int8 / fp16-weight GEMMs), where this build has them."""
    import torch

    out = {
        "oneDNN linear + relu (mkldnn::)": lambda: torch.ops.mkldnn._linear_pointwise(x, w, b, "relu", [], ""),
        "distance matrix without mm (aten::_cdist_forward)":
            lambda: torch.cdist(x, w, compute_mode="donot_use_mm_for_euclid_dist"),
        "int8 weights (aten::_weight_int8pack_mm)":
            lambda: torch._weight_int8pack_mm(x, w.to(torch.int8), torch.ones(w.shape[0])),
    }
    if torch.backends.mkl.is_available():
        packed = torch.ops.mkl._mkl_reorder_linear_weight(w, x.shape[0])
        out["MKL linear (mkl::)"] = lambda: torch.ops.mkl._mkl_linear(x, packed, w, b, x.shape[0])
    return out


def test_a_gemm_in_pytorchs_libraries_beyond_aten_formulas_is_library_work():
    """Every FLOP of these runs in PyTorch's own libraries: counted as such, also where x and w have one shape
    (a square GEMM, whose operands would broadcast as an elementwise map's do)."""
    import torch

    x, w, b = _operands()
    g = torch.Generator().manual_seed(2)
    xs, ws, bs = torch.randn(N, K, generator=g), torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    for (x_, w_, b_, gemm) in ((x, w, b, GEMM), (xs, ws, bs, 2.0 * N * K * N)):
        for what, fn in _library_spellings(x_, w_, b_).items():
            flops = op_flops(_recorded(fn))
            assert 0.9 * gemm <= flops <= 2.2 * gemm, (what, flops, gemm)
            assert work_share({"ops": _recorded(fn)}, gemm)["candidate_work_share"] < 0.5, what


def test_a_library_operator_on_a_packed_weight_cannot_be_sized_and_takes_the_whole_call():
    import torch

    x, w, b = _operands()
    packed = torch.ops.quantized.linear_prepack_fp16(w, b)
    ops = _recorded(lambda: torch.ops.quantized.linear_dynamic_fp16(x, packed))
    assert op_flops(ops) == float("inf")
    share = work_share({"ops": ops}, GEMM)
    assert share["candidate_work_share"] == 0.0 and "cannot be sized" in share["work_reason"]


def test_an_operator_of_the_candidates_own_extension_counts_only_what_it_dispatched():
    own = [["mylib::gemm", [[M, K], [N, K]], -1, None, ["float", "float"]]]
    assert op_flops(own) == 0.0
    wrapping = own + [["aten::mm", [[M, K], [K, N]], 0, None, ["float", "float"]]]
    assert op_flops(wrapping) == GEMM
    # the same record under a namespace of torch's is library work
    assert op_flops([["mkldnn::gemm", [[M, K], [N, K]], -1, None, ["float", "float"]]]) == GEMM


def test_selections_and_elementwise_maps_are_not_counted_as_products():
    import torch

    x, w, b = _operands()
    idx = torch.randint(0, N, (M, K))  # rows of w (N of them), as many as x has elements
    cases = {  # operators whose operands do not broadcast or share a K, that multiply nothing
        "embedding": (lambda: torch.embedding(w, idx), M * K * K),
        "gather": (lambda: torch.gather(w, 0, idx), N * K),
        "add of one shape": (lambda: x + x, M * K),
    }
    for what, (fn, at_most) in cases.items():
        with OpRecorder() as rec:
            fn()
        assert op_flops(_recorded(fn)) <= at_most and rec.flops <= at_most, what


def test_work_handed_to_another_process_is_attributed_away():
    ref = GEMM + M * N
    alone = work_share({"ops": [], "other_processes_cpu_s": 0.0}, ref)
    assert alone["candidate_work_share"] == 1.0 and "work_reason" not in alone
    helped = work_share({"ops": [], "other_processes_cpu_s": 20 * OTHER_PROCESSES_CPU_S}, ref)
    assert helped["candidate_work_share"] == 0.0 and "another process" in helped["work_reason"]
    broken = work_share({"error": "RuntimeError: profiler stopped"}, ref)
    assert broken["candidate_work_share"] == 0.0 and "could not be recorded" in broken["work_reason"]


def test_a_programs_share_is_its_kernels_flops_not_only_what_its_torch_steps_dispatched():
    from dsl_compiler.parser import parse

    def program(whole: bool):
        rows = "" if whole else "torch x1 = select(x, 0, 0)\ntorch x0 = unsqueeze(x1, 0)\n"
        text = f"""program p
input x: f32[{M}, {K}]
param w: f32[{N}, {K}] = "fc.weight"
{rows}kernel k = gemm({"x" if whole else "x0"}, w^T) {{
  math = tf32
  store d: f32 = acc
}}
output d
"""
        prog, diags = parse(text)
        assert prog is not None, diags
        return prog

    whole = work_share({"aten_flops": 0}, GEMM, program(True))
    one_row = work_share({"aten_flops": 0}, GEMM, program(False))
    assert whole["candidate_work_share"] == 1.0
    assert one_row["candidate_work_share"] == 1.0 / M


# ---------------------------------------------------------------------------------------------
# Strided convolutions: counted by their output positions on both sides (a count by input positions made
# the reference of a stride-4 conv 16x too large, and an honest program's share of it 0.4)


def _conv_cases():
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 3, 64, 64, generator=g), torch.randn(8, 3, 11, 11, generator=g)
    xd, wd = torch.randn(2, 16, 33, 33, generator=g), torch.randn(16, 1, 3, 3, generator=g)
    x1, w1 = torch.randn(2, 3, 100, generator=g), torch.randn(8, 3, 5, generator=g)
    wt = torch.randn(3, 8, 4, 4, generator=g)
    return {  # name -> (call, true FLOPs: 2 per multiply-add)
        "stride 4 (AlexNet's first conv)": (lambda: F.conv2d(x, w, stride=4, padding=2), lambda o: 2 * o.numel() * 3 * 121),
        "dilated, strided": (lambda: F.conv2d(x, w, stride=2, padding=1, dilation=2), lambda o: 2 * o.numel() * 3 * 121),
        "'same' padding": (lambda: F.conv2d(x, w, padding="same"), lambda o: 2 * o.numel() * 3 * 121),
        "'valid' padding": (lambda: F.conv2d(x, w, padding="valid"), lambda o: 2 * o.numel() * 3 * 121),
        "depthwise, stride 2": (lambda: F.conv2d(xd, wd, stride=2, padding=1, groups=16), lambda o: 2 * o.numel() * 9),
        "1-D, stride 3": (lambda: F.conv1d(x1, w1, stride=3), lambda o: 2 * o.numel() * 15),
        "transposed, stride 2": (lambda: F.conv_transpose2d(x, wt, stride=2, padding=1), lambda o: 2 * x.numel() * 8 * 16),
    }


def _recorded_with_args(fn) -> list:
    """As the candidate process records them: a conv's non-tensor arguments as a fourth item."""
    from torch.profiler import ProfilerActivity, profile

    from evals.judge.attribution import plain_arg

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    events = list(prof.events())
    index = {id(e): i for i, e in enumerate(events)}
    ops = []
    for e in events:
        op = [e.name, [list(s) for s in e.input_shapes], index.get(id(e.cpu_parent), -1) if e.cpu_parent else -1]
        if "conv" in e.name:
            op.append([plain_arg(a) for a in (e.concrete_inputs or [])])
        ops.append(op)
    return ops


def test_a_strided_conv_counts_its_output_positions_in_the_reference_and_in_a_candidate():
    for what, (call, true) in _conv_cases().items():
        expected = true(call())
        with OpRecorder() as rec:
            call()
        assert rec.flops == expected, (what, rec.flops, expected)
        assert op_flops(_recorded_with_args(call)) == expected, what


def test_a_conv_recorded_without_its_arguments_is_counted_high_never_low():
    import torch.nn.functional as F

    for what, (call, true) in _conv_cases().items():
        expected = true(call())
        bare = [op[:3] for op in _recorded_with_args(call)]
        assert op_flops(bare) >= expected, what
    garbled = [["aten::conv2d", [[2, 3, 64, 64], [8, 3, 11, 11], [], [], [], [], []], -1, [None, None, None, "x", [2, 2], [1, 1], 1]]]
    assert op_flops(garbled) == 2.0 * 8 * 3 * 121 * 2 * 64 * 64


def test_a_program_that_runs_a_strided_conv_problem_in_its_kernel_has_all_of_the_work():
    import torch
    import torch.nn as nn

    from dsl_compiler.parser import parse

    model = nn.Conv2d(3, 96, 11, stride=4, padding=2, bias=False)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad(), OpRecorder() as rec:
        model(x)
    text = """program p
input x: f32[2, 3, 64, 64]
param w: f32[96, 3, 11, 11] channels_last = "weight"
torch x_cl = channels_last(x)
kernel c = conv2d(x_cl, w, stride=(4, 4), padding=(2, 2), dilation=(1, 1), groups=1) {
  math = tf32
  store y: f32 = acc
}
output y
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    share = work_share({"aten_flops": 0}, rec.flops, prog)
    assert share["candidate_work_share"] == 1.0, share
    # a Python candidate calling torch's conv for the same problem did none of it
    ops = _recorded_with_args(lambda: model(x))
    assert work_share({"ops": ops}, rec.flops)["candidate_work_share"] == 0.0


# A program's torch steps between its kernels: glue it declares, unless a library computes a product there
CUDNN_BN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int=512, bool=1, int=1>(cudnnTensorStruct, float const *)"
ATEN_BN_STATS = "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(...)"
ATEN_MAXPOOL = "void at::native::(anonymous namespace)::max_pool_forward_nhwc<float, float>(float const*, int, ...)"


def test_a_programs_normalization_and_pooling_steps_are_not_work_it_passes_off_but_a_library_product_is():
    steps = [(OWN_CONV, 400.0), (CUDNN_BN, 300.0), (ATEN_BN_STATS, 150.0), (ATEN_MAXPOOL, 100.0)]
    as_program = split_kernel_time(steps, program=True)
    assert as_program == WorkSplit(own_us=400.0, library_work_us=0.0, movement_us=550.0)
    assert pytorch_only_reason(as_program, None) is None
    # the same kernels from a Python candidate: the library's normalization is work it did not bring
    as_python = split_kernel_time(steps)
    assert as_python.library_work_us == 550.0 and pytorch_only_reason(as_python, None) is not None
    # a program whose torch step runs a cuBLAS GEMM or a cuDNN conv is flagged by time as before
    for product in (CUBLAS_GEMM, CUDNN_CONV):
        split = split_kernel_time([(OWN_CONV, 100.0), (product, 300.0), (CUDNN_BN, 50.0)], program=True)
        assert split.library_work_us == 300.0 and pytorch_only_reason(split, None) is not None


# ---------------------------------------------------------------------------------------------
# A product split between a program's kernel and a torch product step: judged per product of the reference


def _split_program(own_chunks: int):
    """A GEMM whose weight rows are cut in 16: the kernel computes ``own_chunks`` of them, a torch linear step the rest."""
    from dsl_compiler.parser import parse

    names = [f"w{i}" for i in range(16)]
    own, lib = ", ".join(names[:own_chunks]), ", ".join(names[own_chunks:])
    text = f"""program p
input x: f32[{M}, {K}]
param w: f32[{N}, {K}] = "fc.weight"
torch {", ".join(names)} = chunk(w, 16, dim=0)
torch w_own = cat({own}, dim=0)
torch w_lib = cat({lib}, dim=0)
kernel k = gemm(x, w_own^T) {{
  math = tf32
  store h: f32 = acc
}}
torch g = linear(x, w_lib)
torch y = cat(h, g, dim=1)
output y
"""
    prog, diags = parse(text)
    assert prog is not None, diags
    return prog


def test_a_torch_gemm_step_is_costed_as_a_gemm_in_the_programs_estimate():
    from sol_models.counting import count_program, program_traffic

    steps, _ = program_traffic(_split_program(9))
    lib = next(s for s in steps if s.kind == "torch" and s.op == "linear")
    assert lib.flops_tensor == 2.0 * M * (N * 7 // 16) * K
    assert count_program(_split_program(9)).flops_tensor == GEMM


def test_a_gemm_split_by_columns_with_a_torch_linear_step_counts_as_the_librarys():
    # the FLOP counter would say 7/16 of the work is PyTorch's, the kernels 9/16: above half either way
    split = work_share({"aten_flops": GEMM * 7 // 16}, GEMM, _split_program(9), ref_products=[GEMM])
    assert split["candidate_work_share"] < 0.5 and "split" in split["work_reason"]
    assert split["split_products"][0]["library_share"] == 7 / 16
    # without the reference's products (an older judge), only the total: above half
    assert work_share({"aten_flops": GEMM * 7 // 16}, GEMM, _split_program(9))["candidate_work_share"] > 0.5


def test_a_program_whose_products_are_all_its_kernels_keeps_its_share():
    from dsl_compiler.parser import parse

    text = f"""program p
input x: f32[{M}, {K}]
param w: f32[{N}, {K}] = "fc.weight"
kernel k = gemm(x, w^T) {{
  math = tf32
  store h: f32 = acc
}}
torch y = relu(h)
output y
"""
    prog, _ = parse(text)
    out = work_share({"aten_flops": 0}, GEMM, prog, ref_products=[GEMM])
    assert out["candidate_work_share"] == 1.0 and "split_products" not in out


# ---------------------------------------------------------------------------------------------
# Where the time went (a Python candidate on the CPU): only operators of its own compiled code are its work

def _op(name, parent, span_us):
    return [name, [], parent, None, [], span_us]


def test_time_outside_every_operator_is_not_the_candidates_however_few_flops_were_recorded():
    # a GEMM through ctypes or numpy: 90 us of the call in no operator, 10 us in a ReLU
    ops = [_op("aten::relu", -1, 10.0)]
    share = work_share({"ops": ops, "call_us": 100.0, "compiled_ops": []}, GEMM)
    assert share["candidate_work_share"] == 0.0
    assert "outside operators of the candidate's own compiled code" in share["work_reason"]


def test_an_operator_of_its_own_compiled_extension_is_its_work_less_what_it_dispatched_to_torch():
    ops = [_op("ext::gemm", -1, 80.0), _op("aten::mm", 0, 30.0), _op("aten::relu", -1, 10.0)]
    share = work_share({"ops": ops, "call_us": 100.0, "compiled_ops": ["ext::gemm"]}, GEMM)
    assert share["compiled_own_us"] == 50.0
    assert share["candidate_work_share"] == 0.5  # its own 50 us of the call's 100
    alone = [_op("ext::gemm", -1, 80.0), _op("aten::relu", -1, 10.0)]
    own = work_share({"ops": alone, "call_us": 100.0, "compiled_ops": ["ext::gemm"]}, GEMM)
    assert own["candidate_work_share"] == 0.8 and "work_reason" not in own
    # the same operator with a Python body (not in compiled_ops): its time is Python's, whatever it reached
    python_body = work_share({"ops": alone, "call_us": 100.0, "compiled_ops": []}, GEMM)
    assert python_body["candidate_work_share"] == 0.0


def test_a_gemm_inside_a_library_operator_no_formula_sizes_is_found_by_its_time():
    # an embedding bag whose per-index weights are x: its FLOPs read as a gather, its time is the call's
    ops = [_op("aten::embedding_bag", -1, 95.0)]
    share = work_share({"ops": ops, "call_us": 100.0, "compiled_ops": []}, GEMM)
    assert share["candidate_work_share"] == 0.0


def test_compiled_operators_tells_a_cpp_registration_from_a_python_body(monkeypatch):
    from evals.judge import candidate

    dumps = {
        "ext::gemm": "name: ext::gemm\nCPU: registered at /build/ext/gemm.cpp:12 :: (none) [ boxed unboxed ]\n",
        "mine::py": "name: mine::py\nCPU: registered at /src/model_new.py:30 :: (none) [ boxed ]\n",
        "mine::str": "name: mine::str\nCPU: registered at <string>:6 :: (none) [ boxed ]\n",
        "mine::co": "name: mine::co\nCompositeExplicitAutograd[alias]: registered at /torch/_library/custom_ops.py:1104 "
                    ":: (none) [ boxed ]\n",
    }

    def dump(name):
        if name not in dumps:
            raise RuntimeError("no such operator")
        return dumps[name]

    monkeypatch.setitem(candidate._ORIGINALS, "torch._C._dispatch_dump", dump)
    names = set(dumps) | {"aten::mm", "label::not_an_op"}
    assert candidate.compiled_operators(names) == ["ext::gemm"]


def test_products_recorded_on_a_precision_the_problem_does_not_admit_are_named():
    from evals.judge.attribution import low_precision_products

    ops = [["aten::linear", [[8, 16], [4, 16], [4]], -1, None, ["c10::Half", "c10::Half", "c10::Half"]],
           ["aten::addmm", [[4], [8, 16], [16, 4]], 0, None, ["c10::Half", "c10::Half", "c10::Half"]],
           ["aten::to", [[8, 16]], -1, None, ["c10::Half"]],  # a cast computes nothing
           ["aten::mm", [[8, 16], [16, 4]], -1, None, ["float", "float"]]]
    assert low_precision_products(ops, ("f32", "tf32")) == ["aten::addmm on c10::Half"]
    assert low_precision_products(ops, ("f32", "tf32", "f16")) == []
    bf16 = [["aten::bmm", [[2, 8, 16], [2, 16, 4]], -1, None, ["c10::BFloat16", "c10::BFloat16"]]]
    assert low_precision_products(bf16, ("f32", "f16")) == ["aten::bmm on c10::BFloat16"]
    assert low_precision_products(bf16, ("f32", "bf16")) == []
