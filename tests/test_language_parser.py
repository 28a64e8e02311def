"""μCUTLASS parser and printer: the syntax, spans, syntax diagnostics, the round trip and bad input."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsl_compiler import format_program, ir, parse
from dsl_compiler.parser import MAX_NESTING, MAX_PROGRAM_CHARS

SAMPLE = """program linear_gelu                      # optional name
input x: f32[128, 4096]
param w: f32[4096, 4096] = "fc.weight"
param b: f32[4096] = "fc.bias"
param cw: f32[64, 4, 3, 3] channels_last = "conv.weight"
input x4: f32[2, 4, 16, 16]

kernel fc = gemm(x, w^T) {
  math = tf32; accum = f32
  tile = 128x256x32; cluster = 2x1x1; stages = auto; schedule = cooperative
  raster = along_n; swizzle = 2; decomposition = data_parallel; split_k = 1
  let h = acc + b[col]
  store y: f32 = gelu(h)
  store s: f32 = row_sum(h)
}
torch xl = channels_last(x4)
kernel c1 = conv2d(xl, cw, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) { math = tf32; store y2: f32 = relu(acc) }
torch z = softmax(y, dim=1)
output z, y2
"""


def test_sample_parses_to_the_expected_ir():
    program, diags = parse(SAMPLE)
    assert diags == []
    assert program.name == "linear_gelu"
    assert [d.name for d in program.inputs] == ["x", "x4"]
    w = program.decl("w")
    assert (w.kind, w.dtype, w.shape, w.source) == ("param", "f32", (4096, 4096), "fc.weight")
    assert program.decl("cw").layout == "channels_last"
    fc, c1 = program.kernels
    assert fc.op == ir.GemmOp(a=ir.Operand(name="x"), b=ir.Operand(name="w", transpose=True))
    cfg = fc.config
    assert (cfg.math, cfg.tile, cfg.cluster, cfg.stages, cfg.schedule, cfg.raster, cfg.swizzle) == (
        "tf32", (128, 256, 32), (2, 1, 1), "auto", "cooperative", "along_n", 2)
    assert fc.lets[0].expr == ir.Binary(fn="add", lhs=ir.Acc(), rhs=ir.Ref(name="b", index="col"))
    assert fc.stores[1].expr == ir.Reduce(fn="row_sum", arg=ir.Ref(name="h"))
    assert c1.op.stride == (1, 1) and c1.op.padding == (1, 1) and c1.op.spatial_dims == 2
    softmax = program.torch_steps[1]
    assert softmax.fn == "softmax" and softmax.kwargs == (ir.Kwarg(key="dim", value=1),)
    assert program.outputs == ("z", "y2")


def test_spans_point_at_the_source():
    program, _ = parse(SAMPLE)
    fc = program.kernels[0]
    assert (fc.span.line, fc.span.column) == (8, 1)
    assert (fc.config.span_of("tile").line, fc.config.span_of("tile").column) == (10, 3)
    assert fc.stores[0].span.line == 13
    assert program.decl("b").span.line == 4


def test_operator_precedence_and_negative_literals():
    program, diags = parse("input x: f32[8, 8]\nkernel k = gemm(x, x) { store y: f32 = acc - 2 * -acc / 4 + -1.5 }\noutput y")
    assert diags == []
    e = program.kernels[0].stores[0].expr
    # ((acc - ((2 * (-acc)) / 4)) + (-1.5))
    assert e.fn == "add" and e.rhs == ir.Const(value=-1.5)
    assert e.lhs.fn == "sub" and e.lhs.rhs.fn == "div"
    assert e.lhs.rhs.lhs == ir.Binary(fn="mul", lhs=ir.Const(value=2.0), rhs=ir.Unary(fn="neg", arg=ir.Acc()))


def test_defaults_of_conv_options_and_1d_tuples():
    program, diags = parse("input x: f32[1, 8, 32] channels_last\nparam w: f32[8, 8, 3] channels_last = \"c.weight\"\n"
                           "kernel k = conv1d(x, w, padding=1) { store y: f32 = acc }\noutput y")
    assert diags == []
    op = program.kernels[0].op
    assert (op.stride, op.padding, op.dilation, op.groups) == ((1,), (1,), (1,), 1)
    assert "stride=1, padding=1, dilation=1" in format_program(program)


@pytest.mark.parametrize(
    "text, line, column, words",
    [
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { tile = 128x128 store y: f32 = acc }\noutput y", 2, 32, "a tile like 128x128x32"),
        ("input x: f32[4 4]\noutput x", 1, 16, "','"),
        ("input x f32[4]\noutput x", 1, 9, "':'"),
        ("input x: f32[4]\nkernel k = gemm(x, x) { store y: f32 = acc\noutput y", 3, 1, "'}'"),
        ("input x: f32[4]\nkernel k = gemm(x, x) { store y: f32 = acc + }\noutput y", 2, 46, "a name"),
        ("input x: f32[4]\noutput x $", 2, 10, None),
    ],
)
def test_syntax_errors_have_location_and_words(text, line, column, words):
    program, diags = parse(text)
    assert program is None and len(diags) == 1
    d = diags[0]
    assert d.code == "syntax" and d.hint
    assert (d.span.line, d.span.column) == (line, column), d.render()
    if words:
        assert words in d.expected, d.render()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("input x: f64[4]\noutput x", "unknown element type 'f64'"),
        ("input x: tf32[4]\noutput x", "tf32 is a math mode"),
        ("input x: f32[4, 4]\nkernel k = gemv(x, x) { store y: f32 = acc }\noutput y", "unknown op 'gemv'"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { tile = 1x2x3 tile = 1x2x3 store y: f32 = acc }\noutput y", "set twice"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { tiles = 1x2x3 store y: f32 = acc }\noutput y", "unknown knob 'tiles'"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { schedule = fast store y: f32 = acc }\noutput y", "bad value for schedule"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = softmax(acc) }\noutput y", "unknown function 'softmax'"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = clamp(acc, acc, 1) }\noutput y", "must be numbers"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = relu(acc, 1) }\noutput y", "takes 1 argument"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = x[diag] }\noutput y", "unknown index 'diag'"),
        ("input x: f32[4, 4]\nkernel k = gemm(x, x) { let h = acc }\noutput x", "stores nothing"),
        ("input x: f32[4, 4]\nkernel k = gemm(x) { store y: f32 = acc }\noutput y", "takes 2 tensors"),
        ("input x: f32[4, 4]\nkernel k = conv2d(x, x, stride=(1, 1, 1)) { store y: f32 = acc }\noutput y", "stride of conv2d"),
        ("input x: f32[4, 4]\nkernel k = grouped_gemm(x, x) { store y: f32 = acc }\noutput y", "needs group_sizes"),
        ("input x: f32[4, 0]\noutput x", "zero extent"),
        ("input x: f32[4]", "no output line"),
        ("input x: f32[4]\noutput x\noutput x", "more than one output line"),
        ('input x: f32[4] = "a"\noutput x', "cannot name a state_dict key"),
        ("input input: f32[4]\noutput x", "reserved word"),
    ],
)
def test_semantic_parse_errors_are_explained(text, fragment):
    program, diags = parse(text)
    assert program is None
    rendered = "\n".join(d.render() for d in diags)
    assert fragment in rendered
    assert all(d.hint for d in diags)
    assert all(d.span is not None for d in diags if "output line" not in d.message)


# ---------------------------------------------------------------------------------------------
# Round trip: parse(format_program(p)) == p over generated programs

RESERVED = {"program", "input", "param", "kernel", "torch", "output", "let", "store", "acc", "True", "False", "None"}
names = st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True).filter(lambda s: s not in RESERVED)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
small_int = st.integers(min_value=1, max_value=512)


def exprs() -> st.SearchStrategy:
    leaves = st.one_of(
        st.just(ir.Acc()),
        finite.map(lambda v: ir.Const(value=v)),
        st.builds(ir.Ref, name=names, index=st.sampled_from(["full", "row", "col", "scalar"])),
    )

    def extend(children):
        return st.one_of(
            st.builds(ir.Unary, fn=st.sampled_from(ir.UnaryFn.__args__), arg=children),
            st.builds(ir.Binary, fn=st.sampled_from(ir.BinaryFn.__args__), lhs=children, rhs=children),
            st.builds(lambda fn, a, p: ir.ParamCall(fn=fn, arg=a, params=p[: 2 if fn in ("clamp", "hardtanh") else 1]),
                      st.sampled_from(ir.ParamFn.__args__), children, st.tuples(finite, finite)),
            st.builds(ir.Reduce, fn=st.sampled_from(ir.ReduceFn.__args__), arg=children),
        )

    return st.recursive(leaves, extend, max_leaves=8)


configs = st.builds(
    ir.KernelConfig,
    math=st.sampled_from([None, "f32", "tf32", "bf16", "f16"]),
    accum=st.sampled_from(["f32", "f16"]),
    tile=st.one_of(st.none(), st.tuples(small_int, small_int, small_int)),
    cluster=st.tuples(small_int, small_int, small_int),
    stages=st.one_of(st.just("auto"), small_int),
    schedule=st.sampled_from(["auto", "cooperative", "pingpong"]),
    raster=st.sampled_from(["auto", "along_m", "along_n"]),
    swizzle=small_int,
    decomposition=st.sampled_from(["data_parallel", "split_k", "stream_k"]),
    split_k=small_int,
    alignment=st.one_of(st.none(), small_int),
)
operands = st.builds(ir.Operand, name=names, transpose=st.booleans())


@st.composite
def conv_ops(draw):
    d = draw(st.sampled_from([1, 2, 3]))
    vec = lambda lo: st.tuples(*[st.integers(min_value=lo, max_value=9)] * d)  # noqa: E731
    return ir.ConvOp(spatial_dims=d, x=draw(operands), w=draw(operands), stride=draw(vec(1)), padding=draw(vec(0)),
                     dilation=draw(vec(1)), groups=draw(small_int))


ops = st.one_of(
    st.builds(ir.GemmOp, a=operands, b=operands),
    st.builds(ir.GroupedGemmOp, a=operands, b=operands, group_sizes=st.lists(small_int, min_size=1, max_size=4).map(tuple)),
    conv_ops(),
)
kernels = st.builds(
    ir.Kernel, name=names, op=ops, config=configs,
    lets=st.lists(st.builds(ir.Let, name=names, expr=exprs()), max_size=2).map(tuple),
    stores=st.lists(st.builds(ir.Store, name=names, dtype=st.sampled_from(["f32", "bf16", "f16"]), expr=exprs()),
                    min_size=1, max_size=2).map(tuple),
)
safe_text = st.text(alphabet=st.characters(blacklist_characters='"\\\n\r', blacklist_categories=("Cs",)), max_size=12)
scalars = st.one_of(st.booleans(), st.integers(-10**6, 10**6), finite, safe_text, st.none())
literals = st.one_of(scalars, st.lists(scalars, max_size=3).map(tuple))


@st.composite
def torch_steps(draw):
    args = draw(st.lists(st.one_of(st.builds(ir.TensorArg, name=names), st.builds(ir.LiteralArg, value=literals)),
                         max_size=3))
    keys = draw(st.lists(names, max_size=2, unique=True))
    kwargs = [ir.Kwarg(key=k, value=draw(literals)) for k in keys]
    return ir.TorchStep(outputs=tuple(draw(st.lists(names, min_size=1, max_size=2))), fn=draw(names),
                        args=tuple(args), kwargs=tuple(kwargs))


@st.composite
def decls(draw):
    kind = draw(st.sampled_from(["input", "param"]))
    return ir.TensorDecl(kind=kind, name=draw(names), dtype=draw(st.sampled_from(["f32", "bf16", "f16"])),
                         shape=tuple(draw(st.lists(small_int, max_size=4))),
                         layout=draw(st.sampled_from(["contiguous", "channels_last"])),
                         source=draw(st.one_of(st.none(), safe_text)) if kind == "param" else None)


programs = st.builds(
    ir.Program,
    name=st.one_of(st.none(), names),
    decls=st.lists(decls(), max_size=3).map(tuple),
    steps=st.lists(st.one_of(kernels, torch_steps()), max_size=3).map(tuple),
    outputs=st.lists(names, min_size=1, max_size=2).map(tuple),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_round_trip_over_generated_programs(program):
    text = format_program(program)
    parsed, diags = parse(text)
    assert diags == [], text + "\n" + "\n".join(d.render() for d in diags)
    assert parsed == program, text
    assert format_program(parsed) == text


def test_round_trip_keeps_float_constants_exact():
    values = [0.1, -2.5e-12, 1e16, 3.0, -0.0, math.pi]
    for v in values:
        p = ir.Program(decls=(ir.TensorDecl(kind="input", name="x", dtype="f32", shape=(4, 4)),),
                       steps=(ir.Kernel(name="k", op=ir.GemmOp(a=ir.Operand(name="x"), b=ir.Operand(name="x")),
                                        stores=(ir.Store(name="y", dtype="f32",
                                                         expr=ir.Binary(fn="mul", lhs=ir.Acc(), rhs=ir.Const(value=v))),)),),
                       outputs=("y",))
        parsed, _ = parse(format_program(p))
        assert parsed.kernels[0].stores[0].expr.rhs.value == v


# ---------------------------------------------------------------------------------------------
# Bad input of any kind: diagnostics, never an exception


def _assert_diagnosed(text):
    program, diags = parse(text)
    assert program is not None or diags, "a failed parse must say why"
    for d in diags:
        assert d.message and d.hint is not None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_random_text_never_raises(text):
    _assert_diagnosed(text)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_raise(data):
    _assert_diagnosed(data.decode("utf-8", errors="replace"))
    _assert_diagnosed(data.decode("latin-1"))


TOKENS = ["input", "param", "kernel", "torch", "output", "let", "store", "acc", "gemm", "conv2d", "x", "w", "y",
          "f32", "[", "]", "(", ")", "{", "}", ",", ":", ";", "=", "+", "-", "*", "/", "^T", "4", "1.5", "128x128x32",
          '"k"', "row", "col", "tile", "relu", "\n"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=60))
def test_token_soup_never_raises(tokens):
    _assert_diagnosed(" ".join(tokens))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_mutated_programs_never_raise(data):
    text = SAMPLE
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text) - 1))
        j = data.draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + data.draw(st.sampled_from(["", "(", ")", "}", "-", "x", "0", "\n", "^T", "#"])) + text[j:]
    _assert_diagnosed(text)


def test_empty_and_comment_only_programs():
    for text in ["", "   \n\t", "# only a comment\n"]:
        program, diags = parse(text)
        assert program is None and diags[0].message == "the program is empty"


def test_huge_file_is_refused_quickly():
    text = "input x: f32[4]\n" * (10 * 1024 * 1024 // 16)
    assert len(text) > MAX_PROGRAM_CHARS
    program, diags = parse(text)
    assert program is None and "too large" in diags[0].message


def test_random_10mb_file():
    rng = random.Random(0)
    text = rng.randbytes(10 * 1024 * 1024).decode("latin-1")
    program, diags = parse(text)
    assert program is None and diags


@pytest.mark.parametrize("opener", ["(", "[", "{"])
def test_deep_bracket_nesting(opener):
    text = "input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = " + opener * 50_000 + "acc }\noutput y"
    program, diags = parse(text)
    assert program is None and "nested too deeply" in diags[0].message
    assert diags[0].span.line == 2


@pytest.mark.parametrize("body", ["-" * 5_000 + "acc", "acc + " * 2_000 + "acc", "relu(" * 60 + "acc" + ")" * 60 + " + acc" * 10],
                         ids=["unary-chain", "sum-chain", "calls-then-sums"])
def test_deep_expressions_are_refused_with_a_location(body):
    text = "input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = " + body + " }\noutput y"
    program, diags = parse(text)
    assert program is None and "nested too deeply" in diags[0].message
    assert diags[0].span is not None and diags[0].span.line == 2


def test_nesting_at_the_limit_is_accepted():
    body = "relu(" * (MAX_NESTING - 1) + "acc" + ")" * (MAX_NESTING - 1)
    program, diags = parse("input x: f32[4, 4]\nkernel k = gemm(x, x) { store y: f32 = " + body + " }\noutput y")
    assert diags == [] and program is not None


def test_non_text_input_is_a_diagnostic():
    program, diags = parse(None)  # type: ignore[arg-type]
    assert program is None and diags[0].code == "syntax"


# ---------------------------------------------------------------------------------------------
# The checks never fail on a program the parser accepts


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs)
def test_checks_never_raise_on_generated_programs(program):
    from dsl_compiler import check

    for backend in ("cutlass", None):
        diags = check(program, backend=backend)
        assert not [d for d in diags if d.code == "internal"], [d.render() for d in diags]


WHITELIST_STEPS = ["softmax", "reshape", "cat", "chunk", "pad", "batch_norm", "layer_norm", "max_pool2d", "sum",
                   "conv2d", "linear", "permute", "clamp", "frobnicate"]


@settings(max_examples=40, deadline=None)
@given(fn=st.sampled_from(WHITELIST_STEPS),
       args=st.lists(st.one_of(st.just("x"), st.just("w"), literals), max_size=3),
       kwargs=st.dictionaries(st.sampled_from(["dim", "eps", "value", "keepdim"]), literals, max_size=2))
def test_checks_of_arbitrary_torch_steps_never_raise(fn, args, kwargs):
    from dsl_compiler import check
    from dsl_compiler.printer import format_literal

    parts = [a if a in ("x", "w") else format_literal(a) for a in args]
    parts += [f"{k}={format_literal(v)}" for k, v in kwargs.items()]
    text = (f"input x: f32[2, 4, 8, 8]\ninput w: f32[4, 4]\ntorch y = {fn}({', '.join(parts)})\noutput y\n")
    program, diags = parse(text)
    assert program is not None, [d.render() for d in diags]
    for d in check(program):
        assert d.code != "internal", d.render()
        assert d.span is not None and d.hint


def test_infinity_is_a_number_that_round_trips_and_a_reserved_word():
    """`inf` (and `-inf`) are numbers in epilogues and torch-step literals (a clamp without a bound, a causal mask's
    fill); the printer writes them back the same; a tensor cannot be named inf; NaN has no spelling."""
    from dsl_compiler.printer import format_number

    text = """program p
input x: f32[16, 64]
param w: f32[32, 64]
param inf_scale: f32[32]
kernel k = gemm(x, w^T) {
  store y: f32 = min(acc, inf) + inf_scale[col] * -inf
}
torch z = clamp(y, min=-inf, max=inf)
output z
"""
    program, diagnostics = parse(text)
    assert not diagnostics, diagnostics
    (kernel,) = program.kernels
    consts = [e.value for e in _consts(kernel.stores[0].expr)]
    assert consts == [math.inf, -math.inf]
    step = program.torch_steps[0]
    assert [k.value for k in step.kwargs] == [-math.inf, math.inf]
    assert parse(format_program(program))[0] == program
    _, bad = parse(text.replace("inf_scale", "inf"))
    assert bad and bad[0].code == "syntax" and "reserved" in bad[0].hint
    with pytest.raises(ValueError, match="NaN"):
        format_number(float("nan"))


def _consts(e):
    if isinstance(e, ir.Const):
        return [e]
    return [c for child in (getattr(e, "arg", None), getattr(e, "lhs", None), getattr(e, "rhs", None))
            if child is not None for c in _consts(child)]
