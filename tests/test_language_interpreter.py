"""The reference interpreter and the runtime: precision semantics, epilogue view, reductions, layouts,
and every worked example against hand-written PyTorch."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dsl_compiler import check_text, interpreter, parse
from dsl_compiler.interpreter import round_operand, round_tf32, run
from dsl_compiler.runtime import BindError, bind_params, load
from evals.interpret import compare_with_problem

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)  # every test sees the same random data


def tf32_reference(x: torch.Tensor) -> torch.Tensor:
    """Independent TF32 rounding in float64: 11 significant bits (a fixed quantum of 2**-136 below the
    smallest normal, as fp32's subnormals), ties to even (numpy's round)."""
    a = x.double().numpy()
    out = a.copy()
    finite = np.isfinite(a) & (a != 0)
    _, exp = np.frexp(a[finite])  # |a| in [2**(exp-1), 2**exp)
    quantum_exp = np.maximum(exp, -125) - 11
    out[finite] = np.ldexp(np.round(np.ldexp(a[finite], -quantum_exp)), quantum_exp)
    return torch.from_numpy(out).float()


def prog(text: str):
    program, diags = parse(text)
    assert program is not None, [d.render() for d in diags]
    return program


# ---------------------------------------------------------------------------------------------
# Precision


def test_tf32_rounding_matches_an_independent_implementation():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(10_000, generator=g) * 10.0 ** torch.randint(-30, 30, (10_000,), generator=g).float(),
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 3.4e38, 1e-40, float("inf"), float("-inf")])])
    assert torch.equal(round_tf32(x), tf32_reference(x))
    nan = round_tf32(torch.tensor([float("nan")]))
    assert torch.isnan(nan).all()


def test_tf32_ties_round_to_even():
    one = 1.0
    ulp = 2.0**-10
    # halfway between 1 and 1 + ulp rounds down to 1 (even); halfway above 1 + ulp rounds up to 1 + 2 ulp
    x = torch.tensor([one + ulp / 2, one + 1.5 * ulp, one + ulp / 2 + 2.0**-20], dtype=torch.float32)
    assert round_tf32(x).tolist() == [1.0, one + 2 * ulp, one + ulp]


def test_operand_rounding_per_math_type():
    x = torch.randn(1000)
    assert torch.equal(round_operand(x, "f32"), x)
    assert torch.equal(round_operand(x, "bf16"), x.bfloat16().float())
    assert torch.equal(round_operand(x, "f16"), x.half().float())
    assert torch.equal(round_operand(x, "tf32"), round_tf32(x))


GEMM = """input a: f32[64, 256]
input b: f32[256, 32]
kernel k = gemm(a, b) { math = MATH; store y: f32 = acc }
output y
"""


def test_tf32_gemm_is_exactly_rounded_operands_with_fp32_accumulation():
    a, b = torch.randn(64, 256), torch.randn(256, 32)
    (y,) = run(prog(GEMM.replace("MATH", "tf32")), [a, b], {})
    expected = (tf32_reference(a).double() @ tf32_reference(b).double()).float()
    assert torch.allclose(y, expected, atol=1e-4, rtol=1e-5)
    exact = (a.double() @ b.double()).float()
    err = ((y - exact).abs().max() / exact.abs().max()).item()
    assert 1e-5 < err < 2e-3  # TF32's error is visible, and bounded


def test_f32_math_is_exact_even_when_torch_allows_tf32():
    a, b = torch.randn(64, 256), torch.randn(256, 32)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.set_float32_matmul_precision("medium")
    try:
        (y,) = run(prog(GEMM.replace("MATH", "f32")), [a, b], {})
        assert torch.get_float32_matmul_precision() == "medium"  # restored afterwards
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    exact = (a.double() @ b.double()).float()
    assert (y - exact).abs().max() < 1e-4


def test_bf16_gemm_rounds_operands_and_store():
    text = """input a: bf16[64, 64]
input b: bf16[64, 64]
kernel k = gemm(a, b) { math = bf16; store y: bf16 = acc; store z: f32 = acc * 2.0 }
output y, z
"""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    y, z = run(prog(text), [a, b], {})
    acc = a.bfloat16().float() @ b.bfloat16().float()  # exact products of bf16 values, fp32 sums
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32
    assert torch.equal(y, acc.bfloat16())
    assert torch.equal(z, acc * 2)
    exact = a.bfloat16().double() @ b.bfloat16().double()
    assert torch.allclose(z.double(), exact * 2, rtol=1e-5, atol=1e-4)


def test_f16_accumulator_is_rounded():
    text = """input a: f16[16, 16]
input b: f16[16, 16]
kernel k = gemm(a, b) { math = f16; accum = f16; store y: f32 = acc + 0.0001 }
output y
"""
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    (y,) = run(prog(text), [a, b], {})
    acc = (a.half().float() @ b.half().float()).half().float()
    assert torch.equal(y, acc + 0.0001)


# ---------------------------------------------------------------------------------------------
# Epilogue semantics


def test_every_epilogue_function():
    fns = {
        "neg(acc)": lambda h: -h, "abs(acc)": torch.abs, "relu(acc)": torch.relu, "gelu(acc)": F.gelu,
        "gelu_tanh(acc)": lambda h: F.gelu(h, approximate="tanh"), "silu(acc)": F.silu, "sigmoid(acc)": torch.sigmoid,
        "tanh(acc)": torch.tanh, "mish(acc)": F.mish, "softplus(acc)": F.softplus, "exp(acc)": torch.exp,
        "log(abs(acc) + 1.0)": lambda h: torch.log(h.abs() + 1), "sqrt(abs(acc))": lambda h: h.abs().sqrt(),
        "rsqrt(abs(acc) + 1.0)": lambda h: torch.rsqrt(h.abs() + 1), "square(acc)": torch.square,
        "hardswish(acc)": F.hardswish, "hardsigmoid(acc)": F.hardsigmoid,
        "min(acc, 0.5)": lambda h: torch.clamp(h, max=0.5), "max(acc, -0.5)": lambda h: torch.clamp(h, min=-0.5),
        "pow(abs(acc), 1.5)": lambda h: h.abs() ** 1.5, "acc / 3.0 - 1.0": lambda h: h / 3 - 1,
        "clamp(acc, -1.0, 2.0)": lambda h: h.clamp(-1, 2), "hardtanh(acc, -0.5, 0.5)": lambda h: F.hardtanh(h, -0.5, 0.5),
        "leaky_relu(acc, 0.2)": lambda h: F.leaky_relu(h, 0.2), "elu(acc, 0.7)": lambda h: F.elu(h, 0.7),
    }
    a, b = torch.randn(8, 16), torch.randn(16, 8)
    acc = (a.double() @ b.double()).float()
    for expr, fn in fns.items():
        (y,) = run(prog(GEMM.replace("[64, 256]", "[8, 16]").replace("[256, 32]", "[16, 8]").replace("MATH", "f32")
                        .replace("store y: f32 = acc", f"store y: f32 = {expr}")), [a, b], {})
        assert torch.allclose(y, fn(acc), atol=1e-5, rtol=1e-5), expr


def test_row_col_scalar_and_full_operands_and_reductions():
    text = """input a: f32[32, 16]
input b: f32[16, 24]
input bias: f32[24]
input scale: f32[32]
input alpha: f32[1]
input res: f32[32, 24]
kernel k = gemm(a, b) {
  math = f32
  let h = acc * alpha[scalar] + bias[col] + scale[row] * res
  store y: f32 = h
  store rs: f32 = row_sum(h)
  store rm: f32 = row_max(h)
  store cs: f32 = col_sum(relu(h))
  store cn: f32 = col_min(h)
}
output y, rs, rm, cs, cn
"""
    a, b, bias, scale, alpha, res = (torch.randn(32, 16), torch.randn(16, 24), torch.randn(24), torch.randn(32),
                                     torch.randn(1), torch.randn(32, 24))
    y, rs, rm, cs, cn = run(prog(text), [a, b, bias, scale, alpha, res], {})
    h = (a.double() @ b.double()).float() * alpha + bias[None, :] + scale[:, None] * res
    assert torch.allclose(y, h, atol=1e-5)
    assert rs.shape == (32,) and torch.allclose(rs, h.sum(1), atol=1e-4)
    assert torch.allclose(rm, h.amax(1), atol=1e-5)
    assert cs.shape == (24,) and torch.allclose(cs, h.relu().sum(0), atol=1e-4)
    assert torch.allclose(cn, h.amin(0), atol=1e-5)


def test_batched_gemm_shared_b_and_batched_reductions():
    text = """input a: f32[3, 8, 16]
input w: f32[16, 8]
kernel k = gemm(a, w^T) { math = f32; store y: f32 = acc; store r: f32 = row_sum(acc); store c: f32 = col_max(acc) }
output y, r, c
"""
    a, w = torch.randn(3, 8, 16), torch.randn(16, 8)
    program = prog(text.replace("w: f32[16, 8]", "w: f32[16, 16]"))
    w = torch.randn(16, 16)
    y, r, c = run(program, [a, w], {})
    ref = a @ w.T
    assert y.shape == (3, 8, 16) and torch.allclose(y, ref, atol=1e-5)
    assert r.shape == (3, 8) and torch.allclose(r, ref.sum(-1), atol=1e-4)
    assert c.shape == (3, 16) and torch.allclose(c, ref.amax(-2), atol=1e-5)


def test_grouped_gemm():
    text = """input a: f32[10, 8]
input b: f32[3, 6, 8]
kernel k = grouped_gemm(a, b^T, group_sizes=(2, 5, 3)) { math = f32; store y: f32 = acc }
output y
"""
    a, b = torch.randn(10, 8), torch.randn(3, 6, 8)
    (y,) = run(prog(text), [a, b], {})
    ref = torch.cat([a[0:2] @ b[0].T, a[2:7] @ b[1].T, a[7:10] @ b[2].T])
    assert torch.allclose(y, ref, atol=1e-5)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_epilogue_view_and_channels_last_output(dims):
    spatial = [7, 6, 5][:dims]
    n, c, k = 2, 4, 8
    shape = ", ".join(str(s) for s in [n, c, *spatial])
    wshape = ", ".join(str(s) for s in [k, c, *([3] * dims)])
    m = n * int(np.prod([(s + 2 - 3) // 2 + 1 for s in spatial]))
    text = f"""input x: f32[{shape}] channels_last
param w: f32[{wshape}] channels_last = "w"
param b: f32[{k}] = "b"
input r: f32[{m}]
kernel c = conv{dims}d(x, w, stride=2, padding=1) {{
  math = tf32
  store y: f32 = relu(acc + b[col]) * r[row]
  store s: f32 = row_sum(acc)
  store t: f32 = col_max(acc)
}}
output y, s, t
""".replace("stride=2, padding=1", "stride=" + ("2" if dims == 1 else "(" + ", ".join(["2"] * dims) + ")")
            + ", padding=" + ("1" if dims == 1 else "(" + ", ".join(["1"] * dims) + ")"))
    x, w, b = torch.randn(n, c, *spatial), torch.randn(k, c, *([3] * dims)), torch.randn(k)
    r = torch.randn(m)
    y, s, t = run(prog(text), [x, r], {"w": w, "b": b})
    conv = getattr(F, f"conv{dims}d")
    acc = conv(round_tf32(x).double(), round_tf32(w).double(), None, 2, 1).float()
    out_spatial = acc.shape[2:]
    ref = torch.relu(acc + b.view(1, k, *([1] * dims))) * r.view(n, 1, *out_spatial)
    assert torch.allclose(y, ref, atol=1e-5)
    assert y.permute(0, *range(2, y.dim()), 1).is_contiguous()  # channels-last output
    assert torch.allclose(s, acc.sum(1).reshape(-1), atol=1e-4)
    assert torch.allclose(t, acc.transpose(0, 1).reshape(k, -1).amax(1), atol=1e-5)


def test_depthwise_and_dilated_conv():
    text = """input x: f32[2, 6, 9, 9] channels_last
param w: f32[12, 1, 3, 3] channels_last = "w"
kernel c = conv2d(x, w, stride=(1, 2), padding=(2, 0), dilation=(2, 1), groups=6) { math = f32; store y: f32 = acc }
output y
"""
    x, w = torch.randn(2, 6, 9, 9), torch.randn(12, 1, 3, 3)
    (y,) = run(prog(text), [x], {"w": w})
    ref = F.conv2d(x.double(), w.double(), None, (1, 2), (2, 0), (2, 1), 6).float()
    assert y.shape == ref.shape and torch.allclose(y, ref, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Runtime


def test_runtime_binds_params_by_key_and_layout():
    program = prog("""input x: f32[4, 8]
param w: f32[16, 8] = "fc.weight"
param cw: f32[16, 8, 3, 3] channels_last = "conv.weight"
param cb: f32[16] = "conv.bias"
kernel k = gemm(x, w^T) { math = f32; store y: f32 = acc }
output y
""")
    model = torch.nn.Module()
    model.fc = torch.nn.Linear(8, 16, bias=False)
    model.conv = torch.nn.Conv2d(8, 16, 3)
    params = bind_params(program, model)
    assert torch.equal(params["w"], model.fc.weight)
    assert params["cw"].permute(0, 2, 3, 1).is_contiguous()
    assert params["cb"].shape == (16,)
    module = load(program, "interpreter", params)
    x = torch.randn(4, 8)
    assert torch.allclose(module(x), x @ model.fc.weight.T, atol=1e-5)
    with pytest.raises(BindError, match="no state_dict key 'fc.weight'"):
        bind_params(program, torch.nn.Linear(8, 16))
    with pytest.raises(ValueError, match="declared \\[4, 8\\]"):
        module(torch.randn(5, 8))


def test_runtime_returns_a_tuple_for_several_outputs_and_runs_torch_steps():
    program = prog("""input x: f32[4, 8]
input w: f32[8, 8]
kernel k = gemm(x, w) { math = f32; store y: f32 = acc }
torch a, b = chunk(y, 2, dim=1)
torch z = softmax(a, dim=1)
output z, b
""")
    module = load(program, "interpreter", {})
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    z, b = module(x, w)
    y = x @ w
    assert torch.allclose(z, torch.softmax(y[:, :4], dim=1), atol=1e-5) and torch.allclose(b, y[:, 4:], atol=1e-5)


def test_unknown_backend():
    with pytest.raises(ValueError, match="unknown backend"):
        load(prog(GEMM.replace("MATH", "f32")), "magic", {})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# The worked examples of docs/language.md


def _hand_written(name: str, model: torch.nn.Module, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Each example written directly in PyTorch with the kernel's precision (tf32 operands, fp32 sums)."""
    t = round_tf32
    with interpreter.exact_fp32():
        if name == "gemm_bias_gelu":
            (x,) = inputs
            return F.gelu(t(x) @ t(model.fc.weight).T + model.fc.bias)
        if name == "batched_gemm":
            a, b = inputs
            return torch.bmm(t(a), t(b)) * 0.5
        if name == "transposed_gemm":
            a, b = inputs
            return a.bfloat16().float().T @ b.bfloat16().float().T
        if name == "conv2d_bias_relu":
            (x,) = inputs
            return torch.relu(F.conv2d(t(x), t(model.conv.weight), model.conv.bias, padding=1))
        if name == "depthwise_conv":
            (x,) = inputs
            return F.conv2d(t(x), t(model.conv.weight), None, stride=2, padding=1, groups=x.shape[1])
        if name == "mlp":
            (x,) = inputs
            h = torch.relu(t(x) @ t(model.fc1.weight).T + model.fc1.bias)
            return t(h) @ t(model.fc2.weight).T + model.fc2.bias
        if name == "gemm_softmax":
            (x,) = inputs
            return torch.softmax((t(x) @ t(model.fc.weight).T + model.fc.bias) * 0.125, dim=1)
    raise KeyError(name)


EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.mcu"))


def test_examples_cover_the_worked_examples():
    assert set(EXAMPLE_NAMES) == {"gemm_bias_gelu", "batched_gemm", "transposed_gemm", "conv2d_bias_relu",
                                  "depthwise_conv", "mlp", "gemm_softmax"}
    docs = (EXAMPLES.parent / "docs" / "language.md").read_text()
    for name in EXAMPLE_NAMES:
        body = (EXAMPLES / f"{name}.mcu").read_text()
        kernel_line = next(line for line in body.splitlines() if line.startswith("kernel"))
        assert kernel_line in docs, f"{name}: its kernel line is not in docs/language.md"


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_parses_checks_and_matches_hand_written_torch(name):
    pytest.importorskip("evals.problems")
    from evals.problems import load_problem

    program, diags = check_text((EXAMPLES / f"{name}.mcu").read_text(), backend=None)
    assert program is not None and [d for d in diags if d.severity == "error"] == [], [d.render() for d in diags]
    problem = load_problem(EXAMPLES / f"{name}.py")
    model = problem.make_model(seed=0)
    inputs = problem.make_inputs(seed=0)
    module = load(program, "interpreter", bind_params(program, model))
    with torch.no_grad():
        out = module(*inputs)
        expected = _hand_written(name, model, inputs)
    assert out.shape == expected.shape
    assert torch.allclose(out, expected, atol=1e-5, rtol=1e-5), (out - expected).abs().max()
    result = compare_with_problem(program, str(EXAMPLES / f"{name}.py"))
    assert result["ok"] and result["math"] == (["bf16"] if name == "transposed_gemm" else ["tf32"])


def test_a_wrong_program_fails_the_comparison():
    pytest.importorskip("evals.problems")
    text = (EXAMPLES / "gemm_bias_gelu.mcu").read_text().replace("gelu(acc + b[col])", "relu(acc + b[col])")
    program, _ = parse(text)
    result = compare_with_problem(program, str(EXAMPLES / "gemm_bias_gelu.py"))
    assert not result["ok"] and result["outputs"][0]["max_abs_error"] > 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gemm_bias_gelu", "conv2d_bias_relu", "mlp"])
def test_interpreter_gives_the_same_result_on_the_gpu(name):
    program, _ = parse((EXAMPLES / f"{name}.mcu").read_text())
    from evals.problems import load_problem

    problem = load_problem(EXAMPLES / f"{name}.py")
    model = problem.make_model(seed=0)
    inputs = problem.make_inputs(seed=0)
    module = load(program, "interpreter", bind_params(program, model))
    with torch.no_grad():
        cpu = module(*inputs)
        gpu = module.to("cuda")(*[x.cuda() for x in inputs])
    # the same rounded operands and fp32 sums: only summation order differs
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-5, rtol=1e-5)


def test_language_reference_names_every_knob_function_and_torch_step():
    from dsl_compiler import ir, torch_steps
    from dsl_compiler.parser import KNOBS, OP_NAMES, ROW_OP_NAMES
    from dsl_compiler.row_ops import ROW_KNOB_VALUES

    docs = (EXAMPLES.parent / "docs" / "language.md").read_text()
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", docs))
    names = (set(KNOBS) | set(OP_NAMES) | set(ir.UnaryFn.__args__) | set(ir.BinaryFn.__args__) - {"add", "sub", "mul", "div"}
             | set(ir.ParamFn.__args__) | set(ir.ReduceFn.__args__) | set(torch_steps.STEPS) | set(ROW_OP_NAMES)
             | set(ROW_KNOB_VALUES))
    missing = sorted(n for n in names if n not in words)
    assert missing == [], f"not in docs/language.md: {missing}"
    assert len(docs.split()) < 1480  # it goes into a prompt verbatim: about 2,350 tokens (row kernels, pools, masks)


def test_min_max_relu_clamp_follow_c_fminf_fmaxf_on_nan():
    text = """input a: f32[2, 2]
input b: f32[2, 2]
input r: f32[2, 2]
kernel k = gemm(a, b) { math = f32; store y: f32 = relu(r); store z: f32 = clamp(r, -1.0, 1.0); store u: f32 = max(r, acc) }
output y, z, u
"""
    a, b = torch.eye(2), torch.full((2, 2), 0.5)
    r = torch.tensor([[float("nan"), -2.0], [3.0, 0.25]])
    y, z, u = run(prog(text), [a, b, r], {})
    assert y.tolist() == [[0.0, 0.0], [3.0, 0.25]]
    assert z.tolist() == [[-1.0, -1.0], [1.0, 0.25]]
    assert u.tolist() == [[0.5, 0.5], [3.0, 0.5]]


def test_to_step_converts_element_types_for_a_bf16_kernel():
    text = """input x: f32[64, 64]
input w: f32[64, 64]
torch xb = to(x, dtype="bf16")
torch wb = to(w, dtype="bf16")
kernel k = gemm(xb, wb) { math = bf16; tile = 128x64x64; store y: bf16 = acc }
torch yf = to(y, dtype="f32")
output yf
"""
    program, diags = check_text(text)
    assert [d for d in diags if d.severity == "error"] == []
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    (y,) = run(program, [x, w], {})
    expected = (x.bfloat16().float() @ w.bfloat16().float()).bfloat16().float()  # same fp32 sums, then bf16
    assert y.dtype == torch.float32 and torch.equal(y, expected)
