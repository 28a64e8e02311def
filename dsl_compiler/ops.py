"""The epilogue's element-wise functions, one row each: everything any part of the project knows about one.

Each row says how the language spells the function (its name, and its literal parameters), the C++ the CUTLASS
emitters write for it, its FLOPs per element, the PyTorch-step functions that compute it, the names torch.fx
traces it under, whether a PyTorch step of it can move into a kernel's epilogue, and the interpreter's function.
The IR's function types, the emitters, the interpreter, the frontend's normaliser, the FLOP count of a program and
the planner all read this table; ``tests/test_op_table.py`` fails when a row lacks a column or a reader misses a row.

No torch at import: the interpreter's functions import it when they first run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

OpForm = Literal["unary", "binary", "param"]


@dataclass(frozen=True)
class CallArg:
    """A literal argument of the PyTorch call: its keyword (also the nn.Module attribute holding it), its position
    in the functional call (the tensor is 0), its default, and a value for examples in messages."""

    key: str
    position: int
    default: Any
    example: float | None = None


@dataclass(frozen=True)
class EpilogueOp:
    """One element-wise function of the epilogue."""

    name: str  # the language's and the IR's name: ``gelu_tanh(acc)``, Binary(fn="min")
    form: OpForm  # unary f(x); binary f(x, y); param f(x, literal, ...)
    cpp: str  # C++ over fp32 values: {0} the argument ({1} the second, or the literal parameters in order)
    flops: float  # per output element; a transcendental function counts as one
    torch: tuple[str, ...]  # torch-step functions computing it (the first is the step the frontend writes)
    traced: tuple[str, ...]  # fx call names (function, method or operator, as normalize spells them)
    interpret: Callable[..., Any]  # the interpreter's function over fp32 tensors (x[, y] or x, *params)
    fusable: bool = True  # a PyTorch step of it after a kernel can become that kernel's epilogue
    modules: tuple[str, ...] = ()  # torch.nn classes computing it (their attributes hold the params)
    params: tuple[CallArg, ...] = ()  # param form: the literal parameters, in the IR's order
    # arguments the PyTorch call must have these values for (gelu's approximate, softplus's beta and threshold)
    options: tuple[tuple[CallArg, Any], ...] = ()
    # traced names that are this function with fixed parameters (relu6 is hardtanh(x, 0, 6))
    presets: tuple[tuple[str, tuple[float, ...]], ...] = ()

    @property
    def example(self) -> str:
        """How a call is written in the language, e.g. ``leaky_relu(x, 0.01)``."""
        if self.form == "binary":
            return f"{self.name}(x, y)"
        return f"{self.name}({', '.join(['x', *(repr(p.example) for p in self.params)])})"


def _torch():
    import torch

    return torch


def _functional():
    import torch.nn.functional as F

    return F


def _clamp(x, lo, hi):
    # fminf / fmaxf as in the emitted epilogue: a NaN operand yields the other
    torch = _torch()
    return torch.fmin(torch.fmax(x, torch.tensor(lo, dtype=x.dtype, device=x.device)),
                      torch.tensor(hi, dtype=x.dtype, device=x.device))


def _unary(name: str, cpp: str, flops: float, interpret, torch_fns=None, traced=None, modules=(), **extra) -> EpilogueOp:
    return EpilogueOp(name, "unary", cpp, flops, tuple(torch_fns or (name,)), tuple(traced or (name,)), interpret,
                      modules=tuple(modules), **extra)


def _binary(name: str, cpp: str, interpret, torch_fns=None, traced=None) -> EpilogueOp:
    return EpilogueOp(name, "binary", cpp, 1.0, tuple(torch_fns or (name,)), tuple(traced or (name,)), interpret)


_APPROXIMATE = CallArg("approximate", 1, "none")

# Order is the language's (the IR's Literal types list the names in it).
EPILOGUE_OPS: tuple[EpilogueOp, ...] = (
    _unary("neg", "(-({0}))", 1.0, lambda x: _torch().neg(x), traced=("neg", "negative")),
    _unary("abs", "fabsf({0})", 1.0, lambda x: _torch().abs(x)),
    # fmax as C's fmaxf (the emitted epilogue): a NaN input yields 0
    _unary("relu", "fmaxf({0}, 0.f)", 1.0,
           lambda x: _torch().fmax(x, _torch().zeros((), dtype=x.dtype, device=x.device)), modules=("ReLU",)),
    # erf form: div, erf, add, two multiplies
    _unary("gelu", "mu_gelu({0})", 5.0, lambda x: _functional().gelu(x), traced=("gelu",), modules=("GELU",),
           options=((_APPROXIMATE, "none"),)),
    # tanh form: cube, multiply-add, tanh, add, multiplies
    _unary("gelu_tanh", "mu_gelu_tanh({0})", 9.0, lambda x: _functional().gelu(x, approximate="tanh"),
           torch_fns=("gelu",), traced=("gelu",), modules=("GELU",), options=((_APPROXIMATE, "tanh"),)),
    _unary("silu", "mu_silu({0})", 4.0, lambda x: _functional().silu(x), modules=("SiLU",)),  # sigmoid, multiply
    _unary("sigmoid", "mu_sigmoid({0})", 3.0, lambda x: _torch().sigmoid(x), modules=("Sigmoid",)),  # exp, add, div
    _unary("tanh", "tanhf({0})", 1.0, lambda x: _torch().tanh(x), modules=("Tanh",)),
    _unary("mish", "mu_mish({0})", 5.0, lambda x: _functional().mish(x), modules=("Mish",)),  # softplus, tanh, mul
    # exp, add, log; PyTorch's defaults only (the C++ is linear above threshold 20)
    _unary("softplus", "mu_softplus({0})", 3.0, lambda x: _functional().softplus(x), modules=("Softplus",),
           options=((CallArg("beta", 1, 1), 1), (CallArg("threshold", 2, 20), 20))),
    _unary("exp", "expf({0})", 1.0, lambda x: _torch().exp(x)),
    _unary("log", "logf({0})", 1.0, lambda x: _torch().log(x)),
    _unary("sqrt", "sqrtf({0})", 1.0, lambda x: _torch().sqrt(x)),
    _unary("rsqrt", "(1.f / sqrtf({0}))", 1.0, lambda x: _torch().rsqrt(x)),
    _unary("square", "mu_square({0})", 1.0, lambda x: _torch().square(x)),
    _unary("hardswish", "mu_hardswish({0})", 4.0, lambda x: _functional().hardswish(x), modules=("Hardswish",)),
    _unary("hardsigmoid", "mu_hardsigmoid({0})", 3.0, lambda x: _functional().hardsigmoid(x), modules=("Hardsigmoid",)),
    _binary("add", "({0} + {1})", lambda x, y: _torch().add(x, y), traced=("add", "iadd")),
    _binary("sub", "({0} - {1})", lambda x, y: _torch().sub(x, y), traced=("sub", "isub", "subtract")),
    _binary("mul", "({0} * {1})", lambda x, y: _torch().mul(x, y), traced=("mul", "imul", "multiply")),
    _binary("div", "({0} / {1})", lambda x, y: _torch().div(x, y), traced=("div", "truediv", "itruediv", "divide")),
    # fmin / fmax as C's fminf / fmaxf: a NaN operand yields the other. torch.min(x, y) is this one, torch.min(x, 1)
    # a reduction
    _binary("min", "fminf({0}, {1})", lambda x, y: _torch().fmin(x, y), torch_fns=("minimum",), traced=("minimum", "min")),
    _binary("max", "fmaxf({0}, {1})", lambda x, y: _torch().fmax(x, y), torch_fns=("maximum",), traced=("maximum", "max")),
    _binary("pow", "powf({0}, {1})", lambda x, y: _torch().pow(x, y)),
    EpilogueOp("clamp", "param", "mu_clamp({0}, {1}, {2})", 2.0, ("clamp",), ("clamp", "clip"), _clamp,
               params=(CallArg("min", 1, None, -1.0), CallArg("max", 2, None, 1.0))),
    EpilogueOp("hardtanh", "param", "mu_clamp({0}, {1}, {2})", 2.0, ("hardtanh",), ("hardtanh",), _clamp,
               modules=("Hardtanh",), params=(CallArg("min_val", 1, -1.0, -1.0), CallArg("max_val", 2, 1.0, 1.0)),
               presets=(("relu6", (0.0, 6.0)),)),
    EpilogueOp("leaky_relu", "param", "mu_leaky_relu({0}, {1})", 2.0, ("leaky_relu",), ("leaky_relu",),
               lambda x, slope: _functional().leaky_relu(x, slope), modules=("LeakyReLU",),
               params=(CallArg("negative_slope", 1, 0.01, 0.01),)),
    EpilogueOp("elu", "param", "mu_elu({0}, {1})", 3.0, ("elu",), ("elu",), lambda x, alpha: _functional().elu(x, alpha),
               modules=("ELU",), params=(CallArg("alpha", 1, 1.0, 1.0),)),
)

OPS: dict[str, EpilogueOp] = {op.name: op for op in EPILOGUE_OPS}


def names(form: OpForm) -> tuple[str, ...]:
    """The functions of one form, in the language's order."""
    return tuple(op.name for op in EPILOGUE_OPS if op.form == form)


def fusable_torch_steps() -> frozenset[str]:
    """The PyTorch-step functions an epilogue can absorb."""
    return frozenset(fn for op in EPILOGUE_OPS if op.fusable for fn in op.torch)


# The C++ functions the templates above call, defined once in every translation unit.
CPP_HELPERS = r"""
CUTLASS_HOST_DEVICE float mu_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
CUTLASS_HOST_DEVICE float mu_silu(float x) { return x / (1.f + expf(-x)); }
CUTLASS_HOST_DEVICE float mu_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }
CUTLASS_HOST_DEVICE float mu_gelu_tanh(float x) {
  return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
// PyTorch's softplus: linear above threshold 20 to avoid overflow of exp.
CUTLASS_HOST_DEVICE float mu_softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }
CUTLASS_HOST_DEVICE float mu_mish(float x) { return x * tanhf(mu_softplus(x)); }
CUTLASS_HOST_DEVICE float mu_square(float x) { return x * x; }
CUTLASS_HOST_DEVICE float mu_hardsigmoid(float x) { return fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }
CUTLASS_HOST_DEVICE float mu_hardswish(float x) { return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }
CUTLASS_HOST_DEVICE float mu_leaky_relu(float x, float s) { return x > 0.f ? x : x * s; }
CUTLASS_HOST_DEVICE float mu_elu(float x, float a) { return x > 0.f ? x : a * (expf(x) - 1.f); }
CUTLASS_HOST_DEVICE float mu_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
"""
