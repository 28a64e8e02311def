"""Static checks: every error class with its location, what was found, what is allowed and a hint."""

from __future__ import annotations

import pytest

from dsl_compiler import check, check_text, parse
from dsl_compiler.checks import load_target

GOOD = """input x: f32[256, 512]
param w: f32[1024, 512] = "fc.weight"
param b: f32[1024] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32
  tile = 128x256x32; cluster = 2x1x1; stages = 4; schedule = cooperative
  store y: f32 = relu(acc + b[col])
}
output y
"""


def errors(text: str, backend: str | None = "cutlass"):
    program, diags = check_text(text, backend=backend)
    assert program is not None, [d.render() for d in diags]
    return [d for d in diags if d.severity == "error"]


def one(text: str, code: str, line: int, backend: str | None = "cutlass"):
    found = [d for d in errors(text, backend) if d.code == code]
    assert found, f"no {code} error in:\n{text}"
    d = found[0]
    assert d.span is not None and d.span.line == line, d.render()
    assert d.span.column >= 1
    assert d.found and d.expected and d.hint, d.render()
    return d


def test_good_program_has_no_errors():
    assert errors(GOOD) == []


def test_target_description_is_data():
    t = load_target("sm90a")
    assert t.max_smem_bytes == 232448 and t.max_cluster_size == 8
    assert t.mma_k == {"tf32x3": 8, "tf32": 8, "bf16": 16, "f16": 16}
    program, _ = parse(GOOD)
    assert check(program, target="sm00")[0].code == "target"


def _edit(*pairs: tuple[str, str]) -> str:
    text = GOOD
    for old, new in pairs:
        assert old in text, f"the edit {old!r} -> {new!r} finds nothing to replace"  # else the row tests less than it says
        text = text.replace(old, new)
    return text


_BF16 = (("f32[", "bf16["), ("math = tf32", "math = bf16"))
_SECOND_KERNEL = "kernel g = gemm(y, w^T) { math = tf32; store z: f32 = acc }\noutput z"

# One edit of GOOD per row: the error class it must raise, on which line, and what the diagnostic's
# fields must say (field -> substrings).
SINGLE_ERRORS = [
    pytest.param([("acc + b[col]", "acc + bias[col]")], "undefined-name", 7,
                 {"message": ["'bias' is not defined"]}, id="undefined-name"),
    pytest.param([("output y", _SECOND_KERNEL.replace("gemm(y, w^T)", "gemm(y, w)")), ("gemm(x, w^T)", "gemm(z, w^T)")],
                 "undefined-name", 4, {"message": ["before it is defined"], "hint": ["move"]}, id="used-before-defined"),
    pytest.param([("store y: f32", "store x: f32")], "duplicate-name", 7,
                 {"message": ["defined twice"]}, id="duplicate-name"),
    pytest.param([("gemm(x, w^T)", "gemm(x, w)")], "shape-mismatch", 4,
                 {"message": ["K=512"], "hint": ["w^T"]}, id="shape-between-operands"),
    # 256 = M: the hint names the other index
    pytest.param([("param b: f32[1024]", "param b: f32[256]")], "shape-mismatch", 7,
                 {"message": ["[col]"], "hint": ["b[row]"]}, id="shape-of-epilogue-vector"),
    pytest.param([("output y", _SECOND_KERNEL)], "shape-mismatch", 9,
                 {"message": ["A gives K=1024, B gives K=512"]}, id="shape-between-stages"),
    pytest.param([("math = tf32", "math = bf16")], "dtype", 5, {"message": ["bf16 over f32"]}, id="dtype-math"),
    pytest.param([("param w: f32[1024, 512]", "param w: bf16[1024, 512]")], "dtype", 4,
                 {"message": ["different element types"]}, id="dtype-operands"),
    pytest.param([("[256, 512]", "[256, 510]"), ("[1024, 512]", "[1024, 510]")], "alignment", 4,
                 {"message": ["16 bytes"], "expected": ["multiple of 4"]}, id="alignment-of-contiguous-extent"),
    pytest.param([("math = tf32", "math = tf32; alignment = 2")], "alignment", 5,
                 {"found": ["alignment = 2"]}, id="alignment-knob"),
    pytest.param([("128x256x32", "96x256x32")], "tile", 6, {"expected": ["multiple of 64"]}, id="tile-m"),
    pytest.param([("128x256x32", "128x264x32")], "tile", 6, {"expected": ["8..256"]}, id="tile-n"),
    pytest.param([("128x256x32", "128x256x12")], "tile", 6, {"expected": ["multiple of 8", "tf32"]}, id="tile-k"),
    pytest.param([("128x256x32", "64x256x32")], "tile", 6, {"message": ["cooperative"]}, id="tile-cooperative"),
    pytest.param([*_BF16, ("128x256x32", "128x256x40")], "tile", 6,
                 {"expected": ["multiple of 16"]}, id="tile-k-follows-the-math-type"),
    pytest.param([("cluster = 2x1x1", "cluster = 4x4x1")], "cluster", 6, {"expected": ["at most 8"]}, id="cluster-size"),
    pytest.param([("cluster = 2x1x1", "cluster = 3x1x1")], "cluster", 6,
                 {"message": ["not a legal cluster"]}, id="cluster-shape"),
    # 8 x 48 KB does not fit; 4 does
    pytest.param([("stages = 4", "stages = 8")], "smem", 6,
                 {"expected": ["232448"], "hint": ["stages = 4"]}, id="smem-budget"),
    pytest.param([("stages = 4", "stages = auto"), ("128x256x32", "256x256x128")], "smem", 6,
                 {"hint": ["smaller tile"]}, id="smem-budget-with-auto-stages"),
    pytest.param([("relu(acc + b[col])", "relu(acc) + row_sum(acc)")], "reduction", 7,
                 {"hint": ["own store"]}, id="reduction-only-at-the-top"),
    pytest.param([("schedule = cooperative", "schedule = cooperative; decomposition = split_k; split_k = 2"),
                  ("  store y: f32 = relu(acc + b[col])", "  store y: f32 = acc\n  store s: f32 = row_max(acc)")],
                 "reduction", 8, {"expected": ["data_parallel"]}, id="reduction-with-split-k"),
    pytest.param([("stages = 4", "stages = 4; split_k = 3")], "config", 6,
                 {"hint": ["decomposition = split_k"]}, id="config-split-k"),
    pytest.param([("stages = 4", "stages = 4; swizzle = 3")], "config", 6, {"message": ["swizzle"]}, id="config-swizzle"),
    pytest.param([("output y", "torch z = reshape(y, (3, 7))\noutput z")], "torch-step", 9,
                 {"message": ["reshape"], "found": ["y [256, 1024]"]}, id="torch-step-fails"),
    pytest.param([("output y", "torch z = frobnicate(y)\noutput z")], "unknown-function", 9,
                 {"message": ["frobnicate"]}, id="torch-step-unknown"),
    pytest.param([("output y", "output y, q")], "undefined-name", 9,
                 {"message": ["'q' is not defined"]}, id="output-undefined"),
    pytest.param([("output y", "output y, y")], "duplicate-name", 9, {"message": ["output twice"]}, id="output-twice"),
    pytest.param([("gemm(x, w^T)", "gemm(x, wt)"), ('param w: f32[1024, 512] = "fc.weight"', "input wt: f32[512, 1024]")],
                 "config", 6, {"message": ["not K-major (wt)"], "hint": ["stages = auto"]}, id="tf32-mn-major-needs-auto-stages"),
    pytest.param([("gemm(x, w^T)", "gemm(xt^T, wt)"), ("input x: f32[256, 512]", "input xt: f32[512, 256]"), ("128x256x32", "128x256x64"),
                  ('param w: f32[1024, 512] = "fc.weight"', "input wt: f32[512, 1024]"), ("stages = 4", "stages = auto")],
                 "config", 6, {"message": ["both tf32 operands"], "hint": ["tile K = 32"]}, id="tf32-both-mn-major-tile-k"),
]


@pytest.mark.parametrize("edits, code, line, says", SINGLE_ERRORS)
def test_one_error(edits, code, line, says):
    d = one(_edit(*edits), code, line)
    for field, parts in says.items():
        for part in parts:
            assert part in getattr(d, field), d.render()


def test_f32_math_is_an_error_for_cutlass_and_a_warning_for_the_interpreter():
    text = GOOD.replace("  math = tf32\n", "")
    d = one(text, "dtype", 4)
    assert "math = tf32" in d.hint
    program, diags = check_text(text, backend=None)
    assert [x.severity for x in diags if x.code == "dtype"] == ["warning"]
    assert "SIMT" in diags[0].message


def test_reductions_only_where_supported():
    conv = """input x: f32[2, 16, 8, 8] channels_last
param w: f32[32, 16, 3, 3] channels_last = "c.weight"
kernel c = conv2d(x, w, padding=1) {
  math = tf32
  store y: f32 = acc
  store s: f32 = col_sum(acc)
}
output y, s
"""
    d = one(conv, "reduction", 6)
    assert "conv" in d.message and "torch step" in d.hint


def test_conv_layout():
    conv = """input x: f32[2, 16, 8, 8]
param w: f32[32, 16, 3, 3] channels_last = "c.weight"
kernel c = conv2d(x, w, padding=1) { math = tf32; store y: f32 = acc }
output y
"""
    d = one(conv, "layout", 3)
    assert "channels_last(x)" in d.hint


def test_backend_limits_come_from_the_emitter():
    pytest.importorskip("dsl_compiler.cutlass.emit")
    dw = """input x: f32[2, 16, 8, 8] channels_last
param w: f32[32, 1, 3, 3] channels_last = "c.weight"
kernel c = conv2d(x, w, padding=1, groups=16) { math = tf32; store y: f32 = acc }
output y
"""
    program, diags = check_text(dw, backend=None)
    assert [d for d in diags if d.severity == "error"] == []  # the language and the target allow it
    found = errors(dw)  # the CUTLASS backend builds no depthwise conv with a channel multiplier (K = 2C)
    assert found and found[0].code == "unsupported" and found[0].hint


def test_every_diagnostic_renders_with_location():
    text = GOOD.replace("128x256x32", "96x300x12").replace("cluster = 2x1x1", "cluster = 16x1x1")
    program, diags = check_text(text)
    assert len(diags) >= 4
    for d in diags:
        rendered = d.render("prog.mcu")
        assert rendered.startswith(f"prog.mcu:{d.span.line}:{d.span.column}: error[")
        assert "hint:" in rendered


def test_checks_are_sorted_by_location():
    text = GOOD.replace("128x256x32", "96x256x32").replace("acc + b[col]", "acc + q[col]")
    program, diags = check_text(text)
    lines = [d.span.line for d in diags if d.span]
    assert lines == sorted(lines)


def test_a_program_for_the_wrong_op():
    d = one("""input x: f32[2, 16, 8, 8]
input w: f32[16, 16]
kernel k = gemm(x, w) { math = tf32; store y: f32 = acc }
output y
""", "shape-mismatch", 3)
    assert "rank 4" in d.message and "reshape" in d.hint
    d = one("""input x: f32[64, 64]
input w: f32[64, 64]
kernel k = conv2d(x, w) { math = tf32; store y: f32 = acc }
output y
""", "shape-mismatch", 3)
    assert "conv2d needs rank-4" in d.message
    d = one("""input x: f32[2, 16, 8] channels_last
input w: f32[32, 16, 3] channels_last
kernel k = conv2d(x, w) { math = tf32; store y: f32 = acc }
output y
""", "shape-mismatch", 3)
    assert "use conv1d" in d.hint


def test_16_bit_math_reads_either_operand_order():
    bf16 = GOOD.replace("f32[", "bf16[").replace("math = tf32", "math = bf16").replace("x32", "x64")
    text = bf16.replace("gemm(x, w^T)", "gemm(x, wt)").replace('param w: bf16[1024, 512] = "fc.weight"',
                                                            'input wt: bf16[512, 1024]')
    assert [d for d in errors(text) if d.code == "layout"] == []  # 16-bit types read either order
