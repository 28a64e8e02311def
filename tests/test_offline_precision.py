"""The offline tier's math precision: 16-bit programs beside TF32 ones where the problem allows them."""

from __future__ import annotations

import pytest
import torch

from dsl_compiler import runtime
from dsl_compiler.checks import check
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program
from evals.problems import load_suite
from run_vocabulary.records import AttemptRecord
from sol_models import search
from dsl_compiler.frontend import TraceOptions, trace_problem
from nodes.offline.policy import OfflineTier, attempt_math, half_math
from test_offline_frontend import run_both, shrunk
from test_offline_policy import attempt, request
from dsl_compiler.diagnostics import Diagnostic

BUILTIN = {p.name: p for p in load_suite("builtin")}
SMOKE = {p.name: p for p in load_suite("smoke")}


@pytest.fixture
def tier(tmp_path):
    return OfflineTier(record=search.ConfigRecord(tmp_path / "record.json"))


def maths(tier, problem, **kw) -> set:
    plan, untried, _ = tier._state(request(problem, **kw))
    return {c.math for c, _ in untried}


def test_half_math_needs_the_precision_and_a_loose_enough_tolerance():
    every = ("f32", "tf32", "bf16", "f16")
    assert half_math(every, 1e-2) == "f16"  # f16 before bf16: TF32's mantissa
    assert half_math(("f32", "tf32", "bf16"), 1e-2) == "bf16"
    assert half_math(("f32", "tf32"), 1e-2) is None
    assert half_math(every, 1e-3) == "f16"
    assert half_math(every, 1e-4) is None
    assert half_math(every, None) is None


def test_f16_programs_are_ranked_beside_tf32_only_when_allowed(tier):
    problem = BUILTIN["11_linear_relu"]
    assert maths(tier, problem) == {None, "f16"}
    assert maths(tier, problem, allowed=("f32", "tf32")) == {None}
    # at 1e-4 the error model predicts TF32 to miss on K = 4096 and no 16-bit math is tried: the split product
    assert maths(tier, problem, tolerance=1e-4) == {"tf32x3"}
    assert maths(tier, problem, allowed=("f32", "tf32", "bf16")) == {None, "bf16"}
    # compute-bound at 2048x4096x4096: twice TF32's tensor-core rate outweighs converting x once
    plan, untried, _ = tier._state(request(problem))
    # the traced program of each precision first (the estimate's error differs by precision), then the rest
    first, second = untried[0][0], untried[1][0]
    assert first.math == "f16" and first.title.startswith("traced program")
    assert second.math is None and second.title.startswith("traced program") and first.t_est_us < second.t_est_us
    rest = [t for _, t in untried[2:]]
    assert rest == sorted(rest) and not any(c.title.startswith("traced program") for c, _ in untried[2:])
    program, diags = parse(tier.write(request(problem)).program_text)
    assert not diags and program.kernels[0].config.math == "f16"


def test_the_f16_program_converts_params_once_and_inputs_per_call():
    problem = BUILTIN["11_linear_relu"]
    program = trace_problem(problem, TraceOptions(math="f16")).program
    assert not [d for d in check(program, "sm90a", backend="cutlass") if d.severity == "error"]
    (kernel,) = program.kernels
    assert (kernel.config.math, kernel.config.accum) == ("f16", "f32")
    weight, bias = program.decl(kernel.op.b.name), program.decl("fc_bias")
    assert (weight.kind, weight.dtype, weight.source, kernel.op.b.transpose) == ("param", "f16", "fc.weight", True)
    assert bias.dtype == "f32"  # the epilogue runs in fp32
    (cast,) = program.torch_steps
    assert (cast.fn, cast.args[0].name, cast.kwargs[0].value, cast.outputs[0]) == ("to", "x", "f16", kernel.op.a.name)
    assert [s.dtype for s in kernel.stores] == ["f32"]  # the reference's element type
    model = problem.make_model(seed=0)
    params = runtime.bind_params(program, model)
    assert params[weight.name].dtype == torch.float16 and params["fc_bias"].dtype == torch.float32


def test_f16_needs_no_k_major_copies():
    program = trace_problem(BUILTIN["04_gemm_transposed_a"], TraceOptions(math="f16")).program  # A^T @ B
    (kernel,) = program.kernels
    assert kernel.op.a.transpose and not kernel.op.b.transpose
    assert [s.fn for s in program.torch_steps] == ["to", "to"]


def test_a_conv_input_is_converted_and_laid_out_in_one_copy():
    program = trace_problem(BUILTIN["20_conv2d_bias_relu"], TraceOptions(math="f16")).program
    (kernel,) = program.kernels
    (step,) = program.torch_steps  # one read of the fp32 input, one write of 2-byte NHWC values
    assert step.outputs == (kernel.op.x.name,) and step.fn == "channels_last"
    assert [(k.key, k.value) for k in step.kwargs] == [("dtype", "f16")]
    assert program.decl(step.args[0].name).kind == "input"
    weight = program.decl(kernel.op.w.name)
    assert (weight.dtype, weight.layout) == ("f16", "channels_last")


def test_an_mlp_stores_its_hidden_layers_in_f16_for_the_next_kernel():
    program = trace_problem(BUILTIN["30_mlp3"], TraceOptions(math="f16")).program
    fc1, fc2, fc3 = program.kernels
    assert [s.fn for s in program.torch_steps] == ["to"]  # the input only
    assert fc1.stores[0].dtype == "f16" and fc2.op.a.name == fc1.stores[0].name
    assert fc2.stores[0].dtype == "f16" and fc3.op.a.name == fc2.stores[0].name
    assert fc3.stores[0].dtype == "f32" and program.outputs == (fc3.stores[0].name,)


@pytest.mark.parametrize("name", ["11_linear_relu", "04_gemm_transposed_a", "20_conv2d_bias_relu", "30_mlp3",
                                  "19_linear_relu_row_sum", "25_conv2d_residual_add", "31_bmm_scale"])
def test_f16_programs_are_correct_on_the_interpreter(name):
    problem = shrunk(BUILTIN[name])
    program = trace_problem(problem, TraceOptions(math="f16")).program
    assert program.kernels and all(k.config.math == "f16" for k in program.kernels)
    assert not [d for d in check(program, "sm90a", backend="cutlass") if d.severity == "error"]
    for seed in (1, 2):
        outs, ref = run_both(problem, program, seed=seed)
        refs = ref if isinstance(ref, tuple) else (ref,)
        assert len(outs) == len(refs)
        for out, r in zip(outs, refs):
            assert out.dtype == r.dtype
            assert torch.allclose(out, r, atol=problem.tolerance, rtol=problem.tolerance)


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_every_candidate_of_the_smoke_suite_checks_and_runs(tier, name):
    problem = SMOKE[name]
    candidates = tier.candidates(problem, "h200")
    chosen = [c for c in candidates if c.math][:2] + [c for c in candidates if not c.math][:1]
    assert any(not c.math for c in chosen)  # the storage type's program at least
    for c in chosen:
        program, diags = parse(c.program_text)
        assert program is not None and not diags
        assert not [d for d in check(program, "sm90a", backend="cutlass") if d.severity == "error"]
        (out, *_), ref = run_both(problem, program)
        assert torch.allclose(out, ref if not isinstance(ref, tuple) else ref[0], atol=problem.tolerance,
                              rtol=problem.tolerance)


def test_a_wrong_f16_result_leaves_the_tf32_programs_as_they_were(tier):
    problem = BUILTIN["14_linear_tanh_scale_bias"]
    first = tier.write(request(problem))
    assert "math = f16" in first.program_text
    wrong = attempt(1, first.program_text, reached="validate", correct=False, t_us=None, precision="f16",
                    failure_reason="validate: input set 1: outputs differ from the reference")
    assert attempt_math(wrong) == "f16"
    second = tier.write(request(problem, [wrong]))
    assert "math = f16" not in second.program_text
    program, _ = parse(second.program_text)
    assert not program.torch_steps  # still fused: the TF32 plan earned no fallback
    assert maths(tier, problem, history=[wrong]) == {None}


def test_an_f16_build_failure_is_the_f16_plan_fallback_only(tier):
    problem = BUILTIN["11_linear_relu"]
    first = tier.write(request(problem))
    failed = attempt(1, first.program_text, reached="compile", compile_ok=False, correct=False, t_us=None,
                     failure_reason="compile: build failed", diagnostics=[Diagnostic(code="build", message="kernel 'fc': nvcc failed")])
    plans = tier.plans(problem, "h200", [failed])
    tf32, f16 = plans
    assert tf32.options.math is None and not tf32.options.unfuse
    assert f16.options.math == "f16" and f16.options.unfuse == ("fc",)


def test_a_16_bit_plan_that_would_demote_a_kernel_is_not_proposed(tier, monkeypatch):
    # 4 input channels are 8 bytes in f16, under TMA's 16-byte alignment: unpadded, only TF32 keeps the kernel
    import nodes.offline.policy as policy

    real = policy.trace_problem
    monkeypatch.setattr(policy, "trace_problem", lambda problem, options: real(
        problem, options.model_copy(update={"pad": False}) if options.math else options))
    problem = SMOKE["03_conv2d_relu_tiny"]
    assert [p.options.math for p in tier.plans(problem, "h200", [])] == [None]
    assert maths(tier, problem) == {None}


def test_a_16_bit_plan_pads_channels_instead(tier):
    # the same conv in f16 with its 4 channels zero-padded to 8: the kernel stays, and so does the plan
    problem = SMOKE["03_conv2d_relu_tiny"]
    plans = tier.plans(problem, "h200", [])
    assert [p.options.math for p in plans] == [None, "f16"]
    program = plans[1].trace.program
    assert program.kernels and any(d.kind == "param" and d.shape[1] == 8 and d.dtype == "f16" for d in program.decls)


def test_attempt_math_reads_the_program():
    problem = BUILTIN["11_linear_relu"]
    tf32 = format_program(trace_problem(problem).program)
    bf16 = format_program(trace_problem(problem, TraceOptions(math="bf16")).program)
    assert attempt_math(AttemptRecord(index=1, program_text=tf32)) is None
    assert attempt_math(AttemptRecord(index=1, program_text=bf16)) == "bf16"
    assert attempt_math(AttemptRecord(index=1, program_text="")) is None
    assert attempt_math(AttemptRecord(index=1, program_text="not a program: math = f16")) is None


def test_the_sol_judge_holds_an_f16_result_to_the_f16_bound():
    """An f16 kernel faster than the TF32 bound but not the f16 one is honest; under the f16 bound it is flagged."""
    from graph.attempts import ceiling_bound_us
    from graph.context import Services
    from sol_models.gaming import ceiling_check

    problem = BUILTIN["11_linear_relu"]
    sol = Services()._count_sol(problem, "h200")  # what the graph keeps in state["sol"]
    tf32, f16 = sol["t_sol_us"], sol["per_precision"]["f16"]["t_sol_us"]
    assert sol["bound"] == "compute" and f16 < 0.6 * tf32
    program = trace_problem(problem, TraceOptions(math="f16")).program
    precision = ",".join(sorted({k.config.math or "f32" for k in program.kernels}))  # as the compiler node records it
    assert ceiling_bound_us(sol, precision) == f16
    honest = 0.7 * tf32  # beats TF32's speed of light, as f16 math can
    assert not ceiling_check(honest, ceiling_bound_us(sol, "tf32")).ok
    assert ceiling_check(honest, ceiling_bound_us(sol, precision)).ok
    assert not ceiling_check(0.5 * f16, ceiling_bound_us(sol, precision)).ok  # a fake stays flagged


def test_the_graph_keeps_an_f16_kernel_and_records_its_precision(tmp_path, monkeypatch):
    """End to end on the interpreter: a problem where the estimate ranks f16 first (1024^3 Linear + ReLU)."""
    monkeypatch.setenv(search.RECORD_ENV, str(tmp_path / "record.json"))
    from graph.context import RunContext
    from graph.runner import run_optimize

    path = tmp_path / "linear_1024.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\nTOLERANCE = 1e-2\nALLOWED_PRECISIONS = ('f32', 'tf32', 'bf16', 'f16')\n"
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(1024, 1024)\n"
        "    def forward(self, x):\n        return torch.relu(self.fc(x))\n"
        "def get_inputs():\n    return [torch.rand(1024, 1024)]\ndef get_init_inputs():\n    return []\n")
    summary = run_optimize(str(path), RunContext(tier="offline", backend="interpreter", max_attempts=1, policy="fixed"),
                           tmp_path / "run")
    (first,) = summary.attempts
    assert first.correct and not first.flags, first.failure_reason
    assert first.precision == "f16" and "math = f16" in first.program_text


def test_a_depthwise_conv_keeps_its_storage_type():
    """A depthwise conv is a memory-bound SIMT kernel: a 16-bit copy of its input costs more than it saves."""
    problem = BUILTIN["28_depthwise_conv2d_relu6"]
    program = trace_problem(problem, TraceOptions(math="f16")).program
    assert not any(s.fn == "to" for s in program.torch_steps)
    assert all(d.dtype == "f32" for d in program.decls)
    assert all(k.config.math != "f16" for k in program.kernels)
    assert [p.options.math for p in OfflineTier(use_record=False).plans(problem, "h200", [])] == [None]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["11_linear_relu", "20_conv2d_bias_relu", "25_conv2d_residual_add", "30_mlp3"])
def test_the_first_f16_program_is_correct_and_honest_on_the_gpu(tmp_path, monkeypatch, name):
    """Full size on the H200: the tier's first program computes in f16, passes 5 fresh input sets and the SOL ceiling."""
    monkeypatch.setenv(search.RECORD_ENV, str(tmp_path / "record.json"))
    from graph.context import RunContext
    from graph.runner import run_optimize

    summary = run_optimize(BUILTIN[name].path, RunContext(tier="offline", backend="cutlass", max_attempts=1,
                                                          policy="fixed"), tmp_path / "run")
    (first,) = summary.attempts
    assert "math = f16" in first.program_text and first.precision == "f16"
    assert first.correct and not first.flags and first.timing_source == "gpu", first.failure_reason


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["01_gemm_square", "04_gemm_transposed_a"])
def test_the_tf32_program_reads_operands_as_stored_on_the_gpu(tmp_path, name):
    """TF32 with B stored [K, N] (and A stored [K, M]): no transposing copy where the checks take the layout."""
    from graph.context import RunContext
    from graph.runner import run_optimize
    from nodes.playback import PlaybackTier

    tier = OfflineTier(use_record=False)
    program_text = next(c for c in tier.candidates(BUILTIN[name], "h200")
                        if c.math is None and "= contiguous(" not in c.program_text).program_text
    assert "transpose(" not in program_text and not parse(program_text)[0].kernels[0].op.b.transpose
    (tmp_path / "p.mcu").write_text(program_text)
    ctx = RunContext(tier="playback", policy="fixed", max_attempts=1, backend="cutlass",
                     tier_impl=PlaybackTier(tmp_path / "p.mcu"))
    summary = run_optimize(BUILTIN[name].path, ctx, tmp_path / "run")
    (first,) = summary.attempts
    assert first.correct and not first.flags and first.timing_source == "gpu", first.failure_reason


def test_tf32_operands_read_as_stored_and_copied_k_major_are_both_ranked(tier):
    """The register-sourced mainloop (operands as stored) and a transposing copy + the K-major one: the estimate picks."""
    problem = BUILTIN["01_gemm_square"]  # B stored [K, N]
    plan, untried, _ = tier._state(request(problem, allowed=("f32", "tf32")))
    texts = [c.program_text for c, _ in untried]
    copied = [t for t in texts if "= contiguous(" in t]
    as_stored = [t for t in texts if "= contiguous(" not in t]
    assert copied and as_stored
    for text in (copied[0], as_stored[0]):
        program, diags = parse(text)
        assert not diags and not [d for d in check(program, "sm90a", backend="cutlass") if d.severity == "error"]
    (kernel,) = parse(copied[0])[0].kernels
    assert kernel.op.b.transpose and not kernel.op.a.transpose
    # the two traced programs first, in estimated order, then the configurations of both
    assert {"= contiguous(" in c.program_text for c, _ in untried[:2]} == {True, False}
    assert untried[0][1] <= untried[1][1] and [t for _, t in untried[2:]] == sorted(t for _, t in untried[2:])
    # nn.Linear reads K-major already: one program, no copy
    linear = tier._state(request(BUILTIN["11_linear_relu"], allowed=("f32", "tf32")))[1]
    assert not any("= contiguous(" in c.program_text for c, _ in linear)


def test_the_eval_report_names_the_precision_of_each_kept_result(tmp_path, monkeypatch):
    from evals.metrics import result_from_summary
    from evals.report import write_report
    from evals.store import ResultsStore
    from run_vocabulary.records import RunSummary

    monkeypatch.delenv("LANGSMITH_API_KEY", raising=False)
    store = ResultsStore(tmp_path / "results.sqlite")
    store.init_evaluation({"source": {"suite": "mini"}, "problems": ["P1", "P2"], "tiers": ["offline"],
                           "policies": ["fixed"], "max_attempts": 2}, {"gpu": "NVIDIA H200", "versions": {}})
    for problem, precision, correct in (("P1", "f16", True), ("P2", "tf32", False)):
        a = AttemptRecord(index=1, correct=correct, t_us=50.0, timing_source="gpu", precision=precision, reached="done",
                          sol_fraction=1.2, speedup_vs_eager_fp32=4.0)
        summary = RunSummary(problem=problem, tier="offline", policy="fixed", backend="cutlass", gpu="h200",
                             attempts=[a], best_index=1 if correct else None, best_t_us=50.0, t_sol_us=60.0)
        store.finish_run(summary)
        assert result_from_summary(summary).precision == (precision if correct else None)
    text = write_report(store, tmp_path / "out").read_text()
    store.close()
    assert "| % SOL (TF32) | precision |" in text
    assert "| P1 | offline | dsl+sol | fixed | yes |" in text and "| 120.0% | f16 |" in text
