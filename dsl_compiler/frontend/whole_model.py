"""The program of a model the lowering cannot take apart: its inputs, one ``module`` step running the whole
model (path "") and its outputs. Coverage 0: all of the work is PyTorch's, and the judge flags it so."""

from __future__ import annotations

from typing import Any

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.frontend.normalize import DTYPES, literal
from dsl_compiler.frontend.passes.naming import Namer, safe_base
from dsl_compiler.frontend.reference import LoadedReference
from dsl_compiler.frontend.results import CoverageRow, TraceResult
from dsl_compiler.ir import Kwarg, LiteralArg, Program, TensorArg, TensorDecl, TorchStep
from dsl_compiler.torch_steps import module_leaves


def whole_model_program(ref: LoadedReference, why: str) -> TraceResult | None:
    """The whole model as one PyTorch step, ``why`` its reason; None where its inputs or outputs have no program form
    (a non-float tensor, an output that is not a tensor): a diagnostic then says so."""
    import torch

    try:
        inputs, outputs = _run_once(ref)
    except Exception as exc:  # noqa: BLE001 - the model does not run on its own inputs
        return _refused(f"the model does not run on get_inputs(): {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    leaves = module_leaves(outputs)
    if leaves is None or not leaves:
        return _refused("the model returns something other than tensors")
    namer, decls, args, rows = Namer(), [], [], []
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            dtype = DTYPES.get(str(x.dtype))
            if dtype is None:
                return _refused(f"input {i} has element type {x.dtype}; the language has f32, bf16 and f16")
            name = namer(f"x{i}")
            decls.append(TensorDecl(kind="input", name=name, dtype=dtype, shape=tuple(int(d) for d in x.shape)))
            args.append(TensorArg(name=name))
            rows.append(CoverageRow(op=name, target="input", placement="input", where=name))
        else:
            try:
                args.append(LiteralArg(value=literal(x)))
            except ValueError as exc:
                return _refused(f"input {i} is {exc}")
    if not decls:
        return _refused("the model takes no tensor input")
    first = next(a for a in args if isinstance(a, TensorArg))
    first_dtype = next(d.dtype for d in decls if d.name == first.name)
    if any(DTYPES.get(str(t.dtype)) != first_dtype for t in leaves):
        return _refused("an output's element type differs from the first input's (a module step gives the first "
                        "input's)")
    names = tuple(namer(f"y{i}" if len(leaves) > 1 else "y") for i in range(len(leaves)))
    kwargs = [Kwarg(key="path", value=""), Kwarg(key="shape", value=tuple(int(d) for t in leaves for d in t.shape))]
    if len(leaves) > 1 or isinstance(outputs, (tuple, list)):
        kwargs.append(Kwarg(key="ranks", value=tuple(t.dim() for t in leaves)))
    step = TorchStep(outputs=names, fn="module", args=tuple(args), kwargs=tuple(kwargs))
    program = Program(name=safe_base(ref.name), decls=tuple(decls), steps=(step,), outputs=names)
    rows.append(CoverageRow(op="model", target=f"{ref.module.Model.__name__} (whole model)",
                            placement="torch_step", where=names[0], reason=f"{why}: the whole model runs as one PyTorch step"))
    return TraceResult(program=program, coverage=rows)


def _run_once(ref: LoadedReference) -> tuple[list[Any], Any]:
    """The model's inputs and outputs: on the meta device where it runs there (no time, no memory), else on the CPU."""
    import torch

    mod = ref.module
    init = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    error: Exception | None = None
    for device in ("meta", "cpu"):
        try:
            torch.manual_seed(0)
            with torch.device(device), torch.no_grad():
                model = mod.Model(*init)
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
                return inputs, model(*inputs)
        except Exception as exc:  # noqa: BLE001 - meta tensors have no values (.item(), a branch): run it for real
            error = exc
    raise error  # type: ignore[misc]


def _refused(message: str) -> TraceResult:
    return TraceResult(program=None, diagnostics=[Diagnostic(code="trace", message=message, hint="fix the problem file")])
