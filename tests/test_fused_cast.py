"""The input casts of a program as one launch (dsl_compiler.fused_cast): the plan, the runtime's use of it and
its fallback, the estimate's price, the build and the export. The `nvcc` test builds the real library; the `gpu`
test compares it with the torch steps it replaces."""

from __future__ import annotations

import ctypes
import importlib.util

import pytest
import torch
from test_backend_build import fake_toolchain  # noqa: F401 - the fixture

from dsl_compiler import build, cutlass_runtime, fused_cast, interpreter, runtime, torch_steps
from dsl_compiler.export import export_model_new
from dsl_compiler.parser import parse
from dsl_compiler.run_settings import RuntimeOptions
from sol_models.estimate import estimate_program
from sol_models.hardware import get_gpu

PROGRAM = """program casts

input a: f32[64, 32]
input b: f32[32, 48]
input x: f32[2, 8, 4, 4]
input h: f16[64, 32]
param w: f32[48, 16] = "w"

torch a_f16 = to(a, dtype="f16")
torch b_f16 = to(b, dtype="f16")
torch x_cl = channels_last(x, dtype="f16")
torch same = to(h, dtype="f16")
torch w_f16 = to(w, dtype="f16")

kernel mm = gemm(a_f16, b_f16) {
  math = f16
  store y_f16: f16 = acc
}

torch y_f32 = to(y_f16, dtype="f32")

output y_f32, x_cl, same
"""


def _program(text=PROGRAM):
    prog, diags = parse(text)
    assert prog is not None, diags
    return prog


def test_plan_takes_the_casts_of_inputs_only():
    jobs = fused_cast.plan_input_casts(_program())
    assert [(j.src, j.dst, j.dtype, j.relayout) for j in jobs] == [
        ("a", "a_f16", "f16", False), ("b", "b_f16", "f16", False), ("x", "x_cl", "f16", True)]
    # a cast into the input's own type is the same tensor (nothing to move); a param is cast once when bound;
    # a computed tensor is not there at the start
    rest = fused_cast.remaining_steps(_program(), jobs)
    assert [getattr(s, "outputs", (getattr(s, "name", None),))[0] for s in rest] == ["same", "w_f16", "mm", "y_f32"]


def test_plan_takes_a_plain_channels_last_copy_and_leaves_declared_channels_last_inputs():
    text = """program cl
input x: f32[2, 8, 4, 4]
input v: f32[2, 8, 4]
input z: f32[2, 8, 4, 4] channels_last
torch x_cl = channels_last(x)
torch v_cl = channels_last(v)
torch z_cl = channels_last(z, dtype="f16")
output x_cl, v_cl, z_cl
"""
    prog = _program(text)
    jobs = fused_cast.plan_input_casts(prog)
    assert [(j.dst, j.dtype, j.relayout) for j in jobs] == [("x_cl", "f32", True), ("v_cl", "f32", True)]


def test_estimate_prices_the_fused_casts_as_one_launch():
    gpu = get_gpu("h200")
    prog = _program()
    apart, fused = estimate_program(prog, gpu, fused_casts=False), estimate_program(prog, gpu, fused_casts=True)
    assert apart.fused_casts == 0 and fused.fused_casts == 3
    assert apart.t_us - fused.t_us == pytest.approx(2 * gpu.launch_latency_us)
    rows = [r for r in fused.torch_steps if r.reasons == ["one of 3 input copy steps fused into one launch"]]
    assert len(rows) == 3
    one = _program(PROGRAM.replace('torch b_f16 = to(b, dtype="f16")\n', "").replace("gemm(a_f16, b_f16)", "gemm(a_f16, b)")
                   .replace('torch x_cl = channels_last(x, dtype="f16")\n', "").replace("y_f32, x_cl, same", "y_f32"))
    assert estimate_program(one, gpu, fused_casts=True).t_us == estimate_program(one, gpu, fused_casts=False).t_us


def test_estimate_follows_the_setting(monkeypatch):
    gpu = get_gpu("h200")
    monkeypatch.setenv("MUCUTLASS_FUSED_CASTS", "on")
    assert estimate_program(_program(), gpu).fused_casts == 3
    monkeypatch.setenv("MUCUTLASS_FUSED_CASTS", "off")
    assert estimate_program(_program(), gpu).fused_casts == 0


class _Executor:
    """The interpreter's kernels, and a fused cast that does what the plan's steps do (or declines)."""

    def __init__(self, decline=False):
        self.decline = decline
        self.fused_calls: list = []
        self.kernels = 0

    def run_kernel(self, program, kernel, env):
        self.kernels += 1
        return interpreter.run_kernel(program, kernel, env)

    def run_fused_casts(self, jobs, env):
        self.fused_calls.append([j["dst"] for j in jobs])
        if self.decline:
            return None
        return {j["dst"]: _emulated(j, env[j["src"]]) for j in jobs}


def _emulated(job, x):
    """What one job gives, by torch: zero padding at the end of its dims, then the cast / layout copy."""
    if job.get("pad"):
        spec = [a for e in reversed(job["pad"]) for a in (0, e)]
        x = torch.nn.functional.pad(x, spec)
    return torch_steps.channels_last(x, job["dtype"]) if job["relayout"] else x.to(torch_steps.torch_dtype(job["dtype"]))


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(64, 32), torch.randn(32, 48), torch.randn(2, 8, 4, 4), torch.randn(64, 32).half()]


@pytest.mark.parametrize("decline", [False, True])
def test_program_module_runs_the_plan_once_then_the_other_steps(decline, monkeypatch):
    prog = _program()
    params = {"w": torch.randn(48, 16)}
    ex = _Executor(decline)
    ran = []
    real_run = torch_steps.run
    monkeypatch.setattr(torch_steps, "run", lambda step, env, *rest: ran.append(step.outputs[0]) or real_run(step, env, *rest))
    module = runtime.ProgramModule(prog, ex, params, options=RuntimeOptions(fused_casts=True))
    out = module(*_inputs())
    by_module = set(ran)  # the module's steps, not the reference's below
    ref = interpreter.run(prog, _inputs(), params)
    assert all(torch.equal(o, r) for o, r in zip(out, ref))
    assert out[1].dtype == torch.float16 and torch_steps.is_channels_last(out[1])
    assert ex.fused_calls == [["a_f16", "b_f16", "x_cl"]]
    planned = {"a_f16", "b_f16", "x_cl"}
    assert (planned <= by_module) == decline and not (planned & by_module and not decline)  # declined: as written
    assert {"same", "w_f16", "y_f32"} <= by_module


def test_without_the_option_or_on_the_interpreter_nothing_is_fused():
    prog = _program()
    ex = _Executor()
    runtime.ProgramModule(prog, ex, {"w": torch.randn(48, 16)})(*_inputs())
    assert ex.fused_calls == []
    module = runtime.load(prog, "interpreter", {"w": torch.randn(48, 16)}, options=RuntimeOptions(fused_casts=True))
    assert module.cast_jobs == []


def test_run_fused_casts_declines_what_it_cannot_read():
    jobs = [j.as_dict() for j in fused_cast.plan_input_casts(_program())]
    env = dict(zip(("a", "b", "x"), _inputs()))
    # on the CPU (and for a non-contiguous CUDA tensor) the steps run instead; no library is loaded for that
    assert cutlass_runtime.run_fused_casts("/nonexistent/fused.so", jobs, env) is None


def test_geometry_covers_every_element_tile_and_padded_zero():
    plain = {"relayout": False}
    assert cutlass_runtime.cast_geometry(plain, (4096, 4096)) == (0, 1, 4096, 4096, 4096, 4096, 4096 * 4096 // 2048)
    assert cutlass_runtime.cast_geometry(plain, (3, 5))[-1] == 1
    assert cutlass_runtime.cast_geometry(plain, (7,)) == (0, 1, 1, 7, 1, 7, 1)
    # a padded K (last dim) and a padded K of B (rows): the output's elements, zeros included
    assert cutlass_runtime.cast_geometry({"relayout": False, "pad": [0, 3]}, (4096, 2949)) == (
        0, 1, 4096, 2949, 4096, 2952, -(-4096 * 2952 // 2048))
    assert cutlass_runtime.cast_geometry({"relayout": False, "pad": [0, 3, 0]}, (2, 2949, 64))[:6] == (0, 2, 2949, 64, 2952, 64)
    relayout = {"relayout": True}
    assert cutlass_runtime.cast_geometry(relayout, (2, 64, 8, 8)) == (1, 2, 64, 64, 64, 64, 2)
    assert cutlass_runtime.cast_geometry(relayout, (2, 65, 9, 8))[-1] == 2 * 2 * 2
    # few channels: a thread per position; the padded channels count
    assert cutlass_runtime.cast_geometry({"relayout": True, "pad": [0, 1, 0, 0]}, (32, 3, 256, 256)) == (
        2, 32, 3, 65536, 4, 65536, 32 * 65536 // 256)


PADDED = """program padded
input a: f32[64, 37]
input b: f32[37, 48]
input x: f32[2, 3, 8, 8]
input y: f32[2, 6, 8, 8]
input r: f32[64, 37]

torch a_f16 = to(a, dtype="f16")
torch a_f16_pad = pad(a_f16, (0, 3))
torch b_f16 = to(b, dtype="f16")
torch b_f16_pad = pad(b_f16, (0, 0, 0, 3))
torch x_pad = pad(x, (0, 0, 0, 0, 0, 1))
torch x_pad_cl = channels_last(x_pad)
torch y_pad = pad(y, (0, 0, 0, 0, 0, 2))
torch y_pad_cl = channels_last(y_pad, dtype="f16")
torch r_f16 = to(r, dtype="f16")
torch r_pad = pad(r_f16, (1, 3))
torch r_sum = sum(r_f16, dim=1)
output a_f16_pad, b_f16_pad, x_pad_cl, y_pad_cl, r_pad, r_sum
"""


def test_plan_folds_the_pad_into_the_cast_it_feeds_or_follows():
    jobs = {j.dst: j for j in fused_cast.plan_input_casts(_program(PADDED))}
    assert jobs["a_f16_pad"] == fused_cast.CastJob(steps=(0, 1), src="a", dst="a_f16_pad", dtype="f16", relayout=False,
                                                   pad=(0, 3))
    assert jobs["b_f16_pad"].pad == (3, 0) and jobs["b_f16_pad"].steps == (2, 3)
    assert jobs["x_pad_cl"] == fused_cast.CastJob(steps=(4, 5), src="x", dst="x_pad_cl", dtype="f32", relayout=True,
                                                  pad=(0, 1, 0, 0))
    assert jobs["y_pad_cl"].dtype == "f16" and jobs["y_pad_cl"].pad == (0, 2, 0, 0)
    # r_f16 is read by two steps (its pad and a sum): the cast alone; a left pad is not the kernel's
    assert jobs["r_f16"].steps == (8,) and jobs["r_f16"].pad == () and "r_pad" not in jobs


def test_padded_program_runs_the_same_with_the_plan(monkeypatch):
    prog = _program(PADDED)
    torch.manual_seed(0)
    inputs = [torch.randn(64, 37), torch.randn(37, 48), torch.randn(2, 3, 8, 8), torch.randn(2, 6, 8, 8), torch.randn(64, 37)]
    ex = _Executor()
    out = runtime.ProgramModule(prog, ex, {}, options=RuntimeOptions(fused_casts=True))(*inputs)
    ref = interpreter.run(prog, inputs, {})
    assert len(ex.fused_calls) == 1 and len(ex.fused_calls[0]) == 5
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape and o.stride() == r.stride() and torch.equal(o, r)


def test_build_adds_the_library_when_the_setting_is_on(fake_toolchain, monkeypatch):  # noqa: F811
    prog = _program()
    monkeypatch.setenv("MUCUTLASS_FUSED_CASTS", "off")
    assert fused_cast.ARTIFACT not in build.build_program(prog).artifacts
    monkeypatch.setenv("MUCUTLASS_FUSED_CASTS", "on")
    res = build.build_program(prog)
    assert res.ok and res.artifacts[fused_cast.ARTIFACT].endswith("kernel.so")
    assert build.build_fused_cast_library() == type(build.build_fused_cast_library())(res.artifacts[fused_cast.ARTIFACT])


    def refuse(cache_root=None):
        raise fused_cast.FusedCastBuildError("fused-cast library: nvcc failed: error: no sm_90a")

    monkeypatch.setattr(build, "build_fused_cast_library", refuse)  # the kernels built: the casts stay steps
    res = build.build_program(prog)
    assert res.ok and fused_cast.ARTIFACT not in res.artifacts
    (warning,) = [d for d in res.diagnostics if d.severity == "warning" and "fused-cast" in d.message]
    assert "separate torch steps" in warning.hint


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fake_artifacts(tmp_path, prog, fused=True):
    arts = {}
    for name in [k.name for k in prog.kernels] + ([fused_cast.ARTIFACT] if fused else []):
        p = tmp_path / "cache" / f"{abs(hash(name))}.so"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"\x7fELF fake")
        arts[name] = str(p)
    return arts


def test_export_carries_the_plan_the_library_and_the_graph_setting(tmp_path, monkeypatch):
    prog = _program()
    opts = RuntimeOptions(cuda_graph=True, fused_casts=True)
    path = export_model_new(prog, _fake_artifacts(tmp_path, prog), tmp_path / "out" / "m.py", options=opts)
    monkeypatch.delenv("MUCUTLASS_CUDA_GRAPH", raising=False)
    mod = _load(path, "fused_export_a")
    assert [j["dst"] for j in mod.RUNTIME["fused_casts"]] == ["a_f16", "b_f16", "x_cl"]
    assert mod.CUDA_GRAPH and (tmp_path / "out" / "m_kernels" / "fused_cast.so").is_file()
    assert isinstance(mod.ModelNew()._mucutlass_graphs, mod.ProgramGraphs)
    monkeypatch.setenv("MUCUTLASS_CUDA_GRAPH", "off")  # the knob forces it off in the exported file too
    mod = _load(path, "fused_export_b")
    assert not mod.CUDA_GRAPH and mod.ModelNew()._mucutlass_graphs is None
    # without the library among the artifacts, or with the options off, the file runs the steps as before
    plain = export_model_new(prog, _fake_artifacts(tmp_path, prog, fused=False), tmp_path / "p" / "m.py", options=opts)
    assert _load(plain, "fused_export_c").RUNTIME["fused_casts"] == []
    off = export_model_new(prog, _fake_artifacts(tmp_path, prog), tmp_path / "o" / "m.py")
    assert _load(off, "fused_export_d").RUNTIME == {"cuda_graph": False, "fused_casts": []}


@pytest.mark.nvcc
def test_the_library_builds_and_its_job_layout_matches_the_runtime(tmp_path):
    so = build.build_fused_cast_library(tmp_path / "cache")
    assert build.build_fused_cast_library(tmp_path / "cache") == so  # cached
    lib = cutlass_runtime._cast_library(str(so))  # checks the digest and sizeof(MucutlassCastJob)
    assert lib.mucutlass_fused_cast_job_bytes() == ctypes.sizeof(cutlass_runtime._CastJob) == 80
    assert ctypes.sizeof(cutlass_runtime._CastJobs) == 16 * 80 + 8  # the job list, count, padding: a kernel param


@pytest.mark.gpu
def test_one_launch_gives_what_the_steps_give(tmp_path):
    so = str(build.build_fused_cast_library(tmp_path / "cache"))
    torch.manual_seed(0)
    env = {"a": torch.randn(1000, 37, device="cuda") * 1e3, "b": torch.randn(4096, 64, device="cuda"),
           "x": torch.randn(3, 70, 9, 11, device="cuda"), "y": torch.randn(2, 64, 128, 128, device="cuda"),
           "h": torch.randn(5, 7, device="cuda").half(), "v": torch.randn(4, 3, 100, device="cuda")}
    jobs = [dict(src="a", dst="a16", dtype="f16", relayout=False), dict(src="b", dst="b_bf", dtype="bf16", relayout=False),
            dict(src="x", dst="x_cl", dtype="f16", relayout=True), dict(src="y", dst="y_cl", dtype="bf16", relayout=True),
            dict(src="h", dst="h32", dtype="f32", relayout=False), dict(src="v", dst="v_cl", dtype="f32", relayout=True)]
    env["k"], env["c3"] = torch.randn(300, 2949, device="cuda"), torch.randn(4, 3, 33, 35, device="cuda")
    jobs += [dict(src="k", dst="k_pad", dtype="f16", relayout=False, pad=[0, 3]),  # a padded K
             dict(src="k", dst="k_rows", dtype="bf16", relayout=False, pad=[5, 0]),  # a padded K of B
             dict(src="c3", dst="c3_cl", dtype="f32", relayout=True, pad=[0, 1, 0, 0]),  # 3 -> 4 channels
             dict(src="x", dst="x_pad_cl", dtype="f16", relayout=True, pad=[0, 10, 0, 0])]  # 70 -> 80: tiles
    jobs += [dict(src="a", dst=f"a{i}", dtype="bf16", relayout=False) for i in range(10)]  # 20 jobs: two launches
    out = cutlass_runtime.run_fused_casts(so, jobs, env)
    for j in jobs:
        ref = _emulated(j, env[j["src"]])
        got = out[j["dst"]]
        assert got.dtype == ref.dtype and got.stride() == ref.stride() and torch.equal(got, ref), j
    # a non-contiguous input is declined, and the launch is capturable
    assert cutlass_runtime.run_fused_casts(so, jobs[:1], {"a": env["a"].t()}) is None
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = cutlass_runtime.run_fused_casts(so, jobs[:3], env)
    env["a"].mul_(2)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured["a16"], env["a"].half())


def test_a_copy_into_the_channels_slices_fill_stays_a_step():
    from test_language_slices import DENSE

    prog = _program("program dense\n" + DENSE.replace("param g0: f32[16]", 'param g0: f32[16] = "g0"'))
    assert fused_cast.plan_input_casts(prog) == ()  # `torch feat[0:16] = channels_last(x)` writes into feat
    torch.manual_seed(0)
    params = {d.name: torch.randn(d.shape) for d in prog.params}
    x = torch.randn(2, 16, 8, 8)
    out = runtime.ProgramModule(prog, _Executor(), params, options=RuntimeOptions(fused_casts=True))(x)
    assert torch.equal(out, interpreter.run(prog, [x], params)[0])
