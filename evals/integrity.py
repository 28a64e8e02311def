"""Anti-gaming checks. Each returns ``(ok, reason)``; ``reason`` is empty when ok.

Static checks read the candidate (a μCUTLASS program or ``ModelNew`` source); dynamic checks
read tensors the worker produced. Torch is imported only inside the tensor checks, so the static
ones run anywhere. Every check's verdict is recorded with the attempt (``CheckResult``); the ones
in ``HARD_CHECKS`` make a candidate incorrect, the others are flags for review.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from pydantic import BaseModel

CheckVerdict = tuple[bool, str]

# A failure of these rejects the candidate; the rest are recorded as flags.
HARD_CHECKS = frozenset(
    {"output_aliases", "unwritten_output", "input_dependence", "calls_reference", "precision", "side_stream", "tampering"}
)

# Precisions by mantissa bits: lower means less precise.
PRECISION_BITS = {"f32": 23, "tf32": 10, "f16": 10, "bf16": 7}


class CheckResult(BaseModel):
    name: str
    ok: bool
    reason: str = ""

    @property
    def hard(self) -> bool:
        return self.name in HARD_CHECKS

    def flag(self) -> str:
        return f"{self.name}: {self.reason}"


def result(name: str, verdict: CheckVerdict) -> CheckResult:
    return CheckResult(name=name, ok=bool(verdict[0]), reason=verdict[1])


def flags_of(checks: Iterable[CheckResult]) -> list[str]:
    """The failed checks as ``"name: reason"`` strings (``AttemptRecord.flags``)."""
    return [c.flag() for c in checks if not c.ok]


# ---------------------------------------------------------------------------------------------
# Speed of light


def sol_ceiling_check(t_measured_us: float, t_sol_us: float, margin: float | None = None) -> CheckVerdict:
    """A time more than ``margin`` under the physical bound is not honest (or the bound is wrong):
    sol_models.gaming's rule, its margin by default (10%, or MUCUTLASS_SOL_MARGIN)."""
    from sol_models.gaming import ceiling_check

    verdict = ceiling_check(t_measured_us, t_sol_us, margin=margin)
    return bool(verdict.ok), "" if verdict.ok else (verdict.reason or "faster than SOL")


# ---------------------------------------------------------------------------------------------
# Timing


def side_stream_check(
    event_median_us: float, wall_median_us: float, sync_overhead_us: float = 0.0, slack_us: float = 50.0, ratio: float = 1.5
) -> CheckVerdict:
    """The event pair on the current stream must cover the work: a fully synchronized wall time far
    above the event time (beyond what an empty call costs) means work ran on a stream the timer
    did not wait for."""
    if event_median_us is None or wall_median_us is None or wall_median_us != wall_median_us:
        return True, ""
    if wall_median_us - (sync_overhead_us or 0.0) > ratio * event_median_us + slack_us:
        return False, (
            f"the synchronized wall time ({wall_median_us:.1f} us) is {wall_median_us / max(event_median_us, 1e-3):.1f}x "
            f"the CUDA-event time ({event_median_us:.1f} us): work runs on a side stream the current stream does not "
            f"wait for; make the current stream wait on it (stream.wait_stream) or use the current stream"
        )
    return True, ""


# ---------------------------------------------------------------------------------------------
# Tensors (dynamic)


def _flatten(outputs: Any) -> list:
    if isinstance(outputs, (list, tuple)):
        out = []
        for o in outputs:
            out.extend(_flatten(o))
        return out
    return [outputs]


def _storage_range(t) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def alias_check(outputs: Any, inputs: Sequence[Any], reference_outputs: Any = ()) -> CheckVerdict:
    """An output must be new memory: not a view of an input, nor the reference's output."""
    import torch

    outs = [o for o in _flatten(outputs) if isinstance(o, torch.Tensor)]
    for label, others in (("an input", _flatten(list(inputs))), ("the reference's output", _flatten(reference_outputs))):
        for other in others:
            if not isinstance(other, torch.Tensor) or other.untyped_storage().nbytes() == 0:
                continue
            o_lo, o_hi = _storage_range(other)
            for i, out in enumerate(outs):
                if out.device != other.device or out.untyped_storage().nbytes() == 0:
                    continue
                lo, hi = _storage_range(out)
                if lo < o_hi and o_lo < hi:
                    return False, f"output {i} shares memory with {label}; return a freshly written tensor"
    return True, ""


def output_changes_check(ref_a, ref_b, cand_a, cand_b, tolerance: float) -> CheckVerdict:
    """When the reference's output changes with the inputs, the candidate's must change too."""
    import torch

    for i, (ra, rb, ca, cb) in enumerate(zip(_flatten(ref_a), _flatten(ref_b), _flatten(cand_a), _flatten(cand_b))):
        if not all(isinstance(t, torch.Tensor) for t in (ra, rb, ca, cb)) or ca.shape != cb.shape:
            continue
        if not (bool(torch.isfinite(ca).all()) and bool(torch.isfinite(cb).all())):
            continue  # a non-finite output is wrong for its own reason
        ref_changed = not torch.allclose(ra.float(), rb.float(), atol=tolerance, rtol=tolerance)
        if ref_changed and torch.equal(ca, cb):
            return False, (
                f"output {i} did not change when the inputs changed (the reference's did): the result is cached "
                f"or ignores its inputs"
            )
    return True, ""


def unwritten_output_check(out_nan_poison, out_value_poison, tolerance: float) -> CheckVerdict:
    """Two runs of the same inputs, the allocator's free memory filled with NaN before one and with
    a finite garbage value before the other: elements that differ were never written."""
    import torch

    for i, (a, b) in enumerate(zip(_flatten(out_nan_poison), _flatten(out_value_poison))):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
            continue
        a32, b32 = a.detach().float(), b.detach().float()
        same = torch.isclose(a32, b32, atol=tolerance, rtol=tolerance) | (torch.isnan(a32) & torch.isnan(b32))
        bad = int((~same).sum())
        if bad:
            return False, (
                f"output {i}: {bad} of {a.numel()} elements depend on the memory's previous contents "
                f"(poisoned allocator): part of the output is never written"
            )
    return True, ""


# ---------------------------------------------------------------------------------------------
# Programs and sources (static)

_CUSTOM_KERNEL_MARKERS = re.compile(
    r"load_inline|cpp_extension|\btriton\b|\bcupy\b|\bctypes\b|cuda\.bindings|from\s+cuda\s+import|nvrtc|"
    r"dsl_compiler|mucutlass|torch\.ops\.load_library|\btilelang\b|\btvm\b|\bnumba\b"
)
_REFERENCE_REACH = re.compile(r"(?<![A-Za-z0-9_])Model\s*\(|sys\.modules|gc\.get_objects|inspect\.(stack|currentframe)|__main__")


def pytorch_only_program_check(program) -> CheckVerdict:
    if not program.kernels:
        return False, (
            f"the program has no kernel, only {len(program.torch_steps)} PyTorch step(s); "
            f"express the GEMM or convolution as a `kernel`"
        )
    return True, ""


def pytorch_only_source_check(source: str) -> CheckVerdict:
    """KernelBench-style static detector: a ModelNew with no custom kernel only calls PyTorch."""
    if _CUSTOM_KERNEL_MARKERS.search(_strip_comments(source)):
        return True, ""
    return False, "ModelNew defines no custom kernel (no load_inline, Triton, CUDA or μCUTLASS runtime): it only calls PyTorch"


def reference_reach_source_check(source: str) -> CheckVerdict:
    m = _REFERENCE_REACH.search(_strip_comments(source))
    if m:
        return False, f"ModelNew reaches for the reference or the interpreter's state ({m.group(0).strip()!r})"
    return True, ""


def _strip_comments(source: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())


def _operand_dtypes(program) -> dict[str, str]:
    dtypes = {d.name: d.dtype for d in program.decls}
    for step in program.steps:
        for store in getattr(step, "stores", ()):
            dtypes[store.name] = store.dtype
    return dtypes


def program_precisions(program) -> list[str]:
    """Math precisions a program really uses, following the dataflow: every tensor carries the
    lowest precision on any path into it (a torch step that casts to bf16 and back leaves bf16 in
    its output's lineage), and a kernel computes at the lowest of its math
    (``dsl_compiler.precision.effective_math``) and its operands' lineage."""
    from dsl_compiler import ir
    from dsl_compiler.precision import effective_math

    try:
        from dsl_compiler import shapes

        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - a program whose shapes do not infer: declared types only
        types = None
    lineage: dict[str, set[str]] = {d.name: {d.dtype} for d in program.decls}

    def of(name: str) -> set[str]:
        return lineage.get(name, {"f32"})

    used: set[str] = set()
    for step in program.steps:
        if isinstance(step, ir.TorchStep):
            seen: set[str] = set()
            for arg in step.args:
                if isinstance(arg, ir.TensorArg):
                    seen |= of(arg.name)
            seen |= {str(kw.value) for kw in step.kwargs if kw.key == "dtype" and str(kw.value) in PRECISION_BITS}
            for out in step.outputs:
                t = types.get(out) if types else None
                lineage[out] = seen | ({t.dtype} if t is not None else set())
            used |= seen  # a torch step computes at what reaches it (a bf16 linear is bf16 math)
            continue
        reach = set().union(*(of(o.name) for o in step.operands))
        math = effective_math(program, step, types) if types is not None else (step.config.math or "f32")
        at = {math} | reach
        used |= at
        for store in step.stores:
            lineage[store.name] = at | {store.dtype}
            used.add(store.dtype)
    used.update(d.dtype for d in program.decls)
    used = {u for u in used if u in PRECISION_BITS and u != "f32"}
    return sorted(used or {"f32"}, key=lambda p: -PRECISION_BITS[p])


_SOURCE_PRECISION = [
    ("bf16", re.compile(r"bfloat16|\bbf16\b|__nv_bfloat16")),
    ("f16", re.compile(r"(?<!b)float16|\.half\(\)|\bfp16\b|__half\b|\bhalf\b")),
    ("tf32", re.compile(r"allow_tf32\s*=\s*True|set_float32_matmul_precision\(\s*['\"](high|medium)|\btf32\b", re.I)),
]


def source_precisions(source: str) -> list[str]:
    """A static reading of the precisions a ModelNew source uses (f32 when nothing else shows)."""
    text = _strip_comments(source)
    used = [name for name, pattern in _SOURCE_PRECISION if pattern.search(text)]
    return sorted(used or ["f32"], key=lambda p: -PRECISION_BITS[p])


def lowest_precision(precisions: Sequence[str]) -> str:
    return min(precisions, key=lambda p: PRECISION_BITS[p]) if precisions else "f32"


def precision_check(used: Sequence[str], allowed: Sequence[str]) -> CheckVerdict:
    bad = [p for p in used if p not in allowed]
    if bad:
        return False, (
            f"uses {', '.join(bad)} but this problem allows only {', '.join(allowed)} at its tolerance; "
            f"set math = {allowed[-1] if allowed else 'f32'} (or a higher precision)"
        )
    return True, ""
