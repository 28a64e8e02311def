"""build.build_program: content-hash cache, parallel nvcc, error mapping, toolchain discovery.
A fake nvcc (a shell script) stands in for the real one except in the `nvcc`-marked test."""

from __future__ import annotations

import os
import stat
import textwrap
import time

import pytest
from test_backend_programs import MATRIX, program

from dsl_compiler import build
from dsl_compiler.parser import parse

FAKE_NVCC = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
    out=""; prev=""
    for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
    echo "$@" >> "$(dirname "$0")/calls.log"
    src=""; for a in "$@"; do case "$a" in *.cu) src="$a";; esac; done
    if grep -q "FAIL_ON_CLUSTER" "$src" 2>/dev/null || [ -f "$(dirname "$0")/fail" ]; then
      line=$(grep -n "knob: cluster" "$src" | head -1 | cut -d: -f1)
      echo "$src($line): error: static assertion failed with \\"unsupported cluster shape\\"" >&2
      exit 2
    fi
    echo "start $(date +%s.%N)" >> "$(dirname "$0")/spans.log"
    sleep 0.3
    echo "end $(date +%s.%N)" >> "$(dirname "$0")/spans.log"
    echo built > "$out"
    """)


@pytest.fixture
def fake_toolchain(tmp_path, monkeypatch):
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    return cuda / "bin"


def _calls(bindir):
    log = bindir / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_build_then_cache_hit(fake_toolchain, tmp_path):
    prog = program("pipeline_mlp")
    first = build.build_program(prog)
    assert first.ok and not first.cached and set(first.artifacts) == {"fc1", "fc2"}
    assert len(_calls(fake_toolchain)) == 1  # the program's two kernels in one translation unit
    assert _calls(fake_toolchain)[0].endswith("unit.cu -o unit.so")
    assert first.kernels == 2 and first.cache_hits == 0
    for path in first.artifacts.values():
        assert path.startswith(str(tmp_path / "cache")) and os.path.exists(path)
    flags = _calls(fake_toolchain)[0]
    assert "-gencode=arch=compute_90a,code=sm_90a" in flags and "--expt-relaxed-constexpr" in flags
    assert "cutlass_library/source/include" in flags
    second = build.build_program(prog)
    assert second.ok and second.cached and second.artifacts == first.artifacts
    assert len(_calls(fake_toolchain)) == 1  # nothing rebuilt
    assert all(s == 0.0 for s in second.kernel_build_s.values())
    assert second.cache_hits == 2


def test_a_changed_knob_rebuilds_only_that_kernel(fake_toolchain):
    prog = program("pipeline_mlp")
    build.build_program(prog)
    prog2, _ = parse(MATRIX["pipeline_mlp"].replace("schedule = pingpong", "schedule = cooperative"))
    res = build.build_program(prog2)
    assert res.ok and not res.cached and len(_calls(fake_toolchain)) == 2 and res.cache_hits == 1
    assert _calls(fake_toolchain)[1].endswith("kernel.cu -o kernel.so")  # one kernel: its own unit


def test_builds_run_in_parallel(fake_toolchain, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_KERNELS_PER_UNIT", "1")  # one kernel per unit: units side by side
    progs = [program(n) for n in ("gemm_bf16_nt_coop", "gemm_f16_nt", "gemm_tf32_nt", "bmm_bf16")]
    t0 = time.perf_counter()
    res = [build.build_program(p, jobs=4) for p in progs]
    serial = time.perf_counter() - t0
    assert all(r.ok for r in res) and serial >= 4 * 0.3
    prog = program("pipeline_mlp")
    (fake_toolchain / "calls.log").unlink()
    (fake_toolchain / "spans.log").unlink()
    build.build_program(prog, jobs=2)
    assert len(_calls(fake_toolchain)) == 2  # both were compiled, not found in the cache
    # two kernels at once: the second compile started before the first ended (read from the compiles'
    # own clocks, so a loaded host that starts them late cannot fail it)
    spans = [line.split() for line in (fake_toolchain / "spans.log").read_text().splitlines()]
    starts = [float(t) for kind, t in spans if kind == "start"]
    ends = [float(t) for kind, t in spans if kind == "end"]
    assert len(starts) == len(ends) == 2 and max(starts) < min(ends)


def test_nvcc_error_maps_to_kernel_and_knob_with_log_kept(fake_toolchain):
    (fake_toolchain / "fail").write_text("")
    prog = program("gemm_bf16_nn_pingpong")
    res = build.build_program(prog)
    assert not res.ok and not res.artifacts
    (d,) = res.diagnostics
    assert d.code == "build" and "kernel 'k0'" in d.message and "(cluster)" in d.message
    assert "unsupported cluster shape" in d.message and d.span is not None
    log = d.hint.split("full log: ")[1].rstrip(")")
    assert os.path.exists(log) and "static assertion" in open(log).read()


def test_unsupported_program_returns_diagnostics_without_running_nvcc(fake_toolchain):
    res = build.build_program(program("depthwise"))
    assert not res.ok and res.diagnostics[0].code == "unsupported" and not _calls(fake_toolchain)


def test_missing_nvcc_is_a_clear_diagnostic(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(build.os.path, "isfile", lambda p: False)
    res = build.build_program(program("gemm_bf16_nt_coop"))
    assert not res.ok and res.diagnostics[0].code == "build"
    assert "nvidia-cuda-nvcc" in res.diagnostics[0].message


def test_unknown_target_is_a_diagnostic():
    res = build.build_program(program("gemm_bf16_nt_coop"), target="sm80")
    assert not res.ok and res.diagnostics[0].code == "unsupported"


def test_cache_key_covers_source_flags_and_versions():
    k = build.cache_key("src", ["-O3"], "13.0.88", "4.2.0.0")
    assert k == build.cache_key("src", ["-O3", "-I/some/where"], "13.0.88", "4.2.0.0")
    assert len({k, build.cache_key("src2", ["-O3"], "13.0.88", "4.2.0.0"), build.cache_key("src", ["-O2"], "13.0.88", "4.2.0.0"),
                build.cache_key("src", ["-O3"], "12.9", "4.2.0.0"), build.cache_key("src", ["-O3"], "13.0.88", "4.1")}) == 5


@pytest.mark.nvcc
def test_real_nvcc_compiles_two_kernels(tmp_path, monkeypatch):
    """Compile-only: a bf16 GEMM with a fused epilogue and a conv, with the installed CUTLASS headers."""
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("gemm_bf16_nt_coop", "conv2d_bf16_bias_relu"):
        res = build.build_program(program(name))
        assert res.ok, "\n".join(d.render() for d in res.diagnostics)
        (so,) = res.artifacts.values()
        assert os.path.getsize(so) > 100_000


def test_check_errors_stop_the_build_before_nvcc(fake_toolchain):
    from test_backend_programs import _gemm

    # K = 130 bf16: a 260-byte row breaks TMA's 16-byte rule, which the static checks report
    prog, diags = parse(_gemm("misaligned", "bf16", "x", "w", "  store y: bf16 = acc", "", k=130))
    assert prog is not None, diags
    res = build.build_program(prog)
    assert not res.ok and any(d.code == "alignment" for d in res.diagnostics)
    assert not _calls(fake_toolchain)


def test_a_malformed_program_is_a_diagnostic_not_a_crash(fake_toolchain):
    prog = program("gemm_bf16_nt_coop")
    kernel = prog.kernels[0]
    broken = kernel.model_copy(update={"op": kernel.op.model_copy(update={"a": kernel.op.a.model_copy(update={"name": "nope"})})})
    bad = prog.model_copy(update={"steps": (broken,)})
    res = build.build_program(bad)
    assert not res.ok and res.diagnostics and not _calls(fake_toolchain)
