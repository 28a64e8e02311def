"""Pool row kernels (max_pool, avg_pool, adaptive_avg_pool over 1-3 spatial dims): output sizes against PyTorch,
the interpreter against torch.nn.functional, located diagnostics for bad parameters, canonical printing, counting,
the emitted CUDA, and the frontend lowering the functional and module pools into them."""

from __future__ import annotations

import random
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from dsl_compiler import interpreter, ir, row_ops, runtime
from dsl_compiler.checks import check_text
from dsl_compiler.parser import parse
from dsl_compiler.printer import format_program


def program(op: str, shape: tuple[int, ...], store: str = "store y: f32 = acc", knobs: str = "") -> str:
    return f"input x: f32[{', '.join(map(str, shape))}]\nkernel k = {op} {{\n{knobs}\n{store}\n}}\noutput y\n"


def checked(text: str) -> ir.Program:
    p, diags = check_text(text)
    assert p is not None and not [d for d in diags if d.severity == "error"], diags
    return p


def first_error(text: str):
    p, diags = check_text(text)
    errors = [d for d in diags if d.severity == "error"]
    assert errors, f"no error for:\n{text}"
    return errors[0]


def _t(values) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


_TORCH_MAX = (F.max_pool1d, F.max_pool2d, F.max_pool3d)
_TORCH_AVG = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)


def _random_params(rng: random.Random, k: int, avg: bool):
    kernel = tuple(rng.randint(1, 4) for _ in range(k))
    stride = tuple(rng.randint(1, 3) for _ in range(k))
    padding = tuple(rng.randint(0, kk // 2) for kk in kernel)
    dilation = (1,) * k if avg else tuple(rng.randint(1, 2) for _ in range(k))
    return kernel, stride, padding, dilation, rng.random() < 0.5


def test_output_size_matches_pytorch_over_many_shapes_and_parameters():
    """PyTorch's formula, ceil_mode's rule (the last window starts inside the input or the left padding) included;
    where PyTorch refuses (output extent < 1), so does the op."""
    rng = random.Random(0)
    agreed = refused = 0
    for trial in range(400):
        k = rng.randint(1, 3)
        avg = trial % 2 == 1
        kernel, stride, padding, dilation, ceil = _random_params(rng, k, avg)
        spatial = tuple(rng.randint(1, 9) for _ in range(k))
        shape = (rng.randint(1, 2), rng.randint(1, 3), *spatial)
        op = ir.RowOp(fn="avg_pool" if avg else "max_pool", x=ir.Operand(name="x"), dim=(), kernel_size=kernel,
                      stride=stride, padding=padding, dilation=() if avg else dilation, ceil_mode=ceil)
        x = torch.zeros(shape)
        try:
            want = (_TORCH_AVG[k - 1](x, kernel, stride, padding, ceil) if avg
                    else _TORCH_MAX[k - 1](x, kernel, stride, padding, dilation, ceil)).shape
        except RuntimeError:
            want = None
        try:
            got = row_ops.output_shape(op, shape)
        except Exception as exc:  # noqa: BLE001
            assert want is None, (op, shape, want, exc)
            refused += 1
            continue
        assert want is not None and got == tuple(want), (op, shape, got, want)
        agreed += 1
    assert agreed > 250 and refused > 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_max_and_avg_pools_match_torch_on_random_inputs_and_round_trip(k):
    """Random parameters (ceil_mode, padding, dilation, count_include_pad, divisor_override) against PyTorch,
    exactly: the interpreter is torch.nn.functional in fp32, the tail applied to the pooled value."""
    rng = random.Random(k)
    done = 0
    while done < 12:
        avg = done % 2 == 1
        kernel, stride, padding, dilation, ceil = _random_params(rng, k, avg)
        spatial = tuple(rng.randint(3, 8) for _ in range(k))
        shape = (2, 3, *spatial)
        include, divisor = rng.random() < 0.5, rng.choice([None, None, 3])
        if avg:
            op = (f"avg_pool(x, kernel_size={_t(kernel)}, stride={_t(stride)}, padding={_t(padding)}, "
                  f"ceil_mode={ceil}, count_include_pad={include}, divisor_override={divisor})")
        else:
            op = (f"max_pool(x, kernel_size={_t(kernel)}, stride={_t(stride)}, padding={_t(padding)}, "
                  f"dilation={_t(dilation)}, ceil_mode={ceil})")
        x = torch.randn(shape)

        def torch_pool():
            if not avg:
                return _TORCH_MAX[k - 1](x, kernel, stride, padding, dilation, ceil)
            if k == 1:  # F.avg_pool1d has no divisor_override: the same pool in 2-D
                return F.avg_pool2d(x.unsqueeze(-2), (1, *kernel), (1, *stride), (0, *padding), ceil, include,
                                    divisor).squeeze(-2)
            return (F.avg_pool2d, F.avg_pool3d)[k - 2](x, kernel, stride, padding, ceil, include, divisor)

        p, diags = check_text(program(op, shape, "store y: f32 = acc * 2.0 - 1.0"))
        if diags:  # what PyTorch refuses, the checks refuse
            assert diags[0].code == "shape-mismatch" and diags[0].span is not None, diags
            with pytest.raises(RuntimeError):
                torch_pool()
            continue
        assert parse(format_program(p))[0] == p
        (y,) = interpreter.run(p, [x], {})
        want = torch_pool()
        assert y.shape == want.shape
        torch.testing.assert_close(y, want * 2.0 - 1.0, rtol=0, atol=0)
        done += 1


@pytest.mark.parametrize("shape,size", [((2, 3, 10), (4,)), ((2, 3, 7, 9), (3, 4)), ((2, 3, 7, 9), (1, 1)),
                                        ((2, 2, 5, 6, 7), (2, 3, 4)), ((3, 7, 9), (2, 5))])
def test_adaptive_avg_pool_matches_torch(shape, size):
    p = checked(program(f"adaptive_avg_pool(x, output_size={_t(size)})", shape, "store y: bf16 = relu(acc)"))
    assert parse(format_program(p))[0] == p
    x = torch.randn(shape)
    (y,) = interpreter.run(p, [x], {})
    want = (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[len(size) - 1](x, size)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, torch.relu(want).to(torch.bfloat16), rtol=0, atol=0)


def test_an_unbatched_input_pools_each_channel():
    p = checked(program("max_pool(x, kernel_size=(2, 2), stride=(2, 2), padding=(1, 1))", (3, 7, 9)))
    x = torch.randn(3, 7, 9)
    torch.testing.assert_close(interpreter.run(p, [x], {})[0], F.max_pool2d(x, 2, 2, 1), rtol=0, atol=0)
    assert row_ops.geometry(p.row_kernels[0].op, (3, 7, 9)) == (3, 63, 1)


def test_canonical_printing_fills_in_the_defaults_and_leaves_pytorchs_flags_out():
    p = checked(program("max_pool(x, kernel_size=(3, 3), padding=1)", (2, 3, 8, 8)))
    assert "max_pool(x, kernel_size=(3, 3), stride=(3, 3), padding=(1, 1), dilation=(1, 1))" in format_program(p)
    p = checked(program("avg_pool(x, kernel_size=(2,), stride=1, count_include_pad=False, divisor_override=None)", (2, 3, 8)))
    assert "avg_pool(x, kernel_size=(2,), stride=(1,), padding=(0,), count_include_pad=False)" in format_program(p)
    assert parse(format_program(p))[0] == p


BAD = [
    ("max_pool(x, kernel_size=(3, 3), padding=(2, 0))", (2, 3, 8, 8), "half its kernel", "padding <= kernel_size // 2"),
    ("max_pool(x, kernel_size=(5, 5), dilation=(3, 3))", (2, 3, 8, 8), "gives [", "every output extent >= 1"),
    ("avg_pool(x, kernel_size=(4, 4))", (2, 3, 3, 8), "gives [", "every output extent >= 1"),
    ("max_pool(x, kernel_size=(2, 2), stride=(2, 2, 2))", (2, 3, 8, 8), "stride has 3 value(s)", "2 value(s)"),
    ("max_pool(x, kernel_size=(2, 2))", (2, 3, 4, 8, 8), "rank-5", "rank 4"),
    ("adaptive_avg_pool(x, output_size=(2, 2, 2))", (3, 8), "rank-2", "rank 5"),
    ("max_pool(x, kernel_size=(2, 2, 2, 2))", (1, 1, 4, 4, 4, 4), "4 spatial dims", "1, 2 or 3 values"),
]


@pytest.mark.parametrize("op,shape,fragment,expected", BAD, ids=[b[0] for b in BAD])
def test_bad_pools_get_a_located_diagnostic_with_what_was_found_and_a_hint(op, shape, fragment, expected):
    d = first_error(program(op, shape))
    assert d.code == "shape-mismatch" and fragment in d.message, d
    assert d.span is not None and d.span.line == 2, d
    assert d.found and expected in (d.expected or "") and d.hint, d


@pytest.mark.parametrize("text,fragment", [
    (program("max_pool(x, kernel_size=2)", (2, 3, 8, 8)), "kernel_size of max_pool must be a tuple"),
    (program("adaptive_avg_pool(x, output_size=1)", (2, 3, 8, 8)), "output_size of adaptive_avg_pool must be a tuple"),
    (program("max_pool(x, stride=(2, 2))", (2, 3, 8, 8)), "needs kernel_size"),
    (program("max_pool(x, kernel_size=(0, 2))", (2, 3, 8, 8)), "must be integers >= 1"),
    (program("max_pool(x, kernel_size=(2, 2), padding=-1)", (2, 3, 8, 8)), "must be integers >= 0"),
    (program("max_pool(x, kernel_size=(2, 2), count_include_pad=False)", (2, 3, 8, 8)), "no option 'count_include_pad'"),
    (program("avg_pool(x, kernel_size=(2, 2), dilation=(2, 2))", (2, 3, 8, 8)), "no option 'dilation'"),
    (program("avg_pool(x, kernel_size=(2, 2), divisor_override=0)", (2, 3, 8, 8)), "divisor_override"),
    (program("avg_pool(x, kernel_size=(2, 2), ceil_mode=1)", (2, 3, 8, 8)), "True or False"),
    (program("adaptive_avg_pool(x, output_size=(0, 2))", (2, 3, 8, 8)), "must be integers >= 1"),
    (program("adaptive_avg_pool(x, dim=1)", (2, 3, 8, 8)), "no option 'dim'"),
])
def test_parser_rejects_bad_pool_parameters_with_a_location(text, fragment):
    p, diags = parse(text)
    assert p is None and diags[0].span is not None and diags[0].span.line == 2
    assert fragment in diags[0].message, diags[0]


def test_a_knob_on_a_pool_is_a_config_error():
    d = first_error(program("max_pool(x, kernel_size=(2, 2))", (2, 3, 8, 8), knobs="vector = 4"))
    assert d.code == "config" and "a pool" in d.message and d.span is not None and d.span.line == 3, d


def test_counting_reads_x_once_writes_y_once_and_counts_each_window():
    from sol_models.counting import count_program
    from sol_models.estimate import best_row_config, estimate_program
    from sol_models.hardware import get_gpu

    gpu = get_gpu("h200")
    x_bytes = 4 * 8 * 32 * 32 * 4
    for op, per_out in (("max_pool(x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1))", 9),  # compares
                        ("avg_pool(x, kernel_size=(2, 2))", 4 + 1)):  # adds and a divide
        p = checked(program(op, (4, 8, 32, 32), "store y: bf16 = acc"))
        n_out = 4 * 8 * 16 * 16
        counted = count_program(p)
        assert counted.bytes_program == x_bytes + n_out * 2
        assert counted.flops_other == per_out * n_out
        estimate = estimate_program(p, gpu).kernels[0]
        assert "memory-bound" in " ".join(estimate.reasons)
        assert estimate.t_us >= (x_bytes + n_out * 2) / gpu.dram_bw_bytes_per_s * 1e6
        assert best_row_config(p, p.row_kernels[0], gpu) == p.row_kernels[0].config  # no knobs
    # adaptive: each window's elements (7 -> 3: windows [0,3) [2,5) [4,7), 9 of them) and a divide per output
    p = checked(program("adaptive_avg_pool(x, output_size=(3,))", (2, 5, 7)))
    assert row_ops.flops(p.row_kernels[0].op, 70, (2, 5, 7)) == 2 * 5 * (9 + 3)


def _emit(text: str):
    from dsl_compiler.cutlass.emit import emit_program

    p = checked(text)
    emitted, diags = emit_program(p)
    assert not diags
    return emitted[0]


def test_the_emitted_pool_walks_a_window_per_output_thread_with_pytorchs_rules():
    e = _emit(program("max_pool(x, kernel_size=(3, 2), stride=(2, 2), padding=(1, 0), dilation=(1, 2), ceil_mode=True)",
                      (2, 3, 9, 11), "store y: f32 = relu(acc) * 2.0"))
    src = e.source
    assert e.abi.op_kind == "row" and e.abi.row_geometry == (6, 99, 1) and e.abi.row_out_shape == (2, 3, 5, 5)
    assert "__global__ void __launch_bounds__(THREADS) mu_pool(" in src and "-INFINITY" in src and "v != v" in src
    for define in ("#define POOL_MAX 1", "#define PK0 1", "#define PK1 3", "#define PK2 2", "#define PDIL2 2",
                   "#define PP1 1", "#define PIN1 9", "#define POUT1 5", "#define POUT2 5"):
        assert define in src, define
    assert "mu_store(P, p, o, value, 0);" in src  # the tail over the pooled value, at the output's index
    avg = _emit(program("avg_pool(x, kernel_size=(3,), padding=(1,), ceil_mode=True, count_include_pad=False, "
                        "divisor_override=7)", (2, 3, 10))).source
    assert "#define POOL_MAX 0" in avg and "#define POOL_COUNT_PAD 0" in avg and "#define POOL_DIVISOR 7" in avg
    assert "min(b2 + PK2, PIN2 + PP2)" in avg  # ceil_mode's windows clipped to the padded input, as PyTorch's
    ada = _emit(program("adaptive_avg_pool(x, output_size=(3, 4))", (2, 3, 7, 9))).source
    assert "#define POOL_ADAPTIVE 1" in ada and "((o1 + 1) * PIN1 + POUT1 - 1) / POUT1" in ada


# The emitted source run on the CPU: CUDA's few words stubbed, the launch a loop over (block, thread), so the
# kernel's own window arithmetic is checked against PyTorch without a GPU.
_HOST_STUBS = """#include <cstdint>
#include <cstdio>
#include <cmath>
#include <algorithm>
#define CUTLASS_HOST_DEVICE inline
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
struct mu_dim3 { unsigned x = 0, y = 0, z = 0; };
static mu_dim3 blockIdx, threadIdx;
typedef void* cudaStream_t;
typedef int cudaError_t;
static const int cudaSuccess = 0;
static cudaError_t cudaGetLastError() { return 0; }
static const char* cudaGetErrorString(int) { return ""; }
using std::max;
using std::min;
"""


def _run_on_host(e, x: torch.Tensor, tmp_path) -> torch.Tensor:
    import ctypes
    import re
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    src = "\n".join(line for line in e.source.splitlines() if not line.startswith("#include"))
    src, launches = re.subn(r"mu_pool<<<(.*?), THREADS, 0, s>>>\(P, p, outer\);",
                            r"for (unsigned bx = 0; bx < \1; ++bx) for (unsigned tx = 0; tx < THREADS; ++tx) "
                            r"{ blockIdx.x = bx; threadIdx.x = tx; mu_pool(P, p, outer); }", src)
    assert launches == 1
    cpp, lib = tmp_path / f"{e.namespace}.cpp", tmp_path / f"{e.namespace}.so"  # a loaded library is never rewritten
    cpp.write_text(_HOST_STUBS + src)
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(lib), str(cpp)], check=True)
    run = ctypes.CDLL(str(lib)).mucutlass_run
    y = torch.empty(e.abi.row_out_shape)
    assert [t.role for t in e.abi.tensors] == ["x", "store"]
    ptrs = (ctypes.c_void_p * 2)(x.data_ptr(), y.data_ptr())
    ints = (ctypes.c_int64 * 3)(*e.abi.row_geometry)
    scalars = (ctypes.c_float * max(1, len(e.abi.scalars)))(*e.abi.scalars)
    msg = ctypes.create_string_buffer(256)
    assert run(ptrs, ints, scalars, None, ctypes.c_size_t(0), None, msg, 256) == 0, msg.value
    return y


HOST_CASES = [
    ("max_pool(x, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), dilation=(1, 2), ceil_mode=True)", (2, 3, 9, 10),
     lambda x: F.max_pool2d(x, (3, 2), 2, 1, (1, 2), True)),
    ("max_pool(x, kernel_size=(2, 3, 2), stride=(1, 2, 2), padding=(1, 1, 0))", (2, 2, 4, 7, 5),
     lambda x: F.max_pool3d(x, (2, 3, 2), (1, 2, 2), (1, 1, 0))),
    ("avg_pool(x, kernel_size=(4,), stride=(3,), padding=(2,), ceil_mode=True)", (2, 3, 11),
     lambda x: F.avg_pool1d(x, 4, 3, 2, True, True)),
    ("avg_pool(x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True, count_include_pad=False)",
     (2, 3, 8, 9), lambda x: F.avg_pool2d(x, 3, 2, 1, True, False)),
    ("avg_pool(x, kernel_size=(2, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1), divisor_override=5)", (2, 2, 4, 5, 7),
     lambda x: F.avg_pool3d(x, (2, 2, 3), (2, 1, 2), (1, 0, 1), divisor_override=5)),
    ("adaptive_avg_pool(x, output_size=(3, 4))", (2, 3, 7, 9), lambda x: F.adaptive_avg_pool2d(x, (3, 4))),
    ("adaptive_avg_pool(x, output_size=(2, 3, 5))", (3, 5, 7, 9), lambda x: F.adaptive_avg_pool3d(x, (2, 3, 5))),
]


@pytest.mark.parametrize("op,shape,ref", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_the_emitted_pool_run_on_the_host_matches_pytorch(op, shape, ref, tmp_path):
    e = _emit(program(op, shape, "store y: f32 = relu(acc) * 2.0 + 1.0"))
    torch.manual_seed(0)
    x = torch.randn(shape)
    y = _run_on_host(e, x, tmp_path)
    torch.testing.assert_close(y, torch.relu(ref(x)) * 2.0 + 1.0, rtol=1e-6, atol=1e-6)
    if op.startswith("max_pool"):  # PyTorch's max takes a NaN in its window
        x.view(-1)[5] = float("nan")
        y = _run_on_host(_emit(program(op, shape)), x, tmp_path)
        assert y.isnan().any()
        torch.testing.assert_close(y, ref(x), rtol=0, atol=0, equal_nan=True)


@pytest.mark.nvcc
def test_real_nvcc_compiles_the_pool_kernels(tmp_path, monkeypatch):
    from dsl_compiler.build import build_program

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    p = checked("""
input x: f32[2, 3, 9, 11]
input z: bf16[2, 4, 5, 6, 7]
input u: f16[3, 10]
kernel mp = max_pool(x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(1, 2), ceil_mode=True) { store y: f32 = relu(acc) * 2.0 }
kernel ap = avg_pool(z, kernel_size=(2, 3, 3), stride=(2, 2, 2), padding=(1, 1, 0), count_include_pad=False) { store a: bf16 = acc }
kernel ad = adaptive_avg_pool(u, output_size=(4,)) { store b: f32 = acc }
output y, a, b
""")
    result = build_program(p)
    assert result.ok, result.diagnostics


# ---------------------------------------------------------------------------------------------
# The frontend


def _problem(model_cls, x):
    return types.SimpleNamespace(Model=model_cls, get_inputs=lambda: [x], get_init_inputs=lambda: [])


def test_a_conv_then_max_pool_and_adaptive_avg_pool_modules_become_pool_row_kernels_matching_the_model():
    from dsl_compiler.frontend import trace_problem

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)
            self.pool = nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
            self.adapt = nn.AdaptiveAvgPool2d((2, 3))
            self.gap = nn.AdaptiveAvgPool2d((1, 1))

        def forward(self, x):
            y = self.pool(torch.relu(self.conv(x)))
            return torch.relu(self.adapt(y)) * 2.0, self.gap(y)

    torch.manual_seed(0)
    x = torch.randn(2, 4, 15, 15)
    result = trace_problem(_problem(Model, x))
    prog = result.program
    assert prog is not None, result.diagnostics
    assert all(s.fn == "channels_last" for s in prog.torch_steps), prog
    pool, adapt, gap = prog.row_kernels
    assert (pool.op.fn, pool.op.kernel_size, pool.op.stride, pool.op.padding, pool.op.ceil_mode) == \
        ("max_pool", (3, 3), (2, 2), (1, 1), True)
    assert adapt.op.fn == "adaptive_avg_pool" and adapt.op.output_size == (2, 3)
    assert isinstance(adapt.stores[0].expr, ir.Binary)  # relu(acc) * 2.0 fused into the tail
    # a global average pool is the mean over the spatial dims (the reduction's CTA per plane)
    assert (gap.op.fn, gap.op.dim, gap.op.keepdim) == ("mean", (2, 3), True)
    rows = {r.op: r for r in result.coverage}
    assert rows["pool"].placement == rows["adapt"].placement == rows["gap"].placement == "kernel"
    model = Model()
    got = interpreter.run(prog, [x], runtime.bind_params(prog, model))
    for g, w in zip(got, model(x), strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-3)  # the conv runs in tf32


FUNCTIONAL = [
    ("max_pool1d", lambda x: F.max_pool1d(x.flatten(2), 3, 2, 1, ceil_mode=True)),
    ("max_pool2d dilation", lambda x: F.max_pool2d(x, (2, 3), stride=1, padding=(1, 1), dilation=2)),
    ("max_pool3d", lambda x: F.max_pool3d(x.unsqueeze(1), 2)),
    ("avg_pool1d", lambda x: F.avg_pool1d(x.flatten(2), 4, 3, 2, True, False)),
    ("avg_pool2d divisor", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=4)),
    ("avg_pool2d module", lambda x: nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False)(x)),
    ("avg_pool3d", lambda x: F.avg_pool3d(x.unsqueeze(1), (2, 2, 3), padding=(1, 0, 1))),
    ("adaptive_avg_pool1d", lambda x: F.adaptive_avg_pool1d(x.flatten(2), 5)),
    ("adaptive_avg_pool2d none", lambda x: F.adaptive_avg_pool2d(x, (None, 3))),
    ("adaptive_avg_pool3d module", lambda x: nn.AdaptiveAvgPool3d(2)(x.unsqueeze(1))),
    ("global adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, 1)),
]


@pytest.mark.parametrize("name,forward", FUNCTIONAL, ids=[f[0] for f in FUNCTIONAL])
def test_functional_and_module_pools_become_pool_kernels_that_match_pytorch(name, forward):
    from dsl_compiler.frontend import trace_problem

    class Model(nn.Module):
        def forward(self, x):
            return forward(x)

    torch.manual_seed(0)
    x = torch.randn(2, 6, 7, 9)
    prog = trace_problem(_problem(Model, x)).program
    assert prog is not None
    (kernel,) = prog.row_kernels
    assert row_ops.is_pool(kernel.op) or (name.startswith("global") and kernel.op.fn == "mean"), prog
    assert all(s.fn in ("reshape", "flatten", "unsqueeze") for s in prog.torch_steps), prog.torch_steps
    (got,) = interpreter.run(prog, [x], {})
    exact = 0 if row_ops.is_pool(kernel.op) else 1e-6  # a mean sums in its own order
    torch.testing.assert_close(got, forward(x), rtol=exact, atol=exact)


def test_max_pool_with_indices_and_adaptive_max_pool_stay_as_before():
    """No index form, and no adaptive max pool: the frontend keeps its own handling of them."""
    from dsl_compiler.frontend import trace_problem

    class Model(nn.Module):
        def forward(self, x):
            return F.adaptive_max_pool2d(x, 2)

    x = torch.randn(2, 6, 7, 9)
    result = trace_problem(_problem(Model, x))
    assert result.program is not None and not result.program.row_kernels
    assert all(r.reason for r in result.coverage if r.placement == "torch_step")
    step = ir.TorchStep(fn="max_pool2d", outputs=("y",), args=(ir.TensorArg(name="x"),),
                        kwargs=(ir.Kwarg(key="kernel_size", value=2), ir.Kwarg(key="return_indices", value=True)))
    from dsl_compiler.frontend.passes.row_kernels import row_op_of
    from dsl_compiler.tensor_types import TensorType

    types_ = {"x": TensorType(dtype="f32", shape=(2, 6, 7, 9), layout="contiguous")}
    assert row_op_of(step, types_) is None
    assert row_op_of(step.model_copy(update={"kwargs": step.kwargs[:1]}), types_) is not None
    bad = step.model_copy(update={"kwargs": (ir.Kwarg(key="kernel_size", value=3), ir.Kwarg(key="padding", value=2))})
    assert row_op_of(bad, types_) is None  # PyTorch refuses padding > kernel // 2: the step stays to say so


def test_the_language_reference_states_the_pool_syntax_and_its_checks():
    import re
    from pathlib import Path

    doc = re.sub(r"\s+", " ", (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text())
    for fragment in ("`max_pool(x, kernel_size=(2, 2), stride=, padding=, dilation=, ceil_mode=)`",
                     "`adaptive_avg_pool(x, output_size=(1, 1))`", "count_include_pad=, divisor_override=",
                     "padding <= kernel_size // 2", "(stride: kernel_size)"):
        assert fragment in doc, fragment
    # its examples, as written, check
    checked(program("max_pool(x, kernel_size=(2, 2))", (2, 3, 8, 8)))
    checked(program("adaptive_avg_pool(x, output_size=(1, 1))", (3, 8, 8)))
