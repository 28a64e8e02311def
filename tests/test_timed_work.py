"""The timed calls' own kernels as the record of their work: a candidate that does its own work on the one counted
call and a library's on the timed calls is flagged from what the timed graphs ran."""

from types import SimpleNamespace

from evals.judge import verdicts
from evals.judge.checks.work import profile_flags, timed_work_reason

OWN = ("mucutlass_gemm_128x128_kernel", 900.0)
CUBLAS = ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", 880.0)
ELEMENTWISE = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 40.0)


def _profile(counted_kernels, timed_kernels, program=False, graphs=1):
    from evals.judge.attribution import split_kernel_time

    split = split_kernel_time(counted_kernels, program=program)
    work = {"split_us": split._asdict(), "candidate_work_share": 1.0}
    return SimpleNamespace(work=work, attempt=SimpleNamespace(is_program=program), timed_kernels=timed_kernels,
                           timed_graphs=graphs)


def test_library_work_on_the_timed_calls_is_flagged_though_the_counted_call_was_its_own():
    p = _profile([OWN], [CUBLAS, ELEMENTWISE])
    flags = profile_flags(p, {"source": "ModelNew"})
    assert [f["rule"] for f in flags] == [verdicts.PYTORCH_ONLY]
    assert "timed calls' captured graphs" in flags[0]["reason"]


def test_own_work_on_the_timed_calls_is_not_flagged():
    assert profile_flags(_profile([OWN], [OWN, ELEMENTWISE]), {"source": "ModelNew"}) == []
    assert profile_flags(_profile([OWN], None), {"source": "ModelNew"}) == []  # no record (the CPU): as before


def test_a_program_s_torch_steps_that_compute_no_product_are_not_library_work():
    # a μCUTLASS program: its own GEMM and an element-wise torch step; a library GEMM in its timed calls is flagged
    assert timed_work_reason([OWN, ELEMENTWISE], program=True, graphs=1) is None
    why = timed_work_reason([("mucutlass_tiny_kernel", 10.0), CUBLAS], program=True, graphs=0)
    assert why is not None and why.startswith("in the timed calls, run again:")
    assert timed_work_reason([], program=True, graphs=1) is None


def test_the_interpreter_s_programs_are_judged_as_before():
    # a program run on the interpreter: its kernels are PyTorch operators by design, no kernel record is judged
    p = _profile([CUBLAS], [CUBLAS], program=True)
    assert profile_flags(p, {"backend": "interpreter"}) == []
