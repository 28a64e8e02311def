"""Load a program as a ``torch.nn.Module`` on a backend.

The module runs the program's steps in order over an environment name -> tensor. A kernel step is run
by the backend's executor (``run_kernel(program, kernel, env) -> {store: tensor}``): the interpreter, or
``dsl_compiler.cutlass_runtime.CutlassExecutor`` for built CUTLASS kernels. Torch steps run through
``torch_steps.run`` on every backend.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable, Literal

import torch
from torch import nn

from dsl_compiler import interpreter, ir, shapes, torch_steps
from dsl_compiler.run_settings import RUNTIME_SETTINGS, RuntimeOptions, runtime_setting  # noqa: F401 - re-exported

Backend = Literal["interpreter", "cutlass"]
# What ``ProgramModule.step_scope`` is: called with each step as it runs (``None`` for the fused input casts, one
# launch for several cast steps), it returns a context the step runs inside (a profiler range, say)
StepScope = Callable[["ir.Step | None"], AbstractContextManager]


class BindError(ValueError):
    """A param cannot be bound from the model (missing key, wrong shape); the message says which."""


def bind_params(program: ir.Program, model: nn.Module) -> dict[str, torch.Tensor]:
    """Each declared param from the model's ``state_dict`` (by its key; else a plain tensor attribute of that path),
    in the declared element type and layout, laid out once here so that calls pay nothing."""
    # a plain tensor attribute (an initial state set in __init__) by its path, where no state_dict key has it
    state = {**(plain_tensor_attributes(model) if isinstance(model, nn.Module) else {}), **model.state_dict()}
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
            elif tensor.dim() == len(decl.shape) and all(d >= t for d, t in zip(decl.shape, tensor.shape)):
                pass  # declared larger: zero-padded once by as_declared
            else:
                raise BindError(f"param '{decl.name}' ('{key}') is declared {list(decl.shape)} "
                                f"but the model's is {list(tensor.shape)}")
        params[decl.name] = interpreter.as_declared(tensor, decl)
    return params


def plain_tensor_attributes(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors held as plain attributes (not parameters or buffers, so outside its state_dict), by
    dotted path: KernelBench's recurrent models draw their initial state ``self.h0 = torch.randn(...)`` in __init__."""
    found = {}
    for prefix, module in model.named_modules():
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter) and not name.startswith("_"):
                found[f"{prefix}.{name}" if prefix else name] = value
    return found


def module_paths(program: ir.Program) -> list[str]:
    """The submodules the program's ``module`` steps call, by path."""
    return list(dict.fromkeys(k.value for s in program.torch_steps if s.fn == "module" for k in s.kwargs
                              if k.key == "path"))


def bind_modules(program: ir.Program, model: nn.Module) -> dict[str, nn.Module]:
    """The model's submodules the program's ``module`` steps call (parts torch.fx cannot follow), by path; path ""
    is the whole model (a forward torch.fx cannot follow at all: all of the work is PyTorch's)."""
    modules = {}
    for path in module_paths(program):
        try:
            modules[path] = model.get_submodule(path) if isinstance(path, str) else None
        except AttributeError:
            modules[path] = None
        if not isinstance(modules[path], nn.Module):
            raise BindError(f"module step '{path}': the model has no submodule at that path")
    return modules


def make_executor(program: ir.Program, backend: Backend, artifacts: Any = None) -> Any:
    if backend == "interpreter":
        return interpreter.InterpreterExecutor(program, artifacts)
    if backend == "cutlass":
        from dsl_compiler.cutlass_runtime import CutlassExecutor  # needs built kernels and a GPU

        return CutlassExecutor(program, artifacts)
    raise ValueError(f"unknown backend '{backend}': use interpreter or cutlass")


_BUFFER_PREFIX = "param__"


class ProgramModule(nn.Module):
    """A μCUTLASS program as a module: ``forward(*inputs)`` returns the one output, or a tuple.

    With ``options.cuda_graph`` calls replay a CUDA graph of the whole program where that is valid
    (``cutlass_runtime.ProgramGraphs``: eager otherwise, outputs always new tensors; never for a program
    with ``module`` steps, whose Python may sync with the host or branch on values).

    ``step_scope`` (None: the steps run bare) wraps each step in the context it returns for it, e.g. a profiler
    range per step (``benchmarks/profile_programs.py``)."""

    step_scope: StepScope | None = None

    def __init__(self, program: ir.Program, executor: Any, params: dict[str, torch.Tensor],
                 modules: dict[str, nn.Module] | None = None, *, options: RuntimeOptions | None = None):
        super().__init__()
        self.program = program
        self.executor = executor
        # the reference's submodules that `module` steps call; registered so they follow .to(device)
        self.opaque = nn.ModuleDict({f"m{i}": m for i, m in enumerate((modules or {}).values())})
        self._opaque_paths = {f"m{i}": path for i, path in enumerate(modules or {})}
        self.options = options or RuntimeOptions()
        self._slice_totals = shapes.slice_totals(program)  # channels of the tensors slices fill (store y[a:b])
        # the input casts as one launch, where the executor can (CUTLASS); the other steps run as written
        self.cast_jobs: list[dict] = []
        self.rest = tuple(program.steps)
        if self.options.fused_casts and hasattr(executor, "run_fused_casts"):
            from dsl_compiler import fused_cast

            jobs = fused_cast.plan_input_casts(program)
            self.cast_jobs = [j.as_dict() for j in jobs]
            self.rest = fused_cast.remaining_steps(program, jobs)
        self.graphs = None
        if self.options.cuda_graph and not module_paths(program):
            from dsl_compiler.cutlass_runtime import ProgramGraphs  # torch only; loads no kernel

            self.graphs = ProgramGraphs(self._run)
        missing = [d.name for d in program.params if d.name not in params]
        if missing:
            raise BindError(f"params not bound: {', '.join(missing)}")
        # buffers follow .to(device) with the module; the prefix keeps them clear of nn.Module's attributes
        for decl in program.params:
            self.register_buffer(_BUFFER_PREFIX + decl.name, params[decl.name], persistent=False)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        params = {decl.name: getattr(self, _BUFFER_PREFIX + decl.name) for decl in self.program.params}
        outputs = (self.graphs or self._run)(list(inputs), params)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _run(self, inputs: list[torch.Tensor], params: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        env = interpreter.bind_inputs(self.program, inputs)
        env.update(params)
        modules = {self._opaque_paths[key]: m for key, m in self.opaque.items()}
        steps = self.program.steps
        scope = self.step_scope
        if self.cast_jobs:
            with scope(None) if scope is not None else nullcontext():
                cast = self.executor.run_fused_casts(self.cast_jobs, env)
            if cast is not None:
                env.update(cast)
                steps = self.rest
        for step in steps:
            if scope is None:
                env.update(self._step(step, env, modules))
            else:
                with scope(step):
                    env.update(self._step(step, env, modules))
        return [env[name] for name in self.program.outputs]

    def _step(self, step: ir.Step, env: dict, modules: dict) -> dict:
        if isinstance(step, ir.Kernel | ir.RowKernel):
            return self.executor.run_kernel(self.program, step, env)
        return torch_steps.run(step, env, modules, self._slice_totals)


def load(program: ir.Program, backend: Backend, params: dict[str, torch.Tensor], artifacts: Any = None,
         modules: dict[str, nn.Module] | None = None, options: RuntimeOptions | None = None) -> nn.Module:
    """The program as an ``nn.Module`` running on ``backend`` ("interpreter" or "cutlass"); ``modules`` binds
    its ``module`` steps (``bind_modules``); ``options`` says how it runs (default: as written, eagerly)."""
    return ProgramModule(program, make_executor(program, backend, artifacts), params, modules, options=options)


class CutlassProgramModule(ProgramModule):
    """A program as a torch Module on the CUTLASS backend (``ProgramModule`` with a
    ``CutlassExecutor``); params are re-laid out to their declared layouts once, here."""

    def __init__(self, program: ir.Program, params: dict[str, torch.Tensor], artifacts: dict[str, str],
                 options: RuntimeOptions | None = None):
        from dsl_compiler.cutlass_runtime import CutlassError, CutlassExecutor  # needs built kernels and a GPU

        missing = [d.name for d in program.params if d.name not in params]
        if missing:
            raise CutlassError(f"param(s) not bound: {', '.join(missing)}")
        bound = {d.name: interpreter.as_declared(params[d.name], d) for d in program.params}
        super().__init__(program, CutlassExecutor(program, artifacts), bound, options=options)
