"""What the offline tier starts from for a problem: the frontend's program, its coverage (the share of
the problem's FLOPs that run in CUTLASS kernels), the ops left to PyTorch steps with their reasons, and
the program's estimate. Backs `mucutlass trace`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sol_models.counting import ProblemLoadError, ProgramCountError, count_problem, load_module, program_traffic
from sol_models.estimate import ProgramEstimate, estimate_program


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


def _as_problem(problem: Any) -> Any:
    """A loaded problem (``module``, ``name``, ``path``) from a path or a loaded problem."""
    if isinstance(problem, (str, Path)):
        path = Path(problem)
        try:
            module = load_module(path)
        except ProblemLoadError as exc:
            raise TraceFailed(str(exc)) from None
        return SimpleNamespace(name=path.stem, path=str(path), module=module)
    return problem


def kernel_flops(program: Any) -> float:
    """FLOPs a program's CUTLASS kernels compute: their GEMM / conv work and their epilogues."""
    steps, _ = program_traffic(program)
    return sum(s.flops_tensor + s.flops_other for s in steps if s.kind == "kernel")


def coverage_of(program: Any, problem_flops: float) -> tuple[float, float]:
    """(coverage, kernel FLOPs): the share of ``problem_flops`` the program's kernels run, clamped to
    0..1 (the program's epilogue rules and the problem's count can differ by an op or two)."""
    flops = kernel_flops(program)
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


def trace_report(problem: Any, gpu: Any | None = None, options: Any = None) -> TraceReport:
    """Trace ``problem`` (a path or a loaded problem) and measure what its program covers.

    Raises TraceFailed for a file that cannot be loaded or run; a model the frontend cannot trace
    gives ``traced=False`` with ``error`` naming the construct."""
    from dsl_compiler.frontend import trace_problem
    from dsl_compiler.printer import format_program

    problem = _as_problem(problem)
    name = getattr(problem, "name", None) or "problem"
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
        kernels=len(program.kernels), torch_steps=len(program.steps) - len(program.kernels),
        torch_ops=[TorchOp(op=r.op, target=r.target, placement=r.placement, reason=r.reason)
                   for r in result.coverage if r.placement in ("torch_step", "unsupported")],
    )
    try:
        report.coverage, report.flops_kernels = coverage_of(program, work.flops)
        if gpu is None:
            from sol_models.hardware import get_gpu

            gpu = get_gpu("h200")
        report.estimate = estimate_program(program, gpu)
    except ProgramCountError as exc:
        report.estimate_error = str(exc)
    return report
