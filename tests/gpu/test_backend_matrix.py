"""The CUTLASS backend's GPU matrix: every program of tests/test_backend_programs.py is built, run
kernel by kernel on random non-zero inputs into NaN-poisoned output buffers, and compared with the
reference interpreter. Set MUCUTLASS_GPU_RESULTS to a path to get a JSON row per case."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_backend_programs import MATRIX, program  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

# Relative error bounds (‖out - ref‖ / ‖ref‖) by the narrowest type involved: the interpreter rounds
# operands exactly as the kernel does, so what remains is summation order and transcendental ulps.
TOL = {"f32": 2e-3, "bf16": 2e-2, "f16": 5e-3}
_ROWS: list[dict] = []


@pytest.fixture(scope="session", autouse=True)
def _write_results():
    yield
    path = os.environ.get("MUCUTLASS_GPU_RESULTS")
    if path:
        Path(path).write_text(json.dumps(_ROWS, indent=1))


def _random_inputs(prog, device, seed):
    """Non-zero random tensors for every input and param, scaled so the accumulator is O(1)."""
    import torch

    from dsl_compiler.torch_steps import torch_dtype

    g = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for d in prog.decls:
        t = torch.randn(d.shape, generator=g)
        if len(d.shape) >= 2:  # operands: k^-1/4 each keeps acc ~ N(0, 1)
            t = t / max(1.0, d.shape[-1]) ** 0.25
        t = torch.where(t == 0, torch.full_like(t, 0.5), t)
        out[d.name] = t.to(device=device, dtype=torch_dtype(d.dtype))
    return out


def _rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_kernel_matches_interpreter_and_overwrites_poison(name):
    import torch

    from dsl_compiler import interpreter, torch_steps
    from dsl_compiler.build import build_program
    from dsl_compiler.cutlass_runtime import CutlassExecutor
    from dsl_compiler.ir import Kernel

    prog = program(name)
    res = build_program(prog)
    row = {"case": name, "build_ok": res.ok, "cached": res.cached, "build_s": res.kernel_build_s,
           "diagnostics": [d.message for d in res.diagnostics]}
    _ROWS.append(row)
    assert res.ok, "\n".join(d.render(name) for d in res.diagnostics)
    executor = CutlassExecutor(prog, res.artifacts)
    device = torch.device("cuda")
    worst = 0.0
    for seed in (1, 2):
        tensors = _random_inputs(prog, device, seed)
        env = interpreter.bind_inputs(prog, [tensors[d.name] for d in prog.inputs])
        for d in prog.params:
            env[d.name] = interpreter.as_declared(tensors[d.name], d)
        for step in prog.steps:
            if not isinstance(step, Kernel):
                env.update(torch_steps.run(step, env))
                continue
            ref = interpreter.run_kernel(prog, step, env)
            poisoned = {k: torch.full_like(v, float("nan")) for k, v in ref.items()}  # keeps strides (layout)
            got = executor.run_kernel(prog, step, env, outputs=poisoned)
            torch.cuda.synchronize()
            for store in step.stores:
                out, want = got[store.name], ref[store.name]
                assert out.data_ptr() == poisoned[store.name].data_ptr()
                finite_ref = torch.isfinite(want)
                assert torch.isfinite(out[finite_ref]).all(), f"{name}/{store.name}: unwritten (NaN) elements remain"
                err = _rel_err(out[finite_ref], want[finite_ref])
                worst = max(worst, err)
                math = step.config.math or interpreter.kernel_math(step, env)
                tol = max(TOL["bf16" if "bf16" in (store.dtype, math) else "f16" if "f16" in (store.dtype, math) else "f32"],
                          TOL["f16"] if step.config.accum == "f16" else 0)
                assert err < tol, f"{name}/{store.name}: relative error {err:.2e} over {tol:.0e}"
            env.update(got)  # later kernels read this kernel's CUTLASS outputs
        final = [env[o] for o in prog.outputs]
        want = interpreter.run(prog, [tensors[d.name] for d in prog.inputs], {d.name: tensors[d.name] for d in prog.params})
        for a, b in zip(final, want):
            assert _rel_err(a, b) < 3e-2
    row["rel_err"] = worst
    row["ok"] = True


def test_can_implement_failure_is_a_python_error_with_cutlass_text():
    import torch

    from dsl_compiler.build import build_program
    from dsl_compiler.cutlass_runtime import CutlassError, CutlassExecutor

    prog = program("gemm_bf16_nt_coop")
    res = build_program(prog)
    assert res.ok
    executor = CutlassExecutor(prog, res.artifacts)
    # K = 130: a row of 260 bytes breaks TMA's 16-byte stride rule, so can_implement must refuse.
    env = {"x": torch.randn(256, 130, device="cuda", dtype=torch.bfloat16),
           "w": torch.randn(384, 130, device="cuda", dtype=torch.bfloat16),
           "bias": torch.randn(384, device="cuda", dtype=torch.bfloat16)}
    with pytest.raises(CutlassError, match="can_implement"):
        executor.run_kernel(prog, prog.kernels[0], env)


def test_program_module_and_export_run_the_pipeline(tmp_path):
    import importlib.util

    import torch

    from dsl_compiler import interpreter
    from dsl_compiler.build import build_program
    from dsl_compiler.runtime import CutlassProgramModule
    from dsl_compiler.export import export_model_new

    prog = program("pipeline_mlp")
    res = build_program(prog)
    assert res.ok
    tensors = _random_inputs(prog, torch.device("cuda"), 3)
    params = {d.name: tensors[d.name] for d in prog.params}
    want = interpreter.run(prog, [tensors["x"]], params)[0]
    got = CutlassProgramModule(prog, params, res.artifacts)(tensors["x"])
    assert _rel_err(got, want) < 2e-2

    path = export_model_new(prog, res.artifacts, tmp_path / "model_new.py")
    spec = importlib.util.spec_from_file_location("model_new_gpu", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.ModelNew().cuda()
    sd = {"fc1.weight": params["w1"], "fc1.bias": params["b1"], "fc2.weight": params["w2"], "fc2.bias": params["b2"]}
    model.load_state_dict(sd)
    assert _rel_err(model(tensors["x"]), want) < 2e-2
