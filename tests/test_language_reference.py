"""Each statement of docs/language.md that a writer of programs relies on, checked against the checker (and the
interpreter where the statement is about what runs), and the diagnostics that used to mislead."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from dsl_compiler import check_text, interpreter, parse, shapes, torch_steps
from dsl_compiler.ops import CPP_HELPERS, OPS

ROOT = Path(__file__).resolve().parent.parent
DOC = re.sub(r"\s+", " ", (ROOT / "docs" / "language.md").read_text())
LINEAR = 'input x: f32[64, 128]\nparam w: f32[256, 128] = "fc.weight"\nparam b: f32[256] = "fc.bias"\n'


def errors(text: str, backend: str | None = "cutlass"):
    _, diags = check_text(text, backend=backend)
    return [d for d in diags if d.severity == "error"]


def warnings(text: str):
    return [d for d in check_text(text)[1] if d.severity == "warning"]


def kernel(body: str, decls: str = LINEAR, op: str = "gemm(x, w^T)") -> str:
    return f"{decls}kernel k = {op} {{ {body} }}\noutput y\n"


def test_the_reference_stays_about_2000_tokens():
    text = (ROOT / "docs" / "language.md").read_text()
    assert 6000 < len(text) < 9400  # about 4 characters a token: 1,500 to 2,350 tokens (pools and masks included)


def test_a_param_in_another_dtype_is_converted_once_at_load():
    assert "it is converted once, at load" in DOC
    text = kernel("store y: f32 = acc", decls='input x: f16[64, 128]\nparam w: f16[256, 128] = "fc.weight"\n')
    assert errors(text) == []
    program = parse(text)[0]
    bound = interpreter.as_declared(torch.randn(256, 128), program.decl("w"))  # the model holds it in f32
    assert bound.dtype == torch.float16


def test_torch_step_outputs_are_dense_copies_not_views():
    assert "never a view" in DOC
    text = "input b: f32[2, 8, 4]\ntorch bt = transpose(b, 1, 2)\noutput bt\n"
    program = parse(text)[0]
    assert shapes.infer(program)["bt"].layout == "contiguous"
    b = torch.randn(2, 8, 4)
    out = torch_steps.run(program.steps[0], {"b": b})["bt"]
    assert out.is_contiguous() and out.shape == (2, 4, 8) and out.data_ptr() != b.data_ptr()


def test_tuple_literals_in_torch_steps():
    assert "tuples `(0, 2, 1)`" in DOC
    text = "input x: f32[2, 16, 8]\ntorch y = permute(x, (0, 2, 1))\ntorch z = pad(y, (1, 1))\noutput z\n"
    assert errors(text) == []
    assert shapes.infer(parse(text)[0])["z"].shape == (2, 8, 18)


def test_transposed_reads_of_rank_3_operands():
    assert "(rank 3: [L,K,M])" in DOC and "(nn.Linear weight; rank 3: [L,N,K])" in DOC
    text = kernel("math = tf32; store y: f32 = acc", decls="input a: f32[8, 96, 64]\ninput b: f32[8, 128, 96]\n",
                  op="gemm(a^T, b^T)")
    assert errors(text) == []
    assert shapes.infer(parse(text)[0])["y"].shape == (8, 64, 128)


def test_a_shared_rank_2_operand_only_on_b():
    assert "a rank-2 B is shared by every batch, a rank-2 A is not allowed" in DOC
    shared_b = kernel("math = tf32; store y: f32 = acc", decls="input a: f32[8, 64, 96]\ninput b: f32[128, 96]\n",
                      op="gemm(a, b^T)")
    assert errors(shared_b) == [] and shapes.infer(parse(shared_b)[0])["y"].shape == (8, 64, 128)
    shared_a = kernel("math = tf32; store y: f32 = acc", decls="input a: f32[64, 96]\ninput b: f32[8, 128, 96]\n",
                      op="gemm(a, b^T)")
    (e,) = errors(shared_a)
    assert "rank-2 A" in e.message and "other way round" in e.hint


CONV = ('input x: f32[2, 8, 16, 16]\nparam w: f32[32, 8, 3, 3] channels_last = "conv.weight"\n'
        "torch xl = channels_last(x)\n")


def test_a_conv_is_an_implicit_gemm_over_pixels_channels_and_taps():
    assert "M = output pixels N·P·Q, N = output channels K, K = C·R·S" in DOC
    program = parse(kernel("math = tf32; store y: f32 = acc", CONV, "conv2d(xl, w, padding=1)"))[0]
    dims = shapes.gemm_dims(program, program.kernels[0])
    assert (dims.m, dims.n, dims.k) == (2 * 16 * 16, 32, 8 * 3 * 3)


def test_a_conv_tile_k_above_the_channels_is_accepted_with_a_warning():
    assert "a tile K above C is accepted with a warning" in DOC
    wide = kernel("math = tf32; tile = 128x64x64; store y: f32 = acc", CONV, "conv2d(xl, w, padding=1)")
    assert errors(wide) == []
    (w,) = warnings(wide)
    assert w.code == "tile" and "larger than the 8 input channels" in w.message and "tile K = 8" in w.hint
    fitting = kernel("math = tf32; tile = 128x64x8; store y: f32 = acc", CONV, "conv2d(xl, w, padding=1)")
    assert errors(fitting) == [] and warnings(fitting) == []


def test_gelu_is_the_exact_erf_form():
    assert "gelu is the exact erf form" in DOC
    acc = torch.linspace(-4, 4, 101)
    got = OPS["gelu"].interpret(acc)
    exact = 0.5 * acc * (1 + torch.erf(acc / math.sqrt(2)))
    assert torch.allclose(got, exact, atol=1e-6)
    assert not torch.allclose(torch.nn.functional.gelu(acc, approximate="tanh"), exact, atol=1e-5)
    assert OPS["gelu"].cpp.startswith("mu_gelu(") and "erff(x * 0.70710678118654752f)" in CPP_HELPERS


def test_default_math_is_the_operand_type():
    assert "f32 operands without `math` are an error for the CUTLASS backend" in DOC
    (e,) = errors(kernel("store y: f32 = acc"))
    assert e.code == "dtype" and "no math knob" in e.message and "math = tf32" in e.hint
    assert errors(kernel("math = tf32; store y: f32 = acc")) == []
    bf16 = 'input x: bf16[64, 128]\nparam w: bf16[256, 128] = "fc.weight"\n'
    assert errors(kernel("store y: f32 = acc", decls=bf16)) == []  # bf16 operands: bf16 math by default


def test_epilogue_functions_take_positional_numbers_only():
    assert "with positional numbers (`leaky_relu(x, 0.01)`, not `slope=0.01`)" in DOC
    assert errors(kernel("math = tf32; store y: f32 = leaky_relu(acc, 0.01)")) == []
    (e,) = errors(kernel("math = tf32; store y: f32 = leaky_relu(acc, slope=0.01)"))
    assert e.code == "syntax" and "positional numbers only" in e.hint and "leaky_relu(x, 0.1)" in e.hint


@pytest.mark.parametrize("decomposition", ["split_k; split_k = 2", "stream_k"])
def test_split_k_and_stream_k_need_the_cooperative_schedule(decomposition):
    assert "(both need schedule = cooperative or auto, not pingpong)" in DOC
    base = f"math = tf32; tile = 128x128x32; decomposition = {decomposition}; store y: f32 = acc"
    assert errors(kernel(base)) == []
    assert errors(kernel(base + "; schedule = cooperative")) == []
    (e,) = errors(kernel(base + "; schedule = pingpong"))
    assert e.code == "config" and "cooperative" in e.hint


# ---- diagnostics that used to mislead


def test_a_conv_fed_nchw_gets_one_layout_error_and_no_false_alignment_error():
    text = ('input x: f32[2, 16, 15, 15]\nparam w: f32[32, 16, 3, 3] channels_last = "conv.weight"\n'
            "kernel c = conv2d(x, w, padding=1) { math = tf32; store y: f32 = relu(acc) }\noutput y\n")
    (e,) = errors(text)
    assert e.code == "layout" and "torch x_cl = channels_last(x)" in e.hint
    fixed = text.replace("kernel c = conv2d(x,", "torch x_cl = channels_last(x)\nkernel c = conv2d(x_cl,")
    assert errors(fixed) == []  # the fix the hint gives is the whole fix


def test_a_conv_output_that_is_misaligned_after_the_fix_is_still_reported():
    text = ('input x: f32[2, 6, 16, 16]\nparam w: f32[30, 6, 3, 3] channels_last = "conv.weight"\n'
            "torch xl = channels_last(x)\n"
            "kernel c = conv2d(xl, w, padding=1) { math = tf32; store y: f32 = acc }\noutput y\n")
    assert {(e.code, e.message.split("'")[3]) for e in errors(text)} >= {("alignment", "xl"), ("alignment", "y")}


def test_torch_style_transpose_gets_the_caret_t_hint():
    (e,) = errors(kernel("math = tf32; store y: f32 = acc", op="gemm(x, w.T)"))
    assert e.code == "syntax" and "use w^T" in e.hint
    (e,) = errors(kernel("math = tf32; store y: f32 = acc", op="gemm(x, w.t())"))
    assert "use w^T" in e.hint


def test_an_unlisted_torch_step_lists_what_is_allowed():
    text = LINEAR + "torch z = expand(b, (64, 256))\noutput z\n"
    (e,) = errors(text)
    assert e.code == "unknown-function" and "reshape" in e.expected and "softmax" in e.expected
    assert "v[row] or v[col]" in e.hint
    with pytest.raises(torch_steps.StepError, match="allowed: .*reshape"):  # the interpreter says the same
        torch_steps.run(parse(text)[0].steps[0], {"b": torch.zeros(256)})


def test_a_bias_of_the_wrong_length_gets_a_hint_that_is_right():
    rows_long = LINEAR.replace("param b: f32[256]", "param b: f32[64]")  # as many values as rows, not columns
    (e,) = errors(kernel("math = tf32; store y: f32 = acc + b[col]", decls=rows_long))
    assert "b[row] if it holds one value per row" in e.hint and "declare it with 256 values" in e.hint
    neither = LINEAR.replace("param b: f32[256]", "param b: f32[100]")
    (e,) = errors(kernel("math = tf32; store y: f32 = acc + b[col]", decls=neither))
    assert "[row]" not in e.hint and "declare b with 256 values" in e.hint  # b[row] would be wrong too
    assert errors(kernel("math = tf32; store y: f32 = acc + b[row]", decls=neither))  # indeed


@pytest.mark.parametrize("change, words", [
    (lambda r: r.transpose(-1, -2).contiguous(), "looks transposed"),
    (lambda r: 0.5 * r, "output = 0.5 x reference"),
    (lambda r: r + 0.25, "output = reference + 0.25"),
    (lambda r: torch.cat([r[:5] * 3, r[5:]]), "wrong only in rows 0-4 (5 of 32)"),
    (lambda r: torch.cat([r[:, :3], r[:, 3:4] - 1, r[:, 4:]], dim=1), "wrong only in columns 3 (1 of 32)"),
])
def test_a_numeric_mismatch_reports_its_pattern(change, words):
    from evals.interpret import mismatch_pattern

    torch.manual_seed(0)
    reference = torch.randn(32, 32)
    (line,) = mismatch_pattern(change(reference), reference, 1e-2)
    assert words in line
    assert mismatch_pattern(torch.randn(32, 32), reference, 1e-2) == []  # noise has no pattern


def test_interpret_prints_the_pattern_of_a_wrong_program(tmp_path, capsys):
    from mucutlass.cli import main

    example = (ROOT / "examples" / "gemm_bias_gelu.mcu").read_text()
    wrong = tmp_path / "scaled.mcu"
    wrong.write_text(example.replace("gelu(acc + b[col])", "2 * gelu(acc + b[col])"))
    assert main(["interpret", str(wrong), "--problem", str(ROOT / "examples" / "gemm_bias_gelu.py")]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "it looks scaled: output = 2 x reference" in out
