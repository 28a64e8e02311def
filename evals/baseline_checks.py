"""PyTorch's variants of the reference checked against it at the problem's tolerance, as the judge checks a
candidate: the floor (``run_vocabulary.floor``) and every table count a variant only where it passes.

The harness times eager fp32 (PyTorch's defaults: matmul fp32, cuDNN TF32), eager TF32 and torch.compile (TF32
allowed) in its worker (``Harness.reference_timings``) and keeps no outputs. This module makes each variant's
outputs on fresh input sets and compares them with the judge's reference (true fp32: no TF32 anywhere) by
the judge's rule (``evals.judge.compare.compare``: atol = rtol = the tolerance, a non-finite value where the
reference is finite is a failure; ``compare_tensors`` writes it again, since the judge is reached only through
its door, and a test holds the two to the same verdicts). The result, a ``VariantCheck`` per variant, is
recorded beside the variant's time.

Two layers, so the logic is tested on the CPU with fake outputs and the GPU path calls the same code:

- ``check_of`` and ``compare_outputs``: comparisons in, checks out (no model run);
- ``check_variants``: builds the model and the input sets on a device and runs each variant (``default_runners``,
  or runners a test passes), comparing set by set so no more than one variant's outputs are held at a time.

``checks_in_child`` runs ``check_variants`` in a child process (``python -m evals.baseline_checks``), so the
calling process never holds a CUDA context and a variant that runs out of memory or crashes costs a check,
not the run; ``Services.reference_checks`` and ``evals.harness_cli.baseline_row`` call it where the reference
was timed on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evals.judge import tf32_mode
from run_vocabulary.floor import UNCHECKED_MIN_TOLERANCE, VARIANTS, VariantCheck

MODE_ENV = "MUCUTLASS_BASELINE_CHECKS"  # auto (below UNCHECKED_MIN_TOLERANCE), on (always), off
TIMEOUT_ENV = "MUCUTLASS_BASELINE_CHECK_TIMEOUT_S"
DEFAULT_SETS = 3
DEFAULT_TIMEOUT_S = 900.0  # torch.compile of a whole model takes minutes (the judge allows its reference 900 s)


def wanted(tolerance: float | None, mode: str | None = None) -> bool:
    """Whether a run checks its reference variants: ``auto`` where the tolerance is below
    ``UNCHECKED_MIN_TOLERANCE`` (where TF32 is in doubt and an unchecked variant does not count), ``on`` always,
    ``off`` never."""
    mode = (mode or os.environ.get(MODE_ENV) or "auto").strip().lower()
    if mode in ("0", "off", "no", "false"):
        return False
    if mode in ("1", "on", "yes", "true", "all"):
        return True
    return tolerance is not None and float(tolerance) < UNCHECKED_MIN_TOLERANCE


# ---------------------------------------------------------------------------------------------
# comparisons -> checks (no model run)


def check_of(cmps: Sequence[Mapping[str, Any]] | BaseException | str, tolerance: float, source: str = "") -> VariantCheck:
    """One variant's check from the judge's comparisons of its outputs, one per input set (``compare``'s dicts:
    correct, max_abs_error, max_rel_error, text); an exception or a string: the variant did not run."""
    if isinstance(cmps, (BaseException, str)):
        why = cmps if isinstance(cmps, str) else f"{type(cmps).__name__}: {' '.join(str(cmps).split())[:200]}"
        return VariantCheck(passed=None, tolerance=tolerance, text=f"did not run: {why}", source=source)
    if not cmps:
        return VariantCheck(passed=None, tolerance=tolerance, text="no input set compared", source=source)
    failed = [c for c in cmps if not c.get("correct")]
    abs_errors = [c.get("max_abs_error") for c in cmps]
    rel_errors = [c.get("max_rel_error") for c in cmps]
    # a non-finite value where the reference is finite has no error size: None says so
    max_abs = None if any(e is None for e in abs_errors) else max(float(e) for e in abs_errors)
    max_rel = None if any(e is None for e in rel_errors) else max(float(e) for e in rel_errors)
    text = ""
    if failed:
        text = f"{len(failed)} of {len(cmps)} input sets: {failed[0].get('text') or 'outside the tolerance'}"
    return VariantCheck(passed=not failed, tolerance=tolerance, max_abs_error=max_abs, max_rel_error=max_rel,
                        sets=len(cmps), text=text, source=source)


def compare_tensors(outs: Sequence, refs: Sequence, tolerance: float) -> dict:
    """The judge's rule, through its door (``evals.judge.compare_to_reference``): a non-finite value where the
    reference is finite fails, then any element outside ``torch.isclose(atol = rtol = tolerance)``; with the
    largest absolute and relative errors."""
    from evals.judge import compare_to_reference

    return compare_to_reference([o.to(r.device) for o, r in zip(outs, refs)], list(refs), tolerance)


def compare_set(outs: Sequence, refs: Sequence, tolerance: float) -> dict:
    """One input set's outputs against the reference's (``compare_tensors``), a wrong number, type or shape of
    outputs being a failure of its own."""
    import torch

    outs, refs = list(_as_list(outs)), list(_as_list(refs))
    if len(outs) != len(refs):
        return {"correct": False, "max_abs_error": None, "max_rel_error": None, "rule": "output_type",
                "text": f"returns {len(outs)} output(s), the reference {len(refs)}"}
    pairs = [(o, r) for o, r in zip(outs, refs) if isinstance(r, torch.Tensor)]
    for i, (o, r) in enumerate(pairs):
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(r.shape) or o.dtype != r.dtype:
            return {"correct": False, "max_abs_error": None, "max_rel_error": None, "rule": "output_type",
                    "text": f"output {i} is not a {r.dtype} tensor of shape {list(r.shape)}"}
    return compare_tensors([o for o, _ in pairs], [r for _, r in pairs], tolerance)


def compare_outputs(outputs: Mapping[str, Sequence[Sequence] | BaseException | str], refs: Sequence[Sequence],
                    tolerance: float, source: str = "") -> dict[str, VariantCheck]:
    """Each variant's outputs (one list per input set, or the exception it raised) against the reference's
    outputs on the same sets."""
    out = {}
    for variant, sets in outputs.items():
        if isinstance(sets, (BaseException, str)):
            out[variant] = check_of(sets, tolerance, source)
        else:
            out[variant] = check_of([compare_set(o, r, tolerance) for o, r in zip(sets, refs)], tolerance, source)
    return out


# ---------------------------------------------------------------------------------------------
# the variants, run


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


Runner = Callable[[Any, list], Any]  # (model, inputs) -> outputs


def _eager(matmul: bool, cudnn: bool) -> Runner:
    def run(model, inputs):
        with tf32_mode(matmul, cudnn):
            return model(*inputs)
    return run


class CompiledRunner:
    """torch.compile of the model, compiled at its first call under TF32 (as ``Harness.reference_timings``)."""

    def __init__(self, compile_fn: Callable | None = None):
        self.compile_fn = compile_fn
        self.compiled = None

    def __call__(self, model, inputs):
        import torch

        with tf32_mode(matmul=True, cudnn=True):
            if self.compiled is None:
                self.compiled = (self.compile_fn or torch.compile)(model)
            return self.compiled(*inputs)


def default_runners() -> dict[str, Runner]:
    """How each variant runs, as the harness times it: eager with PyTorch's defaults (cuDNN TF32, matmul fp32),
    eager with TF32 in both, torch.compile with TF32."""
    return {"eager_fp32": _eager(matmul=False, cudnn=True), "eager_tf32": _eager(matmul=True, cudnn=True),
            "compile": CompiledRunner()}


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little") & 0x7FFF_FFFF


def _fresh(inputs: list) -> list:
    """A copy of the input set for one call: a variant that writes its inputs leaves the next one's alone."""
    import torch

    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def check_variants(problem, tolerance: float | None = None, *, device: Any = None, sets: int = DEFAULT_SETS,
                   variants: Sequence[str] = VARIANTS, runners: Mapping[str, Runner] | None = None,
                   seeds: Sequence[int] | None = None, model_seed: int | None = None) -> dict[str, VariantCheck]:
    """Every variant of ``problem``'s reference against the judge's reference (true fp32) at ``tolerance`` (the
    problem's when None), on ``sets`` input sets drawn from fresh seeds, on ``device`` (by default CUDA; without
    one nothing is checked, as TF32 there is the reference itself, unless a test names the CPU).
    A variant that raises on a set is not checked (``passed`` None, the reason in ``text``); the others go on."""
    import torch

    tol = float(problem.tolerance if tolerance is None else tolerance)
    if device is None:
        if not torch.cuda.is_available():  # TF32 is a GPU mode: on the CPU every variant is the reference itself
            return {v: VariantCheck(passed=None, tolerance=tol, text="no GPU here: the variants run on one")
                    for v in variants}
        device = "cuda"
    device = torch.device(device)
    source = "gpu" if device.type == "cuda" else device.type
    runners = dict(default_runners(), **dict(runners or {}))
    variants = [v for v in variants if v in runners]
    seeds = list(seeds) if seeds is not None else [_seed() for _ in range(sets)]
    model = problem.make_model(_seed() if model_seed is None else model_seed, device)
    cmps: dict[str, list | BaseException] = {v: [] for v in variants}
    with torch.no_grad():
        for seed in seeds:
            inputs = problem.make_inputs(seed, device)
            with tf32_mode(matmul=False, cudnn=False):  # the judge's reference: true fp32
                refs = [r.detach().contiguous() if isinstance(r, torch.Tensor) else r
                        for r in _as_list(model(*_fresh(inputs)))]
            for v in variants:
                if isinstance(cmps[v], BaseException):
                    continue
                outs = None
                try:
                    outs = runners[v](model, _fresh(inputs))
                    cmps[v].append(compare_set(outs, refs, tol))
                except Exception as exc:  # noqa: BLE001 - the variant's failure is its check's, not the others'
                    cmps[v] = exc
                del outs
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            del refs, inputs
    return {v: check_of(cmps[v], tol, source) for v in variants}


# ---------------------------------------------------------------------------------------------
# the child process


def checks_in_child(problem_path: str | Path, tolerance: float, variants: Sequence[str] = VARIANTS,
                    sets: int = DEFAULT_SETS, timeout_s: float | None = None,
                    run: Callable[..., Any] = subprocess.run) -> dict[str, VariantCheck]:
    """``check_variants`` of the problem at ``problem_path`` in a child process; a child that fails, times out
    or prints no result leaves every variant unchecked with the reason (the run goes on)."""
    timeout_s = float(timeout_s if timeout_s is not None else os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
    cmd = [sys.executable, "-m", "evals.baseline_checks", str(problem_path), "--tolerance", repr(float(tolerance)),
           "--sets", str(int(sets)), "--variants", ",".join(variants), "--json"]
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    def unchecked(why: str) -> dict[str, VariantCheck]:
        return {v: VariantCheck(passed=None, tolerance=float(tolerance), text=why) for v in variants}

    try:
        proc = run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        return unchecked(f"the check ran past {timeout_s:.0f} s")
    except OSError as exc:
        return unchecked(f"the check did not start: {exc}")
    return parse_child_output(proc.returncode, proc.stdout, proc.stderr, variants, tolerance)


def parse_child_output(returncode: int, stdout: str, stderr: str, variants: Sequence[str],
                       tolerance: float) -> dict[str, VariantCheck]:
    """The checks a child printed (its last line of JSON), every variant unchecked with the reason otherwise."""
    lines = [line for line in (stdout or "").splitlines() if line.strip().startswith("{")]
    if returncode == 0 and lines:
        try:
            data = json.loads(lines[-1])
            checks = {v: VariantCheck.from_dict(data.get(v)) for v in variants}
            return {v: c if c is not None else VariantCheck(passed=None, tolerance=float(tolerance),
                                                             text="the check returned nothing for it")
                    for v, c in checks.items()}
        except (ValueError, TypeError, AttributeError):
            pass
    tail = " ".join((stderr or "").strip().splitlines()[-1:])[:200] or f"exit status {returncode}"
    return {v: VariantCheck(passed=None, tolerance=float(tolerance), text=f"the check failed: {tail}") for v in variants}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="check PyTorch's variants of a problem's reference against it")
    ap.add_argument("problem", help="a KernelBench-format problem file")
    ap.add_argument("--tolerance", type=float, default=None, help="atol = rtol (default: the problem's)")
    ap.add_argument("--sets", type=int, default=DEFAULT_SETS)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--device", default=None, help="cuda (default where there is one) or cpu")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from evals.problems import load_problem

    problem = load_problem(args.problem)
    variants = [v for v in args.variants.split(",") if v]
    checks = check_variants(problem, args.tolerance, device=args.device, sets=args.sets, variants=variants)
    if args.json:
        print(json.dumps({v: c.to_dict() for v, c in checks.items()}))
    else:
        for v, c in checks.items():
            state = "not checked" if c.passed is None else ("passes" if c.passed else "fails")
            print(f"{v}: {state} {c.tolerance:g} over {c.sets} sets (max abs {c.max_abs_error}, max rel "
                  f"{c.max_rel_error}) {c.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
