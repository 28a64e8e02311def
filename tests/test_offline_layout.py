"""Layout planning in the frontend: a 1x1 conv is a GEMM over its activation as stored (NCHW: a batched GEMM
reading [N, C, H*W] M-major; NHWC, as a conv kernel wrote it: one GEMM over [N*H*W, C]), so no layout copy is made
before it, and its output is NHWC seen as [N, K, H, W] channels-last (a view, no copy), which the next conv reads
as it is. Exactness is checked on the interpreter with integer data (every product and sum exact in fp32)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from dsl_compiler import interpreter, runtime, torch_steps
from dsl_compiler.checks import check
from dsl_compiler.frontend import TraceOptions, trace_problem
from dsl_compiler.ir import ConvOp, GemmOp
from evals.problems import load_problem
from sol_models.counting import program_traffic

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nTOLERANCE = 1e-2\n"

CASES = {
    "conv1x1_nchw": """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(16, 24, 1)
            def forward(self, x):
                return torch.relu(self.conv(x) * 0.5)
        def get_inputs():
            return [torch.randint(-3, 4, (2, 16, 6, 8)).float()]
        """,
    "conv3x3_then_1x1": """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(8, 16, 3, padding=1)
                self.c2 = nn.Conv2d(16, 8, 1)
            def forward(self, x):
                return self.c2(torch.relu(self.c1(x)))
        def get_inputs():
            return [torch.randint(-3, 4, (2, 8, 6, 6)).float()]
        """,
    "conv1d_1x1": """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv1d(8, 12, 1, bias=False)
            def forward(self, x):
                return self.conv(x)
        def get_inputs():
            return [torch.randint(-3, 4, (3, 8, 16)).float()]
        """,
    "conv3d_1x1": """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv3d(8, 8, 1)
            def forward(self, x):
                return torch.sigmoid(self.conv(x))
        def get_inputs():
            return [torch.randint(-3, 4, (2, 8, 2, 4, 4)).float()]
        """,
}


def _problem(tmp_path, name, body=None):
    path = tmp_path / f"{name}.py"
    path.write_text(HEAD + textwrap.dedent(body or CASES[name]) + "\ndef get_init_inputs():\n    return []\n")
    return load_problem(path)


def _integer_model(problem):
    model = problem.make_model(seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-2, 3, p.shape, generator=gen).float())
    return model


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("math", [None, "f16"])
def test_1x1_conv_is_a_gemm_without_layout_copies(tmp_path, name, math):
    problem = _problem(tmp_path, name)
    program = trace_problem(problem, TraceOptions(math=math)).program
    assert program is not None
    assert not [d for d in check(program, backend="cutlass") if d.severity == "error"]
    one_by_one = [k for k in program.kernels if isinstance(k.op, GemmOp)]
    assert len(one_by_one) == 1
    # the only copies left are the 3x3 conv's own input and a 16-bit cast: nothing converts layouts for the GEMM
    copies = [s.fn for s in program.torch_steps if s.fn in ("channels_last", "contiguous", "transpose")]
    assert copies == (["channels_last"] if name == "conv3x3_then_1x1" else [])
    model = _integer_model(problem)
    inputs = problem.make_inputs(seed=1)
    with torch.no_grad():
        ref = model(*inputs)
    (out,) = interpreter.run(program, inputs, runtime.bind_params(program, model))
    assert out.shape == ref.shape
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-6)
    if out.dim() >= 4:
        assert torch_steps.is_channels_last(out)  # the GEMM's NHWC rows, seen as [N, K, H, W]


def test_nhwc_stays_between_a_conv_and_a_1x1_conv(tmp_path):
    """The 3x3 conv writes NHWC; the 1x1 conv's GEMM reads those rows as they are ([N*H*W, C], K-major), and the
    permute / reshape between them are views: the estimate charges no bytes for them."""
    program = trace_problem(_problem(tmp_path, "conv3x3_then_1x1")).program
    conv, gemm = program.kernels
    assert isinstance(conv.op, ConvOp) and isinstance(gemm.op, GemmOp)
    assert not gemm.op.a.transpose and gemm.op.b.transpose  # both K-major: TF32's fast mainloop
    steps, types = program_traffic(program)
    between = [s for s in steps if s.kind == "torch" and s.op in ("permute", "reshape")]
    assert between and all(s.bytes_read == 0 and s.bytes_written == 0 for s in between)


def test_other_convs_stay_convs(tmp_path):
    """Stride, padding, a residual read in the epilogue, or channels that need padding keep the conv kernel."""
    bodies = {
        "strided": "self.conv = nn.Conv2d(16, 24, 1, stride=2)\n            def forward(self, x):\n                return self.conv(x)",
        "residual": "self.conv = nn.Conv2d(16, 16, 1)\n            def forward(self, x):\n                return x + self.conv(x)",
        "c3": "self.conv = nn.Conv2d(3, 16, 1)\n            def forward(self, x):\n                return self.conv(x)",
    }
    for name, body in bodies.items():
        channels = 3 if name == "c3" else 16
        problem = _problem(tmp_path, name, f"""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                {body}
        def get_inputs():
            return [torch.rand(2, {channels}, 8, 8)]
        """)
        program = trace_problem(problem).program
        assert [type(k.op) for k in program.kernels] == [ConvOp], name


def test_the_gemm_form_is_off_with_its_option(tmp_path):
    problem = _problem(tmp_path, "conv1x1_nchw")
    program = trace_problem(problem, TraceOptions(conv1x1_gemm=False)).program
    assert [type(k.op) for k in program.kernels] == [ConvOp]
    assert any(s.fn == "channels_last" for s in program.torch_steps)
