"""What the lowering passes work on: the traced model's nodes with their normalised ops (which the passes rewrite:
an op folded into another becomes an alias, one left to PyTorch a torch op), the kernel groups the grouping pass
forms over them, the queries every pass asks (a value through its aliases, its shape and element type, its
users), and the coverage row each node gets."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dsl_compiler.frontend.normalize import DTYPES, Op, normalize
from dsl_compiler.frontend.reference import ParamRef, Traced
from dsl_compiler.frontend.results import CoverageRow, TraceOptions


@dataclass
class KernelGroup:
    """A kernel and the epilogue nodes fused into it."""

    anchor: Any  # the gemm / conv node
    members: list[Any] = field(default_factory=list)  # fused ew / reduce nodes, in order
    reduces: set[Any] = field(default_factory=set)
    kernel_name: str = ""
    batch_norm: Any = None  # the BatchNorm node folded into the kernel's weights and bias
    plan: Any = None  # the kernel's math and padding (passes.precision / passes.padding), once planned


@dataclass(frozen=True)
class LoweringSettings:
    """What every pass is told: the trace options, the problem's allowed precisions, the 16-bit math over fp32 data
    (``options.math`` where the problem allows it, else None) and, by kernel name, why an earlier lowering's
    kernel lost its epilogue or went to PyTorch."""

    options: TraceOptions
    allowed_precisions: tuple[str, ...]
    half_math: str | None
    why: dict[str, str]


class OpGraph:
    """The traced nodes in order, each with its op (``normalise``), and what the grouping pass made of them."""

    def __init__(self, traced: Traced):
        self.traced = traced
        self.nodes = list(traced.gm.graph.nodes)
        self.ops: dict[Any, Op] = {}
        self.coverage: dict[Any, CoverageRow] = {}
        # the grouping pass's result
        self.groups: list[KernelGroup] = []
        self.member_of: dict[Any, KernelGroup] = {}
        self.aliases_to_reduce: dict[Any, Any] = {}  # a scalar op folded into a fused reduction -> that reduction

    def normalise(self) -> None:
        for n in self.nodes:
            self.ops[n] = normalize(n, self.traced.gm, self.traced.state)

    def resolve(self, x):
        """Follow aliases (clone, detach, contiguous, identity) to the node that holds the value."""
        import torch.fx

        while isinstance(x, torch.fx.Node) and self.ops.get(x) is not None and self.ops[x].kind == "alias":
            x = self.ops[x].operands[0]
        return x

    @staticmethod
    def meta(x):
        import torch.fx

        if isinstance(x, torch.fx.Node):
            tm = x.meta.get("tensor_meta")
            return tm if hasattr(tm, "shape") else None
        return None

    def tensor_meta(self, x) -> tuple[Any, Any] | None:
        """(shape, torch dtype) of a value: a model tensor, or a traced node through aliases and params."""
        import torch

        if isinstance(x, ParamRef):
            t = self.traced.state.get(x.key)
            return (t.shape, t.dtype) if isinstance(t, torch.Tensor) else None
        x = self.resolve(x)
        if self.ops.get(x) is not None and self.ops[x].kind == "param":
            return self.tensor_meta(self.ops[x].operands[0])
        tm = self.meta(x)
        return (tm.shape, tm.dtype) if tm is not None else None

    def shape_of(self, x) -> tuple[int, ...] | None:
        found = self.tensor_meta(x)
        return tuple(int(s) for s in found[0]) if found is not None else None

    def dtype_of(self, x) -> str | None:
        found = self.tensor_meta(x)
        return DTYPES.get(str(found[1])) if found is not None else None

    def users(self, node) -> list[Any]:
        """Users of a value, looking through aliases (a walk, not recursion: alias chains may be long)."""
        out = []
        stack = list(reversed(list(node.users)))
        while stack:
            u = stack.pop()
            if self.ops[u].kind == "alias":
                stack.extend(reversed(list(u.users)))
            else:
                out.append(u)
        return out

    def is_param(self, x) -> bool:
        """Whether value x is a model tensor (a param of the program, not a computed tensor)."""
        import torch.fx

        r = self.resolve(x) if isinstance(x, torch.fx.Node) else x
        return isinstance(r, ParamRef) or (self.ops.get(r) is not None and self.ops[r].kind == "param")

    def is_depthwise(self, op: Op) -> bool:
        """groups == C: one filter per input channel (the CUTLASS backend's direct SIMT kernel)."""
        shape = self.shape_of(op.operands[0])
        return shape is not None and len(shape) > 1 and int(op.conv.get("groups", 1)) == shape[1] > 1

    def cover(self, node, placement, where="", reason=""):
        op = self.ops[node]
        self.coverage[node] = CoverageRow(op=node.name, target=op.target, placement=placement, where=where, reason=reason)

    def group_of(self, x) -> KernelGroup | None:
        return self.member_of.get(self.resolve(x))

    def bias_index(self, group: KernelGroup, x) -> str | None:
        """How tensor x broadcasts against the group's kernel output: full / col / row / scalar."""
        out = self.shape_of(group.anchor)
        s = self.shape_of(x)
        if s is None or out is None:
            return None
        numel = math.prod(s) if s else 1
        if numel == 1:
            return "scalar"
        if s == out:
            return "full"
        kind = self.ops[group.anchor].kind
        squeezed = tuple(s)
        while squeezed and squeezed[0] == 1:
            squeezed = squeezed[1:]
        if kind == "gemm":
            if len(squeezed) == 1 and squeezed[0] == out[-1] and len(s) <= len(out):
                return "col"
            if len(out) == 2 and squeezed == (out[0], 1):
                return "row"
        if kind == "conv":
            channels = out[1]
            spatial = len(out) - 2
            if squeezed == (channels,) + (1,) * spatial and len(s) <= len(out):
                return "col"
        return None

    def depends_on(self, x, group: KernelGroup, memo=None) -> bool:
        """Whether x (transitively) reads a value of the group. A walk over the inputs with a stack, so a model
        hundreds of layers deep needs no deep recursion; ``memo`` keeps what earlier calls found."""
        import torch.fx

        if not isinstance(x, torch.fx.Node):
            return False
        memo = {} if memo is None else memo
        seen: set[Any] = set()
        stack = [x]
        found = False
        while stack and not found:
            n = self.resolve(stack.pop())
            if n in seen:
                continue
            seen.add(n)
            if memo.get(n):
                found = True
            elif n in memo:
                continue  # known not to read the group
            elif n is group.anchor or n in group.members:
                found = True
            else:
                stack.extend(n.all_input_nodes)
        if not found:  # nothing reachable from x reads the group
            for n in seen:
                memo[n] = False
        memo[x] = found
        return found

    def external_operands(self, group: KernelGroup) -> list[Any]:
        """What the group's epilogue members read from outside the group (resolved), in order, with repeats."""
        import torch.fx

        members = set(group.members) | {group.anchor}
        found = []
        for m in group.members:
            for o in self.ops[m].operands:
                if isinstance(o, (torch.fx.Node, ParamRef)):
                    r = self.resolve(o) if isinstance(o, torch.fx.Node) else o
                    if r not in members:
                        found.append(r)
        return found
