"""Load a program as a ``torch.nn.Module`` on a backend.

The module runs the program's steps in order over an environment name -> tensor. A kernel step is run
by the backend's executor (``run_kernel(program, kernel, env) -> {store: tensor}``): the interpreter, or
``dsl_compiler.cutlass_runtime.CutlassExecutor`` for built CUTLASS kernels. Torch steps run through
``torch_steps.run`` on every backend.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from torch import nn

from dsl_compiler import interpreter, ir

Backend = Literal["interpreter", "cutlass"]


class BindError(ValueError):
    """A param cannot be bound from the model (missing key, wrong shape); the message says which."""


def bind_params(program: ir.Program, model: nn.Module) -> dict[str, torch.Tensor]:
    """Each declared param from the model's ``state_dict`` (by its key), in the declared element type
    and layout, laid out once here so that calls pay nothing."""
    state = model.state_dict()
    params: dict[str, torch.Tensor] = {}
    for decl in program.params:
        key = decl.source if decl.source is not None else decl.name
        if key not in state:
            close = [k for k in state if k.split(".")[-1] == key.split(".")[-1]][:5]
            raise BindError(
                f"param '{decl.name}': the model has no state_dict key '{key}'"
                + (f" (keys like it: {', '.join(close)})" if close else f" (keys: {', '.join(list(state)[:8])})")
            )
        tensor = state[key].detach()
        if tuple(tensor.shape) != tuple(decl.shape):
            if tensor.numel() == math.prod(decl.shape):
                # e.g. a conv bias declared [K, 1, 1] in the model and [K] in the program
                tensor = tensor.reshape(decl.shape)
            else:
                raise BindError(f"param '{decl.name}' ('{key}') is declared {list(decl.shape)} "
                                f"but the model's is {list(tensor.shape)}")
        params[decl.name] = interpreter.as_declared(tensor, decl)
    return params


def make_executor(program: ir.Program, backend: Backend, artifacts: Any = None) -> Any:
    if backend == "interpreter":
        return interpreter.InterpreterExecutor(program, artifacts)
    if backend == "cutlass":
        from dsl_compiler.cutlass_runtime import CutlassExecutor  # needs built kernels and a GPU

        return CutlassExecutor(program, artifacts)
    raise ValueError(f"unknown backend '{backend}': use interpreter or cutlass")


_BUFFER_PREFIX = "param__"


class ProgramModule(nn.Module):
    """A μCUTLASS program as a module: ``forward(*inputs)`` returns the one output, or a tuple."""

    def __init__(self, program: ir.Program, executor: Any, params: dict[str, torch.Tensor]):
        super().__init__()
        self.program = program
        self.executor = executor
        missing = [d.name for d in program.params if d.name not in params]
        if missing:
            raise BindError(f"params not bound: {', '.join(missing)}")
        # buffers follow .to(device) with the module; the prefix keeps them clear of nn.Module's attributes
        for decl in program.params:
            self.register_buffer(_BUFFER_PREFIX + decl.name, params[decl.name], persistent=False)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        env = interpreter.bind_inputs(self.program, inputs)
        for decl in self.program.params:
            env[decl.name] = getattr(self, _BUFFER_PREFIX + decl.name)
        interpreter.run_steps(self.program, env, self.executor.run_kernel)
        outputs = tuple(env[name] for name in self.program.outputs)
        return outputs[0] if len(outputs) == 1 else outputs


def load(program: ir.Program, backend: Backend, params: dict[str, torch.Tensor], artifacts: Any = None) -> nn.Module:
    """The program as an ``nn.Module`` running on ``backend`` ("interpreter" or "cutlass")."""
    return ProgramModule(program, make_executor(program, backend, artifacts), params)


# ---------------------------------------------------------------------------------------------
# A program against a KernelBench-format problem


class InterpretError(Exception):
    """The problem or the program cannot be run together; the message is one line."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def compare_outputs(outputs: Any, references: Any, tolerance: float) -> list[dict[str, Any]]:
    """Per output: shape, max abs error, max rel error (|out - ref| / |ref| where |ref| > tolerance), the
    worst error as a fraction of what allclose allows (``tolerance * (1 + |ref|)``; pass <= 1), and whether
    it passes ``torch.allclose(atol=rtol=tolerance)`` with finite values."""
    outs = outputs if isinstance(outputs, tuple | list) else (outputs,)
    refs = references if isinstance(references, tuple | list) else (references,)
    rows = []
    for i in range(max(len(outs), len(refs))):
        name = f"#{i}"
        if i >= len(outs) or i >= len(refs):
            rows.append({"name": name, "shape": None, "max_abs_error": float("inf"), "max_rel_error": float("inf"),
                         "ok": False, "reason": f"{len(outs)} output(s) against {len(refs)} reference output(s)"})
            continue
        o, r = outs[i].detach().float(), refs[i].detach().float().to(outs[i].device)
        if tuple(o.shape) != tuple(r.shape):
            rows.append({"name": name, "shape": list(o.shape), "max_abs_error": float("inf"),
                         "max_rel_error": float("inf"), "ok": False,
                         "reason": f"shape {list(o.shape)} against the reference's {list(r.shape)}"})
            continue
        diff = (o - r).abs()
        finite = bool(torch.isfinite(o).all())
        big = r.abs() > tolerance
        max_abs = float(diff.max()) if diff.numel() else 0.0
        max_rel = float((diff[big] / r.abs()[big]).max()) if bool(big.any()) else 0.0
        worst = float((diff / (tolerance * (1 + r.abs()))).max()) if diff.numel() else 0.0
        ok = finite and bool(torch.allclose(o, r, atol=tolerance, rtol=tolerance))
        rows.append({"name": name, "shape": list(o.shape), "max_abs_error": max_abs, "max_rel_error": max_rel,
                     "worst_over_allowed": worst, "ok": ok,
                     "reason": None if ok else ("non-finite values" if not finite else "values differ")})
    return rows


def compare_with_problem(program: ir.Program, problem_path: str, seed: int = 0, device: str | None = None,
                         tolerance: float | None = None) -> dict[str, Any]:
    """Run ``program`` on the interpreter and the problem's ``Model`` (true fp32) on the same inputs."""
    try:
        from evals.problems import ProblemError, load_problem
    except ImportError:
        raise InterpretError("problem loading (evals.problems) is not available in this installation") from None
    try:
        problem = load_problem(problem_path)
    except ProblemError as exc:
        raise InterpretError(str(exc)) from None
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    tol = float(tolerance if tolerance is not None else problem.tolerance)
    try:
        model = problem.make_model(seed=seed, device=device)
        inputs = problem.make_inputs(seed=seed, device=device)
    except Exception as exc:  # noqa: BLE001 - any failure of the problem's own code
        raise InterpretError(f"{problem_path}: the problem fails to build: {_one_line(exc)}") from None
    try:
        params = bind_params(program, model)
        module = load(program, "interpreter", params).to(device)
    except BindError as exc:
        raise InterpretError(str(exc)) from None
    with torch.no_grad():
        with interpreter.exact_fp32():
            try:
                reference = model(*inputs)
            except Exception as exc:  # noqa: BLE001
                raise InterpretError(f"{problem_path}: the reference model fails: {_one_line(exc)}") from None
        try:
            outputs = module(*inputs)
        except ValueError as exc:
            raise InterpretError(f"the program does not fit the problem's inputs: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - e.g. a torch step that fails on real data
            raise InterpretError(f"the program fails on the problem's inputs: {_one_line(exc)}") from None
    rows = compare_outputs(outputs, reference, tol)
    for row, name in zip(rows, program.outputs):
        row["name"] = name
    from dsl_compiler import shapes

    types = shapes.infer(program)
    return {
        "problem": problem.name,
        "tolerance": tol,
        "device": str(device),
        "seed": seed,
        "math": sorted({shapes.effective_math(program, k, types) for k in program.kernels}),
        "outputs": rows,
        "ok": all(r["ok"] for r in rows),
    }
