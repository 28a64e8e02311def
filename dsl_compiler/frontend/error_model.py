"""The error a precision would make on a problem, predicted before anything is built.

A kernel in f16, bf16 or TF32 math rounds its operands to that type and accumulates the exact
products in fp32 (tf32x3 sums three TF32 products of the operands' big and small parts); everything else (the epilogue, PyTorch steps such as softmax or a norm) runs in
fp32 (``dsl_compiler.interpreter``'s semantics). The reference model is run on the CPU twice on
the same inputs: exactly in fp32, and with every GEMM / conv operand rounded to the precision (a
``TorchFunctionMode`` over matmul, linear, conv, ...). The ratio of the largest error to the
problem's tolerance (``|out - ref| <= tol + tol * |ref|``, as the validator checks) then carries
everything that decides it: the accumulation length K, the data's range (f16 overflows above
65504), cancellation in row sums, softmax and norms. For large problems the inputs' leading
(batch) dim is sampled, which keeps each run within a time budget; the rows are independent
samples of the same statistics.

What the CPU's emulation cannot see is the accumulation order. On the GPU the judge's reference (fp32,
TF32 off: cuBLAS / cuDNN on the CUDA cores) rounds after every one of a dot product's K fused
multiply-adds, and a kernel rounds once per MMA (8 TF32 products, 16 f16 / bf16; tf32x3 three MMAs per
step), each in its own order: the two differ by fp32 rounding noise that the emulation, one CPU order
for both, leaves out. Each product is therefore charged that noise as well, inside the run, so that
it travels through the epilogue as the real difference does (a softmax or a norm after a GEMM): a
normal draw per output element with the standard deviation of a sequential fp32 sum,
``u sqrt(n (sum p^2 / 2 + S^2 / 3) / 3)`` (``u`` = 2^-24, ``n`` the terms summed, ``sum p^2`` the squared
products, ``S`` the sum: a random walk and a drift), for the reference's roundings and the kernel's
together (``ROUNDINGS_PER_TERM``). A product whose operands lie on grids fine enough that no partial
sum leaves fp32's 24 bits (small integers, say) is exact in any order and is charged nothing. That
term decides f32 and tf32x3 at KernelBench's 1e-4, where the operands' rounding adds nothing or next
to nothing; it grows with the reduction length and the values' scale, and a norm after the GEMM
magnifies it, as on the GPU (a 4096^3 fp32 GEMM of unit normals: eager fp32 misses 1e-4 against
float64 by 3x, benchmarks/results/2026-12-02-h200-split-gemm.md; the model puts two fp32 orders 6x
apart there, within PASS_RATIO's margin of the measured 3-4x). ``PrecisionError.order`` is that term
alone (the f32 run: a product in another fp32 order than the reference's). ``predict_all`` gives every
precision (``MATHS``: f16, bf16, tf32, tf32x3, f32) for a report; the offline tier asks for the ones a
problem admits, fastest first.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from run_vocabulary.problem import Problem

# the sampled maximum underestimates the maximum over the whole output (more elements, more tail):
# a precision is predicted to pass when its sampled error is at most this share of the tolerance
PASS_RATIO = 0.5
RUN_BUDGET_S = 0.1  # CPU seconds per precision run on the sampled inputs
MAX_ROWS = 32
CROP = 32  # spatial extent of a cropped image sample
UNIT_ROUNDOFF = 2.0 ** -24  # fp32's: each rounded addition's relative error is uniform in [-u, u]
# fp32 roundings per product term of a dot product: the reference's (FFMA on the CUDA cores: one per term) plus the
# kernel's (an MMA sums 8 TF32 / 16 f16 or bf16 products before it rounds into the accumulator; tf32x3 runs three
# MMAs a step; an f32 product in another order, a SIMT kernel or another library algorithm, rounds every term)
ROUNDINGS_PER_TERM = {"f32": 1 + 1.0, "tf32x3": 1 + 3 / 8, "tf32": 1 + 1 / 8, "f16": 1 + 1 / 16, "bf16": 1 + 1 / 16}
# every math a kernel can compute in, fastest first (f16 and bf16 run at one rate: f16, with 3 more bits, first;
# tf32x3 issues three TF32 MMAs a product; f32 has no tensor-core kernel and runs as a PyTorch step)
MATHS: tuple[str, ...] = ("f16", "bf16", "tf32", "tf32x3", "f32")
ACCUMULATION_COST = 3.0  # a product charged its accumulation order is computed three times (value, squares, terms)
CACHE_VERSION = 2  # in the key of a cached prediction: 2 adds the accumulation-order term


@dataclass(frozen=True)
class PrecisionError:
    """The predicted error of one precision: ``ratio`` = max |err| / (tol + tol |ref|) over the sampled outputs
    (inf when the precision gives a non-finite value where the reference is finite)."""

    math: str
    ratio: float
    rows: int  # leading-dim rows sampled
    order: float = 0.0  # the accumulation-order term alone (the f32 run), over the tolerance (0.0: not charged)

    @property
    def passes(self) -> bool:
        return self.ratio <= PASS_RATIO


class _Rounding:
    """A TorchFunctionMode that rounds the operands of GEMMs and convs (not biases) to one precision and, with
    ``memo`` (a dict kept over one prediction's runs), adds to each product its accumulation-order noise
    (``_order_noise``)."""

    def __new__(cls, math_: str, memo: dict | None = None):
        import torch
        import torch.nn.functional as F
        from torch.overrides import TorchFunctionMode

        two_operand = {torch.matmul, torch.mm, torch.bmm, torch.Tensor.matmul, torch.Tensor.__matmul__,
                       torch.Tensor.mm, torch.Tensor.bmm, F.linear, F.conv_transpose1d, F.conv_transpose2d,
                       F.conv_transpose3d, torch.conv_transpose1d, torch.conv_transpose2d, torch.conv_transpose3d}
        biased = {torch.addmm, torch.baddbmm, torch.Tensor.addmm, torch.Tensor.baddbmm}  # (bias, a, b)
        convs = {F.conv1d, F.conv2d, F.conv3d, torch.conv1d, torch.conv2d, torch.conv3d}

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                args = list(args)
                if func in two_operand or func in convs:
                    depthwise = func in convs and len(args) > 1 and _groups(args, kwargs) > 1 and \
                        _groups(args, kwargs) == args[0].shape[1]
                    if not depthwise:  # the depthwise kernel multiplies in fp32 on the CUDA cores
                        return _product(func, args, kwargs, (0, 1), math_, memo)
                elif func in biased:
                    return _product(func, args, kwargs, (1, 2), math_, memo)
                return func(*args, **kwargs)

        return Mode()


def _product(func, args: list, kwargs: dict, operands: tuple[int, int], math_: str, memo: dict | None = None):
    """``func(*args, **kwargs)`` with its two operands (at ``operands``) multiplied as the kernel's math does
    (``interpreter.mma_product``); a split math's partial products leave out the bias, the last adds it once.
    With ``memo``, plus the accumulation-order noise of the product (``_order_noise``)."""
    import torch

    from dsl_compiler.interpreter import mma_product

    i, j = operands
    if len(args) <= j or not all(isinstance(args[k], torch.Tensor) and args[k].is_floating_point() for k in (i, j)):
        return func(*args, **kwargs)

    def call(a, b, bias: bool = True):
        new = list(args)
        new[i], new[j] = a, b
        extra = dict(kwargs)
        if not bias:
            if i == 1:  # addmm / baddbmm: the bias comes first
                new[0] = torch.zeros_like(new[0])
            elif len(new) > 2:
                new[2] = None
            else:
                extra.pop("bias", None)
        return func(*new, **extra)

    out = mma_product(lambda a, b: call(a, b, bias=False), args[i], args[j], math_, last=call)
    if memo is None or not all(t.dtype == torch.float32 for t in (out, args[i], args[j])):
        return out
    return out + _order_noise(lambda a, b: call(a, b, bias=False), args[i], args[j], out, math_, memo)


def _derived(memo: dict, t, kind: str, make):
    """``make(t)``, once per tensor (its identity, storage and version) over one prediction's runs: a weight's
    squares, magnitudes, ones and grid are computed for the first run only."""
    key = (kind, id(t), t.data_ptr(), t._version, tuple(t.shape))
    if key not in memo:
        memo[key] = (t, make(t))  # the tensor kept alive with it: its id is not reused while the memo lives
    return memo[key][1]


def _order_noise(product, a, b, out, math_: str, memo: dict):
    """A draw of the accumulation-order difference of a product against the reference's: normal per element, with
    the variance of a sequential fp32 sum of n terms p_k (each addition rounds by a relative error uniform in
    [-u, u]: u^2 / 3 sum_k S_k^2 over the partial sums S_k, about n (sum p^2 / 2 + S^2 / 3) for a random walk and a
    drift), the reference's roundings and the kernel's (``ROUNDINGS_PER_TERM``); zero where the sum is exact."""
    import torch

    if _exact_sum(product, a, b, memo):
        return torch.zeros_like(out)
    squares = product(_derived(memo, a, "sq", lambda t: t * t), _derived(memo, b, "sq", lambda t: t * t))  # sum p^2
    ones = [_derived(memo, t, "ones", torch.ones_like) for t in (a, b)]
    terms = product(*ones)  # n, padding left out
    var = (UNIT_ROUNDOFF ** 2 / 3) * terms * (squares / 2 + out.detach() ** 2 / 3) * ROUNDINGS_PER_TERM.get(math_, 2.0)
    g = torch.Generator().manual_seed(out.numel())
    return torch.randn(out.shape, generator=g, dtype=out.dtype) * var.clamp_min(0).sqrt()


def _grid(x) -> int | None:
    """The smallest s (-64 <= s <= 64) with every value of ``x`` an integer multiple of 2^-s, or None (none is)."""
    import torch

    x = x.detach().double()
    if not bool(torch.isfinite(x).all()):
        return None

    def on(s: int) -> bool:
        scaled = x * (2.0 ** s)
        return bool((scaled == scaled.round()).all())

    lo, hi = -64, 64
    if not on(hi):
        return None
    while lo < hi:  # on(s) implies on(s + 1): the smallest s by bisection
        mid = (lo + hi) // 2
        if on(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


GRID_PROBE = 4096  # elements of an operand whose grid is found first: a finer grid than theirs rules exactness out


def _exact_sum(product, a, b, memo: dict) -> bool:
    """Whether every partial sum of the product is exact in fp32 whatever the order: the products lie on the grid
    2^-(sa + sb) of the operands' grids and no sum of their magnitudes reaches 2^24 steps of it. A strided probe of
    each operand decides first (an operand's grid is at least as fine as its probe's), so data drawn at random
    costs a few thousand elements, not a pass over a large weight."""
    import torch

    if not (a.numel() and b.numel()):
        return True

    def probe(x):
        flat = x.detach().reshape(-1)
        return flat[:: max(1, flat.numel() // GRID_PROBE)]

    grids = [_derived(memo, t, "probe_grid", lambda t: _grid(probe(t))) for t in (a, b)]
    if None in grids or sum(_bits(probe(t), g) for t, g in zip((a, b), grids)) > 24:
        return False  # a product of the largest values already needs more than fp32's 24 bits on this grid
    bound = float(product(_derived(memo, a, "abs", torch.abs), _derived(memo, b, "abs", torch.abs)).max())
    sa, sb = (_derived(memo, t, "grid", _grid) for t in (a, b))
    return sa is not None and sb is not None and bound < 2.0 ** (24 - sa - sb)


def _bits(x, grid: int) -> float:
    """log2 of the largest magnitude of ``x`` in steps of its grid 2^-grid (0 for zeros)."""
    top = float(x.abs().max()) if x.numel() else 0.0
    return math.log2(top) + grid if top > 0 else 0.0


def _groups(args, kwargs) -> int:
    if "groups" in kwargs:
        return int(kwargs["groups"])
    return int(args[6]) if len(args) > 6 else 1


def _sample(inputs: list, rows: int, every: bool, crop: int | None) -> list:
    """The inputs with their leading dim cut to ``rows`` (the first input only, or every input whose leading
    dim is the first's: a residual, the second operand of a bmm) and, with ``crop``, the spatial dims of every
    input shaped like the first cut to ``crop`` (a conv's error depends on C*R*S, not on the image size)."""
    import torch

    first = inputs[0]
    out = []
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            out.append(x)
            continue
        if crop is not None and x.dim() >= 3 and x.shape == first.shape:
            x = x[(slice(None), slice(None)) + tuple(slice(0, crop) for _ in range(x.dim() - 2))]
        if i == 0 or (every and x.shape[0] == first.shape[0]):
            x = x[:rows]
        out.append(x.contiguous())
    return out


def _as_list(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _ratio(out, ref, tolerance: float) -> float:
    """max |out - ref| / (tol + tol |ref|) over the floating outputs (inf: a non-finite value where the reference
    is finite)."""
    import torch

    outs, refs = _as_list(out), _as_list(ref)
    worst = 0.0
    for o, r in zip(outs, refs):
        if not isinstance(r, torch.Tensor) or not r.is_floating_point() or not r.numel():
            continue
        # in fp32 (a ratio needs no more) and without a masked copy: an image's sampled output is millions of values
        wide = torch.float64 if r.dtype == torch.float64 else torch.float32
        o, r = o.to(wide), r.to(wide)
        finite = torch.isfinite(r)
        if bool((finite & ~torch.isfinite(o)).any()):
            return math.inf
        err = (o - r).abs_().div_(r.abs().mul_(tolerance).add_(tolerance)).masked_fill_(~finite, 0.0)
        worst = max(worst, float(err.max()))
    return worst


def predict_errors(problem: Problem | ModuleType, maths: tuple[str, ...], tolerance: float, seed: int = 1,
                   budget_s: float = RUN_BUDGET_S, until_pass: bool = False,
                   accumulation: bool = True) -> dict[str, PrecisionError]:
    """Predicted error of each precision in ``maths`` on the problem's inputs (``get_inputs()`` under
    ``seed``); with ``until_pass`` the precisions after the first predicted to pass are not run. {} when
    the reference cannot run on the CPU (the caller keeps its own rule then). ``accumulation`` False leaves
    out the accumulation-order term (the operands' rounding alone: the interpreter's semantics). Cached on
    disk by the problem's source, so the processes of one evaluation compute each once."""
    source = problem.source if isinstance(problem, Problem) else None  # a module has no source to key the cache by
    key = None
    if source:
        key = hashlib.sha256(json.dumps([source, list(maths), float(tolerance), seed, until_pass, accumulation,
                                         CACHE_VERSION]).encode()).hexdigest()[:24]
        cached = _read_cache(key)
        if cached is not None:
            return cached
    result = _predict(problem, maths, tolerance, seed, budget_s, until_pass, accumulation)
    if key is not None and result:
        _write_cache(key, result)
    return result


def predict_all(problem: Problem | ModuleType, tolerance: float, seed: int = 1) -> dict[str, PrecisionError]:
    """The predicted error of every math (``MATHS``, fastest first) on the problem at ``tolerance``: what a report
    shows per problem; {} when the reference does not run on the CPU."""
    return predict_errors(problem, MATHS, tolerance, seed=seed)


def fastest_passing(errors: dict[str, PrecisionError], maths: tuple[str, ...]) -> str | None:
    """The first of ``maths`` (fastest first) predicted to pass, None when none is."""
    return next((m for m in maths if m in errors and errors[m].passes), None)


def _cache_path(key: str) -> Path:
    from dsl_compiler.build import cache_dir

    # beside the kernel cache, not in it: the judge watches the kernels' folder for changed files
    return cache_dir().parent / "error_model" / f"{key}.json"


def _read_cache(key: str) -> dict[str, PrecisionError] | None:
    try:
        data = json.loads(_cache_path(key).read_text())
        return {m: PrecisionError(math=m, ratio=float(v["ratio"]), rows=int(v["rows"]), order=float(v.get("order", 0.0)))
                for m, v in data.items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(key: str, result: dict[str, PrecisionError]) -> None:
    try:
        path = _cache_path(key)
        if path.exists():  # written by another process of the evaluation: the same values
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        # json writes inf as Infinity, which it reads back
        tmp.write_text(json.dumps({m: {"ratio": e.ratio, "rows": e.rows, "order": e.order} for m, e in result.items()}))
        tmp.replace(path)
    except OSError:  # a cache that cannot be written costs a recomputation, nothing more
        pass


def _predict(problem: Problem | ModuleType, maths: tuple[str, ...], tolerance: float, seed: int, budget_s: float,
             until_pass: bool, accumulation: bool = True) -> dict[str, PrecisionError]:
    import torch

    from dsl_compiler.frontend.reference import load_reference
    from dsl_compiler.interpreter import exact_fp32

    try:
        module = load_reference(problem).module
        with torch.device("cpu"):
            torch.manual_seed(0)
            model = module.Model(*(module.get_init_inputs() if hasattr(module, "get_init_inputs") else []))
            torch.manual_seed(seed)
            inputs = list(module.get_inputs())
        if not inputs or not isinstance(inputs[0], torch.Tensor) or inputs[0].dim() == 0:
            return {}
        with torch.no_grad(), exact_fp32():
            # the cheapest sample that runs: one row, then (for images) cropped; its time says how many rows fit
            found = None
            for crop in ((None, CROP) if inputs[0].dim() >= 3 else (None,)):
                for every in (False, True):
                    try:
                        start = time.perf_counter()
                        model(*_sample(inputs, 1, every, crop))
                        found = (every, crop, time.perf_counter() - start)
                        break
                    except Exception:
                        continue
                if found is not None and found[2] <= budget_s / 4:
                    break
            if found is None:
                return {}
            every, crop, one_row_s = found
            lead = inputs[0].shape[0]
            # a run charged the accumulation order makes three products of each: a third of the rows
            cost = one_row_s * (ACCUMULATION_COST if accumulation else 1.0)
            rows = max(1, min(lead, MAX_ROWS, int(budget_s / max(cost, 1e-6))))
            sample = _sample(inputs, rows, every, crop)
            ref = model(*sample)
            order = 0.0
            memo = {} if accumulation else None  # the weights' derived tensors, once over the runs
            if memo is not None:
                with _Rounding("f32", memo):  # the order term alone: a product in another fp32 order
                    order = _ratio(model(*sample), ref, tolerance)
            result = {}
            for m in maths:
                with _Rounding(m, memo):
                    out = model(*sample)
                result[m] = PrecisionError(math=m, ratio=_ratio(out, ref, tolerance), rows=rows, order=order)
                if until_pass and result[m].passes:
                    break
            return result
    except Exception:  # a reference that does not run here: no prediction
        return {}
