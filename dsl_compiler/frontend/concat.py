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


def _channel_cat(cat: TorchStep, types: dict) -> list[str] | None:
    """The tensors a cat joins along the channels of a 3-5-dimensional result, each once; None otherwise."""
    t_out = types[cat.outputs[0]]
    tensors = [a.name for a in cat.args if isinstance(a, TensorArg)]
    if (_cat_dim(cat) not in (1, -len(t_out.shape) + 1) or len(t_out.shape) not in (3, 4, 5)
            or len(set(tensors)) != len(tensors)):
        return None
    return tensors


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
        tensors = _channel_cat(cat, types)
        if tensors is None or t_out.layout != "channels_last":
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


def cat_prefix_families(program: Program) -> tuple[Program, dict[str, list[str]]]:
    """Channel ``cat`` steps whose tensors are each a prefix of one longest ``cat``'s (a DenseNet block: every
    layer reads all earlier features) become one tensor the writers fill: conv kernels store into their channels,
    other tensors are copied in once by ``torch y[a:b] = channels_last(t)``, and each shorter ``cat`` is read as
    the channels written so far, ``y[0:c]`` (a view). Returns the program and, per replaced step's output, the
    tensor that holds it."""
    try:
        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - left for the checks to explain
        return program, {}
    done: dict[str, list[str]] = {}
    cats = [s for s in program.steps if isinstance(s, TorchStep) and s.fn == "cat" and s.channels is None]
    claimed: set[int] = set()
    for longest in sorted(cats, key=lambda s: -len(s.args)):
        if id(longest) in claimed:
            continue
        out = longest.outputs[0]
        t_out = types[out]
        tensors = _channel_cat(longest, types)
        if tensors is None or any(a.channels for a in longest.args if isinstance(a, TensorArg)):
            continue
        family = [c for c in cats if id(c) not in claimed and _cat_dim(c) == _cat_dim(longest)
                  and [a.name for a in c.args if isinstance(a, TensorArg)] == tensors[:len(
                      [a for a in c.args if isinstance(a, TensorArg)])]]
        if len(family) < 2:
            continue
        steps = list(program.steps)
        order = {id(s): i for i, s in enumerate(steps)}
        family_ids = {id(c) for c in family}
        nbytes = ir.ELEMENT_BYTES[t_out.dtype]
        widths = [types[name].shape[1] for name in tensors]
        offsets = [sum(widths[:i]) for i in range(len(widths))]
        readers: dict[str, list] = {}
        for step in steps:
            for name in ([a.name for a in step.args if isinstance(a, TensorArg)] if isinstance(step, TorchStep)
                         else [o.name for o in step.operands]):
                readers.setdefault(name, []).append(step)
        producer = {name: step for step in steps
                    for name in (step.outputs if isinstance(step, TorchStep) else [s.name for s in step.stores])}
        shorter = [c for c in family if c is not longest]
        if (any(types[name].dtype != t_out.dtype or len(types[name].shape) != len(t_out.shape) for name in tensors)
                or any(o * nbytes % _TMA_BYTES for o in offsets + [sum(widths)])
                or any(c.outputs[0] in program.outputs for c in shorter)
                or any(not isinstance(r, TorchStep) for c in shorter for r in readers.get(c.outputs[0], []))
                or any(isinstance(r, Kernel) and any(ref == c.outputs[0] for ref in _epilogue_names(r))
                       for c in shorter for r in steps)):
            continue
        stores: dict[int, dict[str, tuple[int, int]]] = {}
        copies: dict[int, list[TorchStep]] = {}  # family cat id -> copies to put before it
        for name, offset, width in zip(tensors, offsets, widths):
            kernel = producer.get(name)
            only_cats = all(id(r) in family_ids for r in readers.get(name, [])) and name not in program.outputs
            if (isinstance(kernel, Kernel) and isinstance(kernel.op, ir.ConvOp) and kernel.op.groups == 1 and only_cats
                    and types[name].layout == "channels_last"
                    and any(s.name == name and s.channels is None and not isinstance(s.expr, ir.Reduce)
                            for s in kernel.stores)):
                stores.setdefault(id(kernel), {})[name] = (offset, offset + width)
                continue
            first_use = min((c for c in family if name in [a.name for a in c.args if isinstance(a, TensorArg)]),
                            key=lambda c: order[id(c)])
            copies.setdefault(id(first_use), []).append(TorchStep(
                outputs=(out,), fn="channels_last", args=(TensorArg(name=name),), channels=(offset, offset + width)))
        prefix = {c.outputs[0]: sum(widths[:len([a for a in c.args if isinstance(a, TensorArg)])]) for c in shorter}
        rewritten = []
        for step in steps:
            if id(step) in copies:
                rewritten.extend(copies[id(step)])
            if id(step) in family_ids:
                continue
            if isinstance(step, Kernel) and id(step) in stores:
                slices = stores[id(step)]
                step = step.model_copy(update={"stores": tuple(
                    s.model_copy(update={"name": out, "channels": slices[s.name]}) if s.name in slices else s
                    for s in step.stores)})
            elif isinstance(step, TorchStep) and any(isinstance(a, TensorArg) and a.name in prefix for a in step.args):
                step = step.model_copy(update={"args": tuple(
                    TensorArg(name=out, channels=(0, prefix[a.name])) if isinstance(a, TensorArg) and a.name in prefix
                    else a for a in step.args)})
            rewritten.append(step)
        candidate = program.model_copy(update={"steps": tuple(rewritten)})
        try:
            types = shapes.infer(candidate)
        except Exception:  # noqa: BLE001 - a family this rewrite cannot type is left as it was
            types = shapes.infer(program)
            continue
        program = candidate
        claimed |= family_ids
        writers = [k.name for k in program.kernels if any(s.name == out and s.channels for s in k.stores)]
        for c in family:
            done[c.outputs[0]] = writers
        cats = [s for s in program.steps if isinstance(s, TorchStep) and s.fn == "cat" and s.channels is None]
    return program, done


def _epilogue_names(kernel: Kernel) -> list[str]:
    from dsl_compiler.walk import epilogue_refs

    return [r.name for r in epilogue_refs(kernel)]
