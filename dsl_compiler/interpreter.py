"""The reference interpreter: runs a program with PyTorch ops, on any device, with exactly the
semantics the CUTLASS emitter implements.

Precision follows the kernel: operands are rounded to the math type (tf32: 10 mantissa bits,
round-to-nearest-even; bf16 / f16: a cast), or for tf32x3 split into a TF32 big part and a TF32
remainder whose three cross products (small*big + big*small + big*big) are summed, as CUTLASS's
OpMultiplyAddFastF32 computes them; products accumulate in fp32 with PyTorch's TF32 turned off,
the accumulator is rounded to f16 when ``accum = f16``, the epilogue runs in fp32 and each store is cast
to its element type. So the interpreter's error against an fp32 reference predicts the kernel's.

Epilogue view: for a GEMM, row = output row (M), col = output column (N). For a convolution, row =
output pixel (N·P·Q in (n, p, q) order), col = output channel (K); its output keeps the layout of x.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

from dsl_compiler import ir, precision, row_ops, shapes, torch_steps
from dsl_compiler.ops import OPS
from dsl_compiler.torch_steps import channels_last

Env = dict[str, torch.Tensor]
KernelRunner = Callable[[ir.Program, ir.Kernel, Env], dict[str, torch.Tensor]]


# ---------------------------------------------------------------------------------------------
# Precision


def round_tf32(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 values to TF32 (10 explicit mantissa bits), round-to-nearest-even; inf/nan kept."""
    x = x.float().contiguous()
    bits = x.view(torch.int32)
    lsb = (bits >> 13) & 1
    rounded = ((bits + 0x0FFF + lsb) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(x), rounded, x)


def split_tf32(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 values as CUTLASS's OpMultiplyAddFastF32 splits them: big = x truncated to TF32, small = the
    remainder x - big rounded to TF32 by adding half an ulp and truncating (big + small keeps 21-22 bits)."""
    x = x.float().contiguous()
    finite = torch.isfinite(x)
    big = torch.where(finite, (x.view(torch.int32) & ~0x1FFF).view(torch.float32), x)
    rest = torch.where(finite, x - big, torch.zeros_like(x)).contiguous()
    small = ((rest.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)
    return big, small


def mma_product(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: torch.Tensor, b: torch.Tensor,
                math: str, last: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """``fn(a, b)`` (a matmul or conv) as the tensor cores compute it under ``math``: over the rounded operands,
    or for a split math the sum of the three products of the parts in CUTLASS's order (``last``, if given,
    computes the final big*big one: the call that adds a bias once)."""
    last = last or fn
    mode = precision.MATH_MODES.get(math)
    if mode is None or not mode.split:
        return last(round_operand(a, math), round_operand(b, math))
    (a_big, a_small), (b_big, b_small) = split_tf32(a), split_tf32(b)
    return fn(a_small, b_big) + fn(a_big, b_small) + last(a_big, b_big)


def round_operand(x: torch.Tensor, math: str) -> torch.Tensor:
    """An operand as the tensor cores see it, widened to fp32 for the exact product."""
    if math == "tf32":
        return round_tf32(x)
    if math == "bf16":
        return x.to(torch.bfloat16).float()
    if math == "f16":
        return x.to(torch.float16).float()
    return x.float()


@contextlib.contextmanager
def exact_fp32() -> Iterator[None]:
    """fp32 matmul and convolution without PyTorch's own TF32 shortcuts, restored afterwards."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def zero_padded(x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    """``x`` zero-padded at the end of each dim to ``shape`` (same rank, no dim smaller), else None.
    A param declared larger than the model's tensor is padded so, once, at load: zeros in a GEMM's K
    or a conv's input channels add nothing to any sum, and padded N / output channels are sliced off."""
    shape = tuple(shape)
    if x.dim() != len(shape) or any(d < s for d, s in zip(shape, x.shape)):
        return None
    if tuple(x.shape) == shape:
        return x
    out = x.new_zeros(shape)
    out[tuple(slice(0, s) for s in x.shape)] = x
    return out


def as_declared(x: torch.Tensor, decl: ir.TensorDecl) -> torch.Tensor:
    """A tensor in a declaration's element type and layout; raises ValueError on a shape mismatch
    (a param may be declared larger than its tensor: it is zero-padded, see ``zero_padded``)."""
    if tuple(x.shape) != tuple(decl.shape):
        padded = zero_padded(x, decl.shape) if decl.kind == "param" else None
        if padded is None:
            raise ValueError(f"'{decl.name}' is declared {list(decl.shape)} but got {list(x.shape)}")
        x = padded
    x = x.to(torch_steps.torch_dtype(decl.dtype))
    if decl.layout == "channels_last":
        return channels_last(x)
    return x if x.is_contiguous() else x.contiguous()


# ---------------------------------------------------------------------------------------------
# Ops


def _operand(env: Env, operand: ir.Operand) -> torch.Tensor:
    x = env[operand.name]
    return x.transpose(-1, -2) if operand.transpose else x


def accumulate(kernel: ir.Kernel, env: Env, math: str) -> torch.Tensor:
    """The op's accumulator in fp32 (before the epilogue), in PyTorch's logical shape."""
    op = kernel.op
    a, b = (_operand(env, o) for o in kernel.operands)
    if isinstance(op, ir.GemmOp):
        fn = torch.matmul
    elif isinstance(op, ir.GroupedGemmOp):
        def fn(a, b):
            parts = torch.split(a, list(op.group_sizes), dim=0)
            return torch.cat([torch.matmul(p, b[g]) for g, p in enumerate(parts)], dim=0)
    elif isinstance(op, ir.ConvTransposeOp):
        conv_t = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[op.spatial_dims]

        def fn(a, b):
            return conv_t(a, b, None, op.stride, op.padding, op.output_padding, op.groups, op.dilation)
    else:
        conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[op.spatial_dims]

        def fn(a, b):
            return conv(a, b, None, op.stride, op.padding, op.dilation, op.groups)
    with exact_fp32():
        acc = mma_product(fn, a, b, math)
    if kernel.config.accum == "f16":
        acc = acc.to(torch.float16).float()
    return acc


# ---------------------------------------------------------------------------------------------
# Epilogue


class _Epilogue:
    """Evaluates epilogue expressions over one kernel's accumulator, in fp32."""

    def __init__(self, kernel: ir.Kernel, acc: torch.Tensor, env: Env):
        self.kernel = kernel
        self.acc = acc
        self.env = env
        self.lets: dict[str, torch.Tensor] = {}
        self.is_conv = isinstance(kernel.op, ir.ConvOp)

    def vector(self, t: torch.Tensor, index: str) -> torch.Tensor:
        """A row / col / scalar operand shaped to broadcast against the accumulator."""
        v = t.float().reshape(-1)
        acc = self.acc
        if index == "scalar":
            return v.reshape(())
        if self.is_conv:
            n, k, *spatial = acc.shape
            if index == "col":
                return v.reshape(1, k, *([1] * len(spatial)))
            return v.reshape(n, 1, *spatial)
        if index == "col":
            return v.reshape(acc.shape[-1])
        return v.reshape(acc.shape[-2], 1)

    def eval(self, e: Any) -> torch.Tensor:
        if isinstance(e, ir.Acc):
            return self.acc
        if isinstance(e, ir.Const):
            return torch.tensor(e.value, dtype=torch.float32, device=self.acc.device)
        if isinstance(e, ir.Ref):
            if e.name in self.lets:
                return self.lets[e.name]
            t = self.env[e.name]
            if e.index == "full":
                return t.float()
            return self.vector(t, e.index)
        if isinstance(e, ir.Unary):
            return OPS[e.fn].interpret(self.eval(e.arg))  # the op table's function
        if isinstance(e, ir.Binary):
            return OPS[e.fn].interpret(self.eval(e.lhs), self.eval(e.rhs))
        if isinstance(e, ir.ParamCall):
            return OPS[e.fn].interpret(self.eval(e.arg), *e.params)
        if isinstance(e, ir.Reduce):
            return self.reduce(e.fn, torch.broadcast_to(self.eval(e.arg), self.acc.shape))
        raise TypeError(f"not an expression: {type(e).__name__}")

    def reduce(self, fn: str, x: torch.Tensor) -> torch.Tensor:
        kind, how = fn.split("_")
        op = {"sum": lambda t, d: torch.sum(t, dim=d), "max": lambda t, d: torch.amax(t, dim=d),
              "min": lambda t, d: torch.amin(t, dim=d)}[how]
        if self.is_conv:
            if kind == "row":  # over channels, one value per output pixel
                return op(x, 1).reshape(-1)
            return op(x, tuple(d for d in range(x.dim()) if d != 1))
        if kind == "row":
            return op(x, -1)
        return op(x, -2)


def run_row_kernel(kernel: ir.RowKernel, env: Env) -> dict[str, torch.Tensor]:
    """A row kernel: its op in fp32 (``row_ops.interpret``), then each store's tail in fp32, cast to its type."""
    op = kernel.op
    value = row_ops.interpret(op, env[op.x.name], *(env[o.name] if o is not None else None for o in (op.weight, op.bias)))
    out: dict[str, torch.Tensor] = {}
    if value.dtype == torch.int64:  # argmax / argmin: the checks allow `i64 = acc` only
        return {s.name: value.contiguous() for s in kernel.stores}
    epilogue = _Epilogue(kernel, value, env)
    for let in kernel.lets:
        epilogue.lets[let.name] = epilogue.eval(let.expr)
    for store in kernel.stores:
        result = torch.broadcast_to(epilogue.eval(store.expr), value.shape)
        out[store.name] = result.to(torch_steps.torch_dtype(store.dtype)).contiguous()
    return out


def run_kernel(program: ir.Program, kernel: ir.Kernel | ir.RowKernel, env: Env) -> dict[str, torch.Tensor]:
    """Run one kernel on the tensors in ``env``; returns store name -> tensor."""
    if isinstance(kernel, ir.RowKernel):
        return run_row_kernel(kernel, env)
    math = kernel_math(kernel, env)
    acc = accumulate(kernel, env, math)
    epilogue = _Epilogue(kernel, acc, env)
    for let in kernel.lets:
        epilogue.lets[let.name] = epilogue.eval(let.expr)
    out: dict[str, torch.Tensor] = {}
    keep_channels_last = isinstance(kernel.op, ir.ConvOp) and torch_steps.is_channels_last(env[kernel.op.x.name])
    for store in kernel.stores:
        value = epilogue.eval(store.expr)
        dtype = torch_steps.torch_dtype(store.dtype)
        if isinstance(store.expr, ir.Reduce):
            out[store.name] = value.to(dtype).contiguous()
            continue
        value = torch.broadcast_to(value, acc.shape).to(dtype)
        if store.channels is not None:
            out[store.name] = _store_channels(program, kernel, store, value, env)
            continue
        out[store.name] = channels_last(value) if keep_channels_last else value.contiguous()
    return out


def _store_channels(program: ir.Program, kernel: ir.Kernel, store: ir.Store, value: torch.Tensor, env: Env) -> torch.Tensor:
    """``store y[a:b]``: the value written as channels a..b of y (allocated by its first writer, in that writer's
    form: channels-last for a conv, [..., M, total] for a GEMM), exactly as the CUTLASS backend's views."""
    return torch_steps.write_channels(value, store.name, store.channels, shapes.slice_totals(program)[store.name], env,
                                      conv=isinstance(kernel.op, ir.ConvOp))


def kernel_math(kernel: ir.Kernel, env: Env) -> str:
    """``precision.kernel_math`` over the element type operand A has in ``env``."""
    if kernel.config.math is not None:
        return kernel.config.math
    return precision.kernel_math(kernel, torch_steps.element_type(env[kernel.operands[0].name].dtype) or "f32")


class InterpreterExecutor:
    """The ``interpreter`` backend's kernel executor."""

    def __init__(self, program: ir.Program | None = None, artifacts: Any = None):
        self.program = program

    def run_kernel(self, program: ir.Program, kernel: ir.Kernel, env: Env) -> dict[str, torch.Tensor]:
        return run_kernel(program, kernel, env)


def run_steps(program: ir.Program, env: Env, kernel_runner: KernelRunner, modules: dict[str, Any] | None = None) -> Env:
    """Run every step in order over ``env`` (name -> tensor); kernels by ``kernel_runner``, torch steps by
    ``torch_steps.run`` on every backend (``module`` steps call ``modules[path]``)."""
    totals = shapes.slice_totals(program)
    for step in program.steps:
        if isinstance(step, ir.Kernel | ir.RowKernel):
            env.update(kernel_runner(program, step, env))
        else:
            env.update(torch_steps.run(step, env, modules, totals))
    return env


def bind_inputs(program: ir.Program, inputs: list[torch.Tensor] | tuple[torch.Tensor, ...]) -> Env:
    decls = program.inputs
    if len(inputs) != len(decls):
        raise ValueError(f"the program takes {len(decls)} input(s) ({', '.join(d.name for d in decls)}), got {len(inputs)}")
    for d, x in zip(decls, inputs):
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"input '{d.name}' must be a tensor, got {type(x).__name__}")
    return {d.name: as_declared(x, d) for d, x in zip(decls, inputs)}


def run(program: ir.Program, inputs: list[torch.Tensor], params: dict[str, torch.Tensor],
        modules: dict[str, Any] | None = None) -> list[torch.Tensor]:
    """Run the whole program on the interpreter; returns the outputs in order. ``modules``: the reference
    model's submodules by path, for ``module`` steps (``runtime.bind_modules``)."""
    env = bind_inputs(program, inputs)
    device = inputs[0].device if inputs else None
    for d in program.params:
        if d.name not in params:
            raise ValueError(f"param '{d.name}' is not bound")
        p = params[d.name]
        env[d.name] = as_declared(p.to(device) if device is not None else p, d)
    run_steps(program, env, run_kernel, modules)
    return [env[name] for name in program.outputs]
