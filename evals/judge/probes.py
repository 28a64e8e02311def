"""Precision measured, not read: what rounding a candidate's outputs carry.

For a probe input set, the judge computes the problem's reference exactly (float64) and once per
rounding level with the inputs and parameters rounded to that level (TF32: 10 mantissa bits and
fp32's range; f16: 10 bits and a range up to 65504; bf16: 7 bits; fp8 e4m3: 3 bits). Each level
leaves its own error against the exact result: its signature. A candidate's error is compared with
the signatures: one that is at least half of a disallowed level's signature (and not far beyond it,
which would be plain garbage) computes in that level.

Every call whose output the judge reads is a mantissa probe (tf32/f16 < bf16 < fp8): each input set
of a validation, the repeated call and the call on new values in the same buffers, and the timed
calls' outputs, each against its own input set's signatures (a candidate cannot keep its precise path
for the one call that is judged). Beside them two range probes for f16, whose rounding on in-range values
is TF32's: the set scaled so that its largest value is 2**17 (f16 operands overflow to inf, fp32 and
TF32 carry them exactly), and the first input as random signs at a magnitude f16 still holds (57344,
below its 65504), which a test against f16's own limit does not single out, while sums of such values
pass 65504 in the outputs, where f16 arithmetic overflows and fp32 and TF32 stay finite. A level is judged on a probe only where
its signature stands clear of every allowed level's (4x) and of fp32's own rounding (16x), so an honest
fp32 or TF32 candidate with another summation order is never taken for a lower precision.
"""

from __future__ import annotations

import copy
import math

LEVELS = ("tf32", "f16", "bf16", "fp8")  # from fine to coarse
RANGE_PROBE_MAX = 2.0**17  # above f16's largest finite value (65504), far inside fp32's
IN_RANGE_MAGNITUDE = 57344.0  # 1.75 * 2**15: exact in f16, bf16 and TF32, below f16's largest value
F16_MAX = 65504.0
SIGNATURE_OVER_ALLOWED = 4.0
SIGNATURE_OVER_FP32 = 16.0
NOISE_ALIGNMENT = 0.3  # rounding noise is nearly orthogonal to the result; a scaled result is parallel to it
# Judged by magnitude, whatever the error's shape: the error against float64 may be this many times the coarsest
# allowed level's emulated error (rounding of intermediate operands and another summation order stay inside it)
MAGNITUDE_OVER_ALLOWED = 4.0
# on an f32-only problem: this share of TF32's emulated error (fp32's own, summed in another order, stays far
# below it up to contractions of about a million terms), or the reference's own fp32 error times the factor above
MAGNITUDE_UNDER_TF32 = 0.25


def round_to(x, level: str):
    """``x`` (a float tensor) rounded to ``level`` and returned as float32."""
    import torch

    x = x.float()
    if level == "tf32":
        bits = x.contiguous().view(torch.int32)
        rounded = (bits + 0x1000) & ~0x1FFF  # round to nearest on the 13 dropped mantissa bits
        return torch.where(torch.isfinite(x), rounded.view(torch.float32), x)
    if level == "f16":
        return x.half().float()
    if level == "bf16":
        return x.bfloat16().float()
    if level == "fp8":
        return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()
    if level == "f32":
        return x
    raise ValueError(f"unknown level {level!r}")


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def at_level(model, level: str | None):
    """A float64 copy of ``model`` whose parameters and buffers are first rounded to ``level`` (None: exact)."""
    import torch

    # the copy's floating tensors are made in float64 straight from the model's own (a memo for deepcopy): no fp32
    # copy of a parameter is made first, so a 4 GiB weight costs its 8 GiB float64 copy and nothing more
    memo: dict = {}
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point() and id(t) not in memo:
                data = (round_to(t.data, level) if level else t.data).double()
                memo[id(t)] = torch.nn.Parameter(data, requires_grad=False) if isinstance(t, torch.nn.Parameter) else data
        return copy.deepcopy(model, memo)


def run_model_at(m, inputs, level: str | None):
    """``m`` (from ``at_level``) on ``inputs`` rounded to ``level``, in float64. At f16 an output beyond its
    largest value is what f16 arithmetic stores there: an infinity."""
    import torch

    with torch.no_grad():
        xs = [(round_to(x, level) if level else x).double() if isinstance(x, torch.Tensor) and x.is_floating_point()
              else x for x in inputs]
        outs = [o.double() for o in _as_list(m(*xs)) if isinstance(o, torch.Tensor)]
    if level == "f16":
        outs = [torch.where(o.abs() > F16_MAX, o.sign() * math.inf, o) for o in outs]
    return outs


def run_at(model, inputs, level: str | None):
    """The model's outputs in float64, inputs and parameters first rounded to ``level`` (None: exact)."""
    return run_model_at(at_level(model, level), inputs, level)


def rel_error(outs, exact) -> float:
    """||outs - exact|| / ||exact|| over all outputs (inf when an output is not finite)."""
    import torch

    num = den = 0.0
    for o, e in zip(outs, exact):
        o = o.double().to(e.device)
        if not bool(torch.isfinite(o).all()):
            return math.inf
        num += float(((o - e) ** 2).sum())
        den += float((e**2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return math.sqrt(num / den)


def range_probe(inputs):
    """The input set scaled so that its largest magnitude is ``RANGE_PROBE_MAX``."""
    import torch

    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            peak = float(x.abs().max())
            out.append(x * (RANGE_PROBE_MAX / peak) if peak > 0 else x.clone())
        else:
            out.append(x)
    return out


def in_range_probe(inputs, seed: int):
    """The input set with its first floating tensor replaced by random signs (from ``seed``) at
    ``IN_RANGE_MAGNITUDE``: every value f16 holds, and sums of a few dozen of them past what it holds."""
    import torch

    out, done = [], False
    for x in inputs:
        if not done and isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel():
            g = torch.Generator().manual_seed(int(seed))
            signs = torch.randint(0, 2, x.shape, generator=g).to(device=x.device, dtype=x.dtype) * 2 - 1
            out.append(signs * IN_RANGE_MAGNITUDE)
            done = True
        else:
            out.append(x)
    return out


def signatures(model, inputs, ref32, positions=None, allowed=None) -> dict | None:
    """The exact outputs and each level's error on one probe set; None where the probe says nothing
    (fp32's own result is not finite or not close to exact there)."""
    return signatures_many(model, [inputs], [ref32], positions, allowed)[0]


def probed_levels(allowed) -> tuple[str, ...]:
    """The levels a probe runs: every level ``allowed`` excludes (the ones it can find), and the coarsest one it
    allows (a disallowed level's signature must stand clear of the allowed ones', and the coarsest is the one
    that decides); every level when ``allowed`` is None. At the default 1e-2 (f32, tf32, bf16, f16 allowed) that is
    bf16 and fp8: three float64 runs of the model a probed set, not five."""
    if allowed is None:
        return LEVELS
    allowed = tuple(allowed)
    kept = [level for level in LEVELS if level in allowed]
    return tuple(level for level in LEVELS if level not in allowed or (kept and level == kept[-1]))


def _at(outs, positions):
    """The outputs at ``positions`` (per output: an index tensor into its flat values; None: every element)."""
    if positions is None:
        return list(outs)
    from evals.judge.compare import at_positions

    return [at_positions(o, p) if p is not None else o for o, p in zip(outs, positions)]


def _float64_unsupported(exc: Exception) -> bool:
    """An operator of the reference with no float64 kernel: the probe says nothing on this problem. Anything
    else (the judge's memory above all) is the judge's failure, never a silent pass."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return False
    text = str(exc)
    return isinstance(exc, (RuntimeError, NotImplementedError, TypeError)) and any(
        s in text for s in ("not implemented for", "Double", "double", "dtype", "expected scalar type"))


def signatures_many(model, input_sets, refs32, positions=None, allowed=None) -> list[dict | None]:
    """``signatures`` for several input sets, each level's copy of the model made once for all of them. With
    ``positions`` (``evals.judge.compare.Keys.positions``) every output is kept at those positions only: each
    float64 run lives until its sample is taken, one at a time. Where the float64 runs do not fit the judge's
    share of the GPU they run again on the host (slower, whole); a reference that has no float64 kernel gets no
    probe (None); any other failure raises ``HarnessError``."""
    import torch

    from evals.judge.findings import HarnessError

    try:
        return _signatures_on(model, input_sets, refs32, positions, allowed)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        try:  # the same runs on the host: the judge's memory on the GPU is not what the probe may be skipped for
            cpu = [[x.cpu() if isinstance(x, torch.Tensor) else x for x in xs] for xs in input_sets]
            refs = [[r.cpu() if isinstance(r, torch.Tensor) else r for r in rs] for rs in refs32]
            where = None if positions is None else [None if p is None else p.cpu() for p in positions]
            host = copy.deepcopy(model)
            host = host.cpu() if hasattr(host, "cpu") else host
            return _signatures_on(host, cpu, refs, where, allowed)
        except Exception as exc:  # noqa: BLE001 - sorted below
            error = exc
    except Exception as exc:  # noqa: BLE001 - sorted below: no float64 kernel, or the judge's own failure
        error = exc
    if _float64_unsupported(error):
        return [None] * len(input_sets)
    raise HarnessError(f"the precision probe could not run: {type(error).__name__}: "
                       f"{' '.join(str(error).split())[:700]}") from None


SLICE_BYTES = 1 << 30  # a float64 run larger than this is made in slices of the first input's rows, where it may be


def row_slices(model, inputs, refs32) -> int | None:
    """Rows of the first input a float64 run takes at a time, where the model is separable along them: each output's
    first dimension is the first input's, and the fp32 model on a few rows gives the reference's rows there (a batch
    norm with batch statistics does not, nor a reshape across rows). None: the run is made whole (it is small, or
    the model is not separable so)."""
    import torch

    x0 = inputs[0] if inputs else None
    if not (isinstance(x0, torch.Tensor) and x0.dim() >= 1 and x0.shape[0] >= 2 and refs32
            and all(isinstance(r, torch.Tensor) and r.dim() >= 1 and r.shape[0] == x0.shape[0] for r in refs32)):
        return None
    whole = 2 * (sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
                 + sum(r.numel() * r.element_size() for r in refs32))
    if whole <= SLICE_BYTES:
        return None
    rows = max(1, int(x0.shape[0] * SLICE_BYTES // whole))
    # two rows at the start and two in the middle (a model relative to its first row passes at the start only)
    for r0 in sorted({0, x0.shape[0] // 2}):
        few = min(2, x0.shape[0] - r0)
        try:
            old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
            try:
                with torch.no_grad():
                    part = [o for o in _as_list(model(x0[r0:r0 + few], *inputs[1:])) if isinstance(o, torch.Tensor)]
            finally:
                torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
        except Exception:  # noqa: BLE001 - a model that will not take a slice runs whole
            return None
        if len(part) != len(refs32) or any(p.shape[1:] != r.shape[1:] or p.shape[0] != few
                                           for p, r in zip(part, refs32)):
            return None
        for p, r in zip(part, refs32):
            want = r[r0:r0 + few]
            scale = float(want.abs().max()) if want.numel() else 0.0
            if not torch.allclose(p.to(r.dtype), want, rtol=1e-5, atol=1e-6 * max(scale, 1e-30)):
                return None
    return rows


def _sampled_run(m, inputs, level, positions, rows):
    """``m`` at ``level`` on ``inputs``, kept at ``positions`` (sorted flat indices per output), and whether any value
    anywhere is not finite; with ``rows``, made a slice of the first input's rows at a time."""
    import torch

    if rows is None or positions is None:
        outs = run_model_at(m, inputs, level)
        nonfinite = not all(bool(torch.isfinite(o).all()) for o in outs)
        kept = _at(outs, positions)
        del outs
        return kept, nonfinite
    from evals.judge.compare import at_positions

    x0, n = inputs[0], inputs[0].shape[0]
    parts: list[list] = [[] for _ in positions]
    nonfinite = False
    for r0 in range(0, n, rows):
        outs = run_model_at(m, [x0[r0:r0 + rows], *inputs[1:]], level)
        for q, (o, pos) in enumerate(zip(outs, positions)):
            per_row = o.numel() // max(o.shape[0], 1)
            pos = pos.to(o.device)
            lo, hi = r0 * per_row, (r0 + o.shape[0]) * per_row
            parts[q].append(at_positions(o, pos[(pos >= lo) & (pos < hi)] - lo))
        nonfinite = nonfinite or not all(bool(torch.isfinite(o).all()) for o in outs)
        del outs
    return [torch.cat(p) for p in parts], nonfinite


def _signatures_on(model, input_sets, refs32, positions, allowed) -> list[dict | None]:
    n = len(input_sets)
    levels = probed_levels(allowed)
    rows = [row_slices(model, inputs, refs) if positions is not None else None
            for inputs, refs in zip(input_sets, refs32)]
    exact: list = [None] * n
    emulated: list[dict] = [{} for _ in range(n)]
    overflow: list[dict] = [{} for _ in range(n)]
    for level in (None, *levels):
        m = at_level(model, level)
        for i, inputs in enumerate(input_sets):
            kept, nonfinite = _sampled_run(m, inputs, level, positions, rows[i])
            if level is None:
                exact[i] = kept
            else:  # an infinity anywhere counts, sampled or not (f16's overflow)
                emulated[i][level], overflow[i][level] = kept, nonfinite
        del m
    out: list[dict | None] = []
    for i in range(n):
        errors = {"f32": rel_error(_at(refs32[i], positions), exact[i])}
        errors.update({level: math.inf if overflow[i][level] else rel_error(emulated[i][level], exact[i])
                       for level in levels})
        ok = math.isfinite(errors["f32"]) and errors["f32"] <= 1e-3
        out.append({"exact": exact[i], "errors": errors, "emulated": emulated[i]} if ok else None)
    return out


def error_alignment(outs, exact) -> float:
    """|cos| between the candidate's error and the exact output: near 1 for a scaled or biased result
    (a wrong answer), near 0 for rounding noise."""
    import torch

    dot = nd = ne = 0.0
    for o, e in zip(outs, exact):
        d = o.double().to(e.device) - e
        dot += float((d * e).sum())
        nd += float((d * d).sum())
        ne += float((e * e).sum())
    return abs(dot) / math.sqrt(nd * ne) if nd > 0 and ne > 0 else 0.0


def judge(candidate_outs, probe: dict, allowed, nonfinite: bool = False) -> tuple[str | None, dict]:
    """The disallowed level whose signature the candidate's error carries (None: none), and the numbers.
    ``candidate_outs`` are the outputs at the probe's positions; ``nonfinite``: an infinity or a NaN anywhere
    in the whole outputs (sampled or not)."""
    errors = probe["errors"]
    e_c = math.inf if nonfinite else rel_error(candidate_outs, probe["exact"])
    allowed_errs = [errors[a] for a in allowed if a in errors and a != "f32"]
    found = None
    for level in LEVELS:
        if level in allowed or level not in errors:
            continue
        e_l = errors[level]
        clear_of_allowed = all(e_l >= SIGNATURE_OVER_ALLOWED * a for a in allowed_errs)
        clear_of_fp32 = e_l >= SIGNATURE_OVER_FP32 * max(errors["f32"], 1e-300)
        if not (clear_of_allowed and clear_of_fp32):
            continue
        if math.isinf(e_l):
            matches = math.isinf(e_c)
        else:
            # the size of this level's rounding, and its shape: noise (or the emulation itself), not a
            # scaled or shifted result, which is a wrong answer of the same size
            matches = 0.5 * e_l <= e_c <= 4.0 * e_l and (
                error_alignment(candidate_outs, probe["exact"]) < NOISE_ALIGNMENT
                or rel_error(candidate_outs, probe["emulated"][level]) < 0.5 * e_l)
        if matches:
            found = level
            break
    budget = magnitude_budget(errors, allowed)
    beyond = found is None and budget is not None and math.isfinite(e_c) and e_c > budget
    if beyond:
        # an error past what the allowed precisions make, of any shape (a tilt parallel to the result too); named
        # ``beyond_budget``: on a set that fails its comparison it does not say the error is a precision's
        found = next(level for level in LEVELS if level not in allowed)
    return found, {"candidate_error": e_c, **{f"{k}_error": v for k, v in errors.items()},
                   **({"error_budget": budget} if budget is not None else {}), **({"beyond_budget": True} if beyond else {})}


def magnitude_budget(errors: dict, allowed) -> float | None:
    """The largest error against float64 the allowed precisions make on this set (``MAGNITUDE_OVER_ALLOWED`` times
    the coarsest allowed level's emulated error; on an f32-only problem the larger of that times fp32's own error
    and ``MAGNITUDE_UNDER_TF32`` of TF32's); None where every level is allowed or a needed signature is missing."""
    allowed = tuple(allowed)
    kept = [level for level in LEVELS if level in allowed]
    if len(kept) == len(LEVELS):
        return None
    if kept:
        e_allowed = errors.get(kept[-1])
        return MAGNITUDE_OVER_ALLOWED * e_allowed if e_allowed is not None and math.isfinite(e_allowed) else None
    e_tf32, e_f32 = errors.get("tf32"), errors.get("f32")
    if e_tf32 is None or e_f32 is None or not math.isfinite(e_tf32):
        return None
    return max(MAGNITUDE_OVER_ALLOWED * e_f32, MAGNITUDE_UNDER_TF32 * e_tf32)
