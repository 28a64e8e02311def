"""The op table (dsl_compiler.ops): every element-wise function has every column, and every part that reads the
table (the IR, the parser and printer, the emitters, the interpreter, the frontend's normaliser, the FLOP count,
the planner, the torch steps) knows every function, so a new row cannot be missed by one of them."""

from __future__ import annotations

import operator
import re
import string

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.passes.shape_prop import ShapeProp

from dsl_compiler import ir, ops, torch_steps
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.frontend.normalize import normalize
from dsl_compiler.interpreter import run
from dsl_compiler.ops import CPP_HELPERS, EPILOGUE_OPS, OPS
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program
from graph.planning import _FUSABLE
from sol_models.counting import _torch_step_flops, count_program

NAMES = [op.name for op in EPILOGUE_OPS]
BASE = """input x: f32[64, 32]
param w: f32[48, 32] = "fc.weight"
kernel fc = gemm(x, w^T) {
  math = tf32
  store y: f32 = acc
}
output y
"""


def _placeholders(template: str) -> list[int]:
    return sorted({int(field) for _, field, _, _ in string.Formatter().parse(template) if field})


def _expr(op: ops.EpilogueOp) -> ir.Node:
    """The function applied to the accumulator (and a constant, or its example parameters)."""
    if op.form == "unary":
        return ir.Unary(fn=op.name, arg=ir.Acc())
    if op.form == "binary":
        return ir.Binary(fn=op.name, lhs=ir.Acc(), rhs=ir.Const(value=0.5))
    return ir.ParamCall(fn=op.name, arg=ir.Acc(), params=tuple(p.example for p in op.params))


def _program(op: ops.EpilogueOp) -> ir.Program:
    program, diags = parse(BASE)
    assert not diags
    kernel = program.kernels[0]
    store = kernel.stores[0].model_copy(update={"expr": _expr(op)})
    return program.model_copy(update={"steps": (kernel.model_copy(update={"stores": (store,)}),)})


@pytest.mark.parametrize("name", NAMES)
def test_every_function_has_every_column(name):
    op = OPS[name]
    assert op.form in ("unary", "binary", "param") and name.isidentifier()
    arity = {"unary": 1, "binary": 2}.get(op.form, 1 + len(op.params))
    assert _placeholders(op.cpp) == list(range(arity)), "the C++ template takes the argument(s) and every parameter"
    assert op.flops > 0 and op.torch and op.traced and callable(op.interpret) and isinstance(op.fusable, bool)
    assert op.form != "param" or op.params, "a function with parameters names them"
    for helper in re.findall(r"\b(mu_\w+)\(", op.cpp):
        assert f"float {helper}(" in CPP_HELPERS, f"{helper} is called but not defined"


def test_the_ir_and_the_parser_take_the_table_in_its_order():
    assert ir.UnaryFn.__args__ + ir.BinaryFn.__args__ + ir.ParamFn.__args__ == tuple(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_program_with_the_function_prints_parses_emits_and_counts(name):
    op = OPS[name]
    program = _program(op)
    assert parse(format_program(program))[0] == program
    emitted, diags = emit_program(program)
    assert not diags
    assert op.cpp.split("(")[0] in emitted[0].source
    assert count_program(program).flops_other == op.flops * 64 * 48


@pytest.mark.parametrize("name", NAMES)
def test_the_interpreter_computes_what_the_pytorch_step_computes(name):
    op = OPS[name]
    x = torch.linspace(-4, 4, 97)
    args = [x, torch.full_like(x, 0.5)] if op.form == "binary" else [x]
    kwargs = {**{p.key: p.example for p in op.params}, **{a.key: v for a, v in op.options}}
    expected = torch_steps._table()[op.torch[0]](*args, **kwargs)
    got = op.interpret(*args, *(p.example for p in op.params))
    assert torch.allclose(got, expected, atol=1e-6, equal_nan=True)
    program = _program(op)
    (y,) = run(program, [torch.randn(64, 32)], {"w": torch.randn(48, 32)})
    assert y.shape == (64, 48)


@pytest.mark.parametrize("name", NAMES)
def test_the_pytorch_steps_of_a_function_are_whitelisted_counted_and_fusable(name):
    op = OPS[name]
    for fn in op.torch:
        assert torch_steps.is_allowed(fn)
        assert _torch_step_flops(fn, 10, 10) > 0, f"a {fn} step would count no FLOPs"
        assert (fn in _FUSABLE) == op.fusable


def _call(target_name: str, n_tensors: int, kwargs: dict):
    """A one-call fx graph of ``target_name`` on 1-D tensors, shapes propagated."""
    graph = torch.fx.Graph()
    xs = [graph.placeholder(f"x{i}") for i in range(n_tensors)]
    for source in (torch, F, operator):
        target = getattr(source, target_name, None)
        if callable(target):
            node = graph.call_function(target, tuple(xs), kwargs)
            break
    else:
        node = graph.call_method(target_name, tuple(xs), kwargs)
    graph.output(node)
    gm = torch.fx.GraphModule(nn.Module(), graph)
    ShapeProp(gm).propagate(*(torch.rand(8) for _ in xs))
    return gm, node


@pytest.mark.parametrize("name", NAMES)
def test_every_traced_name_and_module_normalises_to_the_function(name):
    op = OPS[name]
    kwargs = {**{p.key: p.example for p in op.params}, **{a.key: v for a, v in op.options}}
    for traced in op.traced:
        gm, node = _call(traced, 2 if op.form == "binary" else 1, kwargs)
        got = normalize(node, gm, {})
        assert (got.kind, got.fn) == ("ew", name), traced
        assert got.params == tuple(float(p.example) for p in op.params)
    for module_name in op.modules:
        module = getattr(nn, module_name)(**kwargs)
        gm = torch.fx.symbolic_trace(nn.Sequential(module))
        node = next(n for n in gm.graph.nodes if n.op == "call_module")
        got = normalize(node, gm, {})
        assert (got.kind, got.fn) == ("ew", name), module_name
        assert torch_steps.is_allowed(got.torch_fn)
