"""A runnable model is never refused: a module with no program form (an attention with add_zero_attn, an LSTM with projections)
becomes a `module` step, a forward torch.fx cannot follow becomes one step of the whole model (coverage 0), and each program runs
on the interpreter to the model's values."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

from dsl_compiler import interpreter, runtime
from dsl_compiler.frontend import trace_problem
from evals.judge.integrity import pytorch_only_program_check
from sol_models.trace import coverage_of


class LSTMHead(nn.Module):
    def __init__(self, proj_size=0):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, batch_first=True, proj_size=proj_size)
        self.fc = nn.Linear(proj_size or 32, 8)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return self.fc(out[:, -1]) + c[0].sum()


class AttentionHead(nn.Module):
    """An attention whose call the trace does not rewrite (add_zero_attn): a module step with its tuple result."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True, add_zero_attn=True)
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        y, _ = self.attn(x, x, x)
        return torch.relu(self.fc(y))


class BranchOnValues(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return -self.fc(x)


def problem(model_cls, *shape):
    return types.SimpleNamespace(__name__=model_cls.__name__, Model=model_cls,
                                 get_inputs=lambda: [torch.randn(*shape)], get_init_inputs=lambda: [])


def run_both(module):
    result = trace_problem(module)
    assert result.program is not None, result.diagnostics
    torch.manual_seed(0)
    model = module.Model()
    inputs = module.get_inputs()
    ours = interpreter.run(result.program, inputs, runtime.bind_params(result.program, model),
                           runtime.bind_modules(result.program, model))
    with torch.no_grad():
        theirs = model(*inputs)
    torch.testing.assert_close(ours[0], theirs, atol=1e-2, rtol=1e-2)  # the kernels compute in TF32
    return result


class ProjectedLSTMHead(LSTMHead):
    def __init__(self):
        super().__init__(proj_size=12)


@pytest.mark.parametrize("model_cls, shape, path, reason", [
    (AttentionHead, (2, 6, 32), "attn", "add_zero_attn are not rewritten"),
    (ProjectedLSTMHead, (4, 5, 16), "lstm", "proj_size > 0"),
])
def test_a_module_with_no_program_form_is_a_module_step_beside_kernels(model_cls, shape, path, reason):
    result = run_both(problem(model_cls, *shape))
    steps = [s for s in result.program.torch_steps if s.fn == "module"]
    assert [dict((k.key, k.value) for k in s.kwargs)["path"] for s in steps] == [path]
    assert len(steps[0].outputs) > 1  # every tensor of its tuple result (an LSTM's (y, (h, c)), attention's weights)
    assert result.program.kernels  # the Linear after it is still a kernel
    row = next(r for r in result.coverage if r.op == path)
    assert row.placement == "torch_step" and reason in row.reason


def test_an_lstm_is_unrolled_into_kernels_not_a_module_step():
    result = run_both(problem(LSTMHead, 4, 5, 16))
    assert not [s for s in result.program.torch_steps if s.fn == "module"]
    assert len(result.program.kernels) == 1 + 4 * 4 + 1  # the projection, 4 gates x 4 steps after the first, fc


def test_a_forward_with_a_branch_on_values_is_one_step_of_the_whole_model():
    result = run_both(problem(BranchOnValues, 8, 32))
    (step,) = result.program.steps
    assert step.fn == "module" and dict((k.key, k.value) for k in step.kwargs)["path"] == ""
    row = next(r for r in result.coverage if r.op == "model")
    assert row.placement == "torch_step" and "a branch or loop on a tensor's value" in row.reason
    assert coverage_of(result.program, 1e6)[0] == 0.0
    ok, why = pytorch_only_program_check(result.program)  # the judge flags it as PyTorch's work
    assert not ok and "no kernel" in why


def test_a_branch_taken_the_other_way_still_matches():
    # the whole model runs: whichever branch the values pick
    module = problem(BranchOnValues, 8, 32)
    module.get_inputs = lambda: [-torch.rand(8, 32) - 1]
    run_both(module)


def test_a_file_that_is_not_a_runnable_problem_is_still_refused():
    no_inputs = types.SimpleNamespace(__name__="no_inputs", Model=BranchOnValues)
    assert trace_problem(no_inputs).program is None

    class Raises(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    result = trace_problem(problem(Raises, 4, 4))
    assert result.program is None and any("boom" in d.message or "does not run" in d.message for d in result.diagnostics)
