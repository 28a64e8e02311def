"""The frontend writes reductions, softmax, norms and scans as row kernels (their element-wise followers as the tail), the
offline tier gives them knobs from the estimate, and every builtin-ops problem traces to row kernels alone."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dsl_compiler import interpreter, runtime
from dsl_compiler.frontend import trace_problem


def problem_of(forward, inputs, init=None):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            if init:
                init(self)

        def forward(self, x):
            return forward(self, x)

    return types.SimpleNamespace(Model=Model, get_inputs=lambda: inputs, get_init_inputs=lambda: [])


MODELS = [
    ("sum", lambda m, x: torch.sum(x, dim=1, keepdim=True), None),
    ("amax tensor method", lambda m, x: x.max(dim=-1)[0], None),
    ("argmin", lambda m, x: torch.argmin(x, dim=-1), None),
    ("softmax tail", lambda m, x: torch.relu(F.softmax(x, dim=-1) * 3.0), None),
    ("log_softmax", lambda m, x: torch.log_softmax(x, dim=1), None),
    ("logsumexp", lambda m, x: torch.logsumexp(x, dim=-1), None),
    ("frobenius", lambda m, x: torch.norm(x, p="fro"), None),
    ("layer_norm module", lambda m, x: m.ln(x), lambda m: setattr(m, "ln", nn.LayerNorm((6, 32)))),
    ("rms_norm module", lambda m, x: m.rms(x), lambda m: setattr(m, "rms", nn.RMSNorm(32, eps=1e-6))),
    ("layer_norm functional gelu", lambda m, x: F.gelu(F.layer_norm(x, (32,))), None),
    ("group_norm module relu", lambda m, x: torch.relu(m.gn(x)), lambda m: setattr(m, "gn", nn.GroupNorm(3, 6))),
    ("group_norm functional", lambda m, x: F.group_norm(x, 2, eps=1e-3), None),
    ("instance_norm1d affine", lambda m, x: m.inn(x), lambda m: setattr(m, "inn", nn.InstanceNorm1d(6, affine=True))),
    ("instance_norm functional", lambda m, x: F.instance_norm(x, eps=1e-3) * 2.0, None),
    ("max values", lambda m, x: torch.max(x, dim=1).values * 2.0, None),
    ("min indices", lambda m, x: torch.min(x, -1).indices, None),
    ("vector_norm", lambda m, x: torch.linalg.vector_norm(x, 2, dim=-1), None),
    ("vector_norm l1 two dims", lambda m, x: torch.linalg.vector_norm(x, ord=1, dim=(1, 2), keepdim=True), None),
    ("normalize", lambda m, x: F.normalize(x, p=2, dim=1), None),
    ("normalize l1 tail", lambda m, x: torch.relu(F.normalize(x, p=1.0, dim=-1, eps=1e-3)), None),
    # a tail over the op's value twice: GroupNorm then Swish, x * sigmoid(x)
    ("group_norm swish", lambda m, x: (lambda y: y * torch.sigmoid(y))(m.gn(x)),
     lambda m: setattr(m, "gn", nn.GroupNorm(3, 6))),
    ("softmax then its square plus itself", lambda m, x: (lambda y: y * y + y)(F.softmax(x, dim=-1)), None),
    ("cumsum", lambda m, x: torch.cumsum(x, dim=1), None),
    ("cumsum method tail", lambda m, x: torch.relu(x.cumsum(-1)) * 2.0, None),
    ("cumprod", lambda m, x: torch.cumprod(x, -1), None),
    ("reverse cumsum", lambda m, x: x.flip(1).cumsum(1).flip(1), None),
    ("reverse cumprod negative dim", lambda m, x: torch.flip(torch.cumprod(torch.flip(x, [-1]), dim=-1), [-1]), None),
    ("exclusive cumsum", lambda m, x: torch.cumsum(x, dim=-1) - x, None),
    ("reverse exclusive cumsum", lambda m, x: x.flip(2).cumsum(2).flip(2) - x, None),
]


@pytest.mark.parametrize("name,forward,init", MODELS, ids=[m[0] for m in MODELS])
def test_torch_reductions_and_norms_become_row_kernels_that_match_the_model(name, forward, init):
    torch.manual_seed(0)
    x = torch.randn(8, 6, 32)
    problem = problem_of(forward, [x], init)
    result = trace_problem(problem)
    program = result.program
    assert program is not None, result.diagnostics
    assert program.row_kernels and not program.torch_steps, program
    model = problem.Model()
    for p in model.parameters():  # affine weights away from 1 and 0, so a missed affine shows
        p.data.uniform_(0.5, 1.5)
    (got,) = interpreter.run(program, [x], runtime.bind_params(program, model))
    want = model(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert any(r.placement == "kernel" and r.where == program.row_kernels[0].name for r in result.coverage)


def _min_pair(m, x):
    values, indices = torch.min(x, 2)
    return torch.relu(values * 2.0), indices


def _max_pair(m, x):
    result = x.max(dim=1, keepdim=True)
    return result.values + 1.0, result.indices


@pytest.mark.parametrize("forward", [_min_pair, _max_pair], ids=["tuple unpacking", "values and indices"])
def test_max_and_min_with_indices_become_a_value_kernel_with_its_tail_and_an_index_kernel(forward):
    torch.manual_seed(0)
    x = torch.randn(8, 6, 32)
    problem = problem_of(forward, [x])
    program = trace_problem(problem).program
    assert program is not None and not program.torch_steps, program
    assert sorted(k.op.fn for k in program.row_kernels) in (["amin", "argmin"], ["amax", "argmax"])
    got = interpreter.run(program, [x], {})
    want = problem.Model()(x)
    torch.testing.assert_close(got[0], want[0], rtol=1e-6, atol=1e-6)
    assert got[1].dtype == torch.int64 and torch.equal(got[1], want[1])


def test_builtin_ops_traces_to_row_kernels_alone_with_knobs_from_the_estimate():
    from dsl_compiler.frontend.results import TraceOptions
    from evals.problems import load_suite
    from nodes.offline.policy import OfflineTier
    from sol_models.trace import coverage_of
    from sol_models.counting import count_problem

    suite = load_suite("builtin-ops")
    assert len(suite) >= 25
    tier = OfflineTier()
    for problem in suite:
        plan = tier.plan_for(problem, "h200", TraceOptions())
        program = plan.candidates[0].program
        assert program.row_kernels and not program.torch_steps and not program.kernels, problem.name
        assert all(k.config.vector is not None for k in program.row_kernels), problem.name
        coverage, _ = coverage_of(program, count_problem(problem).flops)
        assert coverage > 0, problem.name


def test_a_tail_value_read_outside_the_tail_stays_a_store_of_its_own():
    """The op's value is read by the tail and by a second output: the tail may not swallow it."""
    torch.manual_seed(0)
    x = torch.randn(8, 6, 32)

    class Model(nn.Module):
        def forward(self, x):
            y = F.softmax(x, dim=-1)
            return y * torch.sigmoid(y), y

    problem = types.SimpleNamespace(Model=Model, get_inputs=lambda: [x], get_init_inputs=lambda: [])
    program = trace_problem(problem).program
    assert program is not None
    got = interpreter.run(program, [x], runtime.bind_params(program, Model()))
    want = Model()(x)
    assert len(got) == 2
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    stores = [s.name for k in program.row_kernels for s in k.stores]
    assert program.outputs[1] in stores  # softmax's own value is stored, not fused away


@pytest.mark.parametrize("forward,reverse,exclusive", [
    (lambda m, x: x.flip(1).cumsum(1).flip(1), True, False),
    (lambda m, x: torch.cumsum(x, dim=-1) - x, False, True),
    (lambda m, x: x.flip(-1).cumsum(-1).flip(-1) - x, True, True),
], ids=["reverse", "exclusive", "both"])
def test_flip_and_sub_around_a_cumsum_become_one_scan_kernel(forward, reverse, exclusive):
    program = trace_problem(problem_of(forward, [torch.randn(8, 6, 32)])).program
    assert program is not None and not program.torch_steps, program
    (kernel,) = program.row_kernels
    assert (kernel.op.fn, kernel.op.reverse, kernel.op.exclusive) == ("cumsum", reverse, exclusive)


def test_a_flip_read_elsewhere_stays_a_step_before_its_scan():
    """The flipped input is also an output: the scan may not take it in, and both flips run as torch steps."""
    x = torch.randn(8, 6, 32)
    problem = problem_of(lambda m, x: (lambda f: (f.cumsum(1).flip(1), f))(x.flip(1)), [x])
    program = trace_problem(problem).program
    assert program is not None
    assert [s.fn for s in program.torch_steps] == ["flip", "flip"]
    assert not program.row_kernels[0].op.reverse
    for got, want in zip(interpreter.run(program, [x], {}), problem.Model()(x)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
