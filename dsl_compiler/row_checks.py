"""Static checks of a row kernel (a reduction, softmax, normalization, scan or pool; ``row_ops``): its shapes, its tail
expressions, its store types and its knobs, each a Diagnostic with a location and a one-line fix."""

from __future__ import annotations

from typing import Any

from dsl_compiler import ir, row_ops
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.tensor_types import ShapeError
from dsl_compiler.walk import expr_nodes


def _diag(code: str, message: str, span: ir.Span | None, found: Any = None, expected: Any = None,
          hint: str | None = None) -> Diagnostic:
    return Diagnostic(code=code, message=message, span=span, found=None if found is None else str(found),
                      expected=None if expected is None else str(expected), hint=hint)


def check_row_kernel(kernel: ir.RowKernel, types: dict[str, Any]) -> tuple[list[Diagnostic], tuple[int, ...] | None]:
    """The kernel's diagnostics and its output shape (None when its shapes do not work out)."""
    name = kernel.name
    try:
        out = row_ops.op_output(kernel, types)
    except ShapeError as exc:
        return [_diag(exc.code, f"kernel '{name}': {exc.message}", exc.span or kernel.span, exc.found, exc.expected,
                      exc.hint)], None
    diags = _check_tail(kernel, types, out) + _check_stores(kernel) + _check_knobs(kernel, types)
    return diags, out


def _check_tail(kernel: ir.RowKernel, types: dict[str, Any], out: tuple[int, ...]) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    lets = {let.name for let in kernel.lets}
    for owner, expr in [(let, let.expr) for let in kernel.lets] + [(s, s.expr) for s in kernel.stores]:
        for node in expr_nodes(expr):
            span = getattr(node, "span", None) or owner.span
            if isinstance(node, ir.Reduce):
                diags.append(_diag("reduction", f"kernel '{kernel.name}': {node.fn} in a row kernel's tail", span,
                                   found=f"{node.fn}(...)", expected="element-wise functions of acc",
                                   hint="reduce in a row kernel of its own: kernel s = sum(y, dim=-1) { ... }"))
            if not isinstance(node, ir.Ref) or node.name in lets:
                continue
            t = types.get(node.name)
            if t is None:
                continue  # the name check reports it
            if node.index in ("row", "col"):
                diags.append(_diag("shape-mismatch", f"kernel '{kernel.name}': '{node.name}[{node.index}]' in a row "
                                   "kernel", span, found=f"{node.name}[{node.index}]",
                                   expected=f"{node.name} (shaped {list(out)}) or {node.name}[scalar]",
                                   hint="a row kernel's tail reads tensors of its output's shape, or one value; "
                                        "an affine per normalized element is layer_norm's weight and bias"))
            elif node.index == "full" and tuple(t.shape) != tuple(out):
                diags.append(_diag("shape-mismatch", f"kernel '{kernel.name}': '{node.name}' is read whole but its "
                                   "shape is not the output's", span, found=f"{node.name} {list(t.shape)}",
                                   expected=str(list(out)), hint=f"read a tensor shaped {list(out)}, or "
                                   f"{node.name}[scalar] for one value"))
            elif node.index == "scalar" and t.numel != 1:
                diags.append(_diag("shape-mismatch", f"kernel '{kernel.name}': '{node.name}[scalar]' needs a "
                                   "one-element tensor", span, found=f"{node.name} {list(t.shape)}",
                                   expected="one element", hint="write a literal number instead"))
            elif t.dtype == "i64":
                diags.append(_diag("dtype", f"kernel '{kernel.name}': the tail reads '{node.name}', an index tensor",
                                   span, found="i64", expected="f32, bf16 or f16",
                                   hint="indices from argmax / argmin are outputs, not epilogue inputs"))
    return diags


def _check_stores(kernel: ir.RowKernel) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    fn = row_ops.ROW_FNS[kernel.op.fn]
    for s in kernel.stores:
        if s.channels is not None:
            diags.append(_diag("unsupported", f"kernel '{kernel.name}': a slice store from a row kernel", s.span,
                               found=f"store {s.name}[{s.channels[0]}:{s.channels[1]}]", expected=f"store {s.name}",
                               hint="store the whole output; concatenate in a torch step (cat)"))
        if fn.index and (s.dtype != "i64" or not isinstance(s.expr, ir.Acc)):
            diags.append(_diag("dtype", f"kernel '{kernel.name}': {fn.name} gives indices; its store is `i64 = acc`",
                               s.span, found=f"{s.dtype} = ...", expected=f"store {s.name}: i64 = acc",
                               hint="write the indices as they are; compute on them in a torch step"))
        elif not fn.index and s.dtype == "i64":
            diags.append(_diag("dtype", f"kernel '{kernel.name}': an i64 store of {fn.name}", s.span, found="i64",
                               expected="f32, bf16 or f16", hint="only argmax and argmin store i64 indices"))
    return diags


def _check_knobs(kernel: ir.RowKernel, types: dict[str, Any]) -> list[Diagnostic]:
    diags: list[Diagnostic] = []
    op, cfg = kernel.op, kernel.config
    if row_ops.is_pool(op):  # a thread per output element walks its window: nothing to choose
        for knob in row_ops.ROW_KNOB_VALUES:
            value = getattr(cfg, knob)
            if value is not None and not (knob == "split" and value == 1):
                diags.append(_diag("config", f"kernel '{kernel.name}': {knob} on {op.fn}, a pool", cfg.span_of(knob),
                                   found=f"{knob} = {value}", expected="no knobs (a thread per output element)",
                                   hint=f"remove the {knob} line"))
        return diags
    tx = types[op.x.name]
    _, rows, inner = row_ops.geometry(op, tuple(tx.shape))
    contiguous = rows if inner == 1 else inner
    elem = ir.ELEMENT_BYTES[tx.dtype]
    reduce = row_ops.is_reduction(op)
    if cfg.vector is not None:
        if cfg.vector * elem > 16:
            diags.append(_diag("alignment", f"kernel '{kernel.name}': vector = {cfg.vector} of {tx.dtype} is "
                               f"{cfg.vector * elem} bytes per load", cfg.span_of("vector"),
                               found=f"{cfg.vector * elem} bytes", expected="at most 16 bytes",
                               hint=f"use vector = {16 // elem} or less"))
        elif contiguous % cfg.vector:
            what = "row length" if inner == 1 else "extent after the reduced dims"
            diags.append(_diag("alignment", f"kernel '{kernel.name}': vector = {cfg.vector} does not divide the "
                               f"{what} {contiguous}", cfg.span_of("vector"), found=f"{contiguous} elements",
                               expected=f"a multiple of {cfg.vector}",
                               hint=f"use vector = {row_ops.max_vector(tx.dtype, contiguous)}"))
    if row_ops.is_scan(op):  # a CTA scans a contiguous row, a thread a strided column
        for knob, wrong in (("rows_per_block", cfg.rows_per_block not in (None, 1)), ("passes", cfg.passes is not None),
                            ("split", cfg.split > 1)):
            if wrong:
                diags.append(_diag("config", f"kernel '{kernel.name}': {knob} on {op.fn}, a scan", cfg.span_of(knob),
                                   found=f"{knob} = {getattr(cfg, knob)}", expected=f"no {knob} knob (a CTA scans a row, "
                                   "reading x once)", hint="a scan takes vector (elements per thread per chunk) only"))
        return diags
    if cfg.rows_per_block is not None and cfg.rows_per_block > 1 and inner != 1:
        diags.append(_diag("config", f"kernel '{kernel.name}': rows_per_block = {cfg.rows_per_block} on a strided "
                           f"reduction (dim {op.dim} is not the last)", cfg.span_of("rows_per_block"),
                           found=f"inner extent {inner}", expected="rows_per_block = 1 (or auto)",
                           hint="a strided reduction gives each thread a column already; leave rows_per_block at auto"))
    if cfg.passes is not None and reduce:
        diags.append(_diag("config", f"kernel '{kernel.name}': passes on {op.fn}, a reduction", cfg.span_of("passes"),
                           found=f"passes = {cfg.passes}", expected="no passes knob (a reduction reads x once)",
                           hint="for a long row with few rows, use split = N instead"))
    if cfg.passes == 1 and not reduce and inner > 1:
        diags.append(_diag("config", f"kernel '{kernel.name}': passes = 1 on a strided {op.fn} (dim {op.dim} is not "
                           "the last)", cfg.span_of("passes"), found="passes = 1", expected="passes = 2 or auto",
                           hint="a strided segment is read again per column; leave passes at auto"))
    elif cfg.passes == 1 and not reduce:
        rpb = cfg.rows_per_block or 1
        limit = (row_ops.THREADS if rpb == 1 else 32) * row_ops.MAX_VALUES_PER_THREAD
        if rows > limit:
            diags.append(_diag("smem", f"kernel '{kernel.name}': passes = 1 keeps a row of {rows} in registers",
                               cfg.span_of("passes"), found=f"{rows} values per row",
                               expected=f"at most {limit} with rows_per_block = {rpb}",
                               hint="use passes = 2 (x is read again), or leave passes at auto"))
    if cfg.split > 1:
        if not reduce or inner != 1:
            diags.append(_diag("config", f"kernel '{kernel.name}': split = {cfg.split} on "
                               f"{'a strided reduction' if reduce else op.fn}", cfg.span_of("split"),
                               found=f"split = {cfg.split}", expected="split on a reduction over the last dims",
                               hint="split shares one contiguous row among CTAs; use split = 1 here"))
        elif cfg.split > row_ops.MAX_SPLIT or cfg.split > rows:
            diags.append(_diag("config", f"kernel '{kernel.name}': split = {cfg.split} for rows of {rows}",
                               cfg.span_of("split"), found=f"split = {cfg.split}",
                               expected=f"at most {min(row_ops.MAX_SPLIT, rows)}", hint="use a smaller split"))
        elif cfg.rows_per_block not in (None, 1):
            diags.append(_diag("config", f"kernel '{kernel.name}': split with rows_per_block = {cfg.rows_per_block}",
                               cfg.span_of("split"), found="both", expected="one of them",
                               hint="split is for few long rows, rows_per_block for many short ones"))
    return diags
