"""The cuda variants: a model's ModelNew module read out of its reply, checked, built in a child
process by content hash, then judged by the real harness (on the CPU here) through the whole graph.

On a machine without a GPU, the candidates that must run are a C++ CPU extension (load_inline with
cpp_sources: a real build, about a minute on a small machine) and plain-PyTorch modules; a module with
CUDA kernels fails its attempt with one line saying a GPU is needed."""

from __future__ import annotations

import shutil

import pytest
from langchain_core.messages import AIMessage

from evals import cuda_candidates as cc
from evals.judge.client import HarnessSettings
from evals.problems import SUITES_DIR
from graph.context import RunContext, Services
from graph.runner import run_optimize
from nodes.playback import PlaybackTier
from nodes.tiers import ChatTier, TierSpec, extract_python
from test_graph_loop import RecordingChat

PROBLEM = SUITES_DIR / "smoke" / "02_linear_relu_tiny.py"  # Linear(32 -> 64) + ReLU, batch 16

HEADER = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline
'''
# A real custom kernel on the CPU: ReLU of the Linear's output as a C++ extension.
CPP_RELU = r'''
torch::Tensor relu_out(torch::Tensor y) {
    auto out = torch::empty_like(y);
    const float* src = y.data_ptr<float>();
    float* dst = out.data_ptr<float>();
    for (long i = 0; i < y.numel(); ++i) dst[i] = src[i] > 0.f ? src[i] : 0.f;
    return out;
}
'''
CORRECT = HEADER + f'''
relu_cpp = r"""{CPP_RELU}"""
ext = load_inline(name="relu_out", cpp_sources=relu_cpp, functions=["relu_out"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.relu_out(self.fc(x).contiguous())
'''
NOT_COMPILING = CORRECT.replace("auto out = torch::empty_like(y);", "auto out = torch::empty_like(y)")
WRONG = HEADER + '''

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 1.05
'''
CHEATING = HEADER + '''
_CACHE = {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        if "out" not in _CACHE:  # computed once, then replayed whatever the input
            _CACHE["out"] = torch.relu(self.fc(x))
        return _CACHE["out"].clone()
'''
CUDA_KERNEL = HEADER + '''
src = "__global__ void k(float* y) {}"
ext = load_inline(name="k", cpp_sources="void k();", cuda_sources=src, functions=["k"])


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def python_reply(source: str, prose: str = "Here is the module.") -> AIMessage:
    return AIMessage(content=f"{prose}\n```python\n{source}```\n",
                     usage_metadata={"input_tokens": 900, "output_tokens": 300, "total_tokens": 1200},
                     response_metadata={"model_name": "fake-model"})


@pytest.fixture()
def ext_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_CUDA_EXT_DIR", str(tmp_path / "ext"))
    return tmp_path / "ext"


# -- reading and preparing a module -------------------------------------------------------------


@pytest.mark.parametrize("reply, expected", [
    (f"Sure.\n```python\n{WRONG}```", WRONG),
    (f"```py\n{WRONG}```\nThat is all.", WRONG),
    (f"First the helper:\n```python\nimport torch\n```\nthen:\n```python\n{WRONG}```", WRONG),  # the one with ModelNew
    (f"```\n{WRONG}```", WRONG),  # the only block, untagged
    (WRONG, WRONG),  # no fence at all, but a module defining ModelNew
])
def test_extract_python(reply, expected):
    assert extract_python(reply) == (expected.strip() + "\n", None)


@pytest.mark.parametrize("reply, message", [
    ("", "the reply was empty"),
    ("I would use shared memory tiles.", "the reply had no code"),
    ("```python\nimport torch\n```\n```python\nx = 1\n```", "no ```python block defines class ModelNew"),
    ("```cpp\nint a;\n```\n```c\nint b;\n```", "none tagged python"),
])
def test_extract_python_failures(reply, message):
    text, error = extract_python(reply)
    assert text is None and message in error


def test_check_source_gives_located_errors():
    assert cc.check_source(WRONG) == []
    [err] = cc.check_source("import torch\nclass ModelNew(nn.Module:\n    pass\n")
    assert err.startswith("model_new.py:2:") and "error[syntax]" in err
    assert "no top-level class ModelNew" in cc.check_source("import torch\nclass Model: pass\n")[0]


def test_prepare_binds_each_load_inline_to_a_content_hashed_build(tmp_path):
    a = cc.prepare(CORRECT, tmp_path)
    again = cc.prepare(CORRECT, tmp_path)
    other = cc.prepare(CORRECT.replace("0.f ? src[i]", "0.0f ? src[i]"), tmp_path)
    assert a.extensions == 1 and a.source == again.source and a.digest == again.digest
    assert other.digest != a.digest and other.build_dir != a.build_dir
    assert f"'relu_out') + '_{a.digest[:12]}_0'" in a.source
    assert f"build_directory='{a.build_dir / '0'}'" in a.source
    compile(a.source, "prepared", "exec")  # still a valid module
    plain = cc.prepare(WRONG, tmp_path)
    assert plain.extensions == 0 and plain.source == WRONG  # nothing to bind: judged as written


def test_cuda_kernels_without_a_gpu_fail_with_one_line(tmp_path):
    outcome = cc.build(cc.prepare(CUDA_KERNEL, tmp_path))
    assert not outcome.ok and "\n" not in outcome.reason
    assert outcome.reason.startswith("the cuda variant needs a CUDA GPU: this ModelNew brings CUDA kernels and no "
                                     "CUDA GPU is visible to PyTorch here")


# -- the whole graph ------------------------------------------------------------------------------


def cpu_services() -> Services:
    return Services(harness_settings=HarnessSettings(device="cpu", n_input_sets=2, watchdog_s=60))


@pytest.mark.skipif(not (shutil.which("c++") and shutil.which("ninja")), reason="needs a C++ compiler and ninja")
def test_cuda_variant_through_the_graph_on_the_cpu(tmp_path, ext_dir):
    chat = RecordingChat(messages=iter([python_reply(s) for s in (NOT_COMPILING, WRONG, CHEATING, CORRECT)]), seen=[])
    services = cpu_services()
    ctx = RunContext(tier="fake", policy="fixed", variant="cuda", max_attempts=4, backend="interpreter",
                     tier_impl=ChatTier(chat, TierSpec(name="fake", model="fake-model")), services=services)
    try:
        summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    finally:
        services.close()
    a = summary.attempts
    assert summary.variant == "cuda" and len(a) == 4
    # KernelBench's prompt: one worked example, a ```python answer, no SOL report (cuda is not SOL-guided)
    system, user = chat.seen[0]
    assert "load_inline" in system and "class ModelNew" in system and "```python" in user
    assert "Speed of light" not in user and "t_SOL" not in user
    # 1: the compiler's error reaches the model, located in its source
    assert not a[0].compile_ok and a[0].failure_reason.startswith("build: main.cpp:")
    assert any("error: expected" in d.message for d in a[0].diagnostics)
    assert "error: expected" in chat.seen[1][1] and "Errors of the last attempt" in chat.seen[1][1]
    # 2: a wrong module is caught by the judge, and the reason goes back
    assert a[1].compile_ok and not a[1].correct and a[1].failure_reason.startswith("validate:")
    assert "wrong result" in chat.seen[2][1]
    # 3: the cheat (one output replayed for every input) is caught
    assert not a[2].correct and "input" in a[2].failure_reason, a[2].failure_reason
    # 4: the real extension is built here, loaded by the judge from its cache, and correct; a CPU has no timing
    assert a[3].compile_ok and a[3].correct and a[3].build_s > 0
    assert a[3].reached == "validate" and "no GPU" in a[3].failure_reason
    # its GEMM is nn.Linear (ATen), only the ReLU is its own kernel: by work attribution it is PyTorch-only
    assert [f for f in a[3].flags if f.startswith("pytorch_only")]
    built = list(ext_dir.glob("*/built.ok"))
    assert len(built) == 1  # only the compiling module left a build; the failed one left its log
    assert len(list(ext_dir.glob("*/build.log"))) == 2


def test_playback_of_py_files_in_the_cuda_variant(tmp_path, ext_dir):
    files = tmp_path / "modules"
    files.mkdir()
    (files / "01_wrong.py").write_text(WRONG)
    (files / "02_cheat.py").write_text(CHEATING)
    (files / "01_unused.mcu").write_text("program p\n")  # a mixed folder: the cuda variant plays the .py files
    tier = PlaybackTier(files)
    assert tier.languages == ("mcu", "python")
    services = cpu_services()
    ctx = RunContext(tier="playback", policy="fixed", variant="cuda", max_attempts=3, backend="interpreter",
                     tier_impl=tier, services=services)
    try:
        summary = run_optimize(PROBLEM, ctx, tmp_path / "run")
    finally:
        services.close()
    assert [a.program_text for a in summary.attempts] == [WRONG, CHEATING, CHEATING]
    assert all(not a.correct for a in summary.attempts) and summary.best_index is None


def test_the_benchmark_candidates_are_modules_with_cuda_kernels(tmp_path):
    """benchmarks/cuda_candidates: each defines ModelNew, binds its load_inline by content hash, and on a
    machine without a GPU stops at the build with the one-line reason (the benchmark runs on an H200)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("bench_variants", root / "benchmarks" / "bench_variants.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for name, problem in bench.PLAYBACK:
        source = (bench.CANDIDATES / name).read_text()
        assert cc.check_source(source) == [] and cc.uses_cuda(source)
        assert (SUITES_DIR / "builtin" / f"{problem}.py").is_file()
        assert cc.prepare(source, tmp_path).extensions == 1
    assert bench.main(["--out", str(tmp_path / "out")]) == 1  # no GPU here: one line, no files
    assert not (tmp_path / "out").exists()
