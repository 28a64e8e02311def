"""The epilogue builder the three emitters share: a kernel's stores (lets inlined) written as C++ over the values
they read, with the ABI tensors and run-time constants that go with them.

It is parameterised by a kernel family's leaves (``Leaves``): the CUTLASS node that reads ``b[col]``, ``s[row]``,
``g[scalar]`` or a full-size tensor differs between the sm_90 GEMM and conv (``emit``) and the ptr-array grouped
GEMM (``grouped_gemm``); the CUTLASS 2.x kernels (``grouped_conv``) read no leaves and write the expression into
their own output operator. What each family accepts (how many stores, which reductions) its emitter checks on
``stores`` first, in its own words.
"""

from __future__ import annotations

from typing import Protocol

from dsl_compiler.cutlass.common import AbiTensor, CPP_ELEMENT, EmitError
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import Acc, Binary, Const, Kernel, ParamCall, Reduce, Ref, Span, Store, Unary
from dsl_compiler.ops import OPS
from dsl_compiler.walk import expr_nodes

FUSION = "cutlass::epilogue::fusion"


def inline_lets(expr, lets: dict):
    """Substitute let bindings so every store is one expression over leaves."""
    if isinstance(expr, Ref) and expr.index == "full" and expr.name in lets:
        return inline_lets(lets[expr.name], lets)
    if isinstance(expr, Unary):
        return Unary(fn=expr.fn, arg=inline_lets(expr.arg, lets))
    if isinstance(expr, Binary):
        return Binary(fn=expr.fn, lhs=inline_lets(expr.lhs, lets), rhs=inline_lets(expr.rhs, lets))
    if isinstance(expr, ParamCall):
        return ParamCall(fn=expr.fn, arg=inline_lets(expr.arg, lets), params=expr.params)
    if isinstance(expr, Reduce):
        return Reduce(fn=expr.fn, arg=inline_lets(expr.arg, lets))
    return expr


def evt_leaves(expr, out: list):
    """The EVT leaves an expression reads (the accumulator, tensor refs), added to ``out`` in first-use order."""
    for node in expr_nodes(expr):
        if isinstance(node, (Acc, Ref)):
            key = ("acc",) if isinstance(node, Acc) else ("ref", node.name, node.index)
            if key not in out:
                out.append(key)
    return out


class ExprWriter:
    """Writes one store expression as C++ over leaf variables v0..vn and runtime constants."""

    def __init__(self, leaves: list, scalars: list[float]):
        self.leaves = leaves
        self.scalars = scalars
        self.const_slots: list[int] = []

    def const(self, value: float) -> str:
        self.scalars.append(float(value))
        self.const_slots.append(len(self.scalars) - 1)
        return f"p.c[{len(self.const_slots) - 1}]"

    def write(self, expr) -> str:
        if isinstance(expr, Acc):
            return f"v{self.leaves.index(('acc',))}"
        if isinstance(expr, Ref):
            return f"v{self.leaves.index(('ref', expr.name, expr.index))}"
        if isinstance(expr, Const):
            return self.const(expr.value)
        if isinstance(expr, Unary):
            return OPS[expr.fn].cpp.format(self.write(expr.arg))
        if isinstance(expr, Binary):
            return OPS[expr.fn].cpp.format(self.write(expr.lhs), self.write(expr.rhs))
        if isinstance(expr, ParamCall):  # the parser and the frontend always give every parameter
            arg = self.write(expr.arg)
            return OPS[expr.fn].cpp.format(arg, *(self.const(v) for v in expr.params))
        if isinstance(expr, Reduce):
            return self.write(expr.arg)
        raise TypeError(f"unknown expression node {type(expr).__name__}")


def compute_functor(name: str, n_inputs: int, body: str | None, n_consts: int) -> str:
    """An ``Sm90Compute`` functor over fragments: element-wise ``body`` (or take the first input)."""
    params = ", ".join(f"T const& a{i}" for i in range(n_inputs))
    loads = " ".join(f"float v{i} = float(a{i}[i]);" for i in range(n_inputs))
    # Sm90Compute passes the Arguments of ComputeFn<float> to ComputeFn<Array<float, N>>: one type for all T.
    args_struct = f"struct {name}Args {{ float c[{n_consts}]; }};\n" if n_consts else ""
    args_decl = f"  using Arguments = {name}Args;\n" if n_consts else ""
    p_param = ", Arguments const& p" if n_consts else ""
    expr = body if body is not None else "v0"
    return (
        f"{args_struct}template <class T> struct {name} {{\n{args_decl}"
        f"  CUTLASS_HOST_DEVICE T operator()({params}{p_param}) const {{\n"
        f"    T r;\n    CUTLASS_PRAGMA_UNROLL\n"
        f"    for (int i = 0; i < T::kElements; ++i) {{ {loads} r[i] = {expr}; }}\n"
        f"    return r;\n  }}\n}};\n"
    )


class Leaves(Protocol):
    def node(self, epilogue: "EpilogueBuilder", name: str, index: str, dtype: str, span: Span | None) -> tuple[str, str]:
        """The (C++ type, argument initializer) of the EVT leaf reading tensor ``name`` as ``index``
        (full, col, row or scalar); may add ABI tensors (``epilogue.add_tensor``) or refuse the read."""
        ...


def ptr(i: int, dtype: str, const: bool = True) -> str:
    """Pointer ``i`` of the ABI as the element type's pointer."""
    c = "const " if const else ""
    return f"reinterpret_cast<{c}{CPP_ELEMENT[dtype]}*>(ptrs[{i}])"


class EpilogueBuilder:
    """One kernel's epilogue: ``stores`` with lets inlined, the ABI tensors after the first ``first_ptr`` pointers,
    the literal constants (run-time scalars) and the generated functors, in the order the C++ uses them."""

    def __init__(self, kernel: Kernel, dtypes: dict[str, str], first_ptr: int, leaves: Leaves | None = None):
        self.kernel = kernel
        self.dtypes = dtypes
        self.first_ptr = first_ptr
        self.leaves = leaves
        self.tensors: list[AbiTensor] = []
        self.scalars: list[float] = []
        self.functors: list[str] = []
        self._nodes: dict[tuple, tuple[str, str]] = {}
        lets = {let.name: let.expr for let in kernel.lets}
        self.stores = [Store(name=s.name, dtype=s.dtype, expr=inline_lets(s.expr, lets), span=s.span) for s in kernel.stores]

    def add_tensor(self, tensor: AbiTensor) -> int:
        """Adds an epilogue tensor to the ABI; returns its index in ``ptrs``."""
        self.tensors.append(tensor)
        return self.first_ptr + len(self.tensors) - 1

    def dtype_of(self, name: str, span: Span | None) -> str:
        """The element type of a tensor the epilogue reads; an undefined one is the program's error."""
        if name not in self.dtypes:
            raise EmitError(Diagnostic(code="undefined-name", message=f"kernel '{self.kernel.name}': epilogue reads '{name}', which is not defined",
                                       span=span, hint="declare it as an input or param, or store it in an earlier kernel"))
        return self.dtypes[name]

    def expression(self, expr) -> tuple[list, str, list[int]]:
        """(the leaves it reads, in first-use order; its C++ over v0..vn; the slots of its constants in ``scalars``)."""
        keys = evt_leaves(expr, [])
        writer = ExprWriter(keys, self.scalars)
        return keys, writer.write(expr), writer.const_slots

    def leaf(self, key: tuple, span: Span | None) -> tuple[str, str]:
        """The EVT node of a leaf, made once per kernel."""
        if key not in self._nodes:
            if key == ("acc",):
                self._nodes[key] = (f"{FUSION}::Sm90AccFetch", "{}")
            else:
                _, name, index = key
                self._nodes[key] = self.leaves.node(self, name, index, self.dtype_of(name, span), span)
        return self._nodes[key]

    def compute(self, expr, out_element: str, functor: str, span: Span | None) -> tuple[str, str]:
        """An ``Sm90Compute`` node computing ``expr`` over its leaves: its (C++ type, argument initializer); the
        generated functor joins ``functors``."""
        keys = evt_leaves(expr, [])
        nodes = [self.leaf(k, span) for k in keys]
        _, body, const_slots = self.expression(expr)
        self.functors.append(compute_functor(functor, len(keys), body, len(const_slots)))
        cargs = "{}" if not const_slots else "{{" + ", ".join(f"S({s})" for s in const_slots) + "}}"
        compute = f"{FUSION}::Sm90Compute<{functor}, {out_element}, float, RN>"
        return (f"{FUSION}::Sm90EVT<{compute}, " + ", ".join(n[0] for n in nodes) + ">",
                "{" + ", ".join(n[1] for n in nodes) + ", " + cargs + "}")

    # leaves every sm_90 family reads alike
    def source(self, name: str, dtype: str) -> tuple[int, tuple[str, str]]:
        """The first full-size tensor, read as CUTLASS's C: its pointer index and node."""
        return self.add_tensor(AbiTensor(name, "src", dtype)), (f"{FUSION}::Sm90SrcFetch<{CPP_ELEMENT[dtype]}>", "{}")

    def channel_vector(self, name: str, dtype: str) -> tuple[str, str]:
        """A vector of one value per output column shared by every batch or group (batch stride 0)."""
        i, el = self.add_tensor(AbiTensor(name, "col", dtype)), CPP_ELEMENT[dtype]
        return (f"{FUSION}::Sm90RowBroadcast<0, TileShape, {el}, float, cute::Stride<cute::_0, cute::_1, cute::_0>, 1>",
                f"{{{ptr(i, dtype)}, {el}(0), {{}}}}")

    def scalar(self, name: str, dtype: str) -> tuple[str, str]:
        """A one-element tensor broadcast everywhere."""
        i, el = self.add_tensor(AbiTensor(name, "scalar", dtype)), CPP_ELEMENT[dtype]
        return f"{FUSION}::Sm90ScalarBroadcast<{el}>", f"{{{{{el}(0)}}, {{{ptr(i, dtype)}}}, {{}}}}"
