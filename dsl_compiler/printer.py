"""IR -> canonical μCUTLASS text. ``parse(format_program(p))[0] == p`` for every valid program."""

from __future__ import annotations

import math
from typing import Any

from dsl_compiler import ir
from dsl_compiler.parser import Comments

_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
# Binding strength: sums < products < unary minus < atoms.
_PREC = {"add": 1, "sub": 1, "mul": 2, "div": 2}
_DEFAULTS = ir.KernelConfig()
_ROW_DEFAULTS = ir.RowConfig()


def format_number(value: float) -> str:
    if math.isnan(value):
        raise ValueError("a constant cannot be NaN")
    return repr(float(value))  # inf and -inf print as the language writes them


def format_expr(expr: Any) -> str:
    return _expr(expr, 0)


def _expr(e: Any, context: int) -> str:
    """``context`` is the binding strength the surrounding position needs."""
    if isinstance(e, ir.Acc):
        return "acc"
    if isinstance(e, ir.Const):
        text = format_number(e.value)
        # a negative literal binds like unary minus
        return f"({text})" if text.startswith("-") and context > 2 else text
    if isinstance(e, ir.Ref):
        return e.name if e.index == "full" else f"{e.name}[{e.index}]"
    if isinstance(e, ir.Unary):
        if e.fn == "neg" and not isinstance(e.arg, ir.Const):
            text = "-" + _expr(e.arg, 3)
            return f"({text})" if context > 2 else text
        return f"{e.fn}({_expr(e.arg, 0)})"
    if isinstance(e, ir.Binary):
        if e.fn in _OPERATORS:
            prec = _PREC[e.fn]
            # left-associative: the right operand needs one level more
            text = f"{_expr(e.lhs, prec)} {_OPERATORS[e.fn]} {_expr(e.rhs, prec + 1)}"
            return f"({text})" if prec < context else text
        return f"{e.fn}({_expr(e.lhs, 0)}, {_expr(e.rhs, 0)})"
    if isinstance(e, ir.ParamCall):
        params = ", ".join(format_number(p) for p in e.params)
        return f"{e.fn}({_expr(e.arg, 0)}, {params})"
    if isinstance(e, ir.Reduce):
        return f"{e.fn}({_expr(e.arg, 0)})"
    raise TypeError(f"not an expression: {type(e).__name__}")


def format_literal(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_number(value)
    if isinstance(value, str):
        if '"' in value or "\\" in value or "\n" in value:
            raise ValueError(f"a string literal cannot contain quotes, backslashes or newlines: {value!r}")
        return f'"{value}"'
    if isinstance(value, tuple | list):
        items = [format_literal(v) for v in value]
        if len(items) == 1:
            return f"({items[0]},)"
        return "(" + ", ".join(items) + ")"
    raise TypeError(f"not a literal: {value!r}")


def _operand(o: ir.Operand) -> str:
    return o.name + ("^T" if o.transpose else "")


def _tuple(values: tuple[int, ...]) -> str:
    return str(values[0]) if len(values) == 1 else "(" + ", ".join(str(v) for v in values) + ")"


def format_op(op: Any) -> str:
    if isinstance(op, ir.GemmOp):
        return f"gemm({_operand(op.a)}, {_operand(op.b)})"
    if isinstance(op, ir.GroupedGemmOp):
        return f"grouped_gemm({_operand(op.a)}, {_operand(op.b)}, group_sizes={format_literal(op.group_sizes)})"
    if isinstance(op, ir.ConvTransposeOp):
        return (f"{op.fn}({_operand(op.x)}, {_operand(op.w)}, stride={_tuple(op.stride)}, "
                f"padding={_tuple(op.padding)}, output_padding={_tuple(op.output_padding)}, "
                f"dilation={_tuple(op.dilation)}, groups={op.groups})")
    if isinstance(op, ir.ConvOp):
        return (f"conv{op.spatial_dims}d({_operand(op.x)}, {_operand(op.w)}, stride={_tuple(op.stride)}, "
                f"padding={_tuple(op.padding)}, dilation={_tuple(op.dilation)}, groups={op.groups})")
    if isinstance(op, ir.RowOp):
        return format_row_op(op)
    raise TypeError(f"not an op: {type(op).__name__}")


def _pool_tuple(values: tuple[int, ...]) -> str:
    """Always a tuple: its length is the pool's spatial rank."""
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def format_row_op(op: ir.RowOp) -> str:
    """``softmax(x, dim=-1)``: the tensors, then dim, then only the options away from their defaults."""
    tensors = [o for o in (op.x, op.weight, op.bias) if o is not None]
    parts = [_operand(o) for o in tensors]
    if op.fn == "adaptive_avg_pool":
        return f"{op.fn}({parts[0]}, output_size={_pool_tuple(op.output_size)})"
    if op.fn in ("max_pool", "avg_pool"):  # every window value, then the flags away from PyTorch's defaults
        parts += [f"{key}={_pool_tuple(getattr(op, key))}" for key in ("kernel_size", "stride", "padding")]
        if op.fn == "max_pool":
            parts.append(f"dilation={_pool_tuple(op.dilation)}")
        if op.ceil_mode:
            parts.append("ceil_mode=True")
        if not op.count_include_pad:
            parts.append("count_include_pad=False")
        if op.divisor_override is not None:
            parts.append(f"divisor_override={op.divisor_override}")
        return f"{op.fn}({', '.join(parts)})"
    if op.fn == "group_norm":
        parts.append(f"groups={op.groups}")
    elif op.fn != "instance_norm":  # the grouped norms' dim is the channel dim, implied
        parts.append(f"dim={_tuple(op.dim) if len(op.dim) == 1 else format_literal(op.dim)}")
    if op.fn in ("norm", "normalize"):
        parts.append(f"p={op.p}")
    if op.keepdim:
        parts.append("keepdim=True")
    parts += [f"{flag}=True" for flag in ("reverse", "exclusive") if getattr(op, flag)]
    if op.fn in ("layer_norm", "rms_norm", "group_norm", "instance_norm", "normalize"):
        parts.append(f"eps={format_number(op.eps)}")
    return f"{op.fn}({', '.join(parts)})"


def _knob_text(key: str, value: Any) -> str:
    if key in ("tile", "cluster"):
        return "x".join(str(v) for v in value) if value is not None else "auto"
    if key == "alignment":
        return "auto" if value is None else str(value)
    return str(value)


# Knobs in print order, one line per group; a knob at its default is left out.
_KNOB_LINES = (
    ("math", "accum", "alignment"),
    ("tile", "cluster", "stages", "schedule"),
    ("raster", "swizzle", "decomposition", "split_k"),
)


_ROW_KNOB_LINES = (("vector", "rows_per_block", "passes", "split"),)


def _config_lines(config: ir.KernelConfig | ir.RowConfig) -> list[tuple[tuple[str, ...], str]]:
    """(knobs on the line, text) for each printed line of knobs."""
    lines = []
    row = isinstance(config, ir.RowConfig)
    defaults = _ROW_DEFAULTS if row else _DEFAULTS
    for keys in _ROW_KNOB_LINES if row else _KNOB_LINES:
        shown = tuple(k for k in keys if getattr(config, k) != getattr(defaults, k))
        if shown:
            lines.append((shown, "; ".join(f"{k} = {_knob_text(k, getattr(config, k))}" for k in shown)))
    return lines


def format_config(config: ir.KernelConfig) -> list[str]:
    return [text for _, text in _config_lines(config)]


class _Placer:
    """Puts each comment once beside the statement it belongs to; what no printed statement takes goes at the end."""

    def __init__(self, comments: Comments | None):
        self.comments = comments
        self.placed: set[tuple[str, tuple]] = set()

    def _take(self, table: str, key: tuple) -> list[str]:
        if self.comments is None or (table, key) in self.placed:
            return []
        self.placed.add((table, key))
        return list(getattr(self.comments, table).get(key, ()))

    def leading(self, *keys: tuple) -> list[str]:
        return [text for key in keys for text in self._take("leading", key)]

    def line(self, text: str, *keys: tuple) -> list[str]:
        """The statement's line with its leading comments above it and its trailing ones at its end."""
        trailing = [t for key in keys for t in self._take("trailing", key)]
        return self.leading(*keys) + [text + "".join(f"  {t}" for t in trailing)]

    def rest(self) -> list[str]:
        if self.comments is None:
            return []
        out = []
        for table in ("leading", "trailing"):
            for key in getattr(self.comments, table):
                out += self._take(table, key)
        return out


def format_kernel(k: ir.Kernel | ir.RowKernel, placer: _Placer | None = None) -> str:
    placer = placer or _Placer(None)
    body: list[str] = []
    config_lines = _config_lines(k.config)
    shown = {knob for knobs, _ in config_lines for knob in knobs}
    # comments of knobs left out at their default value open the body, so no text is lost
    if placer.comments is not None:
        for table in ("leading", "trailing"):
            for key in getattr(placer.comments, table):
                if key[:2] == ("knob", k.name) and key[2] not in shown:
                    body += placer._take(table, key)
    for knobs, text in config_lines:
        body += placer.line(text, *[("knob", k.name, knob) for knob in knobs])
    for let in k.lets:
        body += placer.line(f"let {let.name} = {format_expr(let.expr)}", ("let", k.name, let.name))
    for s in k.stores:
        where = f"[{s.channels[0]}:{s.channels[1]}]" if s.channels else ""
        body += placer.line(f"store {s.name}{where}: {s.dtype} = {format_expr(s.expr)}", ("store", k.name, s.name))
    body += placer.leading(("kernel_end", k.name))
    head = placer.leading(("kernel", k.name)) + placer.line(f"kernel {k.name} = {format_op(k.op)} {{",
                                                             ("kernel_head", k.name))
    close = placer.line("}", ("kernel", k.name))
    return "\n".join(head) + "\n" + "".join(f"  {line}\n" for line in body) + "\n".join(close)


def _channels(channels: tuple[int, int] | None) -> str:
    return f"[{channels[0]}:{channels[1]}]" if channels else ""


def format_torch_step(t: ir.TorchStep) -> str:
    args = [a.name + _channels(a.channels) if isinstance(a, ir.TensorArg) else format_literal(a.value) for a in t.args]
    args += [f"{kw.key}={format_literal(kw.value)}" for kw in t.kwargs]
    return f"torch {', '.join(t.outputs)}{_channels(t.channels)} = {t.fn}({', '.join(args)})"


def format_decl(d: ir.TensorDecl) -> str:
    text = f"{d.kind} {d.name}: {d.dtype}[{', '.join(str(s) for s in d.shape)}]"
    if d.layout != "contiguous":
        text += f" {d.layout}"
    if d.source is not None:
        text += f" = {format_literal(d.source)}"
    return text


def format_step(step: ir.Kernel | ir.RowKernel | ir.TorchStep, placer: _Placer | None = None) -> str:
    if isinstance(step, ir.Kernel | ir.RowKernel):
        return format_kernel(step, placer)
    placer = placer or _Placer(None)
    return "\n".join(placer.line(format_torch_step(step), ("torch", step.outputs)))


def format_program(program: ir.Program, comments: Comments | None = None) -> str:
    """Canonical text: the name, declarations, steps in order, then the output line. With ``comments`` (from
    ``parser.collect_comments``), each comment is printed beside its statement; none is dropped."""
    placer = _Placer(comments)
    parts: list[str] = []
    if program.name is not None:
        parts.append("\n".join(placer.line(f"program {program.name}", ("program",))))
    if program.decls:
        parts.append("\n".join(line for d in program.decls for line in placer.line(format_decl(d), ("decl", d.name))))
    parts += [format_step(s, placer) for s in program.steps]
    parts.append("\n".join(placer.line(f"output {', '.join(program.outputs)}", ("output",))))
    end = placer.leading(("end",)) + placer.rest()
    if end:
        parts.append("\n".join(end))
    return "\n\n".join(parts) + "\n"


def program_key(program: ir.Program) -> str:
    """The key of a program's value (an immutable string): equal for programs that differ only in how
    their text was written (layout, comments, spans), different for any change of meaning."""
    return format_program(program)


def format_source(text: str) -> tuple[str | None, list]:
    """Canonical text of a program's source, its comments kept: (text, []) or (None, diagnostics)."""
    from dsl_compiler.parser import collect_comments, parse

    program, diags = parse(text)
    if program is None:
        return None, diags
    return format_program(program, collect_comments(text)), []
