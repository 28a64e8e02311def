"""The μCUTLASS IR: the one representation of a program.

The parser builds it, the checks read it, the printer, the CUTLASS emitter and the reference
interpreter consume it. Every node is an immutable pydantic model that carries the source span
it came from; spans take no part in equality or hashing, so ``parse(print(ir)) == ir``.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from dsl_compiler import ops

# ---------------------------------------------------------------------------------------------
# Basics


class Span(BaseModel):
    """1-based line and column of the first character, and of the character after the last."""

    model_config = ConfigDict(frozen=True)
    line: int = 1
    column: int = 1
    end_line: int = 1
    end_column: int = 1

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


class Node(BaseModel):
    """Base of every IR node: frozen, forbids unknown fields, span excluded from equality."""

    # inf (a causal mask's fill, a clamp without a bound) crosses JSON as Infinity, not as null
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")
    span: Span | None = Field(default=None, exclude=True, repr=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return type(self) is type(other) and self.model_dump(mode="json") == other.model_dump(mode="json")

    def __hash__(self) -> int:
        return hash((type(self).__name__, json.dumps(self.model_dump(mode="json"), sort_keys=True)))


# Storage element types. tf32 is a math mode over f32 storage, never a storage type.
ElementType = Literal["f32", "bf16", "f16"]
MathType = Literal["f32", "tf32x3", "tf32", "bf16", "f16"]
AccumType = Literal["f32", "f16"]

# Physical layout of a tensor of rank >= 3 whose dim 1 is channels (N, C, *spatial).
# "contiguous" is PyTorch's default row-major order; "channels_last" is NHWC / NDHWC / NWC.
# 2-D operands are always stored row-major as declared: a transposed read is written `w^T`.
Layout = Literal["contiguous", "channels_last"]

# What a store may write: an element type, or i64 (the indices argmax / argmin give, as PyTorch does).
StoreType = Literal["f32", "bf16", "f16", "i64"]

ELEMENT_BYTES: dict[str, int] = {"f32": 4, "bf16": 2, "f16": 2, "i64": 8}

# ---------------------------------------------------------------------------------------------
# Tensors


class TensorDecl(Node):
    """A tensor the program receives: a forward input (`input`) or a model parameter (`param`).

    ``shape`` is the logical PyTorch shape. For a param, ``source`` is its key in the reference
    model's ``state_dict()`` (e.g. ``"fc1.weight"``); parameters are bound once when the program
    is loaded, so a param may be declared ``channels_last`` and is re-laid out at load time.
    """

    kind: Literal["input", "param"]
    name: str
    dtype: ElementType
    shape: tuple[int, ...]
    layout: Layout = "contiguous"
    source: str | None = None


class Operand(Node):
    """A tensor read by an op. ``transpose`` swaps the last two dims (a column-major read)."""

    name: str
    transpose: bool = False


# ---------------------------------------------------------------------------------------------
# Ops


class GemmOp(Node):
    """D[M,N] = A[M,K] @ B[K,N]; rank-3 operands make it batched (L, M, K) @ (L, K, N).

    A rank-3 A with a rank-2 B shares B across the batch. ``a^T`` reads A stored as [K, M];
    ``b^T`` reads B stored as [N, K] (nn.Linear's weight layout).
    """

    kind: Literal["gemm"] = "gemm"
    a: Operand
    b: Operand


class GroupedGemmOp(Node):
    """Grouped GEMM (mixture-of-experts form): A [sum(group_sizes), K] is cut into row groups,
    group g is multiplied by B[g] ([G, K, N], or [G, N, K] when written ``b^T``); D is
    [sum(group_sizes), N]."""

    kind: Literal["grouped_gemm"] = "grouped_gemm"
    a: Operand
    b: Operand
    group_sizes: tuple[int, ...]


class ConvOp(Node):
    """Forward convolution, PyTorch semantics (cross-correlation), 1-D, 2-D or 3-D.

    x is [N, C, *spatial], w is [K, C / groups, *filter]; both as declared (layout included).
    depthwise is groups == C with K a multiple of C.
    """

    kind: Literal["conv"] = "conv"
    spatial_dims: Literal[1, 2, 3]
    x: Operand
    w: Operand
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int = 1

    @property
    def fn(self) -> str:
        """How the language names the op: ``conv2d``."""
        return f"conv{self.spatial_dims}d"


class ConvTransposeOp(ConvOp):
    """Transposed convolution, PyTorch semantics (the data gradient of ``ConvOp``), 1-D, 2-D or 3-D.

    x is [N, C, *spatial], w is [C, K / groups, *filter] (nn.ConvTranspose's weight); the output is
    [N, K, *out] with out = (in - 1)·stride - 2·padding + dilation·(filter - 1) + output_padding + 1.
    Everything a forward conv says about layouts and the epilogue holds (row = output pixel, col = output
    channel); as a GEMM it is CUTLASS's dgrad: M = N·out pixels, N = K, K = C/groups·filter taps.
    """

    kind: Literal["conv_transpose"] = "conv_transpose"  # type: ignore[assignment]
    output_padding: tuple[int, ...]

    @property
    def fn(self) -> str:
        return f"conv_transpose{self.spatial_dims}d"


Op = Annotated[Union[GemmOp, GroupedGemmOp, ConvOp, ConvTransposeOp], Field(discriminator="kind")]

# ---------------------------------------------------------------------------------------------
# Kernel configuration

Schedule = Literal["auto", "cooperative", "pingpong"]
Raster = Literal["auto", "along_m", "along_n"]
Decomposition = Literal["data_parallel", "split_k", "stream_k"]


class KernelConfig(Node):
    """The CUTLASS knobs of one kernel. ``None`` / ``"auto"`` let the compiler choose.

    ``tile`` is the CTA tile (M, N, K) in elements; ``cluster`` the thread-block cluster
    (M, N, 1); ``alignment`` is in elements for A and B (None: the largest legal).
    """

    math: MathType | None = None
    accum: AccumType = "f32"
    tile: tuple[int, int, int] | None = None
    cluster: tuple[int, int, int] = (1, 1, 1)
    stages: int | Literal["auto"] = "auto"
    schedule: Schedule = "auto"
    raster: Raster = "auto"
    swizzle: int = 1
    decomposition: Decomposition = "data_parallel"
    split_k: int = 1
    alignment: int | None = None
    # Where each knob was written (knob name -> span), for diagnostics; like ``span``, no part of equality.
    knob_spans: dict[str, Span] | None = Field(default=None, exclude=True, repr=False)

    def span_of(self, knob: str) -> Span | None:
        return (self.knob_spans or {}).get(knob) or self.span


# ---------------------------------------------------------------------------------------------
# Epilogue expressions over the accumulator

# The element-wise functions are the op table's (dsl_compiler.ops): f(x), f(x, y), and f(x, literal, ...) such as
# clamp(x, lo, hi), leaky_relu(x, slope).
UnaryFn = Literal[ops.names("unary")]  # type: ignore[valid-type]
BinaryFn = Literal[ops.names("binary")]  # type: ignore[valid-type]
ParamFn = Literal[ops.names("param")]  # type: ignore[valid-type]
ReduceFn = Literal["row_sum", "row_max", "row_min", "col_sum", "col_max", "col_min"]


class Acc(Node):
    """The accumulator tile: ``acc`` in the source."""

    kind: Literal["acc"] = "acc"


class Const(Node):
    kind: Literal["const"] = "const"
    value: float


class Ref(Node):
    """A tensor or a let binding read by the epilogue.

    index: ``full`` (``r``: same shape as the output, or a let), ``col`` (``b[col]``: a vector of
    length N, one value per output column: a bias), ``row`` (``s[row]``: length M, one value per
    output row), ``scalar`` (a one-element tensor broadcast everywhere).
    """

    kind: Literal["ref"] = "ref"
    name: str
    index: Literal["full", "row", "col", "scalar"] = "full"


class Unary(Node):
    kind: Literal["unary"] = "unary"
    fn: UnaryFn
    arg: "Expr"


class Binary(Node):
    kind: Literal["binary"] = "binary"
    fn: BinaryFn
    lhs: "Expr"
    rhs: "Expr"


class ParamCall(Node):
    kind: Literal["param_call"] = "param_call"
    fn: ParamFn
    arg: "Expr"
    params: tuple[float, ...]


class Reduce(Node):
    """A reduction of an element-wise expression over the output tile; only at the top of a
    ``store``. row_* reduce over N giving [M] (batched: [L, M]); col_* reduce over M giving [N]."""

    kind: Literal["reduce"] = "reduce"
    fn: ReduceFn
    arg: "Expr"


Expr = Annotated[Union[Acc, Const, Ref, Unary, Binary, ParamCall, Reduce], Field(discriminator="kind")]


class Let(Node):
    name: str
    expr: Expr


class Store(Node):
    """An output the kernel writes: a full tensor, or a reduction when ``expr`` is a Reduce.

    ``channels`` (start, end): the store writes the output's columns (a conv's output channels) as channels
    start..end of ``name``, a tensor several kernels fill (``store cat[64:128]: f32 = acc``): a concatenation
    along channels costs nothing. ``name`` has the first writer's output shape with every channel; every
    writer has the same rows (M, or N·P·Q for a conv), and it is read once all its channels are written.
    """

    name: str
    dtype: StoreType
    expr: Expr
    channels: tuple[int, int] | None = None


class Kernel(Node):
    name: str
    op: Op
    config: KernelConfig = KernelConfig()
    lets: tuple[Let, ...] = ()
    stores: tuple[Store, ...]

    @property
    def operands(self) -> tuple[Operand, Operand]:
        """The op's two tensors: (a, b) of a GEMM, (x, w) of a convolution."""
        op = self.op
        return (op.x, op.w) if isinstance(op, ConvOp) else (op.a, op.b)


# ---------------------------------------------------------------------------------------------
# Row kernels: reductions, softmax and normalizations over a dim (memory-bound; ``dsl_compiler.row_ops``)

# The row functions, in the language's order (``row_ops.ROW_FNS`` describes each).
RowFn = Literal["sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "logsumexp", "norm",
                "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "instance_norm", "normalize",
                "cumsum", "cumprod", "max_pool", "avg_pool", "adaptive_avg_pool"]


class RowOp(Node):
    """``fn`` over the dims ``dim`` of x (one dim, or adjacent dims; as written, negative from the end).

    x is seen as [outer, R, inner]: R the product of the reduced dims. A reduction (sum .. norm) gives x's
    shape without them (``keepdim``: with extent 1); softmax and the norms give x's shape. ``p`` is the order
    (1 or 2) of norm and of normalize (x / max(norm, eps), F.normalize's); ``eps``, ``weight`` and ``bias`` belong to layer_norm and rms_norm (weight and bias have
    the reduced dims' shape, as nn.LayerNorm's). group_norm (``groups``) and instance_norm (a group per channel)
    normalize x [N, C, *spatial] over each (sample, group) segment, contiguous; their dim is (1,), the channel
    dim, and weight and bias have C values, as nn.GroupNorm's. A scan (cumsum, cumprod) gives x's shape over one
    dim: inclusive from the start, ``reverse`` from the end, ``exclusive`` without the element itself.

    A pool (max_pool, avg_pool, adaptive_avg_pool) reads x [N, C, *spatial] (or [C, *spatial]) with 1 to 3
    spatial dims and has no dim (``()``): ``kernel_size``, ``stride``, ``padding`` and ``dilation`` (max only) have one
    value per spatial dim, as PyTorch's; ``ceil_mode`` rounds the output extent up; avg_pool divides by the
    window clipped to the padded input (``count_include_pad``) or to the input, or by ``divisor_override``;
    adaptive_avg_pool averages the windows [floor(i·In/Out), ceil((i+1)·In/Out)) giving ``output_size``."""

    kind: Literal["row"] = "row"
    fn: RowFn
    x: Operand
    dim: tuple[int, ...]
    keepdim: bool = False
    p: int = 2
    eps: float = 1e-5
    groups: int = 1
    weight: Operand | None = None
    bias: Operand | None = None
    reverse: bool = False
    exclusive: bool = False
    # pools (empty / default for every other function)
    kernel_size: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()
    dilation: tuple[int, ...] = ()
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    output_size: tuple[int, ...] = ()


class RowConfig(Node):
    """The knobs of a row kernel; ``None`` / ``"auto"`` let the compiler choose.

    ``vector``: elements per load (a 16-byte access at most); ``rows_per_block``: rows one CTA reduces (a warp
    each when several); ``passes``: 1 keeps the row in registers and reads x once, 2 reads x again
    to normalise (any row length); ``split``: CTAs sharing one long row (a reduction's partial results combined
    by a second, small launch)."""

    vector: int | None = None
    rows_per_block: int | None = None
    passes: Literal[1, 2] | None = None
    split: int = 1
    knob_spans: dict[str, Span] | None = Field(default=None, exclude=True, repr=False)

    def span_of(self, knob: str) -> Span | None:
        return (self.knob_spans or {}).get(knob) or self.span


class RowKernel(Node):
    """A row kernel: its op's value is ``acc`` in each store's element-wise tail (``store y: f32 = acc * 2``)."""

    name: str
    op: RowOp
    config: RowConfig = RowConfig()
    lets: tuple[Let, ...] = ()
    stores: tuple[Store, ...]

    @property
    def operands(self) -> tuple[Operand, ...]:
        """The tensors the op reads: x, then weight and bias where given."""
        return tuple(o for o in (self.op.x, self.op.weight, self.op.bias) if o is not None)


# ---------------------------------------------------------------------------------------------
# Named PyTorch steps: what the language cannot express, visible and counted.

Literal_ = Union[bool, int, float, str, None, tuple[Union[bool, int, float, str, None], ...]]


class TensorArg(Node):
    """A tensor argument; ``channels`` (start, end) reads channels start..end of a tensor slice stores fill
    (``y[0:64]``: dim 1 of a channels-last tensor, else the last dim), as a view."""

    kind: Literal["tensor"] = "tensor"
    name: str
    channels: tuple[int, int] | None = None


class LiteralArg(Node):
    kind: Literal["literal"] = "literal"
    value: Literal_


Arg = Annotated[Union[TensorArg, LiteralArg], Field(discriminator="kind")]


class Kwarg(Node):
    key: str
    value: Literal_


class TorchStep(Node):
    """``torch y = softmax(h, dim=1)``: calls a whitelisted PyTorch function (see
    ``dsl_compiler.torch_steps``) on named tensors and literals; binds its result to ``outputs``."""

    outputs: tuple[str, ...]
    fn: str
    args: tuple[Arg, ...] = ()
    kwargs: tuple[Kwarg, ...] = ()
    # ``torch y[0:32] = channels_last(x)``: the one output is written as channels start..end of y (see Store)
    channels: tuple[int, int] | None = None


Step = Union[Kernel, RowKernel, TorchStep]


class Program(Node):
    """A whole program: declarations, then steps in order, then the outputs returned by forward."""

    name: str | None = None
    decls: tuple[TensorDecl, ...]
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]
    # Where the output line was written, for diagnostics; like ``span``, no part of equality.
    outputs_span: Span | None = Field(default=None, exclude=True, repr=False)

    def decl(self, name: str) -> TensorDecl | None:
        return next((d for d in self.decls if d.name == name), None)

    @property
    def inputs(self) -> tuple[TensorDecl, ...]:
        return tuple(d for d in self.decls if d.kind == "input")

    @property
    def params(self) -> tuple[TensorDecl, ...]:
        return tuple(d for d in self.decls if d.kind == "param")

    @property
    def kernels(self) -> tuple[Kernel, ...]:
        return tuple(s for s in self.steps if isinstance(s, Kernel))

    @property
    def row_kernels(self) -> tuple[RowKernel, ...]:
        return tuple(s for s in self.steps if isinstance(s, RowKernel))

    @property
    def torch_steps(self) -> tuple[TorchStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, TorchStep))


for _m in (Unary, Binary, ParamCall, Reduce, Let, Store, Kernel, RowKernel, Program):
    _m.model_rebuild()
