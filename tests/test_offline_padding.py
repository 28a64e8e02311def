"""Padding instead of fallback: GEMMs whose K, N or M and convs whose channels are not a multiple of 16 bytes
become kernels on zero-padded operands (params padded once when bound, other tensors by a ``pad`` step) with the
output sliced back, and the result is exact: integer-valued data makes every product and sum exact in fp32, so
the padded program must equal the unpadded one on the interpreter (bit for bit where the epilogue is linear or
piecewise linear), and the reference model."""

from __future__ import annotations

import textwrap

import pytest
import torch

from dsl_compiler import interpreter, runtime
from dsl_compiler.checks import check
from dsl_compiler.frontend import TraceOptions, trace_problem
from dsl_compiler.ir import Reduce
from evals.problems import load_problem

CASES = {
    "gemm_k37": ("""
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a, b)
        def get_inputs():
            return [torch.randint(-3, 4, (24, 37)).float(), torch.randint(-3, 4, (37, 40)).float()]
        """, {"k"}),
    "linear_k37_n29_gelu": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(37, 29)
            def forward(self, x):
                return F.gelu(self.fc(x))
        def get_inputs():
            return [torch.randint(-3, 4, (24, 37)).float()]
        """, {"k", "n"}),
    "linear_n29_row_sum": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(32, 29)
            def forward(self, x):
                return torch.sigmoid(self.fc(x)).sum(dim=1, keepdim=True)
        def get_inputs():
            return [torch.randint(-3, 4, (24, 32)).float()]
        """, {"n"}),
    "gemm_transposed_a_m27": ("""
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.matmul(a.T, b)
        def get_inputs():
            return [torch.randint(-3, 4, (16, 27)).float(), torch.randint(-3, 4, (16, 32)).float()]
        """, {"m"}),
    "bmm_k37": ("""
        class Model(nn.Module):
            def forward(self, a, b):
                return torch.bmm(a, b) * 0.5
        def get_inputs():
            return [torch.randint(-3, 4, (3, 20, 37)).float(), torch.randint(-3, 4, (3, 37, 16)).float()]
        """, {"k"}),
    "linear_n29_residual": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(37, 29)
            def forward(self, x, r):
                return torch.relu(self.fc(x)) + r
        def get_inputs():
            return [torch.randint(-3, 4, (24, 37)).float(), torch.randint(-3, 4, (24, 29)).float()]
        """, {"k", "n"}),
    "rank4_linear_k37": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(37, 29)
            def forward(self, x):
                return self.fc(x)
        def get_inputs():
            return [torch.randint(-3, 4, (2, 3, 5, 37)).float()]
        """, {"k", "n"}),
    "conv2d_c3_k6_sigmoid": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 6, 3, padding=1)
            def forward(self, x):
                return torch.sigmoid(self.conv(x))
        def get_inputs():
            return [torch.randint(-3, 4, (2, 3, 9, 10)).float()]
        """, {"c", "kc"}),
    "conv2d_c6_residual": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(6, 6, 3, padding=1)
            def forward(self, x):
                return x + torch.relu(self.conv(x))
        def get_inputs():
            return [torch.randint(-3, 4, (2, 6, 8, 8)).float()]
        """, {"c", "kc"}),
    "conv1d_c3_k5": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv1d(3, 5, 3)
            def forward(self, x):
                return self.conv(x)
        def get_inputs():
            return [torch.randint(-3, 4, (2, 3, 17)).float()]
        """, {"c", "kc"}),
    "lenet_convs": ("""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(1, 6, 5)
                self.c2 = nn.Conv2d(6, 16, 5)
            def forward(self, x):
                return self.c2(torch.relu(self.c1(x)))
        def get_inputs():
            return [torch.randint(-3, 4, (2, 1, 16, 16)).float()]
        """, {"c", "kc"}),
}


EXACT_EPILOGUE = {"gemm_k37", "bmm_k37", "gemm_transposed_a_m27", "rank4_linear_k37", "conv1d_c3_k5", "lenet_convs",
                  "linear_n29_residual", "conv2d_c6_residual"}


def _problem(tmp_path, name: str):
    body, _ = CASES[name]
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
                    "TOLERANCE = 1e-2\n" + textwrap.dedent(body) + "\ndef get_init_inputs():\n    return []\n")
    return load_problem(path)


def _integer_model(problem):
    """The reference model with small integer parameters: every product and sum exact in fp32."""
    model = problem.make_model(seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=gen).float())
    return model


def _run(program, model, inputs):
    return interpreter.run(program, inputs, runtime.bind_params(program, model))


@pytest.mark.parametrize("name", sorted(CASES))
def test_padded_program_is_a_kernel_and_exact(tmp_path, name):
    problem = _problem(tmp_path, name)
    padded = trace_problem(problem)  # checks for the CUTLASS target: misaligned extents would be demoted
    program = padded.program
    assert program is not None, padded.diagnostics
    assert program.kernels, "a misaligned GEMM / conv must stay a kernel"
    assert not [r for r in padded.coverage if r.reason.startswith("demoted")]
    assert not [d for d in check(program, backend="cutlass") if d.severity == "error"]
    assert any(s.fn == "pad" for s in program.torch_steps) or any(
        d.kind == "param" and d.name.endswith("_pad") for d in program.decls)

    unpadded = trace_problem(problem, TraceOptions(pad=False), fallback=False).program
    assert unpadded is not None and len(unpadded.kernels) == len(program.kernels)
    assert not any(s.fn == "pad" for s in unpadded.torch_steps)
    model = _integer_model(problem)
    for seed in (1, 2):
        inputs = problem.make_inputs(seed=seed)
        with torch.no_grad():
            ref = model(*inputs)
        (out,) = _run(program, model, inputs)
        (out_unpadded,) = _run(unpadded, model, inputs)
        assert out.shape == ref.shape
        # the accumulators are equal bit for bit; PyTorch's vectorised sigmoid / GELU may round the last bit
        # differently on the sliced (strided) tensor
        assert torch.allclose(out, out_unpadded, rtol=4e-7, atol=1e-30), "zero padding changed a value"
        if name in EXACT_EPILOGUE:
            assert torch.equal(out, out_unpadded)
        assert torch.allclose(out, ref, atol=1e-5, rtol=1e-6)


def test_params_are_padded_once_when_bound(tmp_path):
    """A padded param is declared larger and zero-filled by bind_params: no per-call step reads it."""
    problem = _problem(tmp_path, "linear_k37_n29_gelu")
    program = trace_problem(problem).program
    weight = next(d for d in program.params if d.source == "fc.weight")
    bias = next(d for d in program.params if d.source == "fc.bias")
    assert weight.shape == (32, 40) and bias.shape == (32,)
    bound = runtime.bind_params(program, problem.make_model(seed=0))
    assert torch.equal(bound[weight.name][29:], torch.zeros(3, 40))
    assert torch.equal(bound[weight.name][:, 37:], torch.zeros(32, 3))
    step_reads = {a.name for s in program.torch_steps for a in s.args if hasattr(a, "name")}
    assert weight.name not in step_reads and bias.name not in step_reads
    # only the input is padded per call, and the output cut back to N = 29
    pads = [s for s in program.torch_steps if s.fn == "pad"]
    assert [s.args[1].value for s in pads] == [(0, 3), (0, -3)]


def test_reduction_over_padded_columns_is_not_fused(tmp_path):
    """sigmoid(0) = 0.5 on a padded column would enter a fused row sum: the sum runs after the slice."""
    program = trace_problem(_problem(tmp_path, "linear_n29_row_sum")).program
    assert not any(isinstance(s.expr, Reduce) for k in program.kernels for s in k.stores)
    (cut,) = [s for s in program.torch_steps if s.fn == "pad"]  # the padded columns cut off first
    (total,) = [k for k in program.row_kernels if k.op.fn == "sum"]
    assert total.op.x.name == cut.outputs[0]


def test_bind_refuses_a_smaller_or_other_rank_declaration(tmp_path):
    problem = _problem(tmp_path, "linear_k37_n29_gelu")
    program = trace_problem(problem).program
    weight = next(d for d in program.params if d.source == "fc.weight")
    for shape in ((28, 40), (32, 40, 1)):
        bad = program.model_copy(update={"decls": tuple(d.model_copy(update={"shape": shape}) if d is weight else d
                                                        for d in program.decls)})
        with pytest.raises((runtime.BindError, ValueError)):
            runtime.bind_params(bad, problem.make_model(seed=0))


def test_half_math_pads_to_eight_elements(tmp_path):
    """In f16 math 16 bytes are 8 elements: K = 37 grows to 40 (not 40 in tf32 by chance: 37 -> 40 too), N = 29 to 32,
    and the conv's 3 channels to 8 (4 in tf32)."""
    conv = _problem(tmp_path, "conv2d_c3_k6_sigmoid")
    tf32 = trace_problem(conv).program
    half = trace_problem(conv, TraceOptions(math="f16")).program
    w_tf32 = next(d for d in tf32.params if d.source == "conv.weight")
    w_half = next(d for d in half.params if d.source == "conv.weight")
    assert w_tf32.shape == (8, 4, 3, 3) and w_half.shape == (8, 8, 3, 3) and w_half.dtype == "f16"
    model = _integer_model(conv)
    inputs = conv.make_inputs(seed=1)
    with torch.no_grad():
        ref = model(*inputs)
    (out,) = _run(half, model, inputs)
    assert torch.allclose(out, ref, atol=1e-5)  # small integers are exact in f16 too
