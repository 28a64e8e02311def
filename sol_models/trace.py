"""What the offline tier starts from for a problem: the frontend's program, its coverage (the share of
the problem's FLOPs that run in CUTLASS kernels), the ops left to PyTorch steps with their reasons, and
the program's estimate. Backs `mucutlass trace`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dsl_compiler.walk import epilogue_refs
from sol_models.counting import ProblemLoadError, ProgramCountError, count_problem, load_module, program_traffic
from sol_models.estimate import ProgramEstimate, estimate_program
from run_vocabulary.problem import Problem, ProblemValue


class TorchOp(BaseModel):
    """One op of the reference that runs as a PyTorch step (or could not be lowered at all)."""

    op: str
    target: str
    placement: str  # torch_step | unsupported
    reason: str


class TraceReport(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    name: str
    traced: bool
    error: str = ""  # one line naming the construct that stopped tracing
    program: str = ""  # the program's text
    coverage: float = 0.0  # kernel FLOPs / problem FLOPs, 0..1
    flops_problem: float = 0.0
    flops_kernels: float = 0.0
    kernels: int = 0
    torch_steps: int = 0
    torch_ops: list[TorchOp] = Field(default_factory=list)
    estimate: ProgramEstimate | None = None
    estimate_error: str = ""


class TraceFailed(Exception):
    """The problem file cannot be loaded or run; the message is one line."""


def _as_problem(problem: Problem | str | Path) -> Problem:
    """A loaded problem (``module``, ``name``, ``path``) from a path or a loaded problem."""
    if isinstance(problem, (str, Path)):
        path = Path(problem)
        try:
            module = load_module(path)
        except ProblemLoadError as exc:
            raise TraceFailed(str(exc)) from None
        return ProblemValue(name=path.stem, path=str(path), module=module)
    return problem


def statistics_passes(program: Any) -> set[str]:
    """Kernels whose outputs only feed ``var_mean`` steps: first passes that measure a BatchNorm's batch
    statistics before the kernel runs again with the norm folded in. Their work is the statistics' cost,
    not the problem's ops, so coverage does not count it twice."""
    from dsl_compiler import ir

    readers: dict[str, set[str]] = {}
    for step in program.steps:
        names = [a.name for a in step.args if isinstance(a, ir.TensorArg)] if isinstance(step, ir.TorchStep) else \
            [o.name for o in step.operands] + [r.name for r in epilogue_refs(step)]
        for name in names:
            readers.setdefault(name, set()).add(step.fn if isinstance(step, ir.TorchStep) else "kernel")
    return {k.name for k in program.kernels
            if all(readers.get(s.name) == {"var_mean"} and s.name not in program.outputs for s in k.stores)}


# A BatchNorm's normalise and affine FLOPs per element (of the 8 sol_models.counting gives a norm; mean and
# variance are the other 4): a kernel reading a filter from a fold_batch_norm step does them in its GEMM.
_FOLDED_NORM_FLOPS = 4.0


def _padding_share(program: Any, kernel: Any, state_shapes: dict[str, tuple[int, ...]] | None) -> float:
    """The share of a kernel's work that is the problem's: a weight declared larger than the model's tensor
    (zero-padded channels, rows or columns) scales it by the real size over the declared one."""
    import math

    share = 1.0
    for operand in kernel.operands if state_shapes else ():
        decl = program.decl(operand.name)
        real = state_shapes.get(decl.source or decl.name) if decl is not None and decl.kind == "param" else None
        if real is not None and math.prod(decl.shape) > math.prod(real) > 0:
            share *= math.prod(real) / math.prod(decl.shape)
    return share


def kernel_flops(program: Any, state_shapes: dict[str, tuple[int, ...]] | None = None) -> float:
    """FLOPs of the problem that a program's CUTLASS kernels take: their GEMM / conv work, their epilogues,
    and the normalisation of a BatchNorm folded into their weights (statistics passes aside; with the model's
    ``state_shapes``, a kernel padded to 16-byte rows counts its real channels only)."""
    from dsl_compiler import ir

    steps, _ = program_traffic(program)
    skip = statistics_passes(program)
    folded = {out for step in program.steps if isinstance(step, ir.TorchStep) and step.fn == "fold_batch_norm"
              for out in step.outputs[:1]}
    total = 0.0
    for kernel, s in zip((st for st in program.steps if isinstance(st, ir.Kernel)), (t for t in steps if t.kind == "kernel")):
        if s.name in skip:
            continue
        work = s.flops_tensor + s.flops_other
        if s.dims is not None and any(o.name in folded for o in kernel.operands):
            work += _FOLDED_NORM_FLOPS * s.dims[0] * s.dims[1] * s.dims[2]
        total += work * _padding_share(program, kernel, state_shapes)
    # row kernels (reductions, softmax, norms) run the problem's work of those ops
    total += sum(t.flops_other for t in steps if t.kind == "row")
    return total


def state_shapes_of(problem: Problem) -> dict[str, tuple[int, ...]] | None:
    """The shapes of the model's state_dict (built on the meta device), None where it cannot be built."""
    import torch

    module = problem.module
    try:
        init = list(module.get_init_inputs()) if hasattr(module, "get_init_inputs") else []
        with torch.device("meta"):
            model = module.Model(*init)
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}
    except Exception:  # noqa: BLE001 - coverage then counts padded kernels whole
        return None


def coverage_of(program: Any, problem_flops: float, state_shapes: dict[str, tuple[int, ...]] | None = None) -> tuple[float, float]:
    """(coverage, kernel FLOPs): the share of ``problem_flops`` the program's kernels run, clamped to
    0..1 (the program's epilogue rules and the problem's count can differ by an op or two)."""
    flops = kernel_flops(program, state_shapes)
    if problem_flops <= 0:
        return (1.0 if flops > 0 else 0.0), flops
    return max(0.0, min(1.0, flops / problem_flops)), flops


def _quietly(fn, *args):
    """Run ``fn`` with torch's loggers muted: torch.export prints the graph it gave up on to stderr, and
    the frontend turns that failure into a diagnostic of its own."""
    import contextlib
    import io
    import logging

    loggers = [logging.getLogger(name) for name in ("torch", "torch.export", "torch._dynamo", "torch.fx")]
    levels = [lg.level for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        with contextlib.redirect_stderr(io.StringIO()):
            return fn(*args)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def trace_report(problem: Problem | str | Path, gpu: Any | None = None, options: Any = None) -> TraceReport:
    """Trace ``problem`` (a path or a loaded problem) and measure what its program covers.

    Raises TraceFailed for a file that cannot be loaded or run; a model the frontend cannot trace
    gives ``traced=False`` with ``error`` naming the construct."""
    from dsl_compiler.frontend import trace_problem
    from dsl_compiler.printer import format_program

    problem = _as_problem(problem)
    name = problem.name or "problem"
    result = _quietly(trace_problem, problem, options)
    if result.program is None:
        diag = next((d for d in result.diagnostics if d.severity == "error"), None) or (result.diagnostics or [None])[0]
        message = diag.message.splitlines()[0] if diag is not None else "no program and no diagnostic"
        return TraceReport(name=name, traced=False, error=message,
                           torch_ops=[TorchOp(op=r.op, target=r.target, placement=r.placement, reason=r.reason)
                                      for r in result.coverage if r.placement == "unsupported"])
    try:
        work = count_problem(problem)
    except ProblemLoadError as exc:
        raise TraceFailed(str(exc)) from None
    program = result.program
    report = TraceReport(
        name=name, traced=True, program=format_program(program), flops_problem=work.flops,
        kernels=len(program.kernels) + len(program.row_kernels), torch_steps=len(program.torch_steps),
        torch_ops=[TorchOp(op=r.op, target=r.target, placement=r.placement, reason=r.reason)
                   for r in result.coverage if r.placement in ("torch_step", "unsupported")],
    )
    try:
        report.coverage, report.flops_kernels = coverage_of(program, work.flops, _quietly(state_shapes_of, problem))
        if gpu is None:
            from sol_models.hardware import get_gpu

            gpu = get_gpu("h200")
        report.estimate = estimate_program(program, gpu)
    except ProgramCountError as exc:
        report.estimate_error = str(exc)
    return report


class TraceRow(BaseModel):
    """One problem of a coverage table (`mucutlass trace --suite` / `--kernelbench`)."""

    name: str
    path: str
    traced: bool
    error: str = ""  # why not traced: one line
    coverage: float = 0.0
    kernels: int = 0
    torch_ops: list[TorchOp] = Field(default_factory=list)


def trace_row(path: Path, report_of: Any) -> TraceRow:
    """The row of one problem file, ``report_of(path)`` its ``TraceReport``; a problem that fails to load or crashes
    while tracing is a row with its reason, never an exception that ends the table."""
    try:
        report = report_of(path)
    except Exception as exc:  # noqa: BLE001 - TraceFailed, a child that died or ran past its limit, a frontend fault
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return TraceRow(name=Path(path).stem, path=str(path), traced=False, error=text)
    return TraceRow(name=Path(path).stem, path=str(path), traced=report.traced, error=report.error,
                    coverage=report.coverage, kernels=report.kernels, torch_ops=report.torch_ops)
