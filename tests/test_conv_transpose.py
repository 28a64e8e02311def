"""conv_transpose1d/2d/3d: the language (parse, print, check), the interpreter against PyTorch's own
conv_transpose*, the emitter (sm_90 dgrad where it applies, located refusals where not), the frontend's lowering
of nn.ConvTranspose* and F.conv_transpose*, SOL counting, and the conv-transpose suite at small sizes."""

from __future__ import annotations

import dataclasses
import os
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dsl_compiler import check, format_program, interpreter, parse
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.frontend import trace_problem
from dsl_compiler.frontend.results import TraceOptions
from dsl_compiler.runtime import bind_params

CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _program(dims: int, c: int, k: int, spatial: tuple[int, ...], filt: tuple[int, ...], dtype="bf16", stride=1,
             padding=0, output_padding=0, dilation=1, groups=1, epilogue="acc + b[col]", layout=" channels_last") -> str:
    shape = ", ".join(map(str, (2, c, *spatial)))
    wshape = ", ".join(map(str, (c, k // groups, *filt)))
    return (f"input x: {dtype}[{shape}]{layout}\nparam w: {dtype}[{wshape}]{layout}\nparam b: f32[{k}]\n"
            f"kernel up = conv_transpose{dims}d(x, w, stride={stride}, padding={padding}, output_padding={output_padding}, "
            f"dilation={dilation}, groups={groups}) {{\n  math = {'tf32' if dtype == 'f32' else dtype}\n"
            f"  store y: f32 = {epilogue}\n}}\noutput y\n")


def _ints(*shape) -> torch.Tensor:
    """Small integers: every product and sum exact in fp32 and in bf16 / tf32 operands."""
    return torch.randint(-3, 4, shape).float()


CASES = [  # dims, C, K, spatial, filter, stride, padding, output_padding, dilation, groups
    (1, 8, 16, (9,), (3,), 2, 1, 1, 1, 1),
    (1, 8, 8, (12,), (5,), 1, 4, 0, 2, 1),
    (2, 16, 8, (5, 6), (3, 3), 2, 1, 1, 1, 1),
    (2, 16, 24, (4, 7), (3, 5), (2, 3), (1, 2), (1, 2), 1, 1),
    (2, 16, 16, (6, 6), (4, 4), 2, 1, 0, 1, 4),
    (2, 8, 8, (5, 5), (3, 3), 1, 2, 1, 2, 1),  # output_padding < dilation at stride 1
    (3, 8, 16, (3, 4, 5), (3, 3, 3), 2, 1, 1, 1, 1),
    (3, 8, 8, (4, 4, 4), (2, 3, 3), (1, 2, 2), (0, 1, 1), (0, 1, 0), 1, 2),
]


def _literal(v):
    return str(v) if isinstance(v, int) else "(" + ", ".join(map(str, v)) + ")"


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d_s{c[5]}_g{c[9]}")
def test_interpreter_matches_torch_conv_transpose(case):
    dims, c, k, spatial, filt, stride, padding, out_pad, dil, groups = case
    torch.manual_seed(0)
    text = _program(dims, c, k, spatial, filt, "f32", _literal(stride), _literal(padding), _literal(out_pad),
                    _literal(dil), groups, epilogue="relu(acc + b[col]) * 0.5")
    prog, diags = parse(text)
    assert prog is not None, [d.render() for d in diags]
    assert not [d for d in check(prog, backend="interpreter") if d.severity == "error"]
    x, w, b = _ints(2, c, *spatial), _ints(c, k // groups, *filt), _ints(k)
    (out,) = interpreter.run(prog, [x], {"w": w, "b": b})
    ref = F.relu(CONV_T[dims](x, w, b, stride, padding, out_pad, groups, dil)) * 0.5
    assert out.shape == ref.shape
    assert torch.equal(out, ref)


def test_interpreter_rounds_operands_to_bf16_like_the_kernel():
    torch.manual_seed(1)
    prog, _ = parse(_program(2, 16, 8, (5, 6), (3, 3), "bf16"))
    x, w, b = torch.randn(2, 16, 5, 6), torch.randn(16, 8, 3, 3), torch.randn(8)
    (out,) = interpreter.run(prog, [x.bfloat16()], {"w": w, "b": b})
    ref = F.conv_transpose2d(x.bfloat16().double(), w.bfloat16().double(), b.double()).float()
    assert torch.allclose(out, ref, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(out, F.conv_transpose2d(x, w, b), atol=1e-4, rtol=1e-4)  # it did round


def test_print_parse_round_trip_and_defaults():
    for dims in (1, 2, 3):
        text = _program(dims, 8, 16, (4,) * dims, (3,) * dims, stride=2, padding=1, output_padding=1)
        prog, diags = parse(text)
        assert prog is not None, diags
        printed = format_program(prog)
        assert f"conv_transpose{dims}d(x, w, stride=" in printed and "output_padding=" in printed
        assert parse(printed)[0] == prog
        assert format_program(parse(printed)[0]) == printed
    bare, _ = parse("input x: f16[1, 8, 4, 4] channels_last\nparam w: f16[8, 8, 3, 3] channels_last\n"
                    "kernel k = conv_transpose2d(x, w) { store y: f16 = acc }\noutput y")
    op = bare.kernels[0].op
    assert (op.stride, op.padding, op.output_padding, op.dilation, op.groups) == ((1, 1), (0, 0), (0, 0), (1, 1), 1)


def test_parser_rejects_a_forward_conv_option_it_lacks_and_bad_tuples():
    _, diags = parse("input x: f16[1, 8, 4, 4]\nkernel k = conv2d(x, x, output_padding=1) { store y: f16 = acc }\noutput y")
    assert diags and "has no option 'output_padding'" in diags[0].message
    _, diags = parse(_program(2, 8, 8, (4, 4), (3, 3), output_padding="(1, 1, 1)"))
    assert diags and "output_padding of conv_transpose2d must be 2 integer(s)" in diags[0].message
    assert diags[0].span.line == 4


def test_checker_states_pytorchs_output_padding_rule_with_a_location():
    prog, _ = parse(_program(2, 8, 8, (4, 4), (3, 3), stride="(2, 1)", output_padding="(1, 1)"))
    (err,) = [d for d in check(prog, backend="interpreter") if d.severity == "error"]
    assert "output_padding 1 of dim 1 is not smaller than its stride 1 or dilation 1" in err.message
    assert err.span.line == 4 and "0..stride-1" in err.hint
    ok, _ = parse(_program(2, 8, 8, (4, 4), (3, 3), stride="(2, 1)", output_padding="(1, 0)"))
    assert not [d for d in check(ok, backend="interpreter") if d.severity == "error"]


def test_checker_reads_the_transposed_filter_layout():
    # w [C, K/groups, ...]: a forward conv's [K, C/groups, ...] is refused with the transposed layout's hint
    text = _program(2, 8, 16, (4, 4), (3, 3)).replace("param w: bf16[8, 16, 3, 3]", "param w: bf16[16, 8, 3, 3]")
    prog, _ = parse(text)
    errs = [d for d in check(prog, backend="interpreter") if d.severity == "error"]
    assert errs and "filter has 16 input channels, the input has C = 8" in errs[0].message
    assert "[in channels, out channels / groups" in errs[0].hint
    prog, _ = parse(_program(2, 8, 16, (4, 4), (3, 3), groups=3))
    errs = [d for d in check(prog, backend="interpreter") if d.severity == "error"]
    assert errs and "groups=3 must divide in channels 8" in errs[0].message
    # the epilogue's [col] vector is one value per output channel (K), not per input channel
    prog, _ = parse(_program(2, 8, 16, (4, 4), (3, 3)).replace("param b: f32[16]", "param b: f32[8]"))
    assert [d for d in check(prog, backend="interpreter") if d.severity == "error"]


def test_emitter_writes_sm90_dgrad_for_unit_stride_16_bit():
    prog, _ = parse(_program(2, 16, 32, (8, 8), (3, 3), "bf16", padding=1, epilogue="relu(acc + b[col])"))
    assert not [d for d in check(prog) if d.severity == "error"]
    (kernel,), diags = emit_program(prog)
    assert not diags
    assert "cutlass::conv::Operator::kDgrad" in kernel.source and "kFprop" not in kernel.source
    # the runtime states dgrad from its output: extents and channels of y, the filter [C_in, R, S, C_out] as KRSC
    from dsl_compiler.cutlass_runtime import conv_call_args

    env = {"x": torch.zeros(2, 16, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last),
           "w": torch.zeros(16, 32, 3, 3, dtype=torch.bfloat16).to(memory_format=torch.channels_last),
           "b": torch.zeros(32)}
    op = prog.kernels[0].op.model_dump(mode="json")
    tensors, ints, results = conv_call_args("up", op, dataclasses.asdict(kernel.abi), env, {})
    assert ints[:9] == [2, 1, 8, 8, 32, 16, 1, 3, 3]
    assert tuple(results["y"].shape) == (2, 32, 8, 8)


@pytest.mark.parametrize("variant, needle, hint", [
    (dict(stride=2, output_padding=1), "stride (2, 2), output_padding (1, 1)", "zero_insert(x, stride=(2, 2)"),
    (dict(groups=2), "grouped transposed convolution (groups = 2)", "torch step"),
    (dict(dtype="f32"), "tf32 math for a transposed convolution", "bf16"),
])
def test_emitter_refuses_what_sm90_dgrad_cannot_take_with_a_fix(variant, needle, hint):
    prog, _ = parse(_program(2, 16, 32, (8, 8), (3, 3), **variant))
    errs = [d for d in check(prog) if d.severity == "error"]
    assert errs and needle in errs[0].message and hint in errs[0].hint
    assert errs[0].span is not None


def test_zero_insert_makes_a_strided_transposed_conv_unit_stride():
    torch.manual_seed(2)
    x, w, b = _ints(2, 8, 4, 5), _ints(8, 4, 3, 3), _ints(4)
    text = ("input x: f32[2, 8, 4, 5]\nparam w: f32[8, 4, 3, 3] channels_last\nparam b: f32[4]\n"
            "torch xl = channels_last(x)\ntorch xu = zero_insert(xl, stride=(2, 3), output_padding=(1, 2))\n"
            "kernel up = conv_transpose2d(xu, w, padding=1) {\n  math = tf32\n  store y: f32 = acc + b[col]\n}\noutput y\n")
    prog, diags = parse(text)
    assert prog is not None, diags
    (out,) = interpreter.run(prog, [x], {"w": w, "b": b})
    assert torch.equal(out, F.conv_transpose2d(x, w, b, stride=(2, 3), padding=1, output_padding=(1, 2)))
    assert out.permute(0, 2, 3, 1).is_contiguous()  # the kernel's output stays channels-last


def test_forward_filter_turns_a_transposed_conv_into_a_forward_one():
    torch.manual_seed(3)
    x, w = _ints(2, 8, 6, 7), _ints(8, 4, 3, 5)
    text = ("input x: f32[2, 8, 6, 7]\nparam w: f32[8, 4, 3, 5] = \"w\"\ntorch xl = channels_last(x)\n"
            "torch wf = forward_filter(w)\n"
            "kernel k = conv2d(xl, wf, padding=(1, 2), dilation=(1, 1)) {\n  math = tf32\n  store y: f32 = acc\n}\noutput y\n")
    prog, _ = parse(text)
    assert not [d for d in check(prog) if d.severity == "error"], [d.render() for d in check(prog)]
    (out,) = interpreter.run(prog, [x], {"w": w})
    assert torch.equal(out, F.conv_transpose2d(x, w, padding=(1, 2)))  # forward padding (3-1-1, 5-1-2)


# ---------------------------------------------------------------------------------------------
# Frontend


class _Up2d(nn.Module):
    def __init__(self, groups=1):
        super().__init__()
        self.up = nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1, groups=groups)

    def forward(self, x):
        return torch.relu(self.up(x)) * 2.0


class _Functional1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 12, 4))
        self.b = nn.Parameter(torch.randn(12))

    def forward(self, x):
        return torch.tanh(F.conv_transpose1d(x, self.w, self.b, stride=2, padding=1))


class _Up3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose3d(8, 4, 3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1), dilation=1)

    def forward(self, x):
        return self.up(x) + 1.0


def _problem(model_cls, *shape, init=()):
    return types.SimpleNamespace(Model=model_cls, get_inputs=lambda: [torch.rand(*shape)], get_init_inputs=lambda: list(init))


def _integer_model(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(_ints(*p.shape))
    return model


@pytest.mark.parametrize("model_cls, shape", [(_Up2d, (2, 16, 5, 6)), (_Functional1d, (2, 8, 9)), (_Up3d, (2, 8, 3, 4, 5))])
@pytest.mark.parametrize("math", [None, "bf16"])
def test_frontend_lowers_transposed_convs_to_kernels_that_match_the_model(model_cls, shape, math):
    result = trace_problem(_problem(model_cls, *shape), TraceOptions(math=math))
    assert result.program is not None and not result.diagnostics, [d.render() for d in result.diagnostics]
    placements = {row.op: row.placement for row in result.coverage if row.placement != "input"}
    assert "kernel" in placements.values() and "torch_step" not in placements.values(), placements
    (kernel,) = result.program.kernels
    assert kernel.op.kind == ("conv_transpose" if math else "conv")  # dgrad in 16 bits, a forward conv in tf32
    assert not [d for d in check(result.program) if d.severity == "error"]
    torch.manual_seed(4)
    model = _integer_model(model_cls())
    x = _ints(*shape)
    (out,) = interpreter.run(result.program, [x], bind_params(result.program, model))
    assert torch.equal(out, model(x).detach())


def test_a_grouped_transposed_conv_stays_a_pytorch_step_and_says_why():
    result = trace_problem(_problem(_Up2d, 2, 16, 5, 6, init=(4,)))
    row = next(r for r in result.coverage if r.op == "up")
    assert row.placement == "torch_step" and "grouped transposed conv (groups=4)" in row.reason
    model = _integer_model(_Up2d(4))
    x = _ints(2, 16, 5, 6)
    (out,) = interpreter.run(result.program, [x], bind_params(result.program, model))
    assert torch.equal(out, model(x).detach())


# ---------------------------------------------------------------------------------------------
# SOL counting


def test_sol_counts_the_problem_by_pytorch_and_the_program_by_its_implicit_gemm():
    from sol_models.counting import count_problem, count_program

    mod = types.ModuleType("convt_problem")
    mod.Model, mod.get_inputs, mod.get_init_inputs = _Up2d, lambda: [torch.rand(2, 16, 5, 6)], lambda: []
    mod.__file__ = "convt_problem.py"
    work = count_problem(types.SimpleNamespace(path="convt_problem.py", module=mod, name="convt", setup_error=None))
    # PyTorch's count: 2 * N * C * (K / groups) * R * S * input pixels
    assert work.flops_tensor == 2 * 2 * 16 * 8 * 3 * 3 * 5 * 6
    prog, _ = parse(_program(2, 16, 8, (10, 12), (3, 3), padding=1))
    counted = count_program(prog)
    # the kernel's implicit GEMM: M = N * output pixels, N = K, K = C * R * S
    assert counted.flops_tensor == 2 * (2 * 10 * 12) * 8 * (16 * 9)
    assert any("conv_transpose2d" in row.op for row in counted.ops)


# ---------------------------------------------------------------------------------------------
# The conv-transpose suite at small sizes


def _suite():
    from evals.problems import load_suite

    return load_suite("conv-transpose")


def test_suite_has_strided_grouped_2d_and_3d_problems():
    problems = _suite()
    assert len(problems) >= 6
    text = " ".join(p.source for p in problems)
    for needle in ("ConvTranspose2d", "ConvTranspose3d", "ConvTranspose1d", "stride=2", "groups="):
        assert needle in text


@pytest.mark.parametrize("index", range(7))
def test_suite_problem_is_interpreter_correct_at_a_small_size(index):
    problem = _suite()[index]
    module = problem.module
    (full,) = module.get_inputs()
    small = (2, full.shape[1], *(min(s, 6) for s in full.shape[2:]))
    result = trace_problem(types.SimpleNamespace(Model=module.Model, get_init_inputs=module.get_init_inputs,
                                                 get_inputs=lambda: [torch.rand(*small)]))
    assert result.program is not None, [d.render() for d in result.diagnostics]
    conv_rows = [r for r in result.coverage if "ConvTranspose" in r.target]
    assert conv_rows and conv_rows[0].placement == ("torch_step" if "groups" in problem.source else "kernel")
    torch.manual_seed(5)
    model = _integer_model(module.Model(*module.get_init_inputs()))
    x = _ints(*small)
    (out,) = interpreter.run(result.program, [x], bind_params(result.program, model))
    ref = model(x).detach()
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)  # integer data: only the tails' functions round


@pytest.mark.nvcc
def test_real_nvcc_compiles_an_sm90_dgrad_kernel(tmp_path, monkeypatch):
    """Compile-only: the bf16 dgrad kernel with a bias + ReLU epilogue, with the installed CUTLASS headers."""
    from dsl_compiler import build

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", os.environ.get("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache")))
    prog, _ = parse(_program(2, 64, 32, (16, 16), (3, 3), "bf16", padding=1, epilogue="relu(acc + b[col])"))
    res = build.build_program(prog)
    assert res.ok, "\n".join(d.render() for d in res.diagnostics)
    (so,) = res.artifacts.values()
    assert os.path.getsize(so) > 100_000


# ---------------------------------------------------------------------------------------------
# The offline tier


@pytest.mark.parametrize("allowed, kind, math", [(("f32", "tf32"), "conv", "tf32"), (None, "conv_transpose", "f16")])
def test_offline_tier_writes_a_transposed_conv_program_and_notes_its_lowering(tmp_path, allowed, kind, math):
    from nodes.offline.policy import OfflineTier
    from nodes.tier_types import WriterRequest
    from sol_models import search

    problem = _suite()[0]  # ConvTranspose2d, stride 2, output_padding 1, then ReLU
    request = WriterRequest(problem_name=problem.name, problem_source=problem.source, sol={"t_sol_us": 10.0}, plan=None,
                            history=[], diagnostics=[], attempt_index=1,
                            allowed_precisions=list(allowed or problem.allowed_precisions), tolerance=problem.tolerance,
                            problem=problem, gpu="h200")
    tier = OfflineTier(record=search.ConfigRecord(tmp_path / "record.json"))
    reply = tier.write(request)
    assert reply.error is None
    program, diags = parse(reply.program_text)
    assert program is not None and not [d for d in check(program) if d.severity == "error"]
    (kernel,) = program.kernels
    assert (kernel.op.kind, kernel.config.math) == (kind, math)
    assert [s.fn for s in program.torch_steps if s.fn == "zero_insert"] == ["zero_insert"]
    rationale = tier.propose(request)[0].rationale  # the planner reads how the kernel runs the op
    assert "zero-inserted input" in rationale and "4x the useful MMAs" in rationale


# ---------------------------------------------------------------------------------------------
# On the H200 (benchmarks/h200_suite.sh conv-transpose)


@pytest.mark.gpu
@pytest.mark.parametrize("model_cls, shape", [(_Up2d, (4, 16, 20, 24)), (_Up3d, (2, 8, 6, 8, 10))])
def test_the_traced_bf16_dgrad_program_runs_on_the_gpu_like_the_interpreter(model_cls, shape):
    """The built dgrad kernel (zero-inserted input, bias and tail fused) against the interpreter's exact semantics:
    the same rounded operands and fp32 sums, only the summation order differs."""
    from dsl_compiler import build
    from dsl_compiler.runtime import load

    result = trace_problem(_problem(model_cls, *shape), TraceOptions(math="bf16"))
    (kernel,) = result.program.kernels
    assert kernel.op.kind == "conv_transpose"
    res = build.build_program(result.program)
    assert res.ok, "\n".join(d.render() for d in res.diagnostics)
    torch.manual_seed(6)
    model = model_cls()
    x = torch.randn(*shape)
    params = bind_params(result.program, model)
    with torch.no_grad():
        want = load(result.program, "interpreter", params)(x)
        got = load(result.program, "cutlass", {k: v.cuda() for k, v in params.items()}, res.artifacts)(x.cuda())
        ref = model(x)
    assert torch.allclose(got.float().cpu(), want, atol=1e-3, rtol=1e-3)
    assert torch.allclose(want, ref, atol=5e-2, rtol=5e-2)  # bf16 operands against fp32 PyTorch


def test_error_model_rounds_transposed_conv_operands_like_the_interpreter(tmp_path, monkeypatch):
    from dsl_compiler.frontend.error_model import predict_errors
    from evals.problems import load_problem

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "convt_small.py"
    path.write_text("import torch\nimport torch.nn as nn\nTOLERANCE = 1e-2\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.up = nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1)\n"
                    "    def forward(self, x):\n        return self.up(x)\n"
                    "def get_inputs():\n    return [torch.randn(2, 32, 8, 8)]\ndef get_init_inputs():\n    return []\n")
    problem = load_problem(path)
    errors = predict_errors(problem, ("bf16",), 1e-2, budget_s=10.0)
    torch.manual_seed(0)
    model = problem.module.Model()
    torch.manual_seed(1)
    (x,) = problem.module.get_inputs()
    with torch.no_grad(), interpreter.exact_fp32():
        ref = model(x)
    program = trace_problem(problem, TraceOptions(math="bf16")).program
    (out,) = interpreter.run(program, [x], bind_params(program, model))
    ratio = float(((out.double() - ref.double()).abs() / (1e-2 + 1e-2 * ref.double().abs())).max())
    assert ratio > 0.01  # bf16 operands do move the result
    assert errors["bf16"].ratio == pytest.approx(ratio, rel=1e-3)
