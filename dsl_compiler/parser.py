"""μCUTLASS text -> IR. ``parse`` never raises: every problem becomes a Diagnostic with a location,
what was found, what is allowed and a fix hint."""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
from pathlib import Path
from typing import Any

from lark import Lark, Token, v_args
from lark.visitors import Transformer_NonRecursive
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError
from pydantic import ValidationError

from dsl_compiler import ir
from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ops import OPS
from dsl_compiler.row_ops import ROW_FNS, ROW_KNOB_VALUES, ROWS_PER_BLOCK, VECTORS

# A program is a few kilobytes; the cap keeps a pathological input from costing minutes.
MAX_PROGRAM_CHARS = 100_000
# Nesting beyond this is never a real epilogue and would exhaust recursion in later passes.
MAX_NESTING = 64

OP_NAMES = ("gemm", "grouped_gemm", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
            "conv_transpose3d")
ROW_OP_NAMES = tuple(ROW_FNS)
ELEMENT_TYPES = ir.ElementType.__args__  # type: ignore[attr-defined]
STORE_TYPES = ir.StoreType.__args__  # type: ignore[attr-defined]
LAYOUTS = ir.Layout.__args__  # type: ignore[attr-defined]
INDEX_KINDS = ("row", "col", "scalar")
UNARY_FNS = ir.UnaryFn.__args__  # type: ignore[attr-defined]
BINARY_CALL_FNS = ("min", "max", "pow")
PARAM_FN_ARITY = {fn: len(OPS[fn].params) for fn in ir.ParamFn.__args__}  # type: ignore[attr-defined]
REDUCE_FNS = ir.ReduceFn.__args__  # type: ignore[attr-defined]
# Each knob: what it allows (a diagnostic's "expected") and an example value (its hint).
KNOB_VALUES: dict[str, tuple[str, str]] = {
    "math": ("one of f32, tf32x3, tf32, bf16, f16", "f32"),
    "accum": ("one of f32, f16", "f32"),
    "alignment": ("an element count like 4, or auto", "4"),
    "tile": ("a tile like 128x128x32, or auto", "128x128x32"),
    "cluster": ("a cluster like 2x1x1", "2x1x1"),
    "stages": ("a stage count like 4, or auto", "4"),
    "schedule": ("one of auto, cooperative, pingpong", "auto"),
    "raster": ("one of auto, along_m, along_n", "auto"),
    "swizzle": ("one of 1, 2, 4, 8", "1"),
    "decomposition": ("one of data_parallel, split_k, stream_k", "data_parallel"),
    "split_k": ("a split count like 2", "2"),
}
KNOBS = tuple(KNOB_VALUES)
# Knobs whose value is one word of a fixed set: the IR's Literal types.
KNOB_WORDS: dict[str, tuple[str, ...]] = {
    "math": ir.MathType.__args__,  # type: ignore[attr-defined]
    "accum": ir.AccumType.__args__,  # type: ignore[attr-defined]
    "schedule": ir.Schedule.__args__,  # type: ignore[attr-defined]
    "raster": ir.Raster.__args__,  # type: ignore[attr-defined]
    "decomposition": ir.Decomposition.__args__,  # type: ignore[attr-defined]
}

# Terminal names as a person would say them, for "expected ..." in syntax errors.
TOKEN_WORDS: dict[str, str] = {
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "INF": "inf",
    "TILE": "a tile like 128x128x32",
    "STRING": 'a quoted string like "fc.weight"',
    "TRUE": "True",
    "FALSE": "False",
    "NONE": "None",
    "INPUT": "input",
    "PARAM": "param",
    "TRANSPOSE": "^T",
    "MINUS": "'-'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "COMMA": "','",
    "COLON": "':'",
    "SEMICOLON": "';'",
    "EQUAL": "'='",
    "PLUS": "'+'",
    "STAR": "'*'",
    "SLASH": "'/'",
    "$END": "the end of the program",
}


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    grammar = (Path(__file__).with_name("grammar.lark")).read_text()
    return Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def _words(expected: set[str] | frozenset[str]) -> str:
    words = []
    if "INT" in expected and "FLOAT" in expected:
        expected = set(expected) - {"INT"}  # "a number" covers both
    for name in sorted(expected):
        if name in TOKEN_WORDS:
            words.append(TOKEN_WORDS[name])
        elif name.startswith("__ANON") or name.startswith("_"):
            continue
        else:
            # keywords: lark names them after their text in upper case
            words.append(name.lower())
    words = sorted(set(words))
    if not words:
        return "something else"
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + " or " + words[-1]


def _span(meta: Any) -> ir.Span | None:
    if meta is None or getattr(meta, "empty", True):
        return None
    return ir.Span(line=meta.line, column=meta.column, end_line=meta.end_line, end_column=meta.end_column)


def _tok_span(tok: Token) -> ir.Span:
    return ir.Span(
        line=tok.line or 1,
        column=tok.column or 1,
        end_line=tok.end_line or tok.line or 1,
        end_column=tok.end_column or tok.column or 1,
    )


class _Reject(Exception):
    """A semantic error found while building the IR (carried out of lark's transformer)."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic


def _err(message: str, where: Token | ir.Span | None, found: str | None = None, expected: str | None = None,
         hint: str | None = None, code: str = "syntax") -> _Reject:
    span = _tok_span(where) if isinstance(where, Token) else where
    return _Reject(Diagnostic(code=code, message=message, span=span, found=found, expected=expected, hint=hint))


class _Expr:
    """An expression during parsing, with the span of its source text and its nesting depth."""

    __slots__ = ("node", "span", "depth")

    def __init__(self, node: Any, span: ir.Span | None, depth: int = 1):
        self.node = node
        self.span = span
        self.depth = depth


@v_args(meta=True)
class _ToIR(Transformer_NonRecursive):
    # ---- literals
    def number(self, meta, children):
        tok = children[0]
        return _Expr(ir.Const(value=float(tok), span=_tok_span(tok)), _tok_span(tok))

    def signed_number(self, meta, children):
        minus, tok = children
        text = str(tok)
        value: int | float = _int(tok) if tok.type == "INT" else float(text)
        return -value if minus is not None else value

    def string_lit(self, meta, children):
        return str(children[0])[1:-1]

    def true_lit(self, meta, children):
        return True

    def false_lit(self, meta, children):
        return False

    def none_lit(self, meta, children):
        return None

    def empty_tuple(self, meta, children):
        return ()

    def tuple_lit(self, meta, children):
        items = [c for c in children if not isinstance(c, Token)]
        for item in items:
            if isinstance(item, tuple):
                raise _err("tuples cannot be nested", _span(meta), found="a tuple inside a tuple",
                           expected="a flat tuple like (1, 1)", hint="write the values as one flat tuple")
        return tuple(items)

    # ---- declarations
    def header(self, meta, children):
        return ("header", str(children[0]), _span(meta))

    def dims(self, meta, children):
        return tuple(_int(c) for c in children)

    def decl(self, meta, children):
        kind, name, dtype, dims, layout, source = children
        if str(dtype) not in ELEMENT_TYPES:
            raise _err(f"unknown element type '{dtype}'", dtype, found=str(dtype), expected=", ".join(ELEMENT_TYPES),
                       hint="tf32 is a math mode, not a storage type: store f32 and set math = tf32 in the kernel"
                       if str(dtype) == "tf32" else "use f32, bf16 or f16", code="dtype")
        if layout is not None and str(layout) not in LAYOUTS:
            raise _err(f"unknown layout '{layout}'", layout, found=str(layout), expected=" or ".join(LAYOUTS),
                       hint="write channels_last for NHWC / NDHWC / NWC storage, or nothing for PyTorch's default")
        shape = dims if dims is not None else ()
        if any(d <= 0 for d in shape):
            raise _err(f"'{name}' has a zero extent", _span(meta), found=str(list(shape)),
                       expected="every extent at least 1", hint="declare the shape the tensor really has", code="shape")
        if str(kind) == "input" and source is not None:
            raise _err(f"input '{name}' cannot name a state_dict key", source, found=str(source),
                       expected="no '= \"key\"' on an input", hint="declare it as param if it is a model parameter")
        return ir.TensorDecl(
            kind=str(kind), name=str(name), dtype=str(dtype), shape=shape,
            layout=str(layout) if layout is not None else "contiguous",
            source=str(source)[1:-1] if source is not None else None, span=_span(meta),
        )

    def output_stmt(self, meta, children):
        return ("output", tuple(str(c) for c in children), _span(meta))

    def empty(self, meta, children):
        return None

    # ---- kernels
    def operand(self, meta, children):
        name, transpose = children
        return ir.Operand(name=str(name), transpose=transpose is not None, span=_span(meta))

    def op_kwarg(self, meta, children):
        key, value = children
        return ("kwarg", key, value)

    def op(self, meta, children):
        name, *args = children
        span = _span(meta)
        fn = str(name)
        if fn not in OP_NAMES and fn not in ROW_OP_NAMES:
            raise _err(f"unknown op '{fn}'", name, found=fn, expected=", ".join(OP_NAMES + ROW_OP_NAMES),
                       hint="batched GEMM is gemm on rank-3 operands; anything else can be a torch step", code="unknown-op")
        operands = [a for a in args if isinstance(a, ir.Operand)]
        kwargs: dict[str, Any] = {}
        for a in args:
            if isinstance(a, tuple) and a[0] == "kwarg":
                if str(a[1]) in kwargs:
                    raise _err(f"'{a[1]}' is given twice", a[1], found=str(a[1]), hint="give each option once")
                kwargs[str(a[1])] = (a[1], a[2])
        if fn in ROW_OP_NAMES:
            return self._row(name, operands, kwargs, span)
        if fn == "gemm":
            return self._gemm(name, operands, kwargs, span)
        if fn == "grouped_gemm":
            return self._grouped(name, operands, kwargs, span)
        return self._conv(name, int(fn[-2]), operands, kwargs, span, transposed=fn.startswith("conv_transpose"))

    @staticmethod
    def _need_operands(name: Token, operands: list, count: int, what: str) -> None:
        if len(operands) != count:
            raise _err(f"{name} takes {count} tensors, got {len(operands)}", name, found=f"{len(operands)} tensors",
                       expected=what, hint=f"write {what}")

    @staticmethod
    def _no_kwargs(name: Token, kwargs: dict, allowed: tuple[str, ...]) -> None:
        for key, (tok, _) in kwargs.items():
            if key not in allowed:
                raise _err(f"{name} has no option '{key}'", tok, found=key,
                           expected=", ".join(allowed) if allowed else "no options",
                           hint="remove it" if not allowed else f"use one of {', '.join(allowed)}")

    def _gemm(self, name, operands, kwargs, span):
        self._need_operands(name, operands, 2, "gemm(a, b) with a^T / b^T for transposed reads")
        self._no_kwargs(name, kwargs, ())
        return ir.GemmOp(a=operands[0], b=operands[1], span=span)

    def _grouped(self, name, operands, kwargs, span):
        self._need_operands(name, operands, 2, "grouped_gemm(a, b, group_sizes=(m0, m1, ...))")
        self._no_kwargs(name, kwargs, ("group_sizes",))
        if "group_sizes" not in kwargs:
            raise _err("grouped_gemm needs group_sizes", name, found="no group_sizes",
                       expected="group_sizes=(m0, m1, ...)", hint="give the row count of each group of a")
        tok, value = kwargs["group_sizes"]
        sizes = value if isinstance(value, tuple) else (value,)
        if not sizes or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
            raise _err("group_sizes must be positive integers", tok, found=repr(value),
                       expected="a tuple like (128, 64, 256)", hint="give the row count of each group of a")
        return ir.GroupedGemmOp(a=operands[0], b=operands[1], group_sizes=tuple(sizes), span=span)

    def _conv(self, name, dims, operands, kwargs, span, transposed=False):
        keys = ("stride", "padding", "output_padding", "dilation") if transposed else ("stride", "padding", "dilation")
        self._need_operands(name, operands, 2, f"{name}(x, w, {', '.join(k + '=...' for k in keys)}, groups=...)")
        self._no_kwargs(name, kwargs, (*keys, "groups"))
        values: dict[str, Any] = {}
        for key in keys:
            default, minimum = (1, 1) if key in ("stride", "dilation") else (0, 0)
            tok, value = kwargs.get(key, (name, default))
            vec = (value,) * dims if isinstance(value, int) and not isinstance(value, bool) else value
            if (not isinstance(vec, tuple) or len(vec) != dims
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in vec)):
                like = "2" if dims == 1 else "(" + ", ".join(["2"] * dims) + ")"
                raise _err(f"{key} of {name} must be {dims} integer(s) >= {minimum}", tok, found=repr(value),
                           expected=f"an integer or a tuple of {dims}, like {like}",
                           hint=f"give one {key} per spatial dim")
            values[key] = vec
        tok, groups = kwargs.get("groups", (name, 1))
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            raise _err("groups must be a positive integer", tok, found=repr(groups), expected="an integer >= 1",
                       hint="groups = in_channels for a depthwise convolution")
        op = ir.ConvTransposeOp if transposed else ir.ConvOp
        return op(spatial_dims=dims, x=operands[0], w=operands[1], groups=groups, span=span, **values)

    def _row(self, name, operands, kwargs, span):
        fn = str(name)
        spec = ROW_FNS[fn]
        if spec.kind == "pool":
            return self._pool(name, operands, kwargs, span)
        grouped = fn in ("group_norm", "instance_norm")
        keys = (("groups", "eps") if fn == "group_norm" else ("eps",) if grouped else ("dim", "p", "eps")
                if fn == "normalize" else ("dim", "eps") if spec.kind == "norm" else ("dim", "p", "keepdim") if fn == "norm" else
                ("dim", "keepdim") if spec.kind == "reduce" else ("dim", "reverse", "exclusive") if spec.kind == "scan"
                else ("dim",))
        tensors = {"layer_norm": 3, "rms_norm": 2, "group_norm": 3, "instance_norm": 3}.get(fn, 1)
        like = (f"{fn}(x, w, b, dim=-1, eps=1e-05)" if fn == "layer_norm" else f"{fn}(x, w, dim=-1, eps=1e-06)"
                if fn == "rms_norm" else "group_norm(x, w, b, groups=8, eps=1e-05)" if fn == "group_norm" else
                "instance_norm(x, w, b, eps=1e-05)" if grouped else f"{fn}(x, dim=1, p=2)" if fn == "norm"
                else "normalize(x, dim=1, p=2, eps=1e-12)" if fn == "normalize"
                else f"{fn}(x, dim=1)")
        if not 1 <= len(operands) <= tensors:
            raise _err(f"{fn} takes {'1 to ' + str(tensors) if tensors > 1 else 1} tensor(s), got {len(operands)}",
                       name, found=f"{len(operands)} tensors", expected=like, hint=f"write {like}")
        for o in operands:
            if o.transpose:
                raise _err(f"{fn} reads '{o.name}' as stored; ^T has no meaning here", o.span or span,
                           found=f"{o.name}^T", expected=o.name, hint="transpose in a torch step, or reduce over the other dim")
        self._no_kwargs(name, kwargs, keys)
        if grouped:  # over (sample, group) segments: the channel dim, implied
            kwargs = {**kwargs, "dim": (name, 1)}
        if fn == "group_norm":
            tok, groups = kwargs.get("groups", (name, None))
            if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
                raise _err("group_norm needs groups, a positive integer", tok, found=repr(groups),
                           expected="groups=8", hint=f"write {like}")
        if "dim" not in kwargs:
            raise _err(f"{fn} needs dim", name, found="no dim", expected=like,
                       hint="name the reduced dim (dim=-1: the last; dim=(1, 2): adjacent dims)")
        tok, dim = kwargs["dim"]
        dims = dim if isinstance(dim, tuple) else (dim,)
        if not dims or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise _err(f"dim of {fn} must be an integer or a tuple of integers", tok, found=repr(dim),
                       expected="dim=1, dim=-1 or dim=(1, 2)", hint="name the reduced dims by position")
        values: dict[str, Any] = {"dim": tuple(dims)}
        if fn == "normalize":
            values["eps"] = 1e-12  # F.normalize's default
        if "keepdim" in kwargs:
            tok, keep = kwargs["keepdim"]
            if not isinstance(keep, bool):
                raise _err("keepdim must be True or False", tok, found=repr(keep), expected="True or False",
                           hint="keepdim=True keeps the reduced dims with extent 1")
            values["keepdim"] = keep
        for flag in ("reverse", "exclusive"):
            if flag in kwargs:
                tok, on = kwargs[flag]
                if not isinstance(on, bool):
                    raise _err(f"{flag} of {fn} must be True or False", tok, found=repr(on), expected="True or False",
                               hint="reverse=True scans from the end; exclusive=True leaves each element out of its value")
                values[flag] = on
        if "p" in kwargs:
            tok, p = kwargs["p"]
            if p not in (1, 2) or isinstance(p, bool):
                raise _err(f"{fn}'s p must be 1 or 2", tok, found=repr(p), expected="p=1 (L1) or p=2 (L2, Frobenius)",
                           hint="other orders can be a torch step")
            values["p"] = p
        if "eps" in kwargs:
            tok, eps = kwargs["eps"]
            if isinstance(eps, bool) or not isinstance(eps, int | float) or eps < 0:
                raise _err(f"eps of {fn} must be a number >= 0", tok, found=repr(eps), expected="eps=1e-05",
                           hint="eps is added to the variance before the square root")
            values["eps"] = float(eps)
        if fn == "group_norm":
            values["groups"] = groups
        extra = dict(zip(("weight", "bias"), operands[1:]))
        return ir.RowOp(fn=fn, x=operands[0], span=span, **values, **extra)

    def _pool(self, name, operands, kwargs, span):
        """``max_pool(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False)``, avg_pool
        (no dilation; count_include_pad, divisor_override) and ``adaptive_avg_pool(x, output_size=(1, 1))``. Only
        the types are checked here; what x's shape makes of the values, ``row_ops.pool_spatial`` checks."""
        fn = str(name)
        adaptive = fn == "adaptive_avg_pool"
        keys = (("output_size",) if adaptive else ("kernel_size", "stride", "padding", "dilation", "ceil_mode")
                if fn == "max_pool" else ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"))
        like = ("adaptive_avg_pool(x, output_size=(1, 1))" if adaptive
                else f"{fn}(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))")
        if len(operands) != 1:
            raise _err(f"{fn} takes 1 tensor, got {len(operands)}", name, found=f"{len(operands)} tensors",
                       expected=like, hint=f"write {like}")
        if operands[0].transpose:
            raise _err(f"{fn} reads '{operands[0].name}' as stored; ^T has no meaning here", operands[0].span or span,
                       found=f"{operands[0].name}^T", expected=operands[0].name, hint="permute in a torch step")
        self._no_kwargs(name, kwargs, keys)
        first = keys[0]
        if first not in kwargs:
            raise _err(f"{fn} needs {first}", name, found=f"no {first}", expected=like,
                       hint=f"give one {first} value per spatial dim, as a tuple: (2,) for 1-D, (2, 2) for 2-D")

        def ints(key, default, minimum):
            tok, value = kwargs.get(key, (name, default))
            if key == first and not isinstance(value, tuple):  # its length is the pool's spatial rank
                raise _err(f"{key} of {fn} must be a tuple", tok, found=repr(value),
                           expected="one value per spatial dim, like (2, 2) or (3,)", hint=f"write {like}")
            vec = (value,) * len(base) if key != first and isinstance(value, int) and not isinstance(value, bool) else value
            if (not isinstance(vec, tuple) or not vec
                    or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in vec)):
                raise _err(f"{key} of {fn} must be integers >= {minimum}", tok, found=repr(value),
                           expected=("a tuple, one value per spatial dim, like (2, 2) or (3,)" if key == first
                                     else "an integer or a tuple, one value per spatial dim"),
                           hint=f"write {like}")
            return tuple(vec)

        base: tuple[int, ...] = ()
        base = ints(first, None, 1)
        values: dict[str, Any] = {first: base}
        if not adaptive:
            values["stride"] = ints("stride", base, 1)
            values["padding"] = ints("padding", 0, 0)
            if fn == "max_pool":
                values["dilation"] = ints("dilation", 1, 1)
            flags = ("ceil_mode",) if fn == "max_pool" else ("ceil_mode", "count_include_pad")
            for flag in flags:
                if flag in kwargs:
                    tok, on = kwargs[flag]
                    if not isinstance(on, bool):
                        raise _err(f"{flag} of {fn} must be True or False", tok, found=repr(on),
                                   expected="True or False", hint=f"write {flag}=True")
                    values[flag] = on
            if "divisor_override" in kwargs:
                tok, div = kwargs["divisor_override"]
                if div is not None and (not isinstance(div, int) or isinstance(div, bool) or div < 1):
                    raise _err(f"divisor_override of {fn} must be a positive integer or None", tok, found=repr(div),
                               expected="divisor_override=4", hint="leave it out to divide by the window's size")
                values["divisor_override"] = div
        return ir.RowOp(fn=fn, x=operands[0], dim=(), span=span, **values)

    def config_item(self, meta, children):
        key, value = children
        return ("knob", key, value)

    def let_stmt(self, meta, children):
        name, expr = children
        return ir.Let(name=str(name), expr=expr.node, span=_span(meta))

    def store_stmt(self, meta, children):
        name, dtype, expr = children
        if str(dtype) not in STORE_TYPES:
            raise _err(f"unknown element type '{dtype}'", dtype, found=str(dtype), expected=", ".join(STORE_TYPES),
                       hint="stores are f32, bf16 or f16 (i64: the indices of argmax / argmin)", code="dtype")
        return ir.Store(name=str(name), dtype=str(dtype), expr=expr.node, span=_span(meta))

    def slice_store_stmt(self, meta, children):
        name, start, end, dtype, expr = children
        store = self.store_stmt(meta, [name, dtype, expr])
        return store.model_copy(update={"channels": _channel_range(name, start, end)})

    def kernel(self, meta, children):
        name, op, *body = children
        knobs: dict[str, Any] = {}
        lets: list[ir.Let] = []
        stores: list[ir.Store] = []
        config_span = None
        knob_spans: dict[str, ir.Span] = {}
        for item in body:
            if item is None:
                continue
            if isinstance(item, ir.Let):
                lets.append(item)
            elif isinstance(item, ir.Store):
                stores.append(item)
            else:
                _, key_tok, value_tok = item
                key = str(key_tok)
                if key in knobs:
                    raise _err(f"knob '{key}' is set twice", key_tok, found=key, hint="set each knob once")
                knobs[key] = (self._row_knob(key_tok, value_tok) if isinstance(op, ir.RowOp)
                              else self._knob(key_tok, value_tok))
                knob_spans[key] = ir.Span(line=key_tok.line, column=key_tok.column, end_line=value_tok.end_line,
                                          end_column=value_tok.end_column)
                config_span = config_span or _tok_span(key_tok)
        if not stores:
            raise _err(f"kernel '{name}' stores nothing", _span(meta), found="no store",
                       expected="at least one 'store NAME: DTYPE = EXPR'", hint="add e.g. store y: f32 = acc")
        if isinstance(op, ir.RowOp):
            return ir.RowKernel(name=str(name), op=op, config=ir.RowConfig(span=config_span, knob_spans=knob_spans or None,
                                                                           **knobs),
                                lets=tuple(lets), stores=tuple(stores), span=_span(meta))
        return ir.Kernel(name=str(name), op=op, config=ir.KernelConfig(span=config_span, knob_spans=knob_spans or None, **knobs), lets=tuple(lets),
                         stores=tuple(stores), span=_span(meta))

    @staticmethod
    def _row_knob(key_tok: Token, value_tok: Token) -> Any:
        key, value = str(key_tok), str(value_tok)
        if key not in ROW_KNOB_VALUES:
            gemm = key in KNOBS
            raise _err(f"{'the GEMM knob' if gemm else 'unknown knob'} '{key}' on a row kernel", key_tok, found=key,
                       expected=", ".join(ROW_KNOB_VALUES),
                       hint="row kernels (reductions, softmax, norms) take vector, rows_per_block, passes, split"
                       if gemm else "check the spelling; knobs go before the let and store lines")
        allowed, example = ROW_KNOB_VALUES[key]
        if value == "auto" and key != "split":
            return None
        number = int(value) if value_tok.type == "INT" else None
        legal = {"vector": VECTORS, "rows_per_block": ROWS_PER_BLOCK, "passes": (1, 2)}.get(key)
        if number is None or (number not in legal if legal else number < 1):
            raise _err(f"bad value for {key}", value_tok, found=value, expected=allowed, hint=f"write {key} = {example}")
        return number

    @staticmethod
    def _knob(key_tok: Token, value_tok: Token) -> Any:
        key, value = str(key_tok), str(value_tok)
        if key not in KNOBS:
            raise _err(f"unknown knob '{key}'", key_tok, found=key, expected=", ".join(KNOBS),
                       hint="check the spelling; knobs go before the let and store lines")

        def bad() -> _Reject:
            allowed, example = KNOB_VALUES[key]
            return _err(f"bad value for {key}", value_tok, found=value, expected=allowed, hint=f"write {key} = {example}")

        kind = value_tok.type
        if key in KNOB_WORDS:
            if value not in KNOB_WORDS[key]:
                raise bad()
            return value
        if key in ("tile", "cluster"):
            if key == "tile" and value == "auto":
                return None
            if kind != "TILE":
                raise bad()
            parts = tuple(int(p) for p in value.split("x"))
            if key == "cluster" and len(parts) == 2:
                parts = parts + (1,)
            if len(parts) != 3 or any(p <= 0 for p in parts):
                raise bad()
            return parts
        if key in ("stages", "alignment") and value == "auto":
            return "auto" if key == "stages" else None
        # stages, alignment, swizzle, split_k: a positive integer
        if kind != "INT" or int(value) <= 0:
            raise bad()
        return int(value)

    # ---- expressions
    def _bin(self, fn, meta, children):
        lhs, rhs = [c for c in children if isinstance(c, _Expr)]
        node = ir.Binary(fn=fn, lhs=lhs.node, rhs=rhs.node, span=_span(meta))
        return self._checked(node, _span(meta), lhs, rhs)

    def _checked(self, node, span, *args):
        depth = 1 + max((a.depth for a in args), default=0)
        if depth > MAX_NESTING:
            raise _err("expression nested too deeply", span, found=f"more than {MAX_NESTING} levels",
                       expected=f"at most {MAX_NESTING}", hint="name parts of it with let")
        return _Expr(node, span, depth)

    def add(self, meta, children):
        return self._bin("add", meta, children)

    def sub(self, meta, children):
        return self._bin("sub", meta, children)

    def mul(self, meta, children):
        return self._bin("mul", meta, children)

    def div(self, meta, children):
        return self._bin("div", meta, children)

    def neg(self, meta, children):
        (arg,) = [c for c in children if isinstance(c, _Expr)]
        if isinstance(arg.node, ir.Const) and arg.node.value >= 0:
            return _Expr(ir.Const(value=-arg.node.value, span=_span(meta)), _span(meta))
        return self._checked(ir.Unary(fn="neg", arg=arg.node, span=_span(meta)), _span(meta), arg)

    def acc(self, meta, children):
        return _Expr(ir.Acc(span=_span(meta)), _span(meta))

    def ref(self, meta, children):
        return _Expr(ir.Ref(name=str(children[0]), span=_span(meta)), _span(meta))

    def indexed(self, meta, children):
        name, index = children
        if str(index) not in INDEX_KINDS:
            raise _err(f"unknown index '{index}'", index, found=str(index), expected="row, col or scalar",
                       hint="b[col]: one value per output column (a bias); s[row]: one per row; a[scalar]: one value")
        return _Expr(ir.Ref(name=str(name), index=str(index), span=_span(meta)), _span(meta))

    def call(self, meta, children):
        fn_tok, *args = children
        fn = str(fn_tok)
        span = _span(meta)
        nodes = [a.node for a in args]

        def arity(n: int, like: str) -> None:
            if len(nodes) != n:
                raise _err(f"{fn} takes {n} argument(s), got {len(nodes)}", fn_tok, found=f"{len(nodes)} arguments",
                           expected=like, hint=f"write {like}")

        if fn in UNARY_FNS:
            arity(1, f"{fn}(x)")
            return self._checked(ir.Unary(fn=fn, arg=nodes[0], span=span), span, *args)
        if fn in BINARY_CALL_FNS:
            arity(2, f"{fn}(x, y)")
            return self._checked(ir.Binary(fn=fn, lhs=nodes[0], rhs=nodes[1], span=span), span, *args)
        if fn in PARAM_FN_ARITY:
            n = PARAM_FN_ARITY[fn]
            like = OPS[fn].example
            arity(n + 1, like)
            params = []
            for a in args[1:]:
                if not isinstance(a.node, ir.Const):
                    raise _err(f"the parameters of {fn} must be numbers", a.span, found="an expression",
                               expected=like, hint="write the parameter as a literal number")
                params.append(a.node.value)
            return self._checked(ir.ParamCall(fn=fn, arg=nodes[0], params=tuple(params), span=span), span, *args)
        if fn in REDUCE_FNS:
            arity(1, f"{fn}(x)")
            return self._checked(ir.Reduce(fn=fn, arg=nodes[0], span=span), span, *args)
        known = sorted(set(UNARY_FNS) | set(BINARY_CALL_FNS) | set(PARAM_FN_ARITY) | set(REDUCE_FNS))
        raise _err(f"unknown function '{fn}'", fn_tok, found=fn, expected=", ".join(known),
                   hint="use one of the epilogue functions, or a torch step after the kernel", code="unknown-function")

    # ---- torch steps
    def tensor_arg(self, meta, children):
        return ir.TensorArg(name=str(children[0]), span=_span(meta))

    def sliced_tensor_arg(self, meta, children):
        name, start, end = children
        return ir.TensorArg(name=str(name), channels=_channel_range(name, start, end), span=_span(meta))

    def slice_torch_step(self, meta, children):
        name, start, end, *rest = children
        step = self.torch_step(meta, [name, *rest])
        return step.model_copy(update={"channels": _channel_range(name, start, end)})

    def literal_arg(self, meta, children):
        return ir.LiteralArg(value=children[0], span=_span(meta))

    def torch_kwarg(self, meta, children):
        key, value = children
        return ir.Kwarg(key=str(key), value=value, span=_span(meta))

    def torch_step(self, meta, children):
        names = [c for c in children if isinstance(c, Token)]
        rest = [c for c in children if not isinstance(c, Token)]
        *outputs, fn = names
        args = [r for r in rest if isinstance(r, ir.TensorArg | ir.LiteralArg)]
        kwargs = [r for r in rest if isinstance(r, ir.Kwarg)]
        # the grammar puts kwargs after the function name; positional after keyword is Python's rule too
        seen_kw = False
        for r in rest:
            if isinstance(r, ir.Kwarg):
                seen_kw = True
            elif r is not None and seen_kw:
                raise _err("a positional argument follows a keyword argument", r.span,
                           found="positional after keyword", expected="positional arguments first",
                           hint="move the keyword arguments to the end")
        keys = [k.key for k in kwargs]
        for k in kwargs:
            if keys.count(k.key) > 1:
                raise _err(f"'{k.key}' is given twice", k.span, found=k.key, hint="give each keyword once")
        return ir.TorchStep(outputs=tuple(str(o) for o in outputs), fn=str(fn), args=tuple(args),
                            kwargs=tuple(kwargs), span=_span(meta))

    def start(self, meta, children):
        return [c for c in children if c is not None], _span(meta)


def _channel_range(name: Token, start: Token, end: Token) -> tuple[int, int]:
    if _int(end) <= _int(start):
        raise _err(f"{name}[{start}:{end}] names no channels", start, found=f"[{start}:{end}]",
                   expected="[start:end] with end > start", hint="channels start..end, end excluded")
    return _int(start), _int(end)


def _int(tok: Token) -> int:
    """An integer literal; one of more digits than Python converts (4300) is a located size error."""
    try:
        return int(tok)
    except ValueError:
        raise _err(f"an integer of {len(str(tok))} digits is larger than any tensor a device can hold", tok,
                   found=f"{len(str(tok))} digits", expected="an element count that fits the device's memory",
                   hint="check the sizes: no tensor of a program may exceed the GPU's memory", code="size") from None


def _end_of(text: str) -> tuple[int, int]:
    """Line and column just after the last non-blank character (where an early end is felt)."""
    body = text.rstrip()
    line = body.count("\n") + 1
    return line, len(body) - (body.rfind("\n") + 1) + 1


def _accepted(exc: UnexpectedToken) -> set[str]:
    """The tokens that would really be accepted here (LALR's raw expected set over-approximates)."""
    try:
        accepts = exc.interactive_parser.accepts()
        if accepts:
            return set(accepts)
    except Exception:  # noqa: BLE001 - fall back to lark's own set
        pass
    return set(exc.expected)


def _syntax_diagnostic(exc: UnexpectedInput, text: str) -> Diagnostic:
    line = getattr(exc, "line", 1) or 1
    column = getattr(exc, "column", 1) or 1
    at_end = isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END")
    if at_end or line < 1:
        line, column = _end_of(text)
    if column < 1:
        column = 1
    span = ir.Span(line=line, column=column, end_line=line, end_column=column + 1)
    if isinstance(exc, UnexpectedCharacters):
        ch = text[exc.pos_in_stream] if 0 <= exc.pos_in_stream < len(text) else "?"
        allowed = getattr(exc, "allowed", None) or set()
        return Diagnostic(code="syntax", message=f"unexpected character {ch!r}", span=span, found=repr(ch),
                          expected=_words(allowed), hint=_hint_for_char(ch, text, exc.pos_in_stream))
    if at_end:
        expected = set(exc.expected) if isinstance(exc, UnexpectedEOF) else _accepted(exc)
        return Diagnostic(code="syntax", message="the program ends too early", span=span, found="the end of the program",
                          expected=_words(expected), hint="finish the last statement (a '}' or ')' may be missing)")
    if isinstance(exc, UnexpectedToken):
        tok = exc.token
        found = repr(str(tok))
        accepted = _accepted(exc)
        return Diagnostic(code="syntax", message=f"unexpected {found}", span=span, found=found,
                          expected=_words(accepted),
                          hint=_hint_for_token(str(tok), accepted, text[: max(0, tok.start_pos or 0)]))
    return Diagnostic(code="syntax", message="syntax error", span=span, hint="compare with the language reference")


# `x.T` / `x.t()` / `x.mT` (PyTorch's spellings of a transpose) right after a name
_TORCH_TRANSPOSE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\.(T|mT|t\(\))")


def _hint_for_char(ch: str, text: str = "", pos: int = -1) -> str:
    if ch == "." and pos >= 0:
        start = pos
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
            start -= 1
        m = _TORCH_TRANSPOSE.match(text, start)
        if m and m.start(2) == pos + 1:
            return f"a transposed operand is written {m.group(1)}^T, not {m.group(0)}: use {m.group(1)}^T"
    if ch in "\"'":
        return 'quote state_dict keys with double quotes, like = "fc.weight"'
    if ch == "^":
        return "a transposed read is written w^T"
    if ch == "*":
        return "there is no ** operator; use pow(x, y) or square(x)"
    return "remove it; see the language reference for what a program may contain"


_STATEMENT_FORMS = {
    "program": "program NAME",
    "input": "input NAME: f32[d0, d1] (channels_last)",
    "param": 'param NAME: f32[d0, d1] (channels_last) = "state_dict.key"',
    "kernel": "kernel NAME = gemm(a, b^T) { knobs; let NAME = EXPR; store NAME: f32 = EXPR }",
    "torch": "torch NAME = fn(tensor, 1, dim=1)",
    "output": "output NAME, NAME",
    "let": "let NAME = EXPR",
    "store": "store NAME: f32 = EXPR",
}
_STATEMENT_KEYWORD = re.compile(r"\b(" + "|".join(_STATEMENT_FORMS) + r")\b")
# The grammar's keywords: a name cannot be one of them.
_RESERVED = {*_STATEMENT_FORMS, "acc", "inf", "True", "False", "None"}


# a keyword argument inside an epilogue function call: `leaky_relu(acc, slope=0.1)`
_EPILOGUE_KEYWORD = re.compile(r"\b(store|let)\b[^\n;{}]*\b([A-Za-z_][A-Za-z0-9_]*)\s*\([^\n;{}]*[(,]\s*"
                               r"([A-Za-z_][A-Za-z0-9_]*)\s*$")


def _hint_for_token(tok: str, expected: set[str] | frozenset[str], before: str = "") -> str:
    if tok in _RESERVED and "NAME" in expected:
        return f"'{tok}' is a reserved word; choose another name"
    code = re.sub(r"#[^\n]*", "", before)
    m = _EPILOGUE_KEYWORD.search(code) if tok == "=" else None
    if m:
        return (f"epilogue functions take positional numbers only: write {m.group(2)}(x, 0.1), not "
                f"{m.group(2)}(x, {m.group(3)}=0.1)")
    keywords = _STATEMENT_KEYWORD.findall(re.sub(r"#[^\n]*", "", before))
    if keywords:
        return f"this {keywords[-1]} statement has the form: {_STATEMENT_FORMS[keywords[-1]]}"
    return "a program is: program NAME, input/param lines, kernel and torch steps, then output NAME"


def _nesting_too_deep(text: str) -> ir.Span | None:
    """Finds bracket nesting beyond any real program before the parser recurses into it."""
    depth = 0
    line, col = 1, 0
    for ch in text:
        col += 1
        if ch == "\n":
            line, col = line + 1, 0
        elif ch in "([{":
            depth += 1
            if depth > MAX_NESTING:
                return ir.Span(line=line, column=col, end_line=line, end_column=col + 1)
        elif ch in ")]}":
            depth = max(0, depth - 1)
    return None


def parse(text: str) -> tuple[ir.Program | None, list[Diagnostic]]:
    """Parse μCUTLASS text into a Program. Never raises: problems are returned as diagnostics."""
    try:
        return _parse(text)
    except RecursionError:
        return None, [Diagnostic(code="syntax", message="the program is nested too deeply",
                                 found="nesting deeper than the parser supports",
                                 expected=f"at most {MAX_NESTING} levels", hint="name parts of the expression with let")]
    except Exception as exc:  # noqa: BLE001 - the contract is: never raise on any input
        return None, [Diagnostic(code="syntax", message=f"the program could not be read ({type(exc).__name__})",
                                 hint="compare it with the language reference")]


def _parse(text: str) -> tuple[ir.Program | None, list[Diagnostic]]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        return None, [Diagnostic(code="syntax", message="a program must be text", found=type(text).__name__,
                                 expected="a string", hint="pass the program's text")]
    if len(text) > MAX_PROGRAM_CHARS:
        return None, [Diagnostic(code="syntax", message="the program is too large",
                                 span=ir.Span(line=1, column=1, end_line=1, end_column=2),
                                 found=f"{len(text)} characters", expected=f"at most {MAX_PROGRAM_CHARS}",
                                 hint="a μCUTLASS program is a few kernels; is this the right file?")]
    if not text.strip() or all(not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()):
        return None, [Diagnostic(code="syntax", message="the program is empty",
                                 span=ir.Span(line=1, column=1, end_line=1, end_column=1),
                                 found="no statements", expected="declarations, kernels and an output line",
                                 hint="start with: input x: f32[M, K]; end with: output y")]
    deep = _nesting_too_deep(text)
    if deep is not None:
        return None, [Diagnostic(code="syntax", message="brackets nested too deeply", span=deep,
                                 found=f"more than {MAX_NESTING} open brackets", expected=f"at most {MAX_NESTING}",
                                 hint="name parts of the expression with let")]
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        return None, [_syntax_diagnostic(exc, text)]
    try:
        items, program_span = _ToIR().transform(tree)
    except VisitError as exc:
        orig = exc.orig_exc
        if isinstance(orig, _Reject):
            return None, [orig.diagnostic]
        if isinstance(orig, ValidationError):
            return None, [Diagnostic(code="syntax", message="a value is out of range",
                                     found=str(orig.errors()[0].get("input"))[:80] if orig.errors() else None,
                                     hint="compare this statement with the language reference")]
        if isinstance(orig, RecursionError):
            raise orig
        raise
    return _assemble(items, program_span)


def _assemble(items: list, span: ir.Span | None = None) -> tuple[ir.Program | None, list[Diagnostic]]:
    name = None
    decls: list[ir.TensorDecl] = []
    steps: list[ir.Kernel | ir.TorchStep] = []
    outputs: tuple[str, ...] | None = None
    outputs_span: ir.Span | None = None
    diags: list[Diagnostic] = []
    for i, item in enumerate(items):
        if isinstance(item, ir.TensorDecl):
            decls.append(item)
        elif isinstance(item, ir.Kernel | ir.RowKernel | ir.TorchStep):
            steps.append(item)
        elif item[0] == "header":
            if i != 0:
                diags.append(Diagnostic(code="syntax", message="'program NAME' must come first", span=item[2],
                                        found="program after other statements", expected="program NAME on the first line",
                                        hint="move the program line to the top"))
            if name is not None:
                diags.append(Diagnostic(code="syntax", message="the program is named twice", span=item[2],
                                        hint="keep one 'program NAME' line"))
            name = item[1]
        elif item[0] == "output":
            if outputs is not None:
                diags.append(Diagnostic(code="syntax", message="more than one output line", span=item[2],
                                        found="a second output line", expected="one line: output a, b",
                                        hint="list all outputs on one output line"))
            outputs = item[1]
            outputs_span = item[2]
    if outputs is None:
        diags.append(Diagnostic(code="syntax", message="the program has no output line", found="no output line",
                                expected="output NAME (or output a, b)", hint="end the program with: output NAME"))
    if diags:
        return None, diags
    return ir.Program(name=name, decls=tuple(decls), steps=tuple(steps), outputs=outputs, span=span,
                      outputs_span=outputs_span), []


# ---------------------------------------------------------------------------------------------
# Comments: kept beside the IR (never in it), keyed by the statement they precede or end, for the printer.

@dataclasses.dataclass
class Comments:
    """Comment texts by statement key: ``leading`` lines precede the statement, ``trailing`` ones end its line.

    Keys: ("program",), ("decl", name), ("kernel", name), ("kernel_head", name) (the ``{`` line),
    ("kernel_end", name) (before ``}``), ("knob", kernel, knob), ("let", kernel, name), ("store", kernel, name),
    ("torch", outputs), ("output",), ("end",) (after the last statement)."""

    leading: dict[tuple, list[str]] = dataclasses.field(default_factory=dict)
    trailing: dict[tuple, list[str]] = dataclasses.field(default_factory=dict)

    def texts(self) -> list[str]:
        return [t for table in (self.leading, self.trailing) for texts in table.values() for t in texts]


_COMMENT_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _lark_keeping_comments() -> tuple[Lark, list]:
    sink: list = []
    grammar = (Path(__file__).with_name("grammar.lark")).read_text()
    return Lark(grammar, parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True,
                lexer_callbacks={"COMMENT": sink.append}), sink


def _statement_key(node: Any, kernel: str | None) -> tuple | None:
    kids = node.children
    if node.data == "header":
        return ("program",)
    if node.data == "decl":
        return ("decl", str(kids[1]))
    if node.data == "kernel":
        return ("kernel", str(kids[0]))
    if node.data == "torch_step":
        return ("torch", _torch_outputs(node))
    if node.data == "slice_torch_step":
        return ("torch", (str(kids[0]),))
    if node.data == "output_stmt":
        return ("output",)
    if node.data == "config_item":
        return ("knob", kernel, str(kids[0]))
    if node.data == "let_stmt":
        return ("let", kernel, str(kids[0]))
    if node.data in ("store_stmt", "slice_store_stmt"):
        return ("store", kernel, str(kids[0]))
    return None


def _torch_outputs(node: Any) -> tuple[str, ...]:
    # torch a, b = fn(args): the output names are the NAME tokens before the function's name
    names = []
    for kid in node.children:
        if not isinstance(kid, Token) or kid.type != "NAME":
            break
        names.append(str(kid))
    return tuple(names[:-1])


def collect_comments(text: str) -> Comments | None:
    """The comments of a program, each attached to the statement it ends (a comment after a statement on the same
    line) or precedes (a comment on its own line). None when the text does not parse."""
    with _COMMENT_LOCK:
        parser, sink = _lark_keeping_comments()
        sink.clear()
        try:
            tree = parser.parse(text)
        except Exception:  # noqa: BLE001 - a text that does not parse has no comment map; parse() explains why
            return None
        found = list(sink)
    top: list[tuple[tuple, Any]] = []
    kernels: list[tuple[str, Any, list[tuple[tuple, Any]]]] = []
    for node in tree.children:
        if getattr(node, "data", None) in (None, "empty") or node.meta.empty:
            continue
        key = _statement_key(node, None)
        top.append((key, node.meta))
        if node.data == "kernel":
            body = [(_statement_key(kid, key[1]), kid.meta) for kid in node.children[2:]
                    if getattr(kid, "data", None) in ("config_item", "let_stmt", "store_stmt", "slice_store_stmt")]
            kernels.append((key[1], node.meta, body))
    comments = Comments()

    def add(table: dict, key: tuple, text_: str) -> None:
        table.setdefault(key, []).append(text_)

    def ends_before(meta: Any, line: int, column: int) -> bool:
        return meta.end_line == line and meta.end_column <= column

    for tok in found:
        line, column, body_text = tok.line, tok.column, str(tok).rstrip()
        # 1. It ends a statement's line: the last statement (body item or top-level) ending there before it.
        enders = [(m.end_column, key) for key, m in top if ends_before(m, line, column)]
        enders += [(m.end_column, key) for _, _, body in kernels for key, m in body if ends_before(m, line, column)]
        if enders:
            add(comments.trailing, max(enders)[1], body_text)
            continue
        # 2. Inside a kernel: on its '{' line, before a body item, or before its '}'.
        inside = [(name, meta, body) for name, meta, body in kernels
                  if (meta.line, meta.column) < (line, column) < (meta.end_line, meta.end_column)]
        if inside:
            name, meta, body = inside[0]
            following = [key for key, m in body if (m.line, m.column) > (line, column)]
            if line == meta.line and not any(m.line == line for _, m in body):
                add(comments.trailing, ("kernel_head", name), body_text)
            elif following:
                add(comments.leading, following[0], body_text)
            else:
                add(comments.leading, ("kernel_end", name), body_text)
            continue
        # 3. Inside another multi-line statement, or before one: it leads that statement; after all: the end.
        following = [key for key, m in top if (m.end_line, m.end_column) > (line, column)]
        add(comments.leading, following[0] if following else ("end",), body_text)
    return comments
