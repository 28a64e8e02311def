"""export.export_model_new: a standalone ModelNew file (CPU checks; running it needs the GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from test_backend_programs import program

from dsl_compiler.export import export_model_new, portable_runtime_source

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.nn.functional.gelu(self.fc1(x))), dim=1)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return [256, 512, 128]
'''


def _fake_artifacts(tmp_path, prog):
    arts = {}
    for k in prog.kernels:
        p = tmp_path / "cache" / f"{k.name}.so"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"\x7fELF fake")
        arts[k.name] = str(p)
    return arts


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_model_new_subclasses_model_and_matches_seeded_init(tmp_path):
    prog = program("pipeline_mlp")
    path = export_model_new(prog, _fake_artifacts(tmp_path, prog), tmp_path / "out" / "model_new.py", problem_source=PROBLEM)
    mod = _load(path, "model_new_a")
    torch.manual_seed(0)
    ref = mod.Model(256, 512, 128)
    torch.manual_seed(0)
    new = mod.ModelNew(256, 512, 128)
    assert list(new.state_dict()) == list(ref.state_dict())
    for k, v in ref.state_dict().items():
        assert torch.equal(new.state_dict()[k], v)
    # the libraries travel with the file
    assert (tmp_path / "out" / "model_new_kernels" / "fc1.so").exists()
    assert mod._lib_path("fc1").endswith("model_new_kernels/fc1.so")
    assert [s.get("name") for s in mod.PROGRAM["steps"] if "op" in s] == ["fc1", "fc2"]
    assert [t["role"] for t in mod.KERNELS["fc1"]["abi"]["tensors"]] == ["a", "b", "d", "col"]


def test_model_new_file_is_standalone(tmp_path):
    prog = program("conv2d_bf16_bias_relu")
    path = export_model_new(prog, _fake_artifacts(tmp_path, prog), tmp_path / "m.py", copy_libraries=False)
    text = path.read_text()
    assert "from dsl_compiler" not in text.split("def _torch_step")[0]  # only an optional import for torch steps
    # importable in a fresh interpreter whose path does not contain the project
    code = (f"import importlib.util,sys; sys.path=[p for p in sys.path if 'work/main' not in p]; "
            f"s=importlib.util.spec_from_file_location('m', {str(path)!r}); m=importlib.util.module_from_spec(s); "
            f"s.loader.exec_module(m); net=m.ModelNew(); print(sorted(net.state_dict()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "['conv.bias', 'conv.weight']" in out.stdout


def test_portable_block_is_the_runtime_core():
    src = portable_runtime_source()
    for name in ("def load_library", "def gemm_call_args", "def conv_call_args", "def call_kernel", "class CutlassError"):
        assert name in src
    assert "dsl_compiler" not in src


def test_export_refuses_unbuilt_or_unsupported_programs(tmp_path):
    with pytest.raises(ValueError, match="no built library"):
        export_model_new(program("pipeline_mlp"), {}, tmp_path / "x.py")
    with pytest.raises(ValueError, match="cannot build"):
        export_model_new(program("depthwise"), {}, tmp_path / "y.py")


STEPS_PROGRAM = """program steps
input x: f32[4, 8, 6, 6]
param w: f16[16, 8, 3, 3] channels_last = "conv.weight"
torch xh = to(x, dtype="f16")
torch xc = channels_last(xh)
kernel c = conv2d(xc, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  store y: f32 = acc
}
torch xc2 = channels_last(x, dtype="f16")
torch yc = contiguous(y)
torch yb = batch_norm(yc, eps=0.001)
torch yr = relu(yb)
torch yz = zero_insert(y, stride=(2, 3), output_padding=(1, 0))
torch yf = forward_filter(y)
output yr
"""


def test_exported_torch_steps_without_mucutlass_match_the_whitelist(tmp_path):
    """An exported file run where mucutlass is not installed executes its torch steps by itself: the same
    results as the whitelist's (to, contiguous, batch_norm and channels_last with a dtype differ from torch's
    functions of those names)."""
    from dsl_compiler import torch_steps
    from dsl_compiler.ir import TorchStep
    from dsl_compiler.parser import parse

    prog, diags = parse(STEPS_PROGRAM)
    assert prog is not None, diags
    mod = _load(export_model_new(prog, _fake_artifacts(tmp_path, prog), tmp_path / "m.py", copy_libraries=False), "model_new_steps")
    mod._TORCH_STEPS = None  # as when the import of dsl_compiler fails
    g = torch.Generator().manual_seed(0)
    env = {"x": torch.randn(4, 8, 6, 6, generator=g), "y": torch.randn(4, 16, 6, 6, generator=g)}
    env["y"] = env["y"].contiguous(memory_format=torch.channels_last)
    for i, step in enumerate(mod.PROGRAM["steps"]):
        if "op" in step:
            continue
        got = mod._torch_step(i, step, dict(env))
        want = torch_steps.run(TorchStep.model_validate(step), dict(env))
        for name, t in want.items():
            assert got[name].dtype == t.dtype and got[name].stride() == t.stride(), step["fn"]
            assert torch.equal(got[name], t), step["fn"]
        env.update(want)
