"""The lowering's passes (dsl_compiler.frontend.passes), each on a small traced model: what it decides on the
OpGraph, and that the program lowered from it passes the static checks (dsl_compiler.checks.check)."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn as nn

from dsl_compiler.checks import check
from dsl_compiler.frontend.graph import LoweringSettings, OpGraph
from dsl_compiler.frontend.lower import lower, plan_kernels
from dsl_compiler.frontend.passes.emission import ProgramBuilder
from dsl_compiler.frontend.passes.folding import second_pass_pays
from dsl_compiler.frontend.passes.grouping import group_kernels
from dsl_compiler.frontend.passes.kernels import emit_group
from dsl_compiler.frontend.passes.naming import Namer, safe_base
from dsl_compiler.frontend.passes.padding import conv_padding, epilogue_padding, gemm_padding, pad_spec
from dsl_compiler.frontend.passes.precision import fold_store_casts, half_math, kernel_math
from dsl_compiler.frontend.reference import build_and_trace, load_reference
from dsl_compiler.frontend.results import TraceOptions
from dsl_compiler.ir import ConvOp, GemmOp, Reduce, TorchStep
from dsl_compiler.parser import parse

ALL = ("f32", "tf32", "bf16", "f16")


def reference(model_cls, *inputs, name="m", allowed=ALL):
    module = types.SimpleNamespace(Model=model_cls, get_inputs=lambda: list(inputs), get_init_inputs=lambda: [],
                                   __name__=name)
    ref = load_reference(module)
    ref.allowed_precisions = allowed
    return ref


def grouped(ref, options=TraceOptions()):
    """The OpGraph after normalising and grouping, and the settings the passes ran with."""
    graph = OpGraph(build_and_trace(ref))
    settings = LoweringSettings(options, ref.allowed_precisions,
                                options.math if options.math in ref.allowed_precisions else None, {})
    graph.normalise()
    group_kernels(graph, settings)
    return graph, settings


def lowered(ref, options=TraceOptions()):
    result = lower(build_and_trace(ref), options, ref)
    assert result.program is not None, result.diagnostics
    errors = [d for d in check(result.program) if d.severity == "error"]
    assert errors == [], errors
    return result.program


def node(graph, name):
    return next(n for n in graph.nodes if n.name == name)


class LinearReluSum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)
        self.other = nn.Linear(64, 128)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        return y.sum(dim=1) * 0.5, y + self.other(x)


# ---------------------------------------------------------------------------------------------
# grouping


def test_grouping_fuses_the_chain_after_a_kernel_and_leaves_a_combination_of_two_kernels():
    graph, _ = grouped(reference(LinearReluSum, torch.randn(32, 64)))
    fc, other = graph.groups
    assert [m.name for m in fc.members] == ["relu", "sum_1"] and [m.name for m in fc.reduces] == ["sum_1"]
    assert graph.ops[node(graph, "mul")].kind == "alias" and node(graph, "mul") in graph.aliases_to_reduce
    add = graph.ops[node(graph, "add")]
    assert add.kind == "torch" and add.reason == "it combines the outputs of two kernels"
    assert other.members == [] and graph.ops[fc.anchor].b_t  # nn.Linear's weight is read w^T


def test_grouping_folds_a_transpose_into_the_operand_read():
    class M(nn.Module):
        def forward(self, a, b):
            return torch.relu(a @ b.t())

    graph, _ = grouped(reference(M, torch.randn(32, 64), torch.randn(48, 64)))
    (g,) = graph.groups
    op = graph.ops[g.anchor]
    assert op.b_t and not op.a_t and op.operands[1].name == "b"
    program = lowered(reference(M, torch.randn(32, 64), torch.randn(48, 64)))
    (k,) = program.kernels
    assert isinstance(k.op, GemmOp) and k.op.b.transpose and not program.torch_steps


def test_a_demoted_kernel_is_a_pytorch_step_with_the_reason():
    ref = reference(LinearReluSum, torch.randn(32, 64))
    graph, _ = grouped(ref, TraceOptions(demote=("fc",)))
    assert [g.kernel_name for g in graph.groups] == ["other"]
    assert graph.ops[node(graph, "fc")].reason == "demoted to PyTorch after a failed check or build"
    program = lowered(ref, TraceOptions(demote=("fc",)))
    assert [s.fn for s in program.torch_steps][:1] == ["linear"]


# ---------------------------------------------------------------------------------------------
# folding


class ConvBn(nn.Module):
    def __init__(self, train=False):
        super().__init__()
        self.conv = nn.Conv2d(16, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.train(train)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def test_folding_takes_a_batchnorm_with_running_statistics_into_the_conv():
    ref = reference(ConvBn, torch.randn(2, 16, 16, 16))
    graph, _ = grouped(ref)
    (g,) = graph.groups
    assert g.batch_norm is node(graph, "bn") and graph.ops[g.batch_norm].kind == "alias"
    assert [m.name for m in g.members] == ["relu"]  # the activation after the BatchNorm is the conv's epilogue
    program = lowered(ref)
    assert [s.fn for s in program.torch_steps if s.fn != "channels_last"] == ["fold_batch_norm"]


def test_folding_batch_statistics_adds_a_statistics_pass_where_asked():
    ref = reference(lambda: ConvBn(train=True), torch.randn(2, 16, 16, 16))
    program = lowered(ref, TraceOptions(batch_norm="fold"))
    assert [k.name for k in program.kernels] == ["t_conv_stats", "t_conv"]  # conv is a reserved word
    assert [s.fn for s in program.torch_steps if s.fn != "channels_last"] == ["var_mean", "fold_batch_norm"]
    graph, settings = grouped(ref, TraceOptions(batch_norm="step"))
    assert graph.groups[0].batch_norm is None and graph.ops[node(graph, "bn")].kind == "torch"


def test_a_second_pass_pays_for_a_memory_bound_kernel_only():
    wide = reference(lambda: ConvBn(train=True), torch.randn(8, 16, 64, 64))
    graph, settings = grouped(wide, TraceOptions(batch_norm="fold"))
    assert not second_pass_pays(graph, settings, node(graph, "conv"), node(graph, "bn"))  # 3x3x16 MACs a byte

    class Pointwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(16, 16, 1), nn.BatchNorm2d(16)

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)))

    thin = reference(Pointwise, torch.randn(64, 16, 128, 128))
    graph, settings = grouped(thin, TraceOptions(batch_norm="fold"))
    assert second_pass_pays(graph, settings, node(graph, "conv"), node(graph, "bn"))


# ---------------------------------------------------------------------------------------------
# padding


class Ragged(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(100, 90)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_padding_grows_k_and_n_to_16_bytes_and_cuts_the_output_back():
    ref = reference(Ragged, torch.randn(32, 100))
    graph, settings = grouped(ref)
    (g,) = graph.groups
    assert gemm_padding(graph, settings, graph.ops[g.anchor]) == (0, 2, 0)  # K = 100 f32 is 16-byte aligned; N = 90 is not
    program = lowered(ref)
    (k,) = program.kernels
    w = program.decl(k.op.b.name)
    assert w.shape == (92, 100) and w.source == "fc.weight"  # zero-padded once, when bound
    assert [s.fn for s in program.torch_steps] == ["pad"]  # the real 90 columns
    assert pad_spec((0, -2)) == (0, -2) and pad_spec((4, 0)) == (0, 0, 0, 4) and pad_spec((0, 0, 3)) == (0, 3)


def test_padding_of_conv_channels_and_epilogue_vectors():
    class ThreeChannels(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 30, 3, padding=1)

        def forward(self, x):
            return self.conv(x)

    ref = reference(ThreeChannels, torch.randn(2, 3, 16, 16))
    graph, settings = grouped(ref)
    (g,) = graph.groups
    assert conv_padding(graph, settings, graph.ops[g.anchor]) == (1, 2)
    assert epilogue_padding(graph, g, graph.ops[g.anchor].bias, "col", 0, 2) == (2,)
    assert conv_padding(graph, settings.__class__(TraceOptions(pad=False), ALL, None, {}), graph.ops[g.anchor]) == (0, 0)
    lowered(ref)


# ---------------------------------------------------------------------------------------------
# precision


def test_precision_picks_16_bit_math_where_allowed_except_for_a_depthwise_conv():
    class Depthwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)
            self.pw = nn.Conv2d(32, 64, 3, padding=1)

        def forward(self, x):
            return self.pw(self.dw(x))

    ref = reference(Depthwise, torch.randn(2, 32, 16, 16))
    graph, settings = grouped(ref, TraceOptions(math="f16"))
    dw, pw = (graph.ops[g.anchor] for g in graph.groups)
    assert half_math(graph, settings, dw) is None and half_math(graph, settings, pw) == "f16"
    assert kernel_math(graph, settings, dw, "f32") == "f32" and kernel_math(graph, settings, pw, "f32") == "f16"
    strict, _ = grouped(reference(Depthwise, torch.randn(2, 32, 16, 16), allowed=("f32",)), TraceOptions(math="f16"))
    assert all(g.plan is None for g in strict.groups)
    program = lowered(ref, TraceOptions(math="f16"))
    assert [k.config.math for k in program.kernels] == ["f32", "f16"]


def test_a_store_read_only_by_a_cast_is_stored_in_the_cast_type():
    program, _ = parse("""input x: f16[64, 64]
param w: f16[64, 64] = "w"
kernel k = gemm(x, w^T) { store h: f32 = relu(acc) }
torch h16 = to(h, dtype="f16")
kernel k2 = gemm(h16, w^T) { store y: f32 = acc }
output y
""")
    steps = fold_store_casts(list(program.steps), list(program.outputs))
    assert [type(s).__name__ for s in steps] == ["Kernel", "Kernel"]
    assert steps[0].stores[0].name == "h16" and steps[0].stores[0].dtype == "f16"
    assert fold_store_casts(list(program.steps), ["h"]) == list(program.steps)  # an output keeps its type


def test_plans_name_kmajor_kernels_and_their_padding():
    ref = reference(Ragged, torch.randn(32, 100))
    graph, settings = grouped(ref, TraceOptions(kmajor=("fc",)))
    for g in graph.groups:
        g.kernel_name = "fc"
    plan_kernels(graph, settings)
    (g,) = graph.groups
    assert g.plan.math.kmajor and g.plan.math.math == "tf32" and g.plan.padding.d_n == 2


# ---------------------------------------------------------------------------------------------
# naming, emission, kernels


def test_names_are_legal_unreserved_and_unique():
    namer = Namer()
    assert [namer("y"), namer("y"), namer("acc"), namer("1x"), namer("a.b")] == ["y", "y_2", "t_acc", "t_1x", "a_b"]
    assert safe_base("") == "t"


def test_emission_declares_a_param_once_per_form_and_copies_once_per_tensor():
    ref = reference(Ragged, torch.randn(32, 100))
    graph, settings = grouped(ref)
    b = ProgramBuilder(graph, settings, emit_kernel=emit_group)
    w = graph.ops[graph.groups[0].anchor].operands[1]
    assert b.value(w) == b.value(w) == "fc_weight" and len(b.decls) == 1
    assert b.value(w, dtype="f16") == "fc_weight_f16" and len(b.decls) == 2
    b.declare_input(node(graph, "x"))
    assert b.cast("x", "bf16") == b.cast("x", "bf16") == "x_bf16"
    assert b.pad_step("x", (0, 4)) == b.pad_step("x", (0, 4)) == "x_pad"
    assert b.as_channels_last("x") == b.as_channels_last("x") == "x_cl"
    assert [s.fn for s in b.steps] == ["to", "pad", "channels_last"]


def test_a_pytorch_op_is_a_named_step_with_its_reason():
    class Flip(nn.Module):  # a flip has no kernel of the language: it stays a PyTorch step
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64)

        def forward(self, x):
            return torch.flip(self.fc(x), dims=(1,))

    ref = reference(Flip, torch.randn(16, 64))
    result = lower(build_and_trace(ref), TraceOptions(), ref)
    (step,) = result.program.torch_steps
    assert step.fn == "flip" and [k.key for k in step.kwargs] == ["dims"]
    row = next(r for r in result.coverage if r.placement == "torch_step")
    assert row.where == step.outputs[0] and row.reason


@pytest.mark.parametrize("channels_last_input", [False, True])
def test_a_1x1_conv_runs_as_a_gemm_over_its_activation_as_stored(channels_last_input):
    class Pointwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Conv2d(16, 32, 3, padding=1)
            self.conv = nn.Conv2d(32, 64, 1)

        def forward(self, x):
            return torch.relu(self.conv(self.first(x) if channels_last_input else x))

    c = 16 if channels_last_input else 32
    program = lowered(reference(Pointwise, torch.randn(2, c, 16, 16)))
    gemm = next(k for k in program.kernels if isinstance(k.op, GemmOp))
    assert gemm.op.b.transpose and program.decl(gemm.op.b.name).shape == (64, 32)
    assert gemm.op.a.transpose != channels_last_input  # NCHW: a batched GEMM reading [N, C, H*W] M-major
    assert any(isinstance(k.op, ConvOp) for k in program.kernels) == channels_last_input


def test_reductions_alone_keep_a_full_output_beside_them():
    class RowMax(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 128)

        def forward(self, x):
            return self.fc(x).amax(dim=1, keepdim=True)

    program = lowered(reference(RowMax, torch.randn(32, 64)))
    (k,) = program.kernels
    assert [let.name for let in k.lets] == ["fc_v"]  # acc + bias, read by both stores
    assert [s.name for s in k.stores] == ["fc_tile", "amax"] and isinstance(k.stores[1].expr, Reduce)
    assert k.stores[1].expr.fn == "row_max" and k.stores[1].expr.arg == k.stores[0].expr
    assert [s.fn for s in program.torch_steps] == ["unsqueeze"] and isinstance(program.steps[-1], TorchStep)
