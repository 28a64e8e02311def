"""The torch.fx frontend (dsl_compiler.frontend): PyTorch reference -> μCUTLASS program, with coverage."""

from __future__ import annotations

import textwrap
import types

import pytest
import torch

from dsl_compiler import interpreter, runtime
from dsl_compiler.checks import check
from dsl_compiler.ir import ConvOp, GemmOp, Reduce
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program
from evals.problems import Problem, ProblemError, load_problem, load_suite
from dsl_compiler.frontend import TraceOptions, trace_problem

BUILTIN = load_suite("builtin")
# Grouped and depthwise convolutions: the CUTLASS backend's sm_90 conv kernels take groups = 1 only.
NO_KERNEL_EXPECTED: set[str] = set()  # every built-in problem gets at least one CUTLASS kernel


def shrunk(problem: Problem, factor: int = 8) -> Problem:
    """The same problem with its module-level sizes divided, so the interpreter runs it in well under a second."""
    module = types.ModuleType(problem.module.__name__ + "_small")
    exec(compile(problem.source, problem.path, "exec"), module.__dict__)
    for key, value in list(vars(module).items()):
        if not key.startswith("_") and type(value) is int and value >= 64:
            setattr(module, key, max(8, value // factor))
    return Problem(name=problem.name, path=problem.path, source=problem.source, module=module,
                   tolerance=problem.tolerance, allowed_precisions=problem.allowed_precisions)


def run_both(problem: Problem, program, seed: int = 1):
    model = problem.make_model(seed=0)
    inputs = problem.make_inputs(seed=seed)
    with torch.no_grad():
        ref = model(*inputs)
    out = interpreter.run(program, inputs, runtime.bind_params(program, model))
    return out, ref


def assert_matches_reference(path: str, program, tol: float):
    """The program's one output equals the reference model's on the interpreter, within ``tol``."""
    (out,), ref = run_both(load_problem(path), program)
    assert torch.allclose(out, ref, atol=tol, rtol=tol)


def write_problem(tmp_path, body: str, name: str = "p") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + textwrap.dedent(body))
    return str(path)


# ---------------------------------------------------------------------------------------------
# The built-in suite


@pytest.mark.parametrize("problem", BUILTIN, ids=[p.name for p in BUILTIN])
def test_builtin_traces_to_a_clean_program(problem):
    result = trace_problem(problem)
    assert result.program is not None, result.diagnostics
    assert check(result.program) == []  # the CUTLASS backend's checks, not just the language's
    assert parse(format_program(result.program))[0] == result.program
    placements = {row.placement for row in result.coverage}
    assert "unsupported" not in placements
    if problem.name in NO_KERNEL_EXPECTED:
        assert not result.program.kernels
        demoted = [r for r in result.coverage if r.placement == "torch_step" and "conv" in r.target.lower()]
        assert demoted and demoted[0].reason.startswith("demoted to PyTorch: kernel 't_conv'")
    else:
        assert result.program.kernels, result.coverage_table()
        # every kernel uses tensor cores (fp32 inputs at tolerance 1e-2 allow TF32), but for the depthwise
        # conv, which CUTLASS computes on SIMT cores in fp32
        assert all(k.config.math == ("f32" if _depthwise(result.program, k) else "tf32") for k in result.program.kernels)


def _depthwise(program, kernel) -> bool:
    from dsl_compiler import shapes

    op = kernel.op
    return isinstance(op, ConvOp) and op.groups > 1 and op.groups == shapes.infer(program)[op.x.name].shape[1]


@pytest.mark.parametrize("name,groups,epilogue", [("28_depthwise_conv2d_relu6", 256, "hardtanh"), ("29_grouped_conv2d", 8, "sigmoid")])
def test_depthwise_and_grouped_convs_become_one_kernel_with_their_epilogue(name, groups, epilogue):
    result = trace_problem(next(p for p in BUILTIN if p.name == name))
    (kernel,) = result.program.kernels
    assert isinstance(kernel.op, ConvOp) and kernel.op.groups == groups
    assert [s.fn for s in result.program.torch_steps] == ["channels_last"]  # the input to NHWC, nothing else
    (store,) = kernel.stores
    assert store.expr.kind in ("param_call", "unary") and "conv_bias" in str(store.expr)
    rows = {r.op: r for r in result.coverage}
    assert rows["conv"].placement == "kernel" and rows[epilogue].placement == "epilogue" and rows[epilogue].where == kernel.name


def test_grouped_conv_epilogue_takes_one_tensor_and_leaves_the_rest_to_pytorch(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(32, 32, 3, padding=1, groups=32)
            def forward(self, x, r):
                return torch.relu(self.conv(x)) + r
        def get_inputs():
            return [torch.randn(2, 32, 8, 8), torch.randn(2, 32, 8, 8)]
        def get_init_inputs():
            return []
        """)
    result = trace_problem(load_problem(path))
    (kernel,) = result.program.kernels
    assert kernel.op.groups == 32 and "Unary" in repr(kernel.stores[0].expr) and "name='r'" not in repr(kernel.stores[0].expr)
    add = next(r for r in result.coverage if r.target.endswith("add") or r.op.startswith("add"))
    assert add.placement == "torch_step" and "one tensor" in add.reason
    assert check(result.program) == []
    assert_matches_reference(path, result.program, tol=1e-4)


def test_a_depthwise_conv_the_backend_cannot_build_is_demoted_with_the_reason(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(16, 32, 3, padding=1, groups=16)  # a channel multiplier of 2
            def forward(self, x):
                return self.conv(x)
        def get_inputs():
            return [torch.randn(2, 16, 8, 8)]
        def get_init_inputs():
            return []
        """)
    result = trace_problem(load_problem(path))
    assert not result.program.kernels
    row = next(r for r in result.coverage if r.op == "conv")
    assert row.placement == "torch_step" and "channel multiplier" in row.reason


@pytest.mark.parametrize("problem", BUILTIN, ids=[p.name for p in BUILTIN])
def test_builtin_matches_reference_on_interpreter(problem):
    small = shrunk(problem)
    result = trace_problem(small)
    assert result.program is not None, result.diagnostics
    (out,), ref = run_both(small, result.program)
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, atol=problem.tolerance, rtol=problem.tolerance), (out - ref).abs().max()


def test_linear_epilogue_is_fused_with_bias_as_column_vector():
    problem = next(p for p in BUILTIN if p.name == "14_linear_tanh_scale_bias")
    program = trace_problem(problem).program
    (kernel,) = program.kernels
    assert isinstance(kernel.op, GemmOp) and kernel.op.b.transpose  # nn.Linear weight read as w^T
    text = format_program(program)
    assert "[col]" in text and "tanh(" in text
    assert not program.torch_steps


def test_conv_gets_channels_last_input_and_weights():
    problem = next(p for p in BUILTIN if p.name == "20_conv2d_bias_relu")
    program = trace_problem(problem).program
    (kernel,) = program.kernels
    assert isinstance(kernel.op, ConvOp)
    (step,) = program.torch_steps
    assert step.fn == "channels_last" and kernel.op.x.name == step.outputs[0]
    assert program.decl(kernel.op.w.name).layout == "channels_last"


def test_mlp_becomes_a_pipeline_of_kernels():
    problem = next(p for p in BUILTIN if p.name == "30_mlp3")
    program = trace_problem(problem).program
    assert len(program.kernels) == 3 and not program.torch_steps
    k1, k2, k3 = program.kernels
    assert k2.op.a.name == k1.stores[0].name and k3.op.a.name == k2.stores[0].name


# ---------------------------------------------------------------------------------------------
# Mapping details, on small hand-written problems


def test_reduction_with_keepdim_and_folded_scale(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(32, 16))
            def forward(self, x):
                x = torch.matmul(x, self.weight.T)
                x = x / 2
                x = torch.sum(x, dim=1, keepdim=True)
                return x * 1.5
        def get_inputs():
            return [torch.rand(8, 16)]
        def get_init_inputs():
            return []
    """)
    result = trace_problem(load_problem(path))
    (kernel,) = result.program.kernels
    assert any(isinstance(s.expr, Reduce) and s.expr.fn == "row_sum" for s in kernel.stores)
    assert [s.fn for s in result.program.torch_steps] == ["unsqueeze"]
    placements = {r.op: r.placement for r in result.coverage}
    assert placements["sum_1"] == "reduction" and placements["mul"] == "epilogue"
    (out,), ref = run_both(load_problem(path), result.program)
    assert out.shape == ref.shape == (8, 1)
    assert torch.allclose(out, ref, atol=1e-2, rtol=1e-2)


def test_fallbacks_are_torch_steps_with_reasons(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1 = nn.Linear(64, 128)
                self.fc2 = nn.Linear(128, 32)
                self.bn = nn.BatchNorm1d(32)
            def forward(self, x, r):
                h = F.gelu(self.fc1(x))
                y = self.fc2(h)
                orig = y.clone().detach()
                y = y * 2.0 + orig
                y = self.bn(y)
                z = F.softmax(y, dim=1)
                return 1.0 - z + r
        def get_inputs():
            return [torch.rand(16, 64), torch.rand(16, 32)]
        def get_init_inputs():
            return []
    """)
    result = trace_problem(load_problem(path))
    assert result.program is not None, result.diagnostics
    rows = {r.op: r for r in result.coverage}
    assert rows["fc1"].placement == rows["fc2"].placement == "kernel"
    assert rows["gelu"].placement == "epilogue" and rows["add"].placement == "epilogue"
    assert rows["clone"].placement == "folded"
    assert rows["bn"].placement == "torch_step" and "BatchNorm1d" in rows["bn"].reason
    assert rows["softmax"].placement == "kernel"  # a row kernel after the step
    steps = {s.fn for s in result.program.torch_steps}
    assert "batch_norm" in steps and "softmax" not in steps
    assert_matches_reference(path, result.program, tol=1e-2)


def test_einsum_addmm_and_rank4_linear(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 16)
                self.bias = nn.Parameter(torch.randn(24))
            def forward(self, a, b, c, d):
                y = torch.einsum("bik,bjk->bij", a, b)
                z = torch.addmm(self.bias, c, d, beta=0.5, alpha=2.0) + y.sum()
                w = self.fc(a.reshape(2, 2, 24, 32))
                return torch.relu(z), w
        def get_inputs():
            return [torch.rand(4, 24, 32), torch.rand(4, 24, 32), torch.rand(8, 24), torch.rand(24, 24)]
        def get_init_inputs():
            return []
    """)
    result = trace_problem(load_problem(path))
    assert result.program is not None, result.diagnostics
    ops = [r.target for r in result.coverage if r.placement == "kernel"]
    assert ops == ["torch.einsum", "torch.addmm", "Tensor.sum", "nn.Linear"]  # the sum: a row kernel
    einsum = result.program.kernels[0]
    assert einsum.op.b.transpose and not einsum.op.a.transpose
    outs, refs = run_both(load_problem(path), result.program)
    for out, ref in zip(outs, refs):
        assert out.shape == ref.shape
        assert torch.allclose(out, ref, atol=1e-2, rtol=1e-2)


def test_fusion_options_and_demotion(tmp_path):
    problem = next(p for p in BUILTIN if p.name == "11_linear_relu")
    unfused = trace_problem(problem, TraceOptions(fuse="none"))
    assert [s.fn for s in unfused.program.torch_steps] == ["relu"]
    assert next(r for r in unfused.coverage if r.op == "relu").reason
    demoted = trace_problem(problem, TraceOptions(demote=("fc",)))
    assert not demoted.program.kernels
    assert [s.fn for s in demoted.program.torch_steps] == ["linear", "relu"]


def test_broken_and_untraceable_problems_give_diagnostics(tmp_path):
    # the frontend traces loaded problems; a path is refused as a value, not loaded behind the caller's back
    missing = trace_problem(tmp_path / "nope.py")
    assert missing.program is None and "loaded problem" in missing.diagnostics[0].message
    broken = write_problem(tmp_path, "this is not python\n", name="broken")
    with pytest.raises(ProblemError):
        load_problem(broken)
    no_model = types.ModuleType("no_model")
    result = trace_problem(no_model)
    assert result.program is None and "defines no `Model`" in result.diagnostics[0].message
    dropout = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 16)
                self.drop = nn.Dropout(0.5)
            def forward(self, x):
                return self.drop(self.fc(x))
        def get_inputs():
            return [torch.rand(8, 16)]
        def get_init_inputs():
            return []
    """, name="dropout")
    result = trace_problem(load_problem(dropout))
    # a model that runs is never refused: it runs whole as one PyTorch step, the reason in its coverage
    assert result.program is not None and not result.program.kernels
    assert [s.fn for s in result.program.torch_steps] == ["module"]
    assert any(r.placement == "unsupported" and "random" in r.reason for r in result.coverage)


def test_tracing_is_deterministic():
    problem = next(p for p in BUILTIN if p.name == "16_linear_mish_clamp_scale_add")
    first, second = trace_problem(problem), trace_problem(problem)
    assert format_program(first.program) == format_program(second.program)
    assert first.coverage == second.coverage


def test_control_flow_falls_back_to_torch_export(tmp_path):
    path = write_problem(tmp_path, """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 128)
            def forward(self, x):
                if x.shape[0] > 4:  # symbolic tracing cannot branch on a shape
                    x = self.fc(x)
                return torch.relu(x) * 2.0
        def get_inputs():
            return [torch.rand(16, 64)]
        def get_init_inputs():
            return []
    """)
    result = trace_problem(load_problem(path))
    assert result.program is not None, result.diagnostics
    (kernel,) = result.program.kernels
    assert result.program.decl(kernel.op.b.name).source == "fc.weight"
    assert {r.op: r.placement for r in result.coverage}["relu"] == "epilogue"
    assert_matches_reference(path, result.program, tol=1e-2)


def _kmajor_only_rule(self, math):
    """A target whose tf32 MMA reads K-major operands only (sm_90a's wgmma without CUTLASS's
    register-sourced mainloop)."""
    if self.is_conv or math != "tf32":
        return
    a, b = self.k.operands
    for o, bad in ((a, a.transpose), (b, not b.transpose)):
        if bad:
            self.err("layout", f"math = {math} reads K-major operands; '{o.name}' is not", o.span)


def test_tf32_operands_get_a_transposing_copy_only_where_the_checks_need_one(monkeypatch):
    """tf32 operands that are not K-major are read as they are stored when the checks take them,
    and get one transposing copy each where the target reads K-major only."""
    from dsl_compiler import checks

    square = next(p for p in BUILTIN if p.name == "01_gemm_square")  # A @ B, B stored [K, N]
    program = trace_problem(square).program
    assert not [d for d in check(program, "sm90a", backend="cutlass") if d.severity == "error"]
    monkeypatch.setattr(checks._KernelChecker, "check_operand_majorness", lambda self, math: None)
    program = trace_problem(square).program
    (kernel,) = program.kernels
    assert not kernel.op.a.transpose and not kernel.op.b.transpose and kernel.config.math == "tf32"
    assert not program.torch_steps

    monkeypatch.setattr(checks._KernelChecker, "check_operand_majorness", _kmajor_only_rule)
    result = trace_problem(square)
    (kernel,) = result.program.kernels
    assert not kernel.op.a.transpose and kernel.op.b.transpose
    assert [s.fn for s in result.program.torch_steps] == ["transpose", "contiguous"]
    assert not any(r.reason.startswith(("demoted", "epilogue left")) for r in result.coverage)
    transposed_a = next(p for p in BUILTIN if p.name == "04_gemm_transposed_a")  # A^T @ B
    both = trace_problem(transposed_a).program
    assert [s.fn for s in both.torch_steps] == ["transpose", "contiguous"] * 2
    small = shrunk(transposed_a)
    (out,), ref = run_both(small, trace_problem(small).program)
    assert torch.allclose(out, ref, atol=1e-2, rtol=1e-2)
    linear = trace_problem(next(p for p in BUILTIN if p.name == "11_linear_relu")).program
    assert not linear.torch_steps  # nn.Linear's weight is already [N, K]


# KernelBench Level 2 shapes of model, small sizes: every op either fuses or becomes a whitelisted step.
LEVEL2_LIKE = {
    "conv_transpose_clamp_scale": """
class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, output_padding, bias_shape, scaling_factor):
        super().__init__()
        self.conv_transpose = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=stride, padding=padding, output_padding=output_padding)
        self.bias = nn.Parameter(torch.randn(bias_shape))
        self.scaling_factor = scaling_factor
    def forward(self, x):
        x = self.conv_transpose(x)
        x = x + self.bias
        x = torch.clamp(x, min=0.0, max=1.0)
        x = x * self.scaling_factor
        x = torch.clamp(x, min=0.0, max=1.0)
        x = x / self.scaling_factor
        return x
def get_inputs():
    return [torch.rand(4, 8, 8, 8)]
def get_init_inputs():
    return [8, 16, 3, 2, 1, 1, (16, 1, 1), 2.0]
""",
    "gemm_sigmoid_scale_groupnorm_max_lse": """
class Model(nn.Module):
    def __init__(self, in_features, out_features, num_groups):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.group_norm = nn.GroupNorm(num_groups, out_features)
        self.scale = nn.Parameter(torch.randn(out_features))
    def forward(self, x):
        x = self.gemm(x)
        x = torch.sigmoid(x)
        x = x * self.scale
        x = self.group_norm(x)
        x = torch.max(x, dim=1, keepdim=True)[0]
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return x
def get_inputs():
    return [torch.rand(32, 64)]
def get_init_inputs():
    return [64, 128, 8]
""",
    "conv_mish_batchnorm_mean_pool": """
class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bn = nn.BatchNorm2d(out_channels)
    def forward(self, x):
        x = self.conv(x)
        x = x * torch.tanh(torch.nn.functional.softplus(x))
        x = self.bn(x)
        x = torch.mean(x, dim=[2, 3], keepdim=True)
        x = x.view(x.size(0), -1)
        return torch.nn.functional.max_pool1d(x.unsqueeze(1), 2).squeeze(1)
def get_inputs():
    return [torch.rand(4, 16, 12, 12)]
def get_init_inputs():
    return [16, 32, 3]
""",
    "linear_twice_max_and_sum_tuple_output": """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 64)
    def forward(self, x):
        y = self.linear(x)
        y = torch.max(y, dim=1)[0]
        z = 1.0 - torch.sigmoid(self.linear(x)) 
        return y, z.sum(dim=-1) / 4.0
def get_inputs():
    return [torch.rand(16, 64)]
def get_init_inputs():
    return []
""",
}


@pytest.mark.parametrize("name", sorted(LEVEL2_LIKE))
def test_level2_like_models_match_the_reference(tmp_path, name):
    path = write_problem(tmp_path, LEVEL2_LIKE[name], name=name)
    result = trace_problem(load_problem(path))
    assert result.program is not None, result.diagnostics
    assert check(result.program) == []
    assert "unsupported" not in {r.placement for r in result.coverage}
    assert all(r.reason for r in result.coverage if r.placement == "torch_step")
    outs, ref = run_both(load_problem(path), result.program)
    refs = ref if isinstance(ref, tuple) else (ref,)
    assert len(outs) == len(refs)
    for out, expected in zip(outs, refs):
        assert out.shape == expected.shape
        assert torch.allclose(out, expected, atol=1e-2, rtol=1e-2)
