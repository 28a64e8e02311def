"""Slice stores (`store y[a:b]`): kernels that fill one tensor's channels, so a concatenation along channels
costs nothing. The checker, the interpreter, the CUTLASS emitter and the runtime's views, on the CPU; nvcc
compiles one such conv; the H200 runs one."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
import torch.nn.functional as F

from dsl_compiler import check_text, interpreter, parse, printer
from dsl_compiler.cutlass_runtime import conv_call_args, gemm_call_args
from dsl_compiler.cutlass.emit import emit_program

# A fire module's two expands: a 1x1 conv as a GEMM over NHWC rows and a 3x3 conv, into one 48-channel tensor
FIRE = """input x: f32[2, 16, 8, 8]
param w1: f32[32, 16]
param w3: f32[16, 16, 3, 3] channels_last
param b3: f32[16]
torch xl = channels_last(x)
torch xn = permute(xl, (0, 2, 3, 1))
torch rows = reshape(xn, (-1, 16))

kernel k1 = gemm(rows, w1^T) {
  math = tf32
  store cat[0:32]: f32 = relu(acc)
}

kernel k3 = conv2d(xl, w3, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  math = tf32
  store cat[32:48]: f32 = acc + b3[col]
}

torch c4 = reshape(cat, (2, 8, 8, 48))
torch y = permute(c4, (0, 3, 1, 2))
output y
"""

# the same with the conv first: the tensor takes the conv's channels-last shape and needs no views
CONV_FIRST = """input x: f32[2, 16, 8, 8]
param w1: f32[32, 16]
param w3: f32[16, 16, 3, 3] channels_last
param b3: f32[16]
torch xl = channels_last(x)
torch xn = permute(xl, (0, 2, 3, 1))
torch rows = reshape(xn, (-1, 16))

kernel k3 = conv2d(xl, w3, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  math = tf32
  store y[32:48]: f32 = acc + b3[col]
}

kernel k1 = gemm(rows, w1^T) {
  math = tf32
  store y[0:32]: f32 = relu(acc)
}

output y
"""


# two DenseNet layers: the block's input copied into the first channels once, each layer reading the channels
# written so far (a view) and storing its own
DENSE = """input x: f32[2, 16, 8, 8]
param g0: f32[16]
param b0: f32[16]
param w0: f32[16, 16, 3, 3] channels_last
param g1: f32[32]
param b1: f32[32]
param w1: f32[16, 32, 3, 3] channels_last

torch feat[0:16] = channels_last(x)
torch n0 = batch_norm(feat[0:16], g0, b0, eps=1e-05)
torch r0 = relu(n0)
torch r0c = channels_last(r0)

kernel c0 = conv2d(r0c, w0, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  math = tf32
  store feat[16:32]: f32 = acc
}

torch n1 = batch_norm(feat[0:32], g1, b1, eps=1e-05)
torch r1 = relu(n1)
torch r1c = channels_last(r1)

kernel c1 = conv2d(r1c, w1, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  math = tf32
  store feat[32:48]: f32 = acc
}

output feat
"""


def test_a_dense_block_reads_the_channels_written_so_far_and_matches_cat():
    program, diags = check_text(DENSE)
    assert [d for d in diags if d.severity == "error"] == [], [d.render() for d in diags]
    assert "torch feat[0:16] = channels_last(x)" in printer.format_program(program)
    assert "batch_norm(feat[0:32], g1, b1, eps=1e-05)" in printer.format_program(program)
    assert parse(printer.format_program(program))[0] == program
    g = torch.Generator().manual_seed(0)
    shapes_ = dict(g0=(16,), b0=(16,), w0=(16, 16, 3, 3), g1=(32,), b1=(32,), w1=(16, 32, 3, 3))
    p = {k: torch.randn(*v, generator=g) for k, v in shapes_.items()}
    x = torch.randn(2, 16, 8, 8, generator=g)
    (out,) = interpreter.run(program, [x], p)
    t = interpreter.round_tf32
    with interpreter.exact_fp32():
        features = [x]
        for gi, bi, wi in (("g0", "b0", "w0"), ("g1", "b1", "w1")):
            h = torch.relu(F.batch_norm(torch.cat(features, 1), None, None, p[gi], p[bi], training=True))
            features.append(F.conv2d(t(h), t(p[wi]), padding=1))
        expected = torch.cat(features, 1)
    assert out.shape == (2, 48, 8, 8) and torch.allclose(out, expected, atol=1e-3, rtol=1e-3)
    from dsl_compiler import runtime

    with torch.no_grad():  # the module the backends load runs the same steps
        assert torch.equal(runtime.load(program, "interpreter", p)(x), out)


@pytest.mark.parametrize(("edit", "words"), [
    (("batch_norm(feat[0:32], g1", "batch_norm(feat[0:48], g1"), "reads feat[0:48] before those channels are written"),
    (("batch_norm(feat[0:16], g0", "batch_norm(x[0:16], g0"), "'x' is no tensor that slices fill"),
    (("torch n1 = batch_norm(feat[0:32]", "torch n1 = batch_norm(feat"), "before all its channels are stored"),
    (("store feat[32:48]", "store feat[16:32]"), "overlaps [16:32]"),
    (("torch feat[0:16] = channels_last(x)", "torch feat[0:16] = channels_last(r0)\ntorch q = relu(x)"), "'r0' is used"),
])
def test_bad_channel_reads_and_writes_get_one_line(edit, words):
    (e, *_) = errors(DENSE.replace(*edit))
    assert words in e.message, e.render()


def _params():
    g = torch.Generator().manual_seed(0)
    return {"w1": torch.randn(32, 16, generator=g), "w3": torch.randn(16, 16, 3, 3, generator=g),
            "b3": torch.randn(16, generator=g)}


def _reference(x, p):
    t = interpreter.round_tf32
    with interpreter.exact_fp32():
        a = torch.relu(F.conv2d(t(x), t(p["w1"])[:, :, None, None]))
        b = F.conv2d(t(x), t(p["w3"]), p["b3"], padding=1)
    return torch.cat([a, b], 1)


def errors(text):
    return [d for d in check_text(text)[1] if d.severity == "error"]


@pytest.mark.parametrize("text", [FIRE, CONV_FIRST], ids=["gemm_first", "conv_first"])
def test_kernels_fill_their_channels_and_the_interpreter_matches_cat(text):
    program, diags = check_text(text)
    assert [d for d in diags if d.severity == "error"] == []
    x, p = torch.randn(2, 16, 8, 8), _params()
    (out,) = interpreter.run(program, [x], p)
    assert out.shape == (2, 48, 8, 8) and out.permute(0, 2, 3, 1).is_contiguous()  # channels-last, no copy
    # the same sums, not always in the same order: the CPU's conv kernels for a channels-last and a contiguous input
    # differ by an ulp on some machines
    torch.testing.assert_close(out, _reference(x, p), rtol=1e-5, atol=1e-5)


def test_the_store_slice_prints_and_parses_back():
    program, _ = parse(FIRE)
    assert "store cat[32:48]: f32 = acc + b3[col]" in printer.format_program(program)
    assert parse(printer.format_program(program))[0] == program
    assert program.kernels[1].stores[0].channels == (32, 48)


@pytest.mark.parametrize(("edit", "code", "words"), [
    (("cat[32:48]", "cat[40:56]"), "shape-mismatch", "no kernel stores channels 32..40"),
    (("cat[32:48]", "cat[16:32]"), "shape-mismatch", "overlaps [0:32]"),
    (("cat[32:48]", "cat[32:40]"), "shape-mismatch", "names 8 channels; the kernel computes 16"),
    (("cat[32:48]", "cat[30:46]", "cat[0:32]", "cat[0:30]", "w1: f32[32", "w1: f32[30"), "alignment",
     "starts at channel 30"),
    (("store cat[32:48]: f32", "store cat[32:48]: bf16"), "dtype", "is bf16; 'cat' is f32"),
    (("stride=(1, 1), padding=(1, 1)", "stride=(2, 2), padding=(1, 1)"), "shape-mismatch", "writes 32 rows"),
    (("store cat[0:32]: f32", "store cat: f32"), "duplicate-name", "defined twice"),
])
def test_bad_slices_get_one_diagnostic_naming_the_problem(edit, code, words):
    text = FIRE if len(edit) == 2 else CONV_FIRST.replace("y[", "cat[").replace("output y", "output cat")
    for old, new in zip(edit[::2], edit[1::2]):
        text = text.replace(old, new)
    (e, *_) = errors(text)
    assert e.code == code and words in e.message, e.render()


def test_a_read_before_the_last_slice_store_is_an_error():
    early = FIRE.replace("torch c4 = reshape(cat, (2, 8, 8, 48))\n", "").replace(
        "\nkernel k3", "\ntorch c4 = reshape(cat, (2, 8, 8, 48))\nkernel k3")
    (e,) = errors(early)
    assert e.code == "undefined-name" and "before all its channels are stored" in e.message


def test_a_reduction_cannot_be_a_slice_store():
    text = FIRE.replace("store cat[0:32]: f32 = relu(acc)", "store h: f32 = acc; store cat[0:32]: f32 = row_sum(acc)")
    assert any(e.code == "reduction" for e in errors(text))


def test_existing_kernels_emit_the_same_source_and_a_conv_slice_reads_its_row_stride():
    emitted, diags = emit_program(parse(FIRE)[0])
    assert diags == []
    gemm, conv = emitted
    # the GEMM's D already takes its leading dimension at run time: its C++ does not change
    plain, _ = emit_program(parse(FIRE.replace("cat[0:32]", "h").replace("cat[32:48]", "y2").replace(
        "torch c4 = reshape(cat, (2, 8, 8, 48))\ntorch y = permute(c4, (0, 3, 1, 2))\noutput y", "output h, y2"))[0])
    assert gemm.source == plain[0].source and repr(gemm.abi).replace("'cat'", "'h'") == repr(plain[0].abi)
    assert "shape.stride_C[ProblemShape::RankT - 2 - i] / I(5) * I(18)" in conv.source
    assert conv.abi.ints[-1] == "p2.ld" and "I(18)" not in plain[1].source
    assert [t.channels for t in conv.abi.tensors if t.role == "d"] == [(32, 48)]


def test_the_runtime_passes_views_into_one_tensor_with_its_row_stride():
    """The CUTLASS backend's argument building (CPU tensors, no launch): the first writer allocates the tensor,
    the second writes a view of its channels; pointers, leading dimension and pixel stride follow."""
    program = parse(FIRE)[0]
    emitted, _ = emit_program(program)
    env = {"rows": torch.randn(128, 16), "w1": torch.randn(32, 16), "xl": torch.randn(2, 16, 8, 8),
           "w3": torch.randn(16, 16, 3, 3), "b3": torch.randn(16)}
    k1, k3 = program.kernels
    tensors, ints, results = gemm_call_args("k1", k1.op.model_dump(mode="json"), dataclasses.asdict(emitted[0].abi), env, {})
    buf = results["cat"]
    assert buf.shape == (128, 48) and tensors[2].shape == (128, 32) and tensors[2].data_ptr() == buf.data_ptr()
    abi = emitted[0].abi
    assert ints[abi.ints.index("p2.ld")] == 48
    env["cat"] = buf
    tensors, ints, results = conv_call_args("k3", k3.op.model_dump(mode="json"), dataclasses.asdict(emitted[1].abi), env, {})
    assert results["cat"] is buf and ints[-1] == 48
    d = tensors[2]
    assert d.shape == (2, 16, 8, 8) and d.data_ptr() == buf.data_ptr() + 32 * buf.element_size()
    d.fill_(7.0)
    assert (buf[:, 32:] == 7.0).all() and not (buf[:, :32] == 7.0).any()


def test_grouped_convs_refuse_a_slice_store_with_a_hint():
    text = """input x: f32[2, 16, 8, 8] channels_last
param w: f32[16, 1, 3, 3] channels_last
kernel dw = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=16) {
  math = tf32
  store y[0:16]: f32 = acc
}
output y
"""
    (e,) = errors(text)
    assert e.code == "unsupported" and "slice store" in e.message and "cat" in e.hint


@pytest.mark.nvcc
def test_real_nvcc_compiles_a_conv_that_stores_into_its_channels(tmp_path, monkeypatch):
    from dsl_compiler import build

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    program = parse(CONV_FIRST.replace("kernel k1 = gemm(rows, w1^T) {\n  math = tf32\n  store y[0:32]: f32 = relu(acc)\n}\n",
                                       "").replace("y[32:48]", "y[0:16]").replace("output y", "output y"))[0]
    res = build.build_program(program)
    assert res.ok, "\n".join(d.render() for d in res.diagnostics)
    (so,) = res.artifacts.values()
    assert os.path.getsize(so) > 100_000


@pytest.mark.gpu
@pytest.mark.parametrize("text", [FIRE, CONV_FIRST, DENSE], ids=["gemm_first", "conv_first", "torch_step_first"])
def test_cutlass_kernels_fill_their_channels_on_the_gpu(text, tmp_path, monkeypatch):
    """Built kernels write their channels through the runtime's views (a conv's pixel stride, a GEMM's leading
    dimension): the same values as the interpreter (checked against torch.cat above), the second call too."""
    from dsl_compiler import build, runtime

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    program = parse(text)[0]
    res = build.build_program(program)
    assert res.ok, "\n".join(d.render() for d in res.diagnostics)
    g = torch.Generator().manual_seed(0)
    p = {d.name: torch.randn(*d.shape, generator=g) for d in program.params}
    x = torch.randn(2, 16, 8, 8, generator=g)
    (expected,) = interpreter.run(program, [x], p)
    module = runtime.load(program, "cutlass", {d.name: interpreter.as_declared(p[d.name], d).cuda() for d in program.params},
                          res.artifacts)
    with torch.no_grad():
        out = module(x.cuda()).clone()
        again = module(x.cuda())  # the second call reuses the call plans
    assert torch.allclose(out.cpu(), expected, atol=1e-3, rtol=1e-3), (out.cpu() - expected).abs().max()
    assert torch.equal(out, again)


def test_the_language_reference_states_the_slice_store():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text()
    assert "`store y[a:b]: DTYPE = EXPR`" in doc and "`torch y[a:b] = FN(...)`" in doc and "`FN(y[0:c])`" in doc
