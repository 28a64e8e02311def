"""Row kernels through the build pipeline: the emitted CUDA compiles with nvcc (``nvcc``), and on a GPU every
builtin-ops problem's program runs against PyTorch (``gpu``)."""

from __future__ import annotations

import pytest

from dsl_compiler.build import build_program
from dsl_compiler.checks import check_text
from dsl_compiler.cutlass.emit import emit_program

# every statistic, both paths (contiguous rows, strided segments), both passes, a split, an affine and a tail,
# a per-channel affine (group_norm), F.normalize (a norm, then each element divided by it), scans (a block-wide
# one over contiguous rows, a sequential one per strided column; reverse, exclusive, a vector and a tail)
PROGRAM = '''
input x: f32[16, 512]
input z: bf16[8, 64, 32]
param w: f32[512] = "ln.weight"
param b: f32[512] = "ln.bias"
input v: f16[4, 64, 6, 10]
param gw: f32[64] = "gn.weight"
param gb: f32[64] = "gn.bias"
kernel ln = layer_norm(x, w, b, dim=-1, eps=1e-05) { passes = 1
  store y: f32 = relu(acc) * 2.0 + x }
kernel rms = rms_norm(x, w, dim=-1, eps=1e-06) { passes = 2
  store r: bf16 = acc }
kernel s = sum(y, dim=-1) { split = 2
  store t: f32 = acc }
kernel a = argmax(z, dim=1) { store i: i64 = acc }
kernel sm = softmax(z, dim=1) { store q: bf16 = acc }
kernel lsm = log_softmax(x, dim=-1) { rows_per_block = 4
  store u: f32 = acc }
kernel lse = logsumexp(x, dim=-1) { store l: f32 = acc }
kernel n2 = norm(z, dim=(1, 2), p=2) { store f: f32 = acc }
kernel pr = prod(x, dim=-1) { vector = 1
  store pp: f32 = acc }
kernel gn = group_norm(v, gw, gb, groups=8, eps=1e-05) { store g: f16 = silu(acc) }
kernel inn = instance_norm(v, eps=1e-05) { rows_per_block = 8
  store h: f32 = acc }
kernel nz = normalize(z, dim=1, p=2, eps=1e-12) { store nzv: f32 = acc }
kernel nx = normalize(x, dim=-1, p=1, eps=1e-12) { passes = 1
  store nxv: bf16 = acc * 2.0 }
kernel cs = cumsum(x, dim=-1) { store csv: f32 = acc * 0.5 + x }
kernel cp = cumprod(z, dim=1, reverse=True, exclusive=True) { store cpv: bf16 = acc }
kernel csr = cumsum(v, dim=-1, reverse=True) { vector = 2
  store csrv: f16 = acc }
output y, r, t, i, q, u, l, f, pp, g, h, nzv, nxv, csv, cpv, csrv
'''


def test_every_row_kernel_emits_one_unit_each_with_the_kernel_abi():
    program, diags = check_text(PROGRAM)
    assert program is not None and not diags, diags
    emitted, diags = emit_program(program)
    assert not diags
    assert [e.kernel_name for e in emitted] == [k.name for k in program.row_kernels]
    for e in emitted:
        assert e.abi.op_kind == "row" and e.abi.ints == ("outer", "rows", "inner")
        assert 'extern "C" int mucutlass_run(' in e.source
    assert len({e.namespace for e in emitted}) == len(emitted)  # distinct sources, distinct cache entries


@pytest.mark.nvcc
def test_real_nvcc_compiles_the_row_kernels(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    program, _ = check_text(PROGRAM)
    result = build_program(program)
    assert result.ok, result.diagnostics
    assert set(result.artifacts) >= {k.name for k in program.row_kernels}
    again = build_program(program)
    assert again.cached and again.artifacts == result.artifacts


@pytest.mark.gpu
def test_builtin_ops_programs_match_pytorch_on_the_gpu():
    import torch

    from dsl_compiler import runtime
    from dsl_compiler.frontend import trace_problem
    from evals.problems import load_suite

    for problem in load_suite("builtin-ops"):
        traced = trace_problem(problem)
        assert traced.program is not None, (problem.name, traced.diagnostics)
        assert not traced.program.torch_steps, problem.name
        built = build_program(traced.program)
        assert built.ok, (problem.name, built.diagnostics)
        module = problem.module
        model = module.Model(*getattr(module, "get_init_inputs", lambda: [])()).cuda()
        inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]
        ours = runtime.load(traced.program, "cutlass", runtime.bind_params(traced.program, model), built.artifacts)
        got, want = ours(*inputs), model(*inputs)
        pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]  # (values, indices) of torch.max
        for ours_t, want_t in pairs:
            torch.testing.assert_close(ours_t.to(want_t.dtype), want_t, rtol=problem.tolerance,
                                       atol=problem.tolerance, msg=problem.name)
