"""Row kernels (reductions, softmax, normalizations, scans): parsing, canonical printing, checks with located
diagnostics, the interpreter against PyTorch, and their FLOPs, bytes and estimate."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dsl_compiler import interpreter, ir
from dsl_compiler.checks import check_text
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program

X = "input x: f32[8, 6, 32]\n"
AFFINE = 'param w: f32[32] = "ln.weight"\nparam b: f32[32] = "ln.bias"\n'


def program(op: str, store: str = "store y: f32 = acc", decls: str = X, knobs: str = "", out: str = "y") -> str:
    return f"{decls}kernel k = {op} {{\n{knobs}\n{store}\n}}\noutput {out}\n"


def checked(text: str) -> ir.Program:
    p, diags = check_text(text)
    assert p is not None and not [d for d in diags if d.severity == "error"], diags
    return p


# (op text, the PyTorch value of x [8, 6, 32] it computes, store type)
CASES = [
    ("sum(x, dim=-1)", lambda x: x.sum(-1), "f32"),
    ("sum(x, dim=1, keepdim=True)", lambda x: x.sum(1, keepdim=True), "f32"),
    ("sum(x, dim=(1, 2))", lambda x: x.sum((1, 2)), "f32"),
    ("mean(x, dim=0)", lambda x: x.mean(0), "f32"),
    ("amax(x, dim=1)", lambda x: x.amax(1), "f32"),
    ("amin(x, dim=-1)", lambda x: x.amin(-1), "f32"),
    ("argmax(x, dim=1)", lambda x: x.argmax(1), "i64"),
    ("argmin(x, dim=-1)", lambda x: x.argmin(-1), "i64"),
    ("prod(x, dim=1)", lambda x: x.prod(1), "f32"),
    ("logsumexp(x, dim=-1)", lambda x: torch.logsumexp(x, -1), "f32"),
    ("norm(x, dim=-1, p=1)", lambda x: torch.norm(x, p=1, dim=-1), "f32"),
    ("norm(x, dim=(0, 1, 2), p=2)", lambda x: torch.norm(x, p="fro"), "f32"),
    ("softmax(x, dim=-1)", lambda x: torch.softmax(x, -1), "f32"),
    ("softmax(x, dim=1)", lambda x: torch.softmax(x, 1), "f32"),
    ("log_softmax(x, dim=-1)", lambda x: torch.log_softmax(x, -1), "f32"),
    ("layer_norm(x, dim=-1, eps=1e-05)", lambda x: F.layer_norm(x, (32,)), "f32"),
    ("layer_norm(x, dim=(1, 2), eps=1e-05)", lambda x: F.layer_norm(x, (6, 32)), "f32"),
    ("rms_norm(x, dim=-1, eps=1e-06)", lambda x: F.rms_norm(x, (32,), eps=1e-6), "f32"),
    ("normalize(x, dim=1, p=2)", lambda x: F.normalize(x, p=2, dim=1), "f32"),
    ("normalize(x, dim=-1, p=1, eps=0.5)", lambda x: F.normalize(x, p=1, dim=-1, eps=0.5), "f32"),
    ("normalize(x, dim=(1, 2), p=2)", lambda x: F.normalize(x.reshape(8, -1), dim=1).reshape(8, 6, 32), "f32"),
    # scans: torch's own order of fp32 additions is the interpreter's, so 1e-5 covers what the kernel's order changes
    ("cumsum(x, dim=-1)", lambda x: x.cumsum(-1), "f32"),
    ("cumprod(x, dim=1)", lambda x: torch.cumprod(x, 1), "f32"),
    ("cumsum(x, dim=1, reverse=True)", lambda x: x.flip(1).cumsum(1).flip(1), "f32"),
    ("cumsum(x, dim=-1, exclusive=True)", lambda x: x.cumsum(-1) - x, "f32"),
    ("cumprod(x, dim=0, reverse=True, exclusive=True)",
     lambda x: torch.cat([torch.ones(1, 6, 32), x.flip(0).cumprod(0)[:-1]]).flip(0), "f32"),
]


@pytest.mark.parametrize("op,ref,dtype", CASES, ids=[c[0] for c in CASES])
def test_interpreter_matches_pytorch_and_text_round_trips(op, ref, dtype):
    p = checked(program(op, f"store y: {dtype} = acc"))
    assert parse(format_program(p))[0] == p
    x = torch.randn(8, 6, 32, dtype=torch.float64).float()
    (y,) = interpreter.run(p, [x], {})
    want = ref(x)
    assert y.shape == want.shape and y.dtype == want.dtype
    if dtype == "i64":
        assert torch.equal(y, want)
    else:
        torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_affine_and_tail_match_pytorch():
    p = checked(program("layer_norm(x, w, b, dim=-1, eps=1e-05)", "store y: bf16 = relu(acc) * 2.0 + x",
                        decls=X + AFFINE, knobs="vector = 4; rows_per_block = 8; passes = 2"))
    assert parse(format_program(p))[0] == p
    x, w, b = torch.randn(8, 6, 32), torch.randn(32), torch.randn(32)
    (y,) = interpreter.run(p, [x], {"w": w, "b": b})
    want = (torch.relu(F.layer_norm(x, (32,), w, b)) * 2 + x).to(torch.bfloat16)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), want.float(), rtol=1e-2, atol=1e-2)


CHANNELS = 'param gw: f32[6] = "gn.weight"\nparam gb: f32[6] = "gn.bias"\n'


@pytest.mark.parametrize("op,ref", [
    ("group_norm(x, gw, gb, groups=3, eps=1e-05)", lambda x, w, b: F.group_norm(x, 3, w, b)),
    ("group_norm(x, groups=2, eps=0.001)", lambda x, w, b: F.group_norm(x, 2, eps=1e-3)),
    ("instance_norm(x, gw, gb, eps=1e-05)", lambda x, w, b: F.instance_norm(x, weight=w, bias=b)),
    ("instance_norm(x, eps=1e-05)", lambda x, w, b: F.instance_norm(x)),
])
@pytest.mark.parametrize("shape", [(8, 6, 32), (2, 6, 4, 5)])
def test_group_and_instance_norm_match_pytorch_per_channel_affine_and_tail(op, ref, shape):
    decls = f"input x: f32[{', '.join(map(str, shape))}]\n" + CHANNELS
    p = checked(program(op, "store y: f32 = relu(acc) + 0.5", decls=decls))
    assert parse(format_program(p))[0] == p
    x, w, b = torch.randn(shape), torch.rand(6) + 0.5, torch.randn(6)
    (y,) = interpreter.run(p, [x], {"gw": w, "gb": b})
    torch.testing.assert_close(y, torch.relu(ref(x, w, b)) + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,decls,fragment,hint", [
    ("group_norm(x, groups=4, eps=1e-05)", X, "4 groups of 6 channels", "divisible"),
    ("group_norm(x, w, groups=3, eps=1e-05)", X + AFFINE, "weight 'w' is [32]", "per channel"),
    ("instance_norm(x, eps=1e-05)", "input x: f32[32]\n", "rank-1", "batch dim"),
])
def test_bad_group_norms_get_a_located_diagnostic_with_a_hint(op, decls, fragment, hint):
    d = first_error(program(op, decls=decls))
    assert d.code == "shape-mismatch" and fragment in d.message, d
    assert d.span is not None and hint in (d.hint or ""), d


@pytest.mark.parametrize("text,fragment", [
    (program("group_norm(x, eps=1e-05)"), "needs groups"),
    (program("group_norm(x, groups=0)"), "needs groups"),
    (program("instance_norm(x, dim=1)"), "no option 'dim'"),
])
def test_parser_rejects_bad_group_norms(text, fragment):
    p, diags = parse(text)
    assert p is None and diags[0].span is not None
    assert fragment in diags[0].message, diags[0]


@pytest.mark.parametrize("knobs", ["", "vector = 1", "vector = 4; rows_per_block = 4", "split = 4", "vector = 2; split = 16"])
def test_knobs_do_not_change_the_value(knobs):
    x = torch.randn(4, 1024)
    p = checked(program("logsumexp(x, dim=-1)", decls="input x: f32[4, 1024]\n", knobs=knobs))
    assert parse(format_program(p))[0] == p
    torch.testing.assert_close(interpreter.run(p, [x], {})[0], torch.logsumexp(x, -1))


def test_knobs_print_canonically_and_defaults_are_left_out():
    p = checked(program("softmax(x, dim=-1)", knobs="vector = auto; rows_per_block = 2; passes = 1"))
    text = format_program(p)
    assert "rows_per_block = 2; passes = 1" in text and "vector" not in text


def first_error(text: str):
    p, diags = check_text(text)
    errors = [d for d in diags if d.severity == "error"]
    assert errors, f"no error for:\n{text}"
    return errors[0]


BAD = [
    ("sum(x, dim=3)", "store y: f32 = acc", "", "shape-mismatch", "count dims"),
    ("sum(x, dim=(0, 2))", "store y: f32 = acc", "", "shape-mismatch", "permute"),
    ("argmax(x, dim=1)", "store y: f32 = acc", "", "dtype", "indices"),
    ("argmax(x, dim=1)", "store y: i64 = acc + 1.0", "", "dtype", "indices"),
    ("sum(x, dim=1)", "store y: i64 = acc", "", "dtype", "argmax"),
    ("softmax(x, dim=-1)", "store y: f32 = acc + r[col]", "", "shape-mismatch", "weight and bias"),
    ("softmax(x, dim=-1)", "store y: f32 = row_sum(acc)", "", "reduction", "own"),
    ("sum(x, dim=-1)", "store y: f32 = acc + x", "", "shape-mismatch", "scalar"),
    ("softmax(x, dim=-1)", "store y: f32 = acc", "vector = 8", "alignment", "vector = 4"),
    ("softmax(x, dim=-1)", "store y[0:16]: f32 = acc", "", "unsupported", "cat"),
    ("sum(x, dim=1)", "store y: f32 = acc", "rows_per_block = 4", "config", "auto"),
    ("sum(x, dim=-1)", "store y: f32 = acc", "passes = 2", "config", "split"),
    ("softmax(x, dim=-1)", "store y: f32 = acc", "split = 2", "config", "split = 1"),
    ("sum(x, dim=-1)", "store y: f32 = acc", "split = 64", "config", "smaller"),
    ("cumsum(x, dim=(1, 2))", "store y: f32 = acc", "", "shape-mismatch", "flatten"),
    ("cumsum(x, dim=-1)", "store y: f32 = acc", "rows_per_block = 4", "config", "vector"),
    ("cumprod(x, dim=1)", "store y: f32 = acc", "split = 2", "config", "vector"),
    ("cumsum(x, dim=-1)", "store y: f32 = acc", "passes = 2", "config", "vector"),
    ("cumsum(x, dim=-1)", "store y: i64 = acc", "", "dtype", "argmax"),
]


@pytest.mark.parametrize("op,store,knobs,code,hint", BAD, ids=[f"{b[0]} {b[1]} {b[2]}" for b in BAD])
def test_bad_uses_get_a_located_diagnostic_with_a_hint(op, store, knobs, code, hint):
    decls = X + "input r: f32[8, 6, 32]\n" if "r[" in store else X
    d = first_error(program(op, store, decls=decls, knobs=knobs))
    assert d.code == code, d
    assert d.span is not None and d.span.line >= 1
    assert hint in (d.hint or ""), d


def test_two_pass_is_required_for_a_row_longer_than_the_registers():
    d = first_error(program("softmax(x, dim=-1)", decls="input x: f32[2, 65536]\n", knobs="passes = 1"))
    assert d.code == "smem" and "passes = 2" in d.hint
    checked(program("softmax(x, dim=-1)", decls="input x: f32[2, 65536]\n", knobs="passes = 2"))


@pytest.mark.parametrize("text,fragment", [
    (program("sum(x)"), "needs dim"),
    (program("sum(x, dim=1, p=2)"), "no option 'p'"),
    (program("norm(x, dim=1, p=3)"), "p must be 1 or 2"),
    (program("normalize(x, dim=1, p=3)"), "normalize's p must be 1 or 2"),
    (program("sum(x^T, dim=1)"), "^T"),
    (program("layer_norm(x, dim=1, eps=-1.0)"), "eps"),
    (program("softmax(x, dim=1)", knobs="tile = 128x128x32"), "GEMM knob"),
    (program("softmax(x, dim=1)", knobs="vector = 3"), "bad value for vector"),
    (program("cumsum(x, dim=1, reverse=1)"), "reverse of cumsum must be True or False"),
    (program("cumsum(x, dim=1, keepdim=True)"), "no option 'keepdim'"),
    (program("cumprod(x)"), "needs dim"),
    (program("gemm(a, a)", "store y: i64 = acc", decls="input a: f32[64, 64]\n", knobs="math = tf32"), None),
])
def test_parser_rejects_bad_row_ops(text, fragment):
    p, diags = parse(text)
    if fragment is None:  # parses; the checker refuses an i64 GEMM store
        assert p is not None
        d = first_error(text)
        assert d.code == "dtype" and "argmax" in d.hint
        return
    assert p is None and diags[0].span is not None
    assert fragment in diags[0].message, diags[0]


def test_a_gemm_knob_on_a_row_kernel_names_the_row_knobs():
    _, diags = parse(program("softmax(x, dim=1)", knobs="tile = 128x128x32"))
    assert "vector, rows_per_block, passes, split" in diags[0].hint


def test_counting_moves_x_once_per_pass_and_the_estimate_is_memory_bound():
    from sol_models.counting import count_program
    from sol_models.estimate import best_row_config, estimate_program
    from sol_models.hardware import get_gpu

    decls = "input x: f32[64, 8192]\n"
    one = checked(program("softmax(x, dim=-1)", decls=decls, knobs="passes = 1"))
    two = checked(program("softmax(x, dim=-1)", decls=decls, knobs="passes = 2"))
    x_bytes = 64 * 8192 * 4
    assert count_program(one).bytes_program == 2 * x_bytes  # read x, write y
    assert count_program(two).bytes_program == 3 * x_bytes  # x read again
    gpu = get_gpu("h200")
    e1, e2 = estimate_program(one, gpu).kernels[0], estimate_program(two, gpu).kernels[0]
    assert e1.t_us < e2.t_us
    assert e1.t_us >= 2 * x_bytes / gpu.dram_bw_bytes_per_s * 1e6  # never faster than bytes / bandwidth
    best = best_row_config(one, one.row_kernels[0], gpu)
    assert best.passes == 1 and best.vector == 4


def test_a_long_reduction_over_few_rows_is_split_across_ctas():
    from sol_models.estimate import best_row_config, estimate_program
    from sol_models.hardware import get_gpu

    p = checked(program("sum(x, dim=-1)", decls="input x: f32[4, 1048576]\n"))
    gpu = get_gpu("h200")
    best = best_row_config(p, p.row_kernels[0], gpu)
    assert best.split > 1
    split = p.model_copy(update={"steps": (p.steps[0].model_copy(update={"config": best}),)})
    assert estimate_program(split, gpu).t_us < estimate_program(p, gpu).t_us



def test_group_norm_counts_x_per_pass_and_its_per_channel_affine():
    from sol_models.counting import count_program
    from sol_models.estimate import best_row_config, estimate_program
    from sol_models.hardware import get_gpu

    decls = "input x: f32[16, 6, 64, 64]\n" + CHANNELS
    x_bytes, affine_bytes = 16 * 6 * 64 * 64 * 4, 2 * 6 * 4
    for passes in (1, 2):
        p = checked(program("group_norm(x, gw, gb, groups=3, eps=1e-05)", decls=decls, knobs=f"passes = {passes}"))
        assert count_program(p).bytes_program == (passes + 1) * x_bytes + affine_bytes
    gpu = get_gpu("h200")
    best = best_row_config(p, p.row_kernels[0], gpu)
    tuned = p.model_copy(update={"steps": (p.steps[0].model_copy(update={"config": best}),)})
    assert estimate_program(tuned, gpu).t_us <= estimate_program(p, gpu).t_us
    assert estimate_program(tuned, gpu).t_us >= 2 * x_bytes / gpu.dram_bw_bytes_per_s * 1e6


def test_normalize_counts_x_per_pass_and_its_flops_and_the_estimate_is_memory_bound():
    from sol_models.counting import count_program
    from sol_models.estimate import estimate_program
    from sol_models.hardware import get_gpu

    decls = "input x: f32[64, 8192]\n"
    x_bytes = 64 * 8192 * 4
    for passes in (1, 2):
        p = checked(program("normalize(x, dim=-1, p=2)", decls=decls, knobs=f"passes = {passes}"))
        counted = count_program(p)
        assert counted.bytes_program == (passes + 1) * x_bytes  # x read per pass, y written
    estimate = estimate_program(p, get_gpu("h200")).kernels[0]
    assert "memory-bound" in " ".join(estimate.reasons)


def test_a_scan_reads_x_once_writes_y_once_and_the_estimate_is_memory_bound():
    from sol_models.counting import count_program
    from sol_models.estimate import best_row_config, estimate_program
    from sol_models.hardware import get_gpu

    x_bytes = 32 * 32768 * 4
    gpu = get_gpu("h200")
    for op in ("cumsum(x, dim=-1)", "cumprod(x, dim=0, reverse=True, exclusive=True)"):
        p = checked(program(op, decls="input x: f32[32, 32768]\n"))
        assert count_program(p).bytes_program == 2 * x_bytes
        estimate = estimate_program(p, gpu).kernels[0]
        assert "memory-bound" in " ".join(estimate.reasons)
        assert estimate.t_us >= 2 * x_bytes / gpu.dram_bw_bytes_per_s * 1e6
        best = best_row_config(p, p.row_kernels[0], gpu)
        assert best.rows_per_block in (None, 1) and best.passes is None and best.split == 1  # a scan's only knob
        if op.startswith("cumsum"):  # a contiguous row: 16-byte loads
            assert best.vector == 4
