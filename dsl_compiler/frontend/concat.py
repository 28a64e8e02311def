"""Concatenation along channels as slice stores: the kernels computing the branches of a ``cat`` step store
into their channels of one tensor (``store y[a:b]``), and the step goes away.

A branch qualifies when its tensor is a kernel's full store read by the ``cat`` alone: a conv kernel's
channels-last output, or a GEMM's rows of channels (a 1x1 conv run as a GEMM) seen through the free
``reshape`` / ``permute`` views the lowering puts after it. The concatenated tensor keeps its name; when
its first writer is a GEMM, it is that GEMM's [rows, channels] and the same two views give it its shape.
"""

from __future__ import annotations

import math

from dsl_compiler import ir, shapes
from dsl_compiler.ir import Kernel, LiteralArg, Program, TensorArg, TorchStep

_TMA_BYTES = 16  # a slice starts and a row ends on a 16-byte boundary (TMA's rule, checks.py says the same)


def _cat_dim(step: TorchStep) -> int | None:
    dims = [k.value for k in step.kwargs if k.key == "dim"] + [a.value for a in step.args if isinstance(a, LiteralArg)]
    if len(dims) > 1 or any(k.key != "dim" for k in step.kwargs):
        return None
    return dims[0] if dims else 0


def _reads(steps, outputs) -> dict[str, int]:
    from dsl_compiler.walk import epilogue_refs

    counts: dict[str, int] = {}
    for step in steps:
        names = ([a.name for a in step.args if isinstance(a, TensorArg)] if isinstance(step, TorchStep)
                 else [o.name for o in step.operands] + [r.name for r in epilogue_refs(step)])
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    for name in outputs:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _branch(name: str, producer: dict, reads: dict[str, int], types) -> tuple[Kernel, str, list[TorchStep]] | None:
    """(kernel, its store, the view steps between) when the ``cat`` argument ``name`` can be a slice store."""
    views: list[TorchStep] = []
    t = types[name]
    if reads.get(name) != 1:
        return None
    step = producer.get(name)
    if isinstance(step, TorchStep):  # permute(reshape(rows, (N, *spatial, C)), (0, r - 1, 1, ..., r - 2))
        rank = len(t.shape)
        if step.fn != "permute" or step.args[1:] != (LiteralArg(value=(0, rank - 1, *range(1, rank - 1))),):
            return None
        inner = step.args[0].name
        reshape = producer.get(inner)
        if (not isinstance(reshape, TorchStep) or reshape.fn != "reshape" or reads.get(inner) != 1
                or types[inner].shape != (t.shape[0], *t.shape[2:], t.shape[1])):
            return None
        views = [reshape, step]
        name = reshape.args[0].name
        step = producer.get(name)
        if not isinstance(step, Kernel) or not isinstance(step.op, ir.GemmOp) or reads.get(name) != 1:
            return None
        if types[name].shape[-1] != t.shape[1] or math.prod(types[name].shape) != math.prod(t.shape):
            return None
    elif not (isinstance(step, Kernel) and isinstance(step.op, ir.ConvOp) and step.op.groups == 1
              and t.layout == "channels_last"):
        return None
    store = next((s for s in step.stores if s.name == name), None)
    if store is None or store.channels is not None or isinstance(store.expr, ir.Reduce):
        return None
    return step, name, views


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def cat_as_slice_stores(program: Program) -> tuple[Program, dict[str, list[str]]]:
    """The program with every qualifying channel ``cat`` step replaced by slice stores; and, for each replaced
    step's output, the kernels that now store into it."""
    try:
        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - a program the shape pass rejects is left for the checks to explain
        return program, {}
    steps = list(program.steps)
    taken = set(types) | {k.name for k in program.kernels}
    done: dict[str, list[str]] = {}
    for cat in [s for s in steps if isinstance(s, TorchStep) and s.fn == "cat"]:
        out = cat.outputs[0]
        t_out = types[out]
        tensors = [a.name for a in cat.args if isinstance(a, TensorArg)]
        if (_cat_dim(cat) not in (1, -len(t_out.shape) + 1) or len(t_out.shape) not in (3, 4, 5)
                or t_out.layout != "channels_last" or len(set(tensors)) != len(tensors)):
            continue
        producer = {}
        for step in steps:
            for name in (step.outputs if isinstance(step, TorchStep) else [s.name for s in step.stores]):
                producer[name] = step
        reads = _reads(steps, program.outputs)
        branches = [_branch(name, producer, reads, types) for name in tensors]
        nbytes = ir.ELEMENT_BYTES[t_out.dtype]
        widths = [types[name].shape[1] for name in tensors]
        offsets = [sum(widths[:i]) for i in range(len(widths))]
        if (any(b is None for b in branches) or any(types[name].dtype != t_out.dtype for name in tensors)
                or any(o * nbytes % _TMA_BYTES for o in offsets + [sum(widths)])):
            continue
        order = {id(s): i for i, s in enumerate(steps)}
        first = min((b[0] for b in branches), key=lambda k: order[id(k)])
        target = out if isinstance(first.op, ir.ConvOp) else _fresh(f"{out}_rows", taken)
        writers = {}
        for (kernel, store_name, _), offset, width in zip(branches, offsets, widths):
            writers[id(kernel)] = writers.get(id(kernel), {})
            writers[id(kernel)][store_name] = (offset, offset + width)
        dropped = {id(v) for b in branches for v in b[2]}
        rewritten = []
        for step in steps:
            if id(step) in dropped:
                continue
            if isinstance(step, Kernel) and id(step) in writers:
                slices = writers[id(step)]
                stores = tuple(s.model_copy(update={"name": target, "channels": slices[s.name]}) if s.name in slices
                               else s for s in step.stores)
                step = step.model_copy(update={"stores": stores})
            if step is cat:
                if target != out:  # the GEMM's [rows, C] seen as [N, C, *spatial] channels-last: two free views
                    n, c, *spatial = t_out.shape
                    nhwc = _fresh(f"{out}_nhwc", taken)
                    rank = len(t_out.shape)
                    rewritten.append(TorchStep(outputs=(nhwc,), fn="reshape", args=(
                        TensorArg(name=target), LiteralArg(value=(n, *spatial, c)))))
                    rewritten.append(TorchStep(outputs=(out,), fn="permute", args=(
                        TensorArg(name=nhwc), LiteralArg(value=(0, rank - 1, *range(1, rank - 1))))))
                continue
            rewritten.append(step)
        steps = rewritten
        done[out] = [b[0].name for b in branches]
        program = program.model_copy(update={"steps": tuple(steps)})
        try:
            types = shapes.infer(program)
        except Exception:  # noqa: BLE001 - cannot happen for a rewrite of a well-typed program; keep what was done
            return program, done
    return program, done
