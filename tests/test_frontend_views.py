"""Views and slicing around kernels lower to cheap PyTorch view steps (``index``, ``narrow``, ``split``, ``unbind``,
``chunk``, ``select``) instead of sending the whole model to PyTorch, and a model hundreds of layers deep lowers
without deep recursion."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn as nn

from dsl_compiler import interpreter, runtime, torch_steps
from dsl_compiler.checks import check_text
from dsl_compiler.frontend import trace_problem


def problem_of(forward, inputs, width=64):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, width)

        def forward(self, x):
            return forward(self, x)

    return types.SimpleNamespace(Model=Model, get_inputs=lambda: inputs, get_init_inputs=lambda: [])


def _split(y):
    a, b = y.split([48, 16], dim=1)
    return a.sum(dim=1, keepdim=True) + b[:, :1]


def _unbind(y):
    rows = y.unbind(0)
    return rows[0] + rows[3]


def _gates(y, x):  # an LSTM cell's gates
    i, f, g, o = y.chunk(4, 1)
    c = torch.sigmoid(f) * x[:, :16] + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c)


VIEWS = [
    ("column slices", lambda m, x: torch.relu(m.fc(x)[:, :32]) * torch.sigmoid(m.fc(x)[:, 32:])),
    ("rows and columns", lambda m, x: m.fc(x)[1:5, 8:40:2]),
    ("integer and slice", lambda m, x: m.fc(x)[2, 16:]),
    ("ellipsis and new axis", lambda m, x: m.fc(x)[..., None, 3:7]),
    ("narrow", lambda m, x: torch.tanh(m.fc(x).narrow(1, 16, 16))),
    ("split", lambda m, x: _split(m.fc(x))),
    ("unbind", lambda m, x: _unbind(m.fc(x))),
    ("chunk gates", lambda m, x: _gates(m.fc(x), x)),
]


@pytest.mark.parametrize("name,forward", VIEWS, ids=[v[0] for v in VIEWS])
def test_views_of_a_gemm_output_keep_the_gemm_a_kernel_and_match_the_model(name, forward):
    torch.manual_seed(0)
    x = torch.randn(8, 32)
    problem = problem_of(forward, [x])
    result = trace_problem(problem)
    program = result.program
    assert program is not None, result.diagnostics
    assert program.kernels, program  # the Linear is a kernel, not one whole-model step
    assert not any(s.fn == "module" for s in program.torch_steps)
    model = problem.Model()
    got = interpreter.run(program, [x], runtime.bind_params(program, model))[0]
    want = model(x)
    assert got.shape == want.shape
    # tf32 operands: about 3e-4 relative error over K = 32
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)


def test_column_slicing_no_longer_sends_the_model_to_pytorch_whole():
    x = torch.randn(8, 32)
    result = trace_problem(problem_of(lambda m, x: torch.relu(m.fc(x)[:, :32]), [x]))
    assert result.program is not None
    assert [s.fn for s in result.program.torch_steps if s.fn in ("index", "module")] == ["index"]
    row = next(r for r in result.coverage if r.target == "operator.getitem")
    assert row.placement == "torch_step"


def test_advanced_indexing_is_named_as_such():
    x = torch.randn(8, 32)
    result = trace_problem(problem_of(lambda m, x: m.fc(x)[:, [0, 2, 5]], [x]))
    reasons = " ".join(r.reason for r in result.coverage)
    assert "advanced indexing" in reasons


def test_index_spec_round_trips_a_python_index_and_rejects_others():
    key = (slice(None), slice(2, 8), 3, Ellipsis, None, slice(1, None, 2))
    spec = torch_steps.index_spec(key)
    assert spec == (":", "2:8", 3, "...", None, "1::2")
    assert torch_steps.index_key(spec) == key
    assert torch_steps.index_spec((slice(None), torch.tensor([1]))) is None
    with pytest.raises(ValueError, match="not a slice"):
        torch_steps.index_key(("1:2:3:4",))


def test_the_checker_reports_a_bad_index_spec_with_its_step():
    text = 'input x: f32[8, 16]\ntorch y = index(x, ("a:b",))\noutput y\n'
    program, diags = check_text(text)
    assert diags and any("index" in d.message for d in diags), diags
    good = 'input x: f32[8, 16]\ntorch y = index(x, (":", "2:6"))\noutput y\n'
    program, diags = check_text(good)
    assert not [d for d in diags if d.severity == "error"], diags


def test_a_200_layer_mlp_lowers_without_deep_recursion_and_matches_the_model():
    depth = 200

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(depth)])

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    torch.manual_seed(0)
    x = torch.randn(4, 16)
    limit = sys.getrecursionlimit()
    result = trace_problem(types.SimpleNamespace(Model=Model, get_inputs=lambda: [x], get_init_inputs=lambda: []))
    assert sys.getrecursionlimit() == limit
    program = result.program
    assert program is not None, result.diagnostics
    assert len(program.kernels) == depth and not program.torch_steps
    model = Model()
    got = interpreter.run(program, [x], runtime.bind_params(program, model))[0]
    torch.testing.assert_close(got, model(x), rtol=1e-2, atol=1e-3)


def test_every_tail_suite_problem_traces_to_kernels_without_a_whole_model_step():
    from evals.problems import load_suite

    problems = load_suite("tail")
    assert len(problems) == 3
    for problem in problems:
        result = trace_problem(problem)
        assert result.program is not None and result.program.kernels, (problem.name, result.diagnostics)
        assert not any(s.fn == "module" for s in result.program.torch_steps), problem.name
