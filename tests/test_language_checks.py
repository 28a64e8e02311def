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
    assert t.mma_k == {"tf32": 8, "bf16": 16, "f16": 16}
    program, _ = parse(GOOD)
    assert check(program, target="sm00")[0].code == "target"


def test_undefined_name():
    d = one(GOOD.replace("acc + b[col]", "acc + bias[col]"), "undefined-name", 7)
    assert "'bias' is not defined" in d.message


def test_name_used_before_it_is_defined():
    text = GOOD.replace("output y", "kernel g = gemm(y, w) { math = tf32; store z: f32 = acc }\noutput z").replace(
        "gemm(x, w^T)", "gemm(z, w^T)")
    d = one(text, "undefined-name", 4)
    assert "before it is defined" in d.message and "move" in d.hint


def test_duplicate_name():
    d = one(GOOD.replace("store y: f32", "store x: f32"), "duplicate-name", 7)
    assert "defined twice" in d.message


def test_shape_mismatch_between_operands():
    d = one(GOOD.replace("gemm(x, w^T)", "gemm(x, w)"), "shape-mismatch", 4)
    assert "K=512" in d.message and "w^T" in d.hint


def test_shape_mismatch_of_epilogue_vector():
    d = one(GOOD.replace('param b: f32[1024]', 'param b: f32[256]'), "shape-mismatch", 7)
    assert "[col]" in d.message and "b[row]" in d.hint  # 256 = M: the hint names the other index


def test_shape_mismatch_between_stages():
    text = GOOD.replace("output y", "kernel g = gemm(y, w^T) { math = tf32; store z: f32 = acc }\noutput z")
    d = one(text, "shape-mismatch", 9)
    assert "A gives K=1024, B gives K=512" in d.message


def test_dtype_operands_and_math():
    d = one(GOOD.replace("math = tf32", "math = bf16"), "dtype", 5)
    assert "bf16 over f32" in d.message
    d = one(GOOD.replace('param w: f32[1024, 512]', 'param w: bf16[1024, 512]'), "dtype", 4)
    assert "different element types" in d.message


def test_f32_math_is_an_error_for_cutlass_and_a_warning_for_the_interpreter():
    text = GOOD.replace("  math = tf32\n", "")
    d = one(text, "dtype", 4)
    assert "math = tf32" in d.hint
    program, diags = check_text(text, backend=None)
    assert [x.severity for x in diags if x.code == "dtype"] == ["warning"]
    assert "SIMT" in diags[0].message


def test_alignment_of_contiguous_extent():
    text = GOOD.replace("[256, 512]", "[256, 510]").replace("[1024, 512]", "[1024, 510]")
    d = one(text, "alignment", 4)
    assert "16 bytes" in d.message and "multiple of 4" in d.expected


def test_alignment_knob():
    d = one(GOOD.replace("math = tf32", "math = tf32; alignment = 2"), "alignment", 5)
    assert "alignment = 2" in d.found


def test_tile_rules():
    d = one(GOOD.replace("128x256x32", "96x256x32"), "tile", 6)
    assert "multiple of 64" in d.expected
    d = one(GOOD.replace("128x256x32", "128x264x32"), "tile", 6)
    assert "8..256" in d.expected
    d = one(GOOD.replace("128x256x32", "128x256x12"), "tile", 6)
    assert "multiple of 8" in d.expected and "tf32" in d.expected
    d = one(GOOD.replace("128x256x32", "64x256x32"), "tile", 6)
    assert "cooperative" in d.message


def test_tile_k_follows_the_math_type():
    bf16 = GOOD.replace("f32[", "bf16[").replace("math = tf32", "math = bf16").replace("store y: bf16", "store y: f32")
    d = one(bf16.replace("128x256x32", "128x256x40"), "tile", 6)
    assert "multiple of 16" in d.expected


def test_cluster_limits():
    d = one(GOOD.replace("cluster = 2x1x1", "cluster = 4x4x1"), "cluster", 6)
    assert "at most 8" in d.expected
    d = one(GOOD.replace("cluster = 2x1x1", "cluster = 3x1x1"), "cluster", 6)
    assert "not a legal cluster" in d.message


def test_shared_memory_budget():
    d = one(GOOD.replace("stages = 4", "stages = 8"), "smem", 6)
    assert "232448" in d.expected and "stages = 4" in d.hint  # 8 x 48 KB does not fit; 4 does


def test_shared_memory_budget_with_auto_stages():
    text = GOOD.replace("stages = 4", "stages = auto").replace("128x256x32", "256x256x128")
    d = one(text, "smem", 6)
    assert "smaller tile" in d.hint


def test_reductions_only_at_the_top_of_a_store():
    d = one(GOOD.replace("relu(acc + b[col])", "relu(acc) + row_sum(acc)"), "reduction", 7)
    assert "own store" in d.hint


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


def test_reduction_with_split_k():
    text = GOOD.replace("schedule = cooperative", "schedule = cooperative; decomposition = split_k; split_k = 2").replace(
        "  store y: f32 = relu(acc + b[col])", "  store y: f32 = acc\n  store s: f32 = row_max(acc)")
    d = one(text, "reduction", 8)
    assert "data_parallel" in d.expected


def test_config_consistency():
    d = one(GOOD.replace("stages = 4", "stages = 4; split_k = 3"), "config", 6)
    assert "decomposition = split_k" in d.hint
    d = one(GOOD.replace("stages = 4", "stages = 4; swizzle = 3"), "config", 6)
    assert "swizzle" in d.message


def test_conv_layout():
    conv = """input x: f32[2, 16, 8, 8]
param w: f32[32, 16, 3, 3] channels_last = "c.weight"
kernel c = conv2d(x, w, padding=1) { math = tf32; store y: f32 = acc }
output y
"""
    d = one(conv, "layout", 3)
    assert "channels_last(x)" in d.hint


def test_torch_step_errors():
    d = one(GOOD.replace("output y", "torch z = reshape(y, (3, 7))\noutput z"), "torch-step", 9)
    assert "reshape" in d.message and "y [256, 1024]" in d.found
    d = one(GOOD.replace("output y", "torch z = frobnicate(y)\noutput z"), "unknown-function", 9)
    assert "frobnicate" in d.message


def test_backend_limits_come_from_the_emitter():
    pytest.importorskip("dsl_compiler.emit_cutlass")
    dw = """input x: f32[2, 16, 8, 8] channels_last
param w: f32[16, 1, 3, 3] channels_last = "c.weight"
kernel c = conv2d(x, w, padding=1, groups=16) { math = tf32; store y: f32 = acc }
output y
"""
    program, diags = check_text(dw, backend=None)
    assert [d for d in diags if d.severity == "error"] == []  # the language and the target allow it
    found = errors(dw)  # the CUTLASS backend does not build grouped conv
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


def test_output_line_errors_point_at_the_output_line():
    d = one(GOOD.replace("output y", "output y, q"), "undefined-name", 9)
    assert "'q' is not defined" in d.message
    d = one(GOOD.replace("output y", "output y, y"), "duplicate-name", 9)
    assert "output twice" in d.message


def test_tf32_reads_k_major_operands():
    d = one(GOOD.replace("gemm(x, w^T)", "gemm(x, wt)").replace('param w: f32[1024, 512] = "fc.weight"',
                                                              'input wt: f32[512, 1024]'), "layout", 4)
    assert "K-major" in d.message and "transpose(wt, 0, 1)" in d.hint
    bf16 = GOOD.replace("f32[", "bf16[").replace("math = tf32", "math = bf16").replace("x32", "x64")
    text = bf16.replace("gemm(x, w^T)", "gemm(x, wt)").replace('param w: bf16[1024, 512] = "fc.weight"',
                                                            'input wt: bf16[512, 1024]')
    assert [d for d in errors(text) if d.code == "layout"] == []  # 16-bit types read either order
