"""The pytorch_only rule on GPU kernel names: data movement around the candidate's kernels is nobody's work."""

from evals.attribution import WorkSplit, pytorch_only_reason, split_kernel_time

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
