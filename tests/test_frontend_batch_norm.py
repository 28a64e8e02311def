"""BatchNorm after a GEMM or conv kernel: folded into the kernel's weights and bias (running statistics in eval
mode; batch statistics from a first pass and a var_mean step in training mode), or left to a PyTorch step where
a second pass would cost more. Each program is checked for the CUTLASS backend and run on the interpreter."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

from dsl_compiler import interpreter, runtime, torch_steps
from dsl_compiler.checks import check
from dsl_compiler.frontend import TraceOptions, trace_problem
from dsl_compiler.ir import TorchStep
from evals.problems import load_suite
from sol_models.counting import program_traffic
from sol_models.trace import coverage_of, statistics_passes, trace_report


def problem_of(model_cls, inputs, eval_mode=False):
    module = types.ModuleType("bn_case")

    class Model(model_cls):
        def __init__(self):
            super().__init__()
            for m in self.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):  # statistics unlike a fresh module's 0 and 1
                    m.running_mean.uniform_(-0.5, 0.5)
                    m.running_var.uniform_(0.5, 2.0)
            if eval_mode:
                self.eval()

    module.Model = Model
    module.get_inputs = lambda: [t.clone() for t in inputs]
    module.get_init_inputs = lambda: []
    return module


def run_both(module, options=None):
    result = trace_problem(module, options or TraceOptions())
    assert result.program is not None, result.diagnostics
    assert [d for d in check(result.program, backend="cutlass") if d.severity == "error"] == []
    torch.manual_seed(0)
    model = module.Model()
    inputs = module.get_inputs()
    with torch.no_grad():
        ref = model(*inputs)
    (out,) = interpreter.run(result.program, inputs, runtime.bind_params(result.program, model))
    assert torch.allclose(out, ref, atol=1e-2, rtol=1e-2), (out - ref).abs().max()
    return result


class ConvBnRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def steps(program, fn):
    return [s for s in program.steps if isinstance(s, TorchStep) and s.fn == fn]


def test_eval_mode_folds_the_running_statistics_into_one_kernel():
    result = run_both(problem_of(ConvBnRelu, [torch.randn(2, 16, 12, 12)], eval_mode=True))
    program = result.program
    assert len(program.kernels) == 1 and not steps(program, "var_mean") and not steps(program, "batch_norm")
    (fold,) = steps(program, "fold_batch_norm")
    assert program.kernels[0].op.w.name == fold.outputs[0]  # the kernel reads the folded filter
    (row,) = [r for r in result.coverage if r.target == "nn.BatchNorm2d"]
    assert row.placement == "folded" and row.where == program.kernels[0].name


def test_training_mode_measures_the_batch_in_a_first_pass_and_folds_it_into_a_second():
    result = run_both(problem_of(ConvBnRelu, [torch.randn(2, 16, 12, 12)]), TraceOptions(batch_norm="fold"))
    program = result.program
    first, second = program.kernels
    (var_mean,) = steps(program, "var_mean")
    assert var_mean.args[0].name == first.stores[0].name
    assert second.op.w.name == steps(program, "fold_batch_norm")[0].outputs[0]
    assert statistics_passes(program) == {first.name}
    # the ReLU after the norm is the second pass's epilogue
    assert "relu" in str(second.stores[0].expr) and not steps(program, "relu")


def test_training_mode_left_to_pytorch_where_a_second_pass_costs_more():
    """Small tensors: the statistics steps' launches cost more than the passes they save."""
    result = run_both(problem_of(ConvBnRelu, [torch.randn(2, 16, 12, 12)]))
    program = result.program
    assert len(program.kernels) == 1 and steps(program, "batch_norm") and not steps(program, "fold_batch_norm")
    (row,) = [r for r in result.coverage if r.target == "nn.BatchNorm2d"]
    assert row.placement == "torch_step" and "second pass" in row.reason


def test_step_option_leaves_every_batch_norm_to_pytorch():
    result = run_both(problem_of(ConvBnRelu, [torch.randn(2, 16, 12, 12)], eval_mode=True), TraceOptions(batch_norm="step"))
    (bn,) = steps(result.program, "batch_norm")
    assert len(bn.args) == 5  # the running statistics are passed: eval-mode semantics


class LinearBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)
        self.bn = nn.BatchNorm1d(32)

    def forward(self, x):
        return torch.sigmoid(self.bn(self.fc(x)))


@pytest.mark.parametrize("eval_mode", [False, True])
def test_linear_then_batch_norm_1d_folds_into_the_gemm(eval_mode):
    result = run_both(problem_of(LinearBn, [torch.randn(16, 64)], eval_mode), TraceOptions(batch_norm="fold"))
    program = result.program
    assert len(program.kernels) == (1 if eval_mode else 2)
    last = program.kernels[-1]
    assert last.op.b.transpose and last.op.b.name == steps(program, "fold_batch_norm")[0].outputs[0]


class MatmulBn(nn.Module):
    """B stored [K, N] (not a Linear weight): the fold scales B's columns."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 32) * 0.1)
        self.bn = nn.BatchNorm1d(32)

    def forward(self, x):
        return self.bn(x @ self.w)


def test_a_k_by_n_weight_is_folded_along_its_columns():
    result = run_both(problem_of(MatmulBn, [torch.randn(16, 64)], eval_mode=True))
    (fold,) = steps(result.program, "fold_batch_norm")
    assert {k.key: k.value for k in fold.kwargs}["dim"] == 1


class ComputedWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 64) * 0.1)
        self.bn = nn.BatchNorm1d(32)

    def forward(self, x):
        return self.bn(x @ (self.w * 2).t())


def test_a_computed_weight_is_not_folded():
    result = run_both(problem_of(ComputedWeight, [torch.randn(16, 64)], eval_mode=True))
    (row,) = [r for r in result.coverage if r.target == "nn.BatchNorm1d"]
    assert row.placement == "torch_step" and "computed" in row.reason


def test_fold_step_matches_batch_norm_of_the_op():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8, 6, 6), torch.randn(16, 8, 3, 3), torch.randn(16)
    gamma, beta = torch.rand(16) + 0.5, torch.randn(16)
    y = nn.functional.conv2d(x, w, b)
    var, mean = torch.var_mean(y, dim=(0, 2, 3), correction=0)
    w_cl = w.contiguous(memory_format=torch.channels_last)
    w2, b2 = torch_steps._fn("fold_batch_norm")(w_cl, mean, var, gamma, beta, b, eps=1e-5, dim=0)
    assert w2.is_contiguous(memory_format=torch.channels_last)
    expected = nn.functional.batch_norm(y, None, None, gamma, beta, training=True, eps=1e-5)
    assert torch.allclose(nn.functional.conv2d(x, w2, b2), expected, atol=1e-4)


def test_suite_models_fold_their_expansions_and_count_the_fold_once():
    """At the files' sizes MobileNetV2's expand and depthwise norms fold (memory-bound kernels whose input is no
    larger than their output); the projection's norm (input 6x its output) stays a step, with its reason."""
    problem = next(p for p in load_suite("models") if p.name == "11_mobilenetv2_inverted_residual")
    result = trace_problem(problem)
    program = result.program
    assert len(steps(program, "fold_batch_norm")) == 2 and len(steps(program, "batch_norm")) == 1
    assert len(statistics_passes(program)) == 2
    rows = {r.op: r for r in result.coverage if r.target == "nn.BatchNorm2d"}
    assert [r.placement for r in rows.values()] == ["folded", "folded", "torch_step"]
    # the statistics passes are not the problem's work: counting them would push coverage past the truth
    report = trace_report(problem)
    work = report.flops_problem
    cov, flops = coverage_of(program, work)
    assert cov == pytest.approx(report.coverage) and 0.9 < cov < 1.0
    every_kernel = sum(s.flops_tensor + s.flops_other for s in program_traffic(program)[0] if s.kind == "kernel")
    assert every_kernel > work  # with the first passes the kernels compute more than the problem


def test_step_types_are_inferred_once_per_argument_types(monkeypatch):
    """A configuration search checks one program hundreds of times: batch_norm's meta run is remembered by its
    argument types and literals, and a change of either is inferred afresh."""
    from dsl_compiler.ir import Kwarg, TensorArg
    from dsl_compiler.tensor_types import TensorType

    calls = []
    real = torch_steps._call
    monkeypatch.setattr(torch_steps, "_INFERRED", {})
    monkeypatch.setattr(torch_steps, "_call", lambda step, lookup: calls.append(step.fn) or real(step, lookup))
    step = TorchStep(outputs=("y",), fn="batch_norm", args=(TensorArg(name="x"),), kwargs=(Kwarg(key="eps", value=1e-3),))
    f32 = {"x": TensorType(dtype="f32", shape=(2, 8, 4, 4), layout="channels_last")}
    f16 = {"x": TensorType(dtype="f16", shape=(2, 8, 4, 4), layout="channels_last")}
    first = torch_steps.infer(step, f32)
    assert torch_steps.infer(step, f32) == first and first[0].layout == "channels_last"
    assert torch_steps.infer(step, f16)[0].dtype == "f16"
    other_eps = step.model_copy(update={"kwargs": (Kwarg(key="eps", value=1e-5),)})
    torch_steps.infer(other_eps, f32)
    assert torch_steps.infer(other_eps, f32) == first
    assert calls == ["batch_norm"] * 3  # f32 once, f16 once, the other eps once


class FunctionalBn(nn.Module):
    """F.batch_norm with the module's own tensors: the same op as nn.BatchNorm2d."""

    def __init__(self, training):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 1, bias=False)
        self.gamma, self.beta = nn.Parameter(torch.rand(32) + 0.5), nn.Parameter(torch.randn(32))
        self.register_buffer("mean", torch.randn(32) * 0.1)
        self.register_buffer("var", torch.rand(32) + 0.5)
        self.use_batch = training

    def forward(self, x):
        y = nn.functional.batch_norm(self.conv(x), self.mean, self.var, self.gamma, self.beta,
                                     training=self.use_batch, eps=1e-3)
        return torch.relu(y)


@pytest.mark.parametrize("training", [False, True])
def test_functional_batch_norm_is_the_same_op(training):
    cls = type("Case", (FunctionalBn,), {"__init__": lambda self: FunctionalBn.__init__(self, training)})
    result = run_both(problem_of(cls, [torch.randn(2, 16, 8, 8)]), TraceOptions(batch_norm="fold"))
    (fold,) = steps(result.program, "fold_batch_norm")
    assert {k.key: k.value for k in fold.kwargs}["eps"] == 1e-3
    assert len(steps(result.program, "var_mean")) == (1 if training else 0)
    step = run_both(problem_of(cls, [torch.randn(2, 16, 8, 8)]), TraceOptions(batch_norm="step")).program
    (bn,) = steps(step, "batch_norm")
    assert len(bn.args) == (3 if training else 5)


class SixChannels(nn.Module):
    """6 output channels: 24-byte rows, padded to 8 channels by the kernel."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 6, 3, padding=1)
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("eval_mode", [False, True])
def test_a_kernel_that_pads_its_output_channels_leaves_the_norm_to_a_step(eval_mode):
    result = run_both(problem_of(SixChannels, [torch.randn(2, 16, 8, 8)], eval_mode), TraceOptions(batch_norm="fold"))
    (row,) = [r for r in result.coverage if r.target == "nn.BatchNorm2d"]
    assert row.placement == "torch_step" and "pads" in row.reason
