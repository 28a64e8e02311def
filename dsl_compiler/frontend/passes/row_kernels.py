"""Reductions, softmax, normalizations and scans the lowering wrote as PyTorch steps become row kernels
(``dsl_compiler.row_ops``), and the element-wise steps that follow one (over its value and each other's, read
by nothing else) become its tail: ``softmax`` then ``mul`` then ``relu`` is one kernel storing ``relu(acc * 2.0)``,
a GroupNorm then Swish one storing ``acc * sigmoid(acc)``. A scan takes in the steps that make it reverse
(``x.flip(d).cumsum(d).flip(d)``) or exclusive (``cumsum(x, d) - x``). Max, average and adaptive average
pools (1-3 spatial dims, functional or module) become pool row kernels. A step whose arguments have no row-kernel form (a dtype, a norm order other than 1, 2 or "fro", dims that are not adjacent) stays."""

from __future__ import annotations

from typing import Any

from dsl_compiler import ir, ops, row_ops, shapes

# torch-step function -> the row function it is (norm is decided by its p)
_ROW_STEPS = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "prod": "prod", "logsumexp": "logsumexp",
              "norm": "norm", "softmax": "softmax", "log_softmax": "log_softmax", "layer_norm": "layer_norm",
              "rms_norm": "rms_norm", "argmax": "argmax", "argmin": "argmin", "group_norm": "group_norm",
              "instance_norm": "instance_norm", "normalize": "normalize", "cumsum": "cumsum", "cumprod": "cumprod"}
# pools: F.max_pool2d and friends (nn.MaxPool2d traces to the same step); the spatial rank is in the name
_POOL_STEPS = {f"{kind}{k}d": (fn, k) for kind, fn in (("max_pool", "max_pool"), ("avg_pool", "avg_pool"),
                                                      ("adaptive_avg_pool", "adaptive_avg_pool")) for k in (1, 2, 3)}
# their arguments after x, in PyTorch's order
_POOL_ARGS = {"max_pool": ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
              "avg_pool": ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
              "adaptive_avg_pool": ("output_size",)}
# reductions whose second positional argument is keepdim
_KEEPDIM_POSITIONAL = ("sum", "mean", "amax", "amin", "prod", "logsumexp", "argmax", "argmin")
# torch.max / torch.min over a dim give (values, indices): a value kernel and an index kernel, each read of x once
_PAIR_STEPS = {"max": ("amax", "argmax"), "min": ("amin", "argmin")}


def _kwargs(step: ir.TorchStep) -> dict[str, Any]:
    return {kw.key: kw.value for kw in step.kwargs}


def _tensor(arg: Any) -> str | None:
    return arg.name if isinstance(arg, ir.TensorArg) and arg.channels is None else None


def row_op_of(step: ir.TorchStep, types: dict[str, shapes.TensorType]) -> ir.RowOp | None:
    """The row op a torch step computes, or None where it has no row-kernel form."""
    if step.fn in _POOL_STEPS:
        return _pool_op(step, types)
    fn = _ROW_STEPS.get(step.fn)
    if fn is None or step.channels is not None or len(step.outputs) != 1 or not step.args:
        return None
    x = _tensor(step.args[0])
    if x is None or x not in types or types[x].dtype == "i64" or not types[x].shape:
        return None
    rank = len(types[x].shape)
    kw = _kwargs(step)
    positional = [a.value if isinstance(a, ir.LiteralArg) else a for a in step.args[1:]]
    if "dtype" in kw:
        return None
    values: dict[str, Any] = {}
    if fn in row_ops.GROUPED:
        grouped = _grouped_norm(fn, positional, kw, rank)
        if grouped is None:
            return None
        values.update(grouped)
    elif fn in ("layer_norm", "rms_norm"):
        shape = kw.get("normalized_shape", positional[0] if positional else None)
        shape = (shape,) if isinstance(shape, int) else shape
        rest = [p for p in positional[1:]]
        weight = kw.get("weight", rest[0] if rest else None)
        bias = kw.get("bias", rest[1] if len(rest) > 1 else None) if fn == "layer_norm" else None
        if not isinstance(shape, tuple) or not shape:
            return None
        names = [w.name if isinstance(w, ir.TensorArg) else w for w in (weight, bias)]
        if any(n is not None and not isinstance(n, str) for n in names):
            return None
        eps = kw.get("eps", 1e-5 if fn == "layer_norm" else None)
        if eps is None:  # rms_norm's default eps is the dtype's machine epsilon
            eps = 1.1920928955078125e-07 if types[x].dtype == "f32" else 0.0078125 if types[x].dtype == "bf16" else 0.0009765625
        values.update(dim=tuple(range(rank - len(shape), rank)), eps=float(eps),
                      weight=ir.Operand(name=names[0]) if names[0] else None,
                      bias=ir.Operand(name=names[1]) if names[1] else None)
    elif fn == "normalize":  # F.normalize(x, p=2.0, dim=1, eps=1e-12)
        p, dim = kw.get("p", positional[0] if positional else 2.0), kw.get("dim", positional[1] if len(positional) > 1 else 1)
        eps = kw.get("eps", positional[2] if len(positional) > 2 else 1e-12)
        if isinstance(p, bool) or p not in (1, 2) or not isinstance(dim, int) or not isinstance(eps, int | float):
            return None
        values.update(p=int(p), dim=(dim,), eps=float(eps))
    else:
        dim = kw.get("dim", positional[0] if positional and fn not in ("norm",) else None)
        if fn == "norm":
            p = kw.get("p", positional[0] if positional else "fro")
            if p == "fro":
                p = 2
            if p not in (1, 2) or isinstance(p, bool):
                return None
            values["p"] = int(p)
            dim = kw.get("dim", positional[1] if len(positional) > 1 else None)
        if dim is None:
            if fn in ("softmax", "log_softmax", "cumsum", "cumprod"):
                return None
            dim = tuple(range(rank))  # every dim: one value
        values["dim"] = tuple(dim) if isinstance(dim, tuple | list) else (dim,)
        keep = kw.get("keepdim", positional[1] if fn in _KEEPDIM_POSITIONAL and len(positional) > 1 else False)
        if not isinstance(keep, bool):
            return None
        if row_ops.ROW_FNS[fn].kind == "reduce":
            values["keepdim"] = keep
    op = ir.RowOp(fn=fn, x=ir.Operand(name=x), **values)
    try:
        row_ops.geometry(op, types[x].shape)
    except Exception:  # noqa: BLE001 - dims with no row form (not adjacent): the step stays
        return None
    return op


def _pool_op(step: ir.TorchStep, types: dict[str, shapes.TensorType]) -> ir.RowOp | None:
    """The pool row op of a max_pool / avg_pool / adaptive_avg_pool step; None where it has none (indices asked
    for, arguments that are not integers, or what PyTorch itself would refuse)."""
    fn, k = _POOL_STEPS[step.fn]
    if step.channels is not None or len(step.outputs) != 1 or not step.args:
        return None
    x = _tensor(step.args[0])
    if x is None or x not in types or types[x].dtype == "i64":
        return None
    names = _POOL_ARGS[fn]
    positional = [a.value if isinstance(a, ir.LiteralArg) else a for a in step.args[1:]]
    if len(positional) > len(names) or any(kw.key not in names for kw in step.kwargs):
        return None
    args = dict(zip(names, positional)) | _kwargs(step)
    shape = types[x].shape

    def vec(value: Any, default: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
        if value is None or value == () or value == []:
            return default
        v = tuple(value) if isinstance(value, tuple | list) else (value,) * k
        if len(v) == 1 and k > 1:
            v = v * k
        return v if len(v) == k and all(isinstance(e, int) and not isinstance(e, bool) for e in v) else None

    if fn == "adaptive_avg_pool":
        size = args.get("output_size")
        size = tuple(size) if isinstance(size, tuple | list) else (size,) * k
        if len(size) != k or len(shape) < k:
            return None
        # None keeps the input's extent
        size = tuple(shape[len(shape) - k + i] if s is None else s for i, s in enumerate(size))
        values: dict[str, Any] = {"output_size": vec(size)}
    else:
        kernel = vec(args.get("kernel_size"))
        values = {"kernel_size": kernel, "stride": vec(args.get("stride"), kernel), "padding": vec(args.get("padding", 0)),
                  "ceil_mode": args.get("ceil_mode", False)}
        if fn == "max_pool":
            if args.get("return_indices", False) is not False:
                return None  # the indices have no row-kernel form
            values["dilation"] = vec(args.get("dilation", 1))
        else:
            values["count_include_pad"] = args.get("count_include_pad", True)
            values["divisor_override"] = args.get("divisor_override")
            if values["divisor_override"] is not None and (isinstance(values["divisor_override"], bool)
                                                           or not isinstance(values["divisor_override"], int)):
                return None
        if not all(isinstance(values[f], bool) for f in values if f in ("ceil_mode", "count_include_pad")):
            return None
    if any(v is None for key, v in values.items() if key != "divisor_override"):
        return None
    op = ir.RowOp(fn=fn, x=ir.Operand(name=x), dim=(), **values)
    try:
        row_ops.output_shape(op, shape)
    except Exception:  # noqa: BLE001 - a pool PyTorch would refuse (or a rank it does not fit): the step stays
        return None
    if fn == "adaptive_avg_pool" and all(o == 1 for o in op.output_size):
        # a global average pool is a mean over the spatial dims: a CTA per plane, not a thread walking all of it
        return ir.RowOp(fn="mean", x=op.x, dim=tuple(range(len(shape) - k, len(shape))), keepdim=True)
    return op


def _split_pair(step: Any, types: dict[str, shapes.TensorType], readers: dict[str, int], outputs: set[str]) -> list:
    """``torch v, i = max(x, dim=1)`` as ``argmax`` giving i, then ``amax`` giving v (next to v's element-wise
    followers, which fuse into its tail); an output nobody reads is dropped. Any other step: itself."""
    fns = _PAIR_STEPS.get(step.fn) if isinstance(step, ir.TorchStep) else None
    if fns is None or len(step.outputs) != 2 or step.channels is not None:
        return [step]
    singles = [step.model_copy(update={"fn": fn, "outputs": (name,)})
               for fn, name in zip(reversed(fns), reversed(step.outputs))]
    if row_op_of(singles[1], types) is None:
        return [step]
    return [s for s in singles if readers.get(s.outputs[0]) or s.outputs[0] in outputs]


def _grouped_norm(fn: str, positional: list[Any], kw: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """A group_norm / instance_norm step's row-op fields: ``group_norm(x, G, w, b, eps=)``,
    ``instance_norm(x, w, b, eps=)``; None for running statistics or a rank without channels."""
    rest = list(positional)
    values: dict[str, Any] = {"dim": (1,)}
    if fn == "group_norm":
        groups = kw.get("num_groups", rest.pop(0) if rest else None)
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            return None
        values["groups"] = groups
    elif kw.get("running_mean") is not None or kw.get("running_var") is not None or not kw.get("use_input_stats", True):
        return None  # normalizing with running statistics is an affine map, not a row kernel
    weight, bias = kw.get("weight", rest[0] if rest else None), kw.get("bias", rest[1] if len(rest) > 1 else None)
    for key, arg in (("weight", weight), ("bias", bias)):
        if arg is not None and not isinstance(arg, ir.TensorArg):
            return None
        values[key] = ir.Operand(name=arg.name) if arg is not None else None
    eps = kw.get("eps", 1e-5)
    if rank < 2 or isinstance(eps, bool) or not isinstance(eps, int | float):
        return None
    values["eps"] = float(eps)
    return values


def _tail_of(step: ir.TorchStep, env: dict[str, Any]) -> ir.Expr | None:
    """The expression of an element-wise step whose tensors are all values of the tail so far (``env``: value ->
    its expression over acc) and literals, or None."""
    form = next((op for op in ops.OPS.values() if step.fn in op.torch), None)
    # F.silu(x) and friends trace with inplace=False, which changes nothing here
    kwargs = [kw for kw in step.kwargs if not (kw.key == "inplace" and kw.value is False)]
    if form is None or kwargs and form.form != "param":
        return None
    args, tensors = [], 0
    for a in step.args:
        if isinstance(a, ir.TensorArg):
            if a.name not in env or a.channels is not None:
                return None
            args.append(env[a.name])
            tensors += 1
        elif isinstance(a.value, int | float) and not isinstance(a.value, bool):
            args.append(ir.Const(value=float(a.value)))
        else:
            return None
    if form.form == "unary" and len(args) == 1 and tensors == 1:
        return ir.Unary(fn=form.name, arg=args[0])
    if form.form == "binary" and len(args) == 2 and tensors:
        return ir.Binary(fn=form.name, lhs=args[0], rhs=args[1])
    return None


def _fused_tail(steps: list, start: int, value: str, readers: dict[str, int], outputs: set[str]) -> tuple[int, list]:
    """How many steps from ``start`` fuse into the tail of the row op storing ``value``, and (name, expression over
    acc) of each value they make: each step element-wise over the tail's values (``x * sigmoid(x)`` reads the op's
    value twice), the longest run after which every value but the last is read by the run alone and is no output."""
    env: dict[str, Any] = {value: ir.Acc()}
    made: list = []
    read: dict[str, int] = {}
    best = 0
    j = start
    while j < len(steps) and isinstance(steps[j], ir.TorchStep) and len(steps[j].outputs) == 1:
        expr = _tail_of(steps[j], env)
        if expr is None:
            break
        for a in steps[j].args:
            if isinstance(a, ir.TensorArg):
                read[a.name] = read.get(a.name, 0) + 1
        name = steps[j].outputs[0]
        env[name] = expr
        made.append((name, expr))
        j += 1
        inner = [value] + [n for n, _ in made[:-1]]  # every value the run made but its last one
        if all(readers.get(n, 0) == read.get(n, 0) and n not in outputs for n in inner):
            best = len(made)
    return best, made[:best]


def row_kernels(program: ir.Program, namer=None) -> tuple[ir.Program, dict[str, str]]:
    """The program with its row-op torch steps as row kernels (their element-wise followers fused), and
    output -> kernel name for each step that moved into a kernel (for the coverage rows)."""
    try:
        types = shapes.infer(program)
    except Exception:  # noqa: BLE001 - a program whose shapes do not infer is left as it is
        return program, {}
    readers: dict[str, int] = {}
    for step in program.steps:
        names = [a.name for a in step.args if isinstance(a, ir.TensorArg)] if isinstance(step, ir.TorchStep) else \
            [o.name for o in step.operands] + [n.name for s in step.stores for n in _refs(s.expr)]
        for n in names:
            readers[n] = readers.get(n, 0) + 1
    outputs = set(program.outputs)
    steps = [single for step in program.steps for single in _split_pair(step, types, readers, outputs)]
    moved: dict[str, str] = {}
    out: list[Any] = []
    i = 0
    used_names = {getattr(s, "name", None) for s in steps}
    while i < len(steps):
        step = steps[i]
        op = row_op_of(step, types) if isinstance(step, ir.TorchStep) else None
        if op is None:
            out.append(step)
            i += 1
            continue
        value = step.outputs[0]
        expr: Any = ir.Acc()
        kernel_name = f"{value}_row"
        while kernel_name in used_names:
            kernel_name += "_"
        used_names.add(kernel_name)
        fused = [value]
        j = i + 1
        if row_ops.is_scan(op):
            op, value, j, taken = _scan_pattern(op, steps, out, i, types, readers, outputs)
            fused += taken
        if not row_ops.ROW_FNS[op.fn].index:
            count, made = _fused_tail(steps, j, value, readers, outputs)
            if count:
                value, expr = made[-1]
                fused += [name for name, _ in made]
                j += count
        index_op = row_ops.ROW_FNS[op.fn].index
        dtype = "i64" if index_op else types[value].dtype
        out.append(ir.RowKernel(name=kernel_name, op=op, stores=(ir.Store(name=value, dtype=dtype, expr=expr),)))
        for name in fused:
            moved[name] = kernel_name
        i = j
    return program.model_copy(update={"steps": tuple(out)}), moved


def _only_reader(name: str, readers: dict[str, int], outputs: set[str]) -> bool:
    return readers.get(name, 0) == 1 and name not in outputs


def _flip_of(step: Any, name: str, dim: int, rank: int) -> bool:
    """Whether ``step`` is ``flip(name, (dim,))``."""
    if not isinstance(step, ir.TorchStep) or step.fn != "flip" or len(step.args) != 2 or step.kwargs:
        return False
    dims = step.args[1].value if isinstance(step.args[1], ir.LiteralArg) else None
    return (_tensor(step.args[0]) == name and isinstance(dims, tuple) and len(dims) == 1
            and isinstance(dims[0], int) and dims[0] % rank == dim % rank)


def _scan_pattern(op: ir.RowOp, steps: list, out: list, i: int, types: dict[str, shapes.TensorType],
                  readers: dict[str, int], outputs: set[str]) -> tuple[ir.RowOp, str, int, list[str]]:
    """A scan at ``steps[i]`` with the steps around it that make it reverse (a flip of its input just before,
    read by it alone, and a flip of its value just after) or exclusive (``cumsum(x) - x`` just after): the op,
    the value it then stores, the index of the next step, and the values taken in. The flip before leaves
    ``out``."""
    value, j = steps[i].outputs[0], i + 1
    rank, dim = len(types[op.x.name].shape), op.dim[0]
    taken: list[str] = []
    before = out[-1] if out else None
    if (before is not None and _flip_of(before, _tensor(before.args[0]) or "", dim, rank) and before.outputs == (op.x.name,)
            and _only_reader(op.x.name, readers, outputs) and j < len(steps) and _flip_of(steps[j], value, dim, rank)
            and _only_reader(value, readers, outputs)):
        out.pop()
        taken += [op.x.name, steps[j].outputs[0]]
        op = op.model_copy(update={"x": ir.Operand(name=_tensor(before.args[0])), "reverse": True})
        value, j = steps[j].outputs[0], j + 1
    nxt = steps[j] if j < len(steps) else None
    if (op.fn == "cumsum" and isinstance(nxt, ir.TorchStep) and nxt.fn == "sub" and len(nxt.args) == 2 and not nxt.kwargs
            and [_tensor(a) for a in nxt.args] == [value, op.x.name] and _only_reader(value, readers, outputs)):
        op = op.model_copy(update={"exclusive": True})
        taken.append(nxt.outputs[0])
        value, j = nxt.outputs[0], j + 1
    return op, value, j, taken


def _refs(expr: Any) -> list[ir.Ref]:
    from dsl_compiler.walk import expr_nodes

    return [n for n in expr_nodes(expr) if isinstance(n, ir.Ref)]
