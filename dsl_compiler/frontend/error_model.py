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


@dataclass(frozen=True)
class PrecisionError:
    """The predicted error of one precision: ``ratio`` = max |err| / (tol + tol |ref|) over the sampled outputs
    (inf when the precision gives a non-finite value where the reference is finite)."""

    math: str
    ratio: float
    rows: int  # leading-dim rows sampled

    @property
    def passes(self) -> bool:
        return self.ratio <= PASS_RATIO


class _Rounding:
    """A TorchFunctionMode that rounds the operands of GEMMs and convs (not biases) to one precision."""

    def __new__(cls, math_: str):
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
                        return _product(func, args, kwargs, (0, 1), math_)
                elif func in biased:
                    return _product(func, args, kwargs, (1, 2), math_)
                return func(*args, **kwargs)

        return Mode()


def _product(func, args: list, kwargs: dict, operands: tuple[int, int], math_: str):
    """``func(*args, **kwargs)`` with its two operands (at ``operands``) multiplied as the kernel's math does
    (``interpreter.mma_product``); a split math's partial products leave out the bias, the last adds it once."""
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

    return mma_product(lambda a, b: call(a, b, bias=False), args[i], args[j], math_, last=call)


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


def _ratio(out, ref, tolerance: float) -> float:
    import torch

    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    refs = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    worst = 0.0
    for o, r in zip(outs, refs):
        if not isinstance(r, torch.Tensor) or not r.is_floating_point():
            continue
        o, r = o.double(), r.double()
        finite = torch.isfinite(r)
        if bool((finite & ~torch.isfinite(o)).any()):
            return math.inf
        err = (o - r).abs()[finite] / (tolerance + tolerance * r.abs()[finite])
        if err.numel():
            worst = max(worst, float(err.max()))
    return worst


def predict_errors(problem: Problem | ModuleType, maths: tuple[str, ...], tolerance: float, seed: int = 1,
                   budget_s: float = RUN_BUDGET_S, until_pass: bool = False) -> dict[str, PrecisionError]:
    """Predicted error of each precision in ``maths`` on the problem's inputs (``get_inputs()`` under
    ``seed``); with ``until_pass`` the precisions after the first predicted to pass are not run. {} when
    the reference cannot run on the CPU (the caller keeps its own rule then). Cached on disk by the
    problem's source, so the processes of one evaluation compute each once."""
    source = problem.source if isinstance(problem, Problem) else None  # a module has no source to key the cache by
    key = None
    if source:
        key = hashlib.sha256(json.dumps([source, list(maths), float(tolerance), seed, until_pass]).encode()).hexdigest()[:24]
        cached = _read_cache(key)
        if cached is not None:
            return cached
    result = _predict(problem, maths, tolerance, seed, budget_s, until_pass)
    if key is not None and result:
        _write_cache(key, result)
    return result


def _cache_path(key: str) -> Path:
    from dsl_compiler.build import cache_dir

    # beside the kernel cache, not in it: the judge watches the kernels' folder for changed files
    return cache_dir().parent / "error_model" / f"{key}.json"


def _read_cache(key: str) -> dict[str, PrecisionError] | None:
    try:
        data = json.loads(_cache_path(key).read_text())
        return {m: PrecisionError(math=m, ratio=float(v["ratio"]), rows=int(v["rows"])) for m, v in data.items()}
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
        tmp.write_text(json.dumps({m: {"ratio": e.ratio, "rows": e.rows} for m, e in result.items()}))
        tmp.replace(path)
    except OSError:  # a cache that cannot be written costs a recomputation, nothing more
        pass


def _predict(problem: Problem | ModuleType, maths: tuple[str, ...], tolerance: float, seed: int, budget_s: float,
             until_pass: bool) -> dict[str, PrecisionError]:
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
            rows = max(1, min(lead, MAX_ROWS, int(budget_s / max(one_row_s, 1e-6))))
            sample = _sample(inputs, rows, every, crop)
            ref = model(*sample)
            result = {}
            for m in maths:
                with _Rounding(m):
                    out = model(*sample)
                result[m] = PrecisionError(math=m, ratio=_ratio(out, ref, tolerance), rows=rows)
                if until_pass and result[m].passes:
                    break
            return result
    except Exception:  # a reference that does not run here: no prediction
        return {}
